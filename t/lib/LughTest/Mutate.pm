package LughTest::Mutate;

# A structure-aware GGUF mutator for the fuzz harness (xt/fuzz_gguf.t):
# reads a GGUF file's metadata and tensor table, applies a few random
# changes that keep the file self-consistent (a tensor's type or shape
# changes and its data is resized and re-laid out so that every offset and
# the alignment stay valid; a key changes type or value; arrays change
# length; names are duplicated or dropped), and writes the variant. The
# tensor data of the original is copied from its file, never held whole in
# memory, so the downloaded models can be mutated too.
#
#   my $g = read_gguf($path);                 # { kv => [...], tensors => [...], ... }
#   my ($v, @what) = mutate($g, $n_changes);  # uses perl's rand (seed it with srand)
#   write_variant($v, $out_path);
#
# kv is in LughTest::GGUF's form (key => [type => value] or
# [array => elem_type => [values]]); a tensor is
# { name, type, dims, src => [offset, length] (in the original's data section) | bytes }.

use strict;
use warnings;
use Exporter 'import';
use LughTest::GGUF ();

our @EXPORT_OK = qw(read_gguf mutate write_variant ggml_type_name);

my %GGUF_TYPE = %LughTest::GGUF::TYPE;
my %GGUF_NAME = reverse %GGUF_TYPE;
my %SIZE = (u8 => 1, i8 => 1, u16 => 2, i16 => 2, u32 => 4, i32 => 4, f32 => 4, bool => 1, u64 => 8, i64 => 8, f64 => 8);
my %PACK = (u8 => 'C', i8 => 'c', u16 => 'v', i16 => 's<', u32 => 'V', i32 => 'l<', f32 => 'f<',
            bool => 'C', u64 => 'Q<', i64 => 'q<', f64 => 'd<');

# ggml type id => [name, block size, bytes per block] (the types this ggml has).
our %GGML = (
    0 => [ f32 => 1, 4 ], 1 => [ f16 => 1, 2 ], 2 => [ q4_0 => 32, 18 ], 3 => [ q4_1 => 32, 20 ],
    6 => [ q5_0 => 32, 22 ], 7 => [ q5_1 => 32, 24 ], 8 => [ q8_0 => 32, 34 ], 9 => [ q8_1 => 32, 36 ],
    10 => [ q2_k => 256, 84 ], 11 => [ q3_k => 256, 110 ], 12 => [ q4_k => 256, 144 ], 13 => [ q5_k => 256, 176 ],
    14 => [ q6_k => 256, 210 ], 15 => [ q8_k => 256, 292 ], 16 => [ iq2_xxs => 256, 66 ], 17 => [ iq2_xs => 256, 74 ],
    18 => [ iq3_xxs => 256, 98 ], 19 => [ iq1_s => 256, 50 ], 20 => [ iq4_nl => 32, 18 ], 21 => [ iq3_s => 256, 110 ],
    22 => [ iq2_s => 256, 82 ], 23 => [ iq4_xs => 256, 136 ], 24 => [ i8 => 1, 1 ], 25 => [ i16 => 1, 2 ],
    26 => [ i32 => 1, 4 ], 27 => [ i64 => 1, 8 ], 28 => [ f64 => 1, 8 ], 29 => [ iq1_m => 256, 56 ],
    30 => [ bf16 => 1, 2 ], 34 => [ tq1_0 => 256, 54 ], 35 => [ tq2_0 => 256, 66 ],
);

sub ggml_type_name { my ($id) = @_; return $GGML{$id} ? $GGML{$id}[0] : "type$id" }

# --- reading ---

sub read_gguf {
    my ($path) = @_;
    open my $fh, '<:raw', $path or die "cannot read $path: $!";
    my $buf = '';
    my $pos = 0;
    my $need = sub {    # makes $buf hold bytes up to $pos + $n
        my ($n) = @_;
        while (length($buf) < $pos + $n) {
            my $got = read $fh, $buf, 1 << 22, length $buf;
            die "$path: truncated header" unless $got;
        }
    };
    my $take = sub { my ($n) = @_; $need->($n); my $s = substr $buf, $pos, $n; $pos += $n; $s };
    my $u32 = sub { unpack 'V', $take->(4) };
    my $u64 = sub { unpack 'Q<', $take->(8) };
    my $str = sub { my $n = $u64->(); die "$path: string of $n bytes" if $n > 1 << 30; $take->($n) };
    die "$path: not GGUF" unless $take->(4) eq 'GGUF';
    my $version = $u32->();
    my ($n_tensors, $n_kv) = ($u64->(), $u64->());
    my $scalar = sub {
        my ($t) = @_;
        return $str->() if $t eq 'string';
        return unpack $PACK{$t}, $take->($SIZE{$t});
    };
    my @kv;
    for (1 .. $n_kv) {
        my $key = $str->();
        my $t = $GGUF_NAME{ $u32->() } // die "$path: bad value type for $key";
        if ($t eq 'array') {
            my $et = $GGUF_NAME{ $u32->() } // die "$path: bad element type for $key";
            die "$path: nested arrays are not read" if $et eq 'array';
            my $n = $u64->();
            my @v;
            if ($et eq 'string') { push @v, $str->() for 1 .. $n }
            else {
                my $raw = $take->($n * $SIZE{$et});
                @v = unpack "$PACK{$et}*", $raw;
            }
            push @kv, $key => [ array => $et => \@v ];
        }
        else { push @kv, $key => [ $t => $scalar->($t) ] }
    }
    my @tensors;
    for (1 .. $n_tensors) {
        my $name = $str->();
        my $nd = $u32->();
        my @dims = map { $u64->() } 1 .. $nd;
        my $type = $u32->();
        my $off = $u64->();
        push @tensors, { name => $name, type => $type, dims => \@dims, offset => $off };
    }
    my %kv = @kv;
    my $align = $kv{'general.alignment'} ? $kv{'general.alignment'}[1] : 32;
    my $data_start = $pos + (($align - $pos % $align) % $align);
    my $size = -s $fh;
    # each tensor's bytes: up to the next offset (or the end), its own size when known
    my @by_off = sort { $a->{offset} <=> $b->{offset} } @tensors;
    for my $i (0 .. $#by_off) {
        my $t = $by_off[$i];
        my $end = $i < $#by_off ? $by_off[ $i + 1 ]{offset} : $size - $data_start;
        my $len = tensor_bytes($t->{type}, $t->{dims}) // ($end - $t->{offset});
        $t->{src} = [ $t->{offset}, $len ];
    }
    close $fh;
    return { path => $path, version => $version, kv => \@kv, tensors => \@tensors, data_start => $data_start,
        alignment => $align, file_size => $size };
}

# Bytes of a tensor of this type and shape (undef: unknown type, or rows that are not whole blocks).
sub tensor_bytes {
    my ($type, $dims) = @_;
    my $g = $GGML{$type} or return;
    my $n = 1;
    $n *= $_ for @$dims;
    return 0 unless $n;
    return if @$dims && $dims->[0] % $g->[1];
    return $n / $g->[1] * $g->[2];
}

# --- writing ---

sub _encode_value {
    no warnings;    # values of the wrong type are the point: let pack wrap them
    my ($type, @rest) = @_;
    if ($type eq 'string') { my $s = $rest[0] // ''; utf8::encode($s) if utf8::is_utf8($s); return pack('Q<', length $s) . $s }
    return pack($PACK{$type}, $rest[0] // 0) if $PACK{$type};
    my ($et, $items, $count) = @rest;    # $count: a count that lies (tests only; kept consistent here)
    my $out = pack('VQ<', $GGUF_TYPE{$et}, $count // scalar @$items);
    if ($PACK{$et}) { $out .= pack("$PACK{$et}*", map { $_ // 0 } @$items) }
    else { $out .= _encode_value($et, $_) for @$items }
    return $out;
}

# Writes the variant: header, tensor table (offsets recomputed at the
# variant's alignment), then each tensor's bytes copied from the original.
sub write_variant {
    my ($v, $path) = @_;
    my $align = $v->{layout_alignment} // 32;
    my @kv = @{ $v->{kv} };
    my $out = 'GGUF' . pack('VQ<Q<', $v->{version}, $v->{n_tensors} // scalar @{ $v->{tensors} }, $v->{n_kv} // @kv / 2);
    for (my $i = 0; $i < @kv; $i += 2) {
        $out .= _encode_value('string', $kv[$i]) . pack('V', $GGUF_TYPE{ $kv[ $i + 1 ][0] }) . _encode_value(@{ $kv[ $i + 1 ] });
    }
    my $off = 0;
    my @parts;
    for my $t (@{ $v->{tensors} }) {
        my $len = defined $t->{bytes} ? length $t->{bytes} : $t->{src}[1];
        $out .= _encode_value('string', $t->{name}) . pack('V', scalar @{ $t->{dims} }) . pack('Q<*', @{ $t->{dims} })
            . pack('VQ<', $t->{type}, $off);
        push @parts, [ $t, $len ];
        $off += $len;
        $off += ($align - $off % $align) % $align;
    }
    $out .= "\0" x (($align - length($out) % $align) % $align) if @{ $v->{tensors} };
    open my $fh, '>:raw', $path or die "cannot write $path: $!";
    print {$fh} $out;
    open my $src, '<:raw', $v->{path} or die "cannot read $v->{path}: $!";
    my $written = 0;
    for my $p (@parts) {
        my ($t, $len) = @$p;
        if (defined $t->{bytes}) { print {$fh} $t->{bytes} }
        else { _copy($src, $fh, $v->{data_start} + $t->{src}[0], $len) }
        $written += $len;
        my $pad = ($align - $written % $align) % $align;
        print {$fh} "\0" x $pad;
        $written += $pad;
    }
    close $src;
    close $fh or die "cannot write $path: $!";
    return $path;
}

sub _copy {
    my ($src, $dst, $from, $len) = @_;
    seek $src, $from, 0 or die "seek: $!";
    while ($len > 0) {
        my $n = read $src, my $chunk, $len < 1 << 23 ? $len : 1 << 23;
        last unless $n;
        print {$dst} $chunk;
        $len -= $n;
    }
    # past the original's end (a tensor grown by a mutation): zeros
    print {$dst} "\0" x $len if $len > 0;
}

# --- mutating ---

sub _pick { return $_[ int rand @_ ] }

my @HUGE_INTS = (0, 1, -1, 2, 3, 7, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 2, 2**53, 2**63, -2**31, -2**63);
my @ODD_FLOATS = ('nan', 'inf', '-inf', 0, -0.0, 1e-45, -1, 1, 1e38, 3.4e38, 1e-30, 65536, 0.5);

sub _float { my ($f) = @_; return $f eq 'nan' ? 9**9**9 / 9**9**9 : $f eq 'inf' ? 9**9**9 : $f eq '-inf' ? -9**9**9 : $f }

sub _int_value {
    my ($old) = @_;
    my $r = rand;
    return _pick(@HUGE_INTS) if $r < 0.5;
    $old = 0 unless defined $old && $old =~ /^-?\d+(?:\.\d+)?(?:e[-+]?\d+)?\z/i;
    return _pick($old + 1, $old - 1, $old * 2, int($old / 2), $old + 16, $old * 1000, -$old);
}

# The value as the file will hold it (pack wraps integers to the type's width).
sub _stored { no warnings; my ($type, $x) = @_; return $PACK{$type} ? unpack($PACK{$type}, pack($PACK{$type}, $x)) : $x }

sub _short { my ($s) = @_; $s = "$s"; return length $s > 40 ? substr($s, 0, 37) . '...' : $s }

# One change to a key's value; returns the new [type ...] and a description.
sub _mutate_value {
    my ($key, $val) = @_;
    my $type = $val->[0];
    my $r = rand;
    if ($type eq 'array') {
        my ($et, $items) = @$val[ 1, 2 ];
        my @items = @$items;
        my $n = @items;
        if ($r < 0.25) {    # wrong length
            my $new = _pick(0, 1, int($n / 2), $n - 1, $n + 1, $n * 2);
            $new = 0 if $new < 0;
            if ($new <= $n) { $#items = $new - 1 }
            else { push @items, @items ? $items[ int rand $n ] : ($et eq 'string' ? 'x' : 0) while @items < $new && @items < 4 * $n + 4 }
            return ([ array => $et => \@items ], "array length $n -> " . scalar @items);
        }
        if ($r < 0.4) {    # element type
            my $new = _pick(grep { $_ ne $et && $_ ne 'array' } keys %GGUF_TYPE);
            my @conv = $new eq 'string' ? map {"$_"} @items : map { /^-?[\d.e+]+\z/i ? $_ : length } @items;
            return ([ array => $new => \@conv ], "element type $et -> $new");
        }
        if ($r < 0.5) {    # to a scalar
            my $new = _pick(qw(u32 i32 string f32 bool));
            return ([ $new => $new eq 'string' ? 'x' : _int_value(scalar @items) ], "array -> $new");
        }
        return ([ array => $et => \@items ], 'empty array unchanged') unless @items;
        # elements
        my $k = 1 + int(rand(rand() < 0.2 ? $n : 3));
        my @idx = map { int rand $n } 1 .. $k;
        my $what;
        if ($et eq 'string') {
            my $m = _pick(qw(empty long huge dup prefix nul bytes));
            if ($m eq 'prefix') {    # many tokens sharing a long prefix (quadratic tries, hashes)
                my $p = 'x' x (1 + int rand 64);
                my $from = int rand $n;
                $items[$_] = $p . $_ for $from .. ($from + 1 + int rand($n - $from)) - 1;
                $what = "a shared prefix of " . length($p) . " bytes from element $from";
            }
            else {
                # long strings on a few elements only (thousands of them make a file of gigabytes: slow, not wrong)
                splice @idx, 3 if ($m eq 'long' || $m eq 'huge') && @idx > 3;
                for my $i (@idx) {
                    $items[$i] = $m eq 'empty' ? '' : $m eq 'long' ? 'y' x (1000 + int rand 50000) : $m eq 'huge' ? 'z' x 2_000_000
                        : $m eq 'dup' ? $items[ int rand $n ] : $m eq 'nul' ? "a\0b" : join '', map { chr int rand 256 } 1 .. 1 + int rand 8;
                }
                $what = "$m string at element(s) @idx[0 .. ($#idx < 4 ? $#idx : 4)]";
            }
        }
        elsif ($et eq 'f32' || $et eq 'f64') {
            my $f = _pick(@ODD_FLOATS);
            $items[$_] = _float($f) for @idx;
            $what = "$f at element(s) @idx[0 .. ($#idx < 4 ? $#idx : 4)]";
        }
        else {
            my $x = _stored($et, _int_value($items[ $idx[0] ]));
            $items[$_] = $x for @idx;
            $what = "$x at element(s) @idx[0 .. ($#idx < 4 ? $#idx : 4)]";
        }
        return ([ array => $et => \@items ], $what);
    }
    if ($r < 0.2) {    # value type
        my $new = _pick(grep { $_ ne $type } qw(u8 i8 u16 i16 u32 i32 f32 bool string u64 i64 f64 array));
        return ([ array => $type eq 'array' ? 'u32' : $type => [ $val->[1], $val->[1] ] ], "type $type -> array") if $new eq 'array';
        my $x = $val->[1];
        $x = length($x) if $new ne 'string' && $type eq 'string';
        return ([ $new => $x ], "type $type -> $new (" . _short($x) . ')');
    }
    if ($type eq 'string') {
        my $s = _pick('', 'x' x 100_000, 'llama', 'qwen2', 'gemma3', 'bert', 'gpt2', "\xff\xfe", "a\0b", $val->[1] . 'x', 'none', 'spm');
        return ([ string => $s ], "string -> '" . _short($s) . "'");
    }
    if ($type eq 'f32' || $type eq 'f64') {
        my $f = _pick(@ODD_FLOATS);
        return ([ $type => _float($f) ], "$f");
    }
    if ($type eq 'bool') { my $b = _pick(0, 1, 2, 255); return ([ bool => $b ], "bool $b") }
    my $x = _stored($type, _int_value($val->[1]));
    return ([ $type => $x ], "$val->[1] -> $x");
}

# A shallow copy of the file's description, to change.
sub _clone {
    my ($g) = @_;
    return { %$g, kv => [ @{ $g->{kv} } ], tensors => [ map { +{ %$_, dims => [ @{ $_->{dims} } ] } } @{ $g->{tensors} } ] };
}

# Sets a tensor's new type or shape and resizes its data (the original's
# bytes, cut or padded with zeros; or zeros). Returns undef when the new size
# is too large to write.
sub _resize {
    my ($t, $g) = @_;
    my $len = tensor_bytes($t->{type}, $t->{dims});
    $len //= $t->{src} ? $t->{src}[1] : length $t->{bytes};    # whole blocks impossible: keep the old bytes
    return if $len > 1 << 27;
    if (rand() < 0.3) { $t->{bytes} = "\0" x $len; delete $t->{src} }
    elsif ($t->{src}) { $t->{src} = [ $t->{src}[0], $len ] }    # past the end of the original: zeros (see _copy)
    else { $t->{bytes} = substr($t->{bytes} . "\0" x $len, 0, $len) }
    return 1;
}

# The tensors a real architecture looks at (preferred as targets).
sub _tensor_op {
    my ($v) = @_;
    my $tensors = $v->{tensors};
    return 'no tensors' unless @$tensors;
    my $i = int rand @$tensors;
    # prefer the first layer, the embeddings and norms: what a forward pass touches
    if (rand() < 0.5) {
        my @hot = grep { $tensors->[$_]{name} =~ /^(?:blk\.0\.|token_embd|output)/ } 0 .. $#$tensors;
        $i = _pick(@hot) if @hot;
    }
    my $t = $tensors->[$i];
    my $name = $t->{name};
    my $r = rand;
    if ($r < 0.35) {    # type
        my $old = ggml_type_name($t->{type});
        $t->{type} = rand() < 0.93 ? _pick(keys %GGML) : _pick(4, 5, 31, 36, 39, 40, 1000, 2**31);
        _resize($t) or return;
        return "tensor $name: type $old -> " . ggml_type_name($t->{type});
    }
    if ($r < 0.6) {    # shape
        my @old = @{ $t->{dims} };
        my @d = @old;
        my $m = _pick(qw(swap double half one zero add_dim drop_dim plus_block huge));
        if ($m eq 'swap' && @d >= 2) { @d[ 0, 1 ] = @d[ 1, 0 ] }
        elsif ($m eq 'double') { $d[ int rand @d ] *= 2 if @d }
        elsif ($m eq 'half') { my $k = int rand @d; $d[$k] = int($d[$k] / 2) if @d }
        elsif ($m eq 'one') { $d[ int rand @d ] = 1 if @d }
        elsif ($m eq 'zero') { $d[ int rand @d ] = 0 if @d }
        elsif ($m eq 'add_dim') { push @d, _pick(1, 2) }
        elsif ($m eq 'drop_dim') { pop @d }
        elsif ($m eq 'plus_block') { $d[0] += ($GGML{ $t->{type} } ? $GGML{ $t->{type} }[1] : 1) if @d }
        elsif ($m eq 'huge') { $d[ int rand @d ] = _pick(2**31, 2**32 + 1, 2**62) if @d }
        $t->{dims} = \@d;
        # a huge dimension cannot have its data: keep it (the file then has too few bytes, and must croak)
        if ($m eq 'huge') { return "tensor $name: dims [@old] -> [@d] (data unchanged)" }
        _resize($t) or return;
        return "tensor $name: dims [@old] -> [@d]";
    }
    if ($r < 0.72) {    # drop
        splice @$tensors, $i, 1;
        return "tensor $name dropped";
    }
    if ($r < 0.82) {    # duplicate (the copy first or last)
        my $copy = { %$t, dims => [ @{ $t->{dims} } ] };
        if (rand() < 0.5) { push @$tensors, $copy } else { unshift @$tensors, $copy }
        return "tensor $name duplicated";
    }
    if ($r < 0.92) {    # rename onto another tensor (a duplicate name, and a missing one)
        my $other = $tensors->[ int rand @$tensors ]{name};
        $t->{name} = $other;
        return "tensor $name renamed to $other";
    }
    my $new = _pick('', 'x' x 70, "blk.0.attn_q.weight\0", "blk.99.attn_q.weight", "blk.-1.attn_q.weight",
        "blk.18446744073709551616.attn_norm.weight", "\xff");
    $t->{name} = $new;
    return "tensor $name renamed to '" . _short($new) . "'";
}

sub _kv_op {
    my ($v) = @_;
    my $kv = $v->{kv};
    my $n = @$kv / 2;
    return 'no keys' unless $n;
    my $i = 2 * int rand $n;
    # prefer the architecture's hyperparameters and the tokenizer's keys
    if (rand() < 0.6) {
        my @hot = grep { $kv->[$_] !~ /^general\.(?:name|file_type|quantization_version)/ } map { 2 * $_ } 0 .. $n - 1;
        $i = _pick(@hot) if @hot;
    }
    my $key = $kv->[$i];
    my $r = rand;
    if ($r < 0.75) {
        my ($val, $what) = _mutate_value($key, $kv->[ $i + 1 ]);
        $kv->[ $i + 1 ] = $val;
        return "key $key: $what";
    }
    if ($r < 0.85) {
        splice @$kv, $i, 2;
        return "key $key dropped";
    }
    if ($r < 0.95) {    # a second copy with another value
        my ($val) = _mutate_value($key, $kv->[ $i + 1 ]);
        push @$kv, $key, $val;
        return "key $key duplicated (the second with another value)";
    }
    # a key the file did not have
    my ($arch) = map { $kv->[ $_ + 1 ][1] } grep { $kv->[$_] eq 'general.architecture' } map { 2 * $_ } 0 .. $n - 1;
    $arch //= 'llama';
    my $new = _pick("$arch.attention.scale", "$arch.rope.scaling.type", "$arch.rope.scaling.factor",
        "$arch.attention.sliding_window", "$arch.attention.sliding_window_pattern", "$arch.attention.key_length",
        "$arch.attention.value_length", "$arch.rope.freq_base_swa", "$arch.final_logit_softcapping",
        "$arch.attn_logit_softcapping", 'tokenizer.ggml.eot_token_id', 'tokenizer.ggml.padding_token_id',
        'tokenizer.ggml.add_eos_token', 'tokenizer.ggml.pre', 'tokenizer.ggml.merges', 'general.alignment',
        "$arch.rope.scaling.original_context_length", "$arch.expert_count");
    my $val = _pick([ u32 => _int_value(0) ], [ f32 => _float(_pick(@ODD_FLOATS)) ], [ string => _pick('linear', 'yarn', 'x', '') ],
        [ i32 => -1 ], [ array => u32 => [ 1, 2 ] ]);
    push @$kv, $new, $val;
    return "key $new added (" . ($val->[0] eq 'array' ? 'array' : "$val->[0] " . _short($val->[1])) . ')';
}

sub _layout_op {
    my ($v) = @_;
    my $kv = $v->{kv};
    my $a = _pick(1, 3, 8, 64, 4096, 0, 2**31, 2**32 + 32, 33);
    my ($i) = grep { $kv->[$_] eq 'general.alignment' } map { 2 * $_ } 0 .. @$kv / 2 - 1;
    my $type = _pick(qw(u32 u32 u32 u64 i32 f32 string));
    if (defined $i) { $kv->[ $i + 1 ] = [ $type => $a ] } else { push @$kv, 'general.alignment' => [ $type => $a ] }
    # a power of two that fits: really lay the data out at it (consistent); otherwise leave the layout
    $v->{layout_alignment} = $a if $type =~ /^u/ && $a && $a < 2**20 && !($a & ($a - 1));
    return "general.alignment = $type $a";
}

# mutate($g, $n): a variant with $n changes, and their descriptions.
sub mutate {
    my ($g, $n) = @_;
    my $v = _clone($g);
    $v->{layout_alignment} = $g->{alignment} if $g->{alignment} && !($g->{alignment} & ($g->{alignment} - 1));
    my @what;
    for (1 .. $n) {
        my $r = rand;
        my $what = $r < 0.45 ? _tensor_op($v) : $r < 0.97 ? _kv_op($v) : _layout_op($v);
        push @what, $what if defined $what;
    }
    # vocab-only files have no tensors: always change their keys
    push @what, _kv_op($v) unless @what;
    return ($v, @what);
}

1;
