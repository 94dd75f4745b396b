# Quantized KV caches (issue #39): type_k / type_v as llama.cpp's
# --cache-type-k / --cache-type-v. The keys and values are rounded to the
# type as llama.cpp rounds them, so the logits are llama.cpp's with the same
# types (t/data/reference/VARIANT/kv-*.MODEL.fa-*.jsonl: the first 4 parity prompts, from
# bench/make-reference --set kv-q8_0 --set kv-q4_0 --set kv-q8_0-k); a
# position takes 17/32 of its f16 bytes with q8_0; what llama.cpp refuses is
# refused with a message.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(model_path croaks_like @TEST_MODELS);
use LughTestInference qw(reference_cases check_reference_case);
use Lugh;

my @models = grep { model_path($_) } @TEST_MODELS;
plan skip_all => 'no test model (perl t/fetch-models)' unless @models;
my $own = Lugh::cpu_features()->{variant};
my $dir = tempdir(CLEANUP => 1);

# set => [type_k, type_v, flash attention settings]
my %SETS = (
    'kv-q8_0'   => [ 'q8_0', 'q8_0', ['on'] ],
    'kv-q4_0'   => [ 'q4_0', 'q4_0', ['on'] ],
    'kv-q8_0-k' => [ 'q8_0', 'f16', [ 'on', 'off' ] ],
);

for my $name (@models) {
    my $model = Lugh::Model->new(model => model_path($name));
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    for my $set (sort keys %SETS) {
        my ($type_k, $type_v, $fas) = @{ $SETS{$set} };
        for my $fa (@$fas) {
            my @cases = reference_cases($set, $name, $fa, $own);
            if (!@cases) {
                diag("$set $name fa-$fa: no reference for this build's kernel variant ($own)");
                next;
            }
            my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 2,
                flash_attn => $fa eq 'on' ? 1 : 0, type_k => $type_k, type_v => $type_v);
            is($inference->type_k . '/' . $inference->type_v, "$type_k/$type_v", "$set $name: the types in effect");
            my $worst = 0;
            for my $case (@cases) {
                (my $short = substr($case->{prompt}, 0, 20)) =~ s/\n/\\n/g;
                my $diff = check_reference_case($inference, $tokenizer, $case, "$set $name fa-$fa '$short'", 0.05, 16);
                $worst = $diff if $diff > $worst;
            }
            diag(sprintf "%-10s %-28s fa-%-3s: worst top-20 logit difference %.5f", $set, $name, $fa, $worst);
        }
    }
}

my $model = Lugh::Model->new(model => model_path($models[0]));
my @prompt = (1 .. 40);

subtest 'a position takes 17/32 of its f16 bytes with q8_0, 9/32 with q4_0' => sub {
    my %bytes;
    for my $type (qw(f16 q8_0 q4_0)) {
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, flash_attn => 1,
            type_k => $type, type_v => $type);
        my ($short, $long) = map { $inference->create_kv_cache } 1 .. 2;
        $inference->forward(tokens => [ @prompt[ 0 .. 9 ] ], cache => $short);
        $inference->forward(tokens => \@prompt, cache => $long);
        $short->save("$dir/short.kv");
        $long->save("$dir/long.kv");
        # the saved cells: 30 positions more in the long one (4 bytes each their token id)
        $bytes{$type} = ((-s "$dir/long.kv") - (-s "$dir/short.kv")) / 30 - 4;
    }
    is($bytes{q8_0} / $bytes{f16}, 17 / 32, "q8_0: $bytes{q8_0} bytes a position, f16 $bytes{f16}");
    is($bytes{q4_0} / $bytes{f16}, 9 / 32, "q4_0: $bytes{q4_0} bytes a position");
};

subtest 'a saved cache loads only with its types' => sub {
    my $q8 = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, flash_attn => 1,
        type_k => 'q8_0', type_v => 'q8_0');
    my $cache = $q8->create_kv_cache;
    my $reply = $q8->generate([ @prompt[ 0 .. 9 ] ], greedy => 1, max_tokens => 4, cache => $cache);
    $cache->save("$dir/q8.kv");
    my $loaded = Lugh::KVCache->load("$dir/q8.kv", inference => $q8);
    my @next = (@prompt[ 0 .. 9 ], @$reply, 50, 51);
    is_deeply(scalar $q8->generate(\@next, greedy => 1, max_tokens => 6, cache => $loaded),
        scalar $q8->generate(\@next, greedy => 1, max_tokens => 6, cache => $cache), 'it continues as the saved one');
    my $f16 = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, flash_attn => 1);
    croaks_like(sub { Lugh::KVCache->load("$dir/q8.kv", inference => $f16) },
        qr/it stores its keys as q8_0, and this session stores them as f16 \(load it into a session with type_k => 'q8_0'\)/,
        'into an f16 session: croaks, naming the types');
};

subtest 'what llama.cpp refuses' => sub {
    croaks_like(sub { Lugh::Inference->new(model => $model, flash_attn => 0, type_v => 'q8_0') },
        qr/type_v q8_0 \(a quantized V cache\) needs flash attention/, 'a quantized V without flash attention');
    croaks_like(sub { Lugh::Inference->new(model => $model, type_k => 'q3_k') },
        qr/type_k must be one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q3_k'/, 'an unknown type');
    croaks_like(sub { Lugh::Inference->new(model => $model, type_v => [1]) },
        qr/type_v/, 'not a string');
    my $auto = Lugh::Inference->new(model => $model, n_ctx => 64, n_threads => 2, type_v => 'Q8_0');
    is($auto->flash_attn, 1, "flash_attn 'auto' turns it on for a quantized V");
    is(scalar @{ $auto->generate([ 1, 2, 3 ], greedy => 1, max_tokens => 2) }, 2, 'and it generates');
};

done_testing;
