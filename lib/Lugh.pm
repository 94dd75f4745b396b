package Lugh;

use strict;
use warnings;

our $VERSION = '0.20';

require XSLoader;
XSLoader::load('Lugh', $VERSION);

# A Lugh.so compiled for another machine's CPU (-march=native) would stop
# the process with an illegal instruction at the first matrix product; say so
# at load time instead.
{
    my %cpu = _cpu_features();
    die "Lugh was compiled for CPU features this processor lacks (@{ $cpu{missing} }; kernel variant $cpu{variant}):"
        . " rebuild it on this machine, or with LUGH_CPU_PORTABLE=1 for any x86-64 CPU with AVX2\n"
        if @{ $cpu{missing} };
}

# Every error Lugh raises goes through here: it names the line of the first
# caller outside Lugh's own packages, so a message points at the user's code.
sub _croak { die Lugh::Caller::_at_caller($_[0]) }

# A warning from Lugh, at the user's line (the native code warns through it).
sub _warn { warn Lugh::Caller::_at_caller($_[0]) }

require Lugh::Caller;

# name => value pairs checked against a defaults hash; returns the merged
# list. $method names the public method in the croak.
sub _options {
    my ($method, $defaults, @args) = @_;
    _croak("$method: options must be name => value pairs") if @args % 2;
    my %args = @args;
    if (my @unknown = grep { !exists $defaults->{$_} } sort keys %args) {
        _croak("$method: unknown option '$unknown[0]' (valid options: " . join(', ', sort keys %$defaults) . ')');
    }
    return (%$defaults, %args);
}

# Read-only accessors declared as rows of a native table: one method per
# name that PACKAGE::_accessor_names gives, each reading through
# PACKAGE::_accessor.
sub _install_accessors {
    my ($package) = @_;
    no strict 'refs';
    my $read = \&{"${package}::_accessor"};
    my $object = lc( ($package =~ /(\w+)\z/)[0] );
    for my $name (&{"${package}::_accessor_names"}()) {
        *{"${package}::$name"} = sub {
            _croak("Usage: \$$object->$name") unless @_ == 1;
            return $read->($_[0], $name);
        };
    }
}

require Lugh::Model;
require Lugh::Tokenizer;
require Lugh::Inference;
require Lugh::KVCache;
require Lugh::MemoryPool;
require Lugh::Logits;
require Lugh::Prompt;
require Lugh::RoPE;
require Lugh::Grammar;
require Lugh::LoRA;
require Lugh::Chat;
require Lugh::Speculative;
require Lugh::Batch;
require Lugh::Context;
require Lugh::Tensor;
require Lugh::Ops;
require Lugh::Graph;
require Lugh::Quant;
require Lugh::Autograd;
require Lugh::Optimizer;
require Lugh::Train;
require Lugh::Server;

sub version { return $VERSION }

# Seeds Lugh's default random generator (sampling without a seed option).
sub srand {
    Lugh::_croak('Usage: Lugh::srand($seed)') if @_ > 1;
    return _srand($_[0]);
}

sub cpu_features {
    Lugh::_croak('Usage: Lugh::cpu_features()') if @_;
    my %cpu = _cpu_features();
    delete $cpu{missing};
    return \%cpu;
}

# 'auto' (what Inference->new picks by default) is listed as Lugh 0.12 listed
# it, after the real backends; it is not counted as one.
sub available_backends {
    Lugh::_croak('Usage: Lugh::available_backends()') if @_;
    return (_available_backends(), 'auto');
}

sub backend_count {
    Lugh::_croak('Usage: Lugh::backend_count()') if @_;
    return scalar(my @all = _available_backends());
}

sub backend_device_count {
    Lugh::_croak('Usage: Lugh::backend_device_count()') if @_;
    my $count = 0;
    $count += backend_info($_)->{device_count} for _available_backends();
    return $count;
}

# ggml registers its Metal backend as "MTL" (older builds: "Metal").
my $METAL = qr/\A(?:MTL|Metal)\z/i;

sub has_metal {
    Lugh::_croak('Usage: Lugh::has_metal()') if @_;
    return (grep { $_ =~ $METAL } _registered_backends()) ? 1 : 0;
}

sub metal_available {
    Lugh::_croak('Usage: Lugh::metal_available()') if @_;
    return (grep { $_ =~ $METAL } _available_backends()) ? 1 : 0;
}

sub has_rpc {
    Lugh::_croak('Usage: Lugh::has_rpc()') if @_;
    return (grep { $_ eq 'RPC' } _registered_backends()) ? 1 : 0;
}

sub rpc_server {
    my %opt = Lugh::_options('Lugh::rpc_server',
        { host => '127.0.0.1', port => 50052, backend => 'auto', threads => undef, cache => undef, announce => undef }, @_);
    my $announce = $opt{announce} // sub { warn "$_[0]\n" };
    Lugh::_croak('Lugh::rpc_server: announce must be a CODE reference') unless ref $announce eq 'CODE';
    my $threads = $opt{threads} // cpu_features()->{n_cpus};
    for my $name (qw(port threads)) {
        my ($value, $max) = ($name eq 'port' ? $opt{port} : $threads, $name eq 'port' ? 65535 : 512);
        Lugh::_croak("Lugh::rpc_server: $name must be an integer in 1..$max, got " . ($value // 'undef'))
            unless defined $value && $value =~ /\A[0-9]+\z/ && $value >= 1 && $value <= $max;
    }
    my @devices = eval { _rpc_devices($opt{backend}) };
    if (!@devices) {
        (my $why = $@) =~ s/ at \S+ line \d+\.\n\z//;
        $why =~ s/\A[\w:]+: //;
        Lugh::_croak("Lugh::rpc_server: $why");
    }
    Lugh::_croak("Lugh::rpc_server: this Lugh was built without ggml's RPC backend: rebuild it with"
        . ' LUGH_BACKENDS=rpc perl Makefile.PL') unless has_rpc();
    if ($opt{host} !~ /\A(?:127(?:\.\d{1,3}){3}|localhost)\z/) {
        $announce->("WARNING: the RPC server listens on $opt{host}:$opt{port}, beyond this machine. ggml's RPC "
            . 'protocol has no authentication and no encryption: anyone who reaches the port can run computations '
            . 'here and read and write its memory buffers. Use it only on a network you trust.');
    }
    $announce->("RPC server on $opt{host}:$opt{port}: " . join(', ', @devices) . ", $threads threads");
    _rpc_server($opt{host}, $opt{port}, $opt{backend}, $threads, $opt{cache});
    return;
}

sub backend_info {
    my ($name) = @_;
    Lugh::_croak('Usage: Lugh::backend_info($name)') unless @_ == 1 && defined $name;
    my %info = _backend_info(lc $name eq 'auto' ? best_backend() : $name);
    return undef unless %info;
    my @keys = qw(name description memory_free memory_total);
    $info{devices} = [ map { my $d = $_; +{ map { $keys[$_] => $d->[$_] } 0 .. $#keys } } @{ $info{devices} } ];
    $info{kernel_variant} = cpu_features()->{variant} if $info{name} eq 'CPU';
    return \%info;
}

1;

__END__

=head1 NAME

Lugh - run large language models locally, on ggml, from Perl

=head1 SYNOPSIS

    use Lugh;

    my $model     = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    my $inference = Lugh::Inference->new(model => $model);

    # Continue a text, printing it as it comes.
    my @prompt = $tokenizer->encode('The capital of France is');
    $inference->generate(\@prompt, max_tokens => 20, greedy => 1,
        on_text => sub { print $_[0]; 0 });

    # Or chat, with the model's own template.
    my $chat = Lugh::Chat->new(inference => $inference, system => 'Be brief.');
    print $chat->ask('Name three rivers.'), "\n";

=head1 DESCRIPTION

Lugh loads GGUF model files and runs them with the ggml tensor library
(version 0.26.0, the one llama.cpp is built on), with llama.cpp's numbers:
the same logits for the same file on the same kind of CPU. Its native core is
written in Rust. This page documents the functions of the top-level package
and the rules every package follows; each package has its own page.

=head2 The packages

=over

=item L<Lugh::Model>

A GGUF file, memory-mapped: metadata, tensors, hyperparameters.

=item L<Lugh::Tokenizer>

Text to token ids and back (SentencePiece and byte-level BPE vocabularies,
as llama.cpp tokenizes them), with a streaming decoder.

=item L<Lugh::Inference>

A session that runs the transformer: C<forward> (logits), C<sample>,
C<generate> (with callbacks, stop strings, statistics).

=item L<Lugh::KVCache>, L<Lugh::MemoryPool>

The state a session keeps between calls: the attention cache of a
conversation (which can be saved to a file and loaded back), and a reusable
compute allocation.

=item L<Lugh::Logits>

A vector of logits kept in native memory (softmax, top-k, argmax).

=item L<Lugh::Grammar>

A GBNF grammar (llama.cpp's syntax) that constrains generation:
C<< generate(grammar => ...) >> produces only text the grammar allows.

=item L<Lugh::Prompt>, L<Lugh::Chat>

Chat templates (the model's own, or a named format) and multi-turn
conversations that reuse the cache.

=item L<Lugh::ModelStore>

Models by name: a catalogue, downloads that resume after an interruption,
sha256 checks. C<< Lugh::Model->new(model => 'smollm2-135m-q4_1') >> uses it.

=back

The C<lugh> command-line program (C<lugh pull>, C<lugh list>, C<lugh
generate>, C<lugh chat>, C<lugh embed>, C<lugh rerank>, C<lugh info>) is
built on these.

=head2 Rules every package follows

=over

=item Options

Methods take C<< name => value >> pairs. An unknown name croaks, listing the
valid ones; an undef value means the default.

=item Errors

Every error is a croak whose message starts with the method
(C<< Lugh::Inference->generate: ... >>) and ends with your file and line. After
one, the objects you hold are still usable. A C<die> in a callback stops the
call and is rethrown as it was.

=item Lists

A method that returns a list returns, in scalar context, an array reference
to that list: C<< my $ids = $tokenizer->encode($text) >> holds all the ids.

=item Threads

Objects are not copied into new Perl threads (C<CLONE_SKIP>); one object may
be used from one thread at a time.

=back

=head1 FUNCTIONS

=head2 version

    my $v = Lugh::version();    # "0.20"

The version of the distribution.

=head2 ggml_version

    my $v = Lugh::ggml_version();    # "0.26.0"

The version of ggml that Lugh is built with.

=head2 supported_architectures

    print join(' ', Lugh::supported_architectures()), "\n";
    # llama qwen2 qwen2moe qwen3 qwen3moe phi3 gemma2 gemma3 gemma granite gpt2 falcon stablelm
    # starcoder2 olmo2 smollm3 mistral3 qwen35 lfm2 qwen35moe gpt-oss llama4 gemma4 deepseek2
    # bert nomic-bert

The values of C<general.architecture> that L<Lugh::Inference> runs, in the
order of the engine's architecture table. Mistral and Mixtral files say
C<llama>; Mistral 3 (Ministral) files say C<mistral3>; Qwen3.5 and 3.6 files
say C<qwen35>, their mixture-of-experts models C<qwen35moe> (gated delta-net
layers with a recurrent state, see L<Lugh::KVCache/Recurrent models>);
Liquid's LFM2 files say C<lfm2> (short convolutions with a state beside
attention); OpenAI's gpt-oss files say C<gpt-oss> (experts with biases and
clamped SwiGLU, attention sinks, every other layer in a sliding window);
Llama 4 files say C<llama4> (layers without RoPE, chunked attention,
interleaved sigmoid-routed experts); Gemma 4's files say C<gemma4> (E2B and
E4B: per-layer inputs and layers sharing an earlier layer's KV; 26B-A4B:
experts beside each layer's dense FFN); DeepSeek-V2, V2-Lite and V3 files
(and other models built on them) say C<deepseek2> (multi-head latent
attention, whose cache holds one compressed latent per token; dense leading
layers, then experts beside shared experts, routed by softmax or by biased
sigmoid scores in groups). C<bert> and C<nomic-bert> are encoders (embedding models and
rerankers: see L<Lugh::Inference/embed> and L<Lugh::Inference/rerank>): they
have no next-token logits, and C<generate> croaks for them. Each is checked
against llama.cpp on random-weight models (C<t/52_architectures.t>; the
encoders' embeddings in C<t/55_encoders.t>). Another architecture croaks in
C<< Lugh::Inference->new >>, naming it and listing these.

=head2 available_backends

    my @names = Lugh::available_backends();    # ("CPU", "auto")

The names of the ggml compute backends compiled into this build that have at
least one usable device now, read from ggml's backend registry, followed by
C<auto>: the name that lets L<Lugh::Inference/new> pick the best of them
(L</best_backend>), listed as Lugh 0.12 listed it. The default build has
C<CPU> alone; C<LUGH_BACKENDS=vulkan,blas,rpc perl Makefile.PL> adds
C<Vulkan>, C<BLAS> and C<RPC> (see README.pod). ggml's Vulkan backend lists
GPUs only, unless C<GGML_VK_VISIBLE_DEVICES> (set before Lugh is loaded)
names devices by index: C<GGML_VK_VISIBLE_DEVICES=0> makes a software driver
such as Mesa's lavapipe available as C<Vulkan0>.

=head2 backend_count

    printf "%d backend(s)\n", Lugh::backend_count();    # 1 (the CPU)

The number of available backends: those L</available_backends> lists, less
C<auto>, which is not a backend of its own.

=head2 backend_device_count

    printf "%d device(s)\n", Lugh::backend_device_count();

The number of usable devices over all available backends (the CPU counts as
one).

=head2 has_metal

    print Lugh::has_metal() ? "built with Metal\n" : "no Metal\n";

True when this build of Lugh has ggml's Metal backend compiled in (Apple
GPUs), whether or not a Metal device is present.

=head2 metal_available

    my $backend = Lugh::metal_available() ? 'MTL' : 'CPU';

True when the Metal backend is compiled in and has a usable device.

=head2 has_rpc

    print Lugh::has_rpc() ? "RPC built in\n" : "rebuild with LUGH_BACKENDS=rpc\n";

True when this build has ggml's RPC backend (C<LUGH_BACKENDS=rpc perl
Makefile.PL>): sessions can put layers on RPC servers (C<rpc> of
L<Lugh::Inference/new>) and L</rpc_server> serves this machine's devices.
RPC is not listed by L</available_backends>: its devices are those of the
servers a session names.

=head2 rpc_server

    # serves until the process is killed; on a private network:
    Lugh::rpc_server(host => '10.0.0.2', port => 50052) if Lugh::has_rpc() && @ARGV;

Offers this machine's devices to other machines over ggml's RPC protocol, as
llama.cpp's C<rpc-server> does (the two interoperate); C<lugh rpc-server> is
this function on the command line. Options: C<host> (default C<127.0.0.1>),
C<port> (default 50052), C<backend> (whose devices to offer; default
C<auto>: the GPUs if there are any, else the CPU), C<threads> (CPU threads;
default the CPUs available), C<cache> (a directory where the server keeps the
large tensors it was sent, so that a client sending them again sends only
their hash), C<announce> (a code reference given each line the server has to
say before it starts; default: C<warn>). It returns only by croaking: when
Lugh was built without RPC, on a bad option, an unknown backend, or an
address it cannot listen on.

ggml's RPC protocol has no authentication and no encryption: anyone who can
reach the port can run computations on this machine and read and write its
buffers. Bind to a loopback address (the default) or a network you trust;
for any other host the announcement starts with a warning saying so.

=head2 backend_available

    print "CUDA here\n" if Lugh::backend_available('CUDA');

1 when the named backend (case-insensitive) is available, else 0. C<auto> is
always available.

=head2 best_backend

    my $name = Lugh::best_backend();    # "CPU" on a machine without a GPU

The backend C<< backend => 'auto' >> picks: a GPU backend if one is available,
else the CPU.

=head2 backend_info

    my $info = Lugh::backend_info('CPU');
    print "$info->{name}: $info->{description} ($info->{device_count} device)\n";

A hash reference C<< {name, type, is_gpu, device_count, description,
memory_free, memory_total, devices} >> for an available backend, or undef for
one that is not. C<type> is the kind of its first device: C<CPU>, C<GPU>,
C<IGPU> or C<ACCEL> (an accelerator such as BLAS, which takes some of the
CPU's operations). C<memory_free> and C<memory_total> are bytes over all its
devices, as the backend reports them (the CPU's are the machine's memory; 0
where a backend has none of its own), and C<devices> is an array of C<{name,
description, memory_free, memory_total}>, one per device. The CPU backend's
hash also has C<kernel_variant>, as L</cpu_features> gives it. For C<auto>,
the hash of the backend it picks (L</best_backend>).

=head2 cpu_features

    my $cpu = Lugh::cpu_features();
    print "$cpu->{variant} ($cpu->{build}): @{ $cpu->{features} }\n";
    # x86_64-avx512 (native): SSE3 SSSE3 SSE4_1 SSE4_2 AVX AVX2 FMA F16C BMI2 AVX512F ...

What ggml's CPU kernels were compiled for, as a hash reference:

=over

=item variant

The kernel variant: C<x86_64-avx512>, C<x86_64-avx2>, C<x86_64-avx>,
C<x86_64-sse>, C<x86_64-avx512fp16> (AVX-512 with native f16 arithmetic, as
on Intel Xeon from Sapphire Rapids on), C<x86_64-amx> (built with
C<LUGH_CPU_AMX=1>), C<aarch64-neon>, C<aarch64-sve>, or the architecture's
name.
It names what fixes the order and rounding of floating-point sums (the
vector width and fused multiply-add), so two builds of one variant compute
the same logits to the last digit, and builds of two variants differ by a
little (README.pod, "PARITY WITH LLAMA.CPP"): the parity tests compare
against llama.cpp's outputs for the same variant.

=item build

C<native> (C<-march=native>, the default on x86-64), C<portable>
(C<LUGH_CPU_PORTABLE=1>, or an architecture without a native build), or the
processor named by C<LUGH_CPU_MARCH> when Lugh was built (C<znver3>,
C<haswell> ...: C<-march=> for a machine other than the one that builds).

=item arch

The processor architecture, e.g. C<x86_64> or C<aarch64>.

=item features

The instruction-set extensions the kernels use, as an array reference of
names such as C<AVX2>, C<FMA>, C<F16C>, C<AVX512F>, C<AVX512VNNI>, C<NEON>,
C<DOTPROD>.

=item n_cpus

The CPUs this process may run on (its CPU affinity and cgroup quota). A
L<Lugh::Inference> never runs more CPU threads than this: see
L<Lugh::Inference/new>.

=back

Loading Lugh croaks, naming the missing extensions, on a processor that
lacks one of them (a native build copied to an older machine) rather than
stopping later on an illegal instruction.

=head2 srand

    Lugh::srand(42);                                    # reproducible from here on
    my $id   = $inference->sample(\@logits);
    my $seed = Lugh::srand();                           # a fresh seed, returned

Seeds the generator that sampling uses when a call gives no C<seed> option
(L<Lugh::Inference/sample>, L<Lugh::Inference/generate>): after
C<Lugh::srand($n)>, the same sequence of unseeded calls gives the same
tokens. Without an argument it seeds from the clock and the process id.
Returns the seed (an integer >= 0). Perl's own C<srand> and C<rand> are not
touched, nor used by Lugh.

=head1 DIFFERENCES FROM LUGH 0.12

Lugh is a port of the CPAN module Lugh 0.12: a 0.12 script runs unchanged,
with the exceptions below. Each is deliberate; each says why, and the
one-line change that gives a 0.12 script its old behaviour. Lugh 0.12's own
test suite, run against this Lugh with real models in place of its fixture
files, passes except for these and for the golden values of 0.12's own test
model.

=over

=item The tokenizer adds BOS only when the model asks for it

C<< $tokenizer->encode($text) >> adds the BOS token when the GGUF file's
C<tokenizer.ggml.add_bos_token> says so (Gemma, Llama: yes; SmolLM2, Qwen2:
no), as llama.cpp does; 0.12 always added it. Why: the same token ids, hence
the same logits, as llama.cpp. For 0.12's behaviour:
C<< $tokenizer->encode($text, add_bos => 1) >>.

=item Unknown options croak

Every method checks its option names and croaks on one it does not know,
listing the valid ones; 0.12 ignored them. Why: a misspelled option that is
silently ignored gives wrong results that look right. Change: spell the
option as the message lists it.

=item Error messages name the method and the problem

Croaks read C<< Lugh::Class->method: what is wrong >> and end with the
caller's file and line. Where 0.12's tests matched words of its messages
("requires tokens", "Unknown scaling_type", "rank must be between 1 and
256", "only available on trainable", "use caches"), those words are still
there; a script that matches other exact wording needs a new pattern.

=item Models are memory-mapped by default

C<< Lugh::Model->new(model => $file) >> maps the file (C<use_mmap> 1), so
C<use_mmap> is 1 and C<mmap_size> the file's size; 0.12 read the weights
into memory unless given C<< mmap => 1 >>. Why: loading takes milliseconds,
and processes that load the same file share its pages, as llama.cpp's
default. For 0.12's behaviour: C<< Lugh::Model->new(model => $file, mmap => 0) >>.

=item RoPE's C<ext_factor> -1 means "computed"

L<Lugh::RoPE> keeps C<ext_factor> at -1 unless given, meaning what llama.cpp
computes (1 for YaRN, 0 otherwise); 0.12 stored 0 for linear scaling. The
computation is the same; only the value read back differs. Why: llama.cpp's
convention, so that a YaRN configuration's default is right. For 0.12's
value: C<< ext_factor => 0 >>.

=item C<ggml_version> is the bare version number

C<Lugh::ggml_version()> returns C<0.26.0>; 0.12 returned a descriptive
string containing the word "ggml". Why: a number a script can compare.

=item Chat prompts come from the model's own template

C<< Lugh::Prompt->new(model => $model) >> uses the Jinja chat template in the
GGUF file (C<format_name> is then C<template>), as llama.cpp and transformers
do; 0.12 picked a fixed format by architecture, which is still what happens
for a file without a template. For the architecture C<llama> that fallback
is now C<llama3> (0.12: C<llama2>), because most C<llama> files are Llama 3
or later. The fixed formats keep 0.12's defaults (C<add_generation_prompt>
and C<add_bos> on); a Jinja template gets transformers' (off unless given).
The C<llama2> format follows Meta's template (0.12 wrote C<[INST]> twice),
and C<vicuna>'s generation prompt is C<ASSISTANT:> without 0.12's trailing
space (the model's first token brings its own). For 0.12's choice of
format: C<< Lugh::Prompt->new(format => 'llama2') >>.

=item Sampling has its own random generator

Sampling never uses C's or Perl's C<rand>: C<< seed => $n >> makes one call
reproducible and L</srand> seeds every unseeded call after it; 0.12 drew from
C's C<rand()>, which C<Lugh::srand> seeded. The same seed gives other tokens
than under 0.12. Positional arguments of C<sample_top_p> and C<sample_top_k>
(C<< ($logits, $top_p, $temperature) >>), which 0.12 accepted but ignored,
are applied.

=item A LoRA adapter's C<alpha> is read-only

L<Lugh::LoRA/alpha> reports the adapter's alpha; 0.12's documentation also
offered C<< $lora->alpha($new) >>. Why: the alpha belongs to the file (PEFT
files give one per module); the strength of an adapter is its C<scale>,
which multiplies the same product. For a 0.12 script's
C<< $lora->alpha($a) >>: C<< $lora->scale($lora->scale * $a / $lora->alpha) >>
(a bare C<.safetensors> adapter, read as 0.12 read it, has alpha 1).

=item C<Lugh::VERSION>

This Lugh is version 0.20; 0.12's tests compare the version with their own.

=back

=head1 ENVIRONMENT

=over

=item LUGH_DEBUG

When set to a true value, Lugh says what it does on STDERR, one line per
event (a model opened, weights placed or shared, a session made, a KV cache
made, each C<forward> and C<generate> with its time), and ggml's own log
messages go there too. By default both are silent.

    LUGH_DEBUG=1 perl -MLugh -e 'Lugh::Model->new(model => shift)' model.gguf
    # Lugh: opened 'model.gguf' in 1.2 ms: architecture llama, 272 tensors, 93.8 MiB mapped

=back

=head1 SEE ALSO

L<Lugh::Model>, L<Lugh::Tokenizer>, L<Lugh::Inference>, L<Lugh::KVCache>,
L<Lugh::MemoryPool>, L<Lugh::Logits>, L<Lugh::Prompt>, L<Lugh::Chat>,
L<Lugh::ModelStore>, the C<lugh> program (C<perldoc lugh>), and README.pod
for installing and the parity with llama.cpp. llama.cpp
(L<https://github.com/ggml-org/llama.cpp>) is the reference Lugh's numbers
are checked against.

=head1 BUGS

Report bugs at the project's issue tracker, with the output of
C<lugh --version>, the model file's name and the smallest script that shows
the problem. Run it with C<LUGH_DEBUG=1> and include what that prints.

=head1 AUTHOR

The Lugh developers.

=head1 LICENSE

MIT. ggml is MIT-licensed and fetched at build time from crates.io.

=cut
