use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(smollm2 max_abs_diff);

my (undef, $inference) = smollm2();
my @tokens = (6403, 1980, 253, 655, 28, 260, 2240, 282);
my @plain = $inference->forward(\@tokens);

my $pool = $inference->create_memory_pool;
isa_ok($pool, 'Lugh::MemoryPool');
is($pool->backend, $inference->backend, 'backend is the session\'s');
is($pool->n_allocations, 0, 'nothing allocated yet');

my @logits = $inference->forward_pool($pool, \@tokens);
cmp_ok(max_abs_diff(\@logits, \@plain), '<', 1e-4, 'forward_pool gives the same logits');
is($pool->n_allocations, 1, 'one allocation');

@logits = $inference->forward_with_pool($pool, \@tokens);
cmp_ok(max_abs_diff(\@logits, \@plain), '<', 1e-4, 'forward_with_pool');
@logits = $inference->forward(tokens => \@tokens, pool => $pool);
cmp_ok(max_abs_diff(\@logits, \@plain), '<', 1e-4, 'forward(pool =>)');
@logits = $inference->forward_pool(pool => $pool, tokens => \@tokens);
cmp_ok(max_abs_diff(\@logits, \@plain), '<', 1e-4, 'forward_pool named');
$inference->forward_pool($pool, [ @tokens[ 0 .. 2 ] ]);
$inference->forward_pool($pool, [ $tokens[0] ]);
is($pool->n_allocations, 1, 'same or smaller inputs: no new allocation');

subtest 'with a cache' => sub {
    my $cache = $inference->create_kv_cache;
    $inference->forward_cache_pool($cache, $pool, [ @tokens[ 0 .. 5 ] ]);
    my @step = $inference->forward_cache_pool(cache => $cache, pool => $pool, tokens => [ @tokens[ 6, 7 ] ]);
    cmp_ok(max_abs_diff(\@step, \@plain), '<=', 0.02, 'forward_cache_pool positional then named');
    is($cache->n_cached, 8, 'the cache grew');
    $inference->forward(cache => $cache, pool => $pool, tokens => [1]);
    is($cache->n_cached, 9, 'forward(cache =>, pool =>)');
};

ok($pool->reset, 'reset');
$inference->forward_pool($pool, \@tokens);
cmp_ok($pool->n_allocations, '>=', 2, 'after reset the next forward allocates again');

subtest 'pools belong to their session and keep it alive' => sub {
    my (undef, $other) = smollm2();
    eval { $other->forward_pool($pool, [1]) };
    like($@, qr/belongs to another Lugh::Inference/, 'a pool of another session croaks');
    my (undef, $i) = smollm2();
    my $p = $i->create_memory_pool;
    undef $i;
    is($p->backend, $inference->backend, 'the pool outlives its session object');
};

eval { Lugh::MemoryPool->new };
like($@, qr/create_memory_pool/, 'Lugh::MemoryPool->new points to create_memory_pool');

done_testing;
