# Lugh::Train: the cross-entropy and mean-squared-error losses (values
# against Perl, gradients against the closed forms and central differences,
# Lugh 0.12's scenarios), and the batching and training-step helpers.
# Needs no downloaded model, except tokenize_batch (skipped without SmolLM2).
use strict;
use warnings;
use Test::More;
use List::Util qw(sum max);
use lib 't/lib';
use LughTest qw(croaks_like model_path);
use Lugh;

srand 74;

sub new_ctx { return Lugh::Context->new(mem_size => 16 * 1024 * 1024) }

sub variable {
    my ($ctx, $values, $shape, $grad) = @_;
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', @$shape, { requires_grad => $grad ? 1 : 0 });
    $t->set_data(@$values);
    return $t;
}

# -mean over rows of log softmax(row)[target], in Perl.
sub cross_entropy {
    my ($values, $n_classes, $targets) = @_;
    my $total = 0;
    for my $row (0 .. $#$targets) {
        my @x = @$values[ $row * $n_classes .. ($row + 1) * $n_classes - 1 ];
        my $m = max(@x);
        my $log_sum = $m + log(sum(map { exp($_ - $m) } @x));
        $total += $log_sum - $x[ $targets->[$row] ];
    }
    return $total / @$targets;
}

subtest 'cross_entropy_loss: Lugh 0.12 scenarios' => sub {
    my $ctx = new_ctx();
    my $logits = variable($ctx, [ 1 .. 5 ], [5], 1);
    my $loss = Lugh::Train->cross_entropy_loss($ctx, $logits, [4]);
    my ($value) = $loss->get_data;
    ok($value > 0 && $value < 2, 'logits 1..5, target 4: 0 < loss < 2');
    cmp_ok(abs($value - cross_entropy([ 1 .. 5 ], 5, [4])), '<', 1e-5, 'and equals -log softmax[4]') or diag $value;

    my $zeros = variable($ctx, [ (0) x 5 ], [5], 1);
    Lugh::Train->cross_entropy_loss($ctx, $zeros, [2])->backward;
    my @grad = @{ $zeros->grad };
    my @want = (0.2, 0.2, -0.8, 0.2, 0.2);
    ok(!grep({ abs($grad[$_] - $want[$_]) > 1e-5 } 0 .. 4), 'zero logits, target 2: gradient softmax - one_hot')
        or diag "@grad";
    cmp_ok(abs(sum(@grad)), '<', 1e-3, 'the gradient sums to 0');

    my @batch = map { rand(4) - 2 } 1 .. 12;
    my $rows = variable($ctx, \@batch, [ 4, 3 ], 1);
    my $batch_loss = Lugh::Train->cross_entropy_loss($ctx, $rows, [ 0, 1, 2 ]);
    cmp_ok(abs(($batch_loss->get_data)[0] - cross_entropy(\@batch, 4, [ 0, 1, 2 ])), '<', 1e-5,
        'a batch of 3 rows: the mean over rows');
    $batch_loss->backward;
    my @g = @{ $rows->grad };
    for my $row (0 .. 2) {
        my @x = @batch[ $row * 4 .. $row * 4 + 3 ];
        my $z = sum(map { exp } @x);
        for my $j (0 .. 3) {
            my $want = (exp($x[$j]) / $z - ($j == $row ? 1 : 0)) / 3;
            cmp_ok(abs($g[ $row * 4 + $j ] - $want), '<', 1e-5, "row $row class $j: (softmax - one_hot) / rows");
        }
    }

    my $big = variable($ctx, [ map { rand(2) - 1 } 1 .. 1000 ], [1000], 1);
    my $target = int rand 1000;
    Lugh::Train->cross_entropy_loss($ctx, $big, [$target])->backward;
    is(scalar @{ $big->grad }, 1000, 'a 1000-class row has 1000 gradients');
    cmp_ok($big->grad->[$target], '<', 0, 'the target class gradient is negative');
};

subtest 'cross_entropy_loss: central differences' => sub {
    my @x = map { rand(2) - 1 } 1 .. 10;
    my $loss_at = sub {
        my $ctx = new_ctx();
        my $t = variable($ctx, $_[0], [ 5, 2 ], 1);
        my $loss = Lugh::Train->cross_entropy_loss($ctx, $t, [ 3, 0 ]);
        return ($loss, $t);
    };
    my ($loss, $t) = $loss_at->(\@x);
    $loss->backward;
    my @grad = @{ $t->grad };
    my $h = 1e-2;
    for my $i (0 .. $#x) {
        my @up = @x;   $up[$i] += $h;
        my @down = @x; $down[$i] -= $h;
        my $numeric = ((($loss_at->(\@up))[0]->get_data)[0] - (($loss_at->(\@down))[0]->get_data)[0]) / (2 * $h);
        my $error = abs($grad[$i] - $numeric) / max(abs $numeric, 0.1);
        cmp_ok($error, '<=', 1e-2, "element $i: analytic $grad[$i], numeric $numeric");
    }
};

subtest 'cross_entropy_loss: errors' => sub {
    my $ctx = new_ctx();
    my $logits = variable($ctx, [ 1, 2, 3 ], [3], 1);
    croaks_like(sub { Lugh::Train->cross_entropy_loss($ctx, $logits, [ 0, 1 ]) },
        qr/Number of targets \(2\) must match batch size \(1\)/, 'two targets for one row');
    croaks_like(sub { Lugh::Train->cross_entropy_loss($ctx, $logits, [5]) }, qr/Target ID 5 .*out of range \[0, 3\)/,
        'a target beyond the classes');
    croaks_like(sub { Lugh::Train->cross_entropy_loss($ctx, $logits, [-1]) }, qr/out of range/, 'a negative target');
    croaks_like(sub { Lugh::Train->cross_entropy_loss($ctx, $logits, 2) }, qr/array reference of class ids/,
        'targets not in an array');
    croaks_like(sub { Lugh::Train->cross_entropy_loss($ctx, 'logits', [0]) }, qr/logits must be an Lugh::Autograd::Tensor/,
        'logits that are not a tensor');
    croaks_like(sub { Lugh::Train->cross_entropy_loss($ctx, $logits, ['x']) }, qr/must be an integer/, 'a target that is not a number');
    ok(Lugh::Train->cross_entropy_loss($ctx, $logits, [0]), 'the process goes on');
};

subtest 'mse_loss' => sub {
    my $ctx = new_ctx();
    my $p = variable($ctx, [ 1, 2, 3 ], [3], 1);
    my $same = variable($ctx, [ 1, 2, 3 ], [3]);
    cmp_ok((Lugh::Train->mse_loss($ctx, $p, $same)->get_data)[0], '<', 1e-4, 'equal tensors: 0');
    my $off = variable($ctx, [ 2, 3, 4 ], [3]);
    cmp_ok(abs((Lugh::Train->mse_loss($ctx, $p, $off)->get_data)[0] - 1), '<', 1e-4, 'off by one: 1');
    my $twos = variable($ctx, [ 2, 2, 2 ], [3]);
    Lugh::Train->mse_loss($ctx, $p, $twos)->backward;
    my @g = @{ $p->grad };
    ok($g[0] < 0 && abs($g[1]) < 1e-6 && $g[2] > 0, 'gradient signs follow p - t') or diag "@g";
    cmp_ok(abs($g[0] + $g[2]), '<', 1e-6, 'and are symmetric');
    cmp_ok(abs($g[2] - 2 / 3), '<', 1e-6, 'd/dp = 2 (p - t) / n');
    my $column = variable($ctx, [ 1, 2, 3 ], [ 1, 3 ]);
    cmp_ok((Lugh::Train->mse_loss($ctx, $p, $column)->get_data)[0], '<', 1e-6, 'only the element counts must agree');
    croaks_like(sub { Lugh::Train->mse_loss($ctx, $p, variable($ctx, [ 1, 2 ], [2])) },
        qr/same number of elements/, 'different element counts');
    croaks_like(sub { Lugh::Train->mse_loss($ctx, $p, [ 1, 2, 3 ]) }, qr/targets must be an Lugh::Autograd::Tensor/,
        'targets that are not a tensor');
    my $no_grad = Lugh::Autograd::no_grad { Lugh::Train->mse_loss($ctx, $p, $twos) };
    ok(!$no_grad->requires_grad, 'inside no_grad the loss records nothing');
};

subtest 'batch_data' => sub {
    my @by3 = Lugh::Train->batch_data([ 1 .. 10 ], batch_size => 3);
    is_deeply(\@by3, [ [ 1, 2, 3 ], [ 4, 5, 6 ], [ 7, 8, 9 ], [10] ], 'batches of 3, the last shorter');
    is(scalar(my @by5 = Lugh::Train->batch_data([ 1 .. 10 ], batch_size => 5)), 2, 'two batches of 5');
    is_deeply([ Lugh::Train->batch_data([]) ], [], 'no data, no batches');
    srand 42;
    my @a = Lugh::Train->batch_data([ 1 .. 20 ], batch_size => 20, shuffle => 1);
    srand 42;
    my @b = Lugh::Train->batch_data([ 1 .. 20 ], batch_size => 20, shuffle => 1);
    is_deeply(\@a, \@b, 'srand repeats a shuffle');
    is_deeply([ sort { $a <=> $b } @{ $a[0] } ], [ 1 .. 20 ], 'a shuffle keeps every item');
    croaks_like(sub { Lugh::Train->batch_data([1], batch_size => 0) }, qr/batch_size must be a positive integer/, 'batch_size 0');
    croaks_like(sub { Lugh::Train->batch_data([1], size => 2) }, qr/unknown option 'size'/, 'an unknown option');
    croaks_like(sub { Lugh::Train->batch_data('data') }, qr/Usage/, 'data not in an array');
};

subtest 'tokenize_batch' => sub {
    my $path = model_path('smollm2-135m-q4_1');
    plan skip_all => 'SmolLM2 is not downloaded (perl t/fetch-models)' unless $path && -f $path;
    my $tok = Lugh::Tokenizer->new(model => Lugh::Model->new(model => $path));
    my ($inputs, $targets) = Lugh::Train->tokenize_batch($tok, [ 'Hello world, how are you today?', 'Hi', '' ], max_length => 5);
    ok(@$inputs >= 1, 'texts of two or more tokens make examples');
    for my $i (0 .. $#$inputs) {
        my @in = @{ $inputs->[$i] };
        my @out = @{ $targets->[$i] };
        ok(@in <= 4, 'truncated to max_length, less the last token');
        is_deeply([ @out[ 0 .. $#out - 1 ] ], [ @in[ 1 .. $#in ] ], 'targets are the inputs shifted by one');
    }
    croaks_like(sub { Lugh::Train->tokenize_batch(undef, ['x']) }, qr/Lugh::Tokenizer is required/, 'no tokenizer');
};

subtest 'training_step' => sub {
    package Toy {
        sub new     { my ($class, %args) = @_; return bless {%args}, $class }
        sub forward { my ($self, $x) = @_; return Lugh::Autograd::Ops->mul($self->{ctx}, $x, $self->{w}) }
    }
    my $ctx = new_ctx();
    my $w = variable($ctx, [0], [1], 1);
    my $x = variable($ctx, [ 1, 2, 3 ], [3]);
    my $y = variable($ctx, [ 2, 4, 6 ], [3]);
    my $opt = Lugh::Optimizer::SGD->new(lr => 0.05, params => [$w]);
    my $model = Toy->new(ctx => $ctx, w => $w);
    my $first = Lugh::Train->training_step($model, $opt, $x, $y, loss_fn => 'mse', ctx => $ctx);
    cmp_ok(abs($first - 56 / 3), '<', 1e-4, 'the first step returns the loss before the update');
    my $last;
    $last = Lugh::Train->training_step($model, $opt, $x, $y, loss_fn => 'mse', ctx => $ctx) for 1 .. 50;
    cmp_ok($last, '<', 1e-4, 'fifty steps fit w') or diag $last;
    cmp_ok(abs(($w->get_data)[0] - 2), '<', 1e-2, 'w is 2');

    my $classes = variable($ctx, [ 0, 0, 0 ], [3], 1);
    my $identity = bless {}, 'Identity';
    { no strict 'refs'; *{'Identity::forward'} = sub { $classes } }
    my $ce = Lugh::Train->training_step($identity, Lugh::Optimizer::SGD->new(lr => 1, params => [$classes]), undef, [1], ctx => $ctx);
    cmp_ok(abs($ce - log 3), '<', 1e-5, 'cross_entropy is the default loss');
    croaks_like(sub { Lugh::Train->training_step($model, $opt, $x, $y, loss_fn => 'hinge', ctx => $ctx) },
        qr/unknown loss_fn 'hinge'/, 'an unknown loss');
    croaks_like(sub { Lugh::Train->training_step($model, $opt, $x, $y, loss_fn => 'mse') }, qr/ctx option is required/,
        'no ctx');
    croaks_like(sub { Lugh::Train->training_step('model', $opt, $x, $y, ctx => $ctx) }, qr/forward method/,
        'a model without forward');
};

subtest 'zero_grad' => sub {
    my $ctx = new_ctx();
    my $w = variable($ctx, [ 1, 2 ], [2], 1);
    $w->backward(3, 4);
    Lugh::Train->zero_grad($w, undef, 'not a tensor');
    is_deeply($w->grad, [ 0, 0 ], 'gradients zeroed; other arguments ignored');
};

done_testing;
