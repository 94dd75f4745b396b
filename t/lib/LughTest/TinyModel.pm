package LughTest::TinyModel;

# Writes tiny but complete, runnable GGUF models for the tests that must run
# without the downloaded models: a real tokenizer (byte-level BPE or
# SentencePiece, a few hundred tokens) and a few layers of deterministic
# pseudo-random weights in F32, F16 and Q8_0, packed here.
#
#   my $path = tiny_model($dir);                          # llama, BPE, mixed types
#   my $path = tiny_model($dir, arch => 'gemma3', tokenizer => 'spm');
#   my $path = write_tiny_model("$dir/x.gguf", arch => 'qwen2', types => 'f32');
#   write_tiny_model($path, edit => sub { my ($kv, $tensors) = @_; ... });
#
# The same options always give the same bytes (the generator below stays
# within exact integers on any perl).

use strict;
use warnings;
use Exporter 'import';
use LughTest::GGUF qw(gguf_bytes);

our @EXPORT_OK = qw(tiny_model write_tiny_model tiny_model_bytes tiny_model_split tiny_vocab tiny_config
    bpe_byte_char f16_bits q8_0_bytes @TINY_WORDS @TINY_VARIANTS);

# The option sets the model and inference tests run over: each architecture,
# both tokenizers, the three weight types and tied embeddings.
our @TINY_VARIANTS = (
    { arch => 'llama' },
    { arch => 'llama', tokenizer => 'spm', types => 'f16' },
    { arch => 'llama', types => 'q8_0', tied => 1 },
    { arch => 'qwen2', types => 'f32' },
    { arch => 'gemma3' },
);

# The words that the vocabularies hold as whole tokens: BPE as Ġword (and
# the capitalised ones without, as at the start of a text), SentencePiece as
# ▁word.
our @TINY_WORDS = qw(the a cat sat on mat world time upon once Hello Once The of city is capital
    France Paris and dog ran in park);

# ggml type ids.
my %GGML = (f32 => 0, f16 => 1, q8_0 => 8);

# llama_ftype of general.file_type for each weight-type choice.
my %FILE_TYPE = (f32 => 0, f16 => 1, q8_0 => 7, mixed => 7);

# --- the GPT-2 byte <-> character mapping ---
my @BYTE_CHAR;
{
    my @direct = (ord('!') .. ord('~'), 0xA1 .. 0xAC, 0xAE .. 0xFF);
    my %direct = map { $_ => 1 } @direct;
    my $n = 0;
    for my $b (0 .. 255) {
        $BYTE_CHAR[$b] = $direct{$b} ? chr($b) : chr(256 + $n++);
    }
}

# The character that byte-level BPE writes for a byte.
sub bpe_byte_char { return $BYTE_CHAR[ $_[0] ] }

sub _bpe_text {
    my ($bytes) = @_;
    my $s = join '', map { $BYTE_CHAR[$_] } unpack 'C*', $bytes;
    utf8::upgrade($s);
    return $s;
}

# --- vocabularies ---

# tiny_vocab(bpe|spm, %opt): { tokens, types, scores, merges, specials => {name => id},
# words => {word => id}, kv => [...] } (kv: the tokenizer.* keys).
sub tiny_vocab {
    my ($kind, %opt) = @_;
    return $kind eq 'spm' ? _spm_vocab(%opt) : _bpe_vocab(%opt);
}

sub _pad_vocab {
    my ($v, $multiple) = @_;
    my $i = 0;
    while (@{ $v->{tokens} } % $multiple) {
        push @{ $v->{tokens} }, "<unused$i>";
        push @{ $v->{types} }, 3;
        push @{ $v->{scores} }, 0;
        $i++;
    }
}

# SmolLM2-like: <|endoftext|> <|im_start|> <|im_end|>, the 256 byte
# characters (id 3 + byte), then one token per merge (prefix chains of
# the words, so that each listed word is one token).
sub _bpe_vocab {
    my (%opt) = @_;
    my @specials = ('<|endoftext|>', '<|im_start|>', '<|im_end|>');
    my %v = (tokens => [@specials], types => [(3) x @specials], scores => []);
    push @{ $v{tokens} }, map { _bpe_text(chr $_) } 0 .. 255;
    push @{ $v{types} }, (1) x 256;
    my %id = map { $v{tokens}[$_] => $_ } 0 .. $#{ $v{tokens} };
    my (@merges, %words);
    for my $word ((map { " $_" } @TINY_WORDS), grep {/^[A-Z]/} @TINY_WORDS) {
        my @chars = split //, _bpe_text($word);
        my $left = shift @chars;
        for my $c (@chars) {
            my $joined = $left . $c;
            if (!exists $id{$joined}) {
                push @merges, "$left $c";
                push @{ $v{tokens} }, $joined;
                push @{ $v{types} }, 1;
                $id{$joined} = $#{ $v{tokens} };
            }
            $left = $joined;
        }
        $words{$word} = $id{$left};
    }
    _pad_vocab(\%v, $opt{pad_to} // 16);
    $v{scores} = [ (0) x @{ $v{tokens} } ];
    $v{merges} = \@merges;
    $v{words}  = \%words;
    $v{specials} = { endoftext => 0, im_start => 1, im_end => 2 };
    $v{kv} = [
        'tokenizer.ggml.model'      => [string => 'gpt2'],
        'tokenizer.ggml.pre'        => [string => $opt{pre} // 'smollm'],
        'tokenizer.ggml.tokens'     => [array => string => $v{tokens}],
        'tokenizer.ggml.token_type' => [array => i32 => $v{types}],
        'tokenizer.ggml.merges'     => [array => string => \@merges],
        'tokenizer.ggml.bos_token_id' => [u32 => 1],
        'tokenizer.ggml.eos_token_id' => [u32 => 2],
        'tokenizer.ggml.unknown_token_id' => [u32 => 0],
        'tokenizer.ggml.padding_token_id' => [u32 => 2],
        'tokenizer.ggml.add_bos_token' => [bool => 0],
    ];
    return \%v;
}

# Llama-2-like: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF> (id 3 +
# byte), single characters, then every prefix of every ▁word, scored so
# that longer pieces win. Gemma's end-of-turn marker when asked for.
sub _spm_vocab {
    my (%opt) = @_;
    my $mark = "\x{2581}";
    my @specials = ('<unk>', '<s>', '</s>');
    my %v = (tokens => [@specials], types => [2, 3, 3], scores => [0, 0, 0]);
    push @{ $v{tokens} }, map { sprintf '<0x%02X>', $_ } 0 .. 255;
    push @{ $v{types} }, (6) x 256;
    push @{ $v{scores} }, (0) x 256;
    my %id = map { $v{tokens}[$_] => $_ } 0 .. $#{ $v{tokens} };
    my $add = sub {
        my ($piece, $score) = @_;
        return if exists $id{$piece};
        push @{ $v{tokens} }, $piece;
        push @{ $v{types} }, 1;
        push @{ $v{scores} }, $score;
        $id{$piece} = $#{ $v{tokens} };
    };
    $add->($mark, -1);
    $add->($_, -2) for 'a' .. 'z', 'A' .. 'Z', '0' .. '9', split //, q{.,!?'-};
    my %words;
    for my $word (@TINY_WORDS) {
        my $text = $mark . $word;
        $add->(substr($text, 0, $_), -10 + $_) for 2 .. length $text;
        $words{" $word"} = $id{$text};
    }
    if ($opt{gemma}) {
        $add->('<end_of_turn>', 0);
        $v{types}[ $id{'<end_of_turn>'} ] = 3;
        $add->('<start_of_turn>', 0);
        $v{types}[ $id{'<start_of_turn>'} ] = 3;
    }
    _pad_vocab(\%v, $opt{pad_to} // 16);
    $v{words} = \%words;
    $v{specials} = { unk => 0, bos => 1, eos => 2, map { $_ => $id{"<$_>"} } grep { exists $id{"<$_>"} } qw(end_of_turn start_of_turn) };
    $_ = do { my $s = $_; utf8::upgrade($s); $s } for @{ $v{tokens} };
    $v{kv} = [
        'tokenizer.ggml.model'      => [string => 'llama'],
        'tokenizer.ggml.tokens'     => [array => string => $v{tokens}],
        'tokenizer.ggml.scores'     => [array => f32 => $v{scores}],
        'tokenizer.ggml.token_type' => [array => i32 => $v{types}],
        'tokenizer.ggml.bos_token_id' => [u32 => 1],
        'tokenizer.ggml.eos_token_id' => [u32 => 2],
        'tokenizer.ggml.unknown_token_id' => [u32 => 0],
        'tokenizer.ggml.add_bos_token' => [bool => 1],
        'tokenizer.ggml.add_eos_token' => [bool => 0],
    ];
    return \%v;
}

# --- numbers ---

# IEEE half-precision bits of a number (round to nearest even).
sub f16_bits {
    my ($f) = @_;
    my $b = unpack 'V', pack 'f<', $f;
    my $sign = ($b >> 16) & 0x8000;
    my $exp  = ($b >> 23) & 0xFF;
    my $man  = $b & 0x7FFFFF;
    return $sign | 0x7C00 | ($man ? 0x200 : 0) if $exp == 0xFF;
    my $e = $exp - 127 + 15;
    return $sign | 0x7C00 if $e >= 31;
    if ($e <= 0) {
        return $sign if $e < -10;
        $man |= 0x800000;
        my $shift = 14 - $e;
        my $half = $man >> $shift;
        my $rem  = $man & ((1 << $shift) - 1);
        my $mid  = 1 << ($shift - 1);
        $half++ if $rem > $mid || ($rem == $mid && ($half & 1));
        return $sign | $half;
    }
    my $half = ($e << 10) | ($man >> 13);
    my $rem = $man & 0x1FFF;
    $half++ if $rem > 0x1000 || ($rem == 0x1000 && ($half & 1));
    return $sign | $half;
}

# Q8_0 blocks of 32 values: an f16 scale d = max|x| / 127, then 32 int8 round(x / d).
sub q8_0_bytes {
    my ($values) = @_;
    die 'q8_0: the number of values must be a multiple of 32' if @$values % 32;
    my $out = '';
    for (my $i = 0; $i < @$values; $i += 32) {
        my @x = @$values[ $i .. $i + 31 ];
        my $amax = 0;
        for (@x) { $amax = abs $_ if abs $_ > $amax }
        my $d = $amax / 127;
        my $id = $d ? 1 / $d : 0;
        $out .= pack('v', f16_bits($d)) . pack('c32', map { my $q = $_ * $id; $q < 0 ? int($q - 0.5) : int($q + 0.5) } @x);
    }
    return $out;
}

sub _tensor_bytes {
    my ($type, $values) = @_;
    return pack('f<*', @$values) if $type eq 'f32';
    return pack('v*', map { f16_bits($_) } @$values) if $type eq 'f16';
    return q8_0_bytes($values) if $type eq 'q8_0';
    die "unknown tensor type $type";
}

# Deterministic uniform numbers in [-1, 1): xorshift32, seeded from the
# tensor's name and the model's seed (integer arithmetic only).
sub _uniform {
    my ($name, $seed, $n) = @_;
    my $x = 5381 + $seed;
    for my $c (unpack 'C*', $name) {
        $x = ($x * 33 + $c) % 4294967296;
    }
    $x ||= 1;
    my @v;
    for (1 .. $n) {
        $x ^= ($x << 13) & 0xFFFFFFFF;
        $x ^= $x >> 17;
        $x ^= ($x << 5) & 0xFFFFFFFF;
        push @v, $x / 2147483648 - 1;
    }
    return \@v;
}

# --- models ---

my %ARCH_DEFAULTS = (
    llama  => { tokenizer => 'bpe', rope_freq_base => 10000 },
    qwen2  => { tokenizer => 'bpe', rope_freq_base => 1000000, pre => 'qwen2' },
    gemma3 => { tokenizer => 'spm', rope_freq_base => 1000000, sliding_window => 8, swa_pattern => 2 },
);

# The full set of options with defaults filled in.
sub tiny_config {
    my (%opt) = @_;
    my $arch = $opt{arch} // 'llama';
    my $defaults = $ARCH_DEFAULTS{$arch} or die "tiny_model: no tiny $arch";
    my %c = (
        arch      => $arch,
        n_embd    => 64,
        n_layer   => 2,
        n_head    => 4,
        n_head_kv => 2,
        n_ff      => 128,
        n_ctx     => 256,
        norm_eps  => 1e-5,
        seed      => 1,
        types     => 'mixed',
        tied      => 0,
        %$defaults,
        %opt,
    );
    return \%c;
}

# Which type each weight gets: norms and biases f32; the matrices by `types`.
sub _weight_type {
    my ($c, $stem) = @_;
    return $c->{types} unless $c->{types} eq 'mixed';
    my %mixed = (token_embd => 'q8_0', output => 'f32', attn_q => 'f16', attn_k => 'f16', attn_v => 'q8_0',
        attn_output => 'f16', ffn_gate => 'q8_0', ffn_up => 'q8_0', ffn_down => 'f16');
    return $mixed{$stem} // 'f32';
}

# The GGUF bytes of a tiny model.
sub tiny_model_bytes {
    my $c = tiny_config(@_);
    my $arch = $c->{arch};
    my $vocab = tiny_vocab($c->{tokenizer}, gemma => $arch eq 'gemma3', $c->{pre} ? (pre => $c->{pre}) : ());
    my $n_vocab = @{ $vocab->{tokens} };
    my ($E, $F, $H, $HKV) = @$c{qw(n_embd n_ff n_head n_head_kv)};
    my $hd = $E / $H;
    my @tensors;
    my $add = sub {
        my ($name, $type, $dims, $scale, $offset) = @_;
        my $n = 1;
        $n *= $_ for @$dims;
        my $u = _uniform($name, $c->{seed}, $n);
        my @values = map { ($offset // 0) + $scale * $_ } @$u;
        push @tensors, [ $name, $GGML{$type}, $dims, _tensor_bytes($type, \@values) ];
    };
    my $mat = sub {    # a matrix [n_in, n_out] scaled for unit-variance outputs
        my ($name, $stem, $n_in, $n_out) = @_;
        $add->($name, _weight_type($c, $stem), [ $n_in, $n_out ], sqrt(3 / $n_in));
    };
    # norm weights around 1 (Gemma's too: its GGUF files store 1 + w)
    my $norm = sub { my ($name, $n) = @_; $add->($name, 'f32', [$n], 0.1, 1) };

    $add->('token_embd.weight', _weight_type($c, 'token_embd'), [ $E, $n_vocab ], 1);
    for my $il (0 .. $c->{n_layer} - 1) {
        my $p = "blk.$il";
        $norm->("$p.attn_norm.weight", $E);
        $mat->("$p.attn_q.weight", 'attn_q', $E, $H * $hd);
        $mat->("$p.attn_k.weight", 'attn_k', $E, $HKV * $hd);
        $mat->("$p.attn_v.weight", 'attn_v', $E, $HKV * $hd);
        if ($arch eq 'qwen2') {
            $add->("$p.attn_q.bias", 'f32', [ $H * $hd ], 0.1);
            $add->("$p.attn_k.bias", 'f32', [ $HKV * $hd ], 0.1);
            $add->("$p.attn_v.bias", 'f32', [ $HKV * $hd ], 0.1);
        }
        if ($arch eq 'gemma3') {
            $norm->("$p.attn_q_norm.weight", $hd);
            $norm->("$p.attn_k_norm.weight", $hd);
        }
        $mat->("$p.attn_output.weight", 'attn_output', $H * $hd, $E);
        $norm->("$p.post_attention_norm.weight", $E) if $arch eq 'gemma3';
        $norm->("$p.ffn_norm.weight", $E);
        $mat->("$p.ffn_gate.weight", 'ffn_gate', $E, $F);
        $mat->("$p.ffn_up.weight", 'ffn_up', $E, $F);
        $mat->("$p.ffn_down.weight", 'ffn_down', $F, $E);
        $norm->("$p.post_ffw_norm.weight", $E) if $arch eq 'gemma3';
    }
    $norm->('output_norm.weight', $E);
    $mat->('output.weight', 'output', $E, $n_vocab) unless $c->{tied};

    my @kv = (
        'general.architecture' => [string => $arch],
        'general.name'         => [string => "Lugh tiny $arch test model"],
        'general.file_type'    => [u32 => $FILE_TYPE{ $c->{types} }],
        'general.quantization_version' => [u32 => 2],
        "$arch.context_length"            => [u32 => $c->{n_ctx}],
        "$arch.embedding_length"          => [u32 => $E],
        "$arch.block_count"               => [u32 => $c->{n_layer}],
        "$arch.feed_forward_length"       => [u32 => $F],
        "$arch.attention.head_count"      => [u32 => $H],
        "$arch.attention.head_count_kv"   => [u32 => $HKV],
        "$arch.rope.freq_base"            => [f32 => $c->{rope_freq_base}],
        "$arch.attention.layer_norm_rms_epsilon" => [f32 => $c->{norm_eps}],
        "$arch.rope.dimension_count"      => [u32 => $hd],
        "$arch.vocab_size"                => [u32 => $n_vocab],
    );
    if ($arch eq 'gemma3') {
        push @kv,
            'gemma3.attention.key_length'     => [u32 => $hd],
            'gemma3.attention.value_length'   => [u32 => $hd],
            'gemma3.attention.sliding_window' => [u32 => $c->{sliding_window}],
            'gemma3.attention.sliding_window_pattern' => [u32 => $c->{swa_pattern}],
            'gemma3.rope.freq_base_swa'       => [f32 => 10000];
    }
    push @kv, @{ $vocab->{kv} };
    # edit => sub { my ($kv, $tensors) = @_; ... }: changes the lists in place
    # before they are written (hand-made hostile variants of a good model).
    $c->{edit}->(\@kv, \@tensors) if $c->{edit};
    return gguf_bytes(kv => \@kv, tensors => \@tensors, alignment => 32);
}

sub write_tiny_model {
    my ($path, @opt) = @_;
    open my $fh, '>:raw', $path or die "cannot write $path: $!";
    print {$fh} tiny_model_bytes(@opt);
    close $fh or die "cannot write $path: $!";
    return $path;
}

# The tiny model split in $n files as llama.cpp's gguf-split writes them:
# part i has split.no = i - 1, split.count = $n and split.tensors.count, the
# first keeps the metadata, the tensors go in order, as evenly as they can.
# Returns (name => bytes) pairs, the names PREFIX-0000i-of-0000N.gguf.
sub tiny_model_split {
    my ($prefix, $n, %opt) = @_;
    my ($kv, $tensors);
    tiny_model_bytes(%opt, edit => sub { ($kv, $tensors) = @_ });
    my @all = @$tensors;
    my $per = int((@all + $n - 1) / $n);
    my @parts;
    for my $i (1 .. $n) {
        my @mine = splice @all, 0, $per;
        my @split = ('split.no' => [ u16 => $i - 1 ], 'split.count' => [ u16 => $n ],
            'split.tensors.count' => [ i32 => scalar @$tensors ]);
        push @parts, sprintf('%s-%05d-of-%05d.gguf', $prefix, $i, $n),
            LughTest::GGUF::gguf_bytes(kv => [ $i == 1 ? @$kv : (), @split ], tensors => \@mine, alignment => 32);
    }
    return @parts;
}

# tiny_model($dir, %opt): the path of a tiny model in $dir, written once per
# set of options.
my %written;
sub tiny_model {
    my ($dir, %opt) = @_;
    my $c = tiny_config(%opt);
    require Digest::MD5;
    my $key = Digest::MD5::md5_hex(join ',', map {"$_=$c->{$_}"} sort keys %$c);
    my $path = "$dir/tiny-$c->{arch}-$c->{tokenizer}-$c->{types}-" . substr($key, 0, 8) . '.gguf';
    return $written{$path} //= write_tiny_model($path, %opt);
}

1;
