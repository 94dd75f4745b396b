# One hand-made file per class of flaw found in ggml's own GGUF reader
# (integer overflows in string and array sizes, counts that cannot fit,
# tensor data out of bounds or overlapping, zero and huge dimensions, too
# many dimensions, products that overflow, bad alignment values, duplicate
# names, unaligned offsets, unknown types). Lugh reads GGUF itself: each must
# croak naming the file and the problem, and leave the process usable.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $MAX = 0xFFFF_FFFF_FFFF_FFFF;

sub str { my ($s) = @_; return pack('Q<', length $s) . $s }
sub kv_u32 { my ($k, $v) = @_; return str($k) . pack('VV', 4, $v) }
sub kv_str { my ($k, $v) = @_; return str($k) . pack('V', 8) . str($v) }
# a tensor info: name, dims, ggml type, offset
sub tinfo { my ($name, $dims, $type, $offset) = @_; return str($name) . pack('V', scalar @$dims) . pack('Q<*', @$dims) . pack('VQ<', $type, $offset) }
sub file {
    my (%a) = @_;
    my $head = 'GGUF' . pack('VQ<Q<', 3, $a{n_tensors} // scalar @{ $a{tensors} // [] }, $a{n_kv} // scalar @{ $a{kv} // [] });
    $head .= join '', @{ $a{kv} // [] }, @{ $a{tensors} // [] };
    $head .= $a{raw} // '';
    $head .= "\0" x ((32 - length($head) % 32) % 32);
    return $head . ($a{data} // '');
}
my $arch = kv_str('general.architecture', 'llama');
my $f32_16 = pack('f<*', (0.5) x 16);

my %cases = (
    'string length 2**64-1'          => [ file(raw => pack('Q<', $MAX) . 'x', n_kv => 1), qr/string|length|truncated|ends/ ],
    'string longer than the file'    => [ file(raw => pack('Q<', 1 << 40) . 'abc', n_kv => 1), qr/string|length|truncated|ends/ ],
    'array count overflowing n*8'    => [ file(kv => [ str('a') . pack('VVQ<', 9, 10, 1 << 61) ]), qr/array|count|truncated|ends/ ],
    'array of strings, huge count'   => [ file(kv => [ str('a') . pack('VVQ<', 9, 8, $MAX) ]), qr/array|count|truncated|ends/ ],
    'tensor count 2**63'             => [ file(kv => [$arch], n_tensors => 1 << 63), qr/tensor|count|truncated|ends/ ],
    'key count 2**63'                => [ file(n_kv => 1 << 63), qr/key|count|metadata|truncated|ends/ ],
    'tensor data past the end'       => [ file(kv => [$arch], tensors => [ tinfo('t', [16], 0, 1 << 20) ], data => $f32_16), qr/t\b.*(?:out of|beyond|past|end|bounds)|bounds|ends/ ],
    'overlapping tensors'            => [ file(kv => [$arch], tensors => [ tinfo('a', [16], 0, 0), tinfo('b', [16], 0, 32) ], data => $f32_16 . $f32_16), qr/overlap|offset|b\b/ ],
    'a zero dimension'               => [ file(kv => [$arch], tensors => [ tinfo('t', [0], 0, 0) ], data => $f32_16), qr/dim|zero|0/ ],
    'a dimension of 2**63'           => [ file(kv => [$arch], tensors => [ tinfo('t', [1 << 63], 0, 0) ], data => $f32_16), qr/dim|large|overflow|size|bounds/ ],
    'five dimensions'                => [ file(kv => [$arch], tensors => [ tinfo('t', [ 1, 1, 1, 1, 16 ], 0, 0) ], data => $f32_16), qr/dimension|n_dims|5/ ],
    'dimensions whose product wraps' => [ file(kv => [$arch], tensors => [ tinfo('t', [ 1 << 32, 1 << 32, 16 ], 0, 0) ], data => $f32_16), qr/overflow|large|size|dim|bounds/ ],
    'alignment as a string'          => [ file(kv => [ $arch, kv_str('general.alignment', '32') ]), qr/alignment/ ],
    'alignment 0'                    => [ file(kv => [ $arch, kv_u32('general.alignment', 0) ]), qr/alignment/ ],
    'alignment not a power of two'   => [ file(kv => [ $arch, kv_u32('general.alignment', 24) ]), qr/alignment/ ],
    'duplicate tensor names'         => [ file(kv => [$arch], tensors => [ tinfo('t', [16], 0, 0), tinfo('t', [16], 0, 64) ], data => $f32_16 x 4), qr/duplicate|twice|t\b/ ],
    'duplicate keys'                 => [ file(kv => [ $arch, $arch ]), qr/duplicate|twice|general\.architecture/ ],
    'an unaligned tensor offset'     => [ file(kv => [$arch], tensors => [ tinfo('t', [16], 0, 1) ], data => $f32_16 x 2), qr/align|offset/ ],
    'an unknown tensor type'         => [ file(kv => [$arch], tensors => [ tinfo('t', [16], 999, 0) ], data => $f32_16), qr/type|999/ ],
    'an unknown value type'          => [ file(raw => str('k') . pack('V', 77), n_kv => 1), qr/type|77/ ],
);

for my $name (sort keys %cases) {
    my ($bytes, $re) = @{ $cases{$name} };
    (my $file = "$dir/$name.gguf") =~ s/[^\w\/.-]+/_/g;
    open my $fh, '>:raw', $file or die $!;
    print {$fh} $bytes;
    close $fh;
    my $ok = eval { Lugh::Model->new(model => $file); 1 };
    ok(!$ok, "$name: croaks") or next;
    like($@, qr/\Q$file\E/, "$name: names the file");
    like($@, $re, "$name: names the problem") or diag $@;
    note "$name: $@";
}

my $model = Lugh::Model->new(model => tiny_model($dir));
ok($model->n_tensors > 0, 'a valid file still loads afterwards');

done_testing;
