# Every Lugh::Ops op against a straightforward Perl computation of the same
# result, on small random inputs of several shapes (1-D to 4-D where the op
# allows, extents that are not multiples of anything convenient), and every
# shape or type error croaking with a message that names the problem, after
# which the process goes on computing. Shapes are in ggml order: ne0 first,
# the contiguous dimension. Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use List::Util qw(sum max);
use POSIX ();
use lib 't/lib';
use LughTest qw(croaks_like);
use Lugh;
use Lugh::Quant qw(Q8_0 Q4_K);

srand 65;

my $PI = 4 * atan2(1, 1);

# ---------------------------------------------------------------- helpers

sub new_ctx { return Lugh::Context->new(mem_size => 16 * 1024 * 1024) }

# Random values in [lo, hi).
sub randoms { my ($n, $lo, $hi) = @_; return map { $lo + rand($hi - $lo) } 1 .. $n }

sub n_of { my $n = 1; $n *= $_ for @_; return $n }

# An F32 tensor of @shape filled with @values (random in [-2, 2) if none).
# Returns the tensor and the values as stored (rounded to f32).
sub f32 {
    my ($ctx, $shape, @values) = @_;
    my $t = Lugh::Tensor->new_f32($ctx, @$shape);
    @values = randoms(n_of(@$shape), -2, 2) unless @values;
    $t->set_f32(@values);
    return ($t, [ $t->get_f32 ]);
}

# Just the tensor.
sub tf32 { return (f32(@_))[0] }

sub i32 {
    my ($ctx, $shape, @values) = @_;
    my $t = Lugh::Tensor->new_i32($ctx, @$shape);
    $t->set_f32(@values);
    return $t;
}

# Computes the results in one graph.
sub compute {
    my ($ctx, @results) = @_;
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward($_) for @results;
    $graph->compute($ctx, 2);
    return $graph;
}

sub pad4 { my @ne = @_; push @ne, 1 while @ne < 4; return @ne }

# The coordinates of flat element $i of a tensor with extents @ne (4 of them).
sub coords {
    my ($i, @ne) = @_;
    my @c;
    for my $d (0 .. 3) { push @c, $i % $ne[$d]; $i = int($i / $ne[$d]) }
    return @c;
}

# The flat index of coordinates @c in extents @$ne.
sub flat {
    my ($ne, @c) = @_;
    return $c[0] + $ne->[0] * ($c[1] + $ne->[1] * ($c[2] + $ne->[2] * $c[3]));
}

sub shape_str { return '[' . join(', ', @_) . ']' }

# Element-wise comparison: |got - want| <= abs + rel * |want| (each may be a
# code ref taking the index, for bounds that depend on the element); equal
# infinities match. One test per call, naming the first element that differs.
sub near {
    my ($got, $want, $name, %tol) = @_;
    my ($rel, $abs) = ($tol{rel} // 1e-5, $tol{abs} // 1e-5);
    if (@$got != @$want) {
        fail($name);
        diag 'got ' . scalar(@$got) . ' values, expected ' . scalar(@$want);
        return;
    }
    for my $i (0 .. $#$want) {
        my ($g, $w) = ($got->[$i], $want->[$i]);
        my $bound = (ref $abs ? $abs->($i) : $abs) + (ref $rel ? $rel->($i) : $rel) * abs($w);
        my $inf_w = $w == 9**9**9 || $w == -9**9**9;
        my $bad = $inf_w ? $g != $w : !(abs($g - $w) <= $bound);    # NaN fails too
        if ($bad) {
            fail($name);
            diag "element $i: got $g, expected $w (tolerance $bound)";
            return;
        }
    }
    pass($name);
}

# A small graph computes a right answer: the check after each croak.
sub still_works {
    my ($name) = @_;
    my $ctx = new_ctx();
    my ($a) = f32($ctx, [3], 1, 2, 3);
    my ($b) = f32($ctx, [3], 10, 20, 30);
    my $sum = Lugh::Ops::add($ctx, $a, $b);
    compute($ctx, $sum);
    is_deeply([ $sum->get_f32 ], [ 11, 22, 33 ], "$name: then a graph still computes");
}

# croaks_like, then still_works.
sub croaks_then_works {
    my ($code, $re, $name) = @_;
    croaks_like($code, $re, $name);
    still_works($name);
}

my @SHAPES = ([7], [5, 3], [5, 3, 2], [3, 2, 4, 2]);

# ---------------------------------------------------------------- element-wise

my %BINARY = (
    add => sub { $_[0] + $_[1] },
    sub => sub { $_[0] - $_[1] },
    mul => sub { $_[0] * $_[1] },
    div => sub { $_[0] / $_[1] },
);

# a (shape $sa) op b (shape $sb): the result has the larger shape; the smaller
# operand's element for coordinate c is c mod its extent in each dimension.
sub check_binary {
    my ($op, $sa, $sb) = @_;
    my $ctx = new_ctx();
    my ($a, $av) = f32($ctx, $sa);
    # divisors kept away from 0: |b| in [0.5, 2)
    my ($b, $bv) = f32($ctx, $sb, map { (rand() < 0.5 ? -1 : 1) * (0.5 + rand 1.5) } 1 .. n_of(@$sb));
    my $r = Lugh::Ops->can($op)->($ctx, $a, $b);
    my @na = pad4(@$sa);
    my @nb = pad4(@$sb);
    my @nr = map { max($na[$_], $nb[$_]) } 0 .. 3;
    is_deeply([ $r->ne ], \@nr, "$op " . shape_str(@$sa) . ' ' . shape_str(@$sb) . ': shape');
    compute($ctx, $r);
    my @want;
    for my $i (0 .. n_of(@nr) - 1) {
        my @c = coords($i, @nr);
        my $x = $av->[ flat(\@na, map { $c[$_] % $na[$_] } 0 .. 3) ];
        my $y = $bv->[ flat(\@nb, map { $c[$_] % $nb[$_] } 0 .. 3) ];
        push @want, $BINARY{$op}->($x, $y);
    }
    near([ $r->get_f32 ], \@want, "$op " . shape_str(@$sa) . ' ' . shape_str(@$sb) . ': values');
}

subtest 'add sub mul div: same shapes' => sub {
    for my $op (qw(add sub mul div)) {
        check_binary($op, $_, $_) for @SHAPES;
    }
};

subtest 'add sub mul div: b tiled over a, and a tiled over b' => sub {
    my @pairs = (
        [ [10], [5] ],
        [ [10], [1] ],
        [ [5, 3], [5, 1] ],
        [ [5, 3], [1, 3] ],
        [ [5, 3, 2], [5, 1, 2] ],
        [ [6, 4, 3], [3, 2, 1] ],
        [ [6, 4, 3, 2], [3, 2, 1, 1] ],
        [ [6, 4, 3, 2], [1, 4, 1, 2] ],
        [ [6, 4, 3, 2], [2, 2, 3, 1] ],
        [ [6, 4, 3, 2], [1] ],
    );
    for my $op (qw(add sub mul div)) {
        for my $pair (@pairs) {
            my ($large, $small) = @$pair;
            check_binary($op, $large, $small);
            check_binary($op, $small, $large);
        }
    }
};

subtest 'scale' => sub {
    for my $shape (@SHAPES) {
        for my $factor (0.37, -2.5) {
            my $ctx = new_ctx();
            my ($a, $av) = f32($ctx, $shape);
            my $r = Lugh::Ops::scale($ctx, $a, $factor);
            compute($ctx, $r);
            near([ $r->get_f32 ], [ map { $_ * $factor } @$av ], 'scale ' . shape_str(@$shape) . " by $factor");
        }
    }
};

# name => [reference, input range, tolerance options]
my %UNARY = (
    silu => [ sub { $_[0] / (1 + exp(-$_[0])) }, [ -6, 6 ] ],
    # ggml's GELU is the tanh approximation, looked up in a table of f16
    # values: the input is rounded to f16 (2^-11 of |x|, times a slope of at
    # most 1.13) and so is the output (2^-11 of |y| <= |x|), so the error
    # stays under 1e-3 * (1 + |x|) (a sweep of [-4, 4] peaks at 0.64 of it).
    gelu => [
        sub { my $x = shift; 0.5 * $x * (1 + POSIX::tanh(sqrt(2 / $PI) * ($x + 0.044715 * $x**3))) },
        [ -4, 4 ], rel => 0, abs => sub { 1e-3 * (1 + abs $_[0]) }
    ],
    relu => [ sub { $_[0] > 0 ? $_[0] : 0 }, [ -3, 3 ] ],
    tanh => [ sub { POSIX::tanh($_[0]) }, [ -3, 3 ] ],
    exp  => [ sub { exp $_[0] }, [ -4, 4 ] ],
    sqr  => [ sub { $_[0] * $_[0] }, [ -3, 3 ] ],
    sqrt => [ sub { sqrt $_[0] }, [ 0, 9 ] ],
);

subtest 'unary ops' => sub {
    for my $op (sort keys %UNARY) {
        my ($ref, $range, %tol) = @{ $UNARY{$op} };
        for my $shape (@SHAPES) {
            my $ctx = new_ctx();
            my ($a, $av) = f32($ctx, $shape, randoms(n_of(@$shape), @$range));
            my $r = Lugh::Ops->can($op)->($ctx, $a);
            is_deeply([ $r->ne ], [ pad4(@$shape) ], "$op " . shape_str(@$shape) . ': shape');
            compute($ctx, $r);
            # a tolerance given as code is a function of the input element
            my %t = map { my $v = $tol{$_}; ($_ => ref $v ? sub { $v->($av->[ $_[0] ]) } : $v) } keys %tol;
            near([ $r->get_f32 ], [ map { $ref->($_) } @$av ], "$op " . shape_str(@$shape) . ': values', %t);
        }
    }
};

# ---------------------------------------------------------------- rows

# The rows (over ne0) of a flat list.
sub rows_of { my ($n0, @v) = @_; return map { [ @v[ $_ * $n0 .. $_ * $n0 + $n0 - 1 ] ] } 0 .. @v / $n0 - 1 }

subtest 'soft_max, rms_norm, norm: per row' => sub {
    for my $shape (@SHAPES) {
        my $ctx = new_ctx();
        my ($a, $av) = f32($ctx, $shape, randoms(n_of(@$shape), -3, 3));
        my @rows = rows_of($shape->[0], @$av);
        my $sm = Lugh::Ops::soft_max($ctx, $a);
        my @r1 = (Lugh::Ops::rms_norm($ctx, $a, 1e-6), Lugh::Ops::rms_norm($ctx, $a, 0.5));
        my @n1 = (Lugh::Ops::norm($ctx, $a, 1e-5), Lugh::Ops::norm($ctx, $a, 0.5));
        my $rd = Lugh::Ops::rms_norm($ctx, $a);    # eps 1e-5 if not given
        compute($ctx, $sm, @r1, @n1, $rd);
        my $s = shape_str(@$shape);
        near([ $sm->get_f32 ], [ map { my $m = max(@$_); my @e = map { exp($_ - $m) } @$_; my $z = sum(@e); map { $_ / $z } @e } @rows ],
            "soft_max $s");
        for my $case ([ $r1[0], 1e-6 ], [ $r1[1], 0.5 ], [ $rd, 1e-5 ]) {
            my ($t, $eps) = @$case;
            near([ $t->get_f32 ],
                [ map { my $row = $_; my $ms = sum(map { $_ * $_ } @$row) / @$row; map { $_ / sqrt($ms + $eps) } @$row } @rows ],
                "rms_norm $s eps $eps");
        }
        for my $case ([ $n1[0], 1e-5 ], [ $n1[1], 0.5 ]) {
            my ($t, $eps) = @$case;
            near([ $t->get_f32 ], [
                    map {
                        my $row  = $_;
                        my $mean = sum(@$row) / @$row;
                        my $var  = sum(map { ($_ - $mean)**2 } @$row) / @$row;
                        map { ($_ - $mean) / sqrt($var + $eps) } @$row
                    } @rows
                ],
                "norm $s eps $eps");
        }
    }
};

subtest 'diag_mask_inf: -inf where i0 > n_past + i1, in each matrix' => sub {
    for my $shape ([7], [5, 3], [4, 4, 2], [6, 3, 2, 2]) {
        for my $n_past (0, 1, 3) {
            my $ctx = new_ctx();
            my ($a, $av) = f32($ctx, $shape);
            my $r = Lugh::Ops::diag_mask_inf($ctx, $a, $n_past);
            compute($ctx, $r);
            my @ne = pad4(@$shape);
            my @want = map { my @c = coords($_, @ne); $c[0] > $n_past + $c[1] ? -9**9**9 : $av->[$_] } 0 .. $#$av;
            near([ $r->get_f32 ], \@want, 'diag_mask_inf ' . shape_str(@$shape) . " n_past $n_past", rel => 0, abs => 0);
        }
    }
};

# ---------------------------------------------------------------- reductions

subtest 'sum, mean, argmax' => sub {
    for my $shape (@SHAPES) {
        my $ctx = new_ctx();
        my ($a, $av) = f32($ctx, $shape);
        my $s = Lugh::Ops::sum($ctx, $a);
        my $m = Lugh::Ops::mean($ctx, $a);
        compute($ctx, $s, $m);
        is_deeply([ $s->ne ], [ 1, 1, 1, 1 ], 'sum ' . shape_str(@$shape) . ': one element');
        # the bound is relative to the sum of magnitudes (cancellation)
        near([ $s->get_f32 ], [ sum(@$av) ], 'sum ' . shape_str(@$shape), rel => 0, abs => 1e-5 * sum(map { abs } @$av));
        my @ne = pad4(@$shape);
        is_deeply([ $m->ne ], [ 1, @ne[ 1 .. 3 ] ], 'mean ' . shape_str(@$shape) . ': shape [1, ne1, ne2, ne3]');
        near([ $m->get_f32 ], [ map { sum(@$_) / @$_ } rows_of($shape->[0], @$av) ], 'mean ' . shape_str(@$shape));
    }
    for my $shape ([7], [5, 3], [9, 4], [1, 3]) {
        my $ctx = new_ctx();
        my ($a, $av) = f32($ctx, $shape);
        my $r = Lugh::Ops::argmax($ctx, $a);
        compute($ctx, $r);
        is($r->type_name, 'i32', 'argmax ' . shape_str(@$shape) . ': i32');
        my @want = map { my $row = $_; my $best = 0; $row->[$_] > $row->[$best] and $best = $_ for 0 .. $#$row; $best } rows_of($shape->[0], @$av);
        is_deeply([ $r->get_f32 ], \@want, 'argmax ' . shape_str(@$shape));
    }
};

# ---------------------------------------------------------------- matrices

# ggml's mul_mat: a [K, N, A2, A3] and b [K, M, B2, B3] give [N, M, B2, B3];
# b's matrix (i2, i3) meets a's matrix (i2 / (B2/A2), i3 / (B3/A3)): each of
# a's matrices serves that many consecutive matrices of b (grouped-query
# attention's layout).
sub mul_mat_ref {
    my ($na, $av, $nb, $bv) = @_;
    my ($K, $N, $A2, $A3) = @$na;
    my (undef, $M, $B2, $B3) = @$nb;
    my ($r2, $r3) = ($B2 / $A2, $B3 / $A3);
    my (@want, @mag);
    for my $i3 (0 .. $B3 - 1) {
        for my $i2 (0 .. $B2 - 1) {
            for my $m (0 .. $M - 1) {
                for my $n (0 .. $N - 1) {
                    my ($s, $g) = (0, 0);
                    for my $k (0 .. $K - 1) {
                        my $x = $av->[ flat($na, $k, $n, int($i2 / $r2), int($i3 / $r3)) ];
                        my $y = $bv->[ flat($nb, $k, $m, $i2, $i3) ];
                        $s += $x * $y;
                        $g += abs($x * $y);
                    }
                    push @want, $s;
                    push @mag,  $g;
                }
            }
        }
    }
    return (\@want, \@mag);
}

subtest 'mul_mat f32' => sub {
    for my $case (
        [ [5, 3], [5, 2] ],
        [ [7, 1], [7, 4] ],
        [ [1, 3], [1, 5] ],
        [ [33, 6], [33, 3] ],
        [ [5, 3, 2], [5, 2, 2] ],          # batched, no broadcast
        [ [5, 3, 2], [5, 4, 6] ],          # a's 2 matrices over b's 6
        [ [5, 3], [5, 2, 3, 2] ],          # a 2-D matrix over all of b's
        [ [6, 3, 2, 3], [6, 4, 4, 3] ],
        [ [6, 3, 1, 2], [6, 2, 3, 4] ],
    ) {
        my ($sa, $sb) = @$case;
        my $ctx = new_ctx();
        my ($a, $av) = f32($ctx, $sa);
        my ($b, $bv) = f32($ctx, $sb);
        my $r = Lugh::Ops::mul_mat($ctx, $a, $b);
        my @na = pad4(@$sa);
        my @nb = pad4(@$sb);
        my $name = 'mul_mat ' . shape_str(@$sa) . ' x ' . shape_str(@$sb);
        is_deeply([ $r->ne ], [ $na[1], @nb[ 1 .. 3 ] ], "$name: shape [N, M, ne2, ne3] of b");
        compute($ctx, $r);
        my ($want, $mag) = mul_mat_ref(\@na, $av, \@nb, $bv);
        # f32 dot products: a rounding per term, bounded by the sum of |terms|
        near([ $r->get_f32 ], $want, $name, rel => 0, abs => sub { 1e-6 + 1e-5 * $mag->[ $_[0] ] });
    }
};

subtest 'mul_mat with a quantized a' => sub {
    for my $case (
        [ Q8_0, [64, 3], [64, 2] ],
        [ Q8_0, [96, 5, 2], [96, 3, 4] ],
        [ Q4_K, [256, 3], [256, 2] ],
    ) {
        my ($type, $sa, $sb) = @$case;
        my $ctx = new_ctx();
        my ($a) = f32($ctx, $sa);
        my $q = $a->quantize($ctx, $type);
        is($q->type, $type, 'quantized to ' . $q->type_name);
        my $deq = [ $q->dequantize($ctx)->get_f32 ];
        my ($b, $bv) = f32($ctx, $sb);
        my $r = Lugh::Ops::mul_mat($ctx, $q, $b);
        compute($ctx, $r);
        my ($want, $mag) = mul_mat_ref([ pad4(@$sa) ], $deq, [ pad4(@$sb) ], $bv);
        # ggml quantizes b to 8 bits per block (q8_0, q8_K) for the dot
        # product: each term is off by up to about 1/127 of its block's
        # largest |b|, so 1e-2 of the sum of |terms| bounds the error.
        near([ $r->get_f32 ], $want, 'mul_mat ' . $q->type_name . ' ' . shape_str(@$sa) . ' x ' . shape_str(@$sb),
            rel => 0, abs => sub { 1e-5 + 1e-2 * $mag->[ $_[0] ] });
    }
};

# The expected values of a permuted tensor: input axis i becomes result axis
# $axes[i].
sub permute_ref {
    my ($ne, $v, @axes) = @_;
    push @axes, scalar(@axes) .. 3;
    my @out_ne;
    $out_ne[ $axes[$_] ] = $ne->[$_] for 0 .. 3;
    my @out;
    for my $i (0 .. $#$v) {
        my @c = coords($i, @$ne);
        my @o;
        $o[ $axes[$_] ] = $c[$_] for 0 .. 3;
        $out[ flat(\@out_ne, @o) ] = $v->[$i];
    }
    return (\@out_ne, \@out);
}

subtest 'transpose, permute (+cont)' => sub {
    for my $case (
        [ [5, 3], 1, 0 ],
        [ [5, 3, 2], 1, 0 ],
        [ [5, 3, 2], 1, 2, 0 ],
        [ [5, 3, 2], 2, 0, 1 ],
        [ [3, 2, 4, 2], 2, 0, 3, 1 ],
        [ [3, 2, 4, 2], 3, 2, 1, 0 ],
        [ [3, 2, 4, 2], 0, 1, 3, 2 ],
    ) {
        my ($shape, @axes) = @$case;
        my $ctx = new_ctx();
        my ($a, $av) = f32($ctx, $shape);
        my ($ne, $want) = permute_ref([ pad4(@$shape) ], $av, @axes);
        my $name = 'permute ' . shape_str(@$shape) . ' (' . join(', ', @axes) . ')';
        my $p = Lugh::Ops::permute($ctx, $a, @axes);
        is_deeply([ $p->ne ], $ne, "$name: shape");
        near([ $p->get_f32 ], $want, "$name: the view reads in its own order", rel => 0, abs => 0);
        my $c = Lugh::Ops::cont($ctx, $p);
        compute($ctx, $c);
        ok($c->is_contiguous, "$name: cont is contiguous");
        near([ $c->get_f32 ], $want, "$name: cont", rel => 0, abs => 0);
        if (@axes == 2) {
            my $t = Lugh::Ops::transpose($ctx, $a);
            ok(!$t->is_contiguous, 'transpose ' . shape_str(@$shape) . ': a strided view');
            is_deeply([ $t->ne ], $ne, 'transpose ' . shape_str(@$shape) . ': shape');
            near([ $t->get_f32 ], $want, 'transpose ' . shape_str(@$shape) . ': values', rel => 0, abs => 0);
            my $tc = Lugh::Ops::cont($ctx, $t);
            compute($ctx, $tc);
            near([ $tc->get_f32 ], $want, 'transpose ' . shape_str(@$shape) . ' + cont', rel => 0, abs => 0);
        }
    }
    # a view of a result: cont(transpose(a + b)) computes through the view
    my $ctx = new_ctx();
    my ($a, $av) = f32($ctx, [5, 3]);
    my ($b, $bv) = f32($ctx, [5, 3]);
    my $r = Lugh::Ops::cont($ctx, Lugh::Ops::transpose($ctx, Lugh::Ops::add($ctx, $a, $b)));
    compute($ctx, $r);
    my (undef, $want) = permute_ref([ 5, 3, 1, 1 ], [ map { $av->[$_] + $bv->[$_] } 0 .. 14 ], 1, 0);
    near([ $r->get_f32 ], $want, 'cont(transpose(add)) of a result');
};

subtest 'reshape, view' => sub {
    my $ctx = new_ctx();
    my ($a, $av) = f32($ctx, [6, 5]);
    for my $dims ([30], [3, 10], [2, 3, 5], [5, 2, 3], [1, 2, 5, 3], [2, 3, 1, 5]) {
        my $r = Lugh::Ops::reshape($ctx, $a, @$dims);
        is_deeply([ $r->ne ], [ pad4(@$dims) ], 'reshape to ' . shape_str(@$dims) . ': shape');
        near([ $r->get_f32 ], $av, 'reshape to ' . shape_str(@$dims) . ': the same elements', rel => 0, abs => 0);
    }
    # reshape of a result, used by another op
    my ($b, $bv) = f32($ctx, [6, 5]);
    my $sum = Lugh::Ops::add($ctx, $a, $b);
    my $r = Lugh::Ops::scale($ctx, Lugh::Ops::reshape($ctx, $sum, 3, 2, 5), 2);
    compute($ctx, $r);
    is_deeply([ $r->ne ], [ 3, 2, 5, 1 ], 'scale(reshape(add)): shape');
    near([ $r->get_f32 ], [ map { 2 * ($av->[$_] + $bv->[$_]) } 0 .. 29 ], 'scale(reshape(add)): values');

    for my $case ([ 0, 30 ], [ 4, 7 ], [ 7, 3, 2 ], [ 1, 2, 2, 3 ], [ 11, 2, 1, 3, 2 ], [ 29, 1 ]) {
        my ($offset, @dims) = @$case;
        my $v = Lugh::Ops::view($ctx, $a, $offset, @dims);
        my $name = "view at $offset of " . shape_str(@dims);
        is_deeply([ $v->ne ], [ pad4(@dims) ], "$name: shape");
        near([ $v->get_f32 ], [ @$av[ $offset .. $offset + n_of(@dims) - 1 ] ], "$name: values", rel => 0, abs => 0);
    }
    # a view of a result, used by another op
    my $window = Lugh::Ops::view($ctx, $sum, 5, 4, 2);
    my $sq = Lugh::Ops::sqr($ctx, $window);
    compute($ctx, $sq);
    near([ $sq->get_f32 ], [ map { ($av->[$_] + $bv->[$_])**2 } 5 .. 12 ], 'sqr(view(add))');
    # the view reads its source as it is now
    $a->set_f32((0.5) x 30);
    is_deeply([ Lugh::Ops::view($ctx, $a, 3, 2)->get_f32 ], [ 0.5, 0.5 ], 'a view shares its source\'s data');
};

subtest 'concat along each dimension' => sub {
    my @base = (4, 3, 2, 2);
    for my $dim (0 .. 3) {
        my @sb = @base;
        $sb[$dim] = 3;
        my $ctx = new_ctx();
        my ($a, $av) = f32($ctx, \@base);
        my ($b, $bv) = f32($ctx, \@sb);
        my $r = Lugh::Ops::concat($ctx, $a, $b, $dim);
        my @nr = @base;
        $nr[$dim] += $sb[$dim];
        is_deeply([ $r->ne ], \@nr, "concat dim $dim: shape");
        compute($ctx, $r);
        my @want;
        for my $i (0 .. n_of(@nr) - 1) {
            my @c = coords($i, @nr);
            if ($c[$dim] < $base[$dim]) { push @want, $av->[ flat(\@base, @c) ] }
            else { $c[$dim] -= $base[$dim]; push @want, $bv->[ flat(\@sb, @c) ] }
        }
        near([ $r->get_f32 ], \@want, "concat dim $dim: values", rel => 0, abs => 0);
    }
    my $ctx = new_ctx();
    my ($a, $av) = f32($ctx, [5]);
    my ($b, $bv) = f32($ctx, [2]);
    my $r = Lugh::Ops::concat($ctx, $a, $b);
    compute($ctx, $r);
    near([ $r->get_f32 ], [ @$av, @$bv ], 'concat of vectors, dim 0 by default', rel => 0, abs => 0);
    my $ri = Lugh::Ops::concat($ctx, i32($ctx, [2, 2], 1, 2, 3, 4), i32($ctx, [2, 1], -5, 6), 1);
    compute($ctx, $ri);
    is($ri->type_name, 'i32', 'concat of i32 tensors is i32');
    is_deeply([ $ri->get_f32 ], [ 1, 2, 3, 4, -5, 6 ], 'concat of i32 tensors along dim 1');
};

subtest 'get_rows' => sub {
    my $ctx = new_ctx();
    # 2-D: a [5, 4], ids [6] -> [5, 6]
    my ($a, $av) = f32($ctx, [5, 4]);
    my @ids = (3, 0, 3, 1, 2, 0);
    my $r = Lugh::Ops::get_rows($ctx, $a, i32($ctx, [6], @ids));
    is_deeply([ $r->ne ], [ 5, 6, 1, 1 ], 'get_rows [5, 4] by 6 ids: shape');
    compute($ctx, $r);
    near([ $r->get_f32 ], [ map { @$av[ $_ * 5 .. $_ * 5 + 4 ] } @ids ], 'get_rows [5, 4] by 6 ids: values', rel => 0, abs => 0);

    # 3-D: a [5, 4, 2], ids [3, 2]: out[:, i, j] = a[:, ids[i, j], j]
    my ($a3, $av3) = f32($ctx, [5, 4, 2]);
    my @ids3 = (2, 2, 0, 3, 1, 3);
    my $r3 = Lugh::Ops::get_rows($ctx, $a3, i32($ctx, [3, 2], @ids3));
    is_deeply([ $r3->ne ], [ 5, 3, 2, 1 ], 'get_rows [5, 4, 2] by [3, 2] ids: shape');
    compute($ctx, $r3);
    my @want3;
    for my $j (0 .. 1) {
        for my $i (0 .. 2) {
            my $row = $ids3[ $i + 3 * $j ];
            push @want3, map { $av3->[ flat([ 5, 4, 2, 1 ], $_, $row, $j, 0) ] } 0 .. 4;
        }
    }
    near([ $r3->get_f32 ], \@want3, 'get_rows [5, 4, 2] by [3, 2] ids: values', rel => 0, abs => 0);

    # quantized sources decode to the dequantized rows
    for my $case ([ Q8_0, 64, 4 ], [ Q4_K, 256, 3 ]) {
        my ($type, $n0, $n1) = @$case;
        my ($f) = f32($ctx, [ $n0, $n1 ]);
        my $q = $f->quantize($ctx, $type);
        my @deq = $q->dequantize($ctx)->get_f32;
        my @qids = ($n1 - 1, 0, $n1 - 1);
        my $qr = Lugh::Ops::get_rows($ctx, $q, i32($ctx, [3], @qids));
        compute($ctx, $qr);
        is($qr->type_name, 'f32', 'get_rows of ' . $q->type_name . ' gives f32');
        near([ $qr->get_f32 ], [ map { @deq[ $_ * $n0 .. $_ * $n0 + $n0 - 1 ] } @qids ],
            'get_rows of ' . $q->type_name . ': the dequantized rows', rel => 1e-6, abs => 1e-7);
    }
};

# ---------------------------------------------------------------- rope

# ggml's rope (no YaRN): the first n_dims dimensions of each head rotate in
# pairs by theta = pos * freq_scale * freq_base^(-2i/n_dims); pairs are
# (2i, 2i+1) in norm mode and (i, i + n_dims/2) in neox mode.
sub rope_ref {
    my ($ne, $v, $pos, $n_dims, $mode, $base, $fscale) = @_;
    my @out = @$v;
    for my $i3 (0 .. $ne->[3] - 1) {
        for my $i2 (0 .. $ne->[2] - 1) {
            for my $i1 (0 .. $ne->[1] - 1) {
                my $row = flat($ne, 0, $i1, $i2, $i3);
                for my $i (0 .. $n_dims / 2 - 1) {
                    my $theta = $pos->[$i2] * $fscale * $base**(-2 * $i / $n_dims);
                    my ($j0, $j1) = $mode eq 'neox' ? ($i, $i + $n_dims / 2) : (2 * $i, 2 * $i + 1);
                    my ($x0, $x1) = @$v[ $row + $j0, $row + $j1 ];
                    $out[ $row + $j0 ] = $x0 * cos($theta) - $x1 * sin($theta);
                    $out[ $row + $j1 ] = $x0 * sin($theta) + $x1 * cos($theta);
                }
            }
        }
    }
    return \@out;
}

subtest 'rope' => sub {
    my @pos = (0, 3, 7, 12);
    for my $mode (qw(norm neox)) {
        for my $case (
            [ [8, 3, 4], 8, 10000, 1 ],
            [ [8, 3, 4], 4, 10000, 1 ],
            [ [10, 2, 4], 6, 500, 1 ],
            [ [8, 3, 4], 8, 10000, 0.25 ],
            [ [12, 1, 4], 8, 1e6, 2.5 ],
            [ [6, 2, 4, 2], 6, 10000, 0.5 ],
        ) {
            my ($shape, $n_dims, $base, $fscale) = @$case;
            my $ctx = new_ctx();
            my ($a, $av) = f32($ctx, $shape);
            my $p = i32($ctx, [ scalar @pos ], @pos);
            my $r = Lugh::Ops::rope($ctx, $a, $p, $n_dims, mode => $mode, freq_base => $base, freq_scale => $fscale);
            compute($ctx, $r);
            my $want = rope_ref([ pad4(@$shape) ], $av, \@pos, $n_dims, $mode, $base, $fscale);
            # ggml builds theta by repeated f32 multiplication and evaluates
            # sin/cos in f32: with |x| < 2 and theta up to ~30, 1e-4 absolute
            # covers that and still catches a wrong pair or angle.
            near([ $r->get_f32 ], $want,
                "rope $mode " . shape_str(@$shape) . " n_dims $n_dims freq_base $base freq_scale $fscale",
                rel => 0, abs => 1e-4);
        }
    }
    # the defaults: norm mode, freq_base 10000, freq_scale 1
    my $ctx = new_ctx();
    my ($a, $av) = f32($ctx, [4, 2, 4]);
    my $r = Lugh::Ops::rope($ctx, $a, i32($ctx, [4], @pos), 4);
    compute($ctx, $r);
    near([ $r->get_f32 ], rope_ref([ 4, 2, 4, 1 ], $av, \@pos, 4, 'norm', 10000, 1), 'rope with default options',
        rel => 0, abs => 1e-4);
};

# ---------------------------------------------------------------- graphs

subtest 'a chain in one graph: rms_norm -> mul_mat -> silu -> sum' => sub {
    my $ctx = new_ctx();
    my ($x, $xv) = f32($ctx, [16, 3]);
    my ($w, $wv) = f32($ctx, [16, 5]);
    my $norm = Lugh::Ops::rms_norm($ctx, $x, 1e-5);
    my $mm   = Lugh::Ops::mul_mat($ctx, $w, $norm);
    my $act  = Lugh::Ops::silu($ctx, $mm);
    my $sum  = Lugh::Ops::sum($ctx, $act);
    my $graph = compute($ctx, $sum);
    is($graph->n_nodes, 4, 'four ops');
    my @xn = map { my $row = $_; my $ms = sum(map { $_ * $_ } @$row) / 16; map { $_ / sqrt($ms + 1e-5) } @$row } rows_of(16, @$xv);
    my ($mmv, $mag) = mul_mat_ref([ 16, 5, 1, 1 ], $wv, [ 16, 3, 1, 1 ], \@xn);
    my @act = map { $_ / (1 + exp(-$_)) } @$mmv;
    near([ $mm->get_f32 ], $mmv, 'the intermediate mul_mat', rel => 0, abs => sub { 1e-5 * (1 + $mag->[ $_[0] ]) });
    # each of the 15 terms carries the f32 errors of the steps before it
    near([ $sum->get_f32 ], [ sum(@act) ], 'the sum at the end', rel => 0, abs => 1e-5 * (1 + sum(@$mag)));

    # new inputs, the same graph
    my @x2 = randoms(48, -1, 1);
    $x->set_f32(@x2);
    @x2 = $x->get_f32;
    $graph->compute($ctx, 1);
    @xn = map { my $row = $_; my $ms = sum(map { $_ * $_ } @$row) / 16; map { $_ / sqrt($ms + 1e-5) } @$row } rows_of(16, @x2);
    ($mmv, $mag) = mul_mat_ref([ 16, 5, 1, 1 ], $wv, [ 16, 3, 1, 1 ], \@xn);
    near([ $sum->get_f32 ], [ sum(map { $_ / (1 + exp(-$_)) } @$mmv) ], 'recomputed with new inputs',
        rel => 0, abs => 1e-5 * (1 + sum(@$mag)));
};

subtest 'operands from two contexts, ops in a third' => sub {
    my $ca = new_ctx();
    my $cb = new_ctx();
    my $cc = Lugh::Context->new(mem_size => 1024 * 1024);
    my ($a, $av) = f32($ca, [6, 4]);
    my ($b, $bv) = f32($cb, [6, 4]);
    my ($x, $xv) = f32($cb, [6, 2]);
    my $used_a = $ca->used_mem;
    my $used_b = $cb->used_mem;
    my $add = Lugh::Ops::add($cc, $a, $b);
    my $mm  = Lugh::Ops::mul_mat($cc, $add, $x);
    is($add->context->id, $cc->id, 'the result lives in the third context');
    compute($cc, $mm);
    my @s = map { $av->[$_] + $bv->[$_] } 0 .. 23;
    near([ $add->get_f32 ], \@s, 'add of tensors from two contexts');
    my ($want, $mag) = mul_mat_ref([ 6, 4, 1, 1 ], \@s, [ 6, 2, 1, 1 ], $xv);
    near([ $mm->get_f32 ], $want, 'mul_mat on top', rel => 0, abs => sub { 1e-6 + 1e-5 * $mag->[ $_[0] ] });
    is($ca->used_mem, $used_a, 'the first context gained nothing');
    is($cb->used_mem, $used_b, 'the second context gained nothing');
};

# ---------------------------------------------------------------- errors

subtest 'errors croak naming the problem, and the process goes on' => sub {
    my $ctx = new_ctx();
    my ($m53) = f32($ctx, [5, 3]);
    my ($v4)  = f32($ctx, [4]);
    my ($m43) = f32($ctx, [4, 3]);
    my ($m26) = f32($ctx, [2, 6]);

    croaks_then_works(sub { Lugh::Ops::add($ctx, $m53, $v4) },
        qr/\ALugh::Ops::add: shapes \[5, 3\] and \[4\] do not broadcast/, 'add [5, 3] + [4]');
    croaks_then_works(sub { Lugh::Ops::mul($ctx, $m43, $m26) },
        qr/\ALugh::Ops::mul: shapes \[4, 3\] and \[2, 6\] do not broadcast/, 'mul [4, 3] * [2, 6]: neither divides');
    croaks_then_works(sub { Lugh::Ops::div($ctx, tf32($ctx, [6, 1]), tf32($ctx, [1, 4])) },
        qr/\ALugh::Ops::div: shapes \[6\] and \[1, 4\] do not broadcast/, 'div [6, 1] / [1, 4]: each larger in one dimension');
    croaks_then_works(sub { Lugh::Ops::mul_mat($ctx, $m53, $m43) },
        qr/\ALugh::Ops::mul_mat: shapes \[5, 3\] and \[4, 3\] do not multiply/, 'mul_mat K 5 vs 4');
    croaks_then_works(sub { Lugh::Ops::mul_mat($ctx, tf32($ctx, [5, 3, 2]), tf32($ctx, [5, 2, 3])) },
        qr/\ALugh::Ops::mul_mat: shapes \[5, 3, 2\] and \[5, 2, 3\] do not multiply/, 'mul_mat ne2 2 does not divide 3');
    croaks_then_works(sub { Lugh::Ops::concat($ctx, $m53, $m43, 1) },
        qr/\ALugh::Ops::concat: shapes \[5, 3\] and \[4, 3\] differ outside dimension 1/, 'concat along 1, ne0 differs');
    croaks_then_works(sub { Lugh::Ops::concat($ctx, $m53, $m53, 4) }, qr/\ALugh::Ops::concat: dim must be 0 to 3, got 4/,
        'concat dim 4');
    croaks_then_works(sub { Lugh::Ops::concat($ctx, $v4, i32($ctx, [2], 1, 2)) },
        qr/\ALugh::Ops::concat: both tensors must be .*of one type, got f32 and i32/, 'concat f32 with i32');
    croaks_then_works(sub { Lugh::Ops::get_rows($ctx, tf32($ctx, [5, 4, 2]), i32($ctx, [3, 3], (0) x 9)) },
        qr/\ALugh::Ops::get_rows: ids \[3, 3\] do not fit the rows of \[5, 4, 2\]/, 'get_rows ids.ne1 != a.ne2');
    croaks_then_works(sub { Lugh::Ops::get_rows($ctx, $m53, $v4) },
        qr/\ALugh::Ops::get_rows: ids must be an i32 tensor, got f32 \[4\]/, 'get_rows with f32 ids');

    for my $op (qw(silu gelu relu tanh exp sqr sqrt soft_max sum mean argmax)) {
        croaks_then_works(sub { Lugh::Ops->can($op)->($ctx, i32($ctx, [4], 1, 2, 3, 4)) },
            qr/\ALugh::Ops::$op: the input must be an f32 tensor, got i32 \[4\]/, "$op of an i32 tensor");
    }
    croaks_then_works(sub { Lugh::Ops::exp($ctx, Lugh::Tensor->new_f16($ctx, 4)) },
        qr/\ALugh::Ops::exp: the input must be an f32 tensor, got f16 \[4\]/, 'exp of an f16 tensor');
    croaks_then_works(sub { Lugh::Ops::silu($ctx, Lugh::Tensor->new($ctx, 'q8_0', 32, 2)) },
        qr/\ALugh::Ops::silu: the input must be an f32 tensor, got q8_0 \[32, 2\]/, 'silu of a q8_0 tensor');
    croaks_then_works(sub { Lugh::Ops::rms_norm($ctx, Lugh::Tensor->new_f16($ctx, 4)) },
        qr/\ALugh::Ops::rms_norm: the input must be an f32 tensor, got f16 \[4\]/, 'rms_norm of an f16 tensor');
    croaks_then_works(sub { Lugh::Ops::scale($ctx, i32($ctx, [2], 1, 2), 2) },
        qr/\ALugh::Ops::scale: the input must be an f32 tensor, got i32 \[2\]/, 'scale of an i32 tensor');

    my $tr = Lugh::Ops::transpose($ctx, $m53);
    croaks_then_works(sub { Lugh::Ops::add($ctx, $tr, $tr) },
        qr/\ALugh::Ops::add: the first operand \(f32 \[3, 5\]\) is not contiguous/, 'add of a transposed view');
    croaks_then_works(sub { Lugh::Ops::add($ctx, tf32($ctx, [3, 5]), $tr) },
        qr/\ALugh::Ops::add: the second operand \(f32 \[3, 5\]\) is not contiguous/, 'add of a transposed view, second');
    croaks_then_works(sub { Lugh::Ops::reshape($ctx, $m53, 4, 4) },
        qr/\ALugh::Ops::reshape: \[4, 4\] has 16 elements, the input f32 \[5, 3\] has 15/, 'reshape 15 to 16');
    croaks_then_works(sub { Lugh::Ops::view($ctx, $m53, 10, 6) },
        qr/\ALugh::Ops::view: 6 elements from offset 10 are outside the input f32 \[5, 3\] \(15 elements\)/,
        'view past the end');
    croaks_then_works(sub { Lugh::Ops::view($ctx, $m53, 15, 1) }, qr/\ALugh::Ops::view: 1 elements? from offset 15 are outside/,
        'view starting at the end');
    croaks_then_works(sub { Lugh::Ops::permute($ctx, tf32($ctx, [2, 3, 4]), 1, 1, 0) },
        qr/\ALugh::Ops::permute: axes \(1, 1, 0, 3\) are not a permutation of 0\.\.3/, 'permute with a repeated axis');
    croaks_then_works(sub { Lugh::Ops::permute($ctx, $m53, 0, 4) }, qr/\ALugh::Ops::permute: axis 4 is not in 0\.\.3/,
        'permute with axis 4');

    croaks_then_works(sub { Lugh::Ops::diag_mask_inf($ctx, $m53, -1) },
        qr/\ALugh::Ops::diag_mask_inf: n_past must be an integer from 0 to 2147483647, got -1/, 'diag_mask_inf with n_past -1');
    # n_past is an i32 in ggml: a larger one croaks, and the message must say
    # what the limit is rather than "must be >= 0" of a positive number
    croaks_then_works(sub { Lugh::Ops::diag_mask_inf($ctx, $m53, 2**31) },
        qr/\ALugh::Ops::diag_mask_inf: n_past must be .*(?:2147483647|2\^31|at most|i32).*, got 2147483648/,
        'diag_mask_inf with n_past 2**31: the message names the limit');

    my ($q) = f32($ctx, [8, 2, 3]);
    my $pos = i32($ctx, [3], 0, 1, 2);
    croaks_then_works(sub { Lugh::Ops::rope($ctx, $q, $pos, 5) },
        qr/\ALugh::Ops::rope: n_dims must be even and between 2 and ne0 \(8\), got 5/, 'rope with odd n_dims');
    croaks_then_works(sub { Lugh::Ops::rope($ctx, $q, $pos, 10) },
        qr/\ALugh::Ops::rope: n_dims must be even and between 2 and ne0 \(8\), got 10/, 'rope with n_dims > head_dim');
    croaks_then_works(sub { Lugh::Ops::rope($ctx, $q, i32($ctx, [2], 0, 1), 8) },
        qr/\ALugh::Ops::rope: the input \[8, 2, 3\] has 3 tokens \(ne2\) but 2 positions/, 'rope: 2 positions for 3 tokens');
    croaks_then_works(sub { Lugh::Ops::rope($ctx, $q, tf32($ctx, [3], 0, 1, 2), 8) },
        qr/\ALugh::Ops::rope: positions must be an i32 vector, got f32 \[3\]/, 'rope with f32 positions');
    croaks_then_works(sub { Lugh::Ops::rope($ctx, $q, $pos, 8, mode => 'glm') },
        qr/\ALugh::Ops::rope: mode must be 'norm' or 'neox', got 'glm'/, 'rope with an unknown mode');

    # get_rows checks its ids when the graph runs
    {
        my ($table) = f32($ctx, [5, 4]);
        my $ids = i32($ctx, [3], 0, 4, 1);
        my $rows = Lugh::Ops::get_rows($ctx, $table, $ids);
        my $graph = Lugh::Graph->new($ctx);
        $graph->build_forward($rows);
        croaks_then_works(sub { $graph->compute($ctx, 1) },
            qr/\ALugh::Graph->compute: get_rows id 4 \(element 1 of the ids\) is not a row of its source, which has 4 rows/,
            'get_rows id 4 of 4 rows, at compute');
        $ids->set_f32(0, -2, 1);
        croaks_then_works(sub { $graph->compute($ctx, 1) }, qr/\ALugh::Graph->compute: get_rows id -2 \(element 1 of the ids\)/,
            'get_rows id -2, at compute');
        $ids->set_f32(3, 0, 1);
        ok(eval { $graph->compute($ctx, 1); 1 }, 'the same graph computes once the ids are rows') or diag $@;
        is(scalar(my @v = $rows->get_f32), 15, 'and its result reads');
    }

    for my $case (
        [ 'a string',         'tensor',               qr/got tensor/ ],
        [ 'a hash reference', {},                     qr/got HASH reference/ ],
        [ 'undef',            undef,                  qr/got undef/ ],
        [ 'an array reference', [ 1, 2 ],             qr/got ARRAY reference/ ],
        [ 'a Lugh::Context',  $ctx,                   qr/got / ],
    ) {
        my ($what, $value) = @$case;
        croaks_then_works(sub { Lugh::Ops::add($ctx, $v4, $value) },
            qr/\ALugh::Ops::add: the second operand must be a Lugh::Tensor object, $case->[2]/, "add with $what");
        croaks_then_works(sub { Lugh::Ops::silu($ctx, $value) },
            qr/\ALugh::Ops::silu: the (?:input|first operand) must be a Lugh::Tensor object/, "silu of $what");
        croaks_then_works(sub { Lugh::Ops::mul_mat($ctx, $value, $v4) },
            qr/\ALugh::Ops::mul_mat: the first operand must be a Lugh::Tensor object/, "mul_mat with $what");
        croaks_then_works(sub { Lugh::Ops::add($value, $v4, $v4) },
            qr/\ALugh::Ops::add: the context must be a Lugh::Context object/, "add with $what as the context")
            unless ref $value && ref $value eq 'Lugh::Context';
        my $graph = Lugh::Graph->new($ctx);
        croaks_then_works(sub { $graph->build_forward($value) }, qr/\ALugh::Graph->build_forward: .*Lugh::Tensor object/,
            "build_forward of $what");
    }
    croaks_then_works(sub { Lugh::Ops::add($ctx, $v4, $ctx) },
        qr/\ALugh::Ops::add: the second operand must be a Lugh::Tensor object, got (?:a )?Lugh::Context/,
        'add with a Lugh::Context as an operand: the message names what was given');
    croaks_then_works(sub { Lugh::Ops::add($v4, $v4, $v4) },
        qr/\ALugh::Ops::add: the context must be a Lugh::Context object, got (?:a )?Lugh::Tensor/,
        'add with a tensor as the context: the message names what was given');

    my $pending = Lugh::Ops::add($ctx, $v4, $v4);
    ok(!$pending->has_data, 'an op result has no data before compute');
    croaks_then_works(sub { $pending->get_f32 },
        qr/\ALugh::Tensor->get_f32: cannot read its values: this tensor is the result of ADD and has not been computed/,
        'get_f32 of a result before compute');
    croaks_then_works(sub { $pending->get_bytes }, qr/\ALugh::Tensor->get_bytes: .*not been computed/,
        'get_bytes of a result before compute');
    croaks_then_works(sub { Lugh::Ops::view($ctx, $pending, 0, 2)->get_f32 }, qr/not been computed/,
        'get_f32 of a view of a result before compute');
    croaks_then_works(sub { Lugh::Graph->new($ctx)->compute($ctx, 1) },
        qr/\ALugh::Graph->compute: the graph is empty \(call build_forward first\)/, 'compute of an empty graph');
    croaks_then_works(sub { Lugh::Graph->new->compute(n_threads => 1, backend => 'tpu') }, qr/\ALugh::Graph->compute: .*tpu/,
        'compute with an unknown backend');
};

done_testing;
