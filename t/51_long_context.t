use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(read_jsonl);
use LughTestInference qw(check_reference_case for_each_test_model);
use Lugh;

# Prompts longer than Gemma-3's 512-token sliding window (about 810 tokens):
# llama.cpp b11434's outputs for them (t/data/long-context, made with
# ../shared/tools/ref_json.cpp, 2 threads, n_ctx 1024, AMX off) against Lugh,
# as t/50_parity.t does for the shared reference. Gemma-3's window layers see
# only the last 512 positions; the global layers and the other models see all.

my $dir = 't/data/long-context';
my $tolerance = 0.05;
for_each_test_model(sub {
    my ($name, $model) = @_;
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    for my $fa (qw(on off)) {
        my ($case) = @{ read_jsonl("$dir/logits.$name.fa-$fa.jsonl") };
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 2,
            flash_attn => $fa eq 'on' ? 1 : 0);
        my $n_tokens = @{ $case->{tokens} };
        cmp_ok($n_tokens, '>', 512, "$name fa-$fa: the prompt ($n_tokens tokens) is longer than the window");
        my $diff = check_reference_case($inference, $tokenizer, $case, "$name fa-$fa long prompt", $tolerance, 16);
        diag(sprintf "%s fa-%s: %d-token prompt, top-20 logit difference %.5f", $name, $fa, $n_tokens, $diff);
    }
});

done_testing;
