# Lugh::Speculative: Lugh 0.12's API and its croaks (on the tiny model, no
# download needed); greedy output identical to plain greedy generation on
# the three test models; and sampled output distributed as the main
# model's (chi-square over many seeds).
# The engine's own tests (cargo test speculative) check the accept/reject
# procedure exactly, against fake models with known distributions.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use List::Util qw(max sum);
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir  = tempdir(CLEANUP => 1);
my $tiny = Lugh::Model->new(model => tiny_model($dir));
my $inf  = Lugh::Inference->new(model => $tiny, n_threads => 1, n_ctx => 64);
my $tok  = Lugh::Tokenizer->new(model => $tiny);
my @prompt = $tok->encode('Once upon a time the cat sat on the mat');

subtest 'new: what is required, and the croaks of Lugh 0.12' => sub {
    croaks_like(sub { Lugh::Speculative->new() }, qr/\ALugh::Speculative->new: requires inference => /,
        'no arguments');
    croaks_like(sub { Lugh::Speculative->new(draft => $inf) }, qr/requires inference/, 'no inference');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf) }, qr/requires draft => /, 'no draft');
    croaks_like(sub { Lugh::Speculative->new(inference => 'not inference', draft => $inf) },
        qr/inference must be a Lugh::Inference object \(got not inference\)/, 'a string as inference');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => 'not inference') },
        qr/draft must be a Lugh::Inference object or 'ngram' \(got not inference\)/, 'a string as draft');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $tiny) },
        qr/draft must be a Lugh::Inference object or 'ngram' \(got /, 'a model as draft');
    croaks_like(sub { Lugh::Speculative->new(main => $tok, draft => 'ngram') },
        qr/inference must be a Lugh::Inference object/, 'a tokenizer as main');
    for my $k (0, 17, 100, -1) {
        croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, k => $k) },
            qr/k must be between 1 and 16, got $k/, "k $k");
    }
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, depth => 'deep') },
        qr/k must be an integer/, 'k not a number');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, k => 2, depth => 3) },
        qr/give only one of k, depth/, 'k twice');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, kk => 2) },
        qr/unknown option 'kk' \(valid options: .*depth.*draft_inference.*\bk\b.*top_p/, 'unknown option');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, repeat_penalty => 1.1) },
        qr/unknown option 'repeat_penalty'/, 'no penalties');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, temperature => -1) },
        qr/temperature must be a number >= 0, got -1/, 'temperature');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, top_p => 0) },
        qr/top_p must be in \(0, 1\], got 0/, 'top_p');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $inf, ngram_min => 2) },
        qr/ngram_min and ngram_max are for draft => 'ngram'/, 'ngram options with a model');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => 'ngram', ngram_min => 3, ngram_max => 2) },
        qr/ngram_max must be in \[ngram_min \(3\), 64\], got 2/, 'ngram_max below ngram_min');
    croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => 'ngram', ngram_min => 0) },
        qr/ngram_min must be an integer >= 1, got 0/, 'ngram_min 0');

    my $spm = Lugh::Model->new(model => tiny_model($dir, tokenizer => 'spm'));
    my $other = Lugh::Inference->new(model => $spm, n_threads => 1, n_ctx => 64);
    SKIP: {
        skip 'the tiny models have the same vocabulary size', 3 if $other->n_vocab == $inf->n_vocab;
        my ($d, $m) = ($other->n_vocab, $inf->n_vocab);
        croaks_like(sub { Lugh::Speculative->new(inference => $inf, draft => $other) },
            qr/the draft model's vocabulary has $d tokens but the main model's has $m: they must share one/,
            'vocabularies differ');
    }

    my $spec = Lugh::Speculative->new(main => $inf, draft_inference => $inf, depth => 3, temperature => 0.7,
        top_p => 0.9);
    isa_ok($spec, 'Lugh::Speculative');
    is($spec->k, 3, 'depth is k');
    cmp_ok(abs($spec->temperature - 0.7), '<', 1e-6, 'temperature');
    cmp_ok(abs($spec->top_p - 0.9), '<', 1e-6, 'top_p');
    is($spec->top_k, 40, 'top_k: the default of generate');
    is($spec->n_vocab, $inf->n_vocab, 'n_vocab');
    is($spec->draft_type, 'model', 'draft_type');
    is($spec->exact, 1, 'exact verification by default');
    is(Lugh::Speculative->new(inference => $inf, draft => 'ngram', exact => 0)->exact, 0, 'exact => 0');
    my $ngram = Lugh::Speculative->new(inference => $inf, draft => 'ngram');
    is($ngram->draft_type, 'ngram', 'ngram draft');
    is($ngram->k, 4, 'k defaults to 4');
    is(Lugh::Speculative->new(inference => $inf, draft => $inf, greedy => 1)->temperature, 0, 'greedy: temperature 0');
    croaks_like(sub { $spec->k(2) }, qr/Usage: \$speculative->k/, 'accessors take no arguments');
};

subtest 'calls and statistics' => sub {
    my $spec = Lugh::Speculative->new(inference => $inf, draft => $inf, k => 3);
    is($spec->$_, 0, "initial $_") for qw(tokens_drafted tokens_accepted total_steps acceptance_rate);
    is($spec->init_caches, 1, 'init_caches');
    is($spec->init_caches, 1, 'init_caches again');

    my $drafted = $spec->draft_tokens(\@prompt, 3);
    is(ref $drafted, 'ARRAY', 'draft_tokens: an array');
    is(scalar @$drafted, 3, 'three drafted');
    is($spec->tokens_drafted, 3, 'counted');
    my $accepted = $spec->verify_tokens(\@prompt, $drafted);
    ok(@$accepted >= 1 && @$accepted <= 4, 'verify_tokens: the accepted tokens and one more');
    is($spec->tokens_drafted, 3, 'a remembered draft is not counted twice');
    is($spec->total_steps, 1, 'a step');
    is_deeply($spec->draft_tokens(\@prompt, 0), [], 'zero tokens drafted');
    is(scalar @{ $spec->draft_tokens(\@prompt) }, 3, 'n_draft defaults to k');
    my $foreign = $spec->verify_tokens(\@prompt, [ 5, 6 ]);
    ok(@$foreign >= 1 && @$foreign <= 3, 'a draft of the caller is verified too');
    is(scalar @{ $spec->verify_tokens(\@prompt, []) }, 1, 'an empty draft: one token of the main model');

    my $step = $spec->step(\@prompt);
    ok(@$step >= 1 && @$step <= 4, 'step: 1 to k + 1 tokens');
    my $out = $spec->generate(\@prompt, 10);
    is(ref $out, 'ARRAY', 'generate: an array');
    ok(@$out <= 10, 'at most max_tokens');
    ok($spec->tokens_accepted > 0, 'the same model accepts its own proposals');
    my $rate = $spec->acceptance_rate;
    cmp_ok(abs($rate - $spec->tokens_accepted / $spec->tokens_drafted), '<', 1e-12, 'acceptance_rate');
    is($spec->reset_stats, 1, 'reset_stats');
    is($spec->$_, 0, "reset: $_") for qw(tokens_drafted tokens_accepted total_steps acceptance_rate);
    is($spec->reset, 1, 'reset');
    is(scalar @{ $spec->generate(\@prompt, 0) }, 0, 'max_tokens 0');
    is(scalar @{ $spec->generate(\@prompt, max_tokens => 4, seed => 3) }, 4, 'options form') or diag 'EOG?';

    # reproducible: Lugh::srand, or a seed
    for my $draft ($inf, 'ngram') {
        my $s = Lugh::Speculative->new(inference => $inf, draft => $draft, k => 3, temperature => 1.5, top_k => 0);
        Lugh::srand(42);
        my $a = $s->generate(\@prompt, 12);
        Lugh::srand(42);
        my $b = $s->generate(\@prompt, 12);
        my $kind = $s->draft_type;
        is_deeply($a, $b, "srand makes generate repeat ($kind draft)");
        Lugh::srand(42);
        my $c = $s->step(\@prompt);
        Lugh::srand(42);
        is_deeply($s->step(\@prompt), $c, 'and step');
        is_deeply($s->generate(\@prompt, max_tokens => 12, seed => 9), $s->generate(\@prompt, max_tokens => 12, seed => 9),
            'a seed too');
        my %seen;
        $seen{"@{ $s->generate(\@prompt, max_tokens => 12, seed => $_) }"}++ for 1 .. 5;
        cmp_ok(scalar keys %seen, '>', 1, 'other seeds, other tokens');
    }

    my @calls;
    $out = $spec->generate(\@prompt, max_tokens => 10, callback => sub { push @calls, [@_]; return @calls == 3 });
    is(scalar @$out, 3, 'a true callback return stops');
    is_deeply([ map { $_->[1] } @calls ], [ 1, 2, 3 ], 'the callback gets each count');
    is_deeply([ map { $_->[0] } @calls ], $out, 'and each token');
    croaks_like(sub { $spec->generate(\@prompt, max_tokens => 5, callback => sub { $spec->generate(\@prompt, 2) }) },
        qr/in use by a call running on it/, 'a callback calling the same object');
    eval { $spec->generate(\@prompt, max_tokens => 5, callback => sub { die "boom\n" }) };
    is($@, "boom\n", "a callback's exception comes back unchanged");
    ok(scalar @{ $spec->generate(\@prompt, 3) }, 'the object still works');
};

subtest 'croaks of the calls' => sub {
    my $spec = Lugh::Speculative->new(inference => $inf, draft => 'ngram');
    my $n = $inf->n_vocab;
    croaks_like(sub { $spec->generate() }, qr/Usage: \$speculative->generate\(\\\@prompt, \$max_tokens\)/, 'usage');
    croaks_like(sub { $spec->generate([]) }, qr/generate: the prompt is empty/, 'empty prompt');
    croaks_like(sub { $spec->generate([ 1, $n ]) }, qr/prompt has token id $n at position 1, out of range \[0, $n\)/,
        'token out of range');
    croaks_like(sub { $spec->generate('text') }, qr/prompt must be an ARRAY reference/, 'not an array');
    croaks_like(sub { $spec->generate(\@prompt, 100) }, qr/needs \d+ positions, but the context has 64/,
        'more than the context holds');
    croaks_like(sub { $spec->generate(\@prompt, -1) }, qr/max_tokens must be an integer >= 0, got -1/, 'max_tokens');
    croaks_like(sub { $spec->generate(\@prompt, max_tokens => 2, temperature => 1) },
        qr/unknown option 'temperature' \(valid options: callback, grammar, max_tokens, seed\)/, 'generate options');
    croaks_like(sub { $spec->generate(\@prompt, callback => 'x') }, qr/callback must be a CODE reference/, 'callback');
    croaks_like(sub { $spec->step([]) }, qr/step: the context is empty/, 'step: empty');
    croaks_like(sub { $spec->step() }, qr/Usage: Lugh::Speculative->step\(self, \\\@tokens\)/, 'step: usage');
    croaks_like(sub { $spec->draft_tokens(\@prompt, 17) }, qr/n_draft must be an integer <= 16, got 17/, 'n_draft');
    croaks_like(sub { $spec->verify_tokens(\@prompt, [ (1) x 17 ]) }, qr/the draft has 17 tokens; at most 16/,
        'a long draft');
    croaks_like(sub { $spec->verify_tokens(\@prompt, [-1]) }, qr/draft has token id -1/, 'a bad draft token');
    croaks_like(sub { Lugh::Speculative::k('Lugh::Speculative') },
        qr/Lugh::Speculative->k: not a Lugh::Speculative object/, 'a class is not an object');
};

# --- the test models ---

my @MODELS = grep { model_path($_) } qw(smollm2-135m-q4_1 qwen2.5-coder-0.5b-q4_k_m gemma3-270m-q4_k_m);
diag 'no test model found: run perl t/fetch-models for the tests on real models' unless @MODELS;

# Greedy verification passes at most 3 rows at a time, which ggml's x86
# matmuls compute with their one-row kernels (from 4 rows on, the repacked
# K-quant weights of Qwen and Gemma go through a kernel that rounds
# otherwise): every verified logit is bit-identical to a decode step's, and
# the output is plain greedy's. (Not below a flash-attention cache of 512
# positions, where a decode step splits attention over the threads; see the
# POD. Elsewhere than x86, other kernels may part at a near tie.)
my $EXACT = Lugh::cpu_features()->{variant} =~ /\Ax86_64/;
my $NEAR_TIE = 0.3;

# The largest difference between the logits after $context computed a row at
# a time (decode steps) and with its last $rows tokens in one pass (as a
# verification pass computes them), the rest of the context cached alike.
sub row_kernel_spread {
    my ($inference, $context, $rows) = @_;
    $rows = @$context - 1 if $rows >= @$context;    # at least one token cached
    my @prefix = @$context[ 0 .. $#$context - $rows ];
    my @last = @$context[ $#$context - $rows + 1 .. $#$context ];
    my $one_cache = $inference->create_kv_cache;
    $inference->forward_cache($one_cache, \@prefix);
    my @one;
    @one = $inference->forward_cache($one_cache, [$_]) for @last;
    my $multi_cache = $inference->create_kv_cache;
    $inference->forward_cache($multi_cache, \@prefix);
    my @multi = $inference->forward_cache($multi_cache, \@last);
    return max(map { abs($one[$_] - $multi[$_]) } 0 .. $#one);
}

for my $name (@MODELS) {
    subtest "greedy equals plain greedy: $name" => sub {
        my $model = Lugh::Model->new(model => model_path($name));
        my $t = Lugh::Tokenizer->new(model => $model);
        my $main = Lugh::Inference->new(model => $model, n_ctx => 512);
        my $draft = Lugh::Inference->new(model => $model, n_ctx => 512);
        for my $text ('The capital of France is', "def fibonacci(n):\n    ",
            "one two three four five six seven eight nine ten\none two three four five")
        {
            my @p = $t->encode($text);
            my @plain = $main->generate(\@p, max_tokens => 32, greedy => 1);
            # exact => 0 verifies a step in one pass: the multi-row kernels
            # may then part from plain greedy, but only at a near tie
            for my $case (map { my $d = $_; map { [ $d, $_ ] } 1, 0 } 'ngram', $draft) {
                my ($d, $exact) = @$case;
                my $spec = Lugh::Speculative->new(inference => $main, draft => $d, k => 4, temperature => 0,
                    exact => $exact);
                my $out = $spec->generate(\@p, 32);
                my $what = sprintf '%s, %s draft%s, "%s"', $name, $spec->draft_type, $exact ? '' : ', exact => 0',
                    substr($text, 0, 20) =~ s/\n/\\n/gr;
                if ("@$out" eq "@plain" || ($EXACT && $exact)) {
                    is("@$out", "@plain", "$what: identical");
                    next;
                }
                # Where do they part, and how close were the two best tokens there?
                my $at = 0;
                $at++ while $out->[$at] == $plain[$at];
                my @ids = $main->generate(\@p, max_tokens => $at + 1, greedy => 1, logprobs => 2);
                my $top = $main->last_stats->{logprobs}[$at]{top};
                my $margin = $top->[0]{logprob} - $top->[1]{logprob};
                # A verification pass of k + 1 rows may go through kernels that
                # round otherwise than a decode step's: the two best tokens
                # can swap where they are closer than twice the largest
                # difference those kernels make here (measured, as it depends
                # on the CPU's kernels), or than $NEAR_TIE.
                my $rows = $spec->k + 1;
                my $spread = row_kernel_spread($main, [ @p, @plain[ 0 .. $at - 1 ] ], $rows);
                diag sprintf '%s: parts from plain greedy at token %d, where its two best tokens are %.3f apart '
                    . '(one-row and %d-row logits differ by up to %.3f there)', $what, $at, $margin, $rows, $spread;
                cmp_ok($margin, '<', max($NEAR_TIE, 2 * $spread), "$what: parts at a near tie");
                is($out->[$at], $top->[1]{token}, "$what: for plain greedy's runner-up");
            }
        }
    };
}

# Sampling: the first token's distribution is the main model's, whether the
# lookup's proposal is accepted (probability p(x)) or replaced by a draw from
# the rest. 600 draws; the expected distribution is computed here from the
# logits (top-k 40, then temperature 1, as generate samples with min_p 0).
SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip 'SmolLM2 not fetched (perl t/fetch-models)', 1;
    subtest 'sampled output follows the main model' => sub {
        my $model = Lugh::Model->new(model => $path);
        my $t = Lugh::Tokenizer->new(model => $model);
        my $main = Lugh::Inference->new(model => $model, n_ctx => 256);
        my @p = $t->encode('I like cats and dogs. You like cats and');
        my $spec = Lugh::Speculative->new(inference => $main, draft => 'ngram', k => 1, temperature => 1,
            top_k => 40, top_p => 1, min_p => 0);
        my $proposal = $spec->draft_tokens(\@p, 1);
        is($t->decode($proposal), ' dogs', 'the lookup proposes what followed "cats and"');
        my @logits = $main->forward(\@p);
        my @top = (sort { $logits[$b] <=> $logits[$a] || $a <=> $b } 0 .. $#logits)[ 0 .. 39 ];
        my $m = $logits[ $top[0] ];
        my %p = map { $_ => exp($logits[$_] - $m) } @top;
        my $z = sum values %p;
        $_ /= $z for values %p;
        cmp_ok($p{ $proposal->[0] }, '>', 0.3, 'the proposal is likely but not certain');

        my $n = 600;
        my %count;
        for my $seed (1 .. $n) {
            Lugh::srand($seed);
            $count{ $spec->verify_tokens(\@p, $proposal)->[0] }++;
        }
        my $rate = $spec->acceptance_rate;
        cmp_ok(abs($rate - $p{ $proposal->[0] }), '<', 0.1, "accepted at the rate p(x) ($rate)");
        ok(!grep({ !exists $p{$_} } keys %count), 'only tokens of the top 40 are drawn');
        # Pearson's chi-square over the tokens expected at least 5 times, the
        # rest pooled; passes below dof + 6 sqrt(2 dof): far beyond chance.
        my ($chi, $cells, $rest_count, $rest_expected) = (0, 0, 0, 0);
        for my $id (keys %p) {
            my $e = $p{$id} * $n;
            my $c = $count{$id} // 0;
            if ($e < 5) { $rest_count += $c; $rest_expected += $e; next }
            $chi += ($c - $e)**2 / $e;
            $cells++;
        }
        if ($rest_expected >= 5) { $chi += ($rest_count - $rest_expected)**2 / $rest_expected; $cells++ }
        my $dof = $cells - 1;
        cmp_ok($chi, '<', $dof + 6 * sqrt(2 * $dof), "chi-square $chi with $dof degrees of freedom");
        # The test has power: the lookup's proposal taken whenever offered
        # (p = 1 for it) fails it by far.
        my $wrong = ($n - $p{ $proposal->[0] } * $n)**2 / ($p{ $proposal->[0] } * $n);
        cmp_ok($wrong, '>', $dof + 6 * sqrt(2 * $dof), 'a wrong procedure would fail');
    };
}

done_testing;
