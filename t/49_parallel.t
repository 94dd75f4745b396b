# Lugh::Batch and Lugh::Inference->generate_parallel: many generations at
# once on one session (continuous batching). Greedy results equal the
# sequential generate runs (on the test models when fetched, else on the tiny
# model); per-request options; cancel; a dying callback; hostile arguments.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir  = tempdir(CLEANUP => 1);
my $tiny = Lugh::Model->new(model => tiny_model($dir));
my $inf  = Lugh::Inference->new(model => $tiny, n_threads => 1, n_ctx => 64);
my $tok  = Lugh::Tokenizer->new(model => $tiny);
my @texts = ('Once upon a time the cat', 'the dog sat on', 'a mat', 'Once upon a time the cat sat on the mat',
    'cat cat cat', 'the', 'time upon once', 'sat the mat on');
my @prompts = map { [ $tok->encode($_) ] } @texts;

sub solo { my ($i, $p, %o) = @_; return [ $i->generate($p, max_tokens => 8, greedy => 1, %o) ] }

subtest 'greedy results equal sequential generate, in request order' => sub {
    my @want = map { solo($inf, $_) } @prompts;
    for my $det (0, 1) {
        my $r = $inf->generate_parallel([ map { { prompt => $_, max_tokens => 8, greedy => 1 } } @prompts ],
            slots => 4, deterministic => $det);
        is(scalar @$r, scalar @prompts, "one result per request (deterministic $det)");
        is_deeply([ map { $_->{tokens} } @$r ], \@want, "tokens equal (deterministic $det)");
        for my $i (0 .. $#$r) {
            is($r->[$i]{usage}{prompt_tokens}, scalar @{ $prompts[$i] }, "usage: prompt tokens of $i");
            is($r->[$i]{usage}{completion_tokens}, scalar @{ $r->[$i]{tokens} }, "usage: completion tokens of $i");
            like($r->[$i]{finish_reason}, qr/\A(?:eos|max_tokens)\z/, "finish reason of $i");
        }
    }
    # a text prompt is tokenized as generate's callers do
    my $r = $inf->generate_parallel([ { prompt => $texts[0], max_tokens => 8, greedy => 1 } ]);
    is_deeply($r->[0]{tokens}, $want[0], 'a text prompt');
};

subtest 'per-request options' => sub {
    my @req = (
        { prompt => $prompts[0], max_tokens => 3, greedy => 1 },
        { prompt => $prompts[1], max_tokens => 6, temperature => 0.8, seed => 7 },
        { prompt => $prompts[2], max_tokens => 5, greedy => 1, logprobs => 2 },
    );
    my $r = $inf->generate_parallel(\@req, slots => 2);
    ok(@{ $r->[0]{tokens} } <= 3, 'max_tokens 3');
    is_deeply($r->[1]{tokens}, [ $inf->generate($prompts[1], max_tokens => 6, temperature => 0.8, seed => 7) ],
        'a seeded sampler gives its solo result');
    is(scalar @{ $r->[2]{logprobs} }, scalar @{ $r->[2]{tokens} }, 'logprobs: one entry a token');
    is(scalar @{ $r->[2]{logprobs}[0]{top} }, 2, 'logprobs: the 2 best alternatives') if @{ $r->[2]{tokens} };
    my $seen = '';
    my $stop = $inf->generate_parallel([ { prompt => $prompts[0], max_tokens => 8, greedy => 1,
        on_token => sub { $seen .= $_[0]{token} . ','; 1 } } ]);
    is(scalar @{ $stop->[0]{tokens} }, 1, 'on_token returning true stops after that token');
    is($stop->[0]{finish_reason}, 'callback', 'finish reason callback');
    is($seen, $stop->[0]{tokens}[0] . ',', 'on_token saw the token');
};

subtest 'Lugh::Batch: add while others run, cancel, slot reuse' => sub {
    my $b = Lugh::Batch->new($inf, slots => 2, max_queued => 3);
    is($b->slots, 2, 'slots');
    my @ids = map { $b->add(prompt => $prompts[$_], max_tokens => 8, greedy => 1) } 0 .. 2;
    is($b->queued, 3, 'queued until a step admits them');
    my @events = $b->step;
    is($b->active, 2, 'two slots busy');
    is($b->queued, 1, 'one waiting');
    my $late = $b->add(prompt => $prompts[3], max_tokens => 8, greedy => 1);
    my $done = $b->cancel($ids[1]);
    is($done->{finish_reason}, 'cancelled', 'cancel returns the done event');
    is($b->cancel($ids[1]), undef, 'a finished id is unknown');
    my %tokens;
    for my $e (@events, $b->run) { }
    my $b2 = Lugh::Batch->new($inf, slots => 2);
    my %want = map { $_ => solo($inf, $prompts[$_]) } 0 .. 3;
    my %index;
    $index{ $b2->add(prompt => $prompts[$_], max_tokens => 8, greedy => 1) } = $_ for 0 .. 1;
    until ($b2->is_idle) {
        for my $e ($b2->step) {
            push @{ $tokens{ $index{ $e->{id} } } }, $e->{token} if $e->{type} eq 'token';
            # requests added while others run
            if ($e->{type} eq 'done' && !$index{late}++) {
                $index{ $b2->add(prompt => $prompts[$_], max_tokens => 8, greedy => 1) } = $_ for 2 .. 3;
            }
        }
    }
    is_deeply([ map { $tokens{$_} // [] } 0 .. 3 ], [ map { $want{$_} } 0 .. 3 ], 'each equals its solo run');
    # the same prompt again in a warm slot: its cached prefix is used
    my $id = $b2->add(prompt => $prompts[3], max_tokens => 2, greedy => 1);
    my ($fin) = grep { $_->{type} eq 'done' } $b2->run;
    cmp_ok($fin->{usage}{cached_tokens}, '>', 0, 'a slot holding the prompt reuses it');
    $b2->add(prompt => $prompts[3], max_tokens => 2, greedy => 1, cache_prompt => 0);
    ($fin) = $b2->run;
    is($fin->{usage}{cached_tokens}, 0, 'cache_prompt => 0 evaluates it all');
};

subtest 'a dying callback' => sub {
    my $calls = 0;
    my $err = do {
        local $@;
        eval {
            $inf->generate_parallel([ { prompt => $prompts[0], max_tokens => 8, greedy => 1,
                on_token => sub { $calls++; die "boom\n" } }, { prompt => $prompts[1], max_tokens => 8 } ]);
        };
        $@;
    };
    is($err, "boom\n", 'the error comes out unchanged');
    is($calls, 1, 'after the first call');
    my $b = Lugh::Batch->new($inf, slots => 2);
    my $id = $b->add(prompt => $prompts[0], max_tokens => 8, greedy => 1, on_token => sub { die "bang\n" });
    my $other = $b->add(prompt => $prompts[1], max_tokens => 4, greedy => 1);
    ok(!eval { $b->run; 1 }, 'run dies');
    is($@, "bang\n", 'with the error');
    is($b->cancel($id), undef, 'the request whose callback died has ended');
    my @rest = $b->run;
    is_deeply([ map { $_->{id} } @rest ], [$other], 'the other request finishes');
};

subtest 'hostile arguments' => sub {
    croaks_like(sub { $inf->generate_parallel('x') }, qr/Usage: /, 'not an array');
    croaks_like(sub { $inf->generate_parallel({}) }, qr/Usage: /, 'a hash');
    croaks_like(sub { $inf->generate_parallel([]) }, qr/the list of requests is empty/, 'empty');
    croaks_like(sub { $inf->generate_parallel(['x']) }, qr/request 0 must be a hash reference/, 'not hashes');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [1], bogus => 1 } ]) },
        qr/request 0: .*unknown option 'bogus'/, 'a bad option');
    croaks_like(sub { $inf->generate_parallel([ { max_tokens => 3 } ]) }, qr/request 0: missing prompt/,
        'no prompt');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [] } ]) }, qr/prompt is empty/, 'empty prompt');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [1e9] } ]) }, qr/out of range|range/, 'bad token');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [ (1) x 60 ], max_tokens => 20 } ]) },
        qr/needs \d+ positions/, 'a prompt too long for a slot');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [1] } ], slots => 0) }, qr/slots must be/, 'slots 0');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [1] } ], slots => -1) }, qr/slots must be/, 'slots -1');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [1] } ], slots => 'x') }, qr/slots/, 'slots x');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [1] } ], bogus => 1) }, qr/unknown option 'bogus'/,
        'a bad option of the call');
    croaks_like(sub { $inf->generate_parallel([ { prompt => [1], on_token => 'x' } ]) },
        qr/on_token must be a code reference/, 'on_token not code');
    croaks_like(sub { Lugh::Batch->new() }, qr/Usage: /, 'new without a session');
    croaks_like(sub { Lugh::Batch->new('x') }, qr/must be a Lugh::Inference object/, 'not a session');
    croaks_like(sub { Lugh::Batch->new($inf, slots => 1e6) }, qr/slots must be/, 'too many slots');
    croaks_like(sub { Lugh::Batch->new($inf, slots => 2, 'odd') }, qr/name => value pairs/, 'odd options');
    my $b = Lugh::Batch->new($inf, slots => 1, max_queued => 1);
    $b->add(prompt => [1], max_tokens => 1) for 1 .. 2;    # one for the slot, one waiting
    croaks_like(sub { $b->add(prompt => [1], max_tokens => 1) }, qr/the batch is full/, 'too many queued');
    croaks_like(sub { $b->cancel('x') }, qr/request id/, 'cancel of a non-number');
    croaks_like(sub { $b->cancel(-1) }, qr/request id/, 'cancel of a negative id');
    is($b->cancel(12345), undef, 'cancel of an unknown id');
    croaks_like(sub { Lugh::Batch::step('x') }, qr/Usage: /, 'step on a string');
};

subtest 'the test models: equal to sequential runs' => sub {
    my @names = grep { model_path($_) } qw(smollm2-135m-q4_1);
    plan skip_all => 'test model smollm2-135m-q4_1 not fetched (perl t/fetch-models)' unless @names;
    my $model = Lugh::Model->new(model => model_path($names[0]));
    my $i = Lugh::Inference->new(model => $model, n_ctx => 256);
    my $t = Lugh::Tokenizer->new(model => $model);
    my @p = map { [ $t->encode($_) ] } ('The capital of France is', 'def add(a, b):', 'Once upon a time,',
        'Water boils at', 'The three primary colours are', 'In 1492,', 'My favourite food is', 'Hello, my name');
    my @want = map { [ $i->generate($_, max_tokens => 12, greedy => 1) ] } @p;
    for my $det (0, 1) {
        my $r = $i->generate_parallel([ map { { prompt => $_, max_tokens => 12, greedy => 1 } } @p ],
            slots => 4, deterministic => $det);
        is_deeply([ map { $_->{tokens} } @$r ], \@want, "8 prompts over 4 slots (deterministic $det)");
    }
};

done_testing;
