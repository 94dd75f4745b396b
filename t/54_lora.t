use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Spec;
use JSON::PP ();
use lib 't/lib';
use LughTest qw(model_path croaks_like lora_adapters @LORA_MODELS);
use LughTestInference qw(run_parity_set max_abs_diff argmax);
use Lugh;

# LoRA adapters against llama.cpp b11434 with the same adapter and scale
# (bench/make-reference, set lora: the parity prompts, `--lora ADAPTER.gguf
# --lora-scale 0.75`). The adapters are t/make-lora-adapters' random ones
# (rank 8, alpha 16, every projection of every layer; Qwen's also the token
# embeddings), made once into the model directory.
my %adapters;
for my $name (@LORA_MODELS) {
    my $a = lora_adapters($name);
    plan skip_all => $a unless ref $a;
    $adapters{$name} = $a;
}

my $checked = run_parity_set(
    set       => 'lora',
    models    => \@LORA_MODELS,
    tolerance => 0.05,
    greedy    => 16,
    call      => sub {
        my ($name, $model) = @_;
        return (lora => [ Lugh::LoRA->new(adapter => $adapters{$name}{gguf}, model => $model), 0.75 ]);
    },
);
diag("lora: $checked cases checked");

# Two adapters (here the same one twice, at 0.5 and 0.25), as llama.cpp
# applies several: --lora A --lora-scale 0.5 --lora A --lora-scale 0.25.
$checked = run_parity_set(
    set       => 'lora-two',
    models    => \@LORA_MODELS,
    tolerance => 0.05,
    greedy    => 16,
    call      => sub {
        my ($name, $model) = @_;
        my @two = map { Lugh::LoRA->new(adapter => $adapters{$name}{gguf}, model => $model) } 1, 2;
        return (lora => [ [ $two[0], 0.5 ], [ $two[1], 0.25 ] ]);
    },
);
diag("lora-two: $checked cases checked");

my $smol  = Lugh::Model->new(model => model_path('smollm2-135m-q4_1'));
my $qwen  = Lugh::Model->new(model => model_path('qwen2.5-coder-0.5b-q4_k_m'));
my @tokens = (504, 3575, 282, 4649, 314, 1604, 3987, 46477, 24, 94, 727);

for my $case ([ smollm2 => $smol, 'smollm2-135m-q4_1' ], [ qwen => $qwen, 'qwen2.5-coder-0.5b-q4_k_m' ]) {
    my ($short, $model, $name) = @$case;
    my $inf  = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2);
    my $gguf = Lugh::LoRA->new(adapter => $adapters{$name}{gguf}, model => $model);
    my $peft = Lugh::LoRA->new(file => $adapters{$name}{peft}, model => $model);
    my $bf16 = Lugh::LoRA->new(adapter => $adapters{$name}{peft_bf16}, model => $model, scale => 1);
    my @base = $inf->forward(tokens => \@tokens);
    my @with = $inf->forward(tokens => \@tokens, lora => $gguf);
    my $effect = max_abs_diff(\@base, \@with);
    cmp_ok($effect, '>', 0.1, "$short: the adapter changes the logits (by $effect)");
    is(max_abs_diff(\@with, [ $inf->forward(tokens => \@tokens, lora => $peft) ]), 0,
        "$short: the PEFT SafeTensors adapter gives the GGUF one's logits exactly");
    my $bf16_diff = max_abs_diff(\@with, [ $inf->forward(tokens => \@tokens, lora => $bf16) ]);
    cmp_ok($bf16_diff, '<', $effect, "$short: its BF16 copy is near it ($bf16_diff; the adapter moves $effect)");
    is(max_abs_diff(\@base, [ $inf->forward(tokens => \@tokens) ]), 0, "$short: the base weights are untouched");
    my $other = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2);
    is(max_abs_diff(\@base, [ $other->forward(tokens => \@tokens) ]), 0, "$short: a second session sees the base");
    is(max_abs_diff(\@base, [ $inf->forward(tokens => \@tokens, lora => [ $gguf, 0 ]) ]), 0, "$short: scale 0");
    # (not exactly: the sums are done in another order, and activations
    # quantized to 8 bits before the base weights' integer products carry
    # any rounding difference through the layers)
    my @two = $inf->forward(tokens => \@tokens, lora => [ [ $gguf, 0.5 ], [ $peft, 0.5 ] ]);
    cmp_ok(max_abs_diff(\@with, \@two), '<', max_abs_diff(\@base, \@two) / 2,
        "$short: two halves of the same adapter make about the whole");
    $gguf->scale(0.5);
    is($gguf->scale, 0.5, "$short: scale set");
    is(max_abs_diff([ $inf->forward(tokens => \@tokens, lora => [ $peft, 0.5 ]) ],
        [ $inf->forward(tokens => \@tokens, lora => $gguf) ]), 0, "$short: an adapter is used at its scale");
    $gguf->scale(1);

    # every kind of call takes it
    my @pool = $inf->forward_pool($inf->create_memory_pool, \@tokens, lora => $gguf);
    is(max_abs_diff(\@with, \@pool), 0, "$short: forward_pool with lora");
    my $rows = $inf->forward_batch(sequences => [ \@tokens, [ @tokens[ 0 .. 3 ] ] ], lora => $gguf);
    # (a batch multiplies more rows: other kernels, other roundings)
    cmp_ok(max_abs_diff(\@with, $rows->[0]), '<', max_abs_diff(\@base, $rows->[0]) / 2,
        "$short: forward_batch with lora");
    my @greedy_lora = $inf->generate(\@tokens, greedy => 1, max_tokens => 6, lora => $gguf);
    my @greedy_base = $inf->generate(\@tokens, greedy => 1, max_tokens => 6);
    is($greedy_lora[0], argmax(\@with), "$short: generate with lora starts with the adapter's best token");
    is($greedy_base[0], argmax(\@base), "$short: generate without it, the base model's");
    my $cache = $inf->create_kv_cache;
    my @cached_lora = $inf->generate(\@tokens, greedy => 1, max_tokens => 6, lora => $gguf, cache => $cache);
    my @cached_base = $inf->generate(\@tokens, greedy => 1, max_tokens => 6, cache => $cache);
    is_deeply(\@cached_lora, \@greedy_lora, "$short: generate on a cache with lora");
    is_deeply(\@cached_base, \@greedy_base, "$short: the cache filled with the adapter is not reused without it");
    isnt($inf->logprobs(\@tokens, lora => $gguf)->{nll}, $inf->logprobs(\@tokens)->{nll}, "$short: logprobs");
    my $chat = Lugh::Chat->new(inference => $inf, lora => $gguf, greedy => 1, max_tokens => 4);
    ok(defined $chat->say('Hi'), "$short: a chat with an adapter");

    is($gguf->n_weights, $short eq 'qwen' ? 169 : 210, "$short: n_weights");
    is($gguf->alpha, 16, "$short: alpha");
    is($gguf->format, 'gguf', "$short: format gguf");
    is($peft->format, 'safetensors', "$short: format safetensors");
    is_deeply([ $peft->weight_names ], [ $gguf->weight_names ], "$short: the same weights in both formats");
    is(($gguf->weight_names)[0], 'blk.0.attn_k.weight', "$short: weight names are GGUF's, sorted");
    ok(!$gguf->trainable, "$short: a loaded adapter is not trainable");
    is($gguf->file, $adapters{$name}{gguf}, "$short: file");
}

# Lugh 0.12's LoRA error cases, and the untrusted-file ones.
my $dir = tempdir(CLEANUP => 1);
my $inf = Lugh::Inference->new(model => $smol, n_ctx => 64, n_threads => 1);
croaks_like(sub { Lugh::LoRA->new(model => $smol) }, qr/requires adapter/, 'no adapter');
croaks_like(sub { Lugh::LoRA->new(adapter => $adapters{'smollm2-135m-q4_1'}{gguf}) }, qr/requires model/, 'no model');
croaks_like(sub { Lugh::LoRA->new() }, qr/requires adapter/, 'no arguments');
croaks_like(sub { Lugh::LoRA->new(adapter => '/nonexistent/adapter.gguf', model => $smol) },
    qr{cannot open|No such file.*/nonexistent/adapter\.gguf|/nonexistent/adapter\.gguf}, 'a missing file');
croaks_like(sub { Lugh::LoRA->new(adapter => '/tmp/adapter.bin', model => $smol) },
    qr/unrecognized adapter format \(expected a \.gguf or a \.safetensors file\)/, 'an unknown format');
croaks_like(sub { Lugh::LoRA->new(adapter => $adapters{'smollm2-135m-q4_1'}{gguf}, model => 'not a model') },
    qr/Lugh::Model/, 'model => a string');
croaks_like(sub { Lugh::LoRA->new(adapter => 'x.gguf', model => $smol, bogus => 1) }, qr/unknown option 'bogus'/,
    'unknown option');
croaks_like(sub { $inf->forward(tokens => [1], lora => 'not a lora') }, qr/lora must be a Lugh::LoRA object/,
    'forward lora => a string');
croaks_like(sub { $inf->forward(tokens => [1], lora => [ 'x', 1 ]) }, qr/Lugh::LoRA/, 'lora => [string, scale]');
croaks_like(sub { $inf->generate([1], lora => {}) }, qr/Lugh::LoRA/, 'generate lora => a hash');
my $qwen_lora = Lugh::LoRA->new(adapter => $adapters{'qwen2.5-coder-0.5b-q4_k_m'}{gguf}, model => $qwen);
croaks_like(sub { $inf->forward(tokens => [1], lora => $qwen_lora) }, qr/was loaded for the model .*qwen/,
    "another model's adapter");
croaks_like(sub { Lugh::LoRA->new(adapter => $adapters{'qwen2.5-coder-0.5b-q4_k_m'}{gguf}, model => $smol) },
    qr/the adapter is for architecture 'qwen2', the model is 'llama'/, 'an adapter of another architecture');
my $smol_lora = Lugh::LoRA->new(adapter => $adapters{'smollm2-135m-q4_1'}{gguf}, model => $smol);
croaks_like(sub { $inf->forward(tokens => [1], lora => [ [ $smol_lora, 9**9**9 ] ]) }, qr/finite/, 'an infinite scale');
croaks_like(sub { $smol_lora->scale(-9**9**9) }, qr/finite/, 'scale set to -inf');

# PEFT files written here: each lie or mismatch croaks naming it.
sub write_peft {
    my ($name, $tensors, %o) = @_;
    my $d = "$dir/$name";
    mkdir $d;
    my ($offset, $data, %header) = (0, '');
    for my $t (sort keys %$tensors) {
        my ($shape, $values, %extra) = @{ $tensors->{$t} };
        my $bytes = pack 'f<*', @$values;
        $header{$t} = { dtype => 'F32', shape => $shape, data_offsets => [ $offset, $offset + length $bytes ], %extra };
        $offset += length $bytes;
        $data .= $bytes;
    }
    my $json = JSON::PP->new->canonical->encode(\%header);
    open my $fh, '>:raw', "$d/adapter_model.safetensors" or die $!;
    print $fh pack('Q<', length $json), $json, substr($data, 0, length($data) - ($o{cut} // 0));
    close $fh;
    unless ($o{no_config}) {
        open my $c, '>', "$d/adapter_config.json" or die $!;
        print $c JSON::PP->new->encode({ r => 2, lora_alpha => 4, target_modules => ['q_proj'], %{ $o{config} // {} } });
        close $c;
    }
    return "$d/adapter_model.safetensors";
}
my $q = 'base_model.model.model.layers.0.self_attn.q_proj';
my %good = ("$q.lora_A.weight" => [ [ 2, 576 ], [ (0.01) x 1152 ] ], "$q.lora_B.weight" => [ [ 576, 2 ], [ (0.01) x 1152 ] ]);
my $ok_file = write_peft('good', \%good);
is(Lugh::LoRA->new(adapter => $ok_file, model => $smol)->n_weights, 1, 'a small PEFT adapter written here loads');
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('cut', \%good, cut => 8), model => $smol) },
    qr/runs past the end of the file/, 'SafeTensors data cut short');
{
    # Lugh 0.12 read a bare .safetensors adapter: its pairs, alpha 1
    my $bare = Lugh::LoRA->new(adapter => write_peft('noconf', \%good, no_config => 1), model => $smol);
    is_deeply([ $bare->n_weights, $bare->alpha ], [ 1, 1 ], 'without adapter_config.json: every pair, alpha 1');
    my $alpha1 = Lugh::LoRA->new(adapter => write_peft('alpha1', \%good, config => { lora_alpha => 1 }), model => $smol);
    my $session = Lugh::Inference->new(model => $smol, n_ctx => 16, n_threads => 1);
    is_deeply([ $session->forward(tokens => [ 1, 2 ], lora => $bare) ],
        [ $session->forward(tokens => [ 1, 2 ], lora => $alpha1) ], '... as a config with r 2 and lora_alpha 1');
}
my %lying = %good;
$lying{"$q.lora_A.weight"} = [ [ 2, 576 ], [ (0.01) x 1152 ], data_offsets => [ 0, 99 ] ];
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('lying', \%lying), model => $smol) },
    qr/data_offsets give 99 bytes, but shape \[2, 576\] of F32 needs 4608/, 'a header lying about a size');
my %wrong = %good;
$wrong{"$q.lora_A.weight"} = [ [ 2, 500 ], [ (0.01) x 1000 ] ];
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('wrong', \%wrong), model => $smol) },
    qr/tensor 'blk\.0\.attn_q\.weight' has the wrong shape/, 'a shape that does not fit the weight');
my $far = 'base_model.model.model.layers.99.self_attn.q_proj';
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('far', { "$far.lora_A.weight" => $good{"$q.lora_A.weight"},
    "$far.lora_B.weight" => $good{"$q.lora_B.weight"} }), model => $smol) },
    qr/LoRA tensor 'blk\.99\.attn_q\.weight' does not exist in the base model/, 'a layer the model lacks');
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('half', { "$q.lora_A.weight" => $good{"$q.lora_A.weight"} }),
    model => $smol) }, qr/lacks its A or B/, 'half a pair');
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('rank', \%good, config => { r => 4 }), model => $smol) },
    qr/has rank 2, but adapter_config\.json says r = 4/, 'a rank that is not the config\'s');
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('dora', \%good, config => { use_dora => JSON::PP::true }),
    model => $smol) }, qr/DoRA \(use_dora\) is not supported/, 'DoRA');
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('target', \%good, config => { target_modules => ['v_proj'] }),
    model => $smol) }, qr/not in adapter_config\.json's target_modules/, 'a module not targeted');
croaks_like(sub { Lugh::LoRA->new(adapter => write_peft('odd', { 'model.norm.weight' => [ [2], [ 1, 1 ] ] }),
    model => $smol) }, qr/tensor 'model\.norm\.weight' is not a LoRA A or B tensor/, 'a tensor that is no LoRA');
mkdir "$dir/junk";
open my $junk_config, '>', "$dir/junk/adapter_config.json" or die;
print $junk_config '{"r": 2, "lora_alpha": 4}';
close $junk_config;
open my $junk, '>:raw', "$dir/junk/junk.safetensors" or die;
print $junk pack('Q<', 1 << 40), '{}';
close $junk;
croaks_like(sub { Lugh::LoRA->new(adapter => "$dir/junk/junk.safetensors", model => $smol) }, qr/header length/,
    'a header length beyond the file');
ok(scalar $inf->forward(tokens => [1]), 'the session works after the croaks');

done_testing;
