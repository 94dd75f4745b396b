# BERT encoders (bert, nomic-bert) against llama.cpp b11434: pooled
# embeddings within 1e-3 with cosine >= 0.9999 of llama-embedding's, and the
# rerank scores of its rank pooling, on the random-weight models that
# t/make-arch-models writes (seed 1; real bert-bge vocabulary). The expected
# values (t/data/reference/VARIANT/encoders.CASE.fa-on|off.jsonl) come from
# bench/make-encoder-reference; a kernel variant without them is skipped.
# Also: the croaks of rerank and of an encoder asked for next-token logits.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use List::Util qw(max);
use lib 't/lib';
use LughTest qw(arch_models model_path read_jsonl reference_dir);
use Lugh;

plan skip_all => 'ggml-vocab-bert-bge not found (run: perl t/fetch-models vocab)' unless model_path('ggml-vocab-bert-bge');
my $dir = tempdir(CLEANUP => 1);
my $models = arch_models($dir, 1, qw(bert nomic-bert));
plan skip_all => $models unless ref $models;
my $variant = Lugh::cpu_features()->{variant};
binmode $_, ':encoding(UTF-8)' for map { Test::More->builder->$_ } qw(output failure_output todo_output);

sub compare {
    my ($got, $want) = @_;
    my ($diff, $dot, $na, $nb) = (0, 0, 0, 0);
    for my $i (0 .. $#$want) {
        $diff = max($diff, abs($got->[$i] - $want->[$i]));
        $dot += $got->[$i] * $want->[$i];
        $na  += $got->[$i]**2;
        $nb  += $want->[$i]**2;
    }
    return ($diff, $na && $nb ? $dot / sqrt($na * $nb) : 0);
}

for my $name (qw(bert nomic-bert)) {
    my $model = Lugh::Model->new(model => $models->{$name});
    is($model->architecture, $name, "$name: the architecture");
    for my $fa (qw(on off)) {
        my $file = File::Spec->catfile(reference_dir(), $variant, "encoders.$name.fa-$fa.jsonl");
        SKIP: {
            skip "no encoder reference for kernel variant $variant (run bench/make-encoder-reference)", 1 unless -f $file;
            my $inference = Lugh::Inference->new(model => $model, n_threads => 2, flash_attn => $fa eq 'on' ? 1 : 0);
            my ($worst, $worst_cos, $n) = (0, 1, 0);
            for my $row (@{ read_jsonl($file) }) {
                if (exists $row->{score}) {
                    my $scores = $inference->rerank(query => $row->{query}, documents => [$row->{document}]);
                    my $d = abs($scores->[0] - $row->{score});
                    ok($d < 1e-3, "$name fa-$fa rerank '$row->{query}' / '$row->{document}': $scores->[0] vs $row->{score}");
                    $worst = max($worst, $d);
                    next;
                }
                my $got = $inference->embed($row->{prompt}, pooling => $row->{pooling}, normalize => 0);
                is(scalar @$got, scalar @{ $row->{embedding} }, "$name fa-$fa: width");
                my ($d, $cos) = compare($got, $row->{embedding});
                ok($d < 1e-3 && $cos >= 0.9999,
                    "$name fa-$fa $row->{pooling} '$row->{prompt}': max difference $d, cosine $cos");
                $worst = max($worst, $d);
                $worst_cos = $cos if $cos < $worst_cos;
                $n++;
            }
            diag(sprintf '%-10s fa-%-3s: %d embeddings, worst difference %.2g, lowest cosine %.9f', $name, $fa, $n,
                $worst, $worst_cos);
        }
    }
}

# The model's own pooling is the default (bert: CLS, nomic-bert: mean).
{
    my $inference = Lugh::Inference->new(model => Lugh::Model->new(model => $models->{bert}), n_threads => 2);
    is_deeply($inference->embed('Hello world'), $inference->embed('Hello world', pooling => 'cls'),
        'bert: the file\'s pooling_type (CLS) is the default');
    my $scores = $inference->rerank(query => 'q', documents => ['first', 'second', 'third']);
    is(scalar @$scores, 3, 'rerank: one score a document');

    # bad input croaks with the problem named
    my @bad = (
        [[documents => ['a']],               qr/missing query/,                       'rerank without a query'],
        [[query => 'q'],                     qr/missing documents/,                   'rerank without documents'],
        [[query => 'q', documents => 'a'],   qr/documents must be an ARRAY reference/, 'documents not an array'],
        [[query => 'q', documents => []],    qr/documents is empty/,                  'no documents'],
        [[query => 'q', documents => [undef]], qr/document 0 is missing/,            'an undefined document'],
        [[query => 'q', documents => ['a'], bogus => 1], qr/bogus/,                  'an unknown option'],
    );
    for my $case (@bad) {
        my ($args, $re, $what) = @$case;
        eval { $inference->rerank(@$args) };
        like($@, $re, "$what croaks");
    }
    eval { $inference->generate([101, 7592], max_tokens => 2) };
    like($@, qr/bert model is an encoder: it has no next-token logits/, 'an encoder asked to generate croaks');
    eval { $inference->logprobs('hello') };
    like($@, qr/is an encoder/, 'an encoder asked for log-probabilities croaks');
}
{
    my $nomic = Lugh::Inference->new(model => Lugh::Model->new(model => $models->{'nomic-bert'}), n_threads => 2);
    eval { $nomic->rerank(query => 'q', documents => ['d']) };
    like($@, qr/nomic-bert model has no classification head/, 'rerank without a classification head croaks');
}
SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip 'smollm2-135m-q4_1 not found', 1;
    my $decoder = Lugh::Inference->new(model => Lugh::Model->new(model => $path), n_threads => 2);
    eval { $decoder->rerank(query => 'q', documents => ['d']) };
    like($@, qr/llama model has no classification head/, 'a decoder asked to rerank croaks');
}
SKIP: {
    my $bert = Lugh::Inference->new(model => Lugh::Model->new(model => $models->{bert}), n_threads => 2, n_batch => 8);
    eval { $bert->embed('one two three four five six seven eight nine ten') };
    like($@, qr/more than the batch of 8 that an encoder \(bert\) must see at once/, 'a sequence longer than n_batch croaks');
}

done_testing;
