package Lugh::Quant;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

# One constant per ggml type, named as ggml names it in capitals (Q4_K,
# IQ2_XXS, F32 ...), made from ggml's own table.
our (@TYPES, @FUNCS, @EXPORT_OK, %EXPORT_TAGS);
{
    my %ids = _type_constants();
    for my $name (sort { $ids{$a} <=> $ids{$b} } keys %ids) {
        my $id = $ids{$name};
        no strict 'refs';
        *{$name} = sub () { $id };
        push @TYPES, $name;
    }
    my $count = type_count();
    *TYPE_COUNT = sub () { $count };
    push @TYPES, 'TYPE_COUNT';
}
@FUNCS = qw(type_name type_size blck_size type_sizef is_quantized requires_imatrix can_quantize row_size
    type_count all_types all_quantized_types type_from_name type_info quantize dequantize);
@EXPORT_OK   = (@TYPES, @FUNCS);
%EXPORT_TAGS = (types => \@TYPES, funcs => \@FUNCS, all => \@EXPORT_OK);

sub import {
    my ($class, @symbols) = @_;
    my %ok = map { $_ => 1 } @EXPORT_OK;
    my $caller = caller;
    for my $symbol (@symbols) {
        my @names;
        if ($symbol =~ /\A:(\w+)\z/) {
            Lugh::_croak("Unknown export tag ':$1' (Lugh::Quant has :types, :funcs and :all)") unless $EXPORT_TAGS{$1};
            @names = @{ $EXPORT_TAGS{$1} };
        }
        else {
            Lugh::_croak("'$symbol' is not exported by Lugh::Quant") unless $ok{$symbol};
            @names = ($symbol);
        }
        no strict 'refs';
        *{"${caller}::$_"} = \&{"Lugh::Quant::$_"} for @names;
    }
    return;
}

sub type_info { return { _type_info(@_) } }

# A type id from a ggml name in any case ('q4_K', 'Q4_K', 'f16'), or -1.
sub _type_id_from_any_name {
    my ($name) = @_;
    my $id = type_from_name($name);
    return $id if $id >= 0;
    my ($match) = grep { lc type_name($_) eq lc $name } all_types();
    return $match // -1;
}

sub quantize {
    my ($type, $data, $n_per_row) = @_;
    Lugh::_croak('Usage: Lugh::Quant::quantize($type, \@values or $packed_f32, [$n_per_row])')
        unless @_ >= 2 && @_ <= 3;
    return _quantize($type, $data, $n_per_row);
}

sub dequantize {
    Lugh::_croak('Usage: Lugh::Quant::dequantize($type, $bytes)') unless @_ == 2;
    my $packed = _dequantize(@_);
    return wantarray ? unpack('f<*', $packed) : $packed;
}

1;

__END__

=head1 NAME

Lugh::Quant - ggml's data types, and quantization of f32 data

=head1 SYNOPSIS

    use Lugh;
    use Lugh::Quant qw(:all);

    my $info = type_info(Q4_K);
    printf "%s: %d values in %d bytes\n", $info->{name}, $info->{blck_size}, $info->{size};    # q4_K: 256 values in 144 bytes

    my @values = map { sin($_ / 10) } 0 .. 255;
    my $bytes  = quantize(Q8_0, \@values);
    my @back   = dequantize(Q8_0, $bytes);
    printf "%d bytes, %.2f\n", length $bytes, $back[10];    # 272 bytes, 0.84

=head1 DESCRIPTION

Every type ggml stores data in has a constant here, and functions that
describe it. L</quantize> and L</dequantize> convert plain numbers with
ggml's own codecs, the ones C<llama-quantize> uses: the bytes are the ones
it writes for the same values. L<Lugh::Tensor/quantize> does the same for a
tensor.

=head1 EXPORTS

=head2 import

    use Lugh::Quant qw(:types type_name);
    print type_name(Q5_K), "\n";    # q5_K

Nothing is exported by default. C<:types> exports the type constants,
C<:funcs> the functions, C<:all> both; single names can be asked for too.
An unknown tag or name croaks.

=head1 CONSTANTS

Each is ggml's id of the type of the same name; C<TYPE_COUNT> is one more
than the largest id.

    use Lugh::Quant qw(Q4_K TYPE_COUNT);
    print Q4_K, "\n";    # 12

=over

=item F32, F16, BF16, F64

Floating point.

=item I8, I16, I32, I64

Integers (row ids, positions).

=item Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q1_0, Q2_0

Blocks of 32 values with a scale (and an offset for the C<_1> types).

=item Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K

k-quants: super-blocks of 256 values with quantized scales.

=item IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS

i-quants: lattice codebooks (C<IQ2_XXS>, C<IQ2_XS> and C<IQ1_S> need an
importance matrix to be made).

=item TQ1_0, TQ2_0, MXFP4, NVFP4

Ternary and 4-bit floating-point formats.

=item TYPE_COUNT

=back

=head1 FUNCTIONS

Functions that take a type croak C<Invalid type: N> for an id ggml does
not have, except C<type_name> (C<'unknown'>) and C<is_quantized> and
C<can_quantize> (false).

=head2 type_name

    print Lugh::Quant::type_name(Lugh::Quant::Q4_K), "\n";    # q4_K

=head2 type_size

    print Lugh::Quant::type_size(Lugh::Quant::Q8_0), "\n";    # 34

Bytes per block.

=head2 blck_size

    print Lugh::Quant::blck_size(Lugh::Quant::Q8_0), "\n";    # 32

Values per block.

=head2 type_sizef

    print Lugh::Quant::type_sizef(Lugh::Quant::Q4_0), "\n";    # 0.5625

Bytes per value.

=head2 is_quantized

    print Lugh::Quant::is_quantized(Lugh::Quant::F16) ? "yes\n" : "no\n";    # no

=head2 requires_imatrix

    print Lugh::Quant::requires_imatrix(Lugh::Quant::IQ2_XXS) ? "yes\n" : "no\n";    # yes

Whether ggml's quantizer for the type needs an importance matrix (Lugh
does not take one, so these types cannot be made by L</quantize>).

=head2 can_quantize

    print Lugh::Quant::can_quantize(Lugh::Quant::Q6_K) ? "yes\n" : "no\n";    # yes

Whether L</quantize> can make the type: ggml has a quantizer for it that
needs no importance matrix.

=head2 row_size

    print Lugh::Quant::row_size(Lugh::Quant::Q4_K, 512), "\n";    # 288

Bytes of a row of N values (a whole number of blocks).

=head2 type_count

    print Lugh::Quant::type_count() == Lugh::Quant::TYPE_COUNT ? "ok\n" : "no\n";    # ok

=head2 all_types

    my @types = Lugh::Quant::all_types();
    print scalar(grep { $_ == Lugh::Quant::Q4_K } @types), "\n";    # 1

Every type id ggml has (removed ids are left out).

=head2 all_quantized_types

    my @quantized = Lugh::Quant::all_quantized_types();
    print scalar(grep { $_ == Lugh::Quant::F32 } @quantized), "\n";    # 0

=head2 type_from_name

    print Lugh::Quant::type_from_name('q8_0'), "\n";    # 8

The id of ggml's name for a type (case-sensitive, as ggml spells it:
C<q4_K>), or -1.

=head2 type_info

    my $info = Lugh::Quant::type_info(Lugh::Quant::Q6_K);
    printf "%s %.4f\n", $info->{name}, $info->{sizef} * 8;    # q6_K 6.5625

A hash reference: C<type>, C<name>, C<size> (bytes per block), C<blck_size>,
C<sizef> (bytes per value), C<is_quantized>, C<requires_imatrix>,
C<can_quantize>, C<can_dequantize>.

=head2 quantize

    my $bytes = Lugh::Quant::quantize(Lugh::Quant::Q4_0, [ map { $_ / 32 } 0 .. 63 ]);
    print length($bytes), "\n";    # 36

C<quantize($type, $values, $n_per_row)>: C<$values> is an array reference
of numbers or a string of packed floats (C<pack 'f<*'>); rows of
C<$n_per_row> values (all of them if not given) are quantized one by one,
each a whole number of blocks. Returns the encoded bytes. Croaks for a type
that needs an importance matrix, and for NaN or infinite values (ggml's
quantizers assume finite data).

=head2 dequantize

    my $bytes = Lugh::Quant::quantize(Lugh::Quant::Q8_0, [ (0.5) x 32 ]);
    my @values = Lugh::Quant::dequantize(Lugh::Quant::Q8_0, $bytes);
    printf "%.3f\n", $values[0];    # 0.500

The values of whole blocks of a type, decoded: a list of numbers, or in
scalar context one string of packed floats (C<unpack 'f<*'>).

=head1 SEE ALSO

L<Lugh::Tensor>, L<Lugh::Ops>

=cut
