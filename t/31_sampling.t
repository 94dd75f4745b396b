use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(smollm2);

my (undef, $inference) = smollm2();

my @flat = (0.5, 2.0, 1.0, 2.0, -1.0);
is($inference->sample(\@flat, greedy => 1), 1, 'greedy: the argmax, lowest id among equals');
is($inference->sample(\@flat, temperature => 0), 1, 'temperature 0 is greedy (no division by zero)');
is($inference->sample_top_p(\@flat, temperature => 0), 1, 'sample_top_p with temperature 0');
is($inference->sample_top_k(\@flat, temperature => 0), 1, 'sample_top_k with temperature 0');
is($inference->sample([ 1, 5, 3 ], top_k => 1, temperature => 10), 1, 'top_k 1 keeps only the best');
is($inference->sample_top_k([ 1, 5, 3 ], top_k => 1, temperature => 10), 1, 'sample_top_k top_k 1');
is($inference->sample([ 1, 9, 3 ], top_p => 0.01, temperature => 10), 1, 'a tiny top_p keeps only the best');
is($inference->sample([ 1, 5, 4.9 ], min_p => 1, top_k => 0, top_p => 1, temperature => 10), 1,
    'min_p 1 keeps only the best');

subtest 'penalties over a history' => sub {
    my @l = (3.0, 2.0, 1.0);
    is($inference->sample(\@l, greedy => 1, history => [0]), 0, 'no penalty by default');
    is($inference->sample(\@l, greedy => 1, history => [0], repeat_penalty => 2), 1, 'repeat_penalty');
    is($inference->sample(\@l, greedy => 1, history => [ 0, 0 ], frequency_penalty => 0.6), 1,
        'frequency_penalty counts repeats');
    is($inference->sample(\@l, greedy => 1, history => [0], frequency_penalty => 0.6), 0, '... once is not enough');
    is($inference->sample(\@l, greedy => 1, history => [0], presence_penalty => 1.5), 1, 'presence_penalty');
    is($inference->sample(\@l, greedy => 1, history => [ 0, 1, 1 ], repeat_penalty => 2, penalty_last_n => 2), 0,
        'penalty_last_n limits the history');
};

my @logits = map { sin($_ * 0.37) * 3 } 0 .. 99;
my %sampling = (temperature => 1, top_k => 0, top_p => 1);

subtest 'seed makes a draw reproducible' => sub {
    my @a = map { $inference->sample(\@logits, %sampling, seed => $_) } 1 .. 20;
    my @b = map { $inference->sample(\@logits, %sampling, seed => $_) } 1 .. 20;
    is_deeply(\@a, \@b, 'same seeds, same tokens');
    my %distinct = map { $_ => 1 } @a;
    cmp_ok(scalar keys %distinct, '>', 3, 'different seeds, different tokens');
    is($inference->sample_top_p(\@logits, seed => 7), $inference->sample_top_p(\@logits, seed => 7), 'sample_top_p');
    is($inference->sample_top_k(\@logits, seed => 7), $inference->sample_top_k(\@logits, seed => 7), 'sample_top_k');
};

subtest 'Lugh::srand seeds unseeded draws, and leaves perl rand alone' => sub {
    CORE::srand(123);
    my $perl_first = rand;
    CORE::srand(123);
    is(Lugh::srand(42), 42, 'srand returns the seed');
    my @a = map { $inference->sample(\@logits, %sampling) } 1 .. 20;
    is(rand, $perl_first, "perl's rand is untouched");
    Lugh::srand(42);
    my @b = map { $inference->sample(\@logits, %sampling) } 1 .. 20;
    is_deeply(\@a, \@b, 'the same sequence after the same srand');
    Lugh::srand(43);
    my @c = map { $inference->sample(\@logits, %sampling) } 1 .. 20;
    isnt("@a", "@c", 'another seed, another sequence');
    my $fresh = Lugh::srand();
    like($fresh, qr/\A\d+\z/, 'srand() picks and returns a seed');
};

subtest 'draws follow the distribution' => sub {
    my $first = grep { $inference->sample([ log(3), 0 ], %sampling, seed => $_) == 0 } 1 .. 4000;
    cmp_ok(abs($first / 4000 - 0.75), '<', 0.03, "p = 0.75 drawn $first times in 4000");
    my $cold = grep { $inference->sample([ log(3), 0 ], %sampling, temperature => 0.25, seed => $_) == 0 } 1 .. 2000;
    cmp_ok($cold / 2000, '>', 0.95, 'a low temperature sharpens it (p = 81/82)');
    my $top = grep { $inference->sample([ 2, 1, 0 ], %sampling, top_k => 2, seed => $_) == 2 } 1 .. 500;
    is($top, 0, 'top_k 2 never draws the third');
};

subtest "llama.cpp's samplers" => sub {
    is($inference->sample(\@flat, greedy => 1, logit_bias => { 1 => '-inf', 3 => '-inf' }), 2,
        "logit_bias '-inf' bans tokens");
    is($inference->sample(\@flat, greedy => 1, logit_bias => { 0 => 1.6 }), 0, 'a positive bias raises one');
    is($inference->sample([ 5, 4, 0 ], samplers => 'top_k;temperature', top_k => 1, seed => 3), 0,
        'samplers as a string of names');
    my @order = (seed => 11, temperature => 1, top_k => 0, top_p => 1, min_p => 0);
    my @draws = map { $inference->sample(\@logits, @order, seed => $_, samplers => ['temperature']) } 1 .. 20;
    my @same  = map { $inference->sample(\@logits, @order, seed => $_) } 1 .. 20;
    is_deeply(\@draws, \@same, 'with the other steps off, the order changes nothing');
    for my $mode (1, 2) {
        my @a = map { $inference->sample(\@logits, mirostat_mode => $mode, seed => $_) } 1 .. 10;
        my @b = map { $inference->sample(\@logits, mirostat => $mode, seed => $_) } 1 .. 10;
        is_deeply(\@a, \@b, "mirostat $mode: seeded draws repeat (mirostat is mirostat_mode)");
    }
    my @dry = (dry_multiplier => 5, dry_allowed_length => 1, greedy => 1);
    is($inference->sample([ 3, 4, 1, 0 ], greedy => 1, history => [ 0, 1, 0 ]), 1, 'without DRY, the best');
    is($inference->sample([ 3, 4, 1, 0 ], @dry, history => [ 0, 1, 0 ]), 0,
        'DRY: the token that would repeat "0 1" loses 5');
    is($inference->sample([ 3, 2, 11, 0 ], @dry, history => [ 0, 1, 2, 0, 1 ], dry_sequence_breakers => []), 0,
        'DRY: the token that would repeat "0 1 2" loses 5 * 1.75');
    is($inference->sample([ 3, 2, 11, 0 ], @dry, history => [ 0, 1, 2, 0, 1 ], dry_base => 1.5), 2,
        '... with base 1.5, less than its lead');
};

subtest 'options are checked' => sub {
    eval { $inference->sample(\@flat, tempreature => 1) };
    like($@, qr/^Lugh::Inference->sample: unknown option 'tempreature' \(valid options: .*temperature/,
        'unknown option lists the valid ones');
    eval { $inference->sample_top_p(\@flat, top_k => 3) };
    like($@, qr/unknown option 'top_k' \(valid options: seed, temperature, top_p\)/, 'sample_top_p options');
    eval { $inference->sample_top_k(\@flat, top_p => 0.5) };
    like($@, qr/unknown option 'top_p' \(valid options: seed, temperature, top_k\)/, 'sample_top_k options');
    for my $bad ([ temperature => -1 ], [ top_p => 0 ], [ top_p => 1.5 ], [ min_p => 2 ], [ repeat_penalty => 0 ],
        [ top_k => -1 ], [ seed => -5 ], [ temperature => 'hot' ])
    {
        eval { $inference->sample(\@flat, @$bad) };
        like($@, qr/^Lugh::Inference->sample: $bad->[0] .* at \S+ line \d+\.$/, "bad $bad->[0] => $bad->[1]");
    }
    for my $bad ([ typical_p => 2 ], [ xtc_probability => -1 ], [ xtc_threshold => 1.5 ], [ mirostat_mode => 3 ],
        [ dry_multiplier => -1 ], [ dry_base => 'inf' ], [ mirostat_tau => -1 ], [ top_n_sigma => 'nan' ],
        [ dry_allowed_length => -1 ], [ dry_sequence_breakers => 'x' ])
    {
        eval { $inference->sample(\@flat, @$bad) };
        like($@, qr/^Lugh::Inference->sample: $bad->[0] .* at \S+ line \d+\.$/, "bad $bad->[0] => $bad->[1]");
    }
    eval { $inference->sample(\@flat, samplers => [qw(top_k warp)]) };
    like($@, qr/samplers: unknown sampler 'warp'/, 'an unknown sampler name');
    eval { $inference->sample(\@flat, logit_bias => { abc => 1 }) };
    like($@, qr/logit_bias: 'abc' is not a token id/, 'a logit_bias key that is no token id');
    eval { $inference->sample(\@flat, logit_bias => { 99 => 1 }) };
    like($@, qr/logit_bias: token 99 is out of range \[0, 5\)/, 'a logit_bias token out of range');
    eval { $inference->sample(\@flat, logit_bias => [ 1, 2 ]) };
    like($@, qr/logit_bias must be a HASH reference/, 'logit_bias must be a hash');
    eval { $inference->sample([]) };
    like($@, qr/logits are empty/, 'empty logits');
    eval { $inference->sample('x') };
    like($@, qr/array reference of logits/, 'logits not an array');
    eval { $inference->sample([ 1, 'abc' ]) };
    like($@, qr/logits element 1 must be a number/, 'a logit that is not a number');
    eval { $inference->sample(\@flat, history => [ 1, 99999 ]) };
    like($@, qr/history has token id 99999 at position 1, out of range \[0, 49152\)/, 'history ids are checked');
    eval { $inference->sample(\@flat, 'temperature') };
    like($@, qr/name => value pairs/, 'odd options');
};

done_testing;
