package LughTest::GGUF;

# Writes small GGUF files for tests, and walks a GGUF header to find where its
# structural fields are (for targeted corruption).

use strict;
use warnings;
use Exporter 'import';

our @EXPORT_OK = qw(write_gguf gguf_bytes header_fields);

# GGUF value type ids and pack formats (little-endian).
our %TYPE = (u8 => 0, i8 => 1, u16 => 2, i16 => 3, u32 => 4, i32 => 5, f32 => 6, bool => 7,
             string => 8, array => 9, u64 => 10, i64 => 11, f64 => 12);
my %PACK = (u8 => 'C', i8 => 'c', u16 => 'v', i16 => 's<', u32 => 'V', i32 => 'l<', f32 => 'f<',
            bool => 'C', u64 => 'Q<', i64 => 'q<', f64 => 'd<');

sub _str { my ($s) = @_; utf8::encode($s) if utf8::is_utf8($s); return pack('Q<', length $s) . $s }

# A value: [type => scalar] or [array => elem_type => [values]] (elem_type may
# be 'array' with nested [elem_type => [values]] items).
sub _value {
    my ($type, @rest) = @_;
    return _str($rest[0]) if $type eq 'string';
    return pack($PACK{$type}, $rest[0]) if $PACK{$type};
    die "bad type $type" unless $type eq 'array';
    my ($etype, $items) = @rest;
    my $out = pack('VQ<', $TYPE{$etype}, scalar @$items);
    $out .= $etype eq 'array' ? _value('array', @$_) : _value($etype, $_) for @$items;
    return $out;
}

# gguf_bytes(kv => [key => [type, value...], ...], tensors => [[name, ggml_type, [dims], $data], ...],
#            version => 3, alignment => 32)
sub gguf_bytes {
    my (%a) = @_;
    my @kv = @{ $a{kv} // [] };
    my @tensors = @{ $a{tensors} // [] };
    my $align = $a{alignment} // 32;
    my $out = 'GGUF' . pack('VQ<Q<', $a{version} // 3, scalar @tensors, @kv / 2);
    while (my ($k, $v) = splice @kv, 0, 2) {
        $out .= _str($k) . pack('V', $TYPE{ $v->[0] }) . _value(@$v);
    }
    my $offset = 0;
    my $data = '';
    for my $t (@tensors) {
        my ($name, $type, $dims, $bytes) = @$t;
        $out .= _str($name) . pack('V', scalar @$dims) . pack('Q<*', @$dims) . pack('VQ<', $type, $offset);
        $data .= $bytes;
        $data .= "\0" x (($align - length($data) % $align) % $align);
        $offset = length $data;
    }
    $out .= "\0" x (($align - length($out) % $align) % $align) if @tensors;
    return $out . $data;
}

sub write_gguf {
    my ($path, %a) = @_;
    open my $fh, '>:raw', $path or die "cannot write $path: $!";
    print {$fh} gguf_bytes(%a);
    close $fh or die "cannot write $path: $!";
    return $path;
}

# Walks the header of GGUF bytes; returns a list of [offset, length, what]
# for every structural field (counts, lengths, type ids, dims, offsets).
sub header_fields {
    my ($bytes) = @_;
    my $pos = 0;
    my @f;
    my $take = sub { my ($n, $what) = @_; push @f, [$pos, $n, $what]; my $s = substr($bytes, $pos, $n); $pos += $n; $s };
    $take->(4, 'magic');
    $take->(4, 'version');
    my $n_tensors = unpack 'Q<', $take->(8, 'n_tensors');
    my $n_kv = unpack 'Q<', $take->(8, 'n_kv');
    my %size = (0 => 1, 1 => 1, 2 => 2, 3 => 2, 4 => 4, 5 => 4, 6 => 4, 7 => 1, 10 => 8, 11 => 8, 12 => 8);
    my $skip_str = sub { my $len = unpack 'Q<', $take->(8, "$_[0] length"); $pos += $len };
    my $value;
    $value = sub {
        my ($type, $what) = @_;
        if ($type == 8) { $skip_str->($what) }
        elsif ($type == 9) {
            my $etype = unpack 'V', $take->(4, "$what element type");
            my $n = unpack 'Q<', $take->(8, "$what count");
            if ($size{$etype}) { $pos += $n * $size{$etype} }
            else { $value->($etype, "$what element") for 1 .. $n }
        }
        else { $pos += $size{$type} }
    };
    for my $i (1 .. $n_kv) {
        $skip_str->('key');
        my $type = unpack 'V', $take->(4, 'value type');
        $value->($type, 'value');
    }
    for my $i (1 .. $n_tensors) {
        $skip_str->('tensor name');
        my $n_dims = unpack 'V', $take->(4, 'tensor n_dims');
        $take->(8, 'tensor dim') for 1 .. $n_dims;
        $take->(4, 'tensor type');
        $take->(8, 'tensor offset');
    }
    return (\@f, $pos);
}

1;
