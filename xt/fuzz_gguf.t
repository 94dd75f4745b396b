# Fuzzes the model loader with well-formed but wrong GGUF files (issue 9):
# a structure-aware mutator (t/lib/LughTest/Mutate.pm) changes tensor types
# and shapes (resizing their data so the file stays consistent), counts,
# key types and values, array lengths and names, in the tiny synthetic
# models and, when fetched, the test models and vocab files. Each variant
# runs in a forked child with a 10 s CPU-time limit (60 s of wall clock): load the model, build its
# tokenizer, make an Inference (1 thread, n_ctx 32) and run a 3-token
# forward (an encoder: embed). A croak that names the file, or success, is fine; a signal, an
# abort or a timeout (twice in a row, so that a loaded machine is not taken
# for a hang) fails, and the variant is kept for reproduction.
#
#   LUGH_FUZZ_ITERATIONS=200   variants in all (round robin over the inputs)
#   LUGH_FUZZ_SEED=N           the seed (printed; default: from the time)
#   LUGH_FUZZ_INPUTS=regex     only the inputs whose name matches
#   LUGH_FUZZ_ONLY=i,j         only these variant numbers (to reproduce one)
#   LUGH_FUZZ_KEEP=dir         where failing variants go (default fuzz-failures)
#   LUGH_FUZZ_TIMEOUT=10       seconds per variant
#   LUGH_FUZZ_VERBOSE=1        print every variant and its outcome
#
# Reproduce a failure: LUGH_FUZZ_SEED=<seed> LUGH_FUZZ_ONLY=<i> prove -b xt/fuzz_gguf.t
# (or load the kept file).
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Copy qw(copy);
use File::Path qw(make_path);
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);
use lib 't/lib';
use LughTest qw(model_path @TEST_MODELS);
use LughTest::TinyModel qw(tiny_model @TINY_VARIANTS);
use LughTest::Mutate qw(read_gguf mutate write_variant);
use Lugh;

my $iterations = $ENV{LUGH_FUZZ_ITERATIONS} // 200;
my $seed = $ENV{LUGH_FUZZ_SEED} // (time() ^ $$) % 1_000_000_007;
my $timeout = $ENV{LUGH_FUZZ_TIMEOUT} // 10;
my $keep = $ENV{LUGH_FUZZ_KEEP} // 'fuzz-failures';
my $only = defined $ENV{LUGH_FUZZ_ONLY} ? { map { $_ => 1 } split /,/, $ENV{LUGH_FUZZ_ONLY} } : undef;
my $select = $ENV{LUGH_FUZZ_INPUTS};
diag("LUGH_FUZZ_SEED=$seed LUGH_FUZZ_ITERATIONS=$iterations");

my $dir = tempdir(CLEANUP => 1, DIR => -d '/dev/shm' && -w '/dev/shm' ? '/dev/shm' : undef);

# The inputs: [name, path, kind] (model: runs a forward; vocab: tokenizer only).
my @inputs;
for my $opt (@TINY_VARIANTS) {
    my $name = 'tiny-' . join '-', map {"$_=$opt->{$_}"} sort keys %$opt;
    push @inputs, [ $name, tiny_model($dir, %$opt), 'model' ];
}
for my $m (@TEST_MODELS) {
    my $path = model_path($m) or next;
    push @inputs, [ $m, $path, 'model' ];
}
# Every architecture row, from t/make-arch-models when Python has gguf.
my $arch = LughTest::arch_models("$dir/arch", 1);
if (ref $arch) {
    push @inputs, map { [ "arch-$_", $arch->{$_}, 'model' ] } sort keys %$arch;
}
else {
    diag("no architecture models: $arch");
}
for my $v (qw(llama-spm llama-bpe qwen2 gpt-2 phi-3)) {
    my $path = model_path("ggml-vocab-$v") or next;
    push @inputs, [ "vocab-$v", $path, 'vocab' ];
}
@inputs = grep { $_->[0] =~ /$select/ } @inputs if defined $select;
plan skip_all => 'no inputs' unless @inputs;
diag('inputs: ' . join ' ', map { $_->[0] } @inputs);

# The child's work; prints one line to $out: "croak <message>" or "ok <note>".
sub exercise {
    my ($path, $kind, $out) = @_;
    my $note = '';
    my $ok = eval {
        my $model = Lugh::Model->new(model => $path);
        my $tok = Lugh::Tokenizer->new(model => $model);
        my @ids = $tok->encode('Hello world, the cat sat');
        my $text = $tok->decode(\@ids);
        if ($kind eq 'vocab') {
            $note = 'tokenizer';
        }
        else {
            my $inference = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 32);
            my $n = $inference->n_vocab;
            my @in = grep { $_ < $n } @ids;
            push @in, 0, 1, 2;
            # an encoder has no next-token logits: its embedding instead
            my $encoder = $model->architecture =~ /\A(?:bert|nomic-bert)\z/;
            my @values =
                $encoder ? @{ $inference->embed('Hello world, the cat sat') } : $inference->forward([ @in[ 0 .. 2 ] ]);
            my $finite = !grep { $_ != $_ || $_ == 9**9**9 || $_ == -9**9**9 } @values;
            $note = !$finite ? 'nonfinite' : $encoder ? 'embed' : 'forward';
        }
        1;
    };
    my $line = $ok ? "ok $note" : "croak $@";
    $line =~ s/\n(?!\z)/\\n/g;
    $line .= "\n" unless $line =~ /\n\z/;
    print {$out} $line;
    close $out;
}

# Sets this process's CPU-time limit (RLIMIT_CPU) to $seconds through the
# setrlimit system call on Linux x86_64/aarch64; false where it cannot.
sub cpu_limit {
    my ($seconds) = @_;
    return 0 unless $^O eq 'linux';
    my %setrlimit = (x86_64 => 160, aarch64 => 164);
    my ($machine) = (POSIX::uname())[4];
    my $nr = $setrlimit{$machine} or return 0;
    my $limits = pack 'QQ', $seconds, $seconds + 1;    # soft: SIGXCPU; hard: SIGKILL
    return syscall($nr, 0, $limits) == 0;              # 0: RLIMIT_CPU
}

# Runs one variant in a child; returns (class, detail).
sub run_variant {
    my ($path, $kind) = @_;
    pipe my $r, my $w or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        close $r;
        # The limit is CPU time where the kernel can enforce it (SIGXCPU), so
        # that a loaded machine is not taken for a hang; a wall-clock alarm
        # of six times that catches a child blocked without using the CPU.
        # The default actions of both signals end the child.
        if (cpu_limit($timeout)) { alarm 6 * $timeout }
        else { alarm $timeout }
        exercise($path, $kind, $w);
        POSIX::_exit(0);
    }
    close $w;
    my $line = do { local $/; <$r> } // '';
    close $r;
    my $deadline = time + 6 * $timeout + 5;
    my $got;
    while (!($got = waitpid $pid, WNOHANG)) {
        if (time > $deadline) { kill 'KILL', $pid; waitpid $pid, 0; return ('timeout', 'killed after ' . (6 * $timeout + 5) . ' s') }
        sleep 0.01;
    }
    my $status = $?;
    if ($status & 127) {
        my $sig = $status & 127;
        my %name = (6 => 'SIGABRT', 11 => 'SIGSEGV', 14 => 'SIGALRM (timeout)', 24 => 'SIGXCPU (timeout)', 7 => 'SIGBUS',
            8 => 'SIGFPE', 4 => 'SIGILL', 9 => 'SIGKILL');
        return ($sig == 14 || $sig == 24 ? 'timeout' : 'signal', $name{$sig} // "signal $sig");
    }
    return ('exit', "exit status " . ($status >> 8) . ($line ? ": $line" : '')) if $status >> 8;
    return ('croak', $1) if $line =~ /^croak (.*)/s;
    return ('ok', $1) if $line =~ /^ok (.*)/;
    return ('exit', "no report: '$line'");
}

my %count = (variants => 0, croak => 0, ok => 0, nonfinite => 0, unnamed => 0, fail => 0);
my %per_input;
my (@failures, %unnamed_example);
my %cache;    # name => parsed file
my $start = time;
for my $i (0 .. $iterations - 1) {
    next if $only && !$only->{$i};
    my ($name, $path, $kind) = @{ $inputs[ $i % @inputs ] };
    my $g = $cache{$name} //= read_gguf($path);
    srand(($seed * 1_000_003 + $i) % 4294967296);
    my $n_changes = rand() < 0.7 ? 1 : 1 + int rand 3;
    my ($v, @what) = mutate($g, $n_changes);
    my $file = "$dir/variant-$i.gguf";
    write_variant($v, $file);
    my ($class, $detail) = run_variant($file, $kind);
    # A busy machine can stretch a load past the limit: a hang must hang twice.
    ($class, $detail) = run_variant($file, $kind) if $class eq 'timeout';
    $count{variants}++;
    $per_input{$name}{$class eq 'croak' || $class eq 'ok' ? $class : 'fail'}++;
    my $desc = "variant $i of $name: " . join('; ', @what);
    if ($ENV{LUGH_FUZZ_VERBOSE}) { (my $d = $detail) =~ s/\s+\z//; diag("$desc => $class: " . substr($d, 0, 300)) }
    if ($class eq 'croak') {
        $count{croak}++;
        if (index($detail, $file) < 0) {
            $count{unnamed}++;
            (my $short = $detail) =~ s/ at \S+ line \d+\.\n?\z//;
            $unnamed_example{ substr $short, 0, 60 } //= "$desc => $short";
        }
    }
    elsif ($class eq 'ok') {
        $count{ok}++;
        $count{nonfinite}++ if $detail eq 'nonfinite';
    }
    else {
        $count{fail}++;
        make_path($keep);
        my $kept = "$keep/seed$seed-variant$i-$name.gguf";
        copy($file, $kept) or warn "cannot keep $kept: $!";
        push @failures, "$desc => $class: $detail (kept as $kept; LUGH_FUZZ_SEED=$seed LUGH_FUZZ_ONLY=$i)";
        diag("FAIL $failures[-1]");
    }
    unlink $file;
}
my $took = time - $start;

diag(sprintf 'seed %d: %d variants in %.0f s: %d croaked (%d not naming the file), %d loaded and ran (%d with non-finite logits), %d crashed, aborted or hung',
    $seed, @count{qw(variants)}, $took, @count{qw(croak unnamed ok nonfinite fail)});
for my $name (sort keys %per_input) {
    diag(sprintf '  %-45s croak %5d  ok %5d  fail %3d', $name, map { $per_input{$name}{$_} // 0 } qw(croak ok fail));
}
diag("croaks not naming the file, e.g.: $_") for map { $unnamed_example{$_} } sort keys %unnamed_example;

is($count{fail}, 0, "seed $seed: no variant crashes, aborts or hangs") or diag(join "\n", @failures);
is($count{unnamed}, 0, "seed $seed: every croak names the file");

done_testing;
