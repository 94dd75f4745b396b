package Lugh::Graph;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

sub new {
    my ($class, $ctx) = @_;
    Lugh::_croak('Usage: Lugh::Graph->new($ctx)') if @_ > 2;
    if (defined $ctx && !(ref $ctx && eval { $ctx->isa('Lugh::Context') })) {
        Lugh::_croak('Lugh::Graph->new: the argument must be a Lugh::Context object');
    }
    return _new($class);
}

# compute($ctx, $n_threads) as in Lugh 0.12, or compute($ctx, n_threads => N,
# backend => NAME); the context is optional (the graph knows its tensors').
sub compute {
    my ($self, @args) = @_;
    shift @args if @args && ref $args[0] && eval { $args[0]->isa('Lugh::Context') };
    @args = (n_threads => $args[0]) if @args == 1;
    return _compute($self, @args);    # its options: the table of xs-rs/subs/graph.rs
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Graph - computes the results of Lugh::Ops

=head1 SYNOPSIS

    use Lugh;

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $x = Lugh::Tensor->new_f32($ctx, 4);
    my $y = Lugh::Ops::soft_max($ctx, Lugh::Ops::mul($ctx, $x, $x));
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward($y);
    for my $input ([1, 2, 3, 4], [0, 0, 0, 0]) {
        $x->set_f32(@$input);
        $graph->compute($ctx, n_threads => 2);
        printf "%.3f\n", ($y->get_f32)[3];
    }

=head1 DESCRIPTION

A graph is the list of results to compute. L</compute> runs every op they
depend on, in order, with ggml's CPU kernels, and leaves the values in the
result tensors. A graph can run again after its inputs change.

=head1 METHODS

=head2 new

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $graph = Lugh::Graph->new($ctx);
    print ref $graph, "\n";    # Lugh::Graph

The context argument is optional (Lugh 0.12 required it); the graph takes no
memory from it.

=head2 build_forward

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Tensor->new_f32($ctx, 2);
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward(Lugh::Ops::add($ctx, $a, $a));
    $graph->build_forward(Lugh::Ops::mul($ctx, $a, $a));
    print $graph->n_nodes, "\n";    # 2

Adds a tensor, and everything it is computed from, to the graph. Call it
once per result wanted; a tensor added twice is computed once.

=head2 compute

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Tensor->new_f32($ctx, 2);
    $a->set_f32(3, 4);
    my $sq = Lugh::Ops::sqr($ctx, $a);
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward($sq);
    $graph->compute($ctx, 4);
    print join(',', $sq->get_f32), "\n";    # 9,16

C<compute($ctx, $n_threads)> (Lugh 0.12's form) or
C<< compute($ctx, n_threads => N, backend => 'cpu') >>; C<$ctx> may be left
out. C<n_threads> defaults to the number of physical cores, and is capped at
the CPUs the process may use (more threads than cores only spin). The only
backend is C<cpu> (C<auto> picks it): the tensors live in their contexts'
host memory. Errors croak: an empty graph, a L<Lugh::Ops/get_rows> id
outside its table, an unknown backend.

=head2 n_nodes

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Tensor->new_f32($ctx, 2);
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward(Lugh::Ops::exp($ctx, Lugh::Ops::sqr($ctx, $a)));
    print $graph->n_nodes, "\n";    # 2

The number of ops the graph runs.

=head1 SEE ALSO

L<Lugh::Ops>, L<Lugh::Tensor>, L<Lugh::Context>

=cut
