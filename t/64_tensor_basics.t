# Lugh::Context, Lugh::Tensor, Lugh::Ops and Lugh::Graph: the scenarios of
# Lugh 0.12's t/0001 (smoke test) and t/0005 (tensors and ops), rewritten
# here from the behaviour those tests and the 0.12 documentation describe
# (not copied from them), made strict: exact values where the arithmetic is
# exact, and every error checked for its message. Also the API this
# implementation adds: new_f16, new_i32, new($ctx, $type, @dims),
# get_bytes/set_bytes, the named compute options, the class-method form of
# Lugh::Ops. Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(croaks_like);
use Lugh;
use Lugh::Quant ();

# Computes $t (and what it depends on) in a graph of its own; returns its values.
sub run {
    my ($ctx, $t, $n_threads) = @_;
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward($t);
    $graph->compute($ctx, $n_threads // 4);
    return [ $t->get_f32 ];
}

# A new F32 vector holding @values.
sub f32 {
    my ($ctx, @values) = @_;
    my $t = Lugh::Tensor->new_f32($ctx, scalar @values);
    $t->set_f32(@values);
    return $t;
}

# Every element of @$got within $tol of @$want.
sub close_to {
    my ($got, $want, $tol, $name) = @_;
    my $ok = @$got == @$want;
    my $worst = 0;
    for my $i (0 .. $#$want) {
        my $d = abs(($got->[$i] // 9**9**9) - $want->[$i]);
        $d = 9**9**9 if $d != $d;    # NaN
        $worst = $d if $d > $worst;
    }
    ok($ok && $worst <= $tol, $name)
        or diag("got [@$got], want [@$want] (largest difference $worst, tolerance $tol)");
}

# --- t/0001: smoke test -----------------------------------------------------

{
    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    isa_ok($ctx, 'Lugh::Context');
    is($ctx->mem_size, 16 * 1024 * 1024, 'mem_size as given');

    my $t1 = Lugh::Tensor->new_f32($ctx, 4);
    isa_ok($t1, 'Lugh::Tensor');
    is($t1->nelements, 4, 'nelements of a vector');
    is($t1->n_dims, 1, 'n_dims of a vector');
    $t1->set_f32(1, 2, 3, 4);
    is_deeply([ $t1->get_f32 ], [ 1, 2, 3, 4 ], 'set_f32 / get_f32 round trip');

    my $t2 = Lugh::Tensor->new_f32($ctx, 3, 2);
    is($t2->nelements, 6, 'nelements of a 3x2 matrix');
    is($t2->n_dims, 2, 'n_dims of a matrix');
    is_deeply([ $t2->shape ], [ 3, 2 ], 'shape of a matrix, ne0 first');

    my $a = f32($ctx, 1, 2, 3, 4);
    my $b = f32($ctx, 5, 6, 7, 8);
    my $c = Lugh::Ops::add($ctx, $a, $b);
    isa_ok($c, 'Lugh::Tensor', 'the result of add');
    my $graph = Lugh::Graph->new($ctx);
    isa_ok($graph, 'Lugh::Graph');
    $graph->build_forward($c);
    $graph->compute($ctx, 4);
    is_deeply([ $c->get_f32 ], [ 6, 8, 10, 12 ], 'add through a graph');
}

# --- contexts -----------------------------------------------------------------

{
    my $small = Lugh::Context->new(mem_size => 1024 * 1024);
    my $large = Lugh::Context->new(mem_size => 64 * 1024 * 1024);
    isa_ok($_, 'Lugh::Context') for $small, $large;
    is($small->mem_size, 1024 * 1024, '1 MiB context');
    is($large->mem_size, 64 * 1024 * 1024, '64 MiB context');
    is(Lugh::Context->new->mem_size, 16 * 1024 * 1024, 'mem_size defaults to 16 MiB');
    is(Lugh::Context->new(mem_size => 1024)->mem_size, 1024, 'a 1 KiB context can be made');

    my $before = $small->used_mem;
    ok(defined $before && $before >= 0, 'used_mem of a new context');
    cmp_ok($before, '<', 1024, '... is small');
    Lugh::Tensor->new_f32($small, 1000);
    my $after = $small->used_mem;
    cmp_ok($after - $before, '>=', 4000, 'a 1000-element F32 tensor uses at least its 4000 bytes of data');
    cmp_ok($after - $before, '<', 4000 + 1024, '... plus under 1 KiB of metadata');
    cmp_ok($after, '<=', $small->mem_size, 'used_mem never exceeds mem_size');
    is($small->mem_used, $small->used_mem, 'mem_used (0.12 documented name) is used_mem');

    ok($small->id != $large->id, 'contexts have distinct ids');
    is($small->id, $small->id, 'an id is stable');

    # a tensor keeps its context alive
    my $t = do {
        my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
        my $v   = f32($ctx, 7, 8, 9);
        $v;
    };
    is_deeply([ $t->get_f32 ], [ 7, 8, 9 ], 'a tensor outlives the variable holding its context');
    isa_ok($t->context, 'Lugh::Context', 'its context');
    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    is(Lugh::Tensor->new_f32($ctx, 2)->context->id, $ctx->id, 'context returns the tensor\'s own context');
}

# --- tensors: dimensions and shapes -------------------------------------------

my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
for my $case ([ [10], 1, 10 ], [ [ 3, 4 ], 2, 12 ], [ [ 2, 3, 4 ], 3, 24 ], [ [ 2, 2, 2, 2 ], 4, 16 ]) {
    my ($dims, $n_dims, $n) = @$case;
    my $t = Lugh::Tensor->new_f32($ctx, @$dims);
    my $label = join 'x', @$dims;
    is($t->n_dims, $n_dims, "$label: n_dims");
    is($t->nelements, $n, "$label: nelements");
    is_deeply([ $t->shape ], $dims, "$label: shape");
    is_deeply([ $t->ne ], [ @$dims, (1) x (4 - @$dims) ], "$label: ne has all four extents");
    is($t->nbytes, 4 * $n, "$label: nbytes");
    is_deeply([ $t->get_f32 ], [ (0) x $n ], "$label: a new tensor holds zeros");
}
{
    my $t = Lugh::Tensor->new_f32($ctx, 100, 1);
    is($t->n_dims, 1, 'a trailing extent of 1 is not counted by n_dims');
    is_deeply([ $t->shape ], [100], '... nor listed by shape');
    is_deeply([ $t->ne ], [ 100, 1, 1, 1 ], '... ne still has it');
    $t = Lugh::Tensor->new_f32($ctx, 3, 1, 2);
    is($t->n_dims, 3, 'an inner extent of 1 is counted');
    is_deeply([ $t->shape ], [ 3, 1, 2 ], '... and listed');
    $t = Lugh::Tensor->new_f32($ctx, 5, 4, 1, 1);
    is_deeply([ $t->shape ], [ 5, 4 ], 'two trailing extents of 1 are dropped');
    $t = Lugh::Tensor->new_f32($ctx, 1, 1, 1, 1);
    is($t->n_dims, 1, 'all extents 1: n_dims is 1');
    is_deeply([ $t->shape ], [1], '... shape (1)');
    $t = Lugh::Tensor->new_f32($ctx, 10, 20, 30);
    is($t->nelements, 6000, '10x20x30 has 6000 elements');
    is($t->type, 0, 'type of an F32 tensor is 0');
    is($t->type_name, 'f32', 'type_name f32');
    is($t->type_size, 4, 'type_size 4');
    is($t->blck_size, 1, 'blck_size 1');
    ok(!$t->is_quantized, 'not quantized');
    ok($t->is_contiguous, 'contiguous');
    ok($t->has_data, 'has data');
}

# --- set/get round trips ------------------------------------------------------

{
    my $t = f32($ctx, 1.5, 2.5, 3.5, 4.5, 5.5);
    is_deeply([ $t->get_f32 ], [ 1.5, 2.5, 3.5, 4.5, 5.5 ], 'halves round trip exactly');
    is_deeply([ f32($ctx, 0, 0, 0, 0)->get_f32 ], [ 0, 0, 0, 0 ], 'zeros');
    is_deeply([ f32($ctx, -1, -2, -3)->get_f32 ], [ -1, -2, -3 ], 'negatives');
    is_deeply([ f32($ctx, 1000, 2000)->get_f32 ], [ 1000, 2000 ], 'large values');
    is_deeply([ f32($ctx, 16777216, -65504)->get_f32 ], [ 16777216, -65504 ], 'integers up to 2**24 exactly');
    my @small = f32($ctx, 0.001, 0.0001)->get_f32;
    cmp_ok(abs($small[0] - 0.001), '<', 1e-6, 'small value 0.001 (single precision)');
    cmp_ok(abs($small[1] - 0.0001), '<', 1e-7, 'small value 0.0001 (single precision)');
    isnt($small[0], 0.001, '... read back as single precision, not as the double given');
    my @big = f32($ctx, 1e30, -3.4e38)->get_f32;
    cmp_ok(abs($big[0] / 1e30 - 1), '<', 1e-6, '1e30 within single-precision rounding');
    cmp_ok(abs($big[1] / -3.4e38 - 1), '<', 1e-6, '-3.4e38 within single-precision rounding');

    $t = Lugh::Tensor->new_f32($ctx, 3);
    $t->set_f32([ 1.5, 2.5, 3.5 ]);
    is_deeply([ $t->get_f32 ], [ 1.5, 2.5, 3.5 ], 'set_f32 with an array reference');
    $t->set_f32(9, 8, 7);
    is_deeply([ $t->get_f32 ], [ 9, 8, 7 ], 'set_f32 again replaces every value');

    # get_bytes / set_bytes
    my @values = map { $_ / 10 - 50 } 1 .. 1000;
    my $big = Lugh::Tensor->new_f32($ctx, 1000);
    $big->set_f32(@values);
    my $bytes = $big->get_bytes;
    is(length $bytes, 4000, 'get_bytes: nbytes bytes');
    is($bytes, pack('f<*', @values), 'get_bytes is the data as pack f<*');
    is_deeply([ unpack 'f<*', $bytes ], [ $big->get_f32 ], '... the same values as get_f32');
    my $copy = Lugh::Tensor->new_f32($ctx, 1000);
    $copy->set_bytes($bytes);
    is($copy->get_bytes, $bytes, 'set_bytes / get_bytes round trip');
    is_deeply([ $copy->get_f32 ], [ $big->get_f32 ], '... the same values');
    my $three = Lugh::Tensor->new_f32($ctx, 3);
    $three->set_bytes(pack 'f<*', 1, 2, 3);
    is_deeply([ $three->get_f32 ], [ 1, 2, 3 ], 'set_bytes of pack f<*');
}

# --- new_f16, new_i32, new($ctx, $type, @dims) ---------------------------------

{
    my $h = Lugh::Tensor->new_f16($ctx, 4);
    is($h->type, 1, 'new_f16: type 1');
    is($h->type_name, 'f16', 'new_f16: type_name');
    is($h->nbytes, 8, 'new_f16: 2 bytes an element');
    is($h->type_size, 2, 'new_f16: type_size 2');
    ok(!$h->is_quantized, 'F16 is not a quantized type');
    $h->set_f32(0.5, 1, 1.5, -2);
    is_deeply([ $h->get_f32 ], [ 0.5, 1, 1.5, -2 ], 'F16 round trip of representable values');
    is($h->get_bytes, pack('v*', 0x3800, 0x3c00, 0x3e00, 0xc000), 'F16 bytes are IEEE half precision');
    $h->set_f32(0.1, 65504, -65504, 1 / 1024);
    is_deeply([ $h->get_f32 ], [ 0.0999755859375, 65504, -65504, 1 / 1024 ], 'F16 rounding and range');
    is_deeply([ Lugh::Tensor->new_f16($ctx, 2, 3)->shape ], [ 2, 3 ], 'new_f16 with two extents');

    my $ids = Lugh::Tensor->new_i32($ctx, 3);
    is($ids->type, 26, 'new_i32: type 26');
    is($ids->type_name, 'i32', 'new_i32: type_name');
    is($ids->nbytes, 12, 'new_i32: 4 bytes an element');
    $ids->set_f32(2, 0, 1);
    is_deeply([ $ids->get_f32 ], [ 2, 0, 1 ], 'I32 round trip');
    $ids->set_f32(-7, 2147483647, -2147483648);
    is_deeply([ $ids->get_f32 ], [ -7, 2147483647, -2147483648 ], 'I32 range');
    is($ids->get_bytes, pack('l<*', -7, 2147483647, -2147483648), 'I32 bytes');
    croaks_like(sub { $ids->set_f32(1.5, 0, 0) }, qr/^Lugh::Tensor->set_f32: value 0 \(1\.5\) is not an integer that fits a i32 tensor/,
        'I32 tensor given a fraction');
    croaks_like(sub { $ids->set_f32(0, 2**31, 0) }, qr/^Lugh::Tensor->set_f32: value 1 \(2147483648\) is not an integer/,
        'I32 tensor given a value out of range');

    my $by_const = Lugh::Tensor->new($ctx, Lugh::Quant::Q8_0, 64, 2);
    is($by_const->type_name, 'q8_0', 'new by constant');
    is($by_const->nbytes, 136, '... 2 rows of 2 q8_0 blocks of 34 bytes');
    is($by_const->type_size, 34, '... type_size');
    is($by_const->blck_size, 32, '... blck_size');
    ok($by_const->is_quantized, '... is quantized');
    is_deeply([ $by_const->shape ], [ 64, 2 ], '... shape in elements');
    is_deeply([ $by_const->get_f32 ], [ (0) x 128 ], '... a new quantized tensor reads as zeros');
    my $by_id = Lugh::Tensor->new($ctx, 8, 64, 2);
    is($by_id->type, Lugh::Quant::Q8_0, 'new by id');
    is($by_id->nbytes, 136, '... same size');
    for my $name (qw(q8_0 Q8_0)) {
        is(Lugh::Tensor->new($ctx, $name, 64)->type, Lugh::Quant::Q8_0, "new by name '$name'");
    }
    is(Lugh::Tensor->new($ctx, 'q4_K', 256)->type_size, 144, "new by name 'q4_K'");
    is(Lugh::Tensor->new($ctx, 'Q4_K', 256)->type, Lugh::Quant::Q4_K, "new by name 'Q4_K'");
    is(Lugh::Tensor->new($ctx, 'f16', 4)->type, 1, "new by name 'f16'");
    is(Lugh::Tensor->new($ctx, 'F32', 4)->type, 0, "new by name 'F32'");
    is(Lugh::Tensor->new($ctx, 'i32', 4)->type, 26, "new by name 'i32'");
    is(Lugh::Tensor->new($ctx, 0, 2, 3)->nbytes, 24, 'new with type id 0 is F32');
    croaks_like(sub { Lugh::Tensor->new($ctx, 'bogus', 32) }, qr/^Lugh::Tensor->new: unknown type 'bogus'/, 'new with an unknown type name');
    croaks_like(sub { Lugh::Tensor->new($ctx, 999, 32) }, qr/^Lugh::Tensor->new: Invalid type: 999\b/, 'new with an unknown type id');
    croaks_like(sub { Lugh::Tensor->new($ctx, -1, 32) }, qr/^Lugh::Tensor->new: Invalid type: -1\b/, 'new with a negative type id');
    croaks_like(sub { Lugh::Tensor->new($ctx, 4, 32) }, qr/^Lugh::Tensor->new: Invalid type: 4\b/, 'new with a removed type id');
    croaks_like(sub { Lugh::Tensor->new($ctx, 'q4_K', 100) },
        qr/^Lugh::Tensor->new: a q4_K tensor's first dimension must be a multiple of 256 \(its block size\), got 100/,
        'new quantized tensor with a partial block');
    croaks_like(sub { Lugh::Tensor->new($ctx) }, qr/^Usage: Lugh::Tensor->new\(\$ctx, \$type, \@dims\)/, 'new without a type');
}

# --- ops, each through a graph ------------------------------------------------

my $small = Lugh::Context->new(mem_size => 1024 * 1024);
{
    my $sum = Lugh::Ops::add($small, f32($small, 1, 2, 3), f32($small, 4, 5, 6));
    isa_ok($sum, 'Lugh::Tensor', 'add');
    ok(!$sum->has_data, 'an op result has no data before compute');
    croaks_like(sub { $sum->get_f32 }, qr/^Lugh::Tensor->get_f32: cannot read its values: this tensor is the result of ADD and has not been computed yet/,
        'reading an uncomputed result');
    is_deeply(run($small, $sum), [ 5, 7, 9 ], 'add');
    ok($sum->has_data, 'has data after compute');

    my $prod = Lugh::Ops::mul($small, f32($small, 1, 2, 3), f32($small, 4, 5, 6));
    isa_ok($prod, 'Lugh::Tensor', 'mul');
    is_deeply(run($small, $prod), [ 4, 10, 18 ], 'mul');

    # mul_mat: A [k=4, n=3] x B [k=4, m=2] = C [n=3, m=2], C(n, m) = row n of A . row m of B
    my $A = Lugh::Tensor->new_f32($small, 4, 3);
    $A->set_f32(1, 2, 3, 4, 0, 1, 0, -1, 2, 2, 2, 2);
    my $B = Lugh::Tensor->new_f32($small, 4, 2);
    $B->set_f32(1, 0, 1, 0, 0.5, 1, -1, 2);
    my $C = Lugh::Ops::mul_mat($small, $A, $B);
    isa_ok($C, 'Lugh::Tensor', 'mul_mat');
    is_deeply([ $C->shape ], [ 3, 2 ], 'mul_mat shape [n, m]');
    is_deeply(run($small, $C), [ 4, 0, 4, 7.5, -1, 5 ], 'mul_mat values');
    my $w = Lugh::Tensor->new_f32($small, 2, 3);
    $w->set_f32(1, 0, 0, 1, 1, 1);
    is_deeply(run($small, Lugh::Ops::mul_mat($small, $w, f32($small, 5, 7))), [ 5, 7, 12 ], 'mul_mat of a matrix and a vector');

    my $sm = Lugh::Ops::soft_max($small, f32($small, 1, 2, 3, 4));
    isa_ok($sm, 'Lugh::Tensor', 'soft_max');
    my $p = run($small, $sm);
    is(scalar @$p, 4, 'soft_max: 4 values');
    ok(!(grep { $_ <= 0 } @$p), 'soft_max: all positive');
    my $total = 0;
    $total += $_ for @$p;
    cmp_ok(abs($total - 1), '<', 1e-6, 'soft_max: sums to 1');
    my $z = exp(1) + exp(2) + exp(3) + exp(4);
    close_to($p, [ map { exp($_) / $z } 1 .. 4 ], 1e-6, 'soft_max values');
    ok($p->[0] < $p->[1] && $p->[1] < $p->[2] && $p->[2] < $p->[3], 'soft_max keeps the order');
    my $rows = Lugh::Tensor->new_f32($small, 2, 2);
    $rows->set_f32(0, 0, 1000, 1000);
    close_to(run($small, Lugh::Ops::soft_max($small, $rows)), [ 0.5, 0.5, 0.5, 0.5 ], 1e-6, 'soft_max per row, stable for large values');

    my $rms = Lugh::Ops::rms_norm($small, f32($small, 1, 2, 3, 4), 1e-5);
    isa_ok($rms, 'Lugh::Tensor', 'rms_norm');
    my $r = run($small, $rms);
    is(scalar @$r, 4, 'rms_norm: 4 values');
    my $ss = 0;
    $ss += $_ * $_ for @$r;
    cmp_ok(abs(sqrt($ss / 4) - 1), '<', 1e-4, 'rms_norm: the result has RMS 1');
    my $scale = 1 / sqrt((1 + 4 + 9 + 16) / 4 + 1e-5);
    close_to($r, [ map { $_ * $scale } 1 .. 4 ], 1e-6, 'rms_norm values');
    close_to(run($small, Lugh::Ops::rms_norm($small, f32($small, 1, 2, 3, 4))), $r, 1e-7, 'rms_norm eps defaults to 1e-5');
    close_to(run($small, Lugh::Ops::rms_norm($small, f32($small, 3, 4), 1e-6)), [ 3 / sqrt(12.5), 4 / sqrt(12.5) ], 1e-5,
        'rms_norm of (3, 4)');

    my $silu = Lugh::Ops::silu($small, f32($small, -1, 0, 1));
    isa_ok($silu, 'Lugh::Tensor', 'silu');
    my $s = run($small, $silu);
    is(scalar @$s, 3, 'silu: 3 values');
    is($s->[1], 0, 'silu(0) = 0');
    cmp_ok($s->[2], '>', 0, 'silu(1) > 0');
    cmp_ok($s->[0], '<', 0, 'silu(-1) < 0');
    close_to($s, [ map { $_ / (1 + exp(-$_)) } -1, 0, 1 ], 1e-3, 'silu values: x * sigmoid(x)');
}

# --- chained ops, an operand used twice, several graphs -----------------------

{
    my $x = f32($small, 1, 2, 3);
    my $y = f32($small, 2, 3, 4);
    my $sum = Lugh::Ops::add($small, $x, $y);
    my $prod = Lugh::Ops::mul($small, $sum, $x);
    my $graph = Lugh::Graph->new($small);
    $graph->build_forward($prod);
    is($graph->n_nodes, 2, 'a chain of two ops is two nodes');
    $graph->compute($small, 4);
    is_deeply([ $sum->get_f32 ], [ 3, 5, 7 ], 'chained: the intermediate result is computed');
    is_deeply([ $prod->get_f32 ], [ 3, 10, 21 ], 'chained: (x + y) * x');

    is_deeply(run($small, Lugh::Ops::add($small, $x, $x)), [ 2, 4, 6 ], 'add($x, $x)');
    is_deeply(run($small, Lugh::Ops::mul($small, $x, $x)), [ 1, 4, 9 ], 'mul($x, $x)');

    # re-running a graph after its input changed
    $x->set_f32(10, 20, 30);
    $graph->compute($small, 1);
    is_deeply([ $prod->get_f32 ], [ 120, 460, 1020 ], 'a graph runs again with new input values');

    # two graphs in one context
    my $ta = f32($small, 5, 6);
    my $tb = f32($small, 7, 8);
    my $g1 = Lugh::Graph->new($small);
    my $add = Lugh::Ops::add($small, $ta, $tb);
    $g1->build_forward($add);
    $g1->compute($small, 4);
    is_deeply([ $add->get_f32 ], [ 12, 14 ], 'first graph');
    my $g2 = Lugh::Graph->new($small);
    my $mul = Lugh::Ops::mul($small, $ta, $tb);
    $g2->build_forward($mul);
    $g2->compute($small, 4);
    is_deeply([ $mul->get_f32 ], [ 35, 48 ], 'second graph in the same context');
    is_deeply([ $add->get_f32 ], [ 12, 14 ], 'the first graph\'s result is unchanged');

    # one graph, two outputs
    my $both = Lugh::Graph->new;
    my $o1 = Lugh::Ops::sub($small, $ta, $tb);
    my $o2 = Lugh::Ops::mul($small, $o1, $o1);
    $both->build_forward($o1);
    $both->build_forward($o2);
    $both->build_forward($o2);
    is($both->n_nodes, 2, 'a tensor added twice is one node');
    $both->compute;
    is_deeply([ $o1->get_f32 ], [ -2, -2 ], 'two outputs: the first');
    is_deeply([ $o2->get_f32 ], [ 4, 4 ], 'two outputs: the second');
}

# --- thread counts --------------------------------------------------------------

{
    my $tctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $zeros = Lugh::Tensor->new_f32($tctx, 100);    # never set: zeros
    my $ones  = Lugh::Tensor->new_f32($tctx, 100);
    $ones->set_f32((1.0) x 100);
    my $k = 256;
    my $A = Lugh::Tensor->new_f32($tctx, $k, 64);
    $A->set_f32(map { sin($_ * 0.37) } 1 .. $k * 64);
    my $B = Lugh::Tensor->new_f32($tctx, $k, 8);
    $B->set_f32(map { cos($_ * 0.11) } 1 .. $k * 8);
    my (@flat, @mm);
    for my $n (1, 4, 8) {
        my $sum = Lugh::Ops::add($tctx, $zeros, $ones);
        my $mat = Lugh::Ops::soft_max($tctx, Lugh::Ops::mul_mat($tctx, $A, $B));
        my $g = Lugh::Graph->new($tctx);
        $g->build_forward($sum);
        $g->build_forward($mat);
        $g->compute($tctx, $n);
        push @flat, [ $sum->get_f32 ];
        push @mm, $mat->get_bytes;
    }
    is_deeply($flat[0], [ (1) x 100 ], 'zeros + ones with 1 thread');
    is_deeply($flat[1], $flat[0], '4 threads: the same');
    is_deeply($flat[2], $flat[0], '8 threads: the same');
    is(length $mm[0], 64 * 8 * 4, 'mul_mat + soft_max: 64x8 results');
    ok($mm[1] eq $mm[0], 'mul_mat + soft_max with 4 threads: bit-identical to 1 thread');
    ok($mm[2] eq $mm[0], 'mul_mat + soft_max with 8 threads: bit-identical to 1 thread');
}

# --- compute's forms and backends ---------------------------------------------

{
    my $x = f32($small, 3, 4);
    my $sq = Lugh::Ops::mul($small, $x, $x);
    my $g = Lugh::Graph->new($small);
    $g->build_forward($sq);
    my @forms = (
        [ 'compute($ctx, 2)',                                       sub { $g->compute($small, 2) } ],
        [ 'compute(n_threads => 2)',                                sub { $g->compute(n_threads => 2) } ],
        [ 'compute($ctx, n_threads => 3, backend => \'cpu\')',      sub { $g->compute($small, n_threads => 3, backend => 'cpu') } ],
        [ 'compute(backend => \'auto\')',                           sub { $g->compute(backend => 'auto') } ],
        [ 'compute($ctx)',                                          sub { $g->compute($small) } ],
        [ 'compute()',                                              sub { $g->compute } ],
    );
    for my $form (@forms) {
        my ($name, $code) = @$form;
        $x->set_f32(3, 4);
        ok(eval { $code->(); 1 }, "$name runs") or diag $@;
        is_deeply([ $sq->get_f32 ], [ 9, 16 ], "$name: result");
        $x->set_f32(5, 6);
        $code->();
        is_deeply([ $sq->get_f32 ], [ 25, 36 ], "$name: again with new input");
    }
    croaks_like(sub { $g->compute($small, n_threads => 1, backend => 'gpu') },
        qr/^Lugh::Graph->compute: backend 'gpu' is not available/, 'unknown backend: croaks naming it');
    croaks_like(sub { $g->compute(backend => 'NoSuchBackend') }, qr/backend 'NoSuchBackend'/, 'another unknown backend');
    croaks_like(sub { $g->compute($small, 0) }, qr/^Lugh::Graph->compute: n_threads must be 1 to \d+, got 0/, '0 threads');
    croaks_like(sub { $g->compute(n_threads => -2) }, qr/^Lugh::Graph->compute: n_threads must be 1 to \d+, got -2/, 'negative threads');
    croaks_like(sub { $g->compute(colour => 'red') }, qr/^Lugh::Graph->compute: unknown option 'colour'/, 'unknown compute option');
    croaks_like(sub { Lugh::Graph->new($small)->compute($small, 1) },
        qr/^Lugh::Graph->compute: the graph is empty \(call build_forward first\)/, 'computing an empty graph');
    croaks_like(sub { Lugh::Graph->new('not a context') }, qr/^Lugh::Graph->new: the argument must be a Lugh::Context object/,
        'Graph->new with a non-context');
}

# --- Lugh::Ops->name(...) is Lugh::Ops::name(...) -----------------------------

{
    my $a = f32($small, 1, 2, 3);
    my $b = f32($small, 4, 5, 6);
    my %pairs = (
        add     => [ Lugh::Ops->add($small, $a, $b),     Lugh::Ops::add($small, $a, $b) ],
        mul     => [ Lugh::Ops->mul($small, $a, $b),     Lugh::Ops::mul($small, $a, $b) ],
        silu    => [ Lugh::Ops->silu($small, $a),        Lugh::Ops::silu($small, $a) ],
        soft_max => [ Lugh::Ops->soft_max($small, $a),   Lugh::Ops::soft_max($small, $a) ],
        rms_norm => [ Lugh::Ops->rms_norm($small, $a, 1e-5), Lugh::Ops::rms_norm($small, $a, 1e-5) ],
        mul_mat => [ Lugh::Ops->mul_mat($small, $a, $b), Lugh::Ops::mul_mat($small, $a, $b) ],
    );
    for my $op (sort keys %pairs) {
        my ($method, $function) = @{ $pairs{$op} };
        isa_ok($method, 'Lugh::Tensor', "Lugh::Ops->$op");
        is_deeply([ $method->shape ], [ $function->shape ], "Lugh::Ops->$op: same shape as Lugh::Ops::$op");
        is_deeply(run($small, $method), run($small, $function), "Lugh::Ops->$op: same values as Lugh::Ops::$op");
    }
    is_deeply(run($small, $pairs{add}[0]), [ 5, 7, 9 ], 'Lugh::Ops->add values');
    is_deeply(run($small, $pairs{mul_mat}[0]), [32], 'Lugh::Ops->mul_mat values');
    croaks_like(sub { Lugh::Ops->add($small, $a) }, qr/^Usage: Lugh::Ops::add\(\$ctx, \$a, \$b\)/, 'Lugh::Ops->add with too few arguments');
    croaks_like(sub { Lugh::Ops::add($small, $a) }, qr/^Usage: Lugh::Ops::add\(\$ctx, \$a, \$b\)/, 'Lugh::Ops::add with too few arguments');
    croaks_like(sub { Lugh::Ops::add($small, $a, f32($small, 1, 2)) },
        qr/^Lugh::Ops::add: shapes \[3\] and \[2\] do not broadcast/, 'add of shapes that do not broadcast');
    croaks_like(sub { Lugh::Ops::mul_mat($small, $a, f32($small, 1, 2)) }, qr/^Lugh::Ops::mul_mat: .*\[3\].*\[2\]/,
        'mul_mat of mismatched shapes names both');
}

# --- the 0.12 errors ------------------------------------------------------------

croaks_like(sub { Lugh::Context->new(mem_size => 0) }, qr/^Lugh::Context->new: mem_size must be positive \(got 0\)/, 'mem_size 0');
croaks_like(sub { Lugh::Context->new(mem_size => -1) }, qr/^Lugh::Context->new: mem_size must be positive \(got -1\)/,
    'negative mem_size (0.12 wrapped it to a huge size)');
croaks_like(sub { Lugh::Context->new(mem_size => 'lots') }, qr/^Lugh::Context->new: mem_size must be an integer, got 'lots'/,
    'mem_size not a number');
croaks_like(sub { Lugh::Context->new(bytes => 1024) }, qr/^Lugh::Context->new: unknown option 'bytes'/,
    'unknown Context option (0.12 ignored it)');
is(Lugh::Context->new(size => 4096)->mem_size, 4096, 'size is mem_size\'s other name (some 0.12 scripts used it)');
croaks_like(sub { Lugh::Tensor->new_f32($ctx, 2, 2, 2, 2, 2) },
    qr/^Lugh::Tensor->new: Maximum 4 dimensions supported, got 5/, '5 dimensions');
croaks_like(sub { Lugh::Tensor->new_f32($ctx, 0) },
    qr/^Lugh::Tensor->new: Invalid dimension 0 at position 0: dimensions must be positive/, 'dimension 0');
croaks_like(sub { Lugh::Tensor->new_f32($ctx, -5) },
    qr/^Lugh::Tensor->new: Invalid dimension -5 at position 0: dimensions must be positive/, 'dimension -5');
croaks_like(sub { Lugh::Tensor->new_f32($ctx, 4, 3, -5) },
    qr/^Lugh::Tensor->new: Invalid dimension -5 at position 2: dimensions must be positive/, 'dimension -5 in third place');
croaks_like(sub { Lugh::Tensor->new_f32($ctx) }, qr/^Lugh::Tensor->new: a tensor needs at least one dimension/,
    'no dimensions (undefined behaviour in 0.12)');
croaks_like(sub { Lugh::Tensor->new_f32(Lugh::Context->new(mem_size => 1024 * 1024), 1000, 1000) },
    qr/^Lugh::Tensor->new: Lugh::Context \d+ is out of memory: a f32 tensor of shape \[1000, 1000\] needs \d+ bytes/,
    'a tensor larger than its context');
{
    my $four = Lugh::Tensor->new_f32($ctx, 4);
    $four->set_f32(1, 2, 3, 4);
    croaks_like(sub { $four->set_f32(1, 2) }, qr/^Lugh::Tensor->set_f32: Expected 4 values, got 2/, 'set_f32 with too few values');
    croaks_like(sub { $four->set_f32(1 .. 5) }, qr/^Lugh::Tensor->set_f32: Expected 4 values, got 5/, 'set_f32 with too many values');
    croaks_like(sub { $four->set_f32([ 1, 2, 3 ]) }, qr/^Lugh::Tensor->set_f32: Expected 4 values, got 3/,
        'set_f32 with a short array reference');
    is_deeply([ $four->get_f32 ], [ 1, 2, 3, 4 ], 'a failed set_f32 leaves the values as they were');
    is(scalar(my @v = $four->get_f32), 4, 'get_f32 returns 4 values');
    croaks_like(sub { $four->set_bytes(pack 'f<*', 1, 2, 3) },
        qr/^Lugh::Tensor->set_bytes: a f32 \[4\] tensor holds 16 bytes, got 12/, 'set_bytes with the wrong length');
    my $m = Lugh::Tensor->new_f32($ctx, 3, 2);
    $m->set_f32(1 .. 6);
    my $view = Lugh::Ops::transpose($ctx, $m);
    is_deeply([ $view->get_f32 ], [ 1, 4, 2, 5, 3, 6 ], 'a transposed view reads in its own order');
    croaks_like(sub { $view->get_bytes },
        qr/^Lugh::Tensor->get_bytes: the f32 \[2, 3\] tensor is a strided view, not contiguous \(copy it with Lugh::Ops::cont first\)/,
        'get_bytes of a strided view');
    croaks_like(sub { $view->set_bytes(pack 'f<*', 1 .. 6) },
        qr/^Lugh::Tensor->set_bytes: the f32 \[2, 3\] tensor is a strided view, not contiguous/, 'set_bytes of a strided view');
}

done_testing;
