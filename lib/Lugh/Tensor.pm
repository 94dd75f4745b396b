package Lugh::Tensor;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;

our $VERSION = '0.20';

# ggml's type ids (Lugh::Quant has all of them).
use constant { _F32 => 0, _F16 => 1, _I32 => 26 };

sub new {
    my ($class, $ctx, $type, @dims) = @_;
    Lugh::_croak('Usage: Lugh::Tensor->new($ctx, $type, @dims)') unless defined $type;
    if (!ref $type && $type =~ /[a-z]/i) {    # a type name such as 'q4_K' or 'F16'
        my $id = Lugh::Quant::_type_id_from_any_name($type);
        Lugh::_croak("Lugh::Tensor->new: unknown type '$type' (see Lugh::Quant::all_types)") if $id < 0;
        $type = $id;
    }
    return _new($class, $ctx, $type, @dims);
}

sub new_f32 { my ($class, $ctx, @dims) = @_; return _new($class, $ctx, _F32, @dims) }
sub new_f16 { my ($class, $ctx, @dims) = @_; return _new($class, $ctx, _F16, @dims) }
sub new_i32 { my ($class, $ctx, @dims) = @_; return _new($class, $ctx, _I32, @dims) }

*type = \&_type_id;

# quantize($ctx, $type) as in Lugh 0.12, or quantize($type) into the tensor's own context.
sub quantize {
    my ($self, @args) = @_;
    Lugh::_croak('Usage: $tensor->quantize([$ctx,] $type)') unless @args == 1 || @args == 2;
    my ($ctx, $type) = @args == 2 ? @args : (undef, $args[0]);
    if (defined $type && !ref $type && $type =~ /[a-z]/i) {
        my $id = Lugh::Quant::_type_id_from_any_name($type);
        Lugh::_croak("Lugh::Tensor->quantize: unknown type '$type' (see Lugh::Quant::all_quantized_types)") if $id < 0;
        $type = $id;
    }
    return _quantize($self, $ctx, $type);
}

sub dequantize {
    my ($self, @args) = @_;
    Lugh::_croak('Usage: $tensor->dequantize([$ctx])') if @args > 1;
    return _dequantize($self, $args[0]);
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Tensor - an n-dimensional array in a Lugh::Context

=head1 SYNOPSIS

    use Lugh;

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $m   = Lugh::Tensor->new_f32($ctx, 3, 2);    # 3 columns, 2 rows
    $m->set_f32(1, 2, 3, 4, 5, 6);
    print join(',', $m->shape), "\n";               # 3,2
    print join(',', $m->get_f32), "\n";             # 1,2,3,4,5,6

=head1 DESCRIPTION

A tensor has a ggml type (F32, F16, I32 or any quantized type, see
L<Lugh::Quant>) and 1 to 4 extents in ggml's order: C<ne0> first, the one
whose elements lie next to each other. A 3 x 2 tensor made with
C<new_f32($ctx, 3, 2)> is two rows of three.

New tensors are filled with zeros. The result of an operation
(L<Lugh::Ops>) holds values once a L<Lugh::Graph> has computed it; reading
it before croaks. A tensor keeps alive the contexts it and its sources live
in, so it stays valid whatever is freed first.

=head1 CONSTRUCTORS

=head2 new_f32

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 10, 20, 30);
    print $t->nelements, "\n";    # 6000

1 to 4 positive extents.

=head2 new_f16

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $h = Lugh::Tensor->new_f16($ctx, 4);
    $h->set_f32(0.5, 1, 1.5, 2);
    print $h->nbytes, "\n";    # 8

=head2 new_i32

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $ids = Lugh::Tensor->new_i32($ctx, 3);
    $ids->set_f32(2, 0, 1);
    print join(',', $ids->get_f32), "\n";    # 2,0,1

Integer tensors take integral values in their range and read back as
integers (row ids for L<Lugh::Ops/get_rows>, positions for
L<Lugh::Ops/rope>).

=head2 new

    use Lugh::Quant qw(Q8_0);
    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $q = Lugh::Tensor->new($ctx, Q8_0, 64, 2);
    print $q->type_name, ' ', $q->nbytes, "\n";    # q8_0 136

A tensor of any type: a L<Lugh::Quant> constant, a type id, or a type
name (C<'q4_K'>, C<'f16'>, in either case). A quantized tensor's C<ne0>
must be a multiple of its block size.

=head2 from_ptr

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
    my $t = Lugh::Tensor->from_ptr($w->_raw_tensor_ptr);
    print join(',', $t->shape), "\n";    # 2

The L<Lugh::Tensor> behind the handle that
L<Lugh::Autograd::Tensor/_raw_tensor_ptr> gave (Lugh 0.12's spelling of
C<< $w->tensor >>): it shares the autograd tensor's values. It croaks on a
number that is no such handle, and on the handle of an autograd tensor that
has been freed.

=head1 DATA

=head2 set_f32

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 3);
    $t->set_f32(1.5, 2.5, 3.5);           # or $t->set_f32([1.5, 2.5, 3.5])
    print join(',', $t->get_f32), "\n";    # 1.5,2.5,3.5

Sets every element, in ggml order, from exactly C<nelements> numbers,
converted to the tensor's type (quantized with ggml's quantizer for a
quantized tensor). A wrong count croaks C<Expected N values, got M>.

=head2 get_f32

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 2, 2);
    $t->set_f32(1, 2, 3, 4);
    my @values = $t->get_f32;
    print scalar(@values), "\n";    # 4

Every element as a number, in ggml order; a quantized, F16 or BF16
tensor is decoded. Views and transposed tensors read in their own order.

=head2 get_bytes

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 1000);
    $t->set_f32(map { $_ / 10 } 1 .. 1000);
    my @floats = unpack 'f<*', $t->get_bytes;
    print scalar(@floats), "\n";    # 1000

The data as stored, one string of C<nbytes> bytes, without a Perl value per
element (F32 data is C<pack 'f<*'>). The tensor must be contiguous.

=head2 set_bytes

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 3);
    $t->set_bytes(pack 'f<*', 1, 2, 3);
    print join(',', $t->get_f32), "\n";    # 1,2,3

Replaces the data with exactly C<nbytes> bytes, as stored.

=head1 SHAPE AND TYPE

=head2 nelements

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new_f32($ctx, 4, 5)->nelements, "\n";    # 20

=head2 n_dims

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new_f32($ctx, 4, 5, 1)->n_dims, "\n";    # 2

The number of extents up to the last one above 1 (at least 1), as ggml counts.

=head2 shape

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join('x', Lugh::Tensor->new_f32($ctx, 10, 20, 30)->shape), "\n";    # 10x20x30

The first C<n_dims> extents.

=head2 ne

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print join(',', Lugh::Tensor->new_f32($ctx, 7)->ne), "\n";    # 7,1,1,1

All four extents.

=head2 type

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new_f32($ctx, 4)->type, "\n";    # 0

The ggml type id (a L<Lugh::Quant> constant).

=head2 type_name

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new_f16($ctx, 4)->type_name, "\n";    # f16

=head2 type_size

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new($ctx, 'q4_K', 256)->type_size, "\n";    # 144

Bytes per block (per element for F32, F16 and integer types).

=head2 blck_size

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new($ctx, 'q4_K', 256)->blck_size, "\n";    # 256

Elements per block (1 for F32, F16 and integer types).

=head2 is_quantized

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new($ctx, 'q8_0', 32)->is_quantized ? "yes\n" : "no\n";    # yes

=head2 nbytes

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    print Lugh::Tensor->new_f32($ctx, 1000)->nbytes, "\n";    # 4000

=head2 is_contiguous

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $m = Lugh::Tensor->new_f32($ctx, 3, 2);
    print Lugh::Ops::transpose($ctx, $m)->is_contiguous ? "packed\n" : "strided\n";    # strided

Whether the elements lie packed in ggml order (views from
L<Lugh::Ops/transpose> and L<Lugh::Ops/permute> usually do not).

=head2 has_data

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $a = Lugh::Tensor->new_f32($ctx, 2);
    my $sum = Lugh::Ops::add($ctx, $a, $a);
    print $sum->has_data ? "computed\n" : "not yet\n";    # not yet

Whether the values can be read: true for tensors made here, and for
results once a graph has computed them.

=head2 context

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t = Lugh::Tensor->new_f32($ctx, 2);
    print $t->context->id == $ctx->id ? "same\n" : "other\n";    # same

The L<Lugh::Context> the tensor lives in.

=head1 QUANTIZATION

=head2 quantize

    use Lugh::Quant qw(Q4_K);
    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $f32 = Lugh::Tensor->new_f32($ctx, 256);
    $f32->set_f32(map { sin($_ / 10) } 0 .. 255);
    my $q4 = $f32->quantize($ctx, Q4_K);
    printf "%d -> %d bytes\n", $f32->nbytes, $q4->nbytes;    # 1024 -> 144 bytes

A new tensor of the quantized type with this F32 (or F16/BF16) tensor's
values, encoded by ggml's quantizer without an importance matrix: the bytes
C<llama-quantize> writes for the same values. C<$ctx> (the tensor's own
context if left out) holds the result; the type is a L<Lugh::Quant>
constant, id or name. Rows (C<ne0>) must be whole blocks; types that need an
importance matrix (C<iq2_xxs>, C<iq2_xs>, C<iq1_s>) croak.

=head2 dequantize

    use Lugh::Quant qw(Q8_0);
    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $f32 = Lugh::Tensor->new_f32($ctx, 64);
    $f32->set_f32(map { $_ / 64 } 0 .. 63);
    my @back = $f32->quantize($ctx, Q8_0)->dequantize($ctx)->get_f32;
    printf "%.2f\n", $back[32];    # 0.50

A new F32 tensor with this quantized (or F16/BF16) tensor's values decoded.

=head1 SEE ALSO

L<Lugh::Context>, L<Lugh::Ops>, L<Lugh::Graph>, L<Lugh::Quant>

=cut
