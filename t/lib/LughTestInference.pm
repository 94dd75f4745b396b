package LughTestInference;

# Helpers for the tests of Lugh::Inference: a session over the smallest test
# model (or skip), and comparisons of logits.

use strict;
use warnings;
use Exporter 'import';
use List::Util qw(max);
use File::Spec;
use LughTest qw(require_model reference_dir read_jsonl model_path @TEST_MODELS);

our @EXPORT_OK = qw(smollm2 argmax max_abs_diff reference_cases reference_variants check_reference_case
    check_split_case check_cross_variant_case run_parity_set for_each_test_model check_rollback_and_clear
    check_cache_spellings check_overflow_refused);

# (Lugh::Model, Lugh::Inference) for SmolLM2-135M, 2 threads; extra options
# go to Lugh::Inference->new. Skips the test file when the model is absent.
sub smollm2 {
    my (%options) = @_;
    my $path = require_model('smollm2-135m-q4_1');
    require Lugh;
    my $model = Lugh::Model->new(model => $path);
    my $inference = Lugh::Inference->new(model => $model, n_threads => 2, n_ctx => 512, %options);
    return ($model, $inference);
}

# The index of the largest value (the first one among equals).
sub argmax {
    my ($values) = @_;
    my $best = 0;
    for my $i (1 .. $#$values) {
        $best = $i if $values->[$i] > $values->[$best];
    }
    return $best;
}

# The largest absolute difference between two equally long lists.
sub max_abs_diff {
    my ($a, $b) = @_;
    die "lengths differ: " . @$a . " vs " . @$b unless @$a == @$b;
    return max(map { abs($a->[$_] - $b->[$_]) } 0 .. $#$a);
}

# The cases of t/data/reference/VARIANT/SET.MODEL.fa-on|off.jsonl (SET:
# parity or long-context; VARIANT: this build's kernel variant by default),
# or an empty list.
sub reference_cases {
    my ($set, $model, $fa, $variant) = @_;
    $variant //= do { require Lugh; Lugh::cpu_features()->{variant} };
    my $file = File::Spec->catfile(reference_dir(), $variant, "$set.$model.fa-$fa.jsonl");
    return -f $file ? @{ read_jsonl($file) } : ();
}

# Whether kernel variant $variant has reference outputs of set $set.
sub has_set {
    my ($variant, $set) = @_;
    opendir(my $dh, File::Spec->catdir(reference_dir(), $variant)) or return 0;
    return scalar grep {/\A\Q$set\E\./} readdir $dh;
}

# The kernel variants that have reference outputs (t/data/reference/*/BUILD).
sub reference_variants {
    my $dir = reference_dir();
    opendir my $dh, $dir or return ();
    return sort grep { -f File::Spec->catfile($dir, $_, 'BUILD') } readdir $dh;
}

# llama.cpp's own spread between kernel variants: its x86_64-avx512 and
# x86_64-avx2 outputs differ by up to 0.85 in the top-20 logits over every
# parity and long-context case of the three test models (Gemma-3, flash
# attention on; 0.25-0.60 for the others), and each one's best first token is
# within 0.12 of the other's best. The bound leaves room for a variant not
# measured (aarch64's NEON kernels sum in 128-bit lanes).
our $CROSS_VARIANT_BOUND = 1.5;

# Compares this build against llama.cpp's outputs for the prompt set $set
# ('parity' or 'long-context'), every test model, flash attention on and off:
# - strictly where t/data/reference has the set of this build's kernel
#   variant (top-20 logits within $strict_tolerance, the greedy continuation
#   identical, prompt ids identical);
# - else against every variant there is, with what holds across kernel
#   variants (prompt ids identical, top-20 logits within
#   $CROSS_VARIANT_BOUND, the first greedy token one llama.cpp ranks within
#   that bound of its best).
# $LUGH_PARITY_VARIANT=NAME compares against that variant's set (strictly
# only if it is this build's). Options: set, tolerance, greedy (tokens of the
# greedy continuations), each (a sub run with ($name, $fa, $case, $label)
# before each case, for extra checks), inference_options (more options of
# Lugh::Inference->new), models (the model names, default all test models),
# call (a sub given the model name, returning more options of each forward
# and generate). Returns the number of cases checked.
sub run_parity_set {
    my (%o) = @_;
    require Lugh;
    require Test::More;
    my $own = Lugh::cpu_features()->{variant};
    # the variants that have this set (sets added later exist for fewer)
    my @available = grep { has_set($_, $o{set}) } reference_variants();
    my @against = $ENV{LUGH_PARITY_VARIANT} ? ($ENV{LUGH_PARITY_VARIANT})
        : (grep { $_ eq $own } @available) ? ($own) : @available;
    die "no reference outputs in " . reference_dir() . "\n" unless @against;
    for my $variant (@against) {
        my $strict = $variant eq $own;
        Test::More::diag($strict
            ? "$o{set}: strict comparison with llama.cpp built for this build's kernel variant ($own)"
            : ($ENV{LUGH_PARITY_VARIANT} ? "$o{set}: LUGH_PARITY_VARIANT asks for another variant than this build's"
                    . " ($own)" : "$o{set}: no reference for this build's kernel variant ($own)")
                . "; cross-variant comparison with llama.cpp's $variant outputs (logits within"
                . " $CROSS_VARIANT_BOUND, same first token up to near-ties)");
    }
    my $checked = 0;
    for_each_test_model(sub {
        my ($name, $model) = @_;
        my $tokenizer = Lugh::Tokenizer->new(model => $model);
        my $call = $o{call} ? { $o{call}->($name, $model) } : {};
        for my $fa (qw(on off)) {
            my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 2,
                flash_attn => $fa eq 'on' ? 1 : 0, %{ $o{inference_options} // {} });
            for my $variant (@against) {
                my @cases = reference_cases($o{set}, $name, $fa, $variant)
                    or die "no $o{set} reference for $name fa-$fa in $variant\n";
                my $worst = 0;
                for my $case (@cases) {
                    (my $short = substr($case->{prompt}, 0, 24)) =~ s/\n/\\n/g;
                    my $label = "$name fa-$fa '$short' vs $variant";
                    $o{each}->($name, $fa, $case, $label) if $o{each};
                    my $diff = $variant eq $own
                        ? check_reference_case($inference, $tokenizer, $case, $label, $o{tolerance}, $o{greedy}, $call)
                        : check_cross_variant_case($inference, $tokenizer, $case, $label, $call);
                    $worst = $diff if $diff > $worst;
                    $checked++;
                }
                Test::More::diag(sprintf "%s fa-%s vs %s: %d cases, worst top-20 logit difference %.5f",
                    $name, $fa, $variant, scalar @cases, $worst);
            }
        }
    }, $o{models});
    return $checked;
}

# One case against llama.cpp built for another kernel variant: what holds
# across variants. Returns the largest top-20 logit difference.
sub check_cross_variant_case {
    my ($inference, $tokenizer, $case, $label, $call) = @_;
    my @tokens = @{ $case->{tokens} };
    Test::More::is_deeply([ $tokenizer->encode($case->{prompt}) ], \@tokens, "$label: our tokenizer agrees");
    my @logits = $inference->forward(tokens => \@tokens, %{ $call // {} });
    my $diff = max(map { abs($logits[ $_->[0] ] - $_->[1]) } @{ $case->{top} });
    Test::More::cmp_ok($diff, '<=', $CROSS_VARIANT_BOUND,
        "$label: top-20 logits within $CROSS_VARIANT_BOUND (max diff " . sprintf('%.4f', $diff) . ')');
    my %reference = map { $_->[0] => $_->[1] } @{ $case->{top} };
    my $best = argmax(\@logits);
    my $ok = exists $reference{$best} && $reference{$best} >= $case->{top}[0][1] - $CROSS_VARIANT_BOUND;
    Test::More::ok($ok, "$label: our first greedy token ($best) is llama.cpp's or within"
            . " $CROSS_VARIANT_BOUND of it (llama.cpp's: $case->{top}[0][0])");
    return $diff;
}

# Every spelling of a cached forward appends to the empty $cache: forward
# (cache =>), forward_cache named and positional, forward_all (cache =>);
# the last row equals a whole-sequence forward of the first 6 of @$tokens.
sub check_cache_spellings {
    my ($inference, $cache, $tokens) = @_;
    require Test::More;
    my @t = @$tokens;
    $inference->forward(cache => $cache, tokens => [ @t[ 0, 1 ] ]);
    $inference->forward_cache(cache => $cache, tokens => [ $t[2] ]);
    $inference->forward_cache($cache, [ $t[3] ]);
    my $rows = $inference->forward_all(tokens => [ @t[ 4, 5 ] ], cache => $cache);
    Test::More::is($cache->n_cached, 6,
        'forward(cache =>), forward_cache named and positional, forward_all(cache =>)');
    Test::More::is(scalar @$rows, 2, 'forward_all with a cache: rows for the new tokens');
    my @full = $inference->forward([ @t[ 0 .. 5 ] ]);
    Test::More::cmp_ok(max_abs_diff($rows->[-1], \@full), '<=', 0.02, 'same logits as the whole sequence');
}

# A session with n_ctx 8: a new cache takes 6 of @$tokens, then refuses 3
# more with a croak naming the context, unchanged. Returns the cache.
sub check_overflow_refused {
    my ($small, $tokens) = @_;
    require Test::More;
    my $c = $small->create_kv_cache;
    Test::More::is($c->n_ctx, 8, 'n_ctx 8');
    $small->forward_cache($c, [ @$tokens[ 0 .. 5 ] ]);
    eval { $small->forward_cache($c, [ @$tokens[ 0 .. 2 ] ]) };
    Test::More::like($@, qr/^Lugh::Inference->forward: .*\b(?:context|n_ctx|capacity)\b.* at \S+ line \d+\.$/i,
        'croaks');
    Test::More::is($c->n_cached, 6, 'the cache is unchanged');
    return $c;
}

# A cache holding more than 4 of @$tokens: resize(4) rolls back (continuing
# with $token equals a fresh forward of the first 4 tokens and $token), a
# resize past n_cached or below 0 croaks and changes nothing, clear empties.
sub check_rollback_and_clear {
    my ($inference, $cache, $tokens, $token) = @_;
    require Test::More;
    $cache->resize(4);
    Test::More::is($cache->n_cached, 4, 'resize(4)');
    my @rolled = $inference->forward_cache($cache, [$token]);
    my @fresh = $inference->forward([ @$tokens[ 0 .. 3 ], $token ]);
    Test::More::cmp_ok(max_abs_diff(\@rolled, \@fresh), '<=', 0.02,
        'continuing after a rollback forgets what was dropped');
    eval { $cache->resize(99) };
    Test::More::like($@, qr/^Lugh::KVCache::resize: .* at \S+ line \d+\.$/, 'resize beyond n_cached croaks');
    Test::More::is($cache->n_cached, 5, '... and changes nothing');
    eval { $cache->resize(-1) };
    Test::More::like($@, qr/must be >= 0/, 'negative size croaks');
    $cache->clear;
    Test::More::is($cache->n_cached, 0, 'clear');
    my @again = $inference->forward_cache($cache, [ @$tokens[ 0 .. 3 ], $token ]);
    Test::More::cmp_ok(max_abs_diff(\@again, \@fresh), '<=', 0.02, 'a cleared cache starts over');
}

# Runs $body->($name, $model) for each of the three test models (or those
# named in @$models), or skips (one test) a model whose file is absent.
sub for_each_test_model {
    my ($body, $models) = @_;
    require Test::More;
    for my $name (@{ $models // \@TEST_MODELS }) {
        my $path = model_path($name);
        SKIP: {
            Test::More::skip("test model '$name' not found (run: perl t/fetch-models)", 1) unless $path;
            require Lugh;
            $body->($name, Lugh::Model->new(model => $path));
        }
    }
}

# Tests one case of llama.cpp's ref-json output (prompt, tokens, top, greedy
# made with -n $n_greedy) against a session: the tokenizer's ids (when a
# tokenizer is given), each top-20 logit within $tolerance, the greedy
# continuation identical. Returns the largest logit difference.
sub check_reference_case {
    my ($inference, $tokenizer, $case, $label, $tolerance, $n_greedy, $call) = @_;
    require Test::More;
    my @tokens = @{ $case->{tokens} };
    if ($tokenizer) {
        Test::More::is_deeply([ $tokenizer->encode($case->{prompt}) ], \@tokens, "$label: our tokenizer agrees");
    }
    my @logits = $inference->forward(tokens => \@tokens, %{ $call // {} });
    my $diff = max(map { abs($logits[ $_->[0] ] - $_->[1]) } @{ $case->{top} });
    Test::More::cmp_ok($diff, '<=', $tolerance,
        "$label: top-20 logits within $tolerance (max diff " . sprintf('%.4f', $diff) . ')');
    my @expected = @{ $case->{greedy} };
    # ended by an end-of-generation token (which generate drops), perhaps at the last place
    pop @expected if @expected < $n_greedy || ($tokenizer && @expected && $tokenizer->is_eog($expected[-1]));
    my @greedy = $inference->generate(\@tokens, greedy => 1, max_tokens => $n_greedy, %{ $call // {} });
    Test::More::is_deeply(\@greedy, \@expected, "$label: $n_greedy-token greedy continuation identical");
    return $diff;
}

# check_reference_case for a case of an arch-split set: the prompt's first
# half goes into a cache in one call, the rest in a second (the logits after
# it within $tolerance of llama.cpp's), and greedy generation continuing a
# cache that holds the first half gives llama.cpp's tokens.
sub check_split_case {
    my ($inference, $tokenizer, $case, $label, $tolerance, $n_greedy) = @_;
    require Test::More;
    my @tokens = @{ $case->{tokens} };
    my $half = int(@tokens / 2);
    my $with_half = sub {
        my $cache = $inference->create_kv_cache;
        $inference->forward(tokens => [ @tokens[ 0 .. $half - 1 ] ], cache => $cache) if $half;
        return $cache;
    };
    my @logits = $inference->forward(tokens => [ @tokens[ $half .. $#tokens ] ], cache => $with_half->());
    my $diff = max(map { abs($logits[ $_->[0] ] - $_->[1]) } @{ $case->{top} });
    Test::More::cmp_ok($diff, '<=', $tolerance,
        "$label: top-20 logits after the second half within $tolerance (max diff " . sprintf('%.4f', $diff) . ')');
    my @expected = @{ $case->{greedy} };
    pop @expected if @expected < $n_greedy || (@expected && $tokenizer->is_eog($expected[-1]));
    my @greedy = $inference->generate(\@tokens, greedy => 1, max_tokens => $n_greedy, cache => $with_half->(),
        stats => \my %stats);
    Test::More::is($stats{n_reused}, $half, "$label: the cached half reused");
    Test::More::is_deeply(\@greedy, \@expected, "$label: $n_greedy-token greedy continuation identical");
    return $diff;
}

1;
