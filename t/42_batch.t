use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(smollm2 max_abs_diff);

my (undef, $inference) = smollm2();
my @sequences = ([ 504, 3575, 282, 4649, 314 ], [ 6403, 1980, 253, 655 ], [ 1604 ], [ 28, 260, 2240, 282, 1315, 27108 ]);
my @single = map { [ $inference->forward($_) ] } @sequences;

my $rows = $inference->forward_batch(\@sequences);
is(ref $rows, 'ARRAY', 'an array reference');
is(scalar @$rows, scalar @sequences, 'one row per sequence');
for my $i (0 .. $#sequences) {
    cmp_ok(max_abs_diff($rows->[$i], $single[$i]), '<=', 0.02, "sequence $i equals its own forward");
}

my $named = $inference->forward_batch(sequences => \@sequences);
cmp_ok(max_abs_diff($named->[1], $single[1]), '<=', 0.02, 'forward_batch(sequences => ...)');
my $via_forward = $inference->forward(sequences => \@sequences);
cmp_ok(max_abs_diff($via_forward->[2], $single[2]), '<=', 0.02, 'forward(sequences => ...)');
my $pool = $inference->create_memory_pool;
my $pooled = $inference->forward_batch_pool($pool, \@sequences);
cmp_ok(max_abs_diff($pooled->[3], $single[3]), '<=', 0.02, 'forward_batch_pool');
$pooled = $inference->forward_batch(sequences => \@sequences, pool => $pool);
cmp_ok(max_abs_diff($pooled->[0], $single[0]), '<=', 0.02, 'forward_batch(pool =>)');

subtest 'per-sequence caches continue side by side' => sub {
    my @caches = map { $inference->create_kv_cache } 1 .. 2;
    $inference->forward_batch(sequences => [ @sequences[ 0, 1 ] ], caches => \@caches);
    is_deeply([ map { $_->n_cached } @caches ], [ 5, 4 ], 'each cache holds its sequence');
    my $next = $inference->forward(sequences => [ [7042], [28] ], caches => \@caches);
    my @a = $inference->forward([ @{ $sequences[0] }, 7042 ]);
    my @b = $inference->forward([ @{ $sequences[1] }, 28 ]);
    cmp_ok(max_abs_diff($next->[0], \@a), '<=', 0.02, 'sequence 0 continued');
    cmp_ok(max_abs_diff($next->[1], \@b), '<=', 0.02, 'sequence 1 continued');
    is_deeply([ map { $_->n_cached } @caches ], [ 6, 5 ], 'both grew by one');
    my $c = $inference->forward_batch_pool(pool => $pool, sequences => [ [1], [2] ], caches => \@caches);
    is_deeply([ map { $_->n_cached } @caches ], [ 7, 6 ], 'forward_batch_pool with caches');
};

subtest 'bad batches' => sub {
    my @caches = map { $inference->create_kv_cache } 1 .. 2;
    eval { $inference->forward_batch(sequences => \@sequences, caches => \@caches) };
    like($@, qr/4 sequences but 2 caches/, 'one cache per sequence');
    eval { $inference->forward_batch(sequences => [ [1], [2] ], caches => [ $caches[0], $caches[0] ]) };
    like($@, qr/caches 0 and 1 are the same KV cache/, 'the same cache twice');
    is($caches[0]->n_cached, 0, '... nothing computed');
    eval { $inference->forward_batch([]) };
    like($@, qr/no sequences/, 'no sequences');
    eval { $inference->forward_batch([ [1], [] ]) };
    like($@, qr/empty/, 'an empty sequence');
    eval { $inference->forward_batch([ [1], [ 2, 49152 ] ]) };
    like($@, qr/sequence 1 has token id 49152 at position 1, out of range \[0, 49152\)/, 'an id out of range');
    eval { $inference->forward_batch([ [1], 'x' ]) };
    like($@, qr/sequence 1 must be an ARRAY reference/, 'a sequence that is not an array');
    eval { $inference->forward_batch(sequences => [[1]], cache => $caches[0]) };
    like($@, qr/unknown option 'cache'/, 'cache is not an option of forward_batch');
    eval { $inference->forward(tokens => [1], caches => \@caches) };
    like($@, qr/caches needs sequences/, 'caches without sequences');
};

done_testing;
