# The rules every package follows (perldoc Lugh, "Rules every package
# follows"), checked on one tiny model: options declared once in the native
# tables (unknown names list the valid ones, undef is the default), list
# methods in scalar context, warnings at the caller's line, LUGH_DEBUG.
# Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir   = tempdir(CLEANUP => 1);
my $path  = tiny_model($dir);
my $model = Lugh::Model->new(model => $path);
my $inf   = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
my $tok   = Lugh::Tokenizer->new(model => $model);

subtest 'options come from one table per method' => sub {
    my @generate = Lugh::Inference::_generate_options();
    for my $name (qw(prompt max_tokens stop callback on_text cache stats logprobs eos_token greedy temperature top_k
        top_p min_p seed))
    {
        ok((grep { $_ eq $name } @generate), "generate takes $name");
    }
    croaks_like(sub { $inf->generate([1], max_tokenz => 3) },
        qr/\ALugh::Inference->generate: unknown option 'max_tokenz' \(valid options: .*\bmax_tokens\b.*\btop_k\b/,
        'generate lists its options');
    croaks_like(sub { $inf->sample_top_p([ 1, 2 ], top_k => 3) },
        qr/unknown option 'top_k' \(valid options: seed, temperature, top_p\)/, 'sample_top_p takes its three');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_thread => 1) },
        qr/unknown option 'n_thread' \(valid options: backend, flash_attn, main_device, model, n_batch, n_ctx, n_gpu_layers, n_threads, rope, rpc, rpc_timeout, tensor_split, type_k, type_v\)/,
        'new lists its options');
    croaks_like(sub { Lugh::Inference->new(model => $model, 'n_ctx') }, qr/name => value pairs/, 'odd list');
    my $session = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => undef, flash_attn => 'AUTO');
    is($session->n_ctx, $model->n_ctx_train, 'undef is the default');
    my @a = $inf->generate([ 1, 2 ], max_tokens => 3, greedy => 1, seed => undef);
    my @b = $inf->generate(prompt => [ 1, 2 ], max_tokens => 3, greedy => 1);
    is_deeply(\@a, \@b, 'the prompt first or as prompt =>');
    croaks_like(sub { $inf->generate([1], prompt => [1]) }, qr/give the prompt once/, 'not both');
    my $stop = $inf->generate([1], max_tokens => 2, greedy => 1, stop => 'zzz', stats => \my %stats);
    is($stats{n_generated}, 2, 'stop as one string; stats filled');
    croaks_like(sub { $inf->generate([1], stats => []) }, qr/stats must be a hash reference/, 'stats is a hash');
};

subtest 'list methods in scalar context give an array reference' => sub {
    my @ids = $tok->encode('hello world');
    my $ids = $tok->encode('hello world');
    is_deeply($ids, \@ids, 'encode');
    my @logits = $inf->forward([ 1, 2 ]);
    my $logits = $inf->forward([ 1, 2 ]);
    is(ref $logits, 'ARRAY', 'forward');
    is(scalar @$logits, scalar @logits, 'forward: all the logits');
    my $cache = $inf->create_kv_cache;
    $inf->forward_cache($cache, [ 1, 2, 3 ]);
    is_deeply(scalar $cache->tokens, [ 1, 2, 3 ], 'KVCache tokens');
    my $generated = $inf->generate([1], max_tokens => 2, greedy => 1);
    is(ref $generated, 'ARRAY', 'generate');
    is(ref scalar Lugh::Prompt::available_formats(), 'ARRAY', 'Prompt::available_formats');
    my $count = () = $tok->encode('hello world');
    is($count, scalar @ids, 'a count still comes from list assignment');
};

subtest 'accessors are rows of one table' => sub {
    is($inf->n_ctx, 64, 'Inference n_ctx');
    is($model->n_layer, $inf->n_layer, 'Model n_layer');
    ok(defined $tok->n_vocab, 'Tokenizer n_vocab');
    croaks_like(sub { $inf->n_ctx(1) }, qr/\AUsage: \$inference->n_ctx at /, 'no arguments');
    croaks_like(sub { Lugh::Inference::_accessor($inf, 'nope') }, qr/Lugh::Inference->nope: no accessor 'nope'/,
        'an unknown name');
};

subtest 'n_ctx beyond the trained context warns' => sub {
    my @warnings;
    local $SIG{__WARN__} = sub { push @warnings, @_ };
    my $n_ctx = $model->n_ctx_train * 2;
    my $wide = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => $n_ctx);
    is($wide->n_ctx, $n_ctx, 'accepted');
    is(scalar @warnings, 1, 'one warning');
    like($warnings[0] // '', qr/\ALugh::Inference->new: n_ctx $n_ctx is more than the \d+ positions .* at \Q$0\E line \d+\.\n\z/,
        'naming both and the caller');
    local $SIG{__WARN__} = sub { die "fatal: $_[0]" };
    my $ok = eval { Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => $n_ctx); 1 };
    ok(!$ok, 'a __WARN__ handler that dies');
    like($@, qr/\Afatal: Lugh::Inference->new: n_ctx/, 'dies with its own message');
    is(Lugh::_live_objects(), Lugh::_live_objects(), 'and the process goes on');
};

subtest 'forward without a cache: the context is too small' => sub {
    croaks_like(sub { $inf->forward([ (1) x 65 ]) },
        qr/65 tokens do not fit in the session's context of 64 positions \(create the session with a larger n_ctx\)/,
        'says n_ctx, not a cache the caller never made');
};

subtest 'LUGH_DEBUG' => sub {
    my $out = `$^X -Mblib -MLugh -e "my \\\$m = Lugh::Model->new(model => shift); Lugh::Inference->new(model => \\\$m, n_threads => 1)->generate([1], max_tokens => 2)" "$path" 2>&1 >/dev/null`;
    is($out, '', 'silent by default');
    local $ENV{LUGH_DEBUG} = 1;
    # seeded: unseeded sampling may draw the end token first
    $out = `$^X -Mblib -MLugh -e "my \\\$m = Lugh::Model->new(model => shift); Lugh::Inference->new(model => \\\$m, n_threads => 1)->generate([1], max_tokens => 2, seed => 1)" "$path" 2>&1 >/dev/null`;
    like($out, qr/^Lugh: opened '.*' in [\d.]+ ms: architecture llama/m, 'the model load');
    like($out, qr/^Lugh: placed the weights/m, 'the weights');
    like($out, qr/^Lugh: session on CPU: n_threads 1/m, 'the session');
    like($out, qr/^Lugh: generated 2 tokens \(max_tokens\)/m, 'the generation');
};

done_testing;
