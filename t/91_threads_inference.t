use strict;
use warnings;
use Config;
use Test::More;
use lib 't/lib';

BEGIN {
    plan skip_all => 'this perl has no ithreads' unless $Config{useithreads};
}
use threads;
use LughTestInference qw(smollm2 argmax);

# Lugh's objects are not copied into new threads (CLONE_SKIP): starting a
# thread while they are alive must not crash, double-free, or break them.

my ($model, $inference) = smollm2();
my $cache = $inference->create_kv_cache;
my $pool  = $inference->create_memory_pool;
$inference->forward_cache($cache, [ 504, 3575 ]);

for my $class (qw(Lugh::Model Lugh::Inference Lugh::KVCache Lugh::MemoryPool)) {
    is($class->CLONE_SKIP, 1, "$class: CLONE_SKIP");
}

my $thr = threads->create({ context => 'list' }, sub {
    # The clones are empty: using them croaks instead of touching the parent's objects.
    my $ok = eval { $inference->n_ctx; 1 } ? 'usable' : 'not an object';
    # A thread may load its own model and run it.
    my ($m, $i) = smollm2();
    my @l = $i->forward([ 504, 3575, 282, 4649, 314 ]);
    return ($ok, argmax(\@l));
});
my ($clone_state, $next) = $thr->join;
is($clone_state, 'not an object', 'objects are not cloned into the thread');
is($next, 7042, 'the thread ran its own session');

is($cache->n_cached, 2, 'the parent\'s cache is intact');
my @l = $inference->forward_cache_pool($cache, $pool, [ 282, 4649, 314 ]);
is(argmax(\@l), 7042, 'the parent\'s objects still work');

my @threads = map { threads->create(sub { 1 }) } 1 .. 3;
$_->join for @threads;
pass('several threads started and joined with objects alive');
undef $_ for $cache, $pool, $inference, $model;
pass('freed afterwards without a crash');

done_testing;
