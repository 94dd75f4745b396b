# Damaged GGUF files must croak with a message naming the file, never crash,
# and leave the process usable. Runs several hundred variants of a model:
# truncations at many cut points, and byte changes in its header. The model is
# a tiny synthetic one (t/lib/LughTest/TinyModel.pm), always, and SmolLM2 too
# when it has been fetched.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Copy qw(copy);
use lib 't/lib';
use LughTest qw(model_path);
use LughTest::GGUF qw(header_fields);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $copy = "$dir/damaged.gguf";
my %count;

my $tiny = tiny_model($dir);
subtest 'a tiny synthetic llama' => sub { damage($tiny, Lugh::Model->new(model => $tiny)->n_tensors) };
SKIP: {
    my $smol = model_path('smollm2-135m-q4_1') or skip 'SmolLM2 not fetched (run: perl t/fetch-models)', 1;
    subtest 'SmolLM2' => sub { damage($smol, 272) };
}
done_testing;

# Damages a copy of $source in every way below; $n_tensors: the intact model's.
sub damage {
    my ($source, $n_tensors) = @_;
    copy($source, $copy) or die "copy: $!";
    my $size = -s $copy;

    open my $in, '<:raw', $copy or die $!;
    read($in, my $head, 4 << 20);
    close $in;
    my ($fields, $header_end) = header_fields($head);
    cmp_ok($header_end, '<', length $head, 'header walked');

    srand(20261122);
    %count = ();

    # 1. Changes to the structural fields of the header (counts, lengths, type ids,
    # tensor shapes/types/offsets) must all be caught.
    my @structural = grep { $_->[2] !~ /^(?:version|value type|.*element type)$/ } @$fields;
    for my $n (1 .. 300) {
        my $f = $structural[rand @structural];
        my ($offset, $len, $what) = @$f;
        # The low bytes of a count or length, or any byte of a dim/offset; a change
        # of 1..255 in one byte.
        my $byte = $offset + int(rand($what =~ /^tensor (?:dim|offset)|magic/ ? $len : 2));
        my $orig = substr($head, $byte, 1);
        my $new = chr(ord($orig) ^ (1 + int rand 255));
        poke($byte, $new);
        loads_or_croaks("change of byte $byte ($what)", 1);
        poke($byte, $orig);
    }

    # 2. Random byte changes anywhere in the header: some only change a string's
    # text (still a valid file), so each must croak or load, never crash.
    for my $n (1 .. 100) {
        my $byte = int rand $header_end;
        my $orig = substr($head, $byte, 1);
        poke($byte, chr(ord($orig) ^ (1 + int rand 255)));
        loads_or_croaks("random change of byte $byte");
        poke($byte, $orig);
    }

    # 3. The version field: only 2 and 3 exist.
    for my $v (0, 1, 4, 99, 2**31) {
        poke(4, pack 'V', $v);
        loads_or_croaks("version $v", 1);
    }
    poke(4, pack 'V', 3);

    # 4. Truncations: every byte of the fixed header, then many points in the
    # metadata, then some in the tensor data (longest first, cutting one copy).
    my @cuts = (0 .. 40, map({ int rand $header_end } 1 .. 150), map({ $header_end + int rand($size - $header_end) } 1 .. 20),
        $size - 1);
    my %seen;
    @cuts = sort { $b <=> $a } grep { !$seen{$_}++ } @cuts;
    for my $cut (@cuts) {
        truncate($copy, $cut) or die "truncate: $!";
        loads_or_croaks("truncated to $cut bytes", 1);
    }

    # The process is still fine.
    is(Lugh::Model->new(model => $source)->n_tensors, $n_tensors, 'the intact model still loads');
    diag sprintf "%d variants croaked, %d random header changes still loaded (valid files)",
        $count{croaked} // 0, $count{loaded} // 0;
}

sub loads_or_croaks {
    my ($what, $must_croak) = @_;
    my $model = eval { Lugh::Model->new(model => $copy) };
    my $err = $@;
    if ($must_croak) {
        $count{croaked}++ if $err;
        return ok(!$model && $err =~ /\Q$copy\E/ && $err =~ / at \S+ line \d+\.$/, "$what croaks")
            || diag("got: " . ($err || 'a model'));
    }
    $count{$err ? 'croaked' : 'loaded'}++;
    return ok($model || $err =~ /\Q$copy\E/, "$what: loads or croaks with the path") || diag $err;
}

sub poke {
    my ($offset, $bytes) = @_;
    open my $fh, '+<:raw', $copy or die $!;
    seek $fh, $offset, 0;
    print {$fh} $bytes;
    close $fh;
}
