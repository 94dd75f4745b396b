package LughTestInference;

# Helpers for the tests of Lugh::Inference: a session over the smallest test
# model (or skip), and comparisons of logits.

use strict;
use warnings;
use Exporter 'import';
use List::Util qw(max);
use LughTest qw(require_model reference_dir read_jsonl);

our @EXPORT_OK = qw(smollm2 argmax max_abs_diff reference_cases);

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

1;
