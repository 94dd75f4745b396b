# Lugh's quantizers give the bytes llama.cpp's llama-quantize writes.
# t/data/quant (made by bench/make-quant-reference with llama.cpp b11434)
# holds 16 rows of 1536 q4_1 values from SmolLM2-135M (blk.0.ffn_down) and,
# for each type llama-quantize makes of them under --pure without an
# importance matrix, the length and sha256 of its output. llama-quantize
# dequantizes each row to f32 and quantizes it alone; here the same is done
# three ways: Lugh::Quant::dequantize/quantize on packed floats,
# Lugh::Tensor->dequantize/->quantize, and set_f32 on a tensor of the type.
# The data ships with the distribution: nothing is skipped.
use strict;
use warnings;
use Test::More;
use Digest::SHA qw(sha256_hex);
use File::Spec;
use JSON::PP ();
use lib 't/lib';
use LughTest qw(croaks_like);
use Lugh;
use Lugh::Quant ();

my $dir = File::Spec->catdir('t', 'data', 'quant');
my $ref = do {
    open my $fh, '<:raw', File::Spec->catfile($dir, 'reference.json') or die "reference.json: $!";
    local $/;
    JSON::PP->new->decode(<$fh>);
};
my $source = $ref->{source};
my ($n_per_row, $rows) = @$source{qw(n_per_row rows)};
my $src_type = Lugh::Quant::type_from_name($source->{type});
is($src_type, Lugh::Quant::Q4_1, "the source is $source->{type}");
is($n_per_row * $rows, 1536 * 16, "$rows rows of $n_per_row");
my $src = do {
    open my $fh, '<:raw', File::Spec->catfile($dir, $source->{file}) or die "$source->{file}: $!";
    local $/;
    <$fh>;
};
is(length $src, $rows * Lugh::Quant::row_size($src_type, $n_per_row), "$source->{file}: $rows rows of q4_1 blocks");
note("reference: llama.cpp $ref->{llama_cpp} on $ref->{cpu}, $source->{model} $source->{tensor}");

my %want = %{ $ref->{quantized} };
ok(exists $want{f32}, 'the reference has the f32 rows');

# --- Lugh::Quant on packed floats -------------------------------------------------

my $f32 = Lugh::Quant::dequantize($src_type, $src);
is(length $f32, $want{f32}{bytes}, 'dequantize in scalar context: the f32 rows, as many bytes as llama-quantize wrote');
is(sha256_hex($f32), $want{f32}{sha256}, 'dequantized q4_1: the f32 bytes llama-quantize wrote');
my @values = unpack 'f<*', $f32;
is(scalar @values, $n_per_row * $rows, 'as many values as the source holds');
is_deeply([ Lugh::Quant::dequantize($src_type, $src) ], \@values, 'dequantize in list context: the same values');

my $compared = 0;
for my $name (sort keys %want) {
    my $type = Lugh::Quant::type_from_name($name);
    cmp_ok($type, '>=', 0, "$name ($want{$name}{ftype}) is a ggml type") or next;
    ok(Lugh::Quant::can_quantize($type), "$name: can_quantize") or next;
    my $bytes = eval { Lugh::Quant::quantize($type, $f32, $n_per_row) };
    ok(defined $bytes, "$name: Lugh::Quant::quantize") or do { diag $@; next };
    is(length $bytes, $want{$name}{bytes}, "$name: $want{$name}{bytes} bytes, as llama-quantize");
    is(sha256_hex($bytes), $want{$name}{sha256}, "$name: the bytes llama-quantize wrote (sha256)");
    is(Lugh::Quant::quantize($type, \@values, $n_per_row), $bytes, "$name: an array of the values gives the same bytes");
    $compared++;
}
is($compared, scalar(keys %want), "Lugh::Quant::quantize: all $compared types compared");
diag("$compared types byte-identical to llama-quantize (llama.cpp $ref->{llama_cpp})");

# --- the same through Lugh::Tensor -------------------------------------------------

my $ctx = Lugh::Context->new(mem_size => 64 * 1024 * 1024);
my $q41 = Lugh::Tensor->new($ctx, $source->{type}, $n_per_row, $rows);
is($q41->nbytes, length $src, 'a q4_1 tensor of the source\'s shape');
$q41->set_bytes($src);
is($q41->get_bytes, $src, 'set_bytes / get_bytes of the q4_1 rows');
my $deq = $q41->dequantize;
is($deq->type_name, 'f32', 'Tensor->dequantize gives F32');
is_deeply([ $deq->shape ], [ $n_per_row, $rows ], '... of the same shape');
is(sha256_hex($deq->get_bytes), $want{f32}{sha256}, 'Tensor->dequantize: the f32 bytes llama-quantize wrote');
is(sha256_hex($q41->dequantize($ctx)->get_bytes), $want{f32}{sha256}, 'Tensor->dequantize($ctx): the same');
is_deeply([ $q41->get_f32 ], \@values, 'get_f32 of the q4_1 tensor decodes the same values');

my ($by_method, $by_set) = (0, 0);
for my $name (sort keys %want) {
    my $type = Lugh::Quant::type_from_name($name);
    next if $type < 0;
    if (Lugh::Quant::is_quantized($type)) {
        my $q = eval { $deq->quantize($type) };
        ok($q, "$name: Tensor->quantize") or do { diag $@; next };
        is($q->type_name, $name, "$name: the tensor's type");
        is_deeply([ $q->shape ], [ $n_per_row, $rows ], "$name: the tensor's shape");
        my $bytes = $q->get_bytes;
        is(length $bytes, $want{$name}{bytes}, "$name: Tensor->quantize: $want{$name}{bytes} bytes");
        is(sha256_hex($bytes), $want{$name}{sha256}, "$name: Tensor->quantize: the bytes llama-quantize wrote");
        is(sha256_hex($deq->quantize($ctx, $name)->get_bytes), $want{$name}{sha256}, "$name: Tensor->quantize(\$ctx, '$name'): the same");
        $by_method++;
    }
    else {
        croaks_like(sub { $deq->quantize($type) }, qr/^Lugh::Tensor->quantize: Destination type \Q$name\E is not a quantized type/,
            "$name: Tensor->quantize makes only quantized types");
    }
    my $t = Lugh::Tensor->new($ctx, $name, $n_per_row, $rows);
    $t->set_f32(\@values);
    is(sha256_hex($t->get_bytes), $want{$name}{sha256}, "$name: set_f32 on a $name tensor stores the bytes llama-quantize wrote");
    $by_set++;
}
is($by_method, scalar(grep { Lugh::Quant::is_quantized(Lugh::Quant::type_from_name($_)) } keys %want),
    "Tensor->quantize: $by_method quantized types compared");
is($by_set, scalar(keys %want), "set_f32: $by_set types compared");

# --- what llama-quantize refused -----------------------------------------------------

# llama-quantize refuses these file types without an importance matrix. The
# ones whose ggml type needs one (bench/make-quant-reference: IQ2_XXS ->
# iq2_xxs, IQ2_XS and IQ2_S -> iq2_xs, IQ1_S -> iq1_s) Lugh refuses too; the
# others (IQ2_M -> iq2_s, IQ1_M -> iq1_m, IQ3_XXS -> iq3_xxs) are llama.cpp's
# policy, and ggml quantizes them without one.
my %ftype_type = (IQ2_XXS => 'iq2_xxs', IQ2_XS => 'iq2_xs', IQ2_S => 'iq2_xs', IQ1_S => 'iq1_s',
    IQ2_M => 'iq2_s', IQ1_M => 'iq1_m', IQ3_XXS => 'iq3_xxs');
for my $ftype (sort keys %{ $ref->{refused} }) {
    like($ref->{refused}{$ftype}, qr/importance matrix/, "llama-quantize refused $ftype for want of an importance matrix");
    my $name = $ftype_type{$ftype};
    ok(defined $name, "$ftype is a file type this test knows") or next;
    my $type = Lugh::Quant::type_from_name($name);
    next unless Lugh::Quant::requires_imatrix($type);
    croaks_like(sub { Lugh::Quant::quantize($type, $f32, $n_per_row) },
        qr/^Lugh::Quant::quantize: cannot quantize to \Q$name\E: its quantizer needs an importance matrix/, "$ftype ($name): Lugh refuses too");
}

done_testing;
