package Lugh::Server;

use strict;
use warnings;

# The XS sub lives in Lugh.so, which Lugh.pm loads (with every package).
require Lugh;
use Scalar::Util ();

our $VERSION = '0.20';

sub available { return defined &Lugh::Server::_serve ? 1 : 0 }

sub new {
    my ($class, @args) = @_;
    Lugh::_croak('Lugh::Server->new: this Lugh was built without the server (LUGH_SERVER=0)') unless available();
    Lugh::_croak('Lugh::Server->new: options must be name => value pairs') if @args % 2;
    my %opt = @args;
    my $inference = delete $opt{inference};
    Lugh::_croak('Lugh::Server->new: inference must be a Lugh::Inference')
        unless Scalar::Util::blessed($inference) && $inference->isa('Lugh::Inference');
    my %known = map { $_ => 1 } _option_names();
    if (my @unknown = sort grep { !$known{$_} } keys %opt) {
        Lugh::_croak("Lugh::Server->new: unknown option '$unknown[0]' (known: inference, "
            . join(', ', sort keys %known) . ')');
    }
    delete @opt{ grep { !defined $opt{$_} } keys %opt };
    return bless { inference => $inference, options => \%opt }, $class;
}

sub inference { return $_[0]{inference} }

sub run {
    my ($self) = @_;
    _serve($self->{inference}, %{ $self->{options} });
    return $self;
}

1;

__END__

=head1 NAME

Lugh::Server - an OpenAI-compatible HTTP server over one Lugh::Inference

=head1 SYNOPSIS

    use Lugh;
    use Lugh::Server;

    my $model = Lugh::Model->new(model => 'smollm2-135m-q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 2048);
    Lugh::Server->new(inference => $inference, port => 8080)->run;   # until SIGTERM or SIGINT

    # then, from anywhere:
    #   curl http://127.0.0.1:8080/v1/chat/completions \
    #     -d '{"messages": [{"role": "user", "content": "Hi"}]}'

=head1 DESCRIPTION

The server of C<lugh serve>: the endpoints of OpenAI's API as llama-server
answers them (C<GET /health>, C<GET /v1/models>, C<POST /v1/chat/completions>,
C<POST /v1/completions>, C<POST /v1/embeddings>, C<POST /tokenize>,
C<POST /detokenize>, each also without C</v1>), Ollama's (below) and a chat
page at C</>. It is
written in Rust (axum on tokio) inside Lugh.so; a Lugh built with
C<LUGH_SERVER=0 perl Makefile.PL> has no server, and L</available> says so.

Up to C<n_parallel> requests run at once (L<Lugh::Batch>: each slot its own
context of the session's C<n_ctx> positions, one token of every running
request a step, a new request's prompt prefix taken from a slot that holds
it); others wait, up to C<max_queue> of them, and more are answered 503
with a C<Retry-After> header. With C<deterministic> every request's output
is its solo, uncached result. A client that disconnects cancels its request at the
next token. Errors are OpenAI's JSON (C<{"error": {"code", "message",
"type"}}>) with the matching status: 400 for malformed JSON, wrong types,
an unknown C<model> or a prompt longer than the context; 401 without the API
key; 404 for an unknown path; 413 for a body over C<max_body_bytes>.

Ollama's API is answered too, over the same engine: C<GET /api/tags> (the
model, with Ollama's C<details>), C<GET /api/version>, C<POST /api/chat>
(C<messages>, C<tools>) and C<POST /api/generate> (C<prompt> and C<system>
through the chat template, or the prompt as it is with C<"raw": true>).
Replies stream as NDJSON (C<application/x-ndjson>, one JSON object a line,
the last with C<"done": true>) unless C<"stream": false>; C<options> takes
Ollama's sampling options (C<temperature>, C<top_k>, C<top_p>, C<min_p>,
C<typical_p>, C<seed>, C<num_predict>, C<stop>, C<repeat_penalty>,
C<repeat_last_n>, C<presence_penalty>, C<frequency_penalty>, C<mirostat>,
C<mirostat_tau>, C<mirostat_eta>; those about loading the model, such as
C<num_ctx>, are ignored: the server's own settings hold), C<format> is
C<"json"> or a JSON schema. The last line has C<done_reason>,
C<prompt_eval_count>, C<eval_count> and the durations in nanoseconds.
Errors are Ollama's C<{"error": "..."}>, with the same statuses; an unknown
option is a 400 that lists the known ones.

=head1 METHODS

=head2 available

    print Lugh::Server->available ? "server built in\n" : "no server\n";

1 when this Lugh was built with the server (the default).

=head2 new

    my $server = Lugh::Server->new(inference => $inference, port => 8080);

Options (only C<inference> is required):

=over

=item inference

The L<Lugh::Inference> that answers; its C<n_ctx> is each request's context.

=item host, port

Where to listen: 127.0.0.1 and 8080 by default (port 0: any free port).

=item n_parallel

Slots: requests served at once (1).

=item deterministic

1: each request's output equals its solo, uncached run whatever else is
served (no prompt cache, one graph per request); 0 by default.

=item api_key

Every endpoint but C</health> and C</> then wants C<Authorization: Bearer KEY>.

=item embeddings, pooling

Answer C</v1/embeddings> (off by default: 501), pooled with C<pooling>
(none, mean, cls, last; the model's own by default, else mean).

=item model_name

The name in C</v1/models> and in answers (default: the model's file path);
a request's C<model> must be this name, the file's name or the file's name
without C<.gguf>.

=item chat_template

Jinja source of the chat template (default: the model's).

=item lora

Adapters applied to every request, as L<Lugh::Inference/generate> takes them.

=item timeout

Seconds a request may take, waiting included (600).

=item max_queue, max_body_bytes

Requests that may wait for a slot (64); the largest body accepted (8 MiB).

=back

=head2 run

    $server->run;

Serves until the process gets SIGTERM or SIGINT, then cancels the running
request (its stream ends) and returns. It prints
C<lugh: serving on http://HOST:PORT> on STDERR once it listens. While it
runs, the server owns SIGTERM and SIGINT (after it, they no longer stop the
process by default).

=head2 inference

The session the server answers with.

=head1 SEE ALSO

C<lugh serve> in L<lugh>.

=cut
