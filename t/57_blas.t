use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path);
use LughTestInference qw(run_parity_set);
use Lugh;

# ggml's BLAS backend (a build with LUGH_BACKENDS=blas): the parity prompts
# against llama.cpp built with the same backend (bench/build-llama-reference
# blas; set `blas` of t/data/reference/VARIANT). OpenBLAS takes the matrix
# products of 32 tokens or more whose weights are not in the CPU's repacked
# layouts, so the prompts' logits differ from the CPU-only ones; Lugh and
# llama.cpp must still agree as closely as in t/50_parity.t.

plan skip_all => 'this Lugh was built without the BLAS backend (LUGH_BACKENDS=blas perl Makefile.PL builds it)'
    unless Lugh::backend_available('BLAS');

SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip('test model smollm2-135m-q4_1 not found (run: perl t/fetch-models)', 1);
    my $model = Lugh::Model->new(model => $path);
    my $blas = Lugh::Inference->new(model => $model, backend => 'BLAS', n_ctx => 256, n_threads => 2);
    is($blas->backend, 'BLAS', "the session's backend is BLAS");
    is_deeply([ map { $_->{name} } $blas->devices ], ['CPU'], 'BLAS takes operations, not layers: they stay on the CPU');
    my $cpu = Lugh::Inference->new(model => $model, backend => 'CPU', n_ctx => 256, n_threads => 2);
    my @short = (1 .. 8);
    is_deeply([ $blas->forward(\@short) ], [ $cpu->forward(\@short) ], 'fewer than 32 tokens: the CPU computes them all');
}

my $checked = run_parity_set(set => 'blas', tolerance => 0.05, greedy => 32, inference_options => { backend => 'BLAS' });
diag("$checked reference cases checked");

done_testing;
