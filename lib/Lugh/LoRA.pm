package Lugh::LoRA;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

Lugh::_install_accessors(__PACKAGE__);

# create's options and defaults are the table of xs-rs/subs/lora.rs;
# context is accepted for the symmetry with Lugh::Model's methods, and unused.
my %CREATE_VALID = map { $_ => undef } _create_options(), 'context';

sub new {
    my ($class, @args) = @_;
    Lugh::_croak('Usage: Lugh::LoRA->new(adapter => $path, model => $model, scale => 1.0)') if @args % 2;
    my %opt = @args;
    my %known = map { $_ => 1 } qw(adapter file model scale);
    for my $key (sort keys %opt) {
        Lugh::_croak("Lugh::LoRA->new: unknown option '$key' (valid options: adapter, file, model, scale)")
            unless $known{$key};
    }
    Lugh::_croak('Lugh::LoRA->new: give adapter or file, not both') if exists $opt{adapter} && exists $opt{file};
    my $path = exists $opt{adapter} ? $opt{adapter} : $opt{file};
    Lugh::_croak('Lugh::LoRA->new requires adapter => $path (a .gguf or .safetensors LoRA adapter)')
        unless defined $path && length $path;
    Lugh::_croak('Lugh::LoRA->new requires model => $model (the Lugh::Model the adapter was made for)')
        unless defined $opt{model};
    return _new($class, $path, $opt{model}, $opt{scale} // 1.0);
}

sub create {
    Lugh::_croak('Usage: Lugh::LoRA->create(model => $model, rank => 16, alpha => 32, targets => [...])') unless @_ % 2;
    my ($class, @args) = @_;
    my %opt = Lugh::_options('Lugh::LoRA->create', \%CREATE_VALID, @args);
    my %given = @args;
    Lugh::_croak("Lugh::LoRA->create requires 'model' parameter (a Lugh::Model)") unless defined $opt{model};
    Lugh::_croak('Lugh::LoRA->create: rank must be between 1 and 256, got '
        . (defined $opt{rank} ? $opt{rank} : 'undef') . ' (an integer)')
        if exists $given{rank}
        && !(defined $opt{rank} && $opt{rank} =~ /\A[0-9]+\z/ && $opt{rank} >= 1 && $opt{rank} <= 256);
    # no targets, or an empty list: the table's default (attn_q, attn_v)
    delete $opt{targets} if ref $opt{targets} eq 'ARRAY' && !@{ $opt{targets} };
    Lugh::_croak('Lugh::LoRA->create: targets must be an array reference of weight kinds (attn_q, ffn_up, ...)')
        if defined $opt{targets} && ref $opt{targets} ne 'ARRAY';
    delete $opt{context};
    return _create($class, %opt);
}

sub save {
    my ($self, $path, @more) = @_;
    Lugh::_croak('Usage: $lora->save($path)') if @more || !defined $path;
    Lugh::_croak("Lugh::LoRA->save: the path must end with .gguf, got '$path'") unless $path =~ /\.gguf\z/i;
    return _save($self, $path);
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::LoRA - LoRA adapters: fine-tuned behaviour on top of a base model

=head1 SYNOPSIS

    use Lugh;

    my $model = Lugh::Model->new(model => 'smollm2-135m-q4_1');
    my $lora  = Lugh::LoRA->new(adapter => 'my-adapter.gguf', model => $model);
    # or a PEFT adapter: adapter_model.safetensors with adapter_config.json beside it

    my $inference = Lugh::Inference->new(model => $model);
    my @logits = $inference->forward(tokens => \@tokens, lora => $lora);
    my @ids    = $inference->generate(\@tokens, max_tokens => 32, lora => [ [ $lora, 0.5 ] ]);

=head1 DESCRIPTION

A LoRA adapter holds, for some of a model's projection weights W, two small
matrices A and B (rank r). With the adapter a projection computes
C<W*x + scale*(alpha/r)*B*(A*x)>, as llama.cpp's C<build_lora_mm> does: the
logits with an adapter equal llama.cpp's with the same adapter and scale
(C<--lora-scaled>). The base weights are never changed, so one model serves
calls with and without adapters, and with several at once.

Two formats are read:

=over 4

=item * llama.cpp's GGUF adapters (C<general.type = adapter>,
C<adapter.type = lora>, C<adapter.lora.alpha>, tensors
C<NAME.weight.lora_a> and C<NAME.weight.lora_b>), as C<convert_lora_to_gguf.py>
writes them;

=item * PEFT adapters: an C<adapter_model.safetensors> (F32, F16 or BF16)
with its C<adapter_config.json> in the same directory (C<lora_alpha>, C<r>,
C<target_modules>, C<rank_pattern>, C<alpha_pattern>, C<use_rslora>). The
Hugging Face module names (C<model.layers.N.self_attn.q_proj>,
C<mlp.up_proj>, C<model.embed_tokens>, C<lm_head>, ...) are mapped to the
GGUF weights as the converter maps them, including the reordering of
Llama's query and key rows. Without C<adapter_config.json> the file is
read as Lugh 0.12 read it: every LoRA pair in it, each of the rank its
tensors have, with alpha 1 (so the scale on C<B*A*x> is C<scale/rank>: give
C<< scale => >> the adapter's C<lora_alpha> to use it as trained).

=back

Adapters apply to every call that is given them: C<lora =E<gt> $lora> on
L<Lugh::Inference/forward> and all its spellings, C<forward_batch>,
C<generate>, C<chat>, L<Lugh::Chat> (as a generation option),
C<logprobs>, C<perplexity>, C<embed> and C<embed_batch>. The value is one
adapter (used at its L</scale>), C<[$lora, $scale]>, or an array of either.

A KV cache holds what was computed with the adapters of the call that filled
it: C<generate> and chats start over rather than reuse a cached prompt
computed with other adapters or RoPE settings; with C<forward_cache> keeping
them consistent is the caller's part.

An adapter is read into the CPU's memory. A session whose layers are on
other devices (a GPU, RPC servers; see L<Lugh::Inference/new>) copies each
pair beside the weight it adapts, as llama.cpp places adapters, the first
time it uses the adapter; sessions sharing those weights share the copies,
which live as long as the adapter. Over RPC this keeps the pairs off the
network, which they would otherwise cross at every step. An adapter made by
L</create> is read where it is, since training changes it.

=head1 CONSTRUCTOR

=head2 new

    my $lora = Lugh::LoRA->new(
        adapter => $path,     # alias: file; .gguf, or .safetensors (adapter_config.json beside it)
        model   => $model,    # the Lugh::Model it adapts
        scale   => 1.0,       # the default scale of its use
    );

Reads and checks the adapter against the model: the architecture (GGUF),
every tensor's base weight (it must exist in the model), the shapes of A
and B against it, the ranks against C<adapter_config.json>, and for a
SafeTensors file every offset and size in its header (an untrusted header
that lies croaks). Each mismatch croaks naming the tensor; so do a missing
file, an unknown format, DoRA, C<modules_to_save> and activated LoRA
(settings that would change the computation and are not supported). A
session of another model refuses the adapter.

=head2 create

    use Lugh;
    my $model = Lugh::Model->create(path => '/tmp/lugh-tiny.gguf', seed => 1);
    my $lora = Lugh::LoRA->create(
        model   => $model,
        rank    => 8,                    # 1..256 (default 16)
        alpha   => 16,                   # default 32; the scale on B*A*x is scale*alpha/rank
        targets => [qw(attn_q attn_v)],  # the default; also attn_k attn_output ffn_gate ffn_up ffn_down output
        seed    => 42,                   # optional: the same seed, the same A
    );
    print scalar($lora->trainable_parameters), "\n";    # 8

A new adapter to train with L<Lugh::Train/forward>. Each target names a
kind of weight and matches it in every layer (a full weight name such as
C<blk.3.ffn_up.weight> matches that one). For each matched weight of
shape [n_in, n_out], A is [n_in, rank], drawn Kaiming-uniform from Lugh's
seeded generator (C<seed>, else the one L<Lugh/srand> seeds), and B is
[rank, n_out] of zeros, so the new adapter changes nothing until trained.
A target that matches no weight croaks, as do the token embeddings (not
a projection). C<scale> (default 1) is the default scale of its use.

=head1 METHODS

=head2 trainable_parameters

    my @params = $lora->trainable_parameters;   # A, B, A, B, ...
    my $opt = Lugh::Optimizer::AdamW->new(lr => 1e-3, params => \@params);

The adapter's matrices as L<Lugh::Autograd::Tensor>s: A then B of each
weight, in layer order. They are the adapter's own storage: an optimizer
step changes the adapter, and every call that uses it. Only an adapter
made by L</create> has them (a loaded one croaks).

=head2 get_weight_tensor

    my $b = $lora->get_weight_tensor('blk.0.attn_q.weight', 'b');   # 'a' or 'b'
    my @values = $b->get_data;

One matrix of one weight, as an L<Lugh::Autograd::Tensor>. An unknown
weight, a type other than a or b, and a loaded adapter croak.

=head2 save

    $lora->save('/tmp/my-adapter.gguf');

Writes an adapter made by L</create> as llama.cpp reads adapters
(C<general.type> adapter, C<adapter.type> lora, C<adapter.lora.alpha>,
and f32 tensors C<NAME.lora_a> [n_in, rank] and C<NAME.lora_b> [rank,
n_out]), so C<llama-cli --lora> and L</new> load it. The path must end
in C<.gguf>; the file is written beside it and renamed into place.

=head2 scale

    my $lora = Lugh::LoRA->new(adapter => $path, model => $model);
    $lora->scale(0.5);                 # set
    print $lora->scale, "\n";          # get

The scale a call uses the adapter at when it is given without one (default
1, or C<new>'s C<scale>).

=head2 alpha

The adapter's alpha (GGUF C<adapter.lora.alpha>, PEFT C<lora_alpha>); 0
means that the scale is used as it is, without C<alpha/r>.

=head2 n_weights

How many base weights it adapts.

=head2 weight_names

    my @names = $lora->weight_names;   # ('blk.0.attn_k.weight', ...)

The GGUF names of those weights, sorted.

=head2 format

C<gguf> or C<safetensors>, or C<trainable> for an adapter made by
L</create>.

=head2 file

The path it was read from (empty for an adapter made by L</create>).

=head2 trainable

True for an adapter made by L</create>; false for a loaded one.

=head1 EXAMPLE

    # t/make-lora-adapters writes random test adapters in both formats
    my $gguf = Lugh::LoRA->new(adapter => "$dir/smollm2-135m-q4_1.gguf", model => $model);
    my $peft = Lugh::LoRA->new(adapter => "$dir/smollm2-135m-q4_1.peft/adapter_model.safetensors",
        model => $model);
    printf "%s: %d weights, alpha %g\n", $_->format, $_->n_weights, $_->alpha for $gguf, $peft;

=head1 SEE ALSO

L<Lugh::Inference>, L<Lugh::Model>; LoRA: L<https://arxiv.org/abs/2106.09685>.

=cut
