package Lugh::Context;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

# new is an XS sub; its option (mem_size, or size as some Lugh 0.12 scripts
# called it) is the table of xs-rs/subs/context.rs.

# Lugh 0.12's documentation called it mem_used.
sub mem_used { goto &used_mem }

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Context - a memory arena for tensors that a program builds itself

=head1 SYNOPSIS

    use Lugh;

    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $t   = Lugh::Tensor->new_f32($ctx, 1024);
    printf "%d bytes of %d used\n", $ctx->used_mem, $ctx->mem_size;

=head1 DESCRIPTION

A context is one ggml context: a block of memory that holds the tensors
made in it (L<Lugh::Tensor>) and the results of the operations built on
them (L<Lugh::Ops>). Each tensor takes its data plus about 400 bytes of
metadata; a request that does not fit croaks with what it needed and what
is left, instead of aborting the process as ggml would.

A tensor keeps its context alive: the memory is freed when the context
object and every tensor made in it (or computed from its tensors) are gone,
in any order.

=head1 METHODS

=head2 new

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);   # 1 MiB

C<mem_size> (or C<size>) is the arena's size in bytes (16 MiB if not
given); it must be a positive integer.

=head2 mem_size

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print $ctx->mem_size, "\n";    # 1048576

=head2 used_mem, mem_used

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $before = $ctx->used_mem;
    my $t = Lugh::Tensor->new_f32($ctx, 1000);
    print $ctx->used_mem - $before >= 4000 ? "grew\n" : "same\n";    # grew

The bytes in use: every tensor's metadata and data. C<mem_used> is
another name for it (Lugh 0.12 documented that one).

=head2 id

    my $a = Lugh::Context->new(mem_size => 1024);
    my $b = Lugh::Context->new(mem_size => 1024);
    print $a->id != $b->id ? "distinct\n" : "same\n";    # distinct

A number that tells this context from every other in the process.

=head1 SEE ALSO

L<Lugh::Tensor>, L<Lugh::Ops>, L<Lugh::Graph>, L<Lugh::Quant>

=cut
