package LughTestInference;

# Helpers for the tests of Lugh::Inference: a session over the smallest test
# model (or skip), and comparisons of logits.

use strict;
use warnings;
use Exporter 'import';
use List::Util qw(max);
use LughTest qw(require_model reference_dir read_jsonl model_path @TEST_MODELS);

our @EXPORT_OK = qw(smollm2 argmax max_abs_diff reference_cases check_reference_case
    for_each_test_model);

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

# The cases of logits.MODEL.fa-on|off.jsonl, or an empty list.
sub reference_cases {
    my ($model, $fa) = @_;
    my $dir = reference_dir() // return ();
    my $file = "$dir/logits.$model.fa-$fa.jsonl";
    return -f $file ? @{ read_jsonl($file) } : ();
}

# Runs $body->($name, $model) for each of the three test models, or skips
# (one test) a model whose file is absent.
sub for_each_test_model {
    my ($body) = @_;
    require Test::More;
    for my $name (@TEST_MODELS) {
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
    my ($inference, $tokenizer, $case, $label, $tolerance, $n_greedy) = @_;
    require Test::More;
    my @tokens = @{ $case->{tokens} };
    if ($tokenizer) {
        Test::More::is_deeply([ $tokenizer->encode($case->{prompt}) ], \@tokens, "$label: our tokenizer agrees");
    }
    my @logits = $inference->forward(\@tokens);
    my $diff = max(map { abs($logits[ $_->[0] ] - $_->[1]) } @{ $case->{top} });
    Test::More::cmp_ok($diff, '<=', $tolerance,
        "$label: top-20 logits within $tolerance (max diff " . sprintf('%.4f', $diff) . ')');
    my @expected = @{ $case->{greedy} };
    pop @expected if @expected < $n_greedy;    # ended by an end-of-generation token, which generate drops
    my @greedy = $inference->generate(\@tokens, greedy => 1, max_tokens => $n_greedy);
    Test::More::is_deeply(\@greedy, \@expected, "$label: $n_greedy-token greedy continuation identical");
    return $diff;
}

1;
