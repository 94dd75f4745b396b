use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(run_parity_set);
use Lugh;

# Lugh against llama.cpp b11434 on the 8 prompts of
# t/data/reference/prompts/parity.jsonl, for the three test models with flash
# attention on and off, through the perl API. The expected outputs were made
# by llama.cpp built for the same CPU kernel variant as this build
# (t/data/reference/VARIANT, Lugh::cpu_features()->{variant}); there the
# top-20 logits must agree within 0.05, the 32-token greedy continuation
# (ended by an end-of-generation token) and the prompt's ids exactly. For a
# variant without reference outputs, what holds across variants (see
# LughTestInference::run_parity_set); the diagnostics say which comparison ran.

my $checked = run_parity_set(set => 'parity', tolerance => 0.05, greedy => 32);
diag("$checked reference cases checked");

done_testing;
