package Lugh::Autograd;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

# Whether ops record what they were computed from (for backward).
our $GRAD_ENABLED = 1;

require Lugh::Autograd::Tensor;

sub is_grad_enabled { return $GRAD_ENABLED ? 1 : 0 }

sub set_grad_enabled {
    Lugh::_croak('Usage: Lugh::Autograd::set_grad_enabled($flag)') unless @_ == 1;
    my $previous = is_grad_enabled();
    $GRAD_ENABLED = $_[0] ? 1 : 0;
    return $previous;
}

sub no_grad(&)     { local $GRAD_ENABLED = 0; return $_[0]->() }
sub enable_grad(&) { local $GRAD_ENABLED = 1; return $_[0]->() }

package Lugh::Autograd::Ops;

our $VERSION = '0.20';

# Lugh::Autograd::Ops->add($ctx, $a, $b): class methods (a plain function call works too).
for my $name (qw(add sub mul div matmul sum mean relu gelu silu softmax scale rms_norm)) {
    my $binary = $name =~ /\A(?:add|sub|mul|div|matmul|scale)\z/;
    no strict 'refs';
    *{$name} = sub {
        shift if @_ && defined $_[0] && !ref $_[0] && $_[0] eq __PACKAGE__;
        my ($ctx, $x, @more) = @_;
        my $usage = $binary ? ($name eq 'scale' ? '$ctx, $a, $factor' : '$ctx, $a, $b')
            : $name eq 'rms_norm' ? '$ctx, $a, [$eps]' : '$ctx, $a';
        Lugh::_croak("Usage: Lugh::Autograd::Ops->$name($usage)")
            if !defined $x || @more > 1 || ($binary && !@more) || (!$binary && $name ne 'rms_norm' && @more);
        return _apply($name, $ctx, $Lugh::Autograd::GRAD_ENABLED, $x, @more);
    };
}

package Lugh::Autograd;

1;

__END__

=head1 NAME

Lugh::Autograd - tensors with gradients, from ggml's backward graph

=head1 SYNOPSIS

    use Lugh;
    use Lugh::Autograd;

    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 3, { requires_grad => 1 });
    $w->set_data(0.5, -1, 2);
    my $x = Lugh::Autograd::Tensor->new($ctx, 'f32', 3);
    $x->set_data(1, 2, 3);
    my $loss = Lugh::Autograd::Ops->sum($ctx, Lugh::Autograd::Ops->mul($ctx, $w, $x));
    print(($loss->get_data)[0], "\n");    # 4.5
    $loss->backward;
    print join(',', @{ $w->grad }), "\n";    # 1,2,3

=head1 DESCRIPTION

An autograd tensor is a L<Lugh::Tensor> that remembers how it was
computed. Ops (L</Lugh::Autograd::Ops>) compute their result at once; when
an operand requires a gradient, the result records its operands.
C<backward> then builds ggml's backward graph (C<ggml_build_backward_expand>)
from that tensor to every leaf that requires a gradient and runs it: the
gradients are ggml's own, exact for every op (checked against finite
differences in the tests).

Gradients accumulate over C<backward> calls until C<zero_grad>.

=head1 FUNCTIONS

=head2 is_grad_enabled

    print Lugh::Autograd::is_grad_enabled() ? "on\n" : "off\n";    # on

Whether ops record their operands (on by default).

=head2 set_grad_enabled

    my $previous = Lugh::Autograd::set_grad_enabled(0);
    print Lugh::Autograd::is_grad_enabled() ? "on\n" : "off\n";    # off
    Lugh::Autograd::set_grad_enabled($previous);

Turns recording on or off; returns the previous setting.

=head2 no_grad

    use Lugh::Autograd;
    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    my $y = Lugh::Autograd::no_grad { Lugh::Autograd::Ops->relu($ctx, $w) };
    print $y->requires_grad ? "tracked\n" : "not tracked\n";    # not tracked

Runs the block with recording off (an evaluation pass); returns what it
returns.

=head2 enable_grad

    use Lugh::Autograd;
    my $on = Lugh::Autograd::no_grad { Lugh::Autograd::enable_grad { Lugh::Autograd::is_grad_enabled() } };
    print $on ? "on\n" : "off\n";    # on

Runs the block with recording on.

=head1 Lugh::Autograd::Tensor

The tensors themselves: see L<Lugh::Autograd::Tensor> (loaded with this
module).

=head1 Lugh::Autograd::Ops

Class methods, C<< Lugh::Autograd::Ops->NAME($ctx, $a, ...) >>: the result is
made in C<$ctx> and computed at once. C<add sub mul div> work element by
element (the smaller operand repeated over the larger, as in
L<Lugh::Ops/add>); C<matmul($ctx, $a, $b)> is L<Lugh::Ops/mul_mat> (C<a>
C<[K, N]>, C<b> C<[K, M]>, result C<[N, M]>); C<sum> and C<mean> reduce every
element to one; C<softmax> and C<rms_norm> (eps 1e-5 unless given) work on
each row; C<gelu> is the tanh approximation, built from ops that ggml can
differentiate.

=head2 add, sub, mul, div

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    $a->set_data(6, 8);
    my $b = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $b->set_data(2, 4);
    print join(',', Lugh::Autograd::Ops->div($ctx, $a, $b)->get_data), "\n";    # 3,2

=head2 matmul

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, 2, { requires_grad => 1 });
    $w->set_data(1, 2, 3, 4);
    my $x = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, 1);
    $x->set_data(1, 1);
    print join(',', Lugh::Autograd::Ops->matmul($ctx, $w, $x)->get_data), "\n";    # 3,7

=head2 sum, mean

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 4);
    $a->set_data(1, 2, 3, 6);
    print((Lugh::Autograd::Ops->mean($ctx, $a)->get_data)[0], "\n");    # 3

=head2 relu, gelu, silu

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $a->set_data(-1, 2);
    print join(',', Lugh::Autograd::Ops->relu($ctx, $a)->get_data), "\n";    # 0,2

=head2 softmax

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $a->set_data(0, 0);
    print join(',', Lugh::Autograd::Ops->softmax($ctx, $a)->get_data), "\n";    # 0.5,0.5

=head2 scale

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $a->set_data(1, 2);
    print join(',', Lugh::Autograd::Ops->scale($ctx, $a, 3)->get_data), "\n";    # 3,6

=head2 rms_norm

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $a->set_data(3, 4);
    printf "%.4f\n", (Lugh::Autograd::Ops->rms_norm($ctx, $a, 1e-6)->get_data)[0];    # 0.8485

=head1 SEE ALSO

L<Lugh::Autograd::Tensor>, L<Lugh::Optimizer>, L<Lugh::Tensor>, L<Lugh::Ops>

=cut
