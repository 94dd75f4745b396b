package Lugh::Autograd::Tensor;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

# new($ctx, $type, @dims, {requires_grad => 1}): the options hash may stand anywhere after the type.
sub new {
    my ($class, $ctx, $type, @rest) = @_;
    Lugh::_croak('Usage: Lugh::Autograd::Tensor->new($ctx, $type, @dims, { requires_grad => 1 })')
        unless defined $type;
    my %opt;
    my @dims;
    for my $arg (@rest) {
        if (ref $arg eq 'HASH') { %opt = (%opt, %$arg) }
        else { push @dims, $arg }
    }
    if (my @unknown = grep { $_ ne 'requires_grad' } sort keys %opt) {
        Lugh::_croak("Lugh::Autograd::Tensor->new: unknown option '$unknown[0]' (valid options: requires_grad)");
    }
    return _new($class, $ctx, $type, $opt{requires_grad} ? 1 : 0, @dims);
}

sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Autograd::Tensor - a tensor that remembers how it was computed

=head1 SYNOPSIS

    use Lugh;
    use Lugh::Autograd::Tensor;

    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    $w->set_data(3, 4);
    my $loss = Lugh::Autograd::Ops->sum($ctx, Lugh::Autograd::Ops->mul($ctx, $w, $w));
    $loss->backward;
    print join(',', @{ $w->grad }), "\n";    # 6,8

=head1 DESCRIPTION

The tensors of L<Lugh::Autograd>, whose DESCRIPTION says how gradients are
computed. C<Lugh::Autograd::Tensor> is loaded with L<Lugh>; C<use
Lugh::Autograd::Tensor> works too, as in Lugh 0.12.

=head1 METHODS

=head2 new

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 4, 2, { requires_grad => 1 });
    print join('x', $t->shape), "\n";    # 4x2

C<new($ctx, $type, @dims, { requires_grad =E<gt> 1 })>: a zero-filled leaf
of type C<'f32'>, C<'f16'> or C<'i32'> with 1 to 4 extents (ggml order);
the options hash may stand anywhere after the type. Only an F32 tensor can
require a gradient.

=head2 requires_grad

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $t->requires_grad(1);
    print $t->requires_grad ? "yes\n" : "no\n";    # yes

Reads, or (on a leaf) sets, whether the tensor's gradient is wanted.

=head2 grad

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    print join(',', @{ $t->grad }), "\n";    # 0,0

The gradient as an array reference (ne0 fastest): zeros before any
C<backward>, C<undef> for a tensor that does not require one. Op results on
the way to the loss have theirs too.

=head2 zero_grad

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 1, { requires_grad => 1 });
    $t->backward;
    $t->zero_grad;
    print $t->grad->[0], "\n";    # 0

=head2 set_data

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $t->set_data(1.5, 2.5);
    print join(',', $t->get_data), "\n";    # 1.5,2.5

Exactly C<nelements> values (or one array reference of them).

=head2 get_data

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 3);
    print scalar(my @v = $t->get_data), "\n";    # 3

=head2 nelements

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Autograd::Tensor->new($ctx, 'f32', 3, 4)->nelements, "\n";    # 12

=head2 shape

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', Lugh::Autograd::Tensor->new($ctx, 'f32', 3, 4)->shape), "\n";    # 3,4

=head2 is_leaf

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    my $y = Lugh::Autograd::Ops->silu($ctx, $w);
    print $w->is_leaf && !$y->is_leaf ? "yes\n" : "no\n";    # yes

True for a tensor made by C<new>, false for an op result that recorded its
operands.

=head2 backward

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    $w->set_data(3, 4);
    my $sq = Lugh::Autograd::Ops->mul($ctx, $w, $w);
    $sq->backward(1, 10);    # the gradient of each element of $sq
    print join(',', @{ $w->grad }), "\n";    # 6,80

Back-propagates from this tensor. Without arguments, a one-element tensor
starts from gradient 1 and a larger one from all ones (the gradient of its
sum); with C<nelements> values, from those. Croaks on a tensor that does not
require a gradient.

=head2 tensor

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    print ref $t->tensor, "\n";    # Lugh::Tensor

The values as a L<Lugh::Tensor> (shared, not copied), for L<Lugh::Ops>.

=head2 id

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    my $b = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    print $a->id != $b->id ? "distinct\n" : "same\n";    # distinct

A positive integer that names this tensor for as long as it lives; no other
tensor of the process is ever given the same one.

=head2 _raw_tensor_ptr

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    $w->set_data(1, 2);
    my $raw = Lugh::Tensor->from_ptr($w->_raw_tensor_ptr);
    print join(',', $raw->get_f32), "\n";    # 1,2

Lugh 0.12's way to the L<Lugh::Tensor> of an autograd tensor, kept for its
scripts; L</tensor> is the direct way. Despite its name, what it returns is
not a memory address but a token (the tensor's L</id>) that
L<Lugh::Tensor/from_ptr> resolves while this autograd tensor lives. Once it
has been freed the token is refused with a croak, so a stale or forged
number can never reach freed memory.

=head1 SEE ALSO

L<Lugh::Autograd>, L<Lugh::Optimizer>, L<Lugh::Tensor>

=cut
