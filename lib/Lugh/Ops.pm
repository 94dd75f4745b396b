package Lugh::Ops;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

# Every op is a function of the context first: Lugh::Ops::add($ctx, $a, $b).
# Called as a class method (Lugh::Ops->add(...)) the class is dropped.
sub _args {
    my ($name, $usage, $min, $max, @args) = @_;
    shift @args if @args && defined $args[0] && !ref $args[0] && $args[0] eq __PACKAGE__;
    Lugh::_croak("Usage: Lugh::Ops::$name($usage)") if @args < $min || (defined $max && @args > $max);
    return @args;
}

my %binary = map { $_ => 1 } qw(add sub mul div);
my %unary  = map { $_ => 1 } qw(silu gelu relu tanh exp sqr sqrt soft_max sum mean argmax transpose cont);

for my $name (keys %binary) {
    no strict 'refs';
    *{$name} = sub { _binary($name, _args($name, '$ctx, $a, $b', 3, 3, @_)) };
}
for my $name (keys %unary) {
    no strict 'refs';
    *{$name} = sub { _unary($name, _args($name, '$ctx, $a', 2, 2, @_)) };
}

sub scale { _with_number('scale', _args('scale', '$ctx, $a, $factor', 3, 3, @_)) }

sub rms_norm {
    my ($ctx, $x, $eps) = _args('rms_norm', '$ctx, $a, [$eps]', 2, 3, @_);
    return _with_number('rms_norm', $ctx, $x, $eps // 1e-5);
}

sub norm {
    my ($ctx, $x, $eps) = _args('norm', '$ctx, $a, [$eps]', 2, 3, @_);
    return _with_number('norm', $ctx, $x, $eps // 1e-5);
}

sub diag_mask_inf { _with_number('diag_mask_inf', _args('diag_mask_inf', '$ctx, $a, $n_past', 3, 3, @_)) }

sub permute { _with_extents('permute', _args('permute', '$ctx, $a, @axes', 3, 6, @_)) }
sub reshape { _with_extents('reshape', _args('reshape', '$ctx, $a, @dims', 3, 6, @_)) }
sub view    { _with_extents('view',    _args('view', '$ctx, $a, $offset, @dims', 4, 7, @_)) }

sub concat {
    my ($ctx, $x, $y, $dim) = _args('concat', '$ctx, $a, $b, [$dim]', 3, 4, @_);
    return _concat($ctx, $x, $y, $dim // 0);
}

# rope's options (mode, freq_base, freq_scale) and their defaults are the
# table of xs-rs/subs/ops.rs.
sub rope { return _rope(_args('rope', '$ctx, $a, $positions, $n_dims, %options', 4, undef, @_)) }

# mul_mat and get_rows are XS subs that take ($ctx, ...) directly; keep the
# class-method form for them too.
{
    no warnings 'redefine';
    my $mul_mat  = \&mul_mat;
    my $get_rows = \&get_rows;
    *mul_mat  = sub { $mul_mat->(_args('mul_mat', '$ctx, $a, $b', 3, 3, @_)) };
    *get_rows = sub { $get_rows->(_args('get_rows', '$ctx, $a, $ids', 3, 3, @_)) };
}

1;

__END__

=head1 NAME

Lugh::Ops - tensor operations (ggml ops) from Perl

=head1 SYNOPSIS

    use Lugh;

    # compute a result and return its values; make an F32 vector
    sub run { my ($ctx, $t) = @_; my $g = Lugh::Graph->new($ctx); $g->build_forward($t); $g->compute($ctx, 1); return $t->get_f32 }
    sub f32 { my ($ctx, @v) = @_; my $t = Lugh::Tensor->new_f32($ctx, scalar @v); $t->set_f32(@v); return $t }

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Tensor->new_f32($ctx, 3);
    my $b = Lugh::Tensor->new_f32($ctx, 3);
    $a->set_f32(1, 2, 3);
    $b->set_f32(4, 5, 6);
    my $sum = Lugh::Ops::add($ctx, $a, $b);    # nothing computed yet
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward($sum);
    $graph->compute($ctx, 1);
    print join(',', $sum->get_f32), "\n";    # 5,7,9

=head1 DESCRIPTION

Each function makes the result of one ggml operation in the context given
first (the operands may live in other contexts) and returns it as a
L<Lugh::Tensor>. Nothing is computed until a L<Lugh::Graph> that includes the
result runs. C<Lugh::Ops::add($ctx, ...)> and C<< Lugh::Ops->add($ctx, ...) >>
are the same call.

Shapes and types are checked when the op is made: a mismatch croaks naming
both shapes, where ggml itself would abort the process. Shapes are in ggml
order (C<ne0> first). The arithmetic, activation, normalisation, reduction
and rope ops take contiguous F32 tensors (L</cont> packs a view;
L<Lugh::Tensor/dequantize> decodes a quantized one); C<mul_mat> and
C<get_rows> also read quantized matrices.

The examples below use C<run> and C<f32> from the SYNOPSIS.

=head1 ELEMENT-WISE

=head2 add

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::add($ctx, f32($ctx, 1, 2, 3, 4), f32($ctx, 10, 20)))), "\n";    # 11,22,13,24

C<a + b>. When the shapes differ, the smaller tensor is repeated over the
larger one: each of its extents must divide the other's (a scalar, a row
added to every row of a matrix). Either operand may be the smaller.

=head2 sub

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::sub($ctx, f32($ctx, 5, 7), f32($ctx, 1, 2)))), "\n";    # 4,5

C<a - b>, repeated as for L</add>.

=head2 mul

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::mul($ctx, f32($ctx, 1, 2, 3), f32($ctx, 4, 5, 6)))), "\n";    # 4,10,18

=head2 div

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::div($ctx, f32($ctx, 1, 9), f32($ctx, 4, 3)))), "\n";    # 0.25,3

=head2 scale

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::scale($ctx, f32($ctx, 1, 2), 0.5))), "\n";    # 0.5,1

=head2 silu

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    printf "%.3f\n", (run($ctx, Lugh::Ops::silu($ctx, f32($ctx, 1))))[0];    # 0.731

C<x * sigmoid(x)>.

=head2 gelu

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    printf "%.3f\n", (run($ctx, Lugh::Ops::gelu($ctx, f32($ctx, 1))))[0];    # 0.841

ggml's tanh approximation of GELU.

=head2 relu

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::relu($ctx, f32($ctx, -1, 2)))), "\n";    # 0,2

=head2 tanh

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    printf "%.3f\n", (run($ctx, Lugh::Ops::tanh($ctx, f32($ctx, 1))))[0];    # 0.762

=head2 exp

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    printf "%.3f\n", (run($ctx, Lugh::Ops::exp($ctx, f32($ctx, 1))))[0];    # 2.718

=head2 sqr

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::sqr($ctx, f32($ctx, 3, -2)))), "\n";    # 9,4

=head2 sqrt

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::sqrt($ctx, f32($ctx, 9, 16)))), "\n";    # 3,4

=head1 ROWS

=head2 soft_max

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    printf "%.3f %.3f %.3f\n", run($ctx, Lugh::Ops::soft_max($ctx, f32($ctx, 2, 1, 0.1)));    # 0.659 0.242 0.099

Softmax of each row (over C<ne0>).

=head2 rms_norm

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    printf "%.4f\n", (run($ctx, Lugh::Ops::rms_norm($ctx, f32($ctx, 3, 4), 1e-6)))[0];    # 0.8485

C<x / sqrt(mean(x**2) + eps)> over each row; C<eps> is 1e-5 if not given.

=head2 norm

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    printf "%.3f\n", (run($ctx, Lugh::Ops::norm($ctx, f32($ctx, 1, 3), 0)))[0];    # -1.000

C<(x - mean) / sqrt(variance + eps)> over each row (layer norm without
weights); C<eps> is 1e-5 if not given.

=head2 diag_mask_inf

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $m = Lugh::Tensor->new_f32($ctx, 2, 2);
    $m->set_f32(1, 2, 3, 4);
    print join(',', run($ctx, Lugh::Ops::diag_mask_inf($ctx, $m, 0))), "\n";    # 1,-Inf,3,4

Sets element C<i> of row C<j> to minus infinity where C<< i > n_past + j >>:
the causal mask of attention scores.

=head1 REDUCTIONS

=head2 sum

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print run($ctx, Lugh::Ops::sum($ctx, f32($ctx, 1, 2, 3.5))), "\n";    # 6.5

The sum of every element, as a one-element tensor.

=head2 mean

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $m = Lugh::Tensor->new_f32($ctx, 2, 2);
    $m->set_f32(1, 3, 10, 20);
    print join(',', run($ctx, Lugh::Ops::mean($ctx, $m))), "\n";    # 2,15

The mean of each row: shape C<[1, ne1, ne2, ne3]>.

=head2 argmax

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $m = Lugh::Tensor->new_f32($ctx, 3, 2);
    $m->set_f32(1, 9, 2, 7, 0, 3);
    print join(',', run($ctx, Lugh::Ops::argmax($ctx, $m))), "\n";    # 1,0

The index of the largest value of each row of a matrix, as an I32 tensor.

=head1 MATRICES

=head2 mul_mat

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Tensor->new_f32($ctx, 2, 3);    # 3 rows of 2
    $w->set_f32(1, 0, 0, 1, 1, 1);
    my $x = Lugh::Tensor->new_f32($ctx, 2, 1);    # one column of 2
    $x->set_f32(5, 7);
    print join(',', run($ctx, Lugh::Ops::mul_mat($ctx, $w, $x))), "\n";    # 5,7,12

C<a [K, N]> times C<b [K, M]> gives C<[N, M]>: element C<(n, m)> is the dot
product of row C<n> of C<a> with row C<m> of C<b> (C<< a^T b >> in matrix
terms, the way a weight matrix meets activations). C<a> may be quantized;
C<b> is F32. For 3- and 4-dimensional operands, C<b>'s C<ne2> (and C<ne3>)
must be a multiple of C<a>'s: each matrix of C<a> serves that many
consecutive matrices of C<b> (as grouped-query attention shares a key head).

=head2 transpose

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $m = Lugh::Tensor->new_f32($ctx, 2, 3);
    $m->set_f32(1 .. 6);
    print join(',', Lugh::Ops::transpose($ctx, $m)->shape), "\n";    # 3,2

C<ne0> and C<ne1> swapped: a view of the same data (use L</cont> for a packed copy).

=head2 permute

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 2, 3, 4);
    print join(',', Lugh::Ops::permute($ctx, $t, 1, 2, 0)->shape), "\n";    # 4,2,3

Axis C<i> of the input becomes axis C<$axes[i]> of the result (a view);
1 to 4 axes, the ones not given stay in place.

=head2 reshape

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 6);
    print join(',', Lugh::Ops::reshape($ctx, $t, 2, 3)->shape), "\n";    # 2,3

The same elements under new extents (a view of a contiguous tensor; the
element counts must match).

=head2 view

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = f32($ctx, 10, 11, 12, 13, 14);
    print join(',', Lugh::Ops::view($ctx, $t, 1, 3)->get_f32), "\n";    # 11,12,13

C<view($ctx, $a, $offset, @dims)>: the packed window of C<@dims> elements
that starts at element C<$offset> of a contiguous F32, F16 or integer
tensor. A view shares its source's data, so it reads the source's values
as they are.

=head2 cont

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $m = Lugh::Tensor->new_f32($ctx, 2, 2);
    $m->set_f32(1, 2, 3, 4);
    my $packed = Lugh::Ops::cont($ctx, Lugh::Ops::transpose($ctx, $m));
    print join(',', run($ctx, $packed)), "\n";    # 1,3,2,4

A packed copy of a view.

=head2 concat

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', run($ctx, Lugh::Ops::concat($ctx, f32($ctx, 1, 2), f32($ctx, 3), 0))), "\n";    # 1,2,3

C<concat($ctx, $a, $b, $dim)>: C<b> after C<a> along dimension C<$dim> (0 if
not given); the other extents must be equal, and both tensors of one type
(F32, F16 or I32).

=head2 get_rows

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $table = Lugh::Tensor->new_f32($ctx, 2, 3);    # 3 rows of 2
    $table->set_f32(1, 2, 3, 4, 5, 6);
    my $ids = Lugh::Tensor->new_i32($ctx, 2);
    $ids->set_f32(2, 0);
    print join(',', run($ctx, Lugh::Ops::get_rows($ctx, $table, $ids))), "\n";    # 5,6,1,2

The rows of C<a> that the I32 tensor C<ids> names, as F32 (an embedding
lookup; C<a> may be quantized). Each id must be a row of C<a>: the graph
checks them when it runs and croaks naming the first that is not.

=head1 ATTENTION

=head2 rope

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $q = Lugh::Tensor->new_f32($ctx, 2, 1, 1);    # head_dim 2, 1 head, 1 token
    $q->set_f32(1, 0);
    my $pos = Lugh::Tensor->new_i32($ctx, 1);
    $pos->set_f32(1);
    printf "%.4f %.4f\n", run($ctx, Lugh::Ops::rope($ctx, $q, $pos, 2));    # 0.5403 0.8415

C<rope($ctx, $a, $positions, $n_dims, mode =E<gt> 'norm', freq_base =E<gt> 10000, freq_scale =E<gt> 1)>:
rotary position embedding of C<a> C<[head_dim, n_head, n_tokens]> at the
I32 C<positions> C<[n_tokens]>. The first C<n_dims> (even) dimensions of
each head rotate: pairs C<(2i, 2i+1)> with C<mode =E<gt> 'norm'> (Llama),
C<(i, i + n_dims/2)> with C<'neox'> (Qwen, Gemma), by
C<position * freq_scale * freq_base^(-2i/n_dims)>.

=head1 SEE ALSO

L<Lugh::Tensor>, L<Lugh::Graph>, L<Lugh::Context>

=cut
