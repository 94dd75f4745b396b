use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(run_parity_set);
use Lugh;

# Prompts longer than Gemma-3's 512-token sliding window (about 810 tokens,
# t/data/reference/prompts/long-context.jsonl) against llama.cpp b11434's
# outputs for the same kernel variant, as t/50_parity.t does for short ones:
# Gemma-3's window layers see only the last 512 positions, its global layers
# and the other models see all; 16-token greedy continuations.

my $checked = run_parity_set(
    set       => 'long-context',
    tolerance => 0.05,
    greedy    => 16,
    each      => sub {
        my ($name, $fa, $case, $label) = @_;
        my $n_tokens = @{ $case->{tokens} };
        cmp_ok($n_tokens, '>', 512, "$label: the prompt ($n_tokens tokens) is longer than the window");
    },
);
diag("$checked long-context cases checked");

done_testing;
