# Bad input to Lugh::Model: every case croaks with a message that names the
# problem (and the path), at the caller's line, and the process stays usable.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::GGUF qw(write_gguf gguf_bytes);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $good = write_gguf("$dir/good.gguf", kv => ['general.architecture' => [string => 'x']]);

croaks_like(sub { Lugh::Model->new }, qr/missing model => \$path/, 'no arguments');
croaks_like(sub { Lugh::Model->new(model => undef) }, qr/missing model/, 'undef path');
croaks_like(sub { Lugh::Model->new(model => '') }, qr/missing model/, 'empty path');
croaks_like(sub { Lugh::Model->new('odd') }, qr/name => value pairs/, 'odd argument list');
croaks_like(sub { Lugh::Model->new(model => $good, colour => 'red') },
    qr/unknown option 'colour' \(valid options: .*use_mmap/, 'unknown option');
croaks_like(sub { Lugh::Model->new(model => $good, file => $good) }, qr/only one of/, 'model and file');
croaks_like(sub { Lugh::Model->new(model => "$dir/missing.gguf") },
    qr/cannot read '\Q$dir\E\/missing\.gguf': No such file/, 'missing file');
croaks_like(sub { Lugh::Model->new(model => $dir) }, qr/cannot read '\Q$dir\E': it is a directory/, 'a directory');
croaks_like(sub { Lugh::Model->new(model => [1]) }, qr/model path must be a file name/, 'a reference as path');

SKIP: {
    skip 'running as root: permissions do not stop reads', 2 if $> == 0;
    my $locked = write_gguf("$dir/locked.gguf", kv => ['general.architecture' => [string => 'x']]);
    chmod 0, $locked;
    croaks_like(sub { Lugh::Model->new(model => $locked) }, qr/cannot read .*Permission denied/, 'unreadable file');
}

my $write = sub { my ($name, $bytes) = @_; open my $fh, '>:raw', "$dir/$name" or die; print {$fh} $bytes; close $fh; "$dir/$name" };
croaks_like(sub { Lugh::Model->new(model => $write->('empty.gguf', '')) }, qr/is not a GGUF file/, 'empty file');
croaks_like(sub { Lugh::Model->new(model => $write->('text.gguf', "hello world\n" x 10)) }, qr/is not a GGUF file/,
    'text file');
croaks_like(sub { Lugh::Model->new(model => $write->('v1.gguf', gguf_bytes(version => 1))) },
    qr/GGUF version 1, which is not supported/, 'GGUF v1');
croaks_like(sub { Lugh::Model->new(model => $write->('v9.gguf', gguf_bytes(version => 9))) },
    qr/GGUF version 9/, 'GGUF v9');
croaks_like(sub { Lugh::Model->new(model => $write->('noarch.gguf', gguf_bytes(kv => ['a.b' => [u32 => 1]]))) },
    qr/general\.architecture is missing/, 'no architecture');
croaks_like(sub { Lugh::Model->new(model => $write->('badtype.gguf',
        gguf_bytes(kv => ['general.architecture' => [string => 'x'], 'x.block_count' => [string => 'many']]))) },
    qr/x\.block_count has an implausible value/, 'wrong value type for a known key');
croaks_like(sub { Lugh::Model->new(model => $write->('dup.gguf',
        gguf_bytes(kv => ['general.architecture' => [string => 'x'], 'general.architecture' => [string => 'y']]))) },
    qr/appears twice/, 'duplicate key');
croaks_like(sub { Lugh::Model->new(model => $write->('shape.gguf',
        gguf_bytes(kv => ['general.architecture' => [string => 'x']], tensors => [['t', 2, [33], "\0" x 32]]))) },
    qr/not a multiple of the q4_0 block size 32/, 'row not a multiple of the block size');
croaks_like(sub { Lugh::Model->new(model => $write->('gtype.gguf',
        gguf_bytes(kv => ['general.architecture' => [string => 'x']], tensors => [['t', 4, [8], "\0" x 32]]))) },
    qr/unknown ggml type 4/, 'removed ggml type');
croaks_like(sub { Lugh::Model->new(model => $write->('tok.gguf', gguf_bytes(kv => ['general.architecture' => [string => 'x'],
        'tokenizer.ggml.tokens' => [array => string => ['a', 'b']], 'tokenizer.ggml.scores' => [array => f32 => [0]]]))) },
    qr/tokenizer\.ggml\.scores has 1 entries but there are 2 tokens/, 'inconsistent tokenizer arrays');
my $bytes = gguf_bytes(kv => ['general.architecture' => [string => 'x']], tensors => [['t', 0, [8], "\0" x 32]]);
croaks_like(sub { Lugh::Model->new(model => $write->('short.gguf', substr($bytes, 0, -1))) },
    qr/is truncated: the file ends inside the data of tensor 't'/, 'data cut short');
croaks_like(sub { Lugh::Model->new(model => $write->('long.gguf', $bytes . ("\0" x 64))) },
    qr/unexplained bytes after the last tensor/, 'extra bytes after the data');

# Methods called the wrong way.
my $m = Lugh::Model->new(model => $good);
croaks_like(sub { Lugh::Model::n_kv('Lugh::Model') }, qr/not a Lugh::Model object/, 'class method call');
croaks_like(sub { Lugh::Model::n_kv(bless {}, 'Lugh::Model') }, qr/not a Lugh::Model object/, 'hand-blessed hash');
croaks_like(sub { $m->get_kv }, qr/^Usage: Lugh::Model::get_kv\(self, key\)/, 'get_kv without key');
croaks_like(sub { $m->get_kv(undef) }, qr/key is missing/, 'get_kv(undef)');
croaks_like(sub { $m->n_layer(1) }, qr/Usage/, 'accessor with an argument');

# Still usable afterwards.
is($m->architecture, 'x', 'the process is still fine');
done_testing;
