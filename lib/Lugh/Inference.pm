package Lugh::Inference;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;
use Scalar::Util ();

our $VERSION = '0.20';

# The options of new(), sample() and generate() are declared once, in the
# XS subs' tables (xs-rs/subs/inference.rs): new, sample, sample_top_p and
# sample_top_k are XS subs themselves.

# The forward family: for each spelling, the leading positional arguments it
# takes, the named options it accepts, and what it needs.
my %FORWARD = (
    forward            => { positional => ['tokens'], keys => [qw(tokens cache pool sequences caches as_object rope lora)] },
    forward_simple     => { positional => ['tokens'], keys => [qw(tokens rope lora)] },
    forward_all        => { positional => ['tokens'], keys => [qw(tokens cache pool as_object rope lora)], all => 1 },
    forward_cache      => { positional => [qw(cache tokens)], keys => [qw(cache tokens pool as_object rope lora)],
        needs => 'cache' },
    forward_pool       => { positional => [qw(pool tokens)], keys => [qw(pool tokens cache as_object rope lora)], needs => 'pool' },
    forward_with_pool  => { positional => [qw(pool tokens)], keys => [qw(pool tokens cache as_object rope lora)], needs => 'pool' },
    forward_cache_pool => { positional => [qw(cache pool tokens)], keys => [qw(cache pool tokens as_object rope lora)],
        needs => 'cache pool' },
    forward_batch      => { positional => ['sequences'], keys => [qw(sequences caches pool as_object rope lora)], batch => 1 },
    forward_batch_pool => { positional => [qw(pool sequences)], keys => [qw(pool sequences caches as_object rope lora)],
        batch => 1, needs => 'pool' },
);

# Settings and hyperparameters: one accessor per row of the XS table.
Lugh::_install_accessors(__PACKAGE__);

# The forward family: one parser, one dispatcher.
for my $name (keys %FORWARD) {
    no strict 'refs';
    *{$name} = sub { my $self = shift; return $self->_forward_any($name, @_) };
}

sub _forward_any {
    my ($self, $name, @args) = @_;
    my $spec   = $FORWARD{$name};
    my $method = "Lugh::Inference->$name";
    my %opt;
    my @positional = @{ $spec->{positional} };
    my %known = map { $_ => 1 } @{ $spec->{keys} };
    # Leading references (or undef) are positional, and so is a lone value
    # that is not an option name; otherwise a string starts the pairs.
    while (@positional && @args && (ref $args[0] || !defined $args[0] || (@args % 2 && !$known{ $args[0] }))) {
        my $slot = shift @positional;
        # A token array where a cache or pool belongs: that object is missing.
        next if $slot =~ /\A(?:cache|pool)\z/ && ref $args[0] eq 'ARRAY';
        $opt{$slot} = shift @args;
    }
    Lugh::_croak("$method: expected " . join(', ', map {"\$$_"} @{ $spec->{positional} })
            . ' or name => value pairs') if @args % 2;
    my %named = @args;
    for my $key (sort keys %named) {
        my $hint = $spec->{batch} && $key eq 'cache' ? 'use caches => [...], an array of one cache per sequence, not cache; ' : '';
        Lugh::_croak("$method: unknown option '$key' (${hint}valid options: " . join(', ', sort keys %known) . ')')
            unless $known{$key};
        Lugh::_croak("$method: $key given twice") if exists $opt{$key};
        $opt{$key} = $named{$key};
    }
    for my $need (split ' ', $spec->{needs} // '') {
        Lugh::_croak("$method: missing $need") unless defined $opt{$need};
    }
    if ($spec->{batch} || exists $opt{sequences}) {
        Lugh::_croak("$method: give tokens or sequences, not both") if exists $opt{tokens};
        Lugh::_croak("$method: cache is for one sequence; give caches => [...] with sequences") if exists $opt{cache};
        Lugh::_croak("$method: missing sequences (an array of token arrays)") unless defined $opt{sequences};
        return _forward_batch($self, %opt);
    }
    Lugh::_croak("$method: caches needs sequences => [...]; for one sequence give cache => \$cache")
        if exists $opt{caches};
    # "requires tokens": the words Lugh 0.12's message had, which its scripts match
    Lugh::_croak("$method: missing tokens: it requires tokens => [...] (an array of token ids)") unless defined $opt{tokens};
    return _forward($self, %opt, all => $spec->{all} ? 1 : 0);
}

# The statistics of each object's last generate, by the object's address:
# dropped with the object, and emptied in a new thread (whose objects are
# others: the objects are not cloned). Not a field hash: its re-keying at a
# thread's start crashes on objects that CLONE_SKIP leaves behind.
my %LAST_STATS;

sub DESTROY { delete $LAST_STATS{ Scalar::Util::refaddr($_[0]) } }
sub CLONE   { %LAST_STATS = () }

sub generate {
    my ($self, @args) = @_;
    # json_schema and response_format given as Perl structures reach the
    # engine as JSON text (the prompt, when first, is not a name => value pair)
    for (my $i = @args % 2; $i < $#args; $i += 2) {
        my $name = $args[$i];
        next unless defined $name && !ref $name && ($name eq 'json_schema' || $name eq 'response_format');
        next unless ref $args[ $i + 1 ] && !Scalar::Util::blessed($args[ $i + 1 ]);
        $args[ $i + 1 ] = Lugh::Grammar::_json_text($args[ $i + 1 ], "Lugh::Inference->generate: $name");
    }
    my ($ids, $stats, %last) = _generate($self, @args);
    $last{n_generated} = @$ids;
    $last{logprobs} = $self->_logprob_entries($last{logprobs}) if exists $last{logprobs};
    for (['prompt_tokens_per_second', 'n_evaluated', 'prompt_seconds'],
        ['tokens_per_second', 'n_generated', 'generate_seconds'])
    {
        my ($rate, $count, $seconds) = @$_;
        $last{$rate} = $last{$seconds} > 0 ? $last{$count} / $last{$seconds} : 0;
    }
    $LAST_STATS{ Scalar::Util::refaddr($self) } = \%last;
    %$stats = %last if $stats;
    return wantarray ? @$ids : $ids;
}

sub last_stats {
    Lugh::_croak('Usage: $inference->last_stats') unless @_ == 1 && ref $_[0];
    my $last = $LAST_STATS{ Scalar::Util::refaddr($_[0]) } or return undef;
    return { %$last };
}

# Scores come from the XS subs as name => value pairs.
sub logprobs   { my $self = shift; return { _logprobs($self, @_) } }
sub perplexity { my $self = shift; return { _perplexity($self, @_) } }

sub devices {
    Lugh::_croak('Usage: $inference->devices') unless @_ == 1 && ref $_[0];
    return map { +{ name => $_->[0], description => $_->[1], layers => $_->[2] } } _devices($_[0]);
}

sub profile {
    my ($self, @args) = @_;
    my %raw = _profile($self, @args);
    my $steps = delete $raw{steps};
    return { steps => $steps, map { $_ => { seconds => $raw{$_}[0], count => $raw{$_}[1] } } keys %raw };
}

# [id, logprob, [[id, logprob], ...]] rows from the engine as hashes with
# each token's text.
sub _logprob_entries {
    my ($self, $rows) = @_;
    my $tokenizer = Lugh::Tokenizer->new(model => $self->model);
    my $text = sub { my $b = $tokenizer->token_to_piece($_[0]); utf8::decode($b); $b };
    return [
        map {
            my ($id, $logprob, $top) = @$_;
            {   token   => $id,
                text    => $text->($id),
                logprob => $logprob,
                top     => [ map { { token => $_->[0], text => $text->($_->[0]), logprob => $_->[1] } } @$top ],
            }
        } @$rows
    ];
}

sub generate_parallel {
    my ($self, $requests, @args) = @_;
    my $method = 'Lugh::Inference->generate_parallel';
    Lugh::_croak("Usage: \$inference->generate_parallel([ { prompt => ..., ... }, ... ], slots => N)")
        unless ref $self && ref $requests eq 'ARRAY';
    Lugh::_croak("$method: the list of requests is empty") unless @$requests;
    Lugh::_croak("$method: options must be name => value pairs") if @args % 2;
    my %opt = @args;
    for my $name (sort keys %opt) {
        Lugh::_croak("$method: unknown option '$name' (valid options: deterministic, slots)")
            unless $name eq 'slots' || $name eq 'deterministic';
    }
    my $batch = Lugh::Batch->new($self, slots => $opt{slots} // 4, deterministic => $opt{deterministic} // 0,
        max_queued => scalar @$requests);
    my (%index, @results);
    for my $i (0 .. $#$requests) {
        my $request = $requests->[$i];
        Lugh::_croak("$method: request $i must be a hash reference of generate options") unless ref $request eq 'HASH';
        my $id = eval { $batch->add(%$request) };
        unless (defined $id) {
            (my $error = $@) =~ s/\ALugh::Batch->add: //;
            $error =~ s/ at \S+ line \d+\.?\n\z//;
            Lugh::_croak("$method: request $i: $error");
        }
        $index{$id} = $i;
        $results[$i] = { tokens => [], text => '' };
        $results[$i]{logprobs} = [] if defined $request->{logprobs};
    }
    until ($batch->is_idle) {
        for my $e ($batch->step) {
            my $r = $results[ $index{ $e->{id} } ];
            if ($e->{type} eq 'token') {
                push @{ $r->{tokens} }, $e->{token};
                $r->{text} .= $e->{text};
                push @{ $r->{logprobs} }, $e->{logprob} if $e->{logprob};
            }
            elsif ($e->{type} eq 'done') {
                $r->{text} .= $e->{text};
                @$r{qw(finish_reason usage)} = @$e{qw(finish_reason usage)};
            }
            else {
                @$r{qw(finish_reason error)} = ('error', $e->{error});
            }
        }
    }
    return \@results;
}

sub chat {
    my ($self, @args) = @_;
    return Lugh::Chat->_one_shot($self, @args);
}

sub create_kv_cache {
    Lugh::_croak('Usage: $inference->create_kv_cache') unless @_ == 1;
    return _create_kv_cache($_[0]);
}

sub create_memory_pool {
    Lugh::_croak('Usage: $inference->create_memory_pool') unless @_ == 1;
    return _create_memory_pool($_[0]);
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Inference - run a model: logits, sampling, generation, KV caches

=head1 SYNOPSIS

    use Lugh;
    my $model = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024);

    my @prompt = (504, 3575, 282, 4649, 314);          # "The capital of France is"
    my @logits = $inference->forward(\@prompt);        # n_vocab numbers
    my $next   = $inference->sample(\@logits, greedy => 1);   # 7042, " Paris"

    my @ids = $inference->generate(\@prompt,
        max_tokens => 20,
        callback   => sub { my ($token, $count) = @_; print "$token "; return 0 },
    );

=head1 DESCRIPTION

A Lugh::Inference is a session over a L<Lugh::Model> on ggml's backends: it
computes next-token logits exactly the way llama.cpp does (the same graph on
the same ggml), keeps K/V caches so that generation costs one token per step,
and samples.

It keeps its model alive: C<undef $model> while the session lives is safe.
KV caches (L<Lugh::KVCache>) and memory pools (L<Lugh::MemoryPool>) made from
it keep it alive in turn. Objects are not copied into new threads
(C<CLONE_SKIP>).

Every method croaks on bad input with a message naming the problem: an
unknown option (the message lists the valid ones), a token id out of range
(with its position), an empty token list, a sequence that would overflow the
context (before anything is computed).

=head1 CONSTRUCTOR

=head2 new

    my $inference = Lugh::Inference->new(
        model      => $model,     # required, a Lugh::Model
        backend    => 'auto',     # or 'CPU', 'CUDA', ... (see Lugh::available_backends)
        n_threads  => 4,          # default: the number of physical cores
        n_ctx      => 2048,       # default: min(the model's training context, 4096)
        flash_attn => 'auto',     # 0, 1 or 'auto' (as llama.cpp decides)
        n_batch    => 512,        # prompt tokens per graph evaluation (default 512)
        type_k     => 'f16',      # the KV cache's key type (default f16)
        type_v     => 'f16',      # and value type
    );

C<type_k> and C<type_v> are llama.cpp's C<--cache-type-k> and
C<--cache-type-v>: C<f16> (the default), C<f32>, C<bf16>, C<q8_0>, C<q4_0>,
C<q4_1>, C<iq4_nl>, C<q5_0> or C<q5_1>. A quantized cache holds a long
context in less memory: with C<q8_0> for both a position takes 17/32 of its
f16 bytes, with C<q4_0> 9/32; the keys and values are rounded to the type as
llama.cpp rounds them, and the logits are llama.cpp's with the same types.
A quantized C<type_v> needs flash attention (C<flash_attn> 1 or C<'auto'>,
which then turns it on where the device can), as in llama.cpp, and croaks
otherwise; a quantized type croaks too where a head is not a whole number of
its blocks (32 values). A saved cache (L<Lugh::KVCache/save>) loads only into
a session with the same types.

    my $long = Lugh::Inference->new(model => $model, n_ctx => 8192,
        flash_attn => 1, type_k => 'q8_0', type_v => 'q8_0');
    print $long->type_k, "\n";    # q8_0

Where the layers go (the options of llama.cpp's of these names; only devices
that take whole layers count: GPUs and RPC servers, not the CPU or BLAS):

    my $split = Lugh::Inference->new(
        model        => $model,
        rpc          => ['10.0.0.2:50052', '10.0.0.3:50052'],   # or '10.0.0.2:50052,10.0.0.3:50052'
        rpc_timeout  => 60,       # seconds a server may take to answer (0: no limit)
        n_gpu_layers => 20,       # the last 20 of n_layer + 1 on the devices (default: all)
        tensor_split => [1, 1],   # their shares, in device order (default: by free memory)
        # main_device => 0,       # or: every offloaded layer on that one device
    ) if Lugh::has_rpc() && @ARGV;

C<backend> picks the local devices: C<auto> every GPU and accelerator there
is (as llama.cpp uses all it finds), C<CPU> none, another name that backend's
devices. The devices of the C<rpc> servers (see L<Lugh/rpc_server>; llama.cpp's
C<rpc-server> serves too) come first in the device list, in the order given,
then the local GPUs. Of the model's n_layer + 1 layers (the output projection
counts as the last) the last C<n_gpu_layers> go to the devices, shared out in
the proportions of C<tensor_split> (one number per device; by default each
device's free memory), each device taking a run of consecutive layers; the
token embeddings and the other layers stay on the CPU. C<main_device> puts
every offloaded layer on that one device instead (llama.cpp's
C<--split-mode none>). Weights and KV cache live with their layer, and so do
the pairs of a LoRA adapter read from a file (copied there the first time a
session over these devices uses it, kept while the adapter lives; an adapter
being trained stays on the CPU); ggml's scheduler moves activations between
devices and runs on the CPU what a device cannot. C<< $inference->devices >> tells the outcome. C<n_gpu_layers> with no
device to take layers leaves everything on the CPU; C<tensor_split> and
C<main_device> then croak, as they do when they do not fit the devices.

A server that cannot be reached croaks here, naming it. One that exits or
does not answer within C<rpc_timeout> later makes the call under way croak
(naming the server; no token of that step reaches a callback), and every later
call on this session croak the same way: make a new session once the server is
back. The rest of the process (other sessions, other objects) carries on.

Croaks when the model's architecture is not supported (naming it and those
that are, L<Lugh/supported_architectures>), when the
backend is unknown or unavailable (listing those available), and on an
unknown option.

C<n_threads> above the number of CPUs the process may run on
(C<< Lugh::cpu_features()->{n_cpus} >>) is lowered to it: ggml's CPU workers
wait for each other after every operation by spinning, so a thread with no
core of its own stalls all the others for a whole scheduler time slice at each
of the hundreds of operations of a token (measured on 2 cores: SmolLM2 took
7 ms a token on 2 threads and 3 s on 3 before this cap). C<n_threads> tells
the number used.

=head1 SETTINGS

=head2 backend, n_threads, n_ctx, n_batch, flash_attn, type_k, type_v

    printf "%s, %d threads, context %d, batch %d, flash attention %s, cache %s/%s\n",
        $inference->backend, $inference->n_threads, $inference->n_ctx,
        $inference->n_batch, $inference->flash_attn ? 'on' : 'off',
        $inference->type_k, $inference->type_v;

The settings in effect, defaults resolved (C<flash_attn> is 1 or 0 even when
C<'auto'> was asked for; C<type_k> and C<type_v> are ggml's type names).

=head2 n_vocab, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx_train, rope_freq_base, norm_eps, architecture

    print $inference->n_vocab, "\n";    # 49152 (SmolLM2)
    printf "%d layers, %d wide, %d heads (%d for K/V) of %d\n", $inference->n_layer,
        $inference->n_embd, $inference->n_head, $inference->n_head_kv, $inference->head_dim;

The hyperparameters the session runs the model with, as the engine resolved
them (defaults filled in: C<n_head_kv> is C<n_head> when the file has none,
C<head_dim> is C<n_embd / n_head> unless the file gives C<key_length>).
C<architecture> is the row of L<Lugh/supported_architectures> in use.

=head2 devices

    for my $device ($inference->devices) {
        printf "%s (%s): %d layers\n", @$device{qw(name description layers)};
    }
    # CPU (AMD EPYC 7B13): 30 layers

The devices that hold the session's layers, as hashes C<{name, description,
layers}>, in device order, the CPU last (when it holds any): C<RPC0> and
C<RPC1> for the first two RPC servers' devices (described by their
C<host:port>), C<Vulkan0> ... for local GPUs. The layer counts add up to
C<n_layer>; the output layer is on the last device.

=head2 model

    my $model = $inference->model;
    print $model->architecture, "\n";

The model this session runs (a Lugh::Model object for the same loaded model).

=head1 FORWARD PASSES

Every forward pass takes token ids (integers in C<[0, n_vocab)>), croaks on an
empty list, and, without a cache, sees only the tokens given.

=head2 forward

    my @logits = $inference->forward(\@tokens);
    my @logits = $inference->forward(tokens => \@tokens);
    my @logits = $inference->forward(tokens => \@new, cache => $cache);
    my @logits = $inference->forward(tokens => \@tokens, pool => $pool);
    my $rows   = $inference->forward(sequences => [\@a, \@b], caches => [$c1, $c2]);

The C<n_vocab> logits of the next token after the last one given. With
C<< cache => $cache >> the tokens are appended to the cache (see
L<Lugh::KVCache>), so only the new tokens are computed; with
C<< pool => $pool >> the compute allocation of the pool is reused (see
L<Lugh::MemoryPool>). With C<sequences> (and optionally C<caches>) it is
L</forward_batch>. Valid keys: C<tokens>, C<cache>, C<pool>, C<sequences>,
C<caches>, C<as_object>.

    my $logits = $inference->forward(\@tokens, as_object => 1);
    my ($best) = $logits->top_k(1);

With C<< as_object => 1 >> (every spelling but C<forward_simple> takes it) the
logits come back as a L<Lugh::Logits> object, which keeps them in native
memory (rows of them, as an array reference, from C<forward_all> and the
batched spellings).

Called in void context, C<forward> computes and fills the cache but builds no
list of logits (for a 262,144-token vocabulary that list costs milliseconds):

    $inference->forward(tokens => \@prompt, cache => $cache);    # prefill only

=head2 forward_all

    my $rows = $inference->forward_all(\@tokens);
    my $rows = $inference->forward_all(tokens => \@tokens, cache => $cache, pool => $pool);
    my @last = @{ $rows->[-1] };

An array reference with one array reference of C<n_vocab> logits per token
given.

=head2 forward_cache

    my $cache  = $inference->create_kv_cache;
    my @logits = $inference->forward_cache($cache, \@prompt);
    @logits    = $inference->forward_cache($cache, [$next]);    # one step
    @logits    = $inference->forward_cache(cache => $cache, tokens => [$next]);

The same as C<< forward(cache => $cache, tokens => \@tokens) >>. Croaks,
before computing anything, when the tokens do not fit in the cache's context.

=head2 forward_pool, forward_with_pool

    my $pool   = $inference->create_memory_pool;
    my @logits = $inference->forward_pool($pool, \@tokens);
    my @logits = $inference->forward_with_pool($pool, \@tokens);
    my @logits = $inference->forward_pool(pool => $pool, tokens => \@tokens);

The same as C<< forward(pool => $pool, tokens => \@tokens) >>.

=head2 forward_cache_pool

    my @logits = $inference->forward_cache_pool($cache, $pool, \@tokens);
    my @logits = $inference->forward_cache_pool(cache => $cache, pool => $pool, tokens => \@tokens);

Both a cache and a pool.

=head2 forward_batch

    my $rows = $inference->forward_batch([\@seq1, \@seq2, \@seq3]);
    my $rows = $inference->forward_batch(sequences => [\@a, \@b], caches => [$c1, $c2]);
    my @logits_of_seq2 = @{ $rows->[1] };

Several sequences evaluated together, in one graph per step, each masked to
its own tokens: an array reference holding, per sequence, the logits after
its last token. With C<caches> (one L<Lugh::KVCache> per sequence, each at
most once), each sequence is appended to its own cache, so several
conversations can be continued side by side. C<< pool => $pool >> reuses a
pool's allocation.

=head2 forward_batch_pool

    my $rows = $inference->forward_batch_pool($pool, \@sequences);

The same as C<< forward_batch(sequences => \@sequences, pool => $pool) >>.

=head2 forward_simple

    my @logits = $inference->forward_simple(\@tokens);

The same as C<forward(\@tokens)> (a spelling of Lugh 0.12).

=head1 SAMPLING

Sampling is llama.cpp b11434's sampler chain (its F<common/sampling.cpp>
builds it, F<src/llama-sampler.cpp> computes it), step for step and in its
arithmetic: float sums where llama.cpp sums in float, double where it uses
double, the candidates in the order llama.cpp's array holds them. The random
numbers are C<std::mt19937> seeded with the 32-bit C<seed>, turned into
numbers in [0, 1) as libstdc++ does. So the guarantee is: B<the same model
file, the same options, the same seed and a Lugh built for the same CPU
kernel family as llama.cpp give llama.cpp's tokens> (C<llama-completion
--seed> with the same flags; t/34_sampling_reference.t checks every sampler
on the test models). A different kernel family changes the logits in their
last bits, and a draw near a boundary may then go the other way.

Without a seed, the seed is drawn from Lugh's default generator (never perl's
C<rand>): call C<Lugh::srand($n)> once to make every unseeded call after it
reproducible (see L<Lugh/srand>). Seeds are 32-bit, as llama.cpp's: a larger
C<seed> is taken modulo 2**32.

=head2 The chain

    logit_bias -> penalties -> dry -> top_n_sigma -> top_k -> typ_p -> top_p
               -> min_p -> xtc -> temperature -> dist (the draw)

C<logit_bias> comes first and the draw last; the steps between run in the
order of the C<samplers> option (above: the default, llama.cpp's). With
C<mirostat_mode> 1 or 2 the chain is C<logit_bias>, C<temperature>, then
mirostat, which draws itself: penalties, DRY and the truncations are not used,
as in llama.cpp. C<greedy> (or a temperature of 0) runs the chain and takes
the first of the most likely tokens left, with no draw.

=head2 sample

    my $id = $inference->sample(\@logits);                        # defaults below
    my $id = $inference->sample(\@logits, greedy => 1);           # argmax
    my $id = $inference->sample(\@logits,
        temperature => 0.7, top_k => 50, top_p => 0.9, min_p => 0.05,
        repeat_penalty => 1.1, presence_penalty => 0.2, frequency_penalty => 0.1,
        penalty_last_n => 64, history => \@ids_so_far, seed => 42);
    my $id = $inference->sample(\@logits, seed => 7,
        dry_multiplier => 0.8, xtc_probability => 0.5, typical_p => 0.95,
        logit_bias => { 13 => 2.5, 198 => '-inf' },
        samplers => [qw(penalties dry top_k typ_p top_p min_p xtc temperature)]);

The index of the chosen logit (the token id). The options (llama-cpp-python's
names; defaults are llama.cpp's common defaults):

=over 4

=item temperature (0.8)

Divides the logits. 0 means greedy (the first most likely token).

=item top_k (40)

Keeps the k most likely tokens (0: off).

=item top_p (0.95)

Keeps the fewest most likely tokens whose probabilities reach p (1: off).

=item min_p (0.05)

Keeps the tokens whose logit is at least the best one's plus ln(p), that is
at least p times as likely (0: off). B<Changed>: Lugh's default was 0 (off)
before it adopted llama.cpp's defaults.

=item typical_p (1)

Locally typical sampling: the tokens whose surprise is closest to the
distribution's entropy, until their probabilities pass p (1: off).

=item top_n_sigma (-1)

Keeps the tokens within n standard deviations of the best logit (<= 0: off).

=item xtc_probability (0), xtc_threshold (0.1)

XTC, "exclude top choices": with this probability (drawn from a generator of
its own, seeded with the seed), removes every token at least C<xtc_threshold>
likely but the least likely of them (probability 0 or a threshold above 0.5:
off).

=item repeat_penalty (1), presence_penalty (0), frequency_penalty (0), penalty_last_n (64)

Over the last C<penalty_last_n> ids of the history (the prompt and what was
generated; C<history> for sample()): a repeated token's logit is multiplied
by C<repeat_penalty> when <= 0 and divided by it otherwise, then lowered by
C<count * frequency_penalty + presence_penalty>.

=item dry_multiplier (0), dry_base (1.75), dry_allowed_length (2), dry_penalty_last_n (64), dry_sequence_breakers (["\n", ":", "\"", "*"])

DRY, "don't repeat yourself": a token that would extend a repetition of more
than C<dry_allowed_length> tokens of the last C<dry_penalty_last_n> loses
C<dry_multiplier * dry_base ** (length - dry_allowed_length)>. A sequence
breaker (text, tokenized with the model's vocabulary as llama.cpp does) ends
the stretch searched for repetitions. Multiplier 0: off.

=item mirostat_mode (0; also spelled mirostat), mirostat_tau (5), mirostat_eta (0.1)

Mirostat 1 or 2 (0: off): targets a surprise of C<mirostat_tau> bits,
learning at rate C<mirostat_eta>; its state carries from token to token of a
generation.

=item logit_bias ({})

C<< { token_id => bias } >>: added to those logits first; C<'-inf'> bans a
token.

=item samplers

The order of the chain's middle steps: an array of llama.cpp's C<--samplers>
names (C<penalties dry top_n_sigma top_k typ_p top_p min_p xtc temperature>;
also C<top-k>, C<topk>, C<nucleus>, C<temp>, C<typ>), or one string of them
separated by C<;>. A step left out is not run.

=item seed, greedy, history

The 32-bit seed (none: from the default generator); greedy; the ids before
these logits, oldest first (for the penalties and DRY).

=back

Out-of-range values croak naming the option (temperature < 0, top_p outside
(0, 1], min_p, typical_p, xtc_probability or xtc_threshold outside [0, 1],
repeat_penalty <= 0, a negative or infinite dry_multiplier, dry_base,
mirostat_tau or mirostat_eta, mirostat_mode other than 0, 1, 2, an unknown
sampler name, a logit_bias key that is no token id or a bias that is NaN or
+inf, a NaN logit).

=head2 sample_top_p

    my $id = $inference->sample_top_p(\@logits, temperature => 0.8, top_p => 0.95);

    my $id = $inference->sample_top_p(\@logits, 0.9, 1.0);    # top_p, temperature

Nucleus sampling only (the chain top_p, temperature). Options: C<temperature> (0.8), C<top_p>
(0.95), C<seed>. The positional form, C<top_p> then C<temperature> after the
logits, is the one Lugh 0.12's own tests used (0.12 itself ignored the
values; this Lugh applies them).

=head2 sample_top_k

    my $id = $inference->sample_top_k(\@logits, temperature => 0.8, top_k => 40);

    my $id = $inference->sample_top_k(\@logits, 40, 1.0);      # top_k, temperature

Top-k sampling only (the chain top_k, temperature). Options: C<temperature> (0.8), C<top_k> (40),
C<seed>. Positionally, C<top_k> then C<temperature>, as for L</sample_top_p>.

=head1 GENERATION

=head2 generate

    my @ids = $inference->generate(\@prompt,
        max_tokens  => 128,     # default 128
        temperature => 0.8,     # and every option of sample() but history
        top_k       => 40,
        top_p       => 0.95,
        greedy      => 0,
        seed        => 42,
        eos_token   => 2,       # default: the model's end-of-generation tokens
        stop        => ["\n\n", 'THE END'],
        progress    => sub { my ($done, $total) = @_; return 0 },   # prompt batches
        callback    => sub {
            my ($token, $count) = @_;
            print "token $count: $token\n";
            return 0;           # true stops the generation
        },
    );

The generated token ids (not the prompt; a reference to them in scalar
context). The prompt is evaluated in batches of C<n_batch>, then each new
token is computed alone against the KV cache. The penalties see the prompt
and the tokens generated so far. Generation stops at C<max_tokens>; at an
end-of-generation token (the model's, or C<eos_token> if given, which then
replaces the model's), which is neither returned nor passed to the callback;
once the generated text contains one of the C<stop> strings (they may span
several tokens; the tokens that complete it are returned); or when the
callback returns true.

The callback is called once per generated token with the token id and the
number of tokens generated so far. If it dies, generation stops, everything
is freed, and the exception propagates unchanged (an exception object stays
the same object); the inference object stays usable.

Croaks before computing anything when the prompt is empty or has an id out
of range, or when the prompt plus C<max_tokens> does not fit in C<n_ctx>.

=head3 Text as it is generated

    $inference->generate(\@prompt, stop => ["\nUser:"], on_text => sub {
        my ($text) = @_;
        print $text;
        return 0;               # true stops the generation
    });

C<on_text> receives the generated text in pieces of whole UTF-8 characters
(a character split across tokens comes once it is complete). Text that could
be the beginning of a stop string is held back until it is known not to be;
a stop string, and anything after it, is never passed. Its return value
stops generation like the callback's. Both C<callback> and C<on_text> may be
given.

=head3 Continuing a KV cache

    my $cache = $inference->create_kv_cache;
    my @reply = $inference->generate(\@turn1, cache => $cache);
    # turn 2: the whole conversation again; only what is new is evaluated
    my @turn2 = (@turn1, @reply, @next_question);
    $inference->generate(\@turn2, cache => $cache, stats => \my %stats);
    print "$stats{n_reused} tokens reused, $stats{n_evaluated} evaluated\n";

With C<cache>, the prompt is the whole context: the longest prefix of it that
the cache already holds (see L<Lugh::KVCache/tokens>) is kept, the rest of
the cache is dropped, and only the remaining prompt tokens are evaluated (at
least the last one, whose logits are needed). The generated tokens are
appended to the cache, all but the last one. While the generation runs, the
cache cannot be used by the callbacks. To continue a conversation in a later
process, save the cache to a file and load it into a session of the same
model and settings (L<Lugh::KVCache/save>, L<Lugh::KVCache/load>).

=head3 Statistics

    $inference->generate(\@prompt, stats => \my %stats);
    print "stopped by $stats{stop_reason} after $stats{n_generated} tokens,",
        " $stats{tokens_per_second} tokens/s\n";

After every C<generate> (and L</chat>), L</last_stats> returns the same
statistics; C<stats> takes a hash reference to fill with them as well. They
are: C<stop_reason> (C<eos>: an end-of-generation token; C<stop_string>: a
stop string; C<max_tokens>; C<callback>: a callback returned true;
C<cancelled>: the C<progress> callback (L</"Progress, cancelling and signals">) returned true), C<text> (the generated text, ending
before a stop string), C<n_prompt>, C<n_reused> (prompt tokens found in the
cache), C<n_evaluated>, C<n_generated>, C<prompt_seconds>,
C<generate_seconds>, C<prompt_tokens_per_second> and C<tokens_per_second>.

=head3 Log-probabilities

    $inference->generate(\@prompt, logprobs => 3, stats => \my %stats);
    for my $t (@{ $stats{logprobs} }) {
        printf "%-12s %7.3f  (best: %s)\n", $t->{text}, $t->{logprob},
            join(', ', map { "$_->{text} $_->{logprob}" } @{ $t->{top} });
    }

With C<< logprobs => N >>, the statistics' C<logprobs> (in
L</last_stats>, and C<stats> if given) has one entry per generated token: C<token> (its id),
C<text>, C<logprob> (natural logarithm of its probability) and C<top>, the
C<N> most likely tokens at that step as C<token>, C<text>, C<logprob>, best
first (0 for none). The probabilities are the softmax of the logits divided
by the sampling temperature (1 when greedy), as llama-cpp-python reports
them, before top-k/top-p filtering.

=head3 Grammars

    my $json = Lugh::Grammar->from_file('json.gbnf');
    my @ids = $inference->generate(\@prompt, grammar => $json, greedy => 1, stats => \my %stats);
    my $data = JSON::PP->new->decode($stats{text}) if $stats{stop_reason} eq 'eos';

With C<< grammar => $grammar >> (a L<Lugh::Grammar>, or GBNF text with a
C<root> rule) only text the grammar allows is generated, exactly as
llama.cpp's C<--grammar> constrains it: a token is sampled without the
grammar, and if the grammar rejects it, again with every rejected token
removed (greedy: the most likely token the grammar allows). The
end-of-generation token is allowed only when the text is complete under the
grammar, and ends generation once nothing else may follow. Greedy
constrained generations give llama.cpp b11434's tokens, and so do seeded
ones (same options and seed, same CPU kernel family). A grammar object is
parsed once and can serve any number of calls; GBNF text is parsed at every
call. A syntax error croaks naming its line and column.

    my @lazy = $inference->generate(\@prompt, max_tokens => 64,
        grammar => 'root ::= "<tool_call>" [ \n]* "{" [^}]* "}" [ \n]* "</tool_call>"', grammar_trigger => '<tool_call>');

With C<< grammar_trigger => $text >> the grammar is lazy, as llama.cpp's
tool-call grammars are: the text is free until C<$text> is generated, and
from there on the grammar constrains it, starting at C<$text> (the grammar
must begin with it; a piece that carries on past it in a way the grammar
refuses croaks). L<Lugh::Chat> uses it for Hermes/Qwen tool calls.

=head3 JSON schemas and response_format

    my $schema = { type => 'object', required => ['name', 'age'],
        properties => { name => { type => 'string' }, age => { type => 'integer', minimum => 0 } } };
    $inference->generate(\@prompt, json_schema => $schema, stats => \my %stats);
    my $person = JSON::PP->new->decode($stats{text});

C<< json_schema => $schema >> constrains generation to JSON that the schema
describes, through the grammar llama.cpp b11434's C<--json-schema> makes of it
(C<json-schema-to-grammar>: see L<Lugh::Grammar/from_json_schema> for what is
supported, what croaks and what is not enforced). The schema is a hash
reference, JSON text, or a Lugh::Grammar made by C<from_json_schema> (the
conversion done once). B<A Perl hash has no key order>: the properties of a
schema given as a hash come in sorted key order, and the model writes them
in that order; give JSON text to choose the order. Constrained generations,
greedy and seeded, give llama.cpp's tokens.

C<response_format> is the OpenAI-style form that llama-server reads:
C<< { type => 'json_object', schema => $schema } >> (no schema: any JSON
value), C<< { type => 'json_schema', json_schema => { schema => $schema } } >>,
or C<< { type => 'text' } >> (no constraint). Only one of C<grammar>,
C<json_schema> and C<response_format> may be given. All three are options of
L</chat> and L<Lugh::Chat> too.

=head3 Progress, cancelling and signals

    my @ids = $inference->generate(\@long_prompt, progress => sub {
        my ($done, $total) = @_;
        printf STDERR "\rprompt %d/%d", $done, $total;
        return 0;               # true cancels
    });

C<progress> is called after each batch of the prompt (C<n_batch> tokens, one
graph evaluation) with the number of prompt tokens evaluated so far and the
number to evaluate (the prefix found in a C<cache> is not counted). If it
returns true, generation is cancelled cleanly: no token is generated, the
returned list is empty, C<stop_reason> is C<cancelled>, and a C<cache> keeps
the tokens evaluated so far (a later generate on it reuses them). If it
dies, it is handled as a dying C<callback>.

Perl defers signal handlers (C<%SIG>) to a safe point between its own
operations, and a native computation has none; C<generate> runs the pending
handlers after every prompt batch and every token, with or without
callbacks, so Ctrl-C reaches a C<$SIG{INT}> handler within one token. A
handler that dies stops generation like a dying callback: the exception
propagates unchanged, the cache and session stay usable. (Under
C<PERL_SIGNALS=unsafe> signals wait until the call returns.)

=head2 generate_parallel

    my $results = $inference->generate_parallel(
        [ { prompt => $text_or_tokens, max_tokens => 32, on_token => sub { ... }, %options }, ... ],
        slots => 4, deterministic => 0);

Runs every request, several at once on this session (continuous batching:
a L<Lugh::Batch> of C<slots> slots, default 4, each with a KV cache of the
session's C<n_ctx> positions), and returns one result per request, in their
order: C<text>, C<tokens> (the generated ids), C<finish_reason> (as
L</generate>'s C<stop_reason>: eos, max_tokens, stop_string, callback; or
C<error> with the message in C<error>), C<usage> (C<prompt_tokens>,
C<cached_tokens>, C<completion_tokens>) and with C<< logprobs => N >> the
C<logprobs> entries of L</generate>. Each request takes the options of
L<Lugh::Batch/add>: a text or token prompt, generate's tuning and sampling
options, and C<on_token>, called with each token event (a hash with
C<token> and C<text>; a true return stops that request). A callback that
dies stops all the requests and the error comes out of the call. Batching
can change rounding with some weight types, so greedy results may differ
from each request's solo C<generate> after a few tokens;
C<< deterministic => 1 >> makes them equal whatever shares the batch, at a
cost in throughput (see L<Lugh::Batch>).

    my $results = $inference->generate_parallel(
        [ map { { prompt => $_, max_tokens => 3, greedy => 1 } } 'One, two,', 'Red, green,' ], slots => 2);
    print scalar(@$results), "\n";    # 2

=head2 last_stats

    $inference->generate([504, 3575, 282, 4649, 314], max_tokens => 3, greedy => 1);
    my $s = $inference->last_stats;
    print "$s->{stop_reason}\n";                   # max_tokens
    printf "%d tokens at %.1f tokens/s\n", $s->{n_generated}, $s->{tokens_per_second};

The statistics of the last L</generate> or L</chat> on this object (a copy:
a hash reference, as described under L</Statistics>), or undef before the
first one.

=head2 chat

    my $reply = $inference->chat(
        messages => [
            { role => 'system', content => 'Be brief.' },
            { role => 'user',   content => 'What is 2 + 2?' },
        ],
        max_tokens => 64,
        callback   => sub { print $_[0]; 0 },    # text pieces, as on_text
        greedy     => 1,
    );

One reply to a list of messages, rendered with the model's chat template (or
C<template>, C<format> or C<prompt>, as in L<Lugh::Chat/new>); the reply text
ends before the end-of-turn token. It takes every option of
L<Lugh::Chat/new> and L<Lugh::Chat/ask>. For a conversation that goes on,
L<Lugh::Chat> reuses the KV cache between turns.

With C<tools> (see L<Lugh::Chat/Tools and reasoning>) it returns the
reply's content; C<< stats => \%stats >> fills C<%stats> with generate's
statistics and the reading of the reply: C<tool_calls>, C<content>,
C<reasoning_content> and the raw C<text>.

    my %stats;
    my $reply = $inference->chat(
        messages => [ { role => 'user', content => 'What time is it?' } ],
        tools    => [ { type => 'function', function => { name => 'now', description => 'The current time' } } ],
        stats    => \%stats, greedy => 1,
    );
    print "call: $_->{function}{name}\n" for @{ $stats{tool_calls} };
    print ref $stats{tool_calls}, "\n";    # ARRAY

=head1 SCORING AND EMBEDDINGS

=head2 logprobs

    my $r = $inference->logprobs('The capital of France is Paris.', top => 3);
    print scalar @{ $r->{logprobs} }, "\n";       # 6
    printf "perplexity %.3f over %d tokens\n", $r->{perplexity}, $r->{n_scored};
    for my $i (0 .. $#{ $r->{logprobs} }) {
        printf "%6d %8.3f\n", $r->{tokens}[$i + 1], $r->{logprobs}[$i];
    }

Scores a text (a string, tokenized as L</perplexity> does, or an array
reference of token ids) in one pass on an empty cache, and returns a hash
reference: C<tokens> (the ids scored), C<logprobs> (for each token after
the first, the natural log of its probability given the tokens before it: one
entry fewer than C<tokens>), C<n_scored>, C<nll> (the sum of the negative
log-probabilities) and C<perplexity> (C<exp(nll / n_scored)>). With
C<< top => N >>, also C<top>: for each scored position the C<N> most likely
tokens as C<[id, logprob]> pairs, best first. The probabilities are the
softmax of the raw logits (temperature 1), the sum of exponentials taken in
double precision as llama.cpp's C<llama-perplexity> takes it.

The text must fit in C<n_ctx> and have at least 2 tokens; for a longer text
use L</perplexity>. Option C<< parse_special => 1 >> reads special tokens
written in the text (default 0).

=head2 perplexity

    my $long_text = join ' ', map { "Line $_ of a long text about cats and mats." } 1 .. 60;
    my $p = $inference->perplexity($long_text, n_ctx => 128);
    print "$p->{n_chunks} chunks\n";                # 6 chunks
    printf "PPL = %.4f +/- %.5f over %d chunks\n", $p->{perplexity}, $p->{error}, $p->{n_chunks};

The perplexity of a long text computed exactly as llama.cpp's
C<llama-perplexity -c N_CTX> computes it, so the numbers can be compared: the
text is tokenized with the model's BOS (if it adds one) and no special-token
parsing, cut into windows of C<n_ctx> tokens (default: the session's n_ctx),
each evaluated on an empty cache with its first token replaced by the BOS
when the model adds one, and the tokens of the second half of each window
are scored. The text needs at least two windows of tokens. C<n_chunks>
limits the windows used (default: all whole windows).

Returns a hash reference: C<perplexity>, C<error> (its standard error,
as llama-perplexity's C<+/->; undef when it cannot be estimated), C<chunks>
(the estimate after each window, llama-perplexity's C<[1]...,[2]...>),
C<n_chunks>, C<n_ctx>, C<n_scored>, C<n_tokens> and C<nll> (the mean negative
log-likelihood). C<n_ctx> must not exceed the session's.

=head2 embed

    my $vector = $inference->embed('A sentence to embed', pooling => 'mean');
    print scalar @$vector, "\n";                   # 576 (SmolLM2's n_embd)

    my $rows = $inference->embed([1, 2, 3], pooling => 'none');
    print scalar @$rows, "\n";                     # 3 (one vector per token)

The embedding of a text (a string or an array reference of token ids): the
model's final hidden state (after the output norm, before the output
projection), computed as llama.cpp's embedding mode computes it, with the
text alone in a fresh cache. For a BERT encoder (C<bert>, C<nomic-bert>:
embedding models such as bge, MiniLM, nomic-embed) it is the last layer's
output, every token seeing the whole text; such a text must fit in
C<n_batch> tokens. Returns an array reference of C<n_embd>
numbers, or with C<< pooling => 'none' >> an array reference of one such
array per token. Options:

=over

=item pooling

C<mean> (the average over the tokens), C<last> (the last token's state, as
decoder embedding models use), C<cls> (the first token's) or C<none>.
Default: the model's C<ARCH.pooling_type> when its file names one, else
C<mean>.

=item normalize

Default 1: each vector is scaled to unit Euclidean length (llama.cpp's
C<--embd-normalize 2>, its default). 0 leaves it as computed.

=item parse_special

Default 1, as C<llama-embedding>: special tokens written in the text (like
C<< <|im_start|> >>) are read as those tokens. Texts are tokenized with the
tokens the model adds (its BOS and EOS, when it adds them).

=back

=head2 embed_batch

    my @vectors = $inference->embed_batch(['first text', 'second text', [1, 2, 3]],
        pooling => 'mean');
    print scalar @vectors, " embeddings\n";        # 3 embeddings

Like L</embed> for many texts at once (each a string or an array of token
ids), in order; a reference to the list in scalar context. Short texts are
evaluated together, as many as fit in C<n_batch> tokens in one graph, each
seeing only itself, so many short texts cost little more than one long one.
Takes the options of L</embed>.

=head2 rerank

    my $scores = $inference->rerank(query => 'what is a panda?',
        documents => ['The giant panda is a bear of China.', 'Paris is in France.']);
    my @best = sort { $scores->[$b] <=> $scores->[$a] } 0 .. $#$scores;

How relevant each document is to the query, by a reranker: a BERT encoder
with a classification head (the C<cls> and/or C<cls.output> weights, as
bge-reranker has), computed as llama.cpp's rank pooling: the head on the
first token's final state. Returns an array reference of scores, one per
document in order (higher is more relevant; the head's first output, not
squashed by a sigmoid). Each pair is tokenized as C<llama-embedding
--pooling rank> does: for BERT's WordPiece C<[CLS] query [SEP] document
[SEP]>; special-token texts in the query and documents are not parsed. Each
pair must fit in C<n_batch> tokens. Options: C<query> (text, required),
C<documents> (an array reference of texts, at least one, required), C<lora>
(as for L</generate>). Croaks when the model has no classification head (a
decoder, or an embedding model that is not a reranker).

=head1 DIAGNOSTICS

=head2 profile

    $inference->profile(reset => 1);                  # start counting afresh
    $inference->generate(\@prompt, max_tokens => 64);
    my $p = $inference->profile;
    for my $phase (qw(build allocate inputs compute read sample callback)) {
        printf "%-9s %8.1f us a step\n", $phase, 1e6 * $p->{$phase}{seconds} / $p->{steps};
    }

Where the session's time went since it was made (or since the last
C<< reset => 1 >>, which returns the counts and then zeroes them), as a hash
reference: C<steps>, the number of graph evaluations, and for each phase a
hash of C<seconds> (total) and C<count> (times entered). The phases:
C<build> (building a graph: only when no graph of that shape is kept),
C<allocate> (compute memory for a new graph), C<inputs> (writing token ids,
positions, masks), C<compute> (the backend running the graph), C<read>
(copying the logits out), C<sample> and C<callback> (generate's sampling and
the caller's callbacks, Perl included). C<bench/profile-decode> prints it
per token for the test models.

=head1 CACHES AND POOLS

=head2 create_kv_cache

    my $cache = $inference->create_kv_cache;
    $inference->forward_cache($cache, \@prompt);
    print $cache->n_cached, "\n";

A new, empty L<Lugh::KVCache> of C<n_ctx> positions (f16 keys and values, as
llama.cpp).

=head2 create_memory_pool

    my $pool = $inference->create_memory_pool;
    $inference->forward_pool($pool, [504, 3575, 282]) for 1 .. 3;    # one allocation
    print $pool->n_allocations, "\n";                         # 1

A new L<Lugh::MemoryPool>: a compute allocation reused by the forward passes
given it.

=head1 SEE ALSO

L<Lugh>, L<Lugh::Model>, L<Lugh::KVCache>, L<Lugh::MemoryPool>

=cut
