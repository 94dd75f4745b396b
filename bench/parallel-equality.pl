#!/usr/bin/perl
# Greedy equality and throughput of Lugh::Batch (continuous batching)
# against solo generate runs.
#   perl -Mblib bench/parallel-equality.pl [MODEL_NAME ...]
# For each model: 8 prompts (some ~110 tokens, some sharing a long prefix)
# over 4 slots, default and deterministic, each compared with the prompt's
# solo generate on a fresh cache. With --throughput: 16 requests of 64
# tokens, slots 4 vs one after another (tokens/s).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use LughTest qw(model_path);
use Lugh;
use Time::HiRes qw(time);

my $throughput = grep { $_ eq '--throughput' } @ARGV;
my @names = grep { !/^--/ } @ARGV;
@names = qw(smollm2-135m-q4_1 qwen2.5-coder-0.5b-q4_k_m gemma3-270m-q4_k_m) unless @names;

my $system = 'You are a careful assistant. Answer briefly and precisely, in plain English, and never invent '
    . 'facts you are not sure about. When a question is ambiguous, say which reading you answer. ';
my $long = 'The history of the printing press begins with movable type in East Asia and continues with '
    . 'Gutenberg in Mainz around 1450, whose press spread across Europe within decades, changing how books, '
    . 'pamphlets and newspapers were made, sold and read, and how ideas travelled between cities. ';
my @prompts = (
    'The capital of France is',
    "${system}Question: what is the boiling point of water at sea level? Answer:",
    "${system}Question: name three primary colours. Answer:",
    "$long$long In short, the press",
    'def fibonacci(n):',
    "${long}Summary:",
    'Once upon a time, in a small village by the sea,',
    "${system}${long}Question: where did Gutenberg work? Answer:",
);

for my $name (@names) {
    my $path = model_path($name) or do { print "$name: not found\n"; next };
    my $model = Lugh::Model->new(model => $path);
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 512);
    my $tok = Lugh::Tokenizer->new(model => $model);
    my @tokens = map { [ $tok->encode($_) ] } @prompts;
    my $n = 32;
    my @solo = map { scalar $inference->generate($_, max_tokens => $n, greedy => 1) } @tokens;
    printf "%s: prompt lengths %s\n", $name, join(' ', map { scalar @$_ } @tokens);
    for my $det (0, 1) {
        # twice: the second run finds the caches filled by the first
        for my $round (1, 2) {
            my $batch = Lugh::Batch->new($inference, slots => 4, deterministic => $det);
            my @got;
            for my $pass (1 .. $round) {
                my %index;
                $index{ $batch->add(prompt => $tokens[$_], max_tokens => $n, greedy => 1) } = $_ for 0 .. $#tokens;
                @got = map { [] } @tokens;
                until ($batch->is_idle) {
                    for my $e ($batch->step) {
                        push @{ $got[ $index{ $e->{id} } ] }, $e->{token} if $e->{type} eq 'token';
                        die $e->{error} if $e->{type} eq 'error';
                    }
                }
            }
            my @equal = grep { "@{ $got[$_] }" eq "@{ $solo[$_] }" } 0 .. $#tokens;
            my @first_diff = map {
                my $i = $_;
                my $k = 0;
                $k++ while $k < @{ $solo[$i] } && ($got[$i][$k] // -1) == $solo[$i][$k];
                "p$i\@$k";
            } grep { "@{ $got[$_] }" ne "@{ $solo[$_] }" } 0 .. $#tokens;
            printf "  deterministic %d, %s caches: %d/%d equal to solo%s\n", $det, $round == 1 ? 'fresh' : 'warm',
                scalar @equal, scalar @tokens, @first_diff ? " (differ: @first_diff)" : '';
        }
    }
    next unless $throughput;
    my @reqs = map { $tokens[ $_ % @tokens ] } 0 .. 15;
    my $t0 = time;
    my $count = 0;
    $count += @{ scalar $inference->generate($_, max_tokens => 64, greedy => 1, eos_token => $inference->n_vocab - 1) } for @reqs;
    my $seq = time - $t0;
    printf "  sequential: %d tokens in %.2f s = %.1f tokens/s\n", $count, $seq, $count / $seq;
    for my $det (0, 1) {
        my $t0 = time;
        my $r = $inference->generate_parallel([ map { { prompt => $_, max_tokens => 64, greedy => 1, eos_token => $inference->n_vocab - 1,
            cache_prompt => 0 } } @reqs ], slots => 4, deterministic => $det);
        my $dt = time - $t0;
        my $c = 0;
        $c += @{ $_->{tokens} } for @$r;
        printf "  slots 4%s: %d tokens in %.2f s = %.1f tokens/s (x%.2f)\n", $det ? ' deterministic' : '',
            $c, $dt, $c / $dt, ($c / $dt) / ($count / $seq);
    }
}
