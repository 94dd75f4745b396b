package Lugh::Tokenizer;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;

our $VERSION = '0.20';

# The options of new, encode, decode, token_to_piece and decoder, and their
# defaults, are the tables of xs-rs/subs/tokenizer.rs.
my %IS_DECODE_OPTION = map { $_ => 1 } _decode_options();

sub new {
    return _new(@_);
}

sub encode {
    my ($self) = @_;
    Lugh::_croak('Usage: $tokenizer->encode($text, %options)') unless ref $self;
    return _encode(@_);
}

sub decode {
    my ($self, @args) = @_;
    Lugh::_croak('Usage: $tokenizer->decode(\@ids, %options) or $tokenizer->decode(@ids)') unless ref $self;
    if (@args && ref $args[0] eq 'ARRAY') {
        return _decode($self, @args);
    }
    if (grep { defined && !ref && $IS_DECODE_OPTION{$_} } @args) {
        Lugh::_croak('Lugh::Tokenizer->decode: options need the array-reference form: decode(\@ids, special => 1)');
    }
    return _decode($self, \@args);
}

sub token_to_piece {
    my ($self, $id, @args) = @_;
    Lugh::_croak('Usage: $tokenizer->token_to_piece($id, %options)') unless ref $self && @_ >= 2;
    return _token_to_piece($self, $id, @args);
}

sub type {
    my ($self, $id) = @_;
    Lugh::_croak('Usage: $tokenizer->type($id)') unless ref $self && @_ == 2;
    return _type($self, $id);
}

sub decoder {
    my ($self, @args) = @_;
    Lugh::_croak('Usage: $tokenizer->decoder(%options)') unless ref $self;
    return _decoder($self, @args);
}

# Vocabulary facts: one accessor per row of the XS table.
Lugh::_install_accessors(__PACKAGE__);

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

package Lugh::Tokenizer::Decoder;

our $VERSION = '0.20';

sub CLONE_SKIP { 1 }

1;

__END__

=encoding utf8

=head1 NAME

Lugh::Tokenizer - text to token ids and back, exactly as llama.cpp does it

=head1 SYNOPSIS

    use Lugh;

    my $model = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $tok   = Lugh::Tokenizer->new(model => $model);

    my @ids  = $tok->encode("Hello world");                 # (19556, 905)
    my $text = $tok->decode(\@ids);                         # "Hello world"

    my @chat = $tok->encode("<|im_start|>user\nhi<|im_end|>", parse_special => 1);
    print "end of generation\n" if $tok->is_eog($chat[-1]);

    # streaming: text comes out only in whole characters
    my $dec = $tok->decoder;
    print $dec->add($_) for $tok->encode("emoji 🦙 done");
    print $dec->flush, "\n";

=head1 DESCRIPTION

A tokenizer for a L<Lugh::Model>, reading the vocabulary from the model's
GGUF metadata. It gives the same token ids as llama.cpp (build b11434) for
the same text, which matters because a single different id changes every
logit after it. Two algorithms are implemented:

=over

=item SentencePiece (C<tokenizer.ggml.model> = C<llama>: Llama 2, Phi-3, Gemma)

Spaces are written as C<▁>, adjacent pieces are merged by score, and
characters without a token are written as byte tokens (C<< <0x0A> >>). When
the vocabulary says so (C<tokenizer.ggml.add_space_prefix>, true by default),
a space is put in front of the text and after each special token.

=item Byte-level BPE (C<tokenizer.ggml.model> = C<gpt2>: GPT-2, Llama 3, Qwen2, SmolLM2)

The text is cut into words by the pre-tokenizer named in
C<tokenizer.ggml.pre> (C<default>, C<gpt-2>, C<llama-bpe>/C<llama3>, C<qwen2>,
C<deepseek-r1-qwen>, C<smollm>, C<starcoder> and the others that share their
patterns), each byte is mapped to a printable character, and merges are
applied by rank. An unknown pre-tokenizer is an error naming it.

=back

Special tokens (control, user-defined and unknown tokens) are split out
before anything else, longest first: user-defined tokens always, control
tokens only with C<< parse_special => 1 >>.

The vocabulary is built once per model (the first tokenizer takes about
0.1 s for a 150,000-token vocabulary) and shared by every tokenizer and
inference session on it. A tokenizer keeps its vocabulary alive after the
model object is gone.

=head2 Text in, text out

Text is Unicode characters, upgraded (C<utf8::upgrade>) or not, with the same
result either way, by this rule: a string's characters are used, except that
a string whose characters are all below 0x100 and spell valid UTF-8 is taken
as those UTF-8 bytes. So C<"café"> under C<use utf8>, the same text read from
a file without a decoding layer, and that string upgraded, all give the same
ids; a Latin-1 string that is not valid UTF-8 (C<"caf\xe9">) is read as
Latin-1 characters. Characters beyond U+10FFFF are refused. With
C<< bytes => 1 >>, C<encode> takes a byte string as UTF-8 bytes as they are;
invalid sequences are then read as llama.cpp reads them (each bad byte is
U+FFFD for BPE; SentencePiece writes them as byte tokens).

C<decode> returns characters; bytes that do not form valid UTF-8 (for
instance a character cut at the end of a token sequence) become U+FFFD, or,
with C<< bytes => 1 >>, the raw bytes are returned as they are, an incomplete
character at the end included.

=head1 METHODS

=head2 new

    my $tok = Lugh::Tokenizer->new(model => $model);

The tokenizer of a L<Lugh::Model>. Croaks when C<model> is missing or not a
Lugh::Model, when the model has no vocabulary, and when its tokenizer
(C<tokenizer.ggml.model>) or pre-tokenizer (C<tokenizer.ggml.pre>) is one
Lugh does not implement (the message names it).

=head2 encode

    my @ids = $tok->encode($text);
    my @ids = $tok->encode($text, add_bos => 0, parse_special => 1);

The token ids of C<$text>, as a list. Options:

=over

=item add_bos

Put the BOS token first. Defaults to the model's
C<tokenizer.ggml.add_bos_token> (false for SmolLM2 and Qwen2, true for
Gemma and Llama); see L</add_bos>. Croaks if true and the vocabulary has no
BOS token.

=item add_special

Default 1: add the tokens the model asks for, as llama.cpp's C<add_special>:
the BOS (unless C<add_bos> says otherwise) and, for models with
C<tokenizer.ggml.add_eos_token>, the EOS token at the end. C<0> adds neither
(an explicit C<< add_bos => 1 >> still adds the BOS).

=item parse_special

Default 0. With 1, control tokens written in the text, like
C<< <|im_start|> >>, become their ids; otherwise they are tokenized as plain
text. User-defined tokens are always recognised.

=item bytes

Default 0. With 1, C<$text> must be a byte string and is taken as UTF-8
bytes exactly as they are (see L</Text in, text out>).

=back

    my @ids = $tok->encode("<|im_start|>user\nhi<|im_end|>", parse_special => 1);
    # SmolLM2: (1, 4093, 198, 6004, 2)

=head2 decode

    my $text = $tok->decode(\@ids);
    my $text = $tok->decode(\@ids, special => 1);
    my $text = $tok->decode(@ids);

The text of a token sequence, as a character string. Options (array-reference
form only):

=over

=item special

Default 0: control tokens (BOS, EOS, C<< <|im_end|> >>, ...) give no text.
With 1 they are written out.

=item bytes

Default 0. With 1, the result is the raw UTF-8 byte string, an incomplete
character at the end kept as it is.

=back

For the SentencePiece vocabularies that put a space in front of text, one
leading space is removed from the text at the start and after each special
token: the spaces that C<encode> put there, so C<< $tok->decode([$tok->encode($s)]) eq $s >>
(except that SentencePiece writes spaces as C<▁>, U+2581, so a C<▁> in the text
comes back as a space).
Byte-level BPE decodes exactly to the text that was encoded. Unlike
llama.cpp's C<llama_detokenize>, no clean-up of spaces before punctuation is
done. An id outside the vocabulary croaks with the id, its position and the
valid range.

    my $s = $tok->decode([19556, 905]);    # "Hello world"

=head2 token_to_piece

    my $bytes = $tok->token_to_piece($id);
    my $bytes = $tok->token_to_piece($id, special => 1);

The bytes one token stands for (a byte string: a token can hold part of a
character). Byte tokens give their byte, C<▁> gives a space, byte-level BPE is
unmapped. Control tokens give an empty string unless C<< special => 1 >>.

    my $piece = $tok->token_to_piece(905);    # " world"

=head2 decoder

    my $dec = $tok->decoder;                  # or decoder(special => 1)
    for my $id (@generated) {
        print $dec->add($id);                 # (only whole characters)
    }
    print $dec->flush;

A L<Lugh::Tokenizer::Decoder|/Lugh::Tokenizer::Decoder> for streaming: it turns
ids into text one at a time without ever cutting a multi-byte character, and
applies the same leading-space rule as L</decode>.

=head2 n_vocab

    my $n = $tok->n_vocab;    # 49152 for SmolLM2

The number of tokens.

=head2 bos_id, eos_id, eot_id, eom_id, pad_id, unk_id, sep_id, mask_id

    my $eos = $tok->eos_id;    # 2 for SmolLM2
    my $eot = $tok->eot_id;    # undef when the model has none

Special token ids, or undef. They come from the model's metadata; where it
names no end-of-turn token, the first of llama.cpp's known end-of-turn texts
present in the vocabulary (C<< <|eot_id|> >>, C<< <|im_end|> >>,
C<< <|end|> >>, C<< <end_of_turn> >>, C<< <|endoftext|> >>, ...) is used.

=head2 is_eog

    last if $tok->is_eog($id);

True for the tokens that end generation: EOS, EOT, EOM and the other tokens
llama.cpp treats as end of generation (by their text, e.g. C<< <|im_end|> >>,
C<< <|endoftext|> >>, C<< <end_of_turn> >>). False for any other number.

=head2 eog_ids

    my @stop = $tok->eog_ids;

All end-of-generation token ids, ascending.

=head2 token_to_text

    my $text = $tok->token_to_text(905);    # "Ġworld"

The token as stored in the vocabulary (with C<▁> or C<Ġ> for spaces). Croaks
for an id out of range.

=head2 text_to_token

    my $id = $tok->text_to_token('<|im_end|>');    # 2 for SmolLM2

The id of the token stored with exactly this text, or undef.

=head2 type

    my $t = $tok->type(2);    # "control"

The token's type: C<normal>, C<control>, C<user_defined>, C<unknown>,
C<unused>, C<byte> or C<undefined>. This is the type as llama.cpp uses it,
e.g. an end-of-turn token that the file marks as normal is C<control>.

=head2 add_bos, add_eos, add_space_prefix

    my $bos_by_default = $tok->add_bos;    # 1 for Gemma, '' for SmolLM2

The model's settings: whether C<encode> adds a BOS (EOS) token by default,
and whether SentencePiece puts a space in front of text.

=head2 algorithm, model_name, pre_tokenizer

    print $tok->algorithm, "\n";        # "bpe" or "spm"
    print $tok->pre_tokenizer, "\n";    # "smollm" (undef for spm)

The algorithm, the C<tokenizer.ggml.model> value and the C<tokenizer.ggml.pre>
value (C<default> when absent).

=head1 Lugh::Tokenizer::Decoder

An incremental decoder made by L</decoder>.

=head2 add

    my $text = $dec->add($id);
    my $text = $dec->add(@ids);

Adds tokens and returns the text that is now complete (characters); bytes of a
character that is not complete yet are held back until the tokens that
complete it arrive. Croaks for an id out of range.

=head2 flush

    my $rest = $dec->flush;

Returns what is held back (an incomplete character becomes U+FFFD) and starts
over, as a new decoder.

=head2 pending

    my $bytes = $dec->pending;

The bytes held back (a byte string, empty when none).

=head2 reset

    $dec->reset;

Drops what is held back and starts over.

=head1 SEE ALSO

L<Lugh>, L<Lugh::Model>.

=cut
