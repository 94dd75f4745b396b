package Lugh::LoRA;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

Lugh::_install_accessors(__PACKAGE__);

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
Llama's query and key rows.

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

=head1 METHODS

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

C<gguf> or C<safetensors>.

=head2 file

The path it was read from.

=head2 trainable

False: a loaded adapter is for inference.

=head1 EXAMPLE

    # t/make-lora-adapters writes random test adapters in both formats
    my $gguf = Lugh::LoRA->new(adapter => "$dir/smollm2-135m-q4_1.gguf", model => $model);
    my $peft = Lugh::LoRA->new(adapter => "$dir/smollm2-135m-q4_1.peft/adapter_model.safetensors",
        model => $model);
    printf "%s: %d weights, alpha %g\n", $_->format, $_->n_weights, $_->alpha for $gguf, $peft;

=head1 SEE ALSO

L<Lugh::Inference>, L<Lugh::Model>; LoRA: L<https://arxiv.org/abs/2106.09685>.

=cut
