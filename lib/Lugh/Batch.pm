package Lugh::Batch;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Batch;` alone works too.
require Lugh;
use Scalar::Util ();

our $VERSION = '0.20';

# The options of new and add are the tables of xs-rs/subs/batch.rs; this
# file turns text prompts into tokens, events into hashes, and calls each
# request's on_token.

# Each object's callbacks and tokenizer, by the object's address (dropped
# with the object; emptied in a new thread, whose objects are others).
my %STATE;

sub DESTROY { delete $STATE{ Scalar::Util::refaddr($_[0]) } }
sub CLONE   { %STATE = () }
sub CLONE_SKIP { 1 }

sub _state { return $STATE{ Scalar::Util::refaddr($_[0]) } //= { on_token => {} } }

sub add {
    my ($self, @args) = @_;
    Lugh::_croak('Usage: $batch->add(prompt => $text | \@tokens, name => value, ...)') unless ref $self;
    @args = %{ $args[0] } if @args == 1 && ref $args[0] eq 'HASH';
    Lugh::_croak('Lugh::Batch->add: options must be name => value pairs') if @args % 2;
    my %opt = @args;
    my $on_token = delete $opt{on_token};
    Lugh::_croak('Lugh::Batch->add: on_token must be a code reference') if defined $on_token && ref $on_token ne 'CODE';
    if (defined $opt{prompt} && !ref $opt{prompt}) {
        my $state = _state($self);
        $state->{tokenizer} //= Lugh::Tokenizer->new(model => $self->inference->model);
        $opt{prompt} = [ $state->{tokenizer}->encode($opt{prompt}) ];
    }
    for my $name (qw(json_schema response_format)) {
        $opt{$name} = Lugh::Grammar::_json_text($opt{$name}, "Lugh::Batch->add: $name")
            if ref $opt{$name} && !Scalar::Util::blessed($opt{$name});
    }
    my $id = _add($self, %opt);
    _state($self)->{on_token}{$id} = $on_token if $on_token;
    return $id;
}

# An event row from the engine as a hash.
sub _event {
    my ($self, $row) = @_;
    my ($type, $id, @rest) = @$row;
    if ($type eq 'token') {
        my %e = (type => 'token', id => $id, token => $rest[0], text => $rest[1]);
        $e{logprob} = $self->inference->_logprob_entries([ $rest[2] ])->[0] if defined $rest[2];
        return \%e;
    }
    if ($type eq 'done') {
        delete _state($self)->{on_token}{$id};
        return { type => 'done', id => $id, finish_reason => $rest[0], text => $rest[1],
            usage => { prompt_tokens => $rest[2], cached_tokens => $rest[3], completion_tokens => $rest[4] } };
    }
    delete _state($self)->{on_token}{$id};
    return { type => 'error', id => $id, error => $rest[0] };
}

sub step {
    my ($self) = @_;
    Lugh::_croak('Usage: $batch->step') unless @_ == 1 && ref $self;
    my @events = map { $self->_event($_) } _step($self);
    my $callbacks = _state($self)->{on_token};
    my @out;
    for my $e (@events) {
        push @out, $e;
        my $cb = $e->{type} eq 'token' && $callbacks->{ $e->{id} } or next;
        my $stop;
        unless (eval { $stop = $cb->($e) ? 1 : 0; 1 }) {
            my $error = $@;
            # the request whose callback died ends; the error goes on
            $self->cancel($e->{id});
            die $error;
        }
        if ($stop) {
            my $done = $self->cancel($e->{id}) or next;
            $done->{finish_reason} = 'callback';
            push @out, $done;
        }
    }
    return wantarray ? @out : \@out;
}

sub cancel {
    my ($self, $id) = @_;
    Lugh::_croak('Usage: $batch->cancel($id)') unless @_ == 2 && ref $self;
    my $row = _cancel($self, $id) or return undef;
    return $self->_event($row);
}

sub run {
    my ($self) = @_;
    Lugh::_croak('Usage: $batch->run') unless @_ == 1 && ref $self;
    my @finished;
    until ($self->is_idle) {
        push @finished, grep { $_->{type} ne 'token' } $self->step;
    }
    return wantarray ? @finished : \@finished;
}

1;

__END__

=head1 NAME

Lugh::Batch - many generations at once on one model (continuous batching)

=head1 SYNOPSIS

    use Lugh;
    my $model = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 512);
    my $batch = Lugh::Batch->new($inference, slots => 4);
    my $id = $batch->add(prompt => 'The capital of France is', max_tokens => 8, greedy => 1,
        on_token => sub { my ($event) = @_; print $event->{text}; 0 });
    my @finished = $batch->run;

=head1 DESCRIPTION

A Lugh::Batch runs several generations on one L<Lugh::Inference> at once,
as C<llama-server -np N> does: each of its slots has a KV cache of the
session's C<n_ctx> positions (so create the session with the context one
conversation needs), and every L</step> evaluates, in one graph, one token
of each generating request and the next part of the prompts of newly
arrived ones, then samples each with its own options. Requests can be added
at any time; while every slot is busy they wait in a queue.

A new request starts from the longest prefix of its prompt that a slot's
cache holds (the slot's previous conversation, or a system prompt another
request evaluated), unless it says C<< cache_prompt => 0 >>.

Batching can change rounding, as in llama-server: rows evaluated beside
other requests' rows can round differently from a row evaluated alone with
some weight types (measured: SmolLM2 Q4_1, 8 of 8 prompts over 4 slots equal
to their solo L<Lugh::Inference/generate>; Qwen2.5-Coder Q4_K_M, 6 of 8, the
others differing from the 3rd or 4th generated token), and a prompt that
continues cells another request evaluated rounds as that split does.
C<< deterministic => 1 >> makes every request's output equal its solo,
uncached run whatever else is served, at a cost in throughput (every request
in a graph of its own, no prompt cache).

For the common case of a fixed list of requests see
L<Lugh::Inference/generate_parallel>.

=head1 METHODS

=head2 new

    my $batch = Lugh::Batch->new($inference, slots => 4, max_queued => 64, deterministic => 0);

C<slots> (also C<n_slots>, C<parallel>; default 4, at most 256 and at most
the session's C<n_batch>) requests run at once, each in a KV cache of the
session's C<n_ctx> positions. C<max_queued> (default 1024) requests may
wait for a slot; L</add> croaks beyond. C<deterministic>: see L</DESCRIPTION>.

=head2 add

    my $id = $batch->add(prompt => $text_or_tokens, max_tokens => 32, on_token => sub { ... }, %options);

Queues a request and returns its id (a positive integer). The prompt is a
text (tokenized with the model's tokenizer) or an array of token ids. It
takes the options of L<Lugh::Inference/generate> that tune generation
(C<max_tokens>, C<stop>, C<eos_token>, C<logprobs>, C<grammar>,
C<json_schema>, C<response_format>, C<grammar_trigger>, C<rope>, C<lora>)
and every sampling option (C<greedy>, C<temperature>, C<top_k>, C<seed>, ...),
plus C<cache_prompt> (default 1) and C<on_token>, called with each token
event (below) of this request; a true return stops the request (finish
reason C<callback>). A callback that dies ends its request and the error
comes out of L</step>. A bad option, a prompt that does not fit in a slot's
context with C<max_tokens>, or a full queue croak.

=head2 step

    my @events = $batch->step;

Admits waiting requests into free slots, evaluates one step and returns its
events, hashes with C<type> and C<id>: C<token> (C<token>: the id, C<text>:
the text it released, often empty while a character or a possible stop
string is incomplete, C<logprob> with C<< logprobs => N >>), C<done>
(C<finish_reason>: eos, max_tokens, stop_string, callback or cancelled;
C<text>: the rest of the text held back; C<usage>: C<prompt_tokens>,
C<cached_tokens>, C<completion_tokens>) and C<error> (C<error>: the message).

=head2 cancel

    my $done = $batch->cancel($id);

Ends a request at once, running or waiting, and frees its slot; returns its
C<done> event (finish reason C<cancelled>), or undef for an unknown id.

=head2 run

    my @finished = $batch->run;

Steps until nothing runs or waits; returns the C<done> and C<error> events.

=head2 active, queued, is_idle, slots, deterministic, inference

Requests in a slot, requests waiting, whether both are none; the settings;
the session.

=head1 EXAMPLE

    my $batch = Lugh::Batch->new($inference, slots => 2);
    my %text;
    for my $prompt ('One, two,', 'Red, green,', 'Monday, Tuesday,') {
        my $id = $batch->add(prompt => $prompt, max_tokens => 4, greedy => 1);
        $text{$id} = '';
    }
    until ($batch->is_idle) {
        $text{ $_->{id} } .= $_->{text} for grep { $_->{type} ne 'error' } $batch->step;
    }
    print scalar(keys %text), "\n";    # 3

=cut
