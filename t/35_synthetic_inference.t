# Lugh::Inference, Lugh::KVCache and Lugh::MemoryPool on tiny synthetic
# models (t/lib/LughTest/TinyModel.pm) of each supported architecture: the
# settings, forward passes and their agreement with each other (with and
# without a cache, pool, batch, flash attention, mmap, threads). The weights
# are random, so there is no right answer to compare with, only consistency.
# Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use List::Util qw(max min);
use lib 't/lib';
use LughTest::TinyModel qw(tiny_model tiny_config @TINY_VARIANTS);
use LughTestInference qw(argmax max_abs_diff check_rollback_and_clear check_cache_spellings
    check_overflow_refused);
use Lugh;

my $dir = tempdir(CLEANUP => 1);

sub all_finite { return !grep { $_ != $_ || abs($_) == 9**9**9 } @{ $_[0] } }

my @variants = @TINY_VARIANTS;

# 20 tokens: longer than gemma3's sliding window of 8.
my @tokens = map { 3 + ord } split //, 'Once upon a time, th';

for my $opt (@variants) {
    my $c = tiny_config(%$opt);
    my $label = join ' ', map {"$_=$c->{$_}"} qw(arch tokenizer types tied);
    subtest $label => sub {
        my $model = Lugh::Model->new(model => tiny_model($dir, %$opt));
        my $inf = Lugh::Inference->new(model => $model, n_threads => 1, backend => 'CPU');
        isa_ok($inf, 'Lugh::Inference');
        my $n_vocab = $model->n_vocab;
        is($inf->n_vocab, $n_vocab, 'n_vocab');
        is($inf->n_layer, $c->{n_layer}, 'n_layer');
        is($inf->n_ctx, $c->{n_ctx}, 'n_ctx defaults to the training context (when under 4096)');
        is($inf->model->architecture, $c->{arch}, 'model');

        my @logits = $inf->forward(\@tokens);
        is(scalar @logits, $n_vocab, 'forward gives n_vocab logits');
        ok(all_finite(\@logits), 'all finite');
        cmp_ok(max(@logits) - min(@logits), '>', 0.1, 'not all the same');
        my @again = $inf->forward(\@tokens);
        is_deeply(\@again, \@logits, 'deterministic: the same logits again');
        my @named = $inf->forward(tokens => \@tokens);
        cmp_ok(max_abs_diff(\@named, \@logits), '<', 1e-6, 'forward(tokens => ...)');
        my @simple = $inf->forward_simple(\@tokens);
        cmp_ok(max_abs_diff(\@simple, \@logits), '<', 1e-6, 'forward_simple');
        my @shorter = $inf->forward([ @tokens[ 0 .. 9 ] ]);
        cmp_ok(max_abs_diff(\@shorter, \@logits), '>', 1e-3, 'another sequence, other logits');

        my $rows = $inf->forward_all(\@tokens);
        is(scalar @$rows, scalar @tokens, 'forward_all: one row per token');
        is(scalar @{ $rows->[0] }, $n_vocab, '... of n_vocab logits');
        cmp_ok(max_abs_diff($rows->[-1], \@logits), '<', 0.02, 'the last row is forward()');
        cmp_ok(max_abs_diff($rows->[9], \@shorter), '<', 0.02, 'row 9 is the forward of the first 10 tokens');

        my $cache = $inf->create_kv_cache;
        isa_ok($cache, 'Lugh::KVCache');
        is_deeply([ $cache->n_cached, $cache->n_ctx, $cache->n_layer ], [ 0, $inf->n_ctx, $c->{n_layer} ],
            'a new cache: empty, n_ctx, n_layer');
        $inf->forward_cache($cache, [ @tokens[ 0 .. 3 ] ]);
        my $worst = 0;
        for my $n (4 .. $#tokens) {
            my @step = $inf->forward_cache($cache, [ $tokens[$n] ]);
            my $full = $rows->[$n];
            $worst = max($worst, max_abs_diff(\@step, $full));
        }
        cmp_ok($worst, '<=', 0.02, 'token by token with a cache equals the full forward at every position');
        is($cache->n_cached, scalar @tokens, 'one cache position per token');

        # Flash attention keeps K, V and the softmax in f16, and Q8_0 matmuls
        # quantise what they are given: 2% of the logits' range apart at most.
        my $range = max(@logits) - min(@logits);
        my $fa_tolerance = max(0.05, 0.02 * $range);
        my @by_fa = map {
            my $i = Lugh::Inference->new(model => $model, n_threads => 1, flash_attn => $_);
            is($i->flash_attn, $_, "flash_attn => $_");
            [ $i->forward(\@tokens) ];
        } 0, 1;
        cmp_ok(max_abs_diff(@by_fa), '<', $fa_tolerance, 'flash attention on and off agree within ' . sprintf '%.2f', $fa_tolerance);
        my $small = Lugh::Inference->new(model => $model, n_threads => 1, n_batch => 4, n_ctx => 64);
        is_deeply([ $small->n_batch, $small->n_ctx ], [ 4, 64 ], 'n_batch, n_ctx as given');
        my $c2 = $small->create_kv_cache;
        my @batched = $small->forward_cache($c2, \@tokens);
        cmp_ok(max_abs_diff(\@batched, \@logits), '<', 0.02, 'the prompt in batches of 4: the same logits');
        my $read = Lugh::Inference->new(model => Lugh::Model->new(model => $model->filename, use_mmap => 0),
            n_threads => 1);
        is_deeply([ $read->forward(\@tokens) ], \@logits, 'without mmap: identical logits');

        my $pool = $inf->create_memory_pool;
        my @pooled = $inf->forward_pool($pool, \@tokens);
        cmp_ok(max_abs_diff(\@pooled, \@logits), '<', 1e-4, 'forward_pool');

        my @seqs = ([ @tokens[ 0 .. 4 ] ], [ @tokens[ 5 .. 15 ] ], [ $tokens[0] ], \@tokens);
        my $batch = $inf->forward_batch(\@seqs);
        is(scalar @$batch, 4, 'forward_batch: one row per sequence');
        my $bw = max(map { max_abs_diff($batch->[$_], [ $inf->forward($seqs[$_]) ]) } 0 .. 3);
        cmp_ok($bw, '<=', 0.02, 'each equals its own forward');
    };
}

# The API in detail, on the default tiny llama.
my $model = Lugh::Model->new(model => tiny_model($dir));
my $n_vocab = $model->n_vocab;
my $inference = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 128);
my @plain = $inference->forward(\@tokens);

subtest 'settings' => sub {
    is($inference->backend, 'CPU', 'backend');
    is($inference->n_threads, 1, 'n_threads');
    my $n_cpus = Lugh::cpu_features()->{n_cpus};
    cmp_ok($n_cpus, '>=', 1, 'n_cpus');
    my $many = Lugh::Inference->new(model => $model, n_threads => 2 * $n_cpus + 1, n_ctx => 32);
    is($many->n_threads, $n_cpus, 'n_threads above the CPUs available is lowered to them');
    is(scalar(my @l = $many->forward([ 1, 2 ])), $many->n_vocab, '... and computes');
    is($inference->n_ctx, 128, 'n_ctx');
    cmp_ok($inference->n_batch, '>=', 1, 'n_batch has a default');
    like($inference->flash_attn, qr/\A[01]\z/, "flash_attn 'auto' resolves to 0 or 1");
    my $default = Lugh::Inference->new(model => $model);
    is($default->backend, Lugh::best_backend(), "backend 'auto' is the best one");
    cmp_ok($default->n_threads, '>=', 1, 'n_threads defaults to the cores');
    is($default->n_ctx, 256, 'n_ctx = the training context 256');
    # (one forward only: where the cores are busy, ggml's threads wait long for each other)
    my $two = Lugh::Inference->new(model => $model, n_threads => 2);
    is($two->n_threads, 2, 'n_threads => 2');
    cmp_ok(max_abs_diff([ $two->forward(\@tokens) ], \@plain), '<', 1e-3, 'two threads: the same logits');
};

subtest 'KV cache: spellings, resize, clear' => sub {
    my $c = $inference->create_kv_cache;
    check_cache_spellings($inference, $c, \@tokens);

    check_rollback_and_clear($inference, $c, \@tokens, 99);

    my $v = $inference->create_kv_cache;
    $inference->forward(cache => $v, tokens => [ @tokens[ 0 .. 2 ] ]);
    is($v->n_cached, 3, 'forward in void context fills the cache');
    my @next = $inference->forward(cache => $v, tokens => [ $tokens[3] ]);
    is(scalar @next, $n_vocab, 'then a list of n_vocab logits');
};

subtest 'overflowing n_ctx croaks before computing' => sub {
    my $small = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 8);
    my $c = check_overflow_refused($small, \@tokens);
    $small->forward_cache($c, [ @tokens[ 6, 7 ] ]);
    is($c->n_cached, 8, 'exactly full is fine');
    eval { $small->forward([ (1) x 9 ]) };
    like($@, qr/context|n_ctx|capacity/i, 'a longer sequence than n_ctx croaks without a cache too');
};

subtest 'caches and pools belong to their session and keep it alive' => sub {
    my $other = Lugh::Inference->new(model => $model, n_threads => 1);
    my $cache = $inference->create_kv_cache;
    my $pool = $inference->create_memory_pool;
    eval { $other->forward_cache($cache, [1]) };
    like($@, qr/belongs to another Lugh::Inference/, 'a cache of another session croaks');
    eval { $other->forward_pool($pool, [1]) };
    like($@, qr/belongs to another Lugh::Inference/, 'a pool of another session croaks');
    my $m = Lugh::Model->new(model => tiny_model($dir));
    my $i = Lugh::Inference->new(model => $m, n_threads => 1);
    my $c = $i->create_kv_cache;
    my $p = $i->create_memory_pool;
    $i->forward_cache($c, [ @tokens[ 0 .. 2 ] ]);
    undef $m;
    my @l = $i->forward(\@tokens);
    cmp_ok(max_abs_diff(\@l, \@plain), '<', 1e-4, 'the session works after its model object is gone');
    undef $i;
    is($c->n_cached, 3, 'the cache outlives its session');
    is($p->backend, 'CPU', 'the pool outlives its session');
    undef $c;
    undef $p;
    pass('freed in that order without a crash');
    eval { Lugh::KVCache->new(n_ctx => 10) };
    like($@, qr/create_kv_cache/, 'Lugh::KVCache->new points to create_kv_cache');
    eval { Lugh::MemoryPool->new };
    like($@, qr/create_memory_pool/, 'Lugh::MemoryPool->new points to create_memory_pool');
};

subtest 'memory pool' => sub {
    my $pool = $inference->create_memory_pool;
    isa_ok($pool, 'Lugh::MemoryPool');
    is($pool->backend, $inference->backend, 'backend');
    is($pool->n_allocations, 0, 'nothing allocated yet');
    my @l = $inference->forward_pool($pool, \@tokens);
    cmp_ok(max_abs_diff(\@l, \@plain), '<', 1e-4, 'forward_pool');
    is($pool->n_allocations, 1, 'one allocation');
    @l = $inference->forward_with_pool($pool, \@tokens);
    cmp_ok(max_abs_diff(\@l, \@plain), '<', 1e-4, 'forward_with_pool');
    @l = $inference->forward(tokens => \@tokens, pool => $pool);
    cmp_ok(max_abs_diff(\@l, \@plain), '<', 1e-4, 'forward(pool =>)');
    @l = $inference->forward_pool(pool => $pool, tokens => \@tokens);
    cmp_ok(max_abs_diff(\@l, \@plain), '<', 1e-4, 'forward_pool named');
    $inference->forward_pool($pool, [ @tokens[ 0 .. 2 ] ]);
    is($pool->n_allocations, 1, 'a smaller input: no new allocation');
    my $cache = $inference->create_kv_cache;
    $inference->forward_cache_pool($cache, $pool, [ @tokens[ 0 .. 15 ] ]);
    my @step = $inference->forward_cache_pool(cache => $cache, pool => $pool, tokens => [ @tokens[ 16 .. 19 ] ]);
    cmp_ok(max_abs_diff(\@step, \@plain), '<=', 0.02, 'forward_cache_pool positional then named');
    $inference->forward(cache => $cache, pool => $pool, tokens => [1]);
    is($cache->n_cached, 21, 'forward(cache =>, pool =>)');
    ok($pool->reset, 'reset');
    $inference->forward_pool($pool, \@tokens);
    cmp_ok($pool->n_allocations, '>=', 2, 'after reset the next forward allocates again');
};

subtest 'forward_batch' => sub {
    my @sequences = ([ @tokens[ 0 .. 4 ] ], [ @tokens[ 5 .. 8 ] ], [ $tokens[9] ], [ @tokens[ 10 .. 15 ] ]);
    my @single = map { [ $inference->forward($_) ] } @sequences;
    my $rows = $inference->forward_batch(\@sequences);
    is(ref $rows, 'ARRAY', 'an array reference');
    is(scalar @$rows, 4, 'one row per sequence');
    cmp_ok(max_abs_diff($rows->[$_], $single[$_]), '<=', 0.02, "sequence $_ equals its own forward") for 0 .. 3;
    my $named = $inference->forward_batch(sequences => \@sequences);
    cmp_ok(max_abs_diff($named->[1], $single[1]), '<=', 0.02, 'forward_batch(sequences => ...)');
    my $via = $inference->forward(sequences => \@sequences);
    cmp_ok(max_abs_diff($via->[2], $single[2]), '<=', 0.02, 'forward(sequences => ...)');
    my $pool = $inference->create_memory_pool;
    my $pooled = $inference->forward_batch_pool($pool, \@sequences);
    cmp_ok(max_abs_diff($pooled->[3], $single[3]), '<=', 0.02, 'forward_batch_pool');
    $pooled = $inference->forward_batch(sequences => \@sequences, pool => $pool);
    cmp_ok(max_abs_diff($pooled->[0], $single[0]), '<=', 0.02, 'forward_batch(pool =>)');

    my @caches = map { $inference->create_kv_cache } 1 .. 2;
    $inference->forward_batch(sequences => [ @sequences[ 0, 1 ] ], caches => \@caches);
    is_deeply([ map { $_->n_cached } @caches ], [ 5, 4 ], 'per-sequence caches: each holds its sequence');
    my $next = $inference->forward(sequences => [ [7], [8] ], caches => \@caches);
    my @a = $inference->forward([ @{ $sequences[0] }, 7 ]);
    my @b = $inference->forward([ @{ $sequences[1] }, 8 ]);
    cmp_ok(max_abs_diff($next->[0], \@a), '<=', 0.02, 'sequence 0 continued');
    cmp_ok(max_abs_diff($next->[1], \@b), '<=', 0.02, 'sequence 1 continued');
    $inference->forward_batch_pool(pool => $pool, sequences => [ [1], [2] ], caches => \@caches);
    is_deeply([ map { $_->n_cached } @caches ], [ 7, 6 ], 'forward_batch_pool with caches');

    eval { $inference->forward_batch(sequences => \@sequences, caches => \@caches) };
    like($@, qr/4 sequences but 2 caches/, 'one cache per sequence');
    my @fresh = map { $inference->create_kv_cache } 1 .. 2;
    eval { $inference->forward_batch(sequences => [ [1], [2] ], caches => [ $fresh[0], $fresh[0] ]) };
    like($@, qr/caches 0 and 1 are the same KV cache/, 'the same cache twice');
    is($fresh[0]->n_cached, 0, '... nothing computed');
    eval { $inference->forward_batch([]) };
    like($@, qr/no sequences/, 'no sequences');
    eval { $inference->forward_batch([ [1], [] ]) };
    like($@, qr/empty/, 'an empty sequence');
    eval { $inference->forward_batch([ [1], [ 2, $n_vocab ] ]) };
    like($@, qr/sequence 1 has token id $n_vocab at position 1, out of range \[0, $n_vocab\)/, 'an id out of range');
    eval { $inference->forward_batch([ [1], 'x' ]) };
    like($@, qr/sequence 1 must be an ARRAY reference/, 'a sequence that is not an array');
};

subtest 'fork: a child runs the parent\'s session' => sub {
    my $pid = fork;
    plan skip_all => "fork failed: $!" unless defined $pid;
    if (!$pid) {
        alarm 60;
        my @child = $inference->forward(\@tokens);
        require POSIX;
        POSIX::_exit(max_abs_diff(\@child, \@plain) < 1e-4 ? 0 : 1);
    }
    waitpid $pid, 0;
    is($?, 0, 'the same logits in the child');
    cmp_ok(max_abs_diff([ $inference->forward(\@tokens) ], \@plain), '<', 1e-4, 'and in the parent afterwards');
};

subtest 'profile' => sub {
    my $session = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
    my $empty = $session->profile;
    is($empty->{steps}, 0, 'no steps yet');
    is_deeply([ sort grep { $_ ne 'steps' } keys %$empty ], [ sort qw(build allocate inputs compute read sample callback) ],
        'every phase');
    $session->forward([ 1, 2, 3 ]);
    # greedy: a sampled token could be the end token and stop early
    $session->generate([ 1, 2 ], max_tokens => 3, greedy => 1, eos_token => $session->n_vocab - 1, callback => sub {0});
    my $p = $session->profile(reset => 1);
    is($p->{steps}, 1 + 3, 'one step per forward and per generated token but the last, plus the prompt');
    is($p->{compute}{count}, $p->{steps}, 'compute once a step');
    is($p->{sample}{count}, 3, 'sample once a token');
    is($p->{callback}{count}, 3 + 1, 'callbacks once a token and once a prompt batch');
    cmp_ok($p->{compute}{seconds}, '>', 0, 'compute takes time');
    is($session->profile->{steps}, 0, 'reset zeroes the counts');
    eval { $session->profile(rest => 1) };
    like($@, qr/profile: unknown option 'rest'/, 'unknown option');
};

done_testing;
