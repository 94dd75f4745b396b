package Lugh::Model;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;
require Lugh::ModelStore;

our $VERSION = '0.20';

# The options of new (model, alias file/path; use_mmap, alias mmap;
# prefetch; download) are declared once, in xs-rs/subs/model.rs: _check_new
# reads and checks them, once, before a catalogue name is resolved, so that
# a typo does not cost a download. A value that is an existing path is
# opened as it is; one that names a model of the catalogue
# (Lugh::ModelStore) is replaced by that model's file, pulled first unless
# download => 0.
sub new {
    my ($model, $use_mmap, $prefetch, $download) = _check_new(@_);
    my $path = $model;
    if (!-e $model && Lugh::ModelStore::_is_name($model)) {
        $path = eval { Lugh::ModelStore::_resolve_for_new($model, $download) };
        Lugh::_croak('Lugh::Model->new: ' . Lugh::ModelStore::_message($@)) unless defined $path;
        $path = $model unless length $path;    # not a catalogue name: a path that does not exist
    }
    @_ = ($_[0], $path, $use_mmap, $prefetch);
    goto &_open;
}

# Memory-mapped loading works wherever Lugh builds (POSIX mmap, Windows
# file mappings).

# create's options and their defaults are the table of
# xs-rs/subs/model.rs; these other spellings (and architecture, which can
# only be llama) are sugar read here.
my %CREATE_ALIAS = (file => 'path', arch => 'architecture', vocab_size => 'n_vocab', hidden_size => 'n_embd',
    num_layers => 'n_layer', num_heads => 'n_head', num_kv_heads => 'n_head_kv', intermediate_size => 'n_ff',
    context_length => 'n_ctx');
my %CREATE_VALID = map { $_ => undef } _create_options(), 'architecture', keys %CREATE_ALIAS;

sub create {
    my ($class, @args) = @_;
    my %opt = Lugh::_options('Lugh::Model->create', \%CREATE_VALID, @args);
    for my $other (sort keys %CREATE_ALIAS) {
        $opt{ $CREATE_ALIAS{$other} } = delete $opt{$other} if defined $opt{$other};
        delete $opt{$other};
    }
    Lugh::_croak("Lugh::Model->create requires 'path' parameter (where the .gguf file is written)")
        unless defined $opt{path} && length $opt{path};
    my $architecture = delete $opt{architecture} // 'llama';
    Lugh::_croak("Lugh::Model->create makes llama models, not '$architecture'") unless $architecture eq 'llama';
    return _create($class, %opt);
}

sub get_trainable_weights {
    my ($self, @ctx) = @_;
    Lugh::_croak('Usage: $model->get_trainable_weights([$ctx])') if @ctx > 1;
    tie my %weights, 'Lugh::Model::TrainableWeights', _trainable_weights($self, @ctx);
    return \%weights;
}

sub save {
    my ($self, $path, @opts) = @_;
    Lugh::_croak('Usage: $model->save($path, dequantize => 0)') unless defined $path && length $path;
    Lugh::_croak("Lugh::Model->save: the path must end with .gguf, got '$path'") unless $path =~ /\.gguf\z/i;
    return _save($self, $path, @opts);    # its option: the table of xs-rs/subs/model.rs
}

sub mmap_supported { return 1 }

# Hyperparameters and architecture facts: one accessor per row of the XS table.
Lugh::_install_accessors(__PACKAGE__);

sub arch_type { return $_[0]->architecture }

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }


# The hash get_trainable_weights returns: name => tensor, plus Lugh 0.12's
# `_n_tensors` (their count), which 0.12 scripts read or delete before taking
# the values. Like a DBI handle's attributes, it answers by name but is not
# among the keys, so `values %$weights` is the tensors alone.
package Lugh::Model::TrainableWeights;

my $COUNT = '_n_tensors';

sub TIEHASH  { my ($class, %weights) = @_; return bless { weights => \%weights }, $class }
sub FETCH    { my ($self, $key) = @_; return $key eq $COUNT ? scalar(keys %{ $self->{weights} }) : $self->{weights}{$key} }
sub STORE    { my ($self, $key, $value) = @_; $self->{weights}{$key} = $value unless $key eq $COUNT; return }
sub EXISTS   { my ($self, $key) = @_; return $key eq $COUNT || exists $self->{weights}{$key} }
sub DELETE   { my ($self, $key) = @_; return $key eq $COUNT ? $self->FETCH($key) : delete $self->{weights}{$key} }
sub CLEAR    { %{ $_[0]{weights} } = () }
sub FIRSTKEY { my ($self) = @_; my $reset = keys %{ $self->{weights} }; return each %{ $self->{weights} } }
sub NEXTKEY  { return each %{ $_[0]{weights} } }
sub SCALAR   { return scalar %{ $_[0]{weights} } }

package Lugh::Model;

1;

__END__

=head1 NAME

Lugh::Model - a GGUF model file, loaded

=head1 SYNOPSIS

    use Lugh;
    my $model = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');

    print $model->architecture, "\n";                 # llama
    print $model->get_kv('llama.block_count'), "\n";  # 30
    my @info = $model->tensor_info('token_embd.weight');  # (type, n_dims, @shape)

=head1 DESCRIPTION

A Lugh::Model reads a GGUF file (versions 2 and 3): its metadata, its tensor
descriptors and, when asked for by L<Lugh::Inference>, its weights. By
default the file is memory-mapped and weights are used in place.

Every header field is checked against the file's size before it is used, so a
truncated or corrupt file gives an error that names the file and what is
wrong; it never crashes the process.

The object is freed when its last reference goes. Objects built from it
(tokenizers, inference sessions) keep it alive. It is not copied into new
threads (C<CLONE_SKIP>).

=head1 CONSTRUCTOR

=head2 new

    my $model = Lugh::Model->new(model => $path, use_mmap => 1, prefetch => 0);

C<model> (or its aliases C<file> and C<path>) is the GGUF file, or the name
of a model of the catalogue (L<Lugh::ModelStore>: C<smollm2-135m-q4_1>,
C<qwen2.5-coder-0.5b-q4_k_m>, C<gemma3-270m-q4_k_m> and your own entries), or
a model of the Hugging Face Hub (C<hf.co/ORG/REPO:QUANT>, see
L<Lugh::ModelStore/Models of the Hugging Face Hub>):

    my $smol = Lugh::Model->new(model => 'smollm2-135m-q4_1');
    print $smol->architecture, "\n";    # llama

An existing file always wins over a name; a value that is neither is taken
as a path (and croaks as a missing file). A named model that is not
downloaded yet is pulled first, as C<lugh pull NAME> does (a progress bar on
standard error when it is a terminal; the download resumes an interrupted
one and is checked with sha256); with C<< download => 0 >> (default 1) it
croaks instead, saying to run C<lugh pull NAME>. The options are checked
before anything is downloaded. C<use_mmap>
(alias C<mmap>; default 1) maps the file instead of reading the weights into
memory. C<prefetch> (default 0; needs C<use_mmap>) reads the whole mapping in
at load time, as llama.cpp's prefetch does, instead of page by page as the
first forward pass touches it: loading takes longer, the first tokens come
sooner, and a file on a slow disk is read in one sequential pass. Croaks
on a missing argument, an unknown option, a missing or unreadable file, a file
that is not GGUF, a truncated or corrupt file, and an unsupported GGUF
version; the message names the path.

A model split in several files as llama.cpp's C<llama-gguf-split> writes
them (C<NAME-00001-of-00003.gguf>, C<NAME-00002-of-00003.gguf>, ...) is
opened from its first part: the others are found next to it by name, each
mapped (or read) in place, and the model is the same as in one file. Giving
a later part, or a first part whose name does not follow the convention, or
one part missing, croaks saying so.

=head2 create

    use Lugh;
    my $model = Lugh::Model->create(
        path      => '/tmp/lugh-tiny.gguf',   # required (alias file): where the model is written
        n_vocab   => 256,  n_embd => 64,  n_layer => 2,  n_head => 4,  n_head_kv => 2,
        n_ff      => 128,  n_ctx  => 128, rope_freq_base => 10000, norm_eps => 1e-5,
        seed      => 1,    # optional: the same seed, the same weights
    );
    print $model->n_params, "\n";

Writes a small random llama model as a GGUF file and loads it: f32
weights drawn uniform with standard deviation 0.02 from Lugh's seeded
generator (C<seed>, else the one L<Lugh/srand> seeds), norms of ones, and
a byte-level SentencePiece vocabulary (C<< <unk> <s> </s> <pad> >>, then
the byte tokens C<< <0x00> >>..., then unused tokens). For training
experiments and tests: L<Lugh::LoRA/create> adapts it and
L<Lugh::Train/forward> trains it. Lugh 0.12's option names
(C<vocab_size>, C<hidden_size>, C<num_layers>, C<num_heads>,
C<num_kv_heads>, C<intermediate_size>, C<context_length>, C<arch>) are
accepted too. Only C<architecture =E<gt> 'llama'> is made; sizes must be
1 to 2**20, n_embd a multiple of n_head with an even head size, and n_head
a multiple of n_head_kv.

=head1 METHODS

=head2 save

    my $model = Lugh::Model->create(path => '/tmp/lugh-tiny.gguf', seed => 1);
    $model->save('/tmp/lugh-tiny-copy.gguf');
    $model->save('/tmp/lugh-tiny-f32.gguf', dequantize => 1);   # every tensor as f32

Writes the model as a GGUF file that Lugh and llama.cpp load: its
metadata as it is and each tensor as in the file, except that the
trainable copies of L</get_trainable_weights>, when made, replace
theirs, so a model trained with C<train_full> keeps its training. With
C<dequantize =E<gt> 1> every tensor is decoded to f32
(C<general.file_type> 0): a model whose every weight can train, and
whose matmuls no longer quantize their activations (what a finite
difference check needs). The path must end in C<.gguf>; the file is
written beside it and renamed into place.

=head2 get_trainable_weights

    my $model = Lugh::Model->create(path => '/tmp/lugh-tiny.gguf', seed => 1);
    my $weights = $model->get_trainable_weights;       # { 'blk.0.attn_q.weight' => $tensor, ... }
    my $opt = Lugh::Optimizer::AdamW->new(lr => 1e-3, params => [ values %$weights ]);

The weights L<Lugh::Train/forward> trains with C<train_full =E<gt> 1>, as
a hash of GGUF name to L<Lugh::Autograd::Tensor>. C<< $weights->{_n_tensors} >>
is their count, as in Lugh 0.12; it is not among the hash's keys, so
C<values %$weights> is the tensors alone (and a 0.12 script's C<delete
$weights-E<gt>{_n_tensors}> still returns the count). The tensors are f32 copies of every f32
tensor of the file (all of a model made by L</create>; the norms and
biases of a quantized one; RoPE factors excepted). They are made on the
first call, in the L<Lugh::Context> given or one of their own, and every
later call returns the same tensors. The file is mapped read-only, so
training changes the copies, not the file, and inference keeps using the
file's weights until L</save> writes them and the saved file is loaded.

=head2 filename

    print $model->filename;

The path the model was loaded from.

=head2 architecture

    print $model->architecture;    # "llama", "qwen2", "gemma3", ...

C<general.architecture>. L</arch_type> is another name for it (Lugh 0.12).

=head2 arch_type

    print $model->arch_type;

The same as L</architecture>.

=head2 gguf_version

    print $model->gguf_version;    # 3

=head2 n_tensors

    print $model->n_tensors;

=head2 tensor_names

    my @names = $model->tensor_names;

The names of all tensors, in file order.

=head2 tensor_info

    my ($type, $n_dims, @shape) = $model->tensor_info('token_embd.weight');

The ggml type id, the number of dimensions and the shape (ggml order: the
first dimension is the contiguous one). An empty list for an unknown name.

=head2 tensor_type_name

    print $model->tensor_type_name('token_embd.weight');    # "q8_0" (in SmolLM2's Q4_1 file)

ggml's name of the tensor's type, or undef for an unknown tensor.

=head2 n_kv

    print $model->n_kv;

The number of metadata keys.

=head2 kv_keys

    my @keys = $model->kv_keys;

The metadata keys, in file order.

=head2 get_kv

    my $layers = $model->get_kv('llama.block_count');
    my $tokens = $model->get_kv('tokenizer.ggml.tokens');    # array reference

The value of a metadata key, or undef when the key is absent. Numbers and
strings come back as scalars, booleans as perl's true and false, arrays (of
any element type, nested too) as array references.

=head2 get_kv_type

    print $model->get_kv_type('tokenizer.ggml.tokens');    # "array[string]"

The GGUF type of a key's value (C<uint32>, C<string>, C<array[float32]>, ...),
or undef when the key is absent.

=head2 n_params

    printf "%.1fM parameters\n", $model->n_params / 1e6;

The number of weights (elements of all tensors).

=head2 size_bytes

    printf "%.1f MB of weights\n", $model->size_bytes / 1e6;

=head2 file_type

    print $model->file_type;    # "Q4_1"

The quantisation, as llama.cpp names it (from C<general.file_type>, else
the most common weight type).

=head2 use_mmap

    print $model->use_mmap ? "mapped\n" : "read\n";

=head2 mmap_size

    printf "%.1f MB mapped\n", $model->mmap_size / 1e6;

The number of bytes of the file mapped into memory: the file's size when
loaded with C<use_mmap>, 0 when it was read instead.

=head2 mmap_supported

    my $model = Lugh::Model->new(model => $path, use_mmap => Lugh::Model->mmap_supported);

A class method: true where models can be memory-mapped (every system Lugh
builds on).

=head2 n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx_train, n_vocab, rope_freq_base, norm_eps

    printf "%d layers x %d\n", $model->n_layer, $model->n_embd;

Hyperparameters read from the architecture-prefixed keys
(C<ARCH.block_count>, C<ARCH.embedding_length>, C<ARCH.attention.head_count>,
C<ARCH.attention.head_count_kv> (defaults to C<n_head>),
C<ARCH.feed_forward_length>, C<ARCH.context_length>, C<ARCH.vocab_size> (else
the size of the token list), C<ARCH.rope.freq_base>,
C<ARCH.attention.layer_norm_rms_epsilon>). Undef when the file has no value.

=head2 arch_has_combined_qkv, arch_has_ffn_gate, arch_has_post_norm, arch_is_recurrent

    print "gated FFN\n" if $model->arch_has_ffn_gate;

Facts about the architecture, answered from the tensors and metadata that are
actually in the file: a fused C<attn_qkv> weight, an C<ffn_gate> weight,
post-attention/post-FFN norms, and state-space or RNN layers (C<ssm>/C<wkv>).

=cut
