use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(smollm2 argmax max_abs_diff check_rollback_and_clear check_cache_spellings
    check_overflow_refused);

my ($model, $inference) = smollm2();
my @tokens = (6403, 1980, 253, 655, 28, 260, 2240, 282);    # "Once upon a time, the city of"

my $cache = $inference->create_kv_cache;
isa_ok($cache, 'Lugh::KVCache');
is($cache->n_cached, 0, 'a new cache is empty');
is($cache->n_ctx, $inference->n_ctx, 'n_ctx is the session\'s');
is($cache->n_layer, 30, 'n_layer');

subtest 'token by token equals one forward over the whole sequence' => sub {
    my $c = $inference->create_kv_cache;
    my @prefix = @tokens[ 0 .. 2 ];
    my @step = $inference->forward_cache($c, \@prefix);
    is($c->n_cached, 3, 'prefill appends');
    for my $n (3 .. $#tokens) {
        @step = $inference->forward_cache($c, [ $tokens[$n] ]);
        my @full = $inference->forward([ @tokens[ 0 .. $n ] ]);
        cmp_ok(max_abs_diff(\@step, \@full), '<=', 0.02, "position $n");
    }
    is($c->n_cached, scalar @tokens, 'one position per token');
};

subtest 'all spellings append to the cache' => sub {
    my $c = $inference->create_kv_cache;
    check_cache_spellings($inference, $c, \@tokens);
};

subtest 'resize rolls back, clear empties' => sub {
    my $c = $inference->create_kv_cache;
    $inference->forward_cache($c, \@tokens);
    check_rollback_and_clear($inference, $c, \@tokens, 9999);
};

subtest 'overflowing n_ctx croaks before computing' => sub {
    my (undef, $small) = smollm2(n_ctx => 8);
    my $c = check_overflow_refused($small, \@tokens);
    my @fits = $small->forward_cache($c, [ @tokens[ 6, 7 ] ]);
    is($c->n_cached, 8, 'exactly full is fine');
    eval { $small->forward([ (1) x 9 ]) };
    like($@, qr/context|n_ctx|capacity/i, 'a longer sequence than n_ctx croaks without a cache too');
};

subtest 'caches belong to their session and keep it alive' => sub {
    my (undef, $other) = smollm2();
    eval { $other->forward_cache($cache, [1]) };
    like($@, qr/belongs to another Lugh::Inference/, 'a cache of another session croaks');
    my ($m, $i) = smollm2();
    my $c = $i->create_kv_cache;
    $i->forward_cache($c, [ @tokens[ 0 .. 2 ] ]);
    undef $i;
    undef $m;
    is($c->n_cached, 3, 'the cache outlives its session and model objects');
    undef $c;
    pass('freed in that order without a crash');
};

{
    # In void context forward only fills the cache (no list of logits is
    # built); the next call in list context continues from there.
    my $c = $inference->create_kv_cache;
    $inference->forward(cache => $c, tokens => [ 504, 3575, 282 ]);
    is($c->n_cached, 3, 'forward in void context fills the cache');
    my @next = $inference->forward(cache => $c, tokens => [ 4649 ]);
    is(scalar @next, $inference->n_vocab, 'then a list of n_vocab logits');
    my @whole = $inference->forward([ 504, 3575, 282, 4649 ]);
    cmp_ok(max_abs_diff(\@next, \@whole), '<=', 0.02, 'the same logits as the whole sequence');
}

eval { Lugh::KVCache->new(n_ctx => 10) };
like($@, qr/create_kv_cache/, 'Lugh::KVCache->new points to create_kv_cache');

done_testing;
