use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(smollm2 reference_cases);

my (undef, $inference) = smollm2();
my @prompt = (504, 3575, 282, 4649, 314);    # "The capital of France is"
# llama.cpp's greedy continuation: " Paris.\n\nThe United States has a population of ..."
my @expected = (7042, 30, 198, 198, 504, 1797, 1918, 553, 253, 2155, 282, 4723);

my @ids = $inference->generate(\@prompt, greedy => 1, max_tokens => 12);
is_deeply(\@ids, \@expected, 'greedy generation continues like llama.cpp (prompt not included)');
my $ref = $inference->generate(prompt => \@prompt, greedy => 1, max_tokens => 3);
is_deeply($ref, [ @expected[ 0 .. 2 ] ], 'scalar context: an array reference; prompt => ... works too');
is_deeply([ $inference->generate(\@prompt, max_tokens => 0) ], [], 'max_tokens 0 generates nothing');

subtest 'callback: once per token with (id, count); true stops' => sub {
    my @seen;
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 10,
        callback => sub { push @seen, [@_]; return 0 });
    is_deeply(\@seen, [ map { [ $got[$_], $_ + 1 ] } 0 .. $#got ], 'called with (token, count) for every token');
    is(scalar @got, 10, 'max_tokens');
    @seen = ();
    @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 10,
        callback => sub { push @seen, $_[0]; return $_[1] == 3 });
    is_deeply(\@got, [ @expected[ 0 .. 2 ] ], 'returning true stops after that token');
    is(scalar @seen, 3, 'no call after stopping');
};

subtest 'end of generation' => sub {
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 10, eos_token => 198);
    is_deeply(\@got, [ 7042, 30 ], 'eos_token stops, and is not returned');
    my ($case) = grep { @{ $_->{greedy} } < 32 } reference_cases('parity', 'smollm2-135m-q4_1', 'on');
    SKIP: {
        skip 'no reference case ending in an end-of-generation token', 1 unless $case;
        my @g = @{ $case->{greedy} };
        my $eog = pop @g;
        my @mine = $inference->generate($case->{tokens}, greedy => 1, max_tokens => 40);
        is_deeply(\@mine, \@g, "the model's end-of-generation token ($eog) stops");
    }
};

subtest 'stop strings, across token boundaries' => sub {
    # " Paris" "." "\n" "\n" "The": "\nThe" spans the last two.
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 20, stop => ["\nThe"]);
    is_deeply(\@got, [ @expected[ 0 .. 4 ] ], 'stops at the token that completes the string');
    @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 20, stop => [ 'nowhere', 's.' ]);
    is_deeply(\@got, [ 7042, 30 ], '"s." spans " Paris" and "."');
    @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 20, stop => 'United');
    is_deeply(\@got, [ @expected[ 0 .. 5 ] ], 'a single string');
};

subtest 'seeded sampling is reproducible' => sub {
    my %o = (max_tokens => 16, temperature => 1.2, top_k => 0, top_p => 1);
    my @a = $inference->generate(\@prompt, %o, seed => 11);
    my @b = $inference->generate(\@prompt, %o, seed => 11);
    is_deeply(\@a, \@b, 'same seed, same text');
    my @c = map { join ',', $inference->generate(\@prompt, %o, seed => $_) } 12 .. 14;
    my %distinct = map { $_ => 1 } @c, "@a";
    cmp_ok(scalar keys %distinct, '>', 1, 'other seeds differ');
    Lugh::srand(5);
    my @d = $inference->generate(\@prompt, %o);
    Lugh::srand(5);
    my @e = $inference->generate(\@prompt, %o);
    is_deeply(\@d, \@e, 'Lugh::srand makes unseeded generation reproducible');
    my @defaults = $inference->generate(\@prompt, max_tokens => 8, seed => 1);
    is(scalar @defaults, 8, 'default sampling (top_k 40, top_p 0.95, temperature 0.8) runs');
};

subtest 'a dying callback' => sub {
    my $calls = 0;
    eval { $inference->generate(\@prompt, max_tokens => 10, callback => sub { $calls++; die "stop here\n" }) };
    is($@, "stop here\n", 'the exception propagates unchanged');
    is($calls, 1, 'generation stopped at once');
    my $error = { code => 7 };
    eval { $inference->generate(\@prompt, max_tokens => 10, callback => sub { die $error }) };
    is($@, $error, 'an exception object is the same object');
    eval { $inference->generate(\@prompt, max_tokens => 10, callback => sub { die bless {}, 'My::Error' }) };
    isa_ok($@, 'My::Error', 'a blessed exception');
    my @after = $inference->generate(\@prompt, greedy => 1, max_tokens => 3);
    is_deeply(\@after, [ @expected[ 0 .. 2 ] ], 'the object stays usable');
};

subtest 'the callback may use the same session' => sub {
    my @inner;
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 2, callback => sub {
        my @l = $inference->forward([ $_[0] ]);
        push @inner, scalar @l;
        return 0;
    });
    is_deeply(\@got, [ @expected[ 0 .. 1 ] ], 'generation unaffected');
    is_deeply(\@inner, [ 49152, 49152 ], 'forward inside the callback works');
};

done_testing;
