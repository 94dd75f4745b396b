# Scoring and embeddings: perplexity() against llama.cpp's llama-perplexity,
# embed() against llama-embedding (t/data/reference/VARIANT, written by
# bench/make-score-reference), logprobs() against perplexity(), batched
# against single embeddings, and every bad argument croaking. The parts
# that need no downloaded model run on a tiny synthetic one.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use List::Util qw(max sum);
use lib 't/lib';
use LughTest qw(model_path reference_dir read_jsonl croaks_like @TEST_MODELS);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $variant = Lugh::cpu_features()->{variant};

sub read_text {
    my ($path) = @_;
    open my $fh, '<:raw', $path or die "cannot read $path: $!";
    local $/;
    return <$fh>;
}

sub cosine_distance {
    my ($a, $b) = @_;
    my ($dot, $na, $nb) = (0, 0, 0);
    for my $i (0 .. $#$a) { $dot += $a->[$i] * $b->[$i]; $na += $a->[$i]**2; $nb += $b->[$i]**2 }
    return 1 - $dot / sqrt($na * $nb);
}

# The reference set to compare with: this build's variant when it has the
# files (then Lugh must agree to llama.cpp's printed precision), else any
# other (then only as closely as kernel families agree).
# LUGH_PARITY_VARIANT names the set to compare with, as in t/50_parity.t
# (CI uses it to run the cross-variant comparison on every machine).
sub reference_for {
    my ($file) = @_;
    my $root = reference_dir();
    if (my $asked = $ENV{LUGH_PARITY_VARIANT}) {
        return -f "$root/$asked/$file" ? ("$root/$asked/$file", $asked eq $variant ? 1 : 0) : ();
    }
    return ("$root/$variant/$file", 1) if -f "$root/$variant/$file";
    for my $other (sort glob "$root/*/$file") { return ($other, 0) }
    return;
}

subtest 'synthetic model: shapes, consistency and refusals' => sub {
    my $model = Lugh::Model->new(model => tiny_model($dir));
    my $inf = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64, n_batch => 16);
    my @tokens = map { 3 + ($_ * 7) % 50 } 1 .. 40;

    my $r = $inf->logprobs(\@tokens, top => 3);
    is_deeply($r->{tokens}, \@tokens, 'logprobs: the tokens scored');
    is(scalar @{ $r->{logprobs} }, @tokens - 1, 'logprobs: one per token after the first');
    is($r->{n_scored}, @tokens - 1, 'n_scored');
    ok(!grep({ $_ > 0 } @{ $r->{logprobs} }), 'log-probabilities are <= 0');
    cmp_ok(abs($r->{nll} + sum(@{ $r->{logprobs} })), '<', 1e-9, 'nll is minus their sum');
    cmp_ok(abs($r->{perplexity} - exp($r->{nll} / $r->{n_scored})), '<', 1e-9, 'perplexity = exp(nll / n)');
    is(scalar @{ $r->{top} }, @tokens - 1, 'top: one list per scored position');
    my $best = $r->{top}[0];
    is(scalar @$best, 3, 'top 3');
    ok($best->[0][1] >= $best->[1][1] && $best->[1][1] >= $best->[2][1], 'best first');
    my @logits = $inf->forward([ $tokens[0] ]);
    my $argmax = (sort { $logits[$b] <=> $logits[$a] || $a <=> $b } 0 .. $#logits)[0];
    is($best->[0][0], $argmax, 'the best alternative is the argmax of the logits');
    my $max = $logits[$argmax];
    my $lse = $max + log(sum(map { exp($_ - $max) } @logits));    # log-sum-exp by hand
    cmp_ok(abs($r->{logprobs}[0] - ($logits[ $tokens[1] ] - $lse)), '<', 1e-4,
        'the first log-probability is log softmax of the forward logits');

    # perplexity over windows of 16: chunks of 16 tokens, the last 7 of each scored
    my $ppl = $inf->perplexity(\@tokens, n_ctx => 16);
    is($ppl->{n_chunks}, 2, 'two whole windows in 40 tokens');
    is($ppl->{n_scored}, 2 * 7, 'the second half of each window is scored (n_ctx - n_ctx/2 - 1 tokens)');
    is(scalar @{ $ppl->{chunks} }, 2, 'an estimate after each window');
    cmp_ok(abs($ppl->{chunks}[-1] - $ppl->{perplexity}), '<', 1e-12, 'the last estimate is the result');
    my $first = $inf->logprobs([ @tokens[0 .. 15] ]);
    # rows 8..14 predict tokens 9..15: logprobs[i] is token i + 1's
    my $nll = -sum(@{ $first->{logprobs} }[8 .. 14]);
    cmp_ok(abs($ppl->{chunks}[0] - exp($nll / 7)), '<', 1e-9, 'window 1 agrees with logprobs of the same tokens');
    is($inf->perplexity(\@tokens, n_ctx => 16, n_chunks => 1)->{n_chunks}, 1, 'n_chunks limits the windows');

    my $e = $inf->embed(\@tokens, pooling => 'mean');
    is(scalar @$e, $model->n_embd, 'embed: n_embd numbers');
    cmp_ok(abs(sum(map { $_**2 } @$e) - 1), '<', 1e-5, 'normalized to unit length by default');
    my $raw = $inf->embed(\@tokens, pooling => 'mean', normalize => 0);
    cmp_ok(cosine_distance($e, $raw), '<', 1e-6, 'normalize => 0: the same direction');
    my $rows = $inf->embed(\@tokens, pooling => 'none', normalize => 0);
    is(scalar @$rows, scalar @tokens, 'pooling none: one vector per token');
    my @mean = map { my $i = $_; sum(map { $_->[$i] } @$rows) / @$rows } 0 .. $#$e;
    cmp_ok(max(map { abs($mean[$_] - $raw->[$_]) } 0 .. $#mean), '<', 1e-5, 'mean is the mean of the rows');
    my $last = $inf->embed(\@tokens, pooling => 'last', normalize => 0);
    is_deeply([ map { sprintf '%.6g', $_ } @$last ], [ map { sprintf '%.6g', $_ } @{ $rows->[-1] } ], 'last row');
    my $cls = $inf->embed(\@tokens, pooling => 'cls', normalize => 0);
    is_deeply([ map { sprintf '%.6g', $_ } @$cls ], [ map { sprintf '%.6g', $_ } @{ $rows->[0] } ], 'cls: first row');

    # Batched: short texts share graphs, a long one (over n_batch) goes alone.
    my @inputs = ([ @tokens[0 .. 4] ], [ @tokens[5 .. 12] ], \@tokens, [ @tokens[3 .. 9] ], [ $tokens[7] ]);
    my @batch = $inf->embed_batch(\@inputs, pooling => 'mean');
    is(scalar @batch, scalar @inputs, 'embed_batch: one embedding per input');
    my $worst = max(map { cosine_distance($batch[$_], $inf->embed($inputs[$_], pooling => 'mean')) } 0 .. $#inputs);
    cmp_ok($worst, '<', 1e-6, "batched equal single ones (worst cosine distance $worst)");
    my $ref = $inf->embed_batch(\@inputs);
    is(ref $ref, 'ARRAY', 'scalar context: an array reference');

    my $too_long = [ (5) x 65 ];
    croaks_like(sub { $inf->logprobs([5]) }, qr/at least 2 tokens/, 'logprobs of one token');
    croaks_like(sub { $inf->logprobs($too_long) }, qr/65 tokens do not fit in n_ctx 64.*perplexity/,
        'logprobs longer than n_ctx');
    croaks_like(sub { $inf->logprobs([ 1, 99999 ]) }, qr/token id 99999 at position 1, out of range/,
        'logprobs: token out of range');
    croaks_like(sub { $inf->logprobs({}) }, qr/the text must be a string of text or an array reference of token/,
        'logprobs of a hash');
    croaks_like(sub { $inf->logprobs(undef) }, qr/the text is missing/, 'logprobs of undef');
    croaks_like(sub { $inf->logprobs(\@tokens, tpo => 3) }, qr/unknown option 'tpo'/, 'logprobs: unknown option');
    croaks_like(sub { $inf->logprobs(\@tokens, top => -1) }, qr/top must be an integer >= 0/, 'logprobs: top < 0');
    croaks_like(sub { $inf->logprobs() }, qr/Usage: .*logprobs/, 'logprobs without arguments');
    croaks_like(sub { $inf->perplexity([ @tokens[0 .. 30] ], n_ctx => 16) },
        qr/n_ctx 16 needs at least 32 tokens.*has 31/, 'perplexity of a short text');
    croaks_like(sub { $inf->perplexity(\@tokens, n_ctx => 128) }, qr/n_ctx must be between 2 and the session's n_ctx \(64\), got 128/,
        'perplexity window above the session');
    croaks_like(sub { $inf->perplexity(\@tokens, n_ctx => 16, n_chunks => 0) }, qr/n_chunks must be an integer >= 1/,
        'perplexity: n_chunks 0');
    croaks_like(sub { $inf->embed(\@tokens, pooling => 'max') }, qr/pooling must be one of none, mean, cls, last, got 'max'/,
        'embed: unknown pooling');
    croaks_like(sub { $inf->embed([]) }, qr/the input is empty/, 'embed of nothing');
    croaks_like(sub { $inf->embed($too_long) }, qr/65 tokens do not fit|n_ctx/, 'embed longer than n_ctx');
    croaks_like(sub { $inf->embed(\@tokens, normalise => 1) }, qr/unknown option 'normalise'/, 'embed: unknown option');
    croaks_like(sub { $inf->embed_batch([]) }, qr/no texts given/, 'embed_batch of an empty list');
    croaks_like(sub { $inf->embed_batch('text') }, qr/inputs must be an ARRAY reference/, 'embed_batch of a string');
    croaks_like(sub { $inf->embed_batch([ \@tokens, [] ]) }, qr/input 1 is empty/, 'embed_batch naming the bad input');
    croaks_like(sub { $inf->embed_batch([ \@tokens, [-1] ]) }, qr/input 1 has token id -1/, 'embed_batch: bad id');
    is(scalar @{ $inf->embed(\@tokens) }, $model->n_embd, 'the session is usable after every refusal');
};

my $checked = 0;
for my $name (@TEST_MODELS) {
    my $path = model_path($name);
    SKIP: {
        skip "$name is not downloaded (perl t/fetch-models $name)", 1 unless $path;
        skip "no llama.cpp score reference for $name in " . reference_dir(), 1
            unless my @found = reference_for("embedding.$name.jsonl");
        subtest $name => sub {
            my $model = Lugh::Model->new(model => $path);
            my $text = read_text('t/data/text/artistic.txt');
            for my $fa (0, 1) {
                my $fa_name = $fa ? 'on' : 'off';
                my ($file, $strict) = reference_for("perplexity.$name.fa-$fa_name.json") or do {
                    diag("no llama-perplexity reference for $name (run bench/make-score-reference)");
                    next;
                };
                my $want = JSON::PP->new->decode(read_text($file));
                my $inf = Lugh::Inference->new(model => $model, n_threads => 2, n_ctx => 1024, flash_attn => $fa);
                my $got = $inf->perplexity($text, n_ctx => $want->{n_ctx});
                my $what = "perplexity fa-$fa_name, n_ctx $want->{n_ctx}";
                is($got->{n_chunks}, scalar @{ $want->{chunks} }, "$what: as many chunks as llama-perplexity");
                my @diff = map { abs($got->{chunks}[$_] - $want->{chunks}[$_]) } 0 .. $#{ $want->{chunks} };
                my $worst = max(@diff, abs($got->{perplexity} - $want->{ppl}));
                if ($strict) {
                    # llama-perplexity prints 4 decimals (5 for the error)
                    cmp_ok($worst, '<=', 0.00006, sprintf('%s: every chunk and PPL %.4f equal llama.cpp (%s)',
                        $what, $want->{ppl}, $variant));
                    cmp_ok(abs($got->{error} - $want->{error}), '<=', 0.000006, "$what: error +/- $want->{error}");
                }
                else {
                    # Each running estimate against its own value: llama.cpp's
                    # own builds for two kernel families (x86_64-avx2 and
                    # x86_64-avx512fp16) part by up to 1.9% on a chunk.
                    my @relative = map { abs($got->{chunks}[$_] - $want->{chunks}[$_]) / $want->{chunks}[$_] }
                        0 .. $#{ $want->{chunks} };
                    my $relative = max(@relative, abs($got->{perplexity} - $want->{ppl}) / $want->{ppl});
                    cmp_ok($relative, '<', 0.03, sprintf(
                        '%s: every estimate within 3%% of another kernel family\'s (no reference for %s; worst %.2f%%)',
                        $what, $variant, 100 * $relative));
                }
                diag(sprintf '%s %s: PPL %.4f, llama.cpp %.4f (%s)', $name, $what, $got->{perplexity}, $want->{ppl},
                    $strict ? $variant : "other variant: $file");
                $checked++;
            }

            my ($file, $strict) = reference_for("embedding.$name.jsonl") or do {
                diag("no llama-embedding reference for $name");
                return;
            };
            my $inf = Lugh::Inference->new(model => $model, n_threads => 2, n_ctx => 1024);
            my $rows = read_jsonl($file);
            my ($worst, $worst_single) = (0, 0);
            my %batched;
            push @{ $batched{ $_->{pooling} } }, $_ for grep { $_->{batch} } @$rows;
            for my $pooling (sort keys %batched) {
                my @cases = @{ $batched{$pooling} };
                my @got = $inf->embed_batch([ map { $_->{text} } @cases ], pooling => $pooling);
                for my $i (0 .. $#cases) {
                    my $d = cosine_distance($got[$i], $cases[$i]{embedding});
                    $worst = $d if $d > $worst;
                }
            }
            # Alone, a text's rows go through other matmul kernels than in a
            # batch (ggml picks them by row count), in llama.cpp as here: so
            # embed() is compared with llama-embedding given the text alone.
            for my $case (grep { !$_->{batch} } @$rows) {
                my $d = cosine_distance($inf->embed($case->{text}, pooling => $case->{pooling}), $case->{embedding});
                $worst_single = $d if $d > $worst_single;
            }
            my $bound = $strict ? 1e-3 : 1e-2;
            my $where = $strict ? $variant : "other variant: $file";
            cmp_ok($worst, '<=', $bound, sprintf('embed_batch equals llama-embedding on the same batch: worst cosine '
                . 'distance %.2e (%s)', $worst, $where));
            cmp_ok($worst_single, '<=', $bound, sprintf('embed equals llama-embedding on each text alone: worst cosine '
                . 'distance %.2e (%s)', $worst_single, $where));
            diag(sprintf '%s embeddings: worst cosine distance to llama.cpp %.2e batched as llama-embedding, %.2e alone',
                $name, $worst, $worst_single);
            $checked++;
        };
    }
}
diag("$checked reference comparisons made");

done_testing();
