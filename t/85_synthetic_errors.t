# Bad input to Lugh::Inference on a tiny synthetic model
# (t/lib/LughTest/TinyModel.pm): each croaks with a message naming the
# problem and the caller's line, and the objects stay usable. Also models
# that are well-formed GGUF but not runnable (a tensor missing or of the wrong
# shape, an unknown architecture). Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::GGUF qw(gguf_bytes);
use LughTest::TinyModel qw(tiny_model tiny_model_bytes);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $model = Lugh::Model->new(model => tiny_model($dir));
my $inference = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
my $n = $inference->n_vocab;
my @prompt = (10, 20, 30, 40);
my @logits = $inference->forward(\@prompt);

subtest 'new' => sub {
    croaks_like(sub { Lugh::Inference->new }, qr/missing model/, 'no model');
    croaks_like(sub { Lugh::Inference->new(model => 'file.gguf') }, qr/not a Lugh::Model object/, 'model not an object');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_tread => 2) },
        qr/unknown option 'n_tread' \(valid options: backend, flash_attn, main_device, model, n_batch, n_ctx, n_gpu_layers, n_threads, rope, rpc, rpc_timeout, tensor_split, type_k, type_v\)/,
        'unknown option');
    croaks_like(sub { Lugh::Inference->new(model => $model, backend => 'NoSuch') }, qr/NoSuch.*CPU/,
        'unknown backend lists those available');
    croaks_like(sub { Lugh::Inference->new(model => $model, flash_attn => 'yes') },
        qr/flash_attn must be 0, 1 or 'auto', got 'yes'/, 'bad flash_attn');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_ctx => 0) }, qr/n_ctx must be an integer >= 1/, 'n_ctx 0');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_batch => -4) }, qr/n_batch must be an integer >= 1/,
        'negative n_batch');
};

subtest 'forward' => sub {
    croaks_like(sub { $inference->forward([]) }, qr/empty/, 'empty token list');
    croaks_like(sub { $inference->forward() }, qr/missing tokens/, 'no tokens');
    croaks_like(sub { $inference->forward('1 2 3') }, qr/tokens must be an ARRAY reference, got 1 2 3/,
        'tokens not an array');
    croaks_like(sub { $inference->forward([ 1, 2, $n ]) },
        qr/^Lugh::Inference->forward: tokens has token id $n at position 2, out of range \[0, $n\)/,
        'id out of range, with position');
    croaks_like(sub { $inference->forward([-1]) }, qr/token id -1 at position 0/, 'negative id');
    croaks_like(sub { $inference->forward([ 1, 'two' ]) }, qr/tokens element 1 must be an integer, got 'two'/,
        'id not a number');
    croaks_like(sub { $inference->forward([ 1, 2.5 ]) }, qr/must be an integer, got 2.5/, 'fractional id');
    croaks_like(sub { $inference->forward([ 1, undef ]) }, qr/tokens element 1 is missing \(undef\)/, 'undef id');
    croaks_like(sub { $inference->forward([ 2**40 ]) }, qr/out of range/, 'huge id');
    croaks_like(sub { $inference->forward({}) }, qr/tokens must be an ARRAY reference/, 'a hash');
    croaks_like(sub { $inference->forward(tokens => [1], adapter => 1) }, qr/unknown option 'adapter'/, 'unknown option');
    croaks_like(sub { $inference->forward(tokens => [1], lora => 1) }, qr/lora must be a Lugh::LoRA object/,
        'lora => a number');
    croaks_like(sub { $inference->forward(tokens => [1], cache => 'c') }, qr/not a Lugh::KVCache object \(got c\)/,
        'cache not a cache');
    croaks_like(sub { $inference->forward(tokens => [1], pool => $inference) }, qr/not a Lugh::MemoryPool object/,
        'pool not a pool');
    croaks_like(sub { $inference->forward_cache(undef, [1]) }, qr/missing cache/, 'forward_cache without a cache');
    croaks_like(sub { $inference->forward_pool([1]) }, qr/missing pool/, 'forward_pool without a pool');
    croaks_like(sub { Lugh::Inference::forward('Lugh::Inference', [1]) }, qr/not a Lugh::Inference object/,
        'class method');
    croaks_like(sub { $inference->forward_all([]) }, qr/empty/, 'forward_all: empty');
    my $cache = $inference->create_kv_cache;
    croaks_like(sub { $inference->forward_cache($cache, [ (1) x 65 ]) }, qr/context|n_ctx|capacity/i,
        'overflowing n_ctx');
    is($cache->n_cached, 0, '... croaks before computing anything');
    is_deeply([ $inference->forward(\@prompt) ], \@logits, 'the session still works');
};

subtest 'sample' => sub {
    croaks_like(sub { $inference->sample(\@logits, tempreature => 1) }, qr/unknown option 'tempreature'/,
        'unknown option');
    for my $bad ([ temperature => -1 ], [ top_p => 0 ], [ top_p => 1.5 ], [ min_p => 2 ], [ repeat_penalty => 0 ],
        [ top_k => -1 ], [ seed => -5 ], [ temperature => 'hot' ])
    {
        croaks_like(sub { $inference->sample(\@logits, @$bad) }, qr/^Lugh::Inference->sample: $bad->[0] /,
            "bad $bad->[0] => $bad->[1]");
    }
    croaks_like(sub { $inference->sample([]) }, qr/logits are empty/, 'empty logits');
    croaks_like(sub { $inference->sample('x') }, qr/array reference of logits/, 'logits not an array');
    croaks_like(sub { $inference->sample([ 1, 'abc' ]) }, qr/logits element 1 must be a number/, 'not a number');
    croaks_like(sub { $inference->sample(\@logits, history => [ 1, $n ]) },
        qr/history has token id $n at position 1, out of range \[0, $n\)/, 'history ids are checked');
};

subtest 'generate' => sub {
    croaks_like(sub { $inference->generate([]) }, qr/prompt is empty/, 'empty prompt');
    croaks_like(sub { $inference->generate([ 1, $n ]) }, qr/prompt has token id $n at position 1/,
        'prompt id out of range');
    croaks_like(sub { $inference->generate(\@prompt, max_tokens => -1) }, qr/max_tokens must be an integer >= 0/,
        'negative max_tokens');
    croaks_like(sub { $inference->generate(\@prompt, max_tokens => 62) },
        qr/needs 65 positions, but the context has 64 free/, 'prompt + max_tokens over n_ctx');
    croaks_like(sub { $inference->generate(\@prompt, callback => 'print') }, qr/callback must be a CODE reference/,
        'callback not code');
    croaks_like(sub { $inference->generate(\@prompt, eos_token => $n) }, qr/eos_token $n is out of range/,
        'eos_token out of range');
    croaks_like(sub { $inference->generate(\@prompt, stop => ['']) }, qr/stop strings must not be empty/,
        'empty stop string');
    croaks_like(sub { $inference->generate(\@prompt, history => [1]) }, qr/unknown option 'history'/,
        'history is sample()\'s option');
    is(scalar(my @ids = $inference->generate(\@prompt, max_tokens => 61, greedy => 1, eos_token => $n - 1)), 61,
        'prompt + max_tokens - 1 = n_ctx positions (the last token is not fed back) is fine');
};

subtest 'caches and pools' => sub {
    croaks_like(sub { $inference->n_ctx(5) }, qr/Usage: \$inference->n_ctx/, 'accessors take no arguments');
    croaks_like(sub { Lugh::KVCache::n_cached(bless {}, 'Lugh::KVCache') }, qr/not a Lugh::KVCache object/,
        'a hand-blessed cache');
    croaks_like(sub { Lugh::MemoryPool::reset({}) }, qr/not a Lugh::MemoryPool object/, 'a plain hash as a pool');
    my $cache = $inference->create_kv_cache;
    croaks_like(sub { $cache->resize('x') }, qr/must be an integer/, 'resize to a non-number');
    croaks_like(sub { $cache->resize(1) }, qr/^Lugh::KVCache::resize: /, 'resize beyond n_cached');
};

# Well-formed files that Lugh::Inference cannot run: each croaks naming it.
subtest 'models that are not runnable' => sub {
    my $write = sub {
        my ($name, $bytes) = @_;
        open my $fh, '>:raw', "$dir/$name" or die $!;
        print {$fh} $bytes;
        close $fh;
        return Lugh::Model->new(model => "$dir/$name");
    };
    # the tiny llama's bytes with one tensor's name or the architecture changed (same length)
    my $good = tiny_model_bytes();
    (my $no_down = $good) =~ s/blk\.1\.ffn_down\.weight/blk.1.ffn_dowX.weight/ or die;
    croaks_like(sub { Lugh::Inference->new(model => $write->('missing.gguf', $no_down)) },
        qr/blk\.1\.ffn_down\.weight/, 'a required tensor missing');
    my $wrong = tiny_model_bytes(n_ff => 96);
    (my $mixed = $wrong) =~ s/llama\.feed_forward_length.{4}\K\x60\0\0\0/\x80\0\0\0/s or die;
    croaks_like(sub { Lugh::Inference->new(model => $write->('shape.gguf', $mixed)) },
        qr/tensor blk\.0\.ffn_gate\.weight has shape \[64, 96(?:, 1, 1)?\], expected \[64, 128\]/, 'a tensor of the wrong shape');
    (my $arch = $good) =~ s/(general\.architecture.{12})llama/$1mamba/s or die;
    my $m = $write->('arch.gguf', $arch);
    is($m->architecture, 'mamba', 'loads as a model');
    croaks_like(sub { Lugh::Inference->new(model => $m) }, qr/mamba.*llama/, 'an unsupported architecture is named');
    is_deeply([ $inference->forward(\@prompt) ], \@logits, 'the session still works');
};

done_testing;
