package Lugh::RoPE;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

use constant {
    ROPE_SCALING_NONE     => 0,
    ROPE_SCALING_LINEAR   => 1,
    ROPE_SCALING_YARN     => 2,
    ROPE_SCALING_LONGROPE => 3,
};

# What new() takes, in the order its messages list them; the defaults (0:
# the model's, ext_factor -1: computed) are the table's, in
# xs-rs/subs/rope.rs.
my @NEW_OPTIONS = _new_options();
my %IS_NEW_OPTION = map { $_ => 1 } @NEW_OPTIONS;

Lugh::_install_accessors(__PACKAGE__);

sub new {
    my ($class, @args) = @_;
    Lugh::_croak("Usage: Lugh::RoPE->new(scaling_type => 'linear', n_ctx_orig => N, target_ctx => N, ...)")
        if @args % 2;
    my %opt = @args;
    for my $key (sort keys %opt) {
        Lugh::_croak("Lugh::RoPE->new: unknown option '$key' (valid options: " . join(', ', @NEW_OPTIONS) . ')')
            unless $IS_NEW_OPTION{$key};
        Lugh::_croak("Lugh::RoPE->new: $key is undefined") unless defined $opt{$key};
    }
    return _new($class, %opt);
}

sub none { my ($class) = @_; return $class->new(scaling_type => 'none') }

sub linear {
    Lugh::_croak('Usage: Lugh::RoPE->linear($n_ctx_orig, $target_ctx)') unless @_ == 3;
    my ($class, $n_ctx_orig, $target_ctx) = @_;
    _contexts('linear', $n_ctx_orig, $target_ctx);
    return $class->new(scaling_type => 'linear', n_ctx_orig => $n_ctx_orig, target_ctx => $target_ctx);
}

sub yarn {
    Lugh::_croak('Usage: Lugh::RoPE->yarn($n_ctx_orig, $target_ctx, %options)') unless @_ >= 3;
    my ($class, $n_ctx_orig, $target_ctx, @options) = @_;
    _contexts('yarn', $n_ctx_orig, $target_ctx);
    Lugh::_croak('Usage: Lugh::RoPE->yarn($n_ctx_orig, $target_ctx, beta_fast => ..., ...)') if @options % 2;
    my %o = @options;
    for my $key (qw(scaling_type n_ctx_orig target_ctx)) {
        Lugh::_croak("Lugh::RoPE->yarn: $key is given by the arguments, not as an option") if exists $o{$key};
    }
    return $class->new(%o, scaling_type => 'yarn', n_ctx_orig => $n_ctx_orig, target_ctx => $target_ctx);
}

sub linear_2x { my ($class, $orig) = @_; _contexts('linear_2x', $orig); return $class->linear($orig, 2 * $orig) }
sub linear_4x { my ($class, $orig) = @_; _contexts('linear_4x', $orig); return $class->linear($orig, 4 * $orig) }
sub yarn_32k  { my ($class, $orig) = @_; _contexts('yarn_32k',  $orig); return $class->yarn($orig, 32768) }
sub yarn_64k  { my ($class, $orig) = @_; _contexts('yarn_64k',  $orig); return $class->yarn($orig, 65536) }
sub yarn_128k { my ($class, $orig) = @_; _contexts('yarn_128k', $orig); return $class->yarn($orig, 131072) }

sub from_model {
    my ($class, $model) = @_;
    Lugh::_croak('Usage: Lugh::RoPE->from_model($model)') unless @_ == 2;
    return _from_model($class, $model);
}

# The constructors' context arguments: positive integers.
sub _contexts {
    my ($method, @contexts) = @_;
    my $want = $method =~ /_/ ? 1 : 2;
    my $usage = $want == 1 ? "Lugh::RoPE->$method(\$n_ctx_orig)" : "Lugh::RoPE->$method(\$n_ctx_orig, \$target_ctx)";
    Lugh::_croak("Usage: $usage") unless @contexts == $want;
    for my $n (@contexts) {
        Lugh::_croak("Lugh::RoPE->$method: a context length must be an integer >= 1, got "
                . (defined $n ? "'$n'" : 'undef'))
            unless defined $n && !ref $n && $n =~ /\A[0-9]+\z/ && $n >= 1;
    }
    return;
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::RoPE - RoPE (rotary position embedding) scaling: reaching past a model's training context

=head1 SYNOPSIS

    use Lugh;

    my $rope = Lugh::RoPE->linear(8192, 16384);          # 2x: freq_scale 0.5
    print $rope->scaling_type_name, ' ', $rope->freq_scale, "\n";    # linear 0.5

    my $yarn = Lugh::RoPE->yarn(4096, 32768, beta_fast => 32);
    print $yarn->freq_scale, "\n";    # 0.125

    # for a whole session, or for one call
    my $model     = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 512, rope => $rope);
    my @logits    = $inference->forward(tokens => [ 1, 2, 3 ], rope => $yarn);
    print scalar(@logits), "\n";    # 49152

=head1 DESCRIPTION

A model learns its rotary position embedding for the positions it was
trained on (its C<context_length>). Beyond them its attention breaks down,
unless the positions are scaled: B<linear> scaling divides every position by
the factor (positions interpolated into the trained range); B<YaRN> scales
each frequency band differently (high frequencies extrapolated, low ones
interpolated) and corrects the attention's magnitude; B<LongRoPE> uses
per-dimension factor tensors that the model carries (Phi-3). B<none> turns
scaling off, even one the model asks for.

A Lugh::RoPE object is a configuration, computed as llama.cpp computes its
context parameters (C<--rope-scaling>, C<--rope-scale>, C<--rope-freq-base>,
C<--yarn-orig-ctx>, C<--yarn-ext-factor>, C<--yarn-beta-fast>,
C<--yarn-beta-slow>): logits with C<rope =E<gt> $rope> equal llama.cpp's with
the same settings. Give it to L<Lugh::Inference/new> (the session's default)
or to any forward, C<generate>, C<logprobs>, C<perplexity> or C<embed> call
(that call only). Without one a session uses the model's own settings from
its GGUF file (C<rope.freq_base>, C<rope.scaling.type>,
C<rope.scaling.factor>, C<rope.scaling.attn_factor>,
C<rope.scaling.original_context_length>, and Llama 3's C<rope_freqs> or
Phi-3's long/short factor tensors), so a model made for a longer context
needs no object at all.

Sliding-window layers (Gemma 2 and 3) keep their own RoPE, as in llama.cpp.
A KV cache holds keys rotated with the settings they were computed with:
continue a cache with the settings that filled it.

=head1 CONSTRUCTORS

=head2 new

    my $rope = Lugh::RoPE->new(
        scaling_type => 'yarn',      # none | linear | yarn | longrope, or a ROPE_SCALING_* constant
        n_ctx_orig   => 4096,        # the context the model was trained on (0: the model's)
        target_ctx   => 32768,       # the context to reach (0: not given)
        freq_base    => 0,           # RoPE's base frequency (0: the model's)
        freq_scale   => 0,           # position scale (0: n_ctx_orig / target_ctx, else the model's)
        ext_factor   => -1,          # YaRN's extrapolation mix, 0..1 (-1: 1 for yarn, else 0)
        attn_factor  => 1.0,         # a factor on RoPE's magnitude, on top of YaRN's and the model's
        beta_fast    => 32.0,        # YaRN: the band counted as high-frequency from here
        beta_slow    => 1.0,         # YaRN: the band counted as low-frequency from here
    );
    print $rope->freq_scale, "\n";    # 0.125

Every option is optional; C<Lugh::RoPE-E<gt>new> alone is C<none>. When
C<freq_scale> is 0 and both contexts are known it is C<n_ctx_orig /
target_ctx>; when only C<target_ctx> is given, the model's original context
is used for the division when the configuration meets a session. An unknown
option, a negative or non-numeric value, an C<ext_factor> above 1 or an
unknown scaling type croaks, naming it.

=head2 none

    my $rope = Lugh::RoPE->none;
    print $rope->scaling_type_name, ' ', $rope->freq_scale, "\n";    # none 1

No scaling, whatever the model asks for.

=head2 linear

    my $rope = Lugh::RoPE->linear(2048, 8192);
    print $rope->freq_scale, "\n";    # 0.25

Linear interpolation from C<$n_ctx_orig> to C<$target_ctx> positions.

=head2 yarn

    my $rope = Lugh::RoPE->yarn(4096, 32768, beta_fast => 16.0, beta_slow => 2.0);
    print $rope->scaling_type_name, ' ', $rope->beta_fast, "\n";    # yarn 16

YaRN from C<$n_ctx_orig> to C<$target_ctx>; the other options of L</new>
may follow.

=head2 from_model

    my $rope = Lugh::RoPE->from_model($model);
    print $rope->scaling_type_name, ' ', $rope->n_ctx_orig, ' ', $rope->freq_base, "\n";    # linear 8192 100000

The model's own settings as a configuration: giving it to a session changes
nothing. Useful to read them, or to start from them.

=head1 PRESETS

=head2 linear_2x

    print Lugh::RoPE->linear_2x(4096)->target_ctx, "\n";    # 8192

=head2 linear_4x

    print Lugh::RoPE->linear_4x(4096)->target_ctx, "\n";    # 16384

=head2 yarn_32k

    print Lugh::RoPE->yarn_32k(4096)->freq_scale, "\n";    # 0.125

=head2 yarn_64k

    print Lugh::RoPE->yarn_64k(4096)->target_ctx, "\n";    # 65536

=head2 yarn_128k

    print Lugh::RoPE->yarn_128k(4096)->target_ctx, "\n";    # 131072

Linear scaling to twice or four times C<$n_ctx_orig>, and YaRN to 32K, 64K
or 128K positions.

=head1 ACCESSORS

Read-only; each returns what the object was made with (after C<freq_scale>
was computed):

    my $rope = Lugh::RoPE->yarn(4096, 16384);
    my @values = map { $rope->$_ } qw(scaling_type scaling_type_name n_ctx_orig target_ctx freq_base freq_scale
        ext_factor attn_factor beta_fast beta_slow);
    print "@values\n";    # 2 yarn 4096 16384 0 0.25 -1 1 32 1

=head2 scaling_type

The type as an integer (the constants below).

=head2 scaling_type_name

C<none>, C<linear>, C<yarn> or C<longrope>.

=head2 n_ctx_orig, target_ctx, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow

The values of L</new>'s options.

=head1 CONSTANTS

    my @types = (Lugh::RoPE::ROPE_SCALING_NONE, Lugh::RoPE::ROPE_SCALING_LINEAR, Lugh::RoPE::ROPE_SCALING_YARN,
        Lugh::RoPE::ROPE_SCALING_LONGROPE);
    print "@types\n";    # 0 1 2 3

=head2 ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN, ROPE_SCALING_LONGROPE

The scaling types as integers, for C<scaling_type> (L</new> takes them or
the names).

=head1 SEE ALSO

L<Lugh::Inference>, L<Lugh::Model>; YaRN: L<https://arxiv.org/abs/2309.00071>.

=cut
