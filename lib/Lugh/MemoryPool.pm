package Lugh::MemoryPool;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;

our $VERSION = '0.20';

sub new {
    Lugh::_croak('Lugh::MemoryPool->new: make pools with $inference->create_memory_pool');
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::MemoryPool - a compute allocation reused between forward passes

=head1 SYNOPSIS

    use Lugh;
    my $model     = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model);
    my $pool      = $inference->create_memory_pool;

    # the longest input first: the shorter ones fit in its allocation
    for my $tokens ([6403, 1980, 253, 655], [504, 3575, 282], [314]) {
        my @logits = $inference->forward_pool($pool, $tokens);
    }
    print $pool->backend, ": ", $pool->n_allocations, " allocation(s)\n";   # CPU: 1 allocation(s)

=head1 DESCRIPTION

A forward pass needs a compute buffer for its intermediate tensors. Without
a pool each pass allocates its own; with a pool (C<forward_pool>,
C<forward_with_pool>, C<forward_cache_pool>, C<forward_batch_pool>, or
C<< pool => $pool >> on C<forward>), the allocation is kept: after the first
call, inputs of the same or a smaller size allocate nothing new.

A pool belongs to the session that made it and keeps it alive; using it with
another session croaks. It is not copied into new threads (C<CLONE_SKIP>).

=head1 METHODS

=head2 reset

    $pool->reset;

Frees the allocation; the next forward pass makes a new one. Returns true.

=head2 backend

    print $pool->backend;    # "CPU"

The name of the backend the pool allocates on.

=head2 n_allocations

    print $pool->n_allocations;

How many compute buffers the pool has allocated so far (grows only when an
input needs more room than the current buffer, or after C<reset>).

=head2 new

Croaks: pools are made with C<< $inference->create_memory_pool >>.

=cut
