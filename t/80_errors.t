use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use LughTestInference qw(smollm2 argmax);

# Bad input everywhere: each croaks with a message naming the problem and the
# caller's line, and the objects stay usable afterwards.

my ($model, $inference) = smollm2();
my @prompt = (504, 3575, 282, 4649, 314);

subtest 'new' => sub {
    croaks_like(sub { Lugh::Inference->new }, qr/missing model/, 'no model');
    croaks_like(sub { Lugh::Inference->new(model => 'file.gguf') }, qr/not a Lugh::Model object/, 'model not an object');
    croaks_like(sub { Lugh::Inference->new(model => bless {}, 'Lugh::Model') }, qr/not a Lugh::Model object/,
        'a hand-blessed hash');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_tread => 2) },
        qr/unknown option 'n_tread' \(valid options: backend, flash_attn, main_device, model, n_batch, n_ctx, n_gpu_layers, n_threads, rope, rpc, rpc_timeout, tensor_split, type_k, type_v\)/,
        'unknown option');
    croaks_like(sub { Lugh::Inference->new(model => $model, 'n_ctx') }, qr/name => value pairs/, 'odd options');
    croaks_like(sub { Lugh::Inference->new(model => $model, backend => 'NoSuch') }, qr/NoSuch.*CPU/,
        'unknown backend lists those available');
    croaks_like(sub { Lugh::Inference->new(model => $model, flash_attn => 'yes') },
        qr/flash_attn must be 0, 1 or 'auto', got 'yes'/, 'bad flash_attn');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_ctx => 0) }, qr/n_ctx must be an integer >= 1/,
        'n_ctx 0');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_threads => 'many') }, qr/n_threads must be an integer/,
        'n_threads not a number');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_batch => -4) }, qr/n_batch must be an integer >= 1/,
        'negative n_batch');
    my $vocab_only = model_path('ggml-vocab-llama-spm');
    SKIP: {
        skip 'vocab file not fetched', 3 unless $vocab_only;
        my $m = Lugh::Model->new(model => $vocab_only);
        croaks_like(sub { Lugh::Inference->new(model => $m) }, qr/^Lugh::Inference->new: /,
            'a vocabulary-only file (no weights)');
    }
};

subtest 'forward' => sub {
    croaks_like(sub { $inference->forward([]) }, qr/empty/, 'empty token list');
    croaks_like(sub { $inference->forward() }, qr/missing tokens/, 'no tokens');
    croaks_like(sub { $inference->forward('1 2 3') }, qr/tokens must be an ARRAY reference, got 1 2 3/,
        'tokens not an array');
    croaks_like(sub { $inference->forward([ 1, 2, 49152 ]) },
        qr/^Lugh::Inference->forward: tokens has token id 49152 at position 2, out of range \[0, 49152\)/,
        'id out of range, with position');
    croaks_like(sub { $inference->forward([ -1 ]) }, qr/token id -1 at position 0/, 'negative id');
    croaks_like(sub { $inference->forward([ 1, 'two' ]) }, qr/tokens element 1 must be an integer, got 'two'/,
        'id not a number');
    croaks_like(sub { $inference->forward([ 1, 2.5 ]) }, qr/must be an integer, got 2.5/, 'fractional id');
    croaks_like(sub { $inference->forward([ 1, undef ]) }, qr/tokens element 1 is missing \(undef\)/, 'undef id');
    croaks_like(sub { $inference->forward([ 2**40 ]) }, qr/out of range/, 'huge id');
    croaks_like(sub { $inference->forward(tokens => [1], adapter => 1) },
        qr/unknown option 'adapter' \(valid options: as_object, cache, caches, lora, pool, rope, sequences, tokens\)/,
        'unknown option');
    croaks_like(sub { $inference->forward(tokens => [1], lora => 1) }, qr/lora must be a Lugh::LoRA object, got 1/,
        'lora => a number');
    croaks_like(sub { $inference->forward_simple(tokens => [1], cache => 1) },
        qr/unknown option 'cache' \(valid options: lora, rope, tokens\)/, 'forward_simple takes no cache');
    croaks_like(sub { $inference->forward(tokens => [1], sequences => [[1]]) }, qr/not both/, 'tokens and sequences');
    croaks_like(sub { $inference->forward(tokens => [1], cache => 'c') }, qr/not a Lugh::KVCache object \(got c\)/,
        'cache not a cache');
    croaks_like(sub { $inference->forward(tokens => [1], pool => $inference) },
        qr/not a Lugh::MemoryPool object/, 'pool not a pool');
    croaks_like(sub { $inference->forward_cache(undef, [1]) }, qr/missing cache/, 'forward_cache without a cache');
    croaks_like(sub { $inference->forward_pool([1]) }, qr/missing pool/, 'forward_pool without a pool');
    croaks_like(sub { $inference->forward_cache_pool($inference->create_kv_cache, [1]) }, qr/missing pool/,
        'forward_cache_pool without a pool');
    croaks_like(sub { $inference->forward([1], 'extra') }, qr/name => value pairs/, 'stray argument');
    croaks_like(sub { $inference->forward(tokens => [1], tokens => [2], [3]) }, qr/name => value pairs/, 'odd pairs');
    croaks_like(sub { Lugh::Inference::forward('Lugh::Inference', [1]) }, qr/not a Lugh::Inference object/,
        'class method');
    croaks_like(sub { $inference->forward_all([]) }, qr/empty/, 'forward_all: empty');
    my $cache = $inference->create_kv_cache;
    croaks_like(sub { $inference->forward_cache($cache, [ (1) x 513 ]) }, qr/context|n_ctx|capacity/i,
        'overflowing n_ctx');
    is($cache->n_cached, 0, '... croaks before computing anything');
    my @l = $inference->forward(\@prompt);
    is(argmax(\@l), 7042, 'the session still works');
};

subtest 'accessors and objects' => sub {
    croaks_like(sub { $inference->n_ctx(5) }, qr/Usage: \$inference->n_ctx/, 'accessors take no arguments');
    croaks_like(sub { Lugh::KVCache::n_cached(bless {}, 'Lugh::KVCache') }, qr/not a Lugh::KVCache object/,
        'a hand-blessed cache');
    croaks_like(sub { Lugh::MemoryPool::reset({}) }, qr/not a Lugh::MemoryPool object/, 'a plain hash as a pool');
    croaks_like(sub { $inference->create_kv_cache(1) }, qr/Usage/, 'create_kv_cache takes no arguments');
    my $cache = $inference->create_kv_cache;
    croaks_like(sub { $cache->resize('x') }, qr/must be an integer/, 'resize to a non-number');
    croaks_like(sub { $cache->resize(1) }, qr/^Lugh::KVCache::resize: /, 'resize beyond n_cached');
};

subtest 'generate' => sub {
    croaks_like(sub { $inference->generate([]) }, qr/prompt is empty/, 'empty prompt');
    croaks_like(sub { $inference->generate() }, qr/missing prompt/, 'no prompt');
    croaks_like(sub { $inference->generate([ 1, 50000 ]) }, qr/prompt has token id 50000 at position 1/,
        'prompt id out of range');
    croaks_like(sub { $inference->generate(\@prompt, max_tokns => 3) },
        qr/unknown option 'max_tokns' \(valid options: cache, callback, .*eos_token, .*max_tokens/, 'unknown option');
    croaks_like(sub { $inference->generate(\@prompt, max_tokens => -1) }, qr/max_tokens must be an integer >= 0/,
        'negative max_tokens');
    croaks_like(sub { $inference->generate(\@prompt, max_tokens => 600) },
        qr/needs 604 positions, but the context has 512 free/, 'prompt + max_tokens over n_ctx');
    croaks_like(sub { $inference->generate(\@prompt, callback => 'print') },
        qr/callback must be a CODE reference/, 'callback not code');
    croaks_like(sub { $inference->generate(\@prompt, eos_token => 99999) }, qr/eos_token 99999 is out of range/,
        'eos_token out of range');
    croaks_like(sub { $inference->generate(\@prompt, stop => ['']) }, qr/stop strings must not be empty/,
        'empty stop string');
    croaks_like(sub { $inference->generate(\@prompt, stop => {}) }, qr/stop string 0 must be a string/,
        'stop not strings');
    croaks_like(sub { $inference->generate(\@prompt, temperature => -0.5) }, qr/temperature must be/,
        'bad temperature');
    croaks_like(sub { $inference->generate(\@prompt, top_p => 2) }, qr/top_p must be in \(0, 1\]/, 'bad top_p');
    croaks_like(sub { $inference->generate(\@prompt, history => [1]) }, qr/unknown option 'history'/,
        'history is sample()\'s option');
    my @calls;
    my $died = !eval {
        $inference->generate(\@prompt, max_tokens => 5, greedy => 1, callback => sub { push @calls, $_[1]; die [ 'x', $_[1] ] });
        1;
    };
    ok($died, 'a dying callback stops generate');
    is_deeply($@, [ 'x', 1 ], 'the exception (an array ref) is unchanged');
    is_deeply(\@calls, [1], 'called once');
    my @ids = $inference->generate(\@prompt, max_tokens => 2, greedy => 1);
    is_deeply(\@ids, [ 7042, 30 ], 'generate works afterwards');
};

subtest 'srand' => sub {
    croaks_like(sub { Lugh::srand(-1) }, qr/seed must be an integer >= 0, got -1/, 'negative seed');
    croaks_like(sub { Lugh::srand('abc') }, qr/seed must be an integer/, 'seed not a number');
    croaks_like(sub { Lugh::srand(1, 2) }, qr/Usage: Lugh::srand/, 'two seeds');
};

done_testing;
