# Sampling and generation on a tiny synthetic model (t/lib/LughTest/TinyModel.pm):
# the samplers' options and reproducibility, and generate's greedy
# agreement with forward, max_tokens, callbacks, end-of-generation tokens and
# stop strings across token boundaries. Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use List::Util qw(max);
use lib 't/lib';
use LughTest::TinyModel qw(tiny_model);
use LughTestInference qw(argmax);
use Lugh;

binmode Test::More->builder->$_, ':encoding(UTF-8)' for qw(output failure_output todo_output);

my $dir = tempdir(CLEANUP => 1);
my $model = Lugh::Model->new(model => tiny_model($dir));
my $tok = Lugh::Tokenizer->new(model => $model);
my $inference = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 128);
my $n_vocab = $inference->n_vocab;
my @prompt = $tok->encode('Once upon a time, the cat');

subtest 'sample: greedy and the filters' => sub {
    my @flat = (0.5, 2.0, 1.0, 2.0, -1.0);
    is($inference->sample(\@flat, greedy => 1), 1, 'greedy: the argmax, lowest id among equals');
    is($inference->sample(\@flat, temperature => 0), 1, 'temperature 0 is greedy');
    is($inference->sample_top_p(\@flat, temperature => 0), 1, 'sample_top_p with temperature 0');
    is($inference->sample_top_k(\@flat, temperature => 0), 1, 'sample_top_k with temperature 0');
    is($inference->sample([ 1, 5, 3 ], top_k => 1, temperature => 10), 1, 'top_k 1 keeps only the best');
    is($inference->sample([ 1, 9, 3 ], top_p => 0.01, temperature => 10), 1, 'a tiny top_p keeps only the best');
    is($inference->sample([ 1, 5, 4.9 ], min_p => 1, top_k => 0, top_p => 1, temperature => 10), 1,
        'min_p 1 keeps only the best');
    my @l = (3.0, 2.0, 1.0);
    is($inference->sample(\@l, greedy => 1, history => [0], repeat_penalty => 2), 1, 'repeat_penalty');
    is($inference->sample(\@l, greedy => 1, history => [ 0, 0 ], frequency_penalty => 0.6), 1, 'frequency_penalty');
    is($inference->sample(\@l, greedy => 1, history => [0], presence_penalty => 1.5), 1, 'presence_penalty');
    is($inference->sample(\@l, greedy => 1, history => [ 0, 1, 1 ], repeat_penalty => 2, penalty_last_n => 2), 0,
        'penalty_last_n limits the history');
    my @logits = $inference->forward(\@prompt);
    is($inference->sample(\@logits, greedy => 1), argmax(\@logits), 'greedy on real logits is their argmax');
    my $drawn = $inference->sample(\@logits, seed => 3);
    ok($drawn >= 0 && $drawn < $n_vocab, 'a draw is a token id');
};

subtest 'seeded sampling is reproducible' => sub {
    my @logits = $inference->forward(\@prompt);
    my %o = (temperature => 1.5, top_k => 0, top_p => 1);
    my @a = map { $inference->sample(\@logits, %o, seed => $_) } 1 .. 20;
    my @b = map { $inference->sample(\@logits, %o, seed => $_) } 1 .. 20;
    is_deeply(\@a, \@b, 'same seeds, same tokens');
    my %distinct = map { $_ => 1 } @a;
    cmp_ok(scalar keys %distinct, '>', 3, 'different seeds, different tokens');
    is($inference->sample_top_p(\@logits, seed => 7), $inference->sample_top_p(\@logits, seed => 7), 'sample_top_p');
    is($inference->sample_top_k(\@logits, seed => 7), $inference->sample_top_k(\@logits, seed => 7), 'sample_top_k');
    CORE::srand(123);
    my $perl_first = rand;
    CORE::srand(123);
    is(Lugh::srand(42), 42, 'Lugh::srand returns the seed');
    my @c = map { $inference->sample(\@logits, %o) } 1 .. 20;
    is(rand, $perl_first, "perl's rand is untouched");
    Lugh::srand(42);
    is_deeply([ map { $inference->sample(\@logits, %o) } 1 .. 20 ], \@c, 'the same sequence after the same srand');
    my $top = grep { $inference->sample([ 2, 1, 0 ], %o, top_k => 2, seed => $_) == 2 } 1 .. 300;
    is($top, 0, 'top_k 2 never draws the third');
    my $first = grep { $inference->sample([ log(3), 0 ], %o, temperature => 1, seed => $_) == 0 } 1 .. 2000;
    cmp_ok(abs($first / 2000 - 0.75), '<', 0.04, "p = 0.75 drawn $first times in 2000");
};

# Greedy generation, and the same tokens step by step with forward.
my @greedy = $inference->generate(\@prompt, greedy => 1, max_tokens => 16);
subtest 'greedy generation follows forward' => sub {
    cmp_ok(scalar @greedy, '>=', 1, 'generated something') or return;
    note scalar(@greedy) . ' tokens: ' . join ' ', map { $tok->token_to_text($_) } @greedy;
    cmp_ok(scalar @greedy, '<=', 16, 'at most max_tokens');
    ok(!(grep { $_ < 0 || $_ >= $n_vocab } @greedy), 'token ids in range');
    my @seen = @prompt;
    my $worst = 0;
    for my $t (@greedy) {
        my @l = $inference->forward(\@seen);
        # the chosen token is the most likely one (up to rounding between the paths)
        $worst = max($worst, $l[ argmax(\@l) ] - $l[$t]);
        push @seen, $t;
    }
    cmp_ok($worst, '<', 0.02, 'each token is the argmax of forward over the text so far');
    if (@greedy < 16) {
        my @l = $inference->forward(\@seen);
        ok($tok->is_eog(argmax(\@l)), 'stopped early: the next token ends generation');
    }
    is_deeply([ $inference->generate(\@prompt, greedy => 1, max_tokens => 16) ], \@greedy, 'deterministic');
    my $ref = $inference->generate(prompt => \@prompt, greedy => 1, max_tokens => 3);
    is_deeply($ref, [ @greedy[ 0 .. min3(2) ] ], 'scalar context: an array reference; prompt => ... works too');
    is_deeply([ $inference->generate(\@prompt, max_tokens => 0) ], [], 'max_tokens 0 generates nothing');
    my @fa = Lugh::Inference->new(model => $model, n_threads => 1, flash_attn => 1, n_batch => 3)
        ->generate(\@prompt, greedy => 1, max_tokens => 4, eos_token => $n_vocab - 1);
    is(scalar @fa, 4, 'flash attention on, the prompt in batches of 3: generates too');
};

sub min3 { my ($i) = @_; return $i < $#greedy ? $i : $#greedy }

subtest 'callback, eos_token' => sub {
    my @seen;
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 10, eos_token => $n_vocab - 1,
        callback => sub { push @seen, [@_]; return 0 });
    is(scalar @got, 10, 'max_tokens (eos_token replaces the model\'s end-of-generation tokens)');
    is_deeply(\@seen, [ map { [ $got[$_], $_ + 1 ] } 0 .. $#got ], 'called with (token, count) for every token');
    @seen = ();
    my @three = $inference->generate(\@prompt, greedy => 1, max_tokens => 10, eos_token => $n_vocab - 1,
        callback => sub { push @seen, $_[0]; return $_[1] == 3 });
    is_deeply(\@three, [ @got[ 0 .. 2 ] ], 'returning true stops after that token');
    is(scalar @seen, 3, 'no call after stopping');
    my $k = 4;
    $k-- while $k > 0 && grep { $_ == $got[$k] } @got[ 0 .. $k - 1 ];
    my @until = $inference->generate(\@prompt, greedy => 1, max_tokens => 10, eos_token => $got[$k]);
    is_deeply(\@until, [ @got[ 0 .. $k - 1 ] ], 'eos_token stops, and is not returned');
    my $calls = 0;
    eval { $inference->generate(\@prompt, max_tokens => 10, callback => sub { $calls++; die "stop here\n" }) };
    is($@, "stop here\n", 'a dying callback: the exception propagates unchanged');
    is($calls, 1, 'generation stopped at once');
    my $error = { code => 7 };
    eval { $inference->generate(\@prompt, max_tokens => 10, callback => sub { die $error }) };
    is($@, $error, 'an exception object is the same object');
    my @inner;
    my @two = $inference->generate(\@prompt, greedy => 1, max_tokens => 2, eos_token => $n_vocab - 1,
        callback => sub { push @inner, scalar(my @l = $inference->forward([ $_[0] ])); return 0 });
    is_deeply(\@two, [ @got[ 0, 1 ] ], 'the callback may use the same session');
    is_deeply(\@inner, [ $n_vocab, $n_vocab ], '... forward inside it works');
};

subtest 'stop strings' => sub {
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 40, eos_token => $n_vocab - 1);
    my @pieces = map { $tok->token_to_piece($_) } @got;
    # two neighbouring tokens that print as plain ASCII: a stop string across them
    my ($k) = grep { $pieces[$_ - 1] =~ /\A[ -~]+\z/ && $pieces[$_] =~ /\A[ -~]+\z/ } 1 .. $#pieces;
    plan skip_all => 'no two neighbouring ASCII tokens generated' unless defined $k;
    my $stop = substr($pieces[ $k - 1 ], -1) . substr($pieces[$k], 0, 1);
    # the first token after which the generated text contains it
    my $text = '';
    my $end = first_index(sub { $text .= $pieces[$_]; index($text, $stop) >= 0 }, 0 .. $#pieces);
    my @stopped = $inference->generate(\@prompt, greedy => 1, max_tokens => 40, eos_token => $n_vocab - 1,
        stop => [ 'never printed', $stop ]);
    is_deeply(\@stopped, [ @got[ 0 .. $end ] ], "stops at the token that completes '$stop'");
    my @single = $inference->generate(\@prompt, greedy => 1, max_tokens => 40, eos_token => $n_vocab - 1,
        stop => $stop);
    is_deeply(\@single, \@stopped, 'a single string');
};

sub first_index {
    my ($code, @list) = @_;
    for (@list) { return $_ if $code->() }
    return $list[-1];
}

subtest 'seeded generation is reproducible' => sub {
    my %o = (max_tokens => 12, temperature => 1.5, top_k => 0, top_p => 1, eos_token => $n_vocab - 1);
    my @a = $inference->generate(\@prompt, %o, seed => 11);
    my @b = $inference->generate(\@prompt, %o, seed => 11);
    is_deeply(\@a, \@b, 'same seed, same tokens');
    my %distinct = map { join(',', $inference->generate(\@prompt, %o, seed => $_)) => 1 } 12 .. 14;
    $distinct{"@a"} = 1;
    cmp_ok(scalar keys %distinct, '>', 1, 'other seeds differ');
    Lugh::srand(5);
    my @d = $inference->generate(\@prompt, %o);
    Lugh::srand(5);
    is_deeply([ $inference->generate(\@prompt, %o) ], \@d, 'Lugh::srand makes unseeded generation reproducible');
    my @defaults = $inference->generate(\@prompt, max_tokens => 8, seed => 1, eos_token => $n_vocab - 1);
    is(scalar @defaults, 8, 'default sampling runs');
    my @penalised = $inference->generate(\@prompt, max_tokens => 8, seed => 1, repeat_penalty => 1.5,
        presence_penalty => 0.5, frequency_penalty => 0.5, min_p => 0.05, eos_token => $n_vocab - 1);
    is(scalar @penalised, 8, 'with penalties and min_p');
};

subtest 'text as it is generated, and the statistics' => sub {
    my @pieces;
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 12, eos_token => $n_vocab - 1,
        on_text => sub { push @pieces, $_[0]; return 0 }, stats => \my %stats);
    is(scalar @got, 12, 'generated');
    is(join('', @pieces), $stats{text}, 'on_text pieces add up to the text');
    is($stats{text}, $tok->decode(\@got), 'the text of the generated tokens');
    is($stats{stop_reason}, 'max_tokens', 'stop_reason max_tokens');
    is_deeply([ @stats{qw(n_prompt n_reused n_evaluated n_generated)} ], [ scalar @prompt, 0, scalar @prompt, 12 ],
        'counts');
    ok($stats{prompt_seconds} > 0 && $stats{tokens_per_second} > 0, 'timings');

    my $cut = length($stats{text}) > 6 ? substr($stats{text}, 3, 3) : undef;
    SKIP: {
        skip 'too little text for a stop string', 3 unless defined $cut && $cut =~ /\S/;
        @pieces = ();
        $inference->generate(\@prompt, greedy => 1, max_tokens => 12, eos_token => $n_vocab - 1,
            on_text => sub { push @pieces, $_[0]; 0 }, stop => $cut, stats => \%stats);
        is($stats{stop_reason}, 'stop_string', 'stop_reason stop_string');
        is($stats{text}, substr($tok->decode(\@got), 0, 3),
            'the text ends before the stop string');
        is(join('', @pieces), $stats{text}, 'on_text never sees the stop string');
    }
    my $calls = 0;
    my @two = $inference->generate(\@prompt, greedy => 1, max_tokens => 12, eos_token => $n_vocab - 1,
        on_text => sub { ++$calls == 2 }, stats => \%stats);
    is($stats{stop_reason}, 'callback', 'on_text returning true stops');
    is($calls, 2, '... after its second call');
    my $eog = $got[3];
    $inference->generate(\@prompt, greedy => 1, max_tokens => 12, eos_token => $eog, stats => \%stats);
    is($stats{stop_reason}, 'eos', 'stop_reason eos') if !grep { $_ == $eog } @got[ 0 .. 2 ];
    eval { $inference->generate(\@prompt, max_tokens => 2, stats => []) };
    like($@, qr/generate: stats must be a hash reference/, 'stats must be a hash reference');
    eval { $inference->generate(\@prompt, max_tokens => 2, on_text => 'print') };
    like($@, qr/on_text/, 'on_text must be code');
};

subtest 'continuing a KV cache' => sub {
    my %o = (greedy => 1, eos_token => $n_vocab - 1);
    my $cache = $inference->create_kv_cache;
    my @a = $inference->generate(\@prompt, %o, max_tokens => 5, cache => $cache, stats => \my %s);
    is($cache->n_cached, @prompt + 4, 'the prompt and all generated tokens but the last are cached');
    is_deeply([ $cache->tokens ], [ @prompt, @a[ 0 .. 3 ] ], 'tokens: what the cache holds');
    my @next = (@prompt, @a, @prompt[ 0 .. 2 ]);
    my @b = $inference->generate(\@next, %o, max_tokens => 4, cache => $cache, stats => \%s);
    is($s{n_reused}, @prompt + 4, 'the next turn reuses everything cached');
    is($s{n_evaluated}, @next - @prompt - 4, '... and evaluates only the new tokens');
    is_deeply(\@b, [ $inference->generate(\@next, %o, max_tokens => 4) ], 'the same tokens as without a cache');
    my @changed = ($prompt[0], ($prompt[1] + 1) % $n_vocab, @prompt[ 2 .. $#prompt ]);
    $inference->generate(\@changed, %o, max_tokens => 2, cache => $cache, stats => \%s);
    is($s{n_reused}, 1, 'an earlier token changed: rolled back to the common prefix');
    is_deeply([ ($cache->tokens)[ 0 .. $#changed ] ], \@changed, '... and the cache holds the new text');
    $cache->resize(scalar @changed);
    $inference->generate(\@changed, %o, max_tokens => 2, cache => $cache, stats => \%s);
    is($s{n_reused}, @changed - 1, 'the same prompt again: its last token is evaluated again');
    eval { $inference->generate(\@prompt, %o, max_tokens => 3, cache => $cache,
            callback => sub { $inference->forward_cache($cache, [1]); 0 }) };
    like($@, qr/in use by a generate call/, 'a callback cannot use the cache being generated on');
    is($cache->n_cached, @prompt, '... the cache is back afterwards');
    my $other = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 128)->create_kv_cache;
    eval { $inference->generate(\@prompt, max_tokens => 2, cache => $other) };
    like($@, qr/belongs to another Lugh::Inference/, "another session's cache croaks");
    $cache->clear;
    is_deeply([ $cache->tokens ], [], 'clear forgets the tokens');
};

subtest 'log-probabilities' => sub {
    my @got = $inference->generate(\@prompt, greedy => 1, max_tokens => 5, eos_token => $n_vocab - 1, logprobs => 3,
        stats => \my %stats);
    my $lp = $stats{logprobs};
    is(scalar @$lp, scalar @got, 'one entry per generated token');
    is_deeply([ map { $_->{token} } @$lp ], \@got, '... in order');
    for my $e (@$lp) {
        is(scalar @{ $e->{top} }, 3, 'three alternatives') or last;
        is($e->{top}[0]{token}, $e->{token}, 'greedy: the chosen token is the best');
        cmp_ok($e->{logprob}, '<=', 0, 'a log-probability');
        ok($e->{top}[0]{logprob} >= $e->{top}[1]{logprob} && $e->{top}[1]{logprob} >= $e->{top}[2]{logprob},
            'best first');
        ok(defined $e->{text}, 'with its text');
    }
    my @logits = $inference->forward(\@prompt);
    my $max = (sort { $b <=> $a } @logits)[0];
    my $z = 0;
    $z += exp($_ - $max) for @logits;
    cmp_ok(abs($lp->[0]{logprob} - ($logits[ $got[0] ] - $max - log $z)), '<', 1e-3,
        'the first equals log softmax of forward');
    $inference->generate(\@prompt, temperature => 2, seed => 1, max_tokens => 2, eos_token => $n_vocab - 1,
        logprobs => 0, stats => \%stats);
    is(scalar @{ $stats{logprobs}[0]{top} }, 0, 'logprobs => 0: no alternatives');
    $inference->generate(\@prompt, max_tokens => 2, logprobs => 2, eos_token => $n_vocab - 1);
    is(scalar @{ $inference->last_stats->{logprobs} }, 2, 'without stats, the logprobs are in last_stats');
    eval { $inference->generate(\@prompt, max_tokens => 2, logprobs => -1, stats => \%stats) };
    like($@, qr/logprobs must be an integer >= 0/, 'negative logprobs croaks');
};

subtest 'a callback whose result or exception has a dying bool overload' => sub {
    {
        package LughTest::EvilBool;
        use overload 'bool' => sub { die "no truth here\n" }, fallback => 1;
        package LughTest::EvilError;
        use overload 'bool' => sub { die "nor here\n" }, '""' => sub {'evil'}, fallback => 1;
    }
    my $before = Lugh::_live_objects();
    {
        my $session = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
        my $calls = 0;
        eval { $session->generate([ 1, 2 ], max_tokens => 5, callback => sub { $calls++; bless {}, 'LughTest::EvilBool' }) };
        is($@, "no truth here\n", 'a result whose bool overload dies: the exception propagates');
        is($calls, 1, 'generation stopped at once');
        eval { $session->generate([ 1, 2 ], max_tokens => 5, callback => sub { die bless {}, 'LughTest::EvilError' }) };
        isa_ok($@, 'LughTest::EvilError', 'an exception whose bool overload dies comes back unchanged');
        my @ids = $session->generate([ 1, 2 ], max_tokens => 2);
        is(scalar @ids, 2, 'the session stays usable');
    }
    is(Lugh::_live_objects(), $before, 'nothing leaks');
};

done_testing;
