use strict;
use warnings;
use Test::More;
use List::Util ();
use lib 't/lib';
use LughTestInference qw(smollm2 argmax max_abs_diff);

my ($model, $inference) = smollm2();
my @prompt = (504, 3575, 282, 4649, 314);    # "The capital of France is"

isa_ok($inference, 'Lugh::Inference');
is($inference->n_vocab, 49152, 'n_vocab');
is($inference->n_layer, 30, 'n_layer');
is($inference->n_threads, List::Util::min(2, Lugh::cpu_features()->{n_cpus}), 'n_threads as given (at most the CPUs)');
is($inference->n_ctx, 512, 'n_ctx as given');
cmp_ok($inference->n_batch, '>=', 1, 'n_batch has a default');
like($inference->flash_attn, qr/\A[01]\z/, "flash_attn 'auto' resolves to 0 or 1");
is($inference->backend, Lugh::best_backend(), "backend 'auto' is the best one");
is($inference->model->architecture, 'llama', 'model');

subtest 'defaults' => sub {
    my $default = Lugh::Inference->new(model => $model);
    is($default->n_ctx, 4096, 'n_ctx = min(training context 8192, 4096)');
    cmp_ok($default->n_threads, '>=', 1, 'n_threads defaults to the cores');
};

subtest 'explicit settings are honoured' => sub {
    for my $fa (0, 1) {
        my $i = Lugh::Inference->new(model => $model, backend => 'CPU', n_threads => 1, n_ctx => 64,
            flash_attn => $fa, n_batch => 8);
        is($i->flash_attn, $fa, "flash_attn $fa");
        is($i->n_batch, 8, 'n_batch');
        is($i->n_ctx, 64, 'n_ctx');
        is($i->n_threads, 1, 'n_threads');
        is($i->backend, 'CPU', 'backend');
    }
};

my @logits = $inference->forward(\@prompt);
is(scalar @logits, 49152, 'forward gives n_vocab logits');
is(argmax(\@logits), 7042, 'the most likely next token is " Paris"');

my @named = $inference->forward(tokens => \@prompt);
cmp_ok(max_abs_diff(\@logits, \@named), '<', 1e-6, 'forward(tokens => ...) is the same');
my @simple = $inference->forward_simple(\@prompt);
cmp_ok(max_abs_diff(\@logits, \@simple), '<', 1e-6, 'forward_simple is the same');
my @again = $inference->forward(\@prompt);
cmp_ok(max_abs_diff(\@logits, \@again), '<', 1e-6, 'forward without a cache sees only the tokens given');

my $rows = $inference->forward_all(\@prompt);
is(ref $rows, 'ARRAY', 'forward_all gives an array');
is(scalar @$rows, scalar @prompt, 'one row per token');
is(scalar @{ $rows->[0] }, 49152, 'each with n_vocab logits');
cmp_ok(max_abs_diff($rows->[-1], \@logits), '<', 0.02, 'the last row is forward()');
my @first = $inference->forward([ $prompt[0] ]);
cmp_ok(max_abs_diff($rows->[0], \@first), '<', 0.02, 'the first row is the forward of the first token');
my $named_rows = $inference->forward_all(tokens => \@prompt);
is(scalar @$named_rows, scalar @prompt, 'forward_all(tokens => ...)');

subtest 'the session keeps its model alive' => sub {
    my ($m, $i) = smollm2();
    undef $m;
    my @l = $i->forward(\@prompt);
    is(argmax(\@l), 7042, 'forward after the model object is gone');
    is($i->model->architecture, 'llama', 'model still there');
};

done_testing;
