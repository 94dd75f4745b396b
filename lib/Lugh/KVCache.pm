package Lugh::KVCache;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;

our $VERSION = '0.20';

# Counts: one accessor per row of the XS table.
Lugh::_install_accessors(__PACKAGE__);

# new() is an XS sub; its options are declared in xs-rs/subs/kv_cache.rs.

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::KVCache - the keys and values of one sequence, for incremental decoding

=head1 SYNOPSIS

    use Lugh;
    my $model     = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 512);
    my $cache     = $inference->create_kv_cache;

    my @logits = $inference->forward_cache($cache, [504, 3575, 282, 4649, 314]);   # prefill
    my $next   = $inference->sample(\@logits, greedy => 1);
    @logits    = $inference->forward_cache($cache, [$next]);                       # one step
    print $cache->n_cached, " of ", $cache->n_ctx, "\n";                           # 6 of 512

    $cache->resize(5);    # forget the last token
    $cache->clear;        # start over

=head1 DESCRIPTION

A KV cache holds, for every layer, the keys and values of the positions
processed so far (in f16, as llama.cpp does), so a forward pass computes only
the new tokens. Make one with L<Lugh::Inference/create_kv_cache> and pass it
to C<forward_cache>, C<< forward(cache => ...) >> or C<< forward_batch(caches => [...]) >>.

A cache belongs to the session that made it and keeps that session (and its
model) alive; using it with another session croaks. It is not copied into
new threads (C<CLONE_SKIP>).

=head1 METHODS

=head2 n_cached

    print $cache->n_cached;

The number of positions stored.

=head2 tokens

    my @ids = $cache->tokens;
    print scalar(@ids), " tokens: @ids[0 .. 4]\n";

The token ids whose keys and values the cache holds, in position order
(C<n_cached> of them). C<generate> with C<< cache => $cache >> compares a new
prompt with these and evaluates only what follows their common prefix.

=head2 n_ctx

    print $cache->n_ctx;

The capacity, the session's C<n_ctx>. A forward pass that would go past it
croaks before computing anything.

=head2 n_layer

    print $cache->n_layer;

The number of layers it stores K/V for (the model's).

=head2 clear

    $cache->clear;

Forgets every position (C<n_cached> becomes 0).

=head2 resize

    $cache->resize($n);

Rolls back to the first C<$n> positions; the next forward continues from
position C<$n>. C<$n> must not exceed C<n_cached>.

=head2 new

    my $cache = Lugh::KVCache->new(n_layer => 30, n_ctx => 512, n_head_kv => 3, head_dim => 64);
    my @logits = $inference->forward(tokens => [504, 3575, 282], cache => $cache);

A cache made from its shape rather than by a session (all four options are
required): C<n_layer> layers of C<n_ctx> positions, each holding
C<n_head_kv> heads of C<head_dim> keys and values (f16, in CPU memory). The
first session that uses it adopts it: the shape must be that session's
(C<< $inference->n_layer >>, C<n_ctx>, C<n_head_kv>, C<head_dim>), else that
use croaks naming both shapes; the cache is then laid out on that session's
device and belongs to it, like one from C<create_kv_cache>. Usually
C<< $inference->create_kv_cache >> is simpler: it knows the shape.

=cut
