# Lugh::Quant and the quantize/dequantize methods of Lugh::Tensor: the
# scenario of Lugh 0.12's t/0025 (quant), rewritten here from the behaviour
# that test and the 0.12 documentation describe (not copied from them), made
# strict, and adapted where this implementation intentionally differs:
# ggml 0.26 has more types (Q1_0, Q2_0, NVFP4: TYPE_COUNT is 43, not 40),
# Lugh::Quant has quantize/dequantize functions and can_quantize, and the
# ctx argument of the Tensor methods is optional. Also: the export rules,
# every quantized type round-tripped or refused with a message, the error
# ordering Q8_0 < Q6_K < Q5_K < Q4_K < Q3_K < Q2_K on 4096 values, and the
# function and method forms giving the same bytes. Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(croaks_like);

BEGIN {
    use_ok('Lugh') or BAIL_OUT('Lugh does not load');
    use_ok('Lugh::Quant') or BAIL_OUT('Lugh::Quant does not load');
}

# ggml's type ids (enum ggml_type, which never renumbers).
my %ID = (
    F32 => 0, F16 => 1, Q4_0 => 2, Q4_1 => 3, Q5_0 => 6, Q5_1 => 7, Q8_0 => 8, Q8_1 => 9,
    Q2_K => 10, Q3_K => 11, Q4_K => 12, Q5_K => 13, Q6_K => 14, Q8_K => 15,
    IQ2_XXS => 16, IQ2_XS => 17, IQ3_XXS => 18, IQ1_S => 19, IQ4_NL => 20, IQ3_S => 21, IQ2_S => 22, IQ4_XS => 23,
    I8 => 24, I16 => 25, I32 => 26, I64 => 27, F64 => 28, IQ1_M => 29, BF16 => 30,
    TQ1_0 => 34, TQ2_0 => 35, MXFP4 => 39, NVFP4 => 40, Q1_0 => 41, Q2_0 => 42,
);
my @FUNCS = qw(type_name type_size blck_size type_sizef is_quantized requires_imatrix can_quantize row_size
    type_count all_types all_quantized_types type_from_name type_info quantize dequantize);

# ggml's own spelling of a constant's type: q4_K, iq2_xxs, f32.
sub ggml_name { my $n = lc shift; $n =~ s/_k\z/_K/; return $n }

# Largest absolute error and root mean square error of @$back against @$orig.
sub errors {
    my ($orig, $back) = @_;
    my ($max, $ss) = (0, 0);
    for my $i (0 .. $#$orig) {
        my $e = abs($orig->[$i] - $back->[$i]);
        $e = 9**9**9 if $e != $e;
        $max = $e if $e > $max;
        $ss += $e * $e;
    }
    return ($max, sqrt($ss / @$orig));
}

# Deterministic values in [-1, 1): a linear congruential generator.
sub pseudo_random {
    my ($n, $seed) = @_;
    my @v;
    for (1 .. $n) {
        $seed = ($seed * 1103515245 + 12345) % 2**31;
        push @v, $seed / 2**30 - 1;
    }
    return @v;
}

# --- exports --------------------------------------------------------------------

{
    package Quant::Test::Nothing;
    Lugh::Quant->import;
    ::ok(!defined &Quant::Test::Nothing::Q4_K && !defined &Quant::Test::Nothing::type_name,
        'nothing is exported by default');

    package Quant::Test::Types;
    Lugh::Quant->import(':types');
    ::ok(!(grep { !defined &{"Quant::Test::Types::$_"} } keys(%ID), 'TYPE_COUNT'), ':types exports every constant');
    ::ok(!(grep { defined &{"Quant::Test::Types::$_"} } @FUNCS), '... and no function');

    package Quant::Test::Funcs;
    Lugh::Quant->import(':funcs');
    ::ok(!(grep { !defined &{"Quant::Test::Funcs::$_"} } @FUNCS), ':funcs exports every function');
    ::ok(!(grep { defined &{"Quant::Test::Funcs::$_"} } keys %ID), '... and no constant');

    package Quant::Test::All;
    Lugh::Quant->import(':all');
    ::ok(!(grep { !defined &{"Quant::Test::All::$_"} } keys(%ID), 'TYPE_COUNT', @FUNCS), ':all exports both');
    ::is(Quant::Test::All::Q4_K(), 12, '... the constants are the ones of Lugh::Quant');
    ::is(Quant::Test::All::type_name(12), 'q4_K', '... and the functions');

    package Quant::Test::Some;
    Lugh::Quant->import(qw(Q8_0 type_info));
    ::ok(defined &Quant::Test::Some::Q8_0 && defined &Quant::Test::Some::type_info, 'single names');
    ::ok(!defined &Quant::Test::Some::Q4_K && !defined &Quant::Test::Some::type_name, '... only those');

    package main;
}
is_deeply([ sort @{ $Lugh::Quant::EXPORT_TAGS{types} } ], [ sort keys(%ID), 'TYPE_COUNT' ], ':types is exactly the constants');
is_deeply([ sort @{ $Lugh::Quant::EXPORT_TAGS{funcs} } ], [ sort @FUNCS ], ':funcs is exactly the functions');
croaks_like(sub { Lugh::Quant->import(':bogus') },
    qr/^Unknown export tag ':bogus' \(Lugh::Quant has :types, :funcs and :all\)/, 'unknown export tag');
croaks_like(sub { Lugh::Quant->import('nonesuch') }, qr/^'nonesuch' is not exported by Lugh::Quant/, 'unknown export name');
croaks_like(sub { Lugh::Quant->import('_quantize') }, qr/^'_quantize' is not exported by Lugh::Quant/, 'private subs are not exported');
croaks_like(sub { Lugh::Quant->import('Q4_K', 'Q9_Z') }, qr/^'Q9_Z' is not exported by Lugh::Quant/,
    'one unknown name among good ones');
ok(!eval "package Quant::Test::Eval; use Lugh::Quant qw(:nope); 1", 'use with an unknown tag fails at compile time');
like($@, qr/^Unknown export tag ':nope'/, '... with the message');

BEGIN { Lugh::Quant->import(':all') }

# --- constants --------------------------------------------------------------------

for my $name (sort { $ID{$a} <=> $ID{$b} } keys %ID) {
    my $value = eval { no strict 'refs'; &{"Lugh::Quant::$name"}() };
    is($value, $ID{$name}, "$name is ggml's id $ID{$name}");
    is(type_from_name(ggml_name($name)), $ID{$name}, "$name == type_from_name('" . ggml_name($name) . "')");
}
cmp_ok(TYPE_COUNT, '>=', 30, 'TYPE_COUNT >= 30');
is(TYPE_COUNT, type_count(), 'TYPE_COUNT == type_count()');
is(TYPE_COUNT, 43, 'TYPE_COUNT is 43 (ggml 0.26: Q1_0, Q2_0, NVFP4 after MXFP4)');
my @all = all_types();
is(TYPE_COUNT, $all[-1] + 1, 'TYPE_COUNT is one more than the largest id');
is_deeply([ sort { $a <=> $b } @all ], [ sort { $a <=> $b } values %ID ], 'all_types: every id with a constant, and only those');
is(scalar(grep { defined &{"Lugh::Quant::$_"} } @Lugh::Quant::TYPES), scalar(@Lugh::Quant::TYPES), '@TYPES are all defined');

# --- per-type functions ---------------------------------------------------------------

is(type_name(F32), 'f32', 'type_name F32');
is(type_name(F16), 'f16', 'type_name F16');
is(type_name(Q4_0), 'q4_0', 'type_name Q4_0');
is(type_name(Q4_K), 'q4_K', 'type_name Q4_K');
is(type_name(Q8_0), 'q8_0', 'type_name Q8_0');
is(type_name(IQ2_XS), 'iq2_xs', 'type_name IQ2_XS');
is(type_name(BF16), 'bf16', 'type_name BF16');
is(type_name(MXFP4), 'mxfp4', 'type_name MXFP4');
is(type_name(NVFP4), 'nvfp4', 'type_name NVFP4');
is(type_name(-1), 'unknown', 'type_name -1 is unknown');
is(type_name(9999), 'unknown', 'type_name 9999 is unknown');
is(type_name(4), 'unknown', 'type_name of a removed id is unknown');
is_deeply([ map { type_name($_) } (Q4_K) x 3 ], [ ('q4_K') x 3 ], 'type_name in a list');

is(type_size(F32), 4, 'type_size F32');
is(type_size(F16), 2, 'type_size F16');
is(type_size(I32), 4, 'type_size I32');
is(type_size(Q4_0), 18, 'type_size Q4_0');
is(type_size(Q4_K), 144, 'type_size Q4_K');
is(type_size(Q8_0), 34, 'type_size Q8_0');
is(blck_size(F32), 1, 'blck_size F32');
is(blck_size(F16), 1, 'blck_size F16');
is(blck_size(Q4_0), 32, 'blck_size Q4_0');
is(blck_size(Q4_K), 256, 'blck_size Q4_K');
is(blck_size(Q1_0), 128, 'blck_size Q1_0');
is(type_sizef(F32), 4, 'type_sizef F32');
is(type_sizef(F16), 2, 'type_sizef F16');
is(type_sizef(Q4_0), 0.5625, 'type_sizef Q4_0');
is(type_sizef(Q4_K), 0.5625, 'type_sizef Q4_K');
is(type_sizef(Q6_K), 210 / 256, 'type_sizef Q6_K');

ok(!is_quantized($_), type_name($_) . ' is not quantized') for F32, F16, BF16, I32;
ok(is_quantized($_), type_name($_) . ' is quantized') for Q4_0, Q4_K, Q8_0, IQ2_XS, TQ1_0, MXFP4;
ok(!is_quantized(9999), 'is_quantized of an unknown id is false');
ok(!requires_imatrix($_), type_name($_) . ' needs no importance matrix') for F32, Q4_0, Q4_K, IQ3_XXS;
ok(requires_imatrix($_), type_name($_) . ' needs an importance matrix') for IQ2_XXS, IQ2_XS, IQ1_S;
ok(can_quantize($_), type_name($_) . ': can_quantize') for Q4_0, Q4_K, Q6_K, TQ2_0, F16;
ok(!can_quantize($_), type_name($_) . ': cannot quantize') for IQ2_XXS, Q8_1, Q8_K, I32;
ok(!can_quantize(9999), 'can_quantize of an unknown id is false');

is(row_size(F32, 100), 400, 'row_size F32 100');
is(row_size(F16, 100), 200, 'row_size F16 100');
is(row_size(Q4_K, 512), 288, 'row_size Q4_K 512');
cmp_ok(row_size(Q4_0, 256), '<', row_size(F32, 256), 'a Q4_0 row is smaller than an F32 row');
is(row_size(Q4_0, 0), 0, 'row_size of no elements');

cmp_ok(type_count(), '>=', 30, 'type_count >= 30');
cmp_ok(scalar(@all), '>=', 20, 'all_types: at least 20');
ok((grep { $_ == F32 } @all) && (grep { $_ == Q4_K } @all), 'all_types has F32 and Q4_K');
my @quantized = all_quantized_types();
cmp_ok(scalar(@quantized), '>=', 15, 'all_quantized_types: at least 15');
ok(!(grep { !is_quantized($_) } @quantized), 'every one is quantized');
ok(!(grep { $_ == F32 || $_ == F16 || $_ == BF16 } @quantized), 'F32, F16 and BF16 are not among them');
is_deeply([ sort { $a <=> $b } @quantized ], [ sort { $a <=> $b } grep { is_quantized($_) } @all ],
    'all_quantized_types is all_types filtered by is_quantized');

is(type_from_name('f32'), F32, "type_from_name('f32')");
is(type_from_name('f16'), F16, "type_from_name('f16')");
is(type_from_name('q4_K'), Q4_K, "type_from_name('q4_K')");
is(type_from_name('q8_0'), Q8_0, "type_from_name('q8_0')");
is(type_from_name('nonexistent'), -1, 'type_from_name of an unknown name is -1');
is(type_from_name('Q4_K'), -1, 'type_from_name is case-sensitive, as ggml spells names');
is(type_from_name(''), -1, 'type_from_name of the empty string is -1');

{
    my $info = type_info(Q4_K);
    is(ref $info, 'HASH', 'type_info returns a hash reference');
    is_deeply([ sort keys %$info ],
        [ sort qw(type name size blck_size sizef is_quantized requires_imatrix can_quantize can_dequantize) ], 'type_info keys');
    is($info->{type}, Q4_K, 'type_info Q4_K: type');
    is($info->{name}, 'q4_K', 'type_info Q4_K: name');
    is($info->{size}, 144, 'type_info Q4_K: size');
    is($info->{blck_size}, 256, 'type_info Q4_K: blck_size');
    is($info->{sizef}, 0.5625, 'type_info Q4_K: sizef');
    ok($info->{is_quantized}, 'type_info Q4_K: is_quantized');
    ok(!$info->{requires_imatrix}, 'type_info Q4_K: requires_imatrix');
    ok($info->{can_quantize} && $info->{can_dequantize}, 'type_info Q4_K: can_quantize and can_dequantize');
    $info = type_info(F32);
    is($info->{name}, 'f32', 'type_info F32: name');
    ok(!$info->{is_quantized}, 'type_info F32: not quantized');
    is($info->{size}, 4, 'type_info F32: size');
    is($info->{blck_size}, 1, 'type_info F32: blck_size');
    for my $t (@all) {
        my $i = type_info($t);
        my $ok = $i->{type} == $t && $i->{name} eq type_name($t) && $i->{size} == type_size($t)
            && $i->{blck_size} == blck_size($t) && $i->{sizef} == type_sizef($t)
            && !!$i->{is_quantized} == !!is_quantized($t) && !!$i->{requires_imatrix} == !!requires_imatrix($t)
            && !!$i->{can_quantize} == !!can_quantize($t);
        ok($ok, "type_info($i->{name}) agrees with the single functions");
    }
}

for my $f (qw(type_size blck_size type_sizef requires_imatrix type_info)) {
    no strict 'refs';
    my $code = \&{"Lugh::Quant::$f"};
    croaks_like(sub { $code->(999) }, qr/^Lugh::Quant::$f: Invalid type: 999\b/, "$f(999)");
    croaks_like(sub { $code->(-1) }, qr/^Lugh::Quant::$f: Invalid type: -1\b/, "$f(-1)");
}
croaks_like(sub { row_size(999, 10) }, qr/^Lugh::Quant::row_size: Invalid type: 999\b/, 'row_size(999, n)');
croaks_like(sub { row_size(Q4_K, 100) },
    qr/^Lugh::Quant::row_size: a row of 100 elements is not a whole number of q4_K blocks \(256 elements each\)/,
    'row_size of a partial block');

# --- Tensor type methods ------------------------------------------------------------

my $ctx = Lugh::Context->new(mem_size => 10 * 1024 * 1024);
{
    my $t = Lugh::Tensor->new_f32($ctx, 100);
    is($t->type, F32, 'tensor type F32');
    is($t->type_name, 'f32', 'tensor type_name f32');
    is($t->type_size, 4, 'tensor type_size');
    is($t->blck_size, 1, 'tensor blck_size');
    ok(!$t->is_quantized, 'tensor is not quantized');
    is($t->nbytes, 400, 'tensor nbytes');
}

# --- quantize / dequantize of a tensor ------------------------------------------------

my @sine = map { sin($_ * 0.1) } 0 .. 255;
my $f32 = Lugh::Tensor->new_f32($ctx, 256);
$f32->set_f32(@sine);
{
    my $q8 = $f32->quantize($ctx, Q8_0);
    ok($q8, 'quantize($ctx, Q8_0)');
    isa_ok($q8, 'Lugh::Tensor');
    is($q8->type, Q8_0, 'Q8_0 tensor type');
    is($q8->type_name, 'q8_0', 'Q8_0 tensor type_name');
    ok($q8->is_quantized, 'Q8_0 tensor is quantized');
    is($q8->nbytes, 8 * 34, 'Q8_0 tensor nbytes: 8 blocks of 34');
    cmp_ok($q8->nbytes, '<', $f32->nbytes, 'smaller than F32');
    is_deeply([ $q8->shape ], [256], 'same shape');
    is($q8->context->id, $ctx->id, 'in the context given');
    my $back = $q8->dequantize($ctx);
    is($back->type, F32, 'dequantize gives F32');
    is($back->type_name, 'f32', 'dequantized type_name');
    is($back->nelements, 256, 'dequantized nelements');
    my @back = $back->get_f32;
    my ($max) = errors(\@sine, \@back);
    cmp_ok($max, '<', 0.01, "Q8_0 max error $max < 0.01");
    is_deeply([ $q8->get_f32 ], \@back, 'get_f32 of a quantized tensor decodes it');

    my $other = Lugh::Context->new(mem_size => 1024 * 1024);
    my $q8b = $f32->quantize($other, Q8_0);
    is($q8b->context->id, $other->id, 'quantize($other_ctx, ...) puts the result there');
    is($q8b->get_bytes, $q8->get_bytes, '... the same bytes');
    my $q8c = $f32->quantize(Q8_0);
    is($q8c->context->id, $ctx->id, 'quantize($type) puts the result in the tensor\'s own context');
    is($q8c->get_bytes, $q8->get_bytes, '... the same bytes');
    is($f32->quantize('q8_0')->get_bytes, $q8->get_bytes, 'quantize by type name');
    is($f32->quantize('Q8_0')->get_bytes, $q8->get_bytes, 'quantize by type name in capitals');
    is($f32->quantize(8)->get_bytes, $q8->get_bytes, 'quantize by type id');
    my $back2 = $q8->dequantize;
    is($back2->context->id, $ctx->id, 'dequantize() puts the result in the tensor\'s own context');
    is($back2->get_bytes, $back->get_bytes, '... the same values');
    is($q8->dequantize($other)->context->id, $other->id, 'dequantize($other_ctx)');

    my $q4k = $f32->quantize($ctx, Q4_K);
    is($q4k->type_name, 'q4_K', 'Q4_K tensor');
    is($q4k->nbytes, 144, 'Q4_K: one block of 144 bytes');
    cmp_ok($f32->nbytes / $q4k->nbytes, '>', 1.5, 'Q4_K compresses');
    is($q4k->dequantize($ctx)->nelements, 256, 'Q4_K dequantized: 256 elements');

    my $m = Lugh::Tensor->new_f32($ctx, 256, 256);
    $m->set_f32(map { sin($_ / 100) } 1 .. 65536);
    my $mq = $m->quantize($ctx, Q4_K);
    is($mq->nbytes, 256 * 144, 'Q4_K of 256x256: 36864 bytes');
    is_deeply([ $mq->dequantize($ctx)->shape ], [ 256, 256 ], '... dequantized keeps the shape');

    my $h = Lugh::Tensor->new_f16($ctx, 64);
    $h->set_f32(map { $_ / 64 } 0 .. 63);
    my $hd = $h->dequantize;
    is($hd->type_name, 'f32', 'dequantize of an F16 tensor gives F32');
    is_deeply([ $hd->get_f32 ], [ map { $_ / 64 } 0 .. 63 ], '... its values');
    my $hq = $h->quantize(Q8_0);
    is($hq->type_name, 'q8_0', 'quantize of an F16 tensor');
    is($hq->get_bytes, quantize(Q8_0, [ map { $_ / 64 } 0 .. 63 ]), '... the bytes of its values');
}

croaks_like(sub { $f32->quantize($ctx, -1) }, qr/^Lugh::Tensor->quantize: Invalid destination type: -1\b/, 'quantize to type -1');
croaks_like(sub { $f32->quantize($ctx, 999) }, qr/^Lugh::Tensor->quantize: Invalid destination type: 999\b/, 'quantize to type 999');
croaks_like(sub { $f32->quantize(4) }, qr/^Lugh::Tensor->quantize: Invalid destination type: 4\b/, 'quantize to a removed type id');
croaks_like(sub { $f32->quantize($ctx, F32) }, qr/^Lugh::Tensor->quantize: Destination type f32 is not a quantized type/,
    'quantize to F32');
croaks_like(sub { $f32->quantize(F16) }, qr/^Lugh::Tensor->quantize: Destination type f16 is not a quantized type/, 'quantize to F16');
croaks_like(sub { $f32->quantize(I32) }, qr/^Lugh::Tensor->quantize: Destination type i32 is not a quantized type/, 'quantize to I32');
croaks_like(sub { $f32->quantize('bogus') }, qr/^Lugh::Tensor->quantize: unknown type 'bogus'/, 'quantize to an unknown type name');
croaks_like(sub { $f32->quantize }, qr/^Usage: \$tensor->quantize\(\[\$ctx,\] \$type\)/, 'quantize without a type');
croaks_like(sub { $f32->quantize($ctx, Q8_0, 1) }, qr/^Usage: \$tensor->quantize/, 'quantize with too many arguments');
croaks_like(sub { Lugh::Tensor->new_f32($ctx, 100)->dequantize($ctx) },
    qr/^Lugh::Tensor->dequantize: Source tensor is not quantized \(type: f32\)/, 'dequantize of an F32 tensor');
croaks_like(sub { Lugh::Tensor->new_i32($ctx, 4)->dequantize }, qr/^Lugh::Tensor->dequantize: Source tensor is not quantized \(type: i32\)/,
    'dequantize of an I32 tensor');
croaks_like(sub { $f32->dequantize($ctx, 1) }, qr/^Usage: \$tensor->dequantize\(\[\$ctx\]\)/, 'dequantize with too many arguments');
croaks_like(sub { $f32->quantize(Q8_0)->quantize(Q4_0) },
    qr/^Lugh::Tensor->quantize: Source tensor must be F32 \(or F16\/BF16\), got q8_0/, 'quantize of a quantized tensor');
croaks_like(sub { Lugh::Tensor->new_f32($ctx, 100)->quantize(Q4_0) },
    qr/^Lugh::Tensor->quantize: a row of 100 elements is not a whole number of q4_0 blocks \(32 elements each\)/,
    'quantize of a partial block');
croaks_like(sub { $f32->quantize(Q4_K)->quantize($ctx, IQ2_XXS) }, qr/^Lugh::Tensor->quantize: /,
    'quantize of a quantized tensor to an imatrix type');

# --- loss measurement (0.12) ------------------------------------------------------------

{
    my @data = map { sin($_ * 0.1) * 0.5 + cos($_ * 0.7) * 0.3 } 0 .. 255;
    my $t = Lugh::Tensor->new_f32($ctx, 256);
    $t->set_f32(@data);
    my %rmse;
    for my $type (Q8_0, Q4_K, Q4_0, Q2_K) {
        my @back = $t->quantize($ctx, $type)->dequantize($ctx)->get_f32;
        my ($max, $rmse) = errors(\@data, \@back);
        ok($max > 0 && $max < 1.0, type_name($type) . ": 0 < max error $max < 1");
        $rmse{$type} = $rmse;
    }
    ok($rmse{+Q8_0} < $rmse{+Q4_K} && $rmse{+Q4_K} < $rmse{+Q2_K}, "RMSE Q8_0 < Q4_K < Q2_K ($rmse{+Q8_0}, $rmse{+Q4_K}, $rmse{+Q2_K})");
}

# --- acceptance: 4096 values, RMSE ordered by bits, function == method --------------

{
    my @values = pseudo_random(4096, 20260126);
    my $packed = pack 'f<*', @values;
    my @single = unpack 'f<*', $packed;    # the values as F32 holds them
    my $t = Lugh::Tensor->new_f32($ctx, 256, 16);
    $t->set_f32(@values);
    is($t->get_bytes, $packed, '4096 values in a 256x16 tensor');
    my @order = (Q8_0, Q6_K, Q5_K, Q4_K, Q3_K, Q2_K);
    my (@by_function, @by_method);
    for my $type (@order) {
        my $name  = type_name($type);
        my $bytes = quantize($type, \@values, 256);
        is(length $bytes, 16 * row_size($type, 256), "$name: 16 rows of " . row_size($type, 256) . ' bytes');
        is(quantize($type, $packed, 256), $bytes, "$name: packed floats give the same bytes as an array");
        is(quantize($type, \@values), $bytes, "$name: one row of 4096 gives the same bytes as 16 rows of 256");
        my $q = $t->quantize($type);
        ok($q->get_bytes eq $bytes, "$name: Tensor->quantize(...)->get_bytes eq Lugh::Quant::quantize");
        my @back = dequantize($type, $bytes);
        is(scalar @back, 4096, "$name: dequantize gives 4096 values");
        my $d = $q->dequantize;
        ok($d->get_bytes eq scalar(dequantize($type, $bytes)), "$name: Tensor->dequantize eq Lugh::Quant::dequantize");
        push @by_function, (errors(\@single, \@back))[1];
        push @by_method, (errors(\@single, [ $d->get_f32 ]))[1];
    }
    my $list = join ' < ', map { sprintf '%s %.5f', type_name($order[$_]), $by_function[$_] } 0 .. $#order;
    ok(!(grep { $by_function[$_] >= $by_function[ $_ + 1 ] } 0 .. $#order - 1), "RMSE strictly ordered: $list");
    ok(!(grep { $by_method[$_] >= $by_method[ $_ + 1 ] } 0 .. $#order - 1), 'the same through Lugh::Tensor');
    is_deeply(\@by_method, \@by_function, 'the same RMSE by both paths');
    cmp_ok($by_function[0], '<', 0.005, 'Q8_0 RMSE is small');
    cmp_ok($by_function[-1], '<', 0.2, 'Q2_K RMSE is bounded');
}

# --- every quantized type ----------------------------------------------------------------

{
    my @values = pseudo_random(1024, 7);
    my @single = unpack 'f<*', pack 'f<*', @values;
    my $t = Lugh::Tensor->new_f32($ctx, 512, 2);
    $t->set_f32(@values);
    my ($made, $refused) = (0, 0);
    for my $type (all_quantized_types()) {
        my $name = type_name($type);
        my $info = type_info($type);
        if (can_quantize($type)) {
            $made++;
            my $bytes = eval { quantize($type, \@values, 512) };
            ok(defined $bytes, "$name: quantize") or diag $@;
            next unless defined $bytes;
            is(length $bytes, 2 * row_size($type, 512), "$name: length");
            my @back = dequantize($type, $bytes);
            is(scalar @back, 1024, "$name: dequantize");
            my ($max, $rmse) = errors(\@single, \@back);
            cmp_ok($max, '<', 1.5, "$name: max error $max < 1.5 for values in [-1, 1]");
            cmp_ok($rmse, '<', 0.35, "$name: RMSE $rmse < 0.35");
            cmp_ok($rmse, '<', 0.07, "$name: RMSE $rmse < 0.07 with 4.5 or more bits a value") if $info->{sizef} * 8 >= 4.5;
            my $q = eval { $t->quantize($type) };
            ok($q && $q->get_bytes eq $bytes, "$name: Tensor->quantize gives the same bytes") or diag $@;
            ok($q && $q->dequantize->get_bytes eq pack('f<*', @back), "$name: Tensor->dequantize gives the same values");
        }
        else {
            $refused++;
            my $why = requires_imatrix($type) ? qr/cannot quantize to \Q$name\E: its quantizer needs an importance matrix/
                : qr/cannot quantize to \Q$name\E: ggml has no quantizer for it/;
            croaks_like(sub { quantize($type, \@values, 512) }, qr/^Lugh::Quant::quantize: $why/, "$name: Lugh::Quant::quantize refuses");
            croaks_like(sub { $t->quantize($type) }, qr/^Lugh::Tensor->quantize: $why/, "$name: Tensor->quantize refuses");
        }
        if ($info->{can_dequantize}) {
            my @zero = dequantize($type, "\0" x type_size($type));
            ok(@zero == blck_size($type) && !(grep { $_ != 0 } @zero), "$name: a block of zero bytes decodes to zeros");
        }
        else {
            croaks_like(sub { dequantize($type, "\0" x type_size($type)) },
                qr/^Lugh::Quant::dequantize: cannot dequantize \Q$name\E: ggml has no decoder for it/, "$name: dequantize refuses");
        }
    }
    cmp_ok($made, '>=', 20, "$made quantized types can be made");
    is($refused, 5, 'five cannot: three need an importance matrix, q8_1 and q8_K have no quantizer');
}

for my $type (IQ2_XXS, IQ2_XS, IQ1_S) {
    my $name = type_name($type);
    croaks_like(sub { quantize($type, [ (0.5) x 256 ]) }, qr/importance matrix/, "$name: quantize names the importance matrix");
    croaks_like(sub { $f32->quantize($ctx, $type) }, qr/importance matrix/, "$name: Tensor->quantize names the importance matrix");
}

# --- Lugh::Quant::quantize / dequantize --------------------------------------------------

{
    my $bytes = quantize(Q4_0, [ map { $_ / 32 } 0 .. 63 ]);
    is(length $bytes, 36, 'quantize Q4_0 of 64 values: 2 blocks of 18');
    my @back = dequantize(Q4_0, $bytes);
    is(scalar @back, 64, 'dequantize in list context: the values');
    my $packed = dequantize(Q4_0, $bytes);
    is(length $packed, 256, 'dequantize in scalar context: packed floats');
    is_deeply([ unpack 'f<*', $packed ], \@back, '... the same values');
    {
        my @half = dequantize(Q8_0, quantize(Q8_0, [ (0.5) x 32 ]));
        ok(@half == 32 && !(grep { abs($_ - 0.5) > 1e-4 } @half), 'Q8_0 of a constant: within the F16 rounding of its scale')
            or diag "@half";
    }
    is_deeply([ dequantize(Q4_0, '') ], [], 'dequantize of no bytes');

    my @h = (0.5, -1, 65504, 1 / 1024);
    is(quantize(F16, \@h), pack('v*', 0x3800, 0xbc00, 0x7bff, 0x1400), 'quantize to F16: IEEE half precision');
    is_deeply([ dequantize(F16, quantize(F16, \@h)) ], \@h, 'F16 round trip');
    is(quantize(BF16, [ 1, -2 ]), pack('v*', 0x3f80, 0xc000), 'quantize to BF16');
    is_deeply([ dequantize(BF16, quantize(BF16, [ 1.5, -0.25 ])) ], [ 1.5, -0.25 ], 'BF16 round trip');
    is(quantize(F32, [ 1.5, 2 ]), pack('f<*', 1.5, 2), 'quantize to F32 packs the floats');
    is_deeply([ dequantize(F32, pack 'f<*', 1.5, 2) ], [ 1.5, 2 ], 'dequantize of F32');

    my $nan = 9**9**9 / 9**9**9;
    my @with_nan = ((0.25) x 40, $nan, (0.25) x 23);
    croaks_like(sub { quantize(Q4_0, \@with_nan) }, qr/^Lugh::Quant::quantize: value 40 is NaN and cannot be quantized to q4_0/,
        'NaN in an array');
    croaks_like(sub { quantize(Q4_K, pack('f<*', (0) x 255, $nan)) }, qr/^Lugh::Quant::quantize: value 255 is NaN/, 'NaN in packed floats');
    croaks_like(sub { quantize(Q8_0, [ (0) x 31, 9**9**9 ]) }, qr/^Lugh::Quant::quantize: value 31 is inf and cannot be quantized/,
        'infinity');
    croaks_like(sub { quantize(Q8_0, [ -9**9**9, (0) x 31 ]) }, qr/^Lugh::Quant::quantize: value 0 is -?inf\b/, 'minus infinity');
    my $tn = Lugh::Tensor->new_f32($ctx, 64);
    $tn->set_f32(@with_nan);
    croaks_like(sub { $tn->quantize(Q4_0) }, qr/^Lugh::Tensor->quantize: value 40 is NaN and cannot be quantized to q4_0/,
        'NaN in a tensor');

    croaks_like(sub { quantize(Q4_0, [ (0) x 31 ]) },
        qr/^Lugh::Quant::quantize: a row of 31 elements is not a whole number of q4_0 blocks \(32 elements each\)/, 'a partial block');
    croaks_like(sub { quantize(Q4_K, [ (0) x 512 ], 128) },
        qr/^Lugh::Quant::quantize: a row of 128 elements is not a whole number of q4_K blocks \(256 elements each\)/,
        'rows shorter than a block');
    croaks_like(sub { quantize(Q4_0, [ (0) x 96 ], 64) }, qr/^Lugh::Quant::quantize: 96 values are not a whole number of rows of 64/,
        'values not a whole number of rows');
    croaks_like(sub { quantize(Q4_0, 'abc') }, qr/^Lugh::Quant::quantize: packed data must be whole f32 values \(pack 'f<\*'\), got 3 bytes/,
        'packed data of a wrong length');
    croaks_like(sub { quantize(Q4_0, [ (0) x 32 ], 0) }, qr/^Lugh::Quant::quantize: n_per_row must be positive, got 0/, 'n_per_row 0');
    croaks_like(sub { quantize(Q4_0, []) }, qr/^Lugh::Quant::quantize: .*(?:no values|empty|nothing)/i,
        'no values: says so (n_per_row was not given)');
    croaks_like(sub { quantize(999, [ (0) x 32 ]) }, qr/^Lugh::Quant::quantize: Invalid type: 999\b/, 'quantize to type 999');
    croaks_like(sub { quantize(I32, [ (0) x 32 ]) }, qr/^Lugh::Quant::quantize: cannot quantize to i32: ggml has no quantizer for it/,
        'quantize to I32');
    croaks_like(sub { quantize(Q4_0) }, qr/^Usage: Lugh::Quant::quantize\(\$type, /, 'quantize without values');
    croaks_like(sub { dequantize(Q4_0) }, qr/^Usage: Lugh::Quant::dequantize\(\$type, \$bytes\)/, 'dequantize without bytes');
    croaks_like(sub { dequantize(Q4_0, 'abc') },
        qr/^Lugh::Quant::dequantize: 3 bytes are not a whole number of q4_0 blocks \(18 bytes each\)/, 'dequantize of a partial block');
    croaks_like(sub { dequantize(I32, pack 'l<', 1) }, qr/^Lugh::Quant::dequantize: cannot dequantize i32: ggml has no decoder for it/,
        'dequantize of I32');
    croaks_like(sub { dequantize(-1, '') }, qr/^Lugh::Quant::dequantize: Invalid type: -1\b/, 'dequantize of type -1');
}

for my $type (all_quantized_types()) {
    my $i = type_info($type);
    note(sprintf '%-8s %6.3f bits/weight, blocks of %3d%s%s', $i->{name}, $i->{sizef} * 8, $i->{blck_size},
        $i->{requires_imatrix} ? ' (needs imatrix)' : '', $i->{can_quantize} ? '' : ' (cannot quantize)');
}

done_testing;
