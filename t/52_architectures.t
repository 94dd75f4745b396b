use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(arch_models);
use LughTestInference qw(reference_cases reference_variants check_reference_case check_split_case
    check_cross_variant_case);
use Lugh;

# Every architecture row against llama.cpp b11434 (issue #12), on tiny
# random-weight models that t/make-arch-models writes (seed 1; the gguf
# Python package pinned by `perl t/fetch-models gguf-python`) with real
# vocabularies: GQA and MHA, odd head counts, head sizes other than
# n_embd / n_head, tied and separate outputs, F32/F16/Q8_0/Q4_K/Q6_K weights. The
# expected outputs (t/data/reference/VARIANT/arch.CASE.fa-on|off.jsonl) come
# from bench/make-arch-reference. Where this build's kernel variant has them:
# top-20 logits within 0.05 and the 16-token greedy continuation identical;
# else the cross-variant comparison of t/50_parity.t. The same, from a cache
# that holds the first half of the prompt, against llama.cpp's two calls.

my $dir = tempdir(CLEANUP => 1);
my $models = arch_models($dir, 1);
plan skip_all => $models unless ref $models;

my $own = Lugh::cpu_features()->{variant};
# The variants that have this prompt set (a variant's parity files may have
# been made before its architecture files).
my @variants = grep { my @files = glob("t/data/reference/$_/arch.*.jsonl"); @files } reference_variants();
diag("strict comparison with llama.cpp built for this build's kernel variant ($own) where it has the case");

# Encoders have no next-token logits: t/55_encoders.t compares their embeddings.
my %ENCODERS = map { $_ => 1 } qw(bert nomic-bert);
my %seen_arch;
for my $name (sort keys %$models) {
    my $model = Lugh::Model->new(model => $models->{$name});
    next if $ENCODERS{ $model->architecture };
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    $seen_arch{ $model->architecture }++;
    for my $fa (qw(on off)) {
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, flash_attn => $fa eq 'on' ? 1 : 0);
        # This build's kernel variant where it has the case; else (a variant
        # whose reference was made before the case was added, or none at all)
        # the cross-variant comparison with the variants that have it.
        my %cases = map { my @c = reference_cases('arch', $name, $fa, $_); @c ? ($_ => \@c) : () } @variants;
        my @against = $cases{$own} ? ($own) : sort keys %cases;
        if (!@against) {
            fail("$name fa-$fa: no reference outputs in t/data/reference/*/ (run bench/make-arch-reference)");
            next;
        }
        diag("$name fa-$fa: no reference for this build's kernel variant ($own): cross-variant comparison with @against")
            if $against[0] ne $own;
        for my $variant (@against) {
            my $worst = 0;
            for my $case (@{ $cases{$variant} }) {
                (my $short = substr($case->{prompt}, 0, 20)) =~ s/\n/\\n/g;
                my $label = "$name (" . $model->architecture . ") fa-$fa '$short' vs $variant";
                my $diff = $variant eq $own
                    ? check_reference_case($inference, $tokenizer, $case, $label, 0.05, 16)
                    : check_cross_variant_case($inference, $tokenizer, $case, $label);
                $worst = $diff if $diff > $worst;
            }
            diag(sprintf "%-20s %-8s fa-%-3s vs %s: worst top-20 logit difference %.5f",
                $name, $model->architecture, $fa, $variant, $worst);
        }
    }
    # A cache holding half the prompt continued as llama.cpp continues its
    # own (its batched and cached paths round otherwise than one call: the
    # same must happen here). This build's kernel variant only.
    my @split = reference_cases('arch-split', $name, 'off', $own);
    if (!@split) {
        diag("$name: no half-prompt reference for this build's kernel variant ($own)");
        next;
    }
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, flash_attn => 0);
    my $worst = 0;
    for my $case (@split) {
        (my $short = substr($case->{prompt}, 0, 20)) =~ s/\n/\\n/g;
        my $diff = check_split_case($inference, $tokenizer, $case, "$name half-prompt cache '$short'", 0.05, 16);
        $worst = $diff if $diff > $worst;
    }
    diag(sprintf "%-20s %-8s half-prompt cache: worst top-20 logit difference %.5f",
        $name, $model->architecture, $worst);
}
diag('architectures covered: ' . join ' ', sort keys %seen_arch);
is_deeply([ sort keys %seen_arch ], [ sort grep { !$ENCODERS{$_} } Lugh::supported_architectures() ],
    'every supported decoder architecture is compared with llama.cpp');

# Not supported: the croak names the architecture and the supported ones.
my $other = arch_models($dir, 1, '{"name":"unsupported","base":"llama","arch":"mamba"}');
my $mamba = Lugh::Model->new(model => $other->{unsupported});
eval { Lugh::Inference->new(model => $mamba, n_threads => 1) };
like($@, qr/'mamba' is not supported \(supported: llama, .*\bqwen3moe\b.*\bfalcon\b/s,
    'an unsupported architecture croaks, listing the supported');

# Learned positions end at the training context.
my $gpt2 = Lugh::Model->new(model => $models->{gpt2});
eval { Lugh::Inference->new(model => $gpt2, n_threads => 1, n_ctx => 513) };
like($@, qr/n_ctx 513 is more than the 512 positions that '\Q$models->{gpt2}\E' learned \(architecture gpt2/,
    'gpt2: n_ctx past its positions croaks, naming the file');

done_testing;
