# Lugh::Autograd: the gradient of every Lugh::Autograd::Ops op (and of a
# small MLP) against central finite differences of the forward pass, re-run
# in Perl with perturbed inputs, on random inputs of several shapes and with
# broadcasting either way; backward's semantics (seeds, accumulation,
# zero_grad, intermediate gradients, no_grad); argument and shape errors,
# after which the process goes on; and Lugh 0.12's test scenarios that still
# apply. Shapes are in ggml order: ne0 first. Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use List::Util qw(max sum shuffle);
use POSIX ();
use lib 't/lib';
use LughTest qw(near croaks_like in_child);
use Lugh;
use Lugh::Autograd;

srand 69;

my $LIVE = Lugh::_live_objects();
my $A    = 'Lugh::Autograd::Ops';
my $PI   = 4 * atan2(1, 1);

# ---------------------------------------------------------------- helpers

sub new_ctx { return Lugh::Context->new(mem_size => 4 * 1024 * 1024) }

sub n_of { my $n = 1; $n *= $_ for @_; return $n }

# Random values in [lo, hi), and ones whose magnitude is in [lo, hi) with a
# random sign (kept away from 0: divisors, relu's kink).
sub randoms { my ($n, $lo, $hi) = @_; return [ map { $lo + rand($hi - $lo) } 1 .. $n ] }
sub away    { my ($n, $lo, $hi) = @_; return [ map { (rand() < 0.5 ? -1 : 1) * ($lo + rand($hi - $lo)) } 1 .. $n ] }

# Values rounded to f32, as a tensor stores them.
sub f32_round { return map { unpack 'f', pack 'f', $_ } @_ }

# A leaf of @$shape holding @$values.
sub leaf {
    my ($ctx, $shape, $values, $requires_grad) = @_;
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', @$shape, { requires_grad => $requires_grad ? 1 : 0 });
    $t->set_data(@$values);
    return $t;
}

sub shape_str { return '[' . join(', ', @_) . ']' }

# A small autograd computation gives the right value and gradient: the
# check after each croak.
sub still_works {
    my ($name) = @_;
    my $ctx = new_ctx();
    my $w = leaf($ctx, [3], [ 1, 2, 3 ], 1);
    my $loss = $A->sum($ctx, $A->mul($ctx, $w, $w));
    $loss->backward;
    is_deeply([ [ $loss->get_data ], $w->grad ], [ [14], [ 2, 4, 6 ] ], "$name: then autograd still works");
}

sub croaks_then_works {
    my ($code, $re, $name) = @_;
    croaks_like($code, $re, $name);
    still_works($name);
}

# ---------------------------------------------------------------- gradient checks

my $H       = 1e-2;    # the finite-difference step (f32 forward passes)
my $REL_TOL = 1e-2;    # |analytic - numeric| <= REL_TOL * max(|numeric|, FLOOR)
my $FLOOR   = 5e-2;
my $MAX_CHECKED = 12;  # elements checked per input
my %WORST;             # op => worst relative error seen

sub plist { return join(', ', map { sprintf '%.17g', $_ } @_) }

# The loss sum(y * W), an autograd tensor, of the forward pass
# $build->($ctx, @leaves) with the inputs' values @$values (W: fixed random
# weights of y's shape, made on the first call). Returns the loss and the
# leaves.
sub weighted_loss {
    my ($case, $values) = @_;
    my $ctx = new_ctx();
    my @in = @{ $case->{inputs} };
    my @t = map { leaf($ctx, $in[$_]{shape}, $values->[$_], $in[$_]{rg}) } 0 .. $#in;
    my $y = $case->{build}->($ctx, @t);
    $case->{weights} //= [ f32_round(map { -1 + 2 * rand } 1 .. $y->nelements) ];
    my $w = leaf($ctx, [ $y->shape ], $case->{weights}, 0);
    return ($A->sum($ctx, $A->mul($ctx, $y, $w)), @t);
}

# The same loss from a forward pass alone (no gradients recorded), the sum
# taken in Perl: what the finite differences are made of.
sub forward_loss {
    my ($case, $values) = @_;
    my $ctx = new_ctx();
    my @in = @{ $case->{inputs} };
    my @t = map { leaf($ctx, $in[$_]{shape}, $values->[$_], 0) } 0 .. $#in;
    my @y = (Lugh::Autograd::no_grad { $case->{build}->($ctx, @t) })->get_data;
    $case->{weights} //= [ f32_round(map { -1 + 2 * rand } 1 .. scalar @y) ];
    return sum(map { $y[$_] * $case->{weights}[$_] } 0 .. $#y);
}

# The analytic gradients of a case's inputs ('-' for those that do not
# require one), computed in a child process: for the binary ops with
# broadcasting, where a ggml assertion would abort this process.
sub child_gradients {
    my ($case, $values) = @_;
    my @in   = @{ $case->{inputs} };
    my $code = 'my $ctx = Lugh::Context->new(mem_size => 4 << 20); my @t;';
    for my $k (0 .. $#in) {
        $code .= sprintf 'push @t, Lugh::Autograd::Tensor->new($ctx, "f32", %s, { requires_grad => %d });'
            . ' $t[-1]->set_data(%s);', join(', ', @{ $in[$k]{shape} }), $in[$k]{rg} ? 1 : 0, plist(@{ $values->[$k] });
    }
    $code .= sprintf 'my $y = Lugh::Autograd::Ops->%s($ctx, @t);'
        . ' my $w = Lugh::Autograd::Tensor->new($ctx, "f32", $y->shape); $w->set_data(%s);'
        . ' my $loss = Lugh::Autograd::Ops->sum($ctx, Lugh::Autograd::Ops->mul($ctx, $y, $w)); $loss->backward;'
        . ' print "GRADS ", join(" ", map { $_->requires_grad'
        . ' ? join(",", map { sprintf "%%.9g", $_ } @{ $_->grad }) : "-" } @t), "\n";',
        $case->{child_op}, plist(@{ $case->{weights} });
    my ($status, $out) = in_child($code);
    my ($line) = $out =~ /^GRADS (.*)$/m;
    return (undef, "exit status $status: $out") if $status || !defined $line;
    return ([ map { $_ eq '-' ? undef : [ split /,/ ] } split / /, $line ]);
}

# Checks d loss / d input against central differences, for every input that
# requires a gradient (all its elements, or those in $case->{sample}{k}).
sub gradcheck {
    my ($name, $key, $case) = @_;
    my @in = @{ $case->{inputs} };
    my @values = map { [ f32_round(@{ $_->{values} }) ] } @in;
    my @analytic;
    forward_loss($case, \@values);    # makes the weights
    if ($case->{child_op}) {
        my ($grads, $why) = child_gradients($case, \@values);
        if (!$grads) {
            fail("$name: analytic gradients");
            diag "backward failed in a child process: $why";
            return;
        }
        @analytic = @$grads;
    }
    else {
        my ($loss, @t) = weighted_loss($case, \@values);
        $loss->backward;
        @analytic = map { $in[$_]{rg} ? $t[$_]->grad : undef } 0 .. $#in;
    }
    for my $k (grep { $in[$_]{rg} } 0 .. $#in) {
        my $label = "$name: d loss / d input $k";
        if (!defined $analytic[$k] || @{ $analytic[$k] } != @{ $values[$k] }) {
            fail($label);
            diag 'the gradient is ' . (defined $analytic[$k] ? scalar(@{ $analytic[$k] }) . ' values' : 'undef')
                . ', expected ' . scalar(@{ $values[$k] });
            next;
        }
        # every element of a small input, a random dozen of a larger one
        my $n = @{ $values[$k] };
        my @elements = $case->{sample} && $case->{sample}{$k} ? @{ $case->{sample}{$k} }
            : $n <= $MAX_CHECKED ? 0 .. $n - 1 : sort { $a <=> $b } (shuffle 0 .. $n - 1)[ 0 .. $MAX_CHECKED - 1 ];
        my ($worst, $bad) = (0, undef);
        for my $i (@elements) {
            my (@up, @down);
            for my $j (0 .. $#values) {
                push @up,   [ @{ $values[$j] } ];
                push @down, [ @{ $values[$j] } ];
            }
            ($up[$k][$i])   = f32_round($values[$k][$i] + $H);
            ($down[$k][$i]) = f32_round($values[$k][$i] - $H);
            my $numeric = (forward_loss($case, \@up) - forward_loss($case, \@down)) / ($up[$k][$i] - $down[$k][$i]);
            my $got     = $analytic[$k][$i];
            my $err     = abs($got - $numeric) / max(abs($numeric), $FLOOR);
            $bad //= "element $i: analytic $got, numeric $numeric (relative error $err)" if !($err <= $REL_TOL);
            $worst = $err if $err > $worst;
        }
        $WORST{$key} = $worst if !defined $WORST{$key} || $worst > $WORST{$key};
        ok(!defined $bad, sprintf '%s (worst relative error %.1e)', $label, $worst) or diag $bad;
    }
}

my @SHAPES = ([7], [5, 3], [4, 3, 2]);

subtest 'element-wise binary ops, same shapes' => sub {
    for my $shape (@SHAPES) {
        my $n = n_of(@$shape);
        my $s = shape_str(@$shape);
        for my $op (qw(add sub mul div)) {
            # divisors kept away from 0: |b| in [0.5, 2)
            my $b = $op eq 'div' ? away($n, 0.5, 2) : randoms($n, -2, 2);
            gradcheck("$op $s $s", $op, {
                build  => sub { $A->$op(@_) },
                inputs => [ { shape => $shape, values => randoms($n, -2, 2), rg => 1 }, { shape => $shape, values => $b, rg => 1 } ],
            });
        }
        # only one operand requires a gradient
        gradcheck("mul $s $s, only b requires grad", 'mul', {
            build  => sub { $A->mul(@_) },
            inputs => [
                { shape => $shape, values => randoms($n, -2, 2), rg => 0 },
                { shape => $shape, values => randoms($n, -2, 2), rg => 1 },
            ],
        });
    }
};

# The smaller operand is repeated over the larger (first or second); the
# analytic gradients come from a child process (see child_gradients).
subtest 'add sub mul div with broadcasting' => sub {
    my @pairs = ([ [4, 3], [4] ], [ [4, 3], [1, 3] ], [ [3, 2, 2], [3, 1, 2] ], [ [5], [1] ]);
    for my $op (qw(add sub mul div)) {
        for my $pair (@pairs) {
            my ($large, $small) = @$pair;
            for my $order ([ $large, $small ], [ $small, $large ]) {
                my ($sa, $sb) = @$order;
                my $b = $op eq 'div' ? away(n_of(@$sb), 0.5, 2) : randoms(n_of(@$sb), -2, 2);
                gradcheck("$op " . shape_str(@$sa) . ' ' . shape_str(@$sb), "$op (broadcast)", {
                    build    => sub { $A->$op(@_) },
                    child_op => $op,
                    inputs   => [
                        { shape => $sa, values => randoms(n_of(@$sa), -2, 2), rg => 1 },
                        { shape => $sb, values => $b, rg => 1 },
                    ],
                });
            }
        }
        # the smaller second operand a constant
        my $b = $op eq 'div' ? away(4, 0.5, 2) : randoms(4, -2, 2);
        gradcheck("$op [4, 3] [4], only a requires grad", "$op (broadcast)", {
            build    => sub { $A->$op(@_) },
            child_op => $op,
            inputs   => [ { shape => [4, 3], values => randoms(12, -2, 2), rg => 1 }, { shape => [4], values => $b, rg => 0 } ],
        });
    }
};

subtest 'matmul' => sub {
    # a [K, N], b [K, M] -> [N, M]
    for my $pair ([ [4, 3], [4, 5] ], [ [6, 2], [6, 1] ], [ [3, 4, 2], [3, 2, 2] ], [ [3, 2], [3, 4, 2] ]) {
        my ($sa, $sb) = @$pair;
        for my $rg ($sa->[1] == 3 ? ([ 1, 1 ], [ 0, 1 ], [ 1, 0 ]) : ([ 1, 1 ])) {
            gradcheck('matmul ' . shape_str(@$sa) . ' ' . shape_str(@$sb) . " (requires grad: @$rg)", 'matmul', {
                build  => sub { $A->matmul(@_) },
                inputs => [
                    { shape => $sa, values => randoms(n_of(@$sa), -2, 2), rg => $rg->[0] },
                    { shape => $sb, values => randoms(n_of(@$sb), -2, 2), rg => $rg->[1] },
                ],
            });
        }
    }
};

subtest 'reductions and unary ops' => sub {
    for my $shape (@SHAPES, [2, 2, 2, 2]) {
        my $n = n_of(@$shape);
        my $s = shape_str(@$shape);
        for my $op (qw(sum mean gelu silu softmax rms_norm)) {
            my $values = $op eq 'gelu' || $op eq 'silu' ? randoms($n, -3, 3) : randoms($n, -2, 2);
            gradcheck("$op $s", $op, { build => sub { $A->$op(@_) }, inputs => [ { shape => $shape, values => $values, rg => 1 } ] });
        }
        # relu: inputs kept away from its kink at 0
        gradcheck("relu $s", 'relu',
            { build => sub { $A->relu(@_) }, inputs => [ { shape => $shape, values => away($n, 0.1, 2), rg => 1 } ] });
        my $factor = $n % 2 ? -1.7 : 0.3;
        gradcheck("scale $s by $factor", 'scale', {
            build  => sub { $A->scale(@_, $factor) },
            inputs => [ { shape => $shape, values => randoms($n, -2, 2), rg => 1 } ],
        });
        gradcheck("rms_norm $s eps 0.5", 'rms_norm', {
            build  => sub { $A->rms_norm(@_, 0.5) },
            inputs => [ { shape => $shape, values => randoms($n, -2, 2), rg => 1 } ],
        });
    }
};

subtest 'a composite: ops in a chain, a tensor used twice' => sub {
    # rms_norm(silu(a * b + a) / b), softmax of it scaled
    gradcheck('chain of element-wise ops', 'chain', {
        build => sub {
            my ($ctx, $a, $b) = @_;
            my $t = $A->add($ctx, $A->mul($ctx, $a, $b), $a);
            $t = $A->div($ctx, $A->silu($ctx, $t), $b);
            return $A->softmax($ctx, $A->scale($ctx, $A->rms_norm($ctx, $t), 0.7));
        },
        inputs => [
            { shape => [5, 3], values => randoms(15, -2, 2), rg => 1 },
            { shape => [5, 3], values => away(15, 0.5, 2),   rg => 1 },
        ],
    });
};

subtest 'a 2-layer MLP: matmul, gelu, matmul, softmax, weighted sum' => sub {
    my ($d_in, $hidden, $d_out, $batch) = (4, 6, 5, 3);
    my @sample = map { [ (shuffle 0 .. $_ - 1)[ 0 .. 7 ] ] } $d_in * $hidden, $hidden * $d_out;
    gradcheck('MLP', 'MLP', {
        build => sub {
            my ($ctx, $x, $w1, $w2) = @_;
            my $h = $A->gelu($ctx, $A->matmul($ctx, $w1, $x));    # [hidden, batch]
            return $A->softmax($ctx, $A->matmul($ctx, $w2, $h));   # [d_out, batch]
        },
        inputs => [
            { shape => [ $d_in, $batch ],    values => randoms($d_in * $batch, -1, 1),    rg => 0 },
            { shape => [ $d_in, $hidden ],   values => randoms($d_in * $hidden, -1, 1),   rg => 1 },
            { shape => [ $hidden, $d_out ],  values => randoms($hidden * $d_out, -1, 1),  rg => 1 },
        ],
        sample => { 1 => $sample[0], 2 => $sample[1] },
    });
};

note sprintf('worst relative error of %-18s %.2e', $_, $WORST{$_}) for sort keys %WORST;

# ---------------------------------------------------------------- forward values

# The values the ops compute, against Perl (a 2-D input: rows over ne0).
subtest 'forward values' => sub {
    my $ctx = new_ctx();
    my @av = f32_round(@{ randoms(12, -2, 2) });
    my @bv = f32_round(@{ away(12, 0.5, 2) });
    my $a = leaf($ctx, [4, 3], \@av, 1);
    my $b = leaf($ctx, [4, 3], \@bv, 0);
    my @rows = map { [ @av[ $_ * 4 .. $_ * 4 + 3 ] ] } 0 .. 2;
    my %want = (
        add  => [ map { $av[$_] + $bv[$_] } 0 .. 11 ],
        sub  => [ map { $av[$_] - $bv[$_] } 0 .. 11 ],
        mul  => [ map { $av[$_] * $bv[$_] } 0 .. 11 ],
        div  => [ map { $av[$_] / $bv[$_] } 0 .. 11 ],
        sum  => [ sum(@av) ],
        mean => [ sum(@av) / 12 ],
        relu => [ map { $_ > 0 ? $_ : 0 } @av ],
        gelu => [ map { 0.5 * $_ * (1 + POSIX::tanh(sqrt(2 / $PI) * ($_ + 0.044715 * $_**3))) } @av ],
        silu => [ map { $_ / (1 + exp(-$_)) } @av ],
        softmax  => [ map { my @e = map { exp } @$_; my $z = sum(@e); map { $_ / $z } @e } @rows ],
        rms_norm => [ map { my $r = $_; my $ms = sum(map { $_ * $_ } @$r) / 4; map { $_ / sqrt($ms + 1e-5) } @$r } @rows ],
    );
    for my $op (sort keys %want) {
        my $y = $op =~ /\A(?:add|sub|mul|div)\z/ ? $A->$op($ctx, $a, $b) : $A->$op($ctx, $a);
        near([ $y->get_data ], $want{$op}, "$op", rel => 1e-5, abs => 1e-5);
        is_deeply([ $y->shape ], @{ $want{$op} } == 1 ? [1] : [ 4, 3 ], "$op: shape");
        ok($y->requires_grad && !$y->is_leaf, "$op: the result records its operands");
    }
    near([ $A->scale($ctx, $a, -2.5)->get_data ], [ map { -2.5 * $_ } @av ], 'scale');
    near([ $A->rms_norm($ctx, $a, 0.5)->get_data ],
        [ map { my $r = $_; my $ms = sum(map { $_ * $_ } @$r) / 4; map { $_ / sqrt($ms + 0.5) } @$r } @rows ], 'rms_norm eps 0.5');
    # matmul: a [K, N], b [K, M] -> [N, M], C[n + m N] = sum_k a[k + n K] b[k + m K]
    my $w = leaf($ctx, [4, 2], [ f32_round(@{ randoms(8, -2, 2) }) ], 1);
    my @wv = $w->get_data;
    my $c = $A->matmul($ctx, $w, $a);
    is_deeply([ $c->shape ], [ 2, 3 ], 'matmul: shape [N, M]');
    my @want_c = map { my $m = $_; map { my $n = $_; sum(map { $wv[ $_ + 4 * $n ] * $av[ $_ + 4 * $m ] } 0 .. 3) } 0 .. 1 } 0 .. 2;
    near([ $c->get_data ], \@want_c, 'matmul values');
    # the plain-function form
    near([ Lugh::Autograd::Ops::add($ctx, $a, $b)->get_data ], $want{add}, 'Lugh::Autograd::Ops::add($ctx, ...) as a function');
};

# ---------------------------------------------------------------- backward

subtest 'backward: seeds' => sub {
    my $ctx = new_ctx();
    my $w = leaf($ctx, [2], [ 3, 4 ], 1);
    my $sq = $A->mul($ctx, $w, $w);
    my $loss = $A->sum($ctx, $sq);
    is_deeply([ $loss->get_data ], [25], 'a scalar loss');
    $loss->backward;
    is_deeply($w->grad, [ 6, 8 ], 'scalar loss: gradient 2w');
    is_deeply($loss->grad, [1], 'the loss\'s own gradient is 1');

    $w->zero_grad;
    $sq->backward;
    is_deeply($w->grad, [ 6, 8 ], 'a non-scalar without arguments: the gradient of its sum (all-ones seed)');

    $w->zero_grad;
    $sq->backward(1, 10);
    is_deeply($w->grad, [ 6, 80 ], 'backward(@seed)');
    $w->zero_grad;
    $sq->backward([ 1, 10 ]);
    is_deeply($w->grad, [ 6, 80 ], 'backward(\@seed)');

    $w->zero_grad;
    $loss->backward(2.5);
    is_deeply($w->grad, [ 15, 20 ], 'a scalar with a seed: scaled by it');
    $w->zero_grad;
    $loss->backward([0.5]);
    is_deeply($w->grad, [ 3, 4 ], 'a scalar with [seed]');

    croaks_like(sub { $sq->backward(1) },          qr/Expected 2 gradient values, got 1/, 'backward(1 value) on 2 elements');
    croaks_like(sub { $sq->backward(1, 2, 3) },    qr/Expected 2 gradient values, got 3/, 'backward(3 values) on 2 elements');
    croaks_like(sub { $sq->backward([ 1, 2, 3 ]) }, qr/Expected 2 gradient values, got 3/, 'backward([3 values]) on 2 elements');
    croaks_like(sub { $loss->backward(1, 2) },     qr/Expected 1 gradient values, got 2/, 'backward(2 values) on a scalar');
    croaks_like(sub { $sq->backward('x', 1) },     qr/gradient value 0 must be a number, got 'x'/, 'a seed that is not a number');
    is_deeply($w->grad, [ 3, 4 ], 'a failed backward leaves the gradients alone');

    # backward on a leaf: its gradient is the seed
    $w->zero_grad;
    $w->backward(3, -4);
    is_deeply($w->grad, [ 3, -4 ], 'backward(@seed) on a leaf adds the seed to its gradient');
    $w->zero_grad;
    $w->backward;
    is_deeply($w->grad, [ 1, 1 ], 'backward on a leaf without arguments: ones');
    still_works('backward');
};

subtest 'backward: accumulation, zero_grad, intermediate gradients' => sub {
    my $ctx = new_ctx();
    my $w = leaf($ctx, [3], [ 1, -2, 0.5 ], 1);
    my $c = leaf($ctx, [3], [ 2, 2, 2 ], 0);
    my $y = $A->mul($ctx, $w, $w);
    my $z = $A->scale($ctx, $y, 3);
    my $loss = $A->sum($ctx, $A->mul($ctx, $z, $c));
    is_deeply($w->grad, [ 0, 0, 0 ], 'zeros before any backward');
    is_deeply($y->grad, [ 0, 0, 0 ], 'an op result: zeros before any backward');
    ok(!defined $c->grad, 'grad is undef for a tensor that does not require one');
    $loss->backward;
    is_deeply($w->grad, [ 12, -24, 6 ], 'd loss / d w = 12 w');
    is_deeply($z->grad, [ 2, 2, 2 ],    'an intermediate result has its gradient (c)');
    is_deeply($y->grad, [ 6, 6, 6 ],    'and so does the one before it (3 c)');
    ok(!defined $c->grad, 'still undef after backward');
    $loss->backward;
    is_deeply($w->grad, [ 24, -48, 12 ], 'a second backward adds to the gradients');
    is_deeply($y->grad, [ 12, 12, 12 ],  'intermediate gradients too');
    $w->zero_grad;
    is_deeply($w->grad, [ 0, 0, 0 ], 'zero_grad');
    $loss->backward;
    is_deeply($w->grad, [ 12, -24, 6 ], 'then backward gives the gradient once');

    # a tensor used twice, and two paths to one leaf
    my $x = leaf($ctx, [2], [ 1.5, -3 ], 1);
    my $xx = $A->mul($ctx, $x, $x);
    $A->sum($ctx, $A->add($ctx, $xx, $A->scale($ctx, $x, 4)))->backward;
    is_deeply($x->grad, [ 7, -2 ], 'mul($x, $x) + 4 $x: gradient 2x + 4 (each path counted once)');
    my $ones = leaf($ctx, [2], [ 1, 1 ], 0);
    my $zz = $A->mul($ctx, $xx, $ones);
    $x->zero_grad;
    $A->sum($ctx, $A->add($ctx, $zz, $zz))->backward;
    is_deeply($x->grad, [ 6, -12 ], 'a result used twice: 4x');
};

subtest 'requires_grad, is_leaf' => sub {
    my $ctx = new_ctx();
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    my $c = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    ok($w->requires_grad, 'requires_grad => 1');
    ok(!$c->requires_grad, 'off by default');
    ok($w->is_leaf && $c->is_leaf, 'tensors from new are leaves');
    my $y = $A->silu($ctx, $w);
    ok($y->requires_grad && !$y->is_leaf, 'an op on a tensor that requires a gradient: tracked, not a leaf');
    my $k = $A->silu($ctx, $c);
    ok(!$k->requires_grad && $k->is_leaf, 'an op on constants only: not tracked, a leaf');
    ok(!defined $k->grad, 'with no gradient');
    croaks_like(sub { $k->backward }, qr/does not require gradients/, 'backward on a result of constants');
    my $m = $A->mul($ctx, $c, $w);
    ok($m->requires_grad, 'one operand requiring a gradient is enough');

    $c->set_data(2, 5);
    $c->requires_grad(1);
    ok($c->requires_grad, 'requires_grad(1) on a leaf');
    is_deeply($c->grad, [ 0, 0 ], 'its gradient: zeros');
    $w->set_data(1, 1);
    $A->sum($ctx, $A->mul($ctx, $c, $c))->backward;
    is_deeply($c->grad, [ 4, 10 ], 'and backward reaches it');
    $c->requires_grad(0);
    ok(!$c->requires_grad, 'requires_grad(0)');
    ok(!$A->relu($ctx, $c)->requires_grad, 'then ops on it are not tracked');

    croaks_like(sub { $y->requires_grad(1) }, qr/requires_grad can only be set on a leaf tensor/, 'requires_grad(1) on an op result');
    for my $type (qw(f16 i32)) {
        croaks_like(sub { Lugh::Autograd::Tensor->new($ctx, $type, 2, { requires_grad => 1 }) },
            qr/only an f32 tensor can require a gradient, not $type \[2\]/, "new($type, requires_grad => 1)");
        my $t = Lugh::Autograd::Tensor->new($ctx, $type, 2);
        croaks_like(sub { $t->requires_grad(1) }, qr/only an f32 tensor can require a gradient/, "$type->requires_grad(1)");
        ok(!$t->requires_grad, "$type: still does not require a gradient");
    }
    my $opts_first = Lugh::Autograd::Tensor->new($ctx, 'f32', { requires_grad => 1 }, 2, 3);
    ok($opts_first->requires_grad, 'the options hash before the dimensions');
    is_deeply([ $opts_first->shape ], [ 2, 3 ], 'and the dimensions after it');
    croaks_like(sub { Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_gradient => 1 }) },
        qr/unknown option 'requires_gradient'/, 'an unknown option');
    isa_ok($w->tensor, 'Lugh::Tensor', '->tensor');
    $w->set_data(0.5, 7);
    is_deeply([ $w->tensor->get_f32 ], [ 0.5, 7 ], 'which shares the values');
};

subtest 'no_grad, enable_grad, set_grad_enabled' => sub {
    my $ctx = new_ctx();
    my $w = leaf($ctx, [2], [ -1, 2 ], 1);
    ok(Lugh::Autograd::is_grad_enabled(), 'recording is on by default');
    my $y = Lugh::Autograd::no_grad {
        ok(!Lugh::Autograd::is_grad_enabled(), 'off inside no_grad');
        $A->relu($ctx, $w);
    };
    ok(Lugh::Autograd::is_grad_enabled(), 'on again after it');
    ok(!$y->requires_grad, 'a result made inside no_grad does not require a gradient');
    ok($y->is_leaf, 'and is a leaf');
    ok(!defined $y->grad, 'with no gradient');
    is_deeply([ $y->get_data ], [ 0, 2 ], 'its values are computed');
    croaks_like(sub { $y->backward }, qr/backward\(\) called on a tensor that does not require gradients/,
        'backward on a no_grad result');
    my @list = Lugh::Autograd::no_grad { (1, 2, 3) };
    is_deeply(\@list, [ 1, 2, 3 ], 'no_grad returns the block\'s list');
    ok(!eval { Lugh::Autograd::no_grad { die "inside\n" }; 1 }, 'a die inside no_grad propagates');
    is($@, "inside\n", 'with its message');
    ok(Lugh::Autograd::is_grad_enabled(), 'and recording is on again');

    my $inner = Lugh::Autograd::no_grad { Lugh::Autograd::enable_grad { $A->relu($ctx, $w) } };
    ok($inner->requires_grad && !$inner->is_leaf, 'enable_grad inside no_grad records');
    my $on = Lugh::Autograd::no_grad { Lugh::Autograd::enable_grad { Lugh::Autograd::is_grad_enabled() } };
    ok($on, 'is_grad_enabled inside enable_grad inside no_grad');

    is(Lugh::Autograd::set_grad_enabled(0), 1, 'set_grad_enabled(0) returns the previous setting (1)');
    ok(!Lugh::Autograd::is_grad_enabled(), 'now off');
    ok(!$A->relu($ctx, $w)->requires_grad, 'ops are not recorded');
    is(Lugh::Autograd::set_grad_enabled(0), 0, 'set_grad_enabled(0) again returns 0');
    is(Lugh::Autograd::set_grad_enabled(1), 0, 'set_grad_enabled(1) returns 0');
    ok(Lugh::Autograd::is_grad_enabled(), 'on');
    ok($A->relu($ctx, $w)->requires_grad, 'ops are recorded again');
    croaks_like(sub { Lugh::Autograd::set_grad_enabled() }, qr/Usage: Lugh::Autograd::set_grad_enabled\(\$flag\)/,
        'set_grad_enabled without an argument');
};

# ---------------------------------------------------------------- errors

subtest 'arguments that are not autograd tensors' => sub {
    my $ctx = new_ctx();
    my $w = leaf($ctx, [3], [ 1, 2, 3 ], 1);
    my %bad = (
        'a string'       => [ 'not a tensor',                   qr/got not a tensor/ ],
        'a hash ref'     => [ { not => 'a tensor' },            qr/got HASH reference/ ],
        'a Lugh::Tensor' => [ Lugh::Tensor->new_f32($ctx, 3),   qr/got a Lugh::Tensor object/ ],
        'undef'          => [ undef,                            qr/got undef/ ],
    );
    for my $what (sort keys %bad) {
        my ($value, $got) = @{ $bad{$what} };
        for my $op (qw(add sub mul div matmul)) {
            croaks_like(sub { $A->$op($ctx, $w, $value) },
                qr/Lugh::Autograd::Ops->$op: the second argument must be an Lugh::Autograd::Tensor object, $got/,
                "$op with $what second");
        }
        for my $op (qw(add sub mul div matmul sum mean relu gelu silu softmax scale rms_norm)) {
            my @more = $op =~ /\A(?:add|sub|mul|div|matmul)\z/ ? ($w) : $op eq 'scale' ? (2) : ();
            # an undef first operand is a missing one: the usage message names it ($a)
            my $re = qr/Lugh::Autograd::Ops->$op: the first argument must be an Lugh::Autograd::Tensor object, $got/;
            $re = qr/$re|Usage: Lugh::Autograd::Ops->$op\(\$ctx, \$a/ unless defined $value;
            croaks_like(sub { $A->$op($ctx, $value, @more) }, $re, "$op with $what first");
        }
    }
    still_works('non-tensor arguments');
    croaks_then_works(sub { $A->add('ctx', $w, $w) }, qr/the context must be a Lugh::Context object, got ctx/, 'a string for the context');
    croaks_then_works(sub { $A->relu(undef, $w) }, qr/the context must be a Lugh::Context object/, 'undef for the context');
    croaks_then_works(sub { $A->scale($ctx, $w, 'big') }, qr/Lugh::Autograd::Ops->scale: the factor must be a number, got 'big'/,
        'scale by a string');
    croaks_then_works(sub { $A->rms_norm($ctx, $w, 'tiny') }, qr/Lugh::Autograd::Ops->rms_norm: eps must be a number, got 'tiny'/,
        'rms_norm eps a string');
    croaks_then_works(sub { $A->add($ctx, $w) },     qr/Usage: Lugh::Autograd::Ops->add\(\$ctx, \$a, \$b\)/, 'add with one operand');
    croaks_then_works(sub { $A->scale($ctx, $w) },   qr/Usage: Lugh::Autograd::Ops->scale\(\$ctx, \$a, \$factor\)/,
        'scale without a factor');
    croaks_then_works(sub { $A->sum($ctx, $w, $w) }, qr/Usage: Lugh::Autograd::Ops->sum\(\$ctx, \$a\)/, 'sum with two operands');
    croaks_then_works(sub { $A->matmul($ctx, $w, $w, $w) }, qr/Usage: Lugh::Autograd::Ops->matmul/, 'matmul with three operands');
    croaks_then_works(sub { $A->relu($ctx) },        qr/Usage: Lugh::Autograd::Ops->relu\(\$ctx, \$a\)/, 'relu without an operand');
};

subtest 'shape and type errors' => sub {
    my $ctx = new_ctx();
    my $a = leaf($ctx, [3, 2], [ 1 .. 6 ], 1);
    my $b = leaf($ctx, [4, 2], [ 1 .. 8 ], 1);
    my $c = leaf($ctx, [2, 3], [ 1 .. 6 ], 1);
    for my $op (qw(add sub mul div)) {
        croaks_then_works(sub { $A->$op($ctx, $a, $b) },
            qr/Lugh::Autograd::Ops->$op: shapes \[3, 2\] and \[4, 2\] do not broadcast/, "$op [3, 2] [4, 2]");
        croaks_then_works(sub { $A->$op($ctx, $a, $c) },
            qr/Lugh::Autograd::Ops->$op: shapes \[3, 2\] and \[2, 3\] do not broadcast/, "$op [3, 2] [2, 3]");
    }
    croaks_then_works(sub { $A->matmul($ctx, $a, $b) }, qr/Lugh::Autograd::Ops->matmul: shapes \[3, 2\] and \[4, 2\] do not multiply/,
        'matmul [3, 2] [4, 2]');
    my $h = Lugh::Autograd::Tensor->new($ctx, 'f16', 3, 2);
    my $i = Lugh::Autograd::Tensor->new($ctx, 'i32', 3, 2);
    croaks_then_works(sub { $A->add($ctx, $h, $a) }, qr/the first operand must be an f32 tensor, got f16/, 'add of an f16 tensor');
    croaks_then_works(sub { $A->mul($ctx, $a, $i) }, qr/the second operand must be an f32 tensor, got i32/, 'mul by an i32 tensor');
    croaks_then_works(sub { $A->relu($ctx, $i) },    qr/the input must be an f32 tensor, got i32/, 'relu of an i32 tensor');
    croaks_then_works(sub { $a->set_data(1, 2) },    qr/Expected 6 values, got 2/, 'set_data with too few values');
    croaks_then_works(sub { $a->set_data(1 .. 7) },  qr/Expected 6 values, got 7/, 'set_data with too many values');
    croaks_then_works(sub { Lugh::Autograd::Tensor->new('ctx', 'f32', 2) }, qr/the context must be a Lugh::Context object/, 'new without a context');
    croaks_then_works(sub { Lugh::Autograd::Tensor->new($ctx) }, qr/Usage: Lugh::Autograd::Tensor->new/, 'new without a type');
    is_deeply([ $a->get_data ], [ 1 .. 6 ], 'the operands are unchanged');
};

# ---------------------------------------------------------------- Lugh 0.12's scenarios

subtest 'Lugh 0.12 scenarios' => sub {
    my $ctx = new_ctx();
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 3, 4);
    is_deeply([ $t->shape ], [ 3, 4 ], "new(\$ctx, 'f32', 3, 4): shape (3, 4)");
    is($t->nelements, 12, 'nelements 12');
    ok(!$t->requires_grad && $t->is_leaf, 'no gradient by default; a leaf');
    is_deeply([ Lugh::Autograd::Tensor->new($ctx, 'f32', 3, 1)->shape ], [3], 'trailing 1s are dropped from shape');
    is_deeply([ Lugh::Autograd::Tensor->new($ctx, 'f32')->shape ], [1], 'no dimensions: one element');
    for my $type (qw(f16 i32)) {
        my $x = Lugh::Autograd::Tensor->new($ctx, $type, 4);
        $x->set_data(1, 2, 3, 4);
        is_deeply([ $x->get_data ], [ 1, 2, 3, 4 ], "a $type tensor holds its data");
    }
    croaks_then_works(sub { Lugh::Autograd::Tensor->new($ctx, 'q4_0', 32) }, qr/Unsupported tensor type: q4_0 \(use f32, f16, or i32\)/,
        'type q4_0');
    croaks_then_works(sub { Lugh::Autograd::Tensor->new($ctx, 'invalid', 4) }, qr/Unsupported tensor type: invalid/, 'type invalid');
    croaks_then_works(sub { Lugh::Autograd::Tensor->new($ctx, 'f32', -1) },
        qr/Invalid dimension -1 at position 0: dimensions must be positive/, 'dimension -1');
    croaks_then_works(sub { Lugh::Autograd::Tensor->new($ctx, 'f32', 2, 0) }, qr/Invalid dimension 0 at position 1/, 'dimension 0');
    croaks_then_works(sub { Lugh::Autograd::Tensor->new($ctx, 'f32', 1, 2, 3, 4, 5) }, qr/Maximum 4 dimensions supported/,
        'five dimensions');

    my $x = leaf($ctx, [4], [ 1, 2, 3, 4 ], 1);
    $A->sum($ctx, $A->mul($ctx, $x, $x))->backward;
    is_deeply($x->grad, [ 2, 4, 6, 8 ], 'mul($x, $x): gradient 2x');

    my $r = leaf($ctx, [6], [ -2, -1, 0, 1, 2, 3 ], 1);
    $A->relu($ctx, $r)->backward(1, 1, 1, 1, 1, 1);
    is_deeply($r->grad, [ 0, 0, 0, 1, 1, 1 ], 'relu: gradient 0 at x == 0');

    my $a = leaf($ctx, [4], [ 5, 6, 7, 8 ], 1);
    my $b = leaf($ctx, [4], [ 1, 2, 3, 4 ], 1);
    my $d = $A->sub($ctx, $a, $b);
    is_deeply([ $d->get_data ], [ 4, 4, 4, 4 ], 'sub values');
    $d->backward;
    is_deeply([ $a->grad, $b->grad ], [ [ 1, 1, 1, 1 ], [ -1, -1, -1, -1 ] ], 'sub gradients 1 and -1');

    $a = leaf($ctx, [4], [ 8, 12, 20, 30 ], 1);
    $b = leaf($ctx, [4], [ 2, 3, 4, 5 ], 1);
    $d = $A->div($ctx, $a, $b);
    is_deeply([ $d->get_data ], [ 4, 4, 5, 6 ], 'div values');
    $d->backward;
    near($a->grad, [ 0.5, 1 / 3, 0.25, 0.2 ], 'div: gradient of a = 1/b');
    near($b->grad, [ -2, -12 / 9, -20 / 16, -30 / 25 ], 'div: gradient of b = -a/b²');

    $a = leaf($ctx, [4], [ 1, 2, 3, 4 ], 1);
    $d = $A->scale($ctx, $a, 2.5);
    is_deeply([ $d->get_data ], [ 2.5, 5, 7.5, 10 ], 'scale values');
    $d->backward;
    is_deeply($a->grad, [ 2.5, 2.5, 2.5, 2.5 ], 'scale gradient');

    my $g = leaf($ctx, [4], [ -1, 0, 1, 2 ], 1);
    my $gelu = $A->gelu($ctx, $g);
    near([ $gelu->get_data ], [ -0.159, 0, 0.841, 1.955 ], 'gelu values', abs => 2e-3, rel => 0);
    $gelu->backward;
    my $gelu_d = sub {
        my ($x) = @_;
        my $t = POSIX::tanh(sqrt(2 / $PI) * ($x + 0.044715 * $x**3));
        return 0.5 * (1 + $t) + 0.5 * $x * (1 - $t * $t) * sqrt(2 / $PI) * (1 + 3 * 0.044715 * $x * $x);
    };
    near($g->grad, [ map { $gelu_d->($_) } -1, 0, 1, 2 ], "gelu' (0.5 at 0, 1.083 at 1)", abs => 1e-4, rel => 1e-4);
    my $s = leaf($ctx, [4], [ -1, 0, 1, 2 ], 1);
    my $silu = $A->silu($ctx, $s);
    near([ $silu->get_data ], [ -0.2689, 0, 0.7311, 1.7616 ], 'silu values', abs => 1e-3, rel => 0);
    $silu->backward;
    near([ $s->grad->[1] ], [0.5], "silu'(0) = 0.5");

    my $p = leaf($ctx, [4], [ 1, 2, 3, 4 ], 1);
    my $sm = $A->softmax($ctx, $p);
    my @sv = $sm->get_data;
    ok(!(grep { $_ <= 0 || $_ >= 1 } @sv), 'softmax values in (0, 1)');
    near([ sum(@sv) ], [1], 'softmax sums to 1');
    ok($sv[0] < $sv[1] && $sv[1] < $sv[2] && $sv[2] < $sv[3], 'softmax increasing');
    $sm->backward(1, 0, 0, 0);
    near($p->grad, [ map { ($_ == 0) * $sv[0] - $sv[0] * $sv[$_] } 0 .. 3 ], 'softmax backward(1, 0, 0, 0): y0 (δ0j - yj)');

    my $q = leaf($ctx, [4], [ 1, 2, 3, 4 ], 1);
    my $rms = $A->rms_norm($ctx, $q);
    near([ ($rms->get_data)[ 0, 1 ] ], [ 1 / sqrt(7.5 + 1e-5), 2 / sqrt(7.5 + 1e-5) ], 'rms_norm values');
    $rms->backward;
    is(scalar @{ $q->grad }, 4, 'rms_norm: 4 gradients');

    my $mn = leaf($ctx, [4], [ 2, 4, 6, 8 ], 1);
    my $mean = $A->mean($ctx, $mn);
    is_deeply([ $mean->get_data ], [5], 'mean (2, 4, 6, 8) = 5');
    $mean->backward;
    is_deeply($mn->grad, [ 0.25, 0.25, 0.25, 0.25 ], 'mean gradient 0.25 each');
    my $m2 = leaf($ctx, [3, 2], [ 1 .. 6 ], 1);
    my $mean2 = $A->mean($ctx, $m2);
    is_deeply([ [ $mean2->shape ], [ $mean2->get_data ] ], [ [1], [3.5] ], 'mean of a [3, 2] tensor: every element, one value');
    $mean2->backward;
    near($m2->grad, [ (1 / 6) x 6 ], 'its gradient 1/6 each');

    my $id = leaf($ctx, [2, 2], [ 1, 0, 0, 1 ], 1);
    my $mb = leaf($ctx, [2, 2], [ 1, 2, 3, 4 ], 1);
    my $mm = $A->matmul($ctx, $id, $mb);
    is_deeply([ $mm->get_data ], [ 1, 2, 3, 4 ], 'matmul of the identity');
    $mm->backward;
    # d/da[k + 2n] = sum_m b[k + 2m], d/db[k + 2m] = sum_n a[k + 2n]
    is_deeply([ $id->grad, $mb->grad ], [ [ 4, 6, 4, 6 ], [ 1, 1, 1, 1 ] ], 'matmul gradients');

    my $ch = leaf($ctx, [3], [ 1, 2, 3 ], 1);
    $A->sum($ctx, $A->relu($ctx, $A->scale($ctx, $ch, 0.5)))->backward;
    is_deeply($ch->grad, [ 0.5, 0.5, 0.5 ], 'scale 0.5, relu, sum: gradient 0.5');
    isa_ok($A->$_($ctx, $ch, $_ =~ /\A(?:add|sub|mul|div)\z/ ? ($ch) : $_ eq 'scale' ? (2) : ()), 'Lugh::Autograd::Tensor', "$_ result")
        for qw(add sub mul div sum mean relu gelu silu softmax scale rms_norm);
};

subtest 'the SYNOPSIS' => sub {
    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 3, { requires_grad => 1 });
    $w->set_data(0.5, -1, 2);
    my $x = Lugh::Autograd::Tensor->new($ctx, 'f32', 3);
    $x->set_data(1, 2, 3);
    my $loss = Lugh::Autograd::Ops->sum($ctx, Lugh::Autograd::Ops->mul($ctx, $w, $x));
    is_deeply([ $loss->get_data ], [4.5], 'the loss');
    $loss->backward;
    is_deeply($w->grad, [ 1, 2, 3 ], 'the gradient');
};

is(Lugh::_live_objects(), $LIVE, 'in the end no Lugh object is left');

done_testing;
