# Lugh::Optimizer: SGD (momentum, Nesterov, weight decay) and AdamW steps
# against a Perl implementation of the formulas in the POD, with gradients
# set by backward(@seed) on the parameters; the accessors and option errors;
# gradient clipping; every learning-rate schedule against its formula (and
# Lugh 0.12's scheduler tests); learning (a linear regression with SGD and
# AdamW, XOR with a 2-layer MLP); and 1,000 steps that keep memory flat.
# Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use List::Util qw(max sum);
use POSIX ();
use lib 't/lib';
use LughTest qw(near croaks_like steps_keep_memory_flat);
use Lugh;
use Lugh::Autograd;
use Lugh::Optimizer;

srand 70;

my $LIVE = Lugh::_live_objects();
my $A    = 'Lugh::Autograd::Ops';
my $PI   = 4 * atan2(1, 1);

# ---------------------------------------------------------------- helpers

sub new_ctx { return Lugh::Context->new(mem_size => 1024 * 1024) }

sub n_of { my $n = 1; $n *= $_ for @_; return $n }

# Values rounded to f32, as a tensor stores them.
sub f32_round { return map { unpack 'f', pack 'f', $_ } @_ }

sub randoms { my ($n, $lo, $hi) = @_; return [ f32_round(map { $lo + rand($hi - $lo) } 1 .. $n) ] }

sub param {
    my ($ctx, $shape, $values) = @_;
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', @$shape, { requires_grad => 1 });
    $t->set_data(@$values);
    return $t;
}

sub constant {
    my ($ctx, $shape, $values) = @_;
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', @$shape);
    $t->set_data(@$values);
    return $t;
}

sub opt_str {
    my (%o) = @_;
    return join(', ', map {"$_ => $o{$_}"} sort keys %o);
}

# ---------------------------------------------------------------- updates against the formulas

# The gradients of each step: fixed random values (one of them 0), set with
# backward(@seed) on each parameter after zero_grad.
my @SHAPES = ([5], [3, 2]);
my $STEPS  = 6;
my @GRADS  = map {
    [ map { my $g = randoms(n_of(@$_), -1, 1); $g->[0] = 0; $g } @SHAPES ]
} 1 .. $STEPS;
my @START = map { randoms(n_of(@$_), -2, 2) } @SHAPES;

# Runs $STEPS steps of the optimizer made by $make (the learning rate set to
# $lr_of->($t) before step t when given) and compares every parameter after
# every step with $reference->(\%state, $p, $g, $lr, $t) (which updates the
# values in $p in place).
sub check_rule {
    my ($name, $opt, $reference, $lr_of) = @_;
    my $ctx = new_ctx();
    my @params = map { param($ctx, $SHAPES[$_], $START[$_]) } 0 .. $#SHAPES;
    $opt->add_param($_) for @params;
    my @want  = map { [@$_] } @START;
    my @state = map { {} } @SHAPES;
    my $ok = 1;
    for my $t (1 .. $STEPS) {
        $opt->set_lr($lr_of->($t)) if $lr_of;
        $opt->zero_grad;
        $params[$_]->backward(@{ $GRADS[ $t - 1 ][$_] }) for 0 .. $#params;
        $opt->step;
        for my $k (0 .. $#params) {
            $reference->($state[$k], $want[$k], $GRADS[ $t - 1 ][$k], $opt->get_lr, $t);
            my @got = $params[$k]->get_data;
            for my $i (0 .. $#got) {
                my $w = $want[$k][$i];
                next if abs($got[$i] - $w) <= 1e-6 + 1e-5 * abs($w);
                diag "step $t, parameter $k, element $i: got $got[$i], expected $w";
                $ok = 0;
                last;
            }
        }
    }
    ok($ok, "$name: $STEPS steps follow the formula");
    is($opt->get_step_count, $STEPS, "$name: get_step_count");
}

subtest 'SGD against its formula' => sub {
    for my $momentum (0, 0.9) {
        for my $nesterov (0, 1) {
            for my $wd (0, 0.1) {
                my %o = (lr => 0.1, momentum => $momentum, nesterov => $nesterov, weight_decay => $wd);
                # g += wd p; v = momentum v + g; p -= lr (nesterov ? g + momentum v : v)
                my $reference = sub {
                    my ($state, $p, $grad, $lr) = @_;
                    $state->{v} //= [ (0) x @$p ];
                    for my $i (0 .. $#$p) {
                        my $g = $grad->[$i] + $wd * $p->[$i];
                        $state->{v}[$i] = $momentum * $state->{v}[$i] + $g;
                        $p->[$i] -= $lr * ($nesterov ? $g + $momentum * $state->{v}[$i] : $state->{v}[$i]);
                    }
                };
                check_rule('SGD ' . opt_str(%o), Lugh::Optimizer::SGD->new(%o), $reference);
            }
        }
    }
    # the learning rate read at each step
    my $reference = sub {
        my ($state, $p, $grad, $lr) = @_;
        $state->{v} //= [ (0) x @$p ];
        for my $i (0 .. $#$p) {
            $state->{v}[$i] = 0.5 * $state->{v}[$i] + $grad->[$i];
            $p->[$i] -= $lr * $state->{v}[$i];
        }
    };
    check_rule('SGD with set_lr before each step', Lugh::Optimizer::SGD->new(lr => 1, momentum => 0.5), $reference,
        sub { 0.3 / $_[0] });
};

subtest 'AdamW against its formula' => sub {
    my @configs = (
        {},
        { lr => 0.1,  beta1 => 0.8, beta2 => 0.99, eps => 1e-6, weight_decay => 0 },
        { lr => 0.05, beta1 => 0.5, beta2 => 0.9,  eps => 1e-3, weight_decay => 0.1 },
        { lr => 0.02, beta1 => 0,   beta2 => 0.5,  eps => 1e-8, weight_decay => 2 },
    );
    for my $config (@configs) {
        my %h = (lr => 0.001, beta1 => 0.9, beta2 => 0.999, eps => 1e-8, weight_decay => 0.01, %$config);
        # m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²; p = p (1 - lr wd) - lr m̂ / (sqrt(v̂) + eps)
        my $reference = sub {
            my ($state, $p, $grad, $lr, $t) = @_;
            $state->{m} //= [ (0) x @$p ];
            $state->{v} //= [ (0) x @$p ];
            for my $i (0 .. $#$p) {
                my $g = $grad->[$i];
                $state->{m}[$i] = $h{beta1} * $state->{m}[$i] + (1 - $h{beta1}) * $g;
                $state->{v}[$i] = $h{beta2} * $state->{v}[$i] + (1 - $h{beta2}) * $g * $g;
                my $m_hat = $state->{m}[$i] / (1 - $h{beta1}**$t);
                my $v_hat = $state->{v}[$i] / (1 - $h{beta2}**$t);
                $p->[$i] = $p->[$i] * (1 - $lr * $h{weight_decay}) - $lr * $m_hat / (sqrt($v_hat) + $h{eps});
            }
        };
        check_rule('AdamW ' . (%$config ? opt_str(%$config) : 'defaults'), Lugh::Optimizer::AdamW->new(%$config), $reference);
    }
    # learning_rate and epsilon, and the learning rate changed between steps
    my $reference = sub {
        my ($state, $p, $grad, $lr, $t) = @_;
        $state->{m} //= [ (0) x @$p ];
        $state->{v} //= [ (0) x @$p ];
        for my $i (0 .. $#$p) {
            $state->{m}[$i] = 0.9 * $state->{m}[$i] + 0.1 * $grad->[$i];
            $state->{v}[$i] = 0.999 * $state->{v}[$i] + 0.001 * $grad->[$i]**2;
            $p->[$i] = $p->[$i] * (1 - $lr * 0.01)
                - $lr * ($state->{m}[$i] / (1 - 0.9**$t)) / (sqrt($state->{v}[$i] / (1 - 0.999**$t)) + 0.25);
        }
    };
    check_rule('AdamW learning_rate => 1, epsilon => 0.25, set_lr before each step',
        Lugh::Optimizer::AdamW->new(learning_rate => 1, epsilon => 0.25), $reference, sub { 0.02 * $_[0] });
};

subtest 'step details' => sub {
    my $ctx = new_ctx();
    # a parameter added twice is updated once
    my $w = param($ctx, [2], [ 1, 1 ]);
    my $sgd = Lugh::Optimizer::SGD->new(lr => 0.5, params => [$w]);
    $sgd->add_param($w);
    is(scalar(my @p = $sgd->params), 1, 'a parameter added twice is listed once');
    $w->backward(1, 2);
    $sgd->step;
    is_deeply([ $w->get_data ], [ 0.5, 0 ], 'and stepped once');
    # gradients stay until zero_grad: a second step uses them again
    $sgd->step;
    is_deeply([ $w->get_data ], [ 0, -1 ], 'step does not clear the gradients');
    $sgd->zero_grad;
    is_deeply($w->grad, [ 0, 0 ], 'zero_grad clears every parameter\'s gradient');
    $sgd->step;
    is_deeply([ $w->get_data ], [ 0, -1 ], 'a step with zero gradients (no momentum, no decay) changes nothing');

    # the parameter's values changed between steps are used
    $w->set_data(4, 4);
    $w->backward(1, 1);
    $sgd->step;
    is_deeply([ $w->get_data ], [ 3.5, 3.5 ], 'set_data between steps is seen by the next step');

    # the POD's step example, and a gradient from a real backward pass
    my $v = param($ctx, [1], [1]);
    $A->scale($ctx, $v, 2)->backward;
    my $opt = Lugh::Optimizer::SGD->new(lr => 0.25, params => [$v]);
    $opt->step;
    is_deeply([ $v->get_data ], [0.5], 'SGD lr 0.25 on gradient 2: 1 -> 0.5');

    # AdamW counts steps even with no parameters
    my $adamw = Lugh::Optimizer::AdamW->new;
    is($adamw->get_step_count, 0, 'get_step_count 0 before any step');
    $adamw->step for 1 .. 3;
    is($adamw->get_step_count, 3, 'get_step_count 3 after three steps (no parameters)');

    # Lugh 0.12's tests: parameters decrease along a positive gradient
    my $m = param($ctx, [3], [ 1, 2, 3 ]);
    $A->sum($ctx, $m)->backward;
    Lugh::Optimizer::SGD->new(lr => 0.1, momentum => 0.9, params => [$m])->step;
    near([ $m->get_data ], [ 0.9, 1.9, 2.9 ], 'SGD with momentum: every element decreases');
    my $d = param($ctx, [2], [ 10, 10 ]);
    my $zero = constant($ctx, [2], [ 0, 0 ]);
    my $diff = $A->sub($ctx, $d, $zero);
    $A->mean($ctx, $A->mul($ctx, $diff, $diff))->backward;
    my $decay = Lugh::Optimizer::AdamW->new(lr => 0.1, weight_decay => 0.1, params => [$d]);
    $decay->zero_grad;
    $decay->step;
    near([ $d->get_data ], [ 9.9, 9.9 ], 'AdamW weight decay alone (gradient zeroed): 10 -> 9.9');
    my ($p1, $p2) = (param($ctx, [2], [ 1, 2 ]), param($ctx, [3], [ 1, 2, 3 ]));
    my $two = Lugh::Optimizer::AdamW->new(lr => 0.01, params => [ $p1, $p2 ]);
    $A->sum($ctx, $p1)->backward;
    $A->sum($ctx, $p2)->backward;
    $two->step;
    ok((!grep { $_ >= 1.99 } ($p1->get_data)[1], ($p2->get_data)[1]), 'one step updates both parameters');
    is($two->get_step_count, 1, 'and counts one step');
};

# ---------------------------------------------------------------- accessors and options

subtest 'accessors' => sub {
    my $sgd = Lugh::Optimizer::SGD->new;
    is_deeply([ $sgd->get_lr, $sgd->momentum, $sgd->weight_decay, $sgd->nesterov ], [ 0.001, 0, 0, 0 ], 'SGD defaults');
    $sgd = Lugh::Optimizer::SGD->new(lr => 0.1, momentum => 0.9, nesterov => 1, weight_decay => 1e-4);
    is_deeply([ $sgd->get_lr, $sgd->momentum, $sgd->weight_decay, $sgd->nesterov ], [ 0.1, 0.9, 1e-4, 1 ], 'SGD hyperparameters');
    is(Lugh::Optimizer::SGD->new(learning_rate => 0.02)->get_lr, 0.02, 'SGD learning_rate is lr');
    my $adamw = Lugh::Optimizer::AdamW->new;
    is_deeply([ $adamw->get_lr, $adamw->beta1, $adamw->beta2, $adamw->eps, $adamw->weight_decay ], [ 0.001, 0.9, 0.999, 1e-8, 0.01 ],
        'AdamW defaults');
    $adamw = Lugh::Optimizer::AdamW->new(lr => 1e-4, beta1 => 0.8, beta2 => 0.95, eps => 1e-6, weight_decay => 0.5);
    is_deeply([ $adamw->get_lr, $adamw->beta1, $adamw->beta2, $adamw->eps, $adamw->weight_decay ], [ 1e-4, 0.8, 0.95, 1e-6, 0.5 ],
        'AdamW hyperparameters');
    is(Lugh::Optimizer::AdamW->new(epsilon => 1e-6)->eps, 1e-6, 'AdamW epsilon is eps');
    is(Lugh::Optimizer::AdamW->new(learning_rate => 5e-5)->get_lr, 5e-5, 'AdamW learning_rate is lr');
    isa_ok($_, 'Lugh::Optimizer') for $sgd, $adamw;

    $sgd->set_lr(0.001);
    is($sgd->get_lr, 0.001, 'set_lr then get_lr');
    $adamw->set_lr(5e-5);
    is($adamw->get_lr, 5e-5, 'AdamW set_lr');
    $sgd->set_lr(0);
    is($sgd->get_lr, 0, 'a learning rate of 0');
    is($sgd->get_step_count, 0, 'get_step_count starts at 0');

    croaks_like(sub { $adamw->momentum }, qr/momentum is not a hyperparameter of Lugh::Optimizer::AdamW/, 'AdamW->momentum');
    croaks_like(sub { $adamw->nesterov }, qr/nesterov is not a hyperparameter of Lugh::Optimizer::AdamW/, 'AdamW->nesterov');
    croaks_like(sub { $sgd->beta1 }, qr/beta1 is not a hyperparameter of Lugh::Optimizer::SGD/, 'SGD->beta1');
    croaks_like(sub { $sgd->eps }, qr/eps is not a hyperparameter of Lugh::Optimizer::SGD/, 'SGD->eps');

    my $ctx = new_ctx();
    my ($a, $b) = (param($ctx, [2], [ 1, 2 ]), param($ctx, [3], [ 3, 4, 5 ]));
    my $opt = Lugh::Optimizer::SGD->new(lr => 0.1, params => [$a]);
    $opt->add_param($b);
    my @p = $opt->params;
    is(scalar @p, 2, 'params: two');
    isa_ok($p[0], 'Lugh::Autograd::Tensor', 'a parameter');
    is_deeply([ map { [ $_->get_data ] } @p ], [ [ 1, 2 ], [ 3, 4, 5 ] ], 'in the order they were added');
    $p[1]->set_data(6, 7, 8);
    is_deeply([ $b->get_data ], [ 6, 7, 8 ], 'the same tensors (not copies)');
    is_deeply([ Lugh::Optimizer::SGD->new->params ], [], 'no parameters');
};

subtest 'option and argument errors' => sub {
    my $ctx = new_ctx();
    my $w = param($ctx, [2], [ 1, 2 ]);
    for my $class (qw(SGD AdamW)) {
        my $new = "Lugh::Optimizer::$class"->can('new');
        my $cls = "Lugh::Optimizer::$class";
        croaks_like(sub { $cls->new(rate => 0.1) }, qr/$class->new: unknown option 'rate'/, "$class: an unknown option");
        croaks_like(sub { $cls->new(lr => -0.1) }, qr/the learning rate must be a number >= 0, got -0.1/, "$class: a negative lr");
        croaks_like(sub { $cls->new(learning_rate => -1) }, qr/the learning rate must be a number >= 0, got -1/,
            "$class: a negative learning_rate");
        croaks_like(sub { $cls->new(lr => 'fast') }, qr/lr must be a number, got 'fast'/, "$class: lr not a number");
        croaks_like(sub { $cls->new('lr') }, qr/options must be name => value pairs/, "$class: an odd option list");
        croaks_like(sub { $cls->new(params => $w) }, qr/params must be an array reference/, "$class: params not an array");
        croaks_like(sub { $cls->new(params => ['x']) }, qr/the parameter must be an Lugh::Autograd::Tensor object, got x/,
            "$class: params with a string");
        croaks_like(sub { $cls->new(lr => 0.1)->set_lr(-1) }, qr/set_lr: the learning rate must be a number >= 0, got -1/,
            "$class: set_lr(-1)");
        croaks_like(sub { $cls->new(weight_decay => -0.1) }, qr/weight_decay must be between 0 and/, "$class: a negative weight_decay");
    }
    croaks_like(sub { Lugh::Optimizer::SGD->new(beta1 => 0.9) }, qr/unknown option 'beta1'/, 'SGD: beta1');
    croaks_like(sub { Lugh::Optimizer::AdamW->new(momentum => 0.9) }, qr/unknown option 'momentum'/, 'AdamW: momentum');
    croaks_like(sub { Lugh::Optimizer::SGD->new(momentum => 1.5) }, qr/momentum must be between 0 and 1, got 1.5/, 'SGD: momentum 1.5');
    croaks_like(sub { Lugh::Optimizer::AdamW->new(beta1 => 1) }, qr/beta1 must be between 0 and/, 'AdamW: beta1 1');
    croaks_like(sub { Lugh::Optimizer::AdamW->new(beta2 => -0.5) }, qr/beta2 must be between 0 and/, 'AdamW: beta2 -0.5');
    croaks_like(sub { Lugh::Optimizer::AdamW->new(eps => -1) }, qr/eps must be between 0 and 1, got -1/, 'AdamW: eps -1');

    my $opt = Lugh::Optimizer::SGD->new(lr => 0.1);
    croaks_like(sub { $opt->add_param(Lugh::Autograd::Tensor->new($ctx, 'f32', 2)) },
        qr/add_param: a parameter must be a leaf tensor made with requires_grad => 1/, 'add_param of a tensor without requires_grad');
    croaks_like(sub { $opt->add_param($A->relu($ctx, $w)) },
        qr/add_param: a parameter must be a leaf tensor made with requires_grad => 1/, 'add_param of an op result');
    croaks_like(sub { $opt->add_param(Lugh::Tensor->new_f32($ctx, 2)) },
        qr/add_param: the parameter must be an Lugh::Autograd::Tensor object, got a Lugh::Tensor object/, 'add_param of a Lugh::Tensor');
    croaks_like(sub { $opt->add_param(undef) }, qr/add_param: the parameter must be an Lugh::Autograd::Tensor object, got undef/,
        'add_param of undef');
    is(scalar(my @p = $opt->params), 0, 'nothing was added');
    $opt->add_param($w);
    $w->backward(1, 1);
    $opt->step;
    near([ $w->get_data ], [ 0.9, 1.9 ], 'the optimizer still works');
};

# ---------------------------------------------------------------- clipping

subtest 'clip_grad_norm, clip_grad_value' => sub {
    my $ctx = new_ctx();
    my ($a, $b) = (param($ctx, [2], [ 0, 0 ]), param($ctx, [3], [ 0, 0, 0 ]));
    my $c = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    my @ga = (3, -4);
    my @gb = (1, 2, -2);
    my $norm = sqrt(sum(map { $_ * $_ } @ga, @gb));
    $a->backward(@ga);
    $b->backward(@gb);
    my $got = Lugh::Optimizer->clip_grad_norm(2, $a, $b, $c);
    near([$got], [$norm], 'clip_grad_norm returns the norm before clipping (a tensor without a gradient is left out)');
    my $f = 2 / ($norm + 1e-6);
    near([ @{ $a->grad }, @{ $b->grad } ], [ map { $_ * $f } @ga, @gb ], 'every gradient scaled by max / (norm + 1e-6)');
    near([ sqrt(sum(map { $_ * $_ } @{ $a->grad }, @{ $b->grad })) ], [2], 'the joint norm is now max', rel => 1e-5);
    ok(!defined $c->grad, 'the tensor without a gradient still has none');

    my @before = (@{ $a->grad }, @{ $b->grad });
    near([ Lugh::Optimizer::clip_grad_norm(10, $a, $b) ], [2], 'as a function; the norm under max');
    is_deeply([ @{ $a->grad }, @{ $b->grad } ], \@before, 'a norm under max leaves the gradients alone');
    is(Lugh::Optimizer->clip_grad_norm(1), 0, 'no tensors: norm 0');

    # Lugh 0.12: scale(w, 100), sum, backward -> norm sqrt(3) 100
    my $w = param($ctx, [3], [ 1, 1, 1 ]);
    $A->sum($ctx, $A->scale($ctx, $w, 100))->backward;
    near([ Lugh::Optimizer->clip_grad_norm(1, $w) ], [ 100 * sqrt(3) ], 'the norm of gradient 100 x 3', rel => 1e-6);
    cmp_ok(sqrt(sum(map { $_ * $_ } @{ $w->grad })), '<=', 1.0001, 'then at most 1');

    $a->zero_grad;
    $a->backward(3, -0.5);
    $b->zero_grad;
    $b->backward(-7, 0.25, 1);
    is_deeply([ Lugh::Optimizer->clip_grad_value(1, $a, $b, $c) ], [], 'clip_grad_value returns nothing');
    is_deeply([ $a->grad, $b->grad ], [ [ 1, -0.5 ], [ -1, 0.25, 1 ] ], 'clamps each element to [-max, max]');
    Lugh::Optimizer::clip_grad_value(0.5, $a);
    is_deeply($a->grad, [ 0.5, -0.5 ], 'as a function');
    my $s = param($ctx, [4], [ 1, 2, 3, 4 ]);
    $A->sum($ctx, $A->scale($ctx, $s, 10))->backward;
    Lugh::Optimizer->clip_grad_value(0.5, $s);
    is_deeply($s->grad, [ (0.5) x 4 ], 'Lugh 0.12: gradient 10 clipped to 0.5');

    for my $max (0, -1) {
        croaks_like(sub { Lugh::Optimizer->clip_grad_norm($max, $a) }, qr/clip_grad_norm: max_norm must be positive, got $max/,
            "clip_grad_norm($max)");
        croaks_like(sub { Lugh::Optimizer->clip_grad_value($max, $a) }, qr/clip_grad_value: max_value must be positive, got $max/,
            "clip_grad_value($max)");
    }
    croaks_like(sub { Lugh::Optimizer->clip_grad_norm('big', $a) }, qr/max_norm must be a number, got 'big'/, 'clip_grad_norm(a string)');
    croaks_like(sub { Lugh::Optimizer->clip_grad_norm(1, $a, 'x') }, qr/tensor 1 must be an Lugh::Autograd::Tensor object, got x/,
        'clip_grad_norm with a string for a tensor');
    croaks_like(sub { Lugh::Optimizer->clip_grad_value(1, {}) }, qr/tensor 0 must be an Lugh::Autograd::Tensor object, got HASH/,
        'clip_grad_value with a hash ref for a tensor');
    is_deeply($a->grad, [ 0.5, -0.5 ], 'a failed clip changes nothing');
};

# ---------------------------------------------------------------- schedules

# The POD's formulas, for initial lr I, at step s.
sub expected_lr {
    my ($o, $I, $s) = @_;
    my ($W, $T, $min, $decay) = map { $o->{$_} } qw(warmup_steps total_steps min_lr decay_rate);
    $W //= 0; $T //= 1000; $min //= 0; $decay //= 0.1;
    my $type = $o->{schedule} // 'constant';
    return $I if $type eq 'constant';
    if ($type eq 'warmup' || $type eq 'linear' || $type eq 'cosine') {
        return $I * $s / $W if $W > 0 && $s <= $W;
        return $I if $type eq 'warmup';
        my $p = ($s - $W) / ($T - $W);
        $p = 1 if $p > 1;
        return $I + ($min - $I) * $p if $type eq 'linear';
        return $min + ($I - $min) * (1 + cos($PI * $p)) / 2;
    }
    return max($I * $decay**$s, $min) if $type eq 'exponential';
    my $k = grep { $s >= $_ } @{ $o->{milestones} || [] };
    return max($I * $decay**$k, $min);
}

subtest 'every schedule against its formula' => sub {
    my @cases = (
        { schedule => 'constant' },
        { schedule => 'warmup', warmup_steps => 10 },
        { schedule => 'warmup', warmup_steps => 0 },
        { schedule => 'linear', warmup_steps => 5, total_steps => 50, min_lr => 0.001 },
        { schedule => 'linear', total_steps => 20 },
        { schedule => 'cosine', warmup_steps => 10, total_steps => 100, min_lr => 0.001 },
        { schedule => 'cosine', total_steps => 60 },
        { schedule => 'exponential', decay_rate => 0.9 },
        { schedule => 'exponential', decay_rate => 0.5, min_lr => 1e-3 },
        { schedule => 'step', milestones => [ 10, 20 ], decay_rate => 0.5 },
        { schedule => 'step', milestones => [ 3, 7, 12 ], min_lr => 2e-4 },
        { schedule => 'step' },
    );
    for my $case (@cases) {
        my $I = 0.1;
        my $opt = Lugh::Optimizer::SGD->new(lr => $I);
        my $sched = Lugh::Optimizer::LRScheduler->new($opt, %$case);
        my $name = opt_str(%$case, $case->{milestones} ? (milestones => '[' . join(',', @{ $case->{milestones} }) . ']') : ());
        is($opt->get_lr, $I, "$name: making the scheduler leaves the lr alone");
        my $last = ($case->{total_steps} // 40) + 10;
        my (@got_at, @got_step, @got_lr, @want);
        for my $s (1 .. $last) {
            push @got_at,   $sched->lr_at($s);
            push @got_step, $sched->step;
            push @got_lr,   $opt->get_lr;
            push @want,     expected_lr($case, $I, $s);
        }
        near(\@got_at,   \@want, "$name: lr_at(1 .. $last)", rel => 1e-12, abs => 1e-15);
        near(\@got_step, \@want, "$name: step returns the new lr", rel => 1e-12, abs => 1e-15);
        near(\@got_lr,   \@want, "$name: and sets it on the optimizer", rel => 1e-12, abs => 1e-15);
        is($sched->get_step, $last, "$name: get_step");
        is($sched->get_lr, $got_lr[-1], "$name: get_lr is the optimizer's");
    }
};

subtest 'scheduler details' => sub {
    my $opt = Lugh::Optimizer::AdamW->new(lr => 1e-3);
    my $sched = Lugh::Optimizer::LRScheduler->new($opt, schedule => 'cosine', warmup_steps => 10, total_steps => 100);
    is($sched->get_step, 0, 'get_step 0 at first');
    near([ $sched->lr_at(50) ], [ expected_lr({ schedule => 'cosine', warmup_steps => 10, total_steps => 100 }, 1e-3, 50) ], 'lr_at(50)');
    is($sched->get_step, 0, 'lr_at does not move the step');
    is($opt->get_lr, 1e-3, 'nor the lr');
    $sched->step;
    is($sched->get_step, 1, 'step moves it');
    near([ $opt->get_lr ], [1e-4], 'warmup: 1e-3 / 10 at step 1');

    # the scheduler reads the optimizer's lr when made
    my $sgd = Lugh::Optimizer::SGD->new(lr => 0.5);
    $sgd->set_lr(0.2);
    my $exp = Lugh::Optimizer::LRScheduler->new($sgd, schedule => 'exponential', decay_rate => 0.5);
    is($exp->step, 0.1, 'initial lr: the optimizer\'s when the scheduler is made');
    $sgd->set_lr(7);
    is($exp->step, 0.05, 'set_lr afterwards does not change the schedule');

    # aliases
    my @with_alias = map { Lugh::Optimizer::LRScheduler->new(Lugh::Optimizer::SGD->new(lr => 0.1), @$_) }
        [ type => 'step', gamma => 0.5, milestones => [2] ], [ schedule => 'step', decay_rate => 0.5, milestones => [2] ];
    is_deeply([ map { my $s = $_; [ map { $s->step } 1 .. 3 ] } @with_alias ], [ ([ 0.1, 0.05, 0.05 ]) x 2 ],
        'type is schedule, gamma is decay_rate');
    is(Lugh::Optimizer::LRScheduler->new(Lugh::Optimizer::SGD->new(lr => 0.3))->step, 0.3, 'the default schedule is constant');

    my $base = Lugh::Optimizer::SGD->new(lr => 0.1);
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new($base, schedule => 'bogus') },
        qr/unknown schedule 'bogus' \(schedules: constant, cosine, exponential, linear, step, warmup\)/, 'an unknown schedule');
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new($base, type => 'triangle') }, qr/unknown schedule 'triangle'/,
        'an unknown type');
    {
        my @warnings;
        local $SIG{__WARN__} = sub { push @warnings, @_ };
        croaks_like(sub { Lugh::Optimizer::LRScheduler->new($base, schedule => undef) }, qr/unknown schedule/, 'schedule => undef');
        is_deeply(\@warnings, [], 'schedule => undef: no warning') or diag explain \@warnings;
    }
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new($base, step_size => 10) }, qr/unknown option 'step_size'/, 'an unknown option');
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new('Lugh::Optimizer::SGD') }, qr/Usage: Lugh::Optimizer::LRScheduler->new/,
        'a class name for the optimizer');
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new({}) }, qr/Usage: Lugh::Optimizer::LRScheduler->new/, 'a hash ref');
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new($base, warmup_steps => -1) }, qr/warmup_steps must be an integer >= 0/,
        'warmup_steps -1');
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new($base, total_steps => 2.5) }, qr/total_steps must be an integer >= 0/,
        'total_steps 2.5');
    croaks_like(sub { Lugh::Optimizer::LRScheduler->new($base, milestones => 10) }, qr/milestones must be an array reference/,
        'milestones not an array');
    is($base->get_lr, 0.1, 'the optimizer is untouched');
};

subtest 'Lugh 0.12 scheduler tests' => sub {
    my $make = sub { my $o = Lugh::Optimizer::SGD->new(lr => 0.1); ($o, Lugh::Optimizer::LRScheduler->new($o, @_)) };

    my ($o, $s) = $make->(schedule => 'constant');
    $s->step;
    is($s->get_step, 1, 'constant: get_step 1');
    $s->step;
    is($s->get_step, 2, 'get_step 2');
    is($o->get_lr, 0.1, 'constant stays 0.1');

    ($o, $s) = $make->(schedule => 'warmup', warmup_steps => 10);
    $s->step for 1 .. 5;
    ok($o->get_lr > 0 && $o->get_lr < 0.1, 'warmup W=10: after 5 steps 0 < lr < 0.1');
    $s->step for 6 .. 10;
    near([ $o->get_lr ], [0.1], 'after 10 steps 0.1', abs => 1e-3);

    ($o, $s) = $make->(schedule => 'cosine', warmup_steps => 0, total_steps => 100, min_lr => 0.001);
    my @lr = map { $s->step } 1 .. 100;
    ok($lr[0] > $lr[50] && $lr[50] > $lr[99], 'cosine W=0 T=100: decreasing');
    near([ $lr[99] ], [0.001], 'ending at min_lr 0.001', abs => 0.01);
    near([ $lr[99] ], [0.001], 'exactly min_lr at step T', rel => 1e-9);

    ($o, $s) = $make->(schedule => 'step', milestones => [ 10, 20 ], decay_rate => 0.5);
    $s->step for 1 .. 9;
    is($o->get_lr, 0.1, 'step [10, 20] decay 0.5: 0.1 after 9 steps');
    $s->step;
    is($o->get_lr, 0.05, '0.05 at step 10');
    $s->step for 11 .. 20;
    is($o->get_lr, 0.025, '0.025 at step 20');

    my $adamw = Lugh::Optimizer::AdamW->new(lr => 1e-3);
    $s = Lugh::Optimizer::LRScheduler->new($adamw, schedule => 'warmup', warmup_steps => 10);
    cmp_ok($s->step, '<=', 1e-3, 'warmup: the first lr at most 1e-3');
    $adamw = Lugh::Optimizer::AdamW->new(lr => 1e-3);
    $s = Lugh::Optimizer::LRScheduler->new($adamw, schedule => 'exponential', decay_rate => 0.99, min_lr => 1e-6);
    my @exp = map { $s->step } 1 .. 10;
    ok(!(grep { $exp[$_] >= $exp[ $_ - 1 ] } 1 .. 9) && $exp[0] < 1e-3, 'exponential 0.99: 10 steps decrease the lr');
    $s = Lugh::Optimizer::LRScheduler->new(Lugh::Optimizer::AdamW->new(lr => 1e-3), schedule => 'exponential', decay_rate => 0.5,
        min_lr => 1e-4);
    $s->step for 1 .. 100;
    cmp_ok($s->get_lr, '>=', 1e-4 - 1e-10, 'exponential 0.5 min 1e-4: at least min_lr after 100 steps');
};

# ---------------------------------------------------------------- learning

# One training step of a model: the forward pass's tensors in a context of
# their own. Returns the loss.
sub train_step {
    my ($opt, $forward) = @_;
    my $ctx = new_ctx();
    $opt->zero_grad;
    my $loss = $forward->($ctx);
    my ($value) = $loss->get_data;
    $loss->backward;
    $opt->step;
    return $value;
}

sub mse {
    my ($ctx, $pred, $target) = @_;
    my $err = $A->sub($ctx, $pred, $target);
    return $A->mean($ctx, $A->mul($ctx, $err, $err));
}

subtest 'a linear regression, from zero' => sub {
    my ($d, $n) = (3, 32);
    my @w_true = (1.5, -2, 0.5);
    my $b_true = 0.7;
    my @x = @{ randoms($d * $n, -1, 1) };
    my @y = map { my $j = $_; $b_true + sum(map { $w_true[$_] * $x[ $_ + $d * $j ] } 0 .. $d - 1) } 0 .. $n - 1;
    for my $config ([ 'SGD', lr => 0.1, momentum => 0.9 ], [ 'AdamW', lr => 0.05, weight_decay => 0 ]) {
        my ($class, %o) = @$config;
        my $pctx = new_ctx();
        my $w = Lugh::Autograd::Tensor->new($pctx, 'f32', $d, 1, { requires_grad => 1 });
        my $b = Lugh::Autograd::Tensor->new($pctx, 'f32', 1, { requires_grad => 1 });
        my $opt = "Lugh::Optimizer::$class"->new(%o, params => [ $w, $b ]);
        my $forward = sub {
            my ($ctx) = @_;
            my $xt = constant($ctx, [ $d, $n ], \@x);
            my $yt = constant($ctx, [ 1, $n ], \@y);
            return mse($ctx, $A->add($ctx, $A->matmul($ctx, $w, $xt), $b), $yt);    # [1, n]
        };
        my ($loss, $steps) = (train_step($opt, $forward), 1);
        ($loss, $steps) = (train_step($opt, $forward), $steps + 1) while $loss >= 1e-3 && $steps < 300;
        my $name = "$class " . opt_str(%o);
        cmp_ok($loss, '<', 1e-3, "$name: loss < 1e-3 (after $steps steps)");
        note "$name: loss $loss after $steps steps";
        near([ $w->get_data, $b->get_data ], [ @w_true, $b_true ], "$name: w and b near the true ones", abs => 0.1, rel => 0);
    }
};

subtest 'XOR with a 2-layer MLP and AdamW' => sub {
    my $hidden = 8;
    my @x = (0, 0, 0, 1, 1, 0, 1, 1);
    my @y = (0, 1, 1, 0);
    my $pctx = new_ctx();
    my $w1 = param($pctx, [ 2, $hidden ], randoms(2 * $hidden, -1, 1));
    my $b1 = param($pctx, [$hidden], randoms($hidden, -0.5, 0.5));
    my $w2 = param($pctx, [ $hidden, 1 ], randoms($hidden, -1, 1));
    my $b2 = param($pctx, [1], [0]);
    my $opt = Lugh::Optimizer::AdamW->new(lr => 0.05, weight_decay => 0, params => [ $w1, $b1, $w2, $b2 ]);
    my @pred;
    my $forward = sub {
        my ($ctx) = @_;
        my $h = $A->gelu($ctx, $A->add($ctx, $A->matmul($ctx, $w1, constant($ctx, [ 2, 4 ], \@x)), $b1));    # [hidden, 4]
        my $out = $A->add($ctx, $A->matmul($ctx, $w2, $h), $b2);                                              # [1, 4]
        @pred = $out->get_data;
        return mse($ctx, $out, constant($ctx, [ 1, 4 ], \@y));
    };
    my ($loss, $steps) = (train_step($opt, $forward), 1);
    ($loss, $steps) = (train_step($opt, $forward), $steps + 1) while $loss >= 1e-3 && $steps < 500;
    cmp_ok($loss, '<', 0.01, "mean squared error < 0.01 (after $steps steps)");
    note "XOR: loss $loss after $steps steps, predictions @pred";
    near(\@pred, \@y, 'the predictions round to XOR', abs => 0.25, rel => 0);
};

# ---------------------------------------------------------------- memory

subtest '1,000 steps keep memory flat' => sub {
    my $live = Lugh::_live_objects();
    {
        my $pctx = new_ctx();
        my $w = param($pctx, [ 8, 4 ], randoms(32, -1, 1));
        my $opt = Lugh::Optimizer::AdamW->new(lr => 0.01, params => [$w]);
        my $sched = Lugh::Optimizer::LRScheduler->new($opt, schedule => 'cosine', warmup_steps => 50, total_steps => 1100);
        my @x = @{ randoms(8 * 16, -1, 1) };
        my @y = @{ randoms(4 * 16, -1, 1) };
        my $forward = sub {
            my ($ctx) = @_;
            return mse($ctx, $A->matmul($ctx, $w, constant($ctx, [ 8, 16 ], \@x)), constant($ctx, [ 4, 16 ], \@y));
        };
        my $step = sub { my $l = train_step($opt, $forward); $sched->step; $l };
        steps_keep_memory_flat($step);
        is($opt->get_step_count, 1100, 'get_step_count 1100');
    }
    is(Lugh::_live_objects(), $live, 'every object freed afterwards');
};

is(Lugh::_live_objects(), $LIVE, 'in the end no Lugh object is left');

done_testing;
