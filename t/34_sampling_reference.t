use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path reference_dir read_jsonl @TEST_MODELS);
use Lugh;

# Seeded sampling against llama.cpp b11434: for each case of
# t/data/reference/VARIANT/sampling.MODEL.jsonl (bench/make-sampling-reference:
# every sampler alone, the default chain, everything on, logit_bias, mirostat
# 1 and 2; several prompts and seeds), Lugh's generate() with the same
# prompt, options and seed gives the same 32 tokens as llama-completion's
# sampler (its final end-of-generation token, which generate() does not
# return, aside). The samples depend on the logits bit for bit, so they are
# compared only with llama.cpp built for this build's CPU kernel variant.

my $variant = Lugh::cpu_features()->{variant};
my $dir = reference_dir() . "/$variant";
my @files = grep { -f "$dir/sampling.$_.jsonl" } @TEST_MODELS;
plan skip_all => "no sampling reference for this build's kernel variant ($variant): "
    . 'bench/make-sampling-reference makes one' unless @files;

for my $name (@TEST_MODELS) {
    my $path = model_path($name);
    my $file = "$dir/sampling.$name.jsonl";
    SKIP: {
        skip "model $name is missing (run: perl t/fetch-models $name)", 1 unless $path;
        skip "no sampling reference for $name in $variant", 1 unless -f $file;
        my $model = Lugh::Model->new(model => $path);
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 1, flash_attn => 1);
        my (%equal, %total);
        for my $case (@{ read_jsonl($file) }) {
            my @want = @{ $case->{sampled} };
            pop @want if $case->{stop} eq 'eog';
            my @got = $inference->generate($case->{tokens}, max_tokens => scalar @{ $case->{sampled} },
                seed => $case->{seed}, %{ $case->{options} });
            (my $short = substr($case->{prompt}, 0, 16)) =~ s/\n/\\n/g;
            my $same = 0;
            $same++ while $same < @want && $same < @got && $got[$same] == $want[$same];
            $equal{ $case->{case} } += $same;
            $total{ $case->{case} } += @want;
            is_deeply(\@got, \@want, "$name $case->{case} seed $case->{seed} '$short': llama.cpp's tokens")
                or diag("first difference at token $same");
        }
        diag(join ', ', "$name equal tokens", map {"$_ $equal{$_}/$total{$_}"} sort keys %total);
    }
}

done_testing;
