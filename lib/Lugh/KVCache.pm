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

A cache can be saved to a file (L</save>) and loaded back, in this process
or another, into a session of the same model, C<n_ctx> and C<flash_attn>
(L</load>): generating from the loaded cache gives the tokens that
generating from the saved one would have given, without evaluating the
conversation again.

=head2 Recurrent models

Qwen3.5 (C<qwen35>, C<qwen35moe>) and LFM2 (C<lfm2>) have recurrent layers
beside their attention layers (delta-net layers, short convolutions): such a
layer keeps no keys and values per position but one state of the whole
sequence so far, as llama.cpp's hybrid memory does. The cache holds that
state too (and saves and loads it), but a state cannot be cut back to an
earlier position. So around every call that evaluates several tokens at
once (a prompt, a speculative draft check) the cache keeps a copy of the
states at its start and its end (at most 8 such checkpoints, the oldest
going first), and it rolls back only to those positions, to 0, or to where
it is. C<generate> with a prompt that shares only part of the cache goes
back to the last checkpoint inside the shared part and evaluates the rest
again; a speculative decoder that rejects drafted tokens goes back to the
checkpoint before them and evaluates the accepted ones again. L</resize> to
any other position croaks, naming the positions it can go back to.

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
position C<$n>. C<$n> must not exceed C<n_cached>. With a recurrent model
(L</Recurrent models>) C<$n> must be 0, C<n_cached> or a checkpoint's
position.

=head2 save

    use File::Temp qw(tempdir);
    $inference->forward_cache($cache, [504, 3575, 282, 4649, 314]);
    my $file = tempdir(CLEANUP => 1) . '/story.kv';
    $cache->save($file);
    print -s $file, " bytes\n";    # 115484 bytes

Writes the cache to the file C<$path>: its token history (L</tokens>), the
keys and values of those positions (not of the empty rest of the context),
and what it can be loaded into (the model's fingerprint, C<n_ctx>, whether
flash attention was on). The file is written beside C<$path> under a
temporary name, flushed to disk and renamed, so C<$path> holds either its
old content or the whole new file, never a part. Returns true; croaks
naming the path and the system's error when it cannot be written (a missing
directory, no permission, a full disk), and when the cache is in use by a
C<generate> running on it. A cache from L</new> that no session has used
yet holds nothing to save, and croaks.

For SmolLM2-135M a position takes 22.5 KiB (30 layers of 192 keys and 192
values in f16), for Qwen2.5-0.5B 12 KiB: 500 positions are 11.5 or 6 MB;
a quantized cache (L<Lugh::Inference/new>'s C<type_k>, C<type_v>) takes less.

The format (version 3, described in F<xs-rs/engine/forward/kv_file.rs>;
version 1 and 2 files, from earlier Lughs, still load, but for models whose
layers differ in width, such as Gemma 4, which they stored padded): a header
of 256 bytes (the magic C<LUGHKVC\0>, the version, the model's fingerprint,
architecture and name, the cache's shape and key and value types, C<n_ctx>,
the flash-attention setting and the number of positions) with its own checksum, the token ids,
each layer's keys and values, and an XXH64 checksum of the whole. The
fingerprint identifies the model file without reading its weights: an XXH64
of its header (all metadata and the tensor table) and of the first bytes of
each tensor's data.

=head2 load

    use File::Temp qw(tempdir);
    my $file  = tempdir(CLEANUP => 1) . '/story.kv';
    my $story = $inference->create_kv_cache;
    $inference->forward_cache($story, [504, 3575, 282, 4649, 314]);
    $story->save($file);

    # later, perhaps in another process: a session of the same model, n_ctx and flash_attn
    my $later    = Lugh::Inference->new(model => $model, n_ctx => 512);
    my $restored = Lugh::KVCache->load($file, inference => $later);
    print $restored->n_cached, "\n";                  # 5
    my @reply = $later->generate([$restored->tokens], cache => $restored, max_tokens => 8);

Reads a cache saved by L</save> into a new cache of the session
C<inference> (required), which it then belongs to like one from
C<create_kv_cache>. Generating or calling C<forward_cache> with it gives
exactly the tokens and logits the saved cache would have given.

The file must come from a session of the same model file (the fingerprints
are compared), the same C<n_ctx> and the same C<flash_attn>: the keys and
values are what that model computed with that attention kernel, and
continuing from them in another setting would give other tokens than
never having saved. Otherwise C<load> croaks saying what differs, e.g.
"'story.kv' cannot be loaded into this session: it was saved from a session
with n_ctx 512, and this session has n_ctx 1024". It croaks too, naming the
file and what is wrong, when the file is missing, unreadable, not a saved
cache, of another format version, cut short, or damaged (the checksums);
nothing in it is used before it is checked.

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
