package Lugh::Chat::Reply;

use strict;
use warnings;

# Reading a chat model's reply as llama.cpp's common/chat-parser reads it:
# the reasoning between <think> and </think>, the tool calls in the markup of
# the template's family, and the content left around them. Pure text work, so
# it lives on the Perl side, next to JSON::PP; Lugh::Chat uses it for every
# turn, and for the streaming callbacks.
require Lugh;
use JSON::PP ();

our $VERSION = '0.20';

my $JSON      = JSON::PP->new->allow_nonref;
my $JSON_TEXT = JSON::PP->new->canonical->allow_nonref->allow_blessed->convert_blessed;

my $THINK_OPEN  = '<think>';
my $THINK_CLOSE = '</think>';

# The markers after which a family's tool calls begin; content streams up
# to the first of them.
my %CALL_MARKERS = (
    hermes  => ['<tool_call>'],
    llama3  => ['<|python_tag|>'],
    mistral => ['[TOOL_CALLS]'],
    generic => [],
);
my %JSON_FIRST = (hermes => 1, llama3 => 1, generic => 1);    # a reply that opens with '{' may be a call

# The tool-call family a chat template's text asks for, recognised as
# llama.cpp's common/chat.cpp recognises it.
sub tool_format {
    my ($class, $template) = @_;
    Lugh::_croak('Usage: Lugh::Chat::Reply->tool_format($template_source)') unless @_ == 2;
    return 'generic' unless defined $template;
    Lugh::_croak('Lugh::Chat::Reply->tool_format: the template must be a string') if ref $template;
    return 'hermes'  if index($template, '<tool_call>') >= 0;
    return 'llama3'  if index($template, '<|python_tag|>') >= 0 || index($template, 'ipython') >= 0;
    return 'mistral' if index($template, '[TOOL_CALLS]') >= 0;
    return 'generic';
}

sub tool_formats { return sort keys %CALL_MARKERS }

sub parse {
    my ($class, $text, @args) = @_;
    Lugh::_croak('Lugh::Chat::Reply->parse: give the reply text') unless defined $text && !ref $text;
    my %opt = Lugh::_options('Lugh::Chat::Reply->parse', { tool_format => undef, thinking => 0, first_id => 0 }, @args);
    _check_format('Lugh::Chat::Reply->parse', $opt{tool_format});
    my ($reasoning, $rest) = _split_reasoning($text, $opt{thinking});
    my ($content, $calls) = defined $opt{tool_format} ? _parse_calls($rest, $opt{tool_format}) : ($rest, []);
    my $n = $opt{first_id} // 0;
    Lugh::_croak('Lugh::Chat::Reply->parse: first_id must be a whole number') unless $n =~ /\A\d+\z/;
    return {
        content           => $content,
        reasoning_content => $reasoning,
        tool_calls        => [ map { _tool_call($_, $n++) } @$calls ],
    };
}

sub _check_format {
    my ($method, $format) = @_;
    return unless defined $format;
    Lugh::_croak("$method: unknown tool_format '$format' (known: " . join(', ', tool_formats()) . ')')
        unless !ref $format && $CALL_MARKERS{$format};
}

# (reasoning or undef, the rest). A reply that opens with <think>, or one
# whose prompt already opened it ($open), reasons up to </think>; without
# the closing tag all of it is reasoning, as llama.cpp reads it.
sub _split_reasoning {
    my ($text, $open) = @_;
    if (!$open) {
        return (undef, $text) unless $text =~ /\A\s*\Q$THINK_OPEN\E/;
        $text =~ s/\A\s*\Q$THINK_OPEN\E//;
    }
    my $end = index $text, $THINK_CLOSE;
    my ($reasoning, $rest) = $end < 0 ? ($text, '') : (substr($text, 0, $end), substr($text, $end + length $THINK_CLOSE));
    $reasoning =~ s/\A\s+//;
    $reasoning =~ s/\s+\z//;
    $rest      =~ s/\A\s+//;
    return ($reasoning, $rest);
}

# (content, [ [name, arguments, id], ... ]). Markup that does not parse
# (malformed JSON, an unterminated call) stays in the content.
sub _parse_calls {
    my ($text, $format) = @_;
    my ($content, $calls) =
          $format eq 'hermes'  ? _hermes($text)
        : $format eq 'mistral' ? _mistral($text)
        : $format eq 'llama3'  ? _llama3($text)
        :                        _generic($text);
    $content =~ s/\A\s+//;
    $content =~ s/\s+\z//;
    return ($content, $calls);
}

# One JSON value at the start of $text (after blanks): (value, the text after
# it), or () when none parses.
sub _json_prefix {
    my ($text) = @_;
    $text =~ s/\A\s+//;
    return () unless length $text;
    my ($value, $used) = eval { $JSON->decode_prefix($text) };
    return () unless defined $used;
    return ($value, substr($text, $used));
}

# A call given as { name, arguments } (or Llama's parameters).
sub _named_call {
    my ($value) = @_;
    return undef unless ref $value eq 'HASH';
    my $call = ref $value->{function} eq 'HASH' ? $value->{function} : $value;
    my $name = $call->{name};
    return undef unless defined $name && !ref $name && length $name;
    my $arguments = exists $call->{arguments} ? $call->{arguments} : $call->{parameters};
    return [ $name, $arguments // {}, $value->{id} ];
}

# Hermes 2 Pro / Qwen: <tool_call>{"name": ..., "arguments": ...}</tool_call>,
# any number; as in llama.cpp the tags may be missing around calls that open
# the reply (small Qwen models write them so).
sub _hermes {
    my ($text) = @_;
    my ($bare, $after) = _json_calls($text, '');
    return ($after, $bare) if @$bare;
    my ($content, @calls) = ('');
    while ((my $open = index $text, '<tool_call>') >= 0) {
        my $close = index $text, '</tool_call>', $open;
        last if $close < 0;
        my $inner = substr $text, $open + 11, $close - $open - 11;
        $inner =~ s/\A\s*```(?:json)?//;
        $inner =~ s/```\s*\z//;
        my ($value, $after) = _json_prefix($inner);
        my $call = defined $after && $after =~ /\A\s*\z/ ? _named_call($value) : undef;
        if (!$call) {    # left as it stands
            $content .= substr $text, 0, $close + 12, '';
            next;
        }
        push @calls, $call;
        $content .= substr $text, 0, $open;
        substr($text, 0, $close + 12, '');
    }
    return ($content . $text, \@calls);
}

# Mistral Nemo: [TOOL_CALLS][{"name": ..., "arguments": ..., "id": ...}, ...]
sub _mistral {
    my ($text) = @_;
    my $at = index $text, '[TOOL_CALLS]';
    return ($text, []) if $at < 0;
    my ($value, $after) = _json_prefix(substr $text, $at + 12);
    my @list = ref $value eq 'ARRAY' ? @$value : defined $value ? ($value) : ();
    my @calls = map { _named_call($_) } @list;
    return ($text, []) if !@calls || grep { !defined } @calls;
    return (substr($text, 0, $at) . $after, \@calls);
}

# Llama 3.x: a reply that is a JSON call {"name": ..., "parameters": ...},
# or <|python_tag|> and a builtin call name.call(key="value", ...), JSON
# calls, or python code (a call of the tool "python").
sub _llama3 {
    my ($text) = @_;
    my $at = index $text, '<|python_tag|>';
    if ($at >= 0) {
        my ($before, $code) = (substr($text, 0, $at), substr($text, $at + 14));
        if ($code =~ /\A\s*(\w+)\.call\((.*)\)\s*\z/s) {
            my ($name, $list) = ($1, $2);
            my %arguments;
            while ($list =~ /\G\s*(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]*?)\s*(?:,|\z)/gc) {
                my ($key, $raw) = ($1, $2);
                my ($value) = _json_prefix($raw);
                $arguments{$key} = defined $value ? $value : $raw;
            }
            return ($before, [ [ $name, \%arguments, undef ] ]);
        }
        my ($calls, $after) = _json_calls($code, ';');
        return ($before . $after, $calls) if @$calls;
        $code =~ s/\A\s+//;
        return ($before, [ [ 'python', { code => $code }, undef ] ]);
    }
    my ($calls, $after) = _json_calls($text, ';');
    return @$calls ? ($after, $calls) : ($text, []);
}

# Leading JSON calls, separated by $separator or blanks: ([calls], the text after).
sub _json_calls {
    my ($text, $separator) = @_;
    my @calls;
    while ($text =~ /\A\s*\{/) {
        my ($value, $after) = _json_prefix($text);
        my $call = defined $after ? _named_call($value) : undef;
        last unless $call;
        push @calls, $call;
        ($text = $after) =~ s/\A\s*\Q$separator\E//;
    }
    return (\@calls, $text);
}

# llama.cpp's generic form, the whole reply one JSON object:
# {"tool_call": {...}}, {"tool_calls": [...]} or {"response": ...}.
sub _generic {
    my ($text) = @_;
    my ($value, $after) = _json_prefix($text);
    return ($text, []) unless ref $value eq 'HASH' && defined $after && $after =~ /\A\s*\z/;
    if (ref $value->{tool_calls} eq 'ARRAY' || ref $value->{tool_call} eq 'HASH') {
        my @calls = map { _named_call($_) } ref $value->{tool_calls} eq 'ARRAY' ? @{ $value->{tool_calls} } : $value->{tool_call};
        return ($text, []) if grep { !defined } @calls;
        return ('', \@calls);
    }
    return ($text, []) unless exists $value->{response};
    my $response = $value->{response};
    return (ref $response ? $JSON_TEXT->encode($response) : $response // '', []);
}

# The OpenAI form of a call. Arguments given as JSON text (OpenAI's way) are
# decoded; a call without an id gets "call_N", N counting the calls.
sub _tool_call {
    my ($call, $n) = @_;
    my ($name, $arguments, $id) = @$call;
    if (!ref $arguments) {
        my ($value, $after) = _json_prefix($arguments);
        $arguments = $value if defined $after && $after =~ /\A\s*\z/;
    }
    return {
        id       => defined $id && !ref $id && length $id ? $id : "call_$n",
        type     => 'function',
        function => { name => $name, arguments => $arguments, arguments_json => $JSON_TEXT->encode($arguments) },
    };
}

# Streaming: splits the pieces of a reply as they come into content and
# reasoning, holding back what may still be a tag or a tool call.
sub stream {
    my ($class, @args) = @_;
    my %opt = Lugh::_options('Lugh::Chat::Reply->stream',
        { tool_format => undef, thinking => 0, on_content => undef, on_reasoning => undef }, @args);
    _check_format('Lugh::Chat::Reply->stream', $opt{tool_format});
    for my $name (qw(on_content on_reasoning)) {
        Lugh::_croak("Lugh::Chat::Reply->stream: $name must be a code reference")
            if defined $opt{$name} && ref $opt{$name} ne 'CODE';
    }
    return bless {
        %opt,
        mode => $opt{thinking} ? 'reasoning' : 'start',
        buffer => '', content => '', reasoning => '', held => 0,
    }, $class;
}

# Adds a piece; true when on_content asked to stop.
sub add {
    my ($self, $piece) = @_;
    Lugh::_croak('Usage: $stream->add($text)') unless @_ == 2 && defined $piece && !ref $piece;
    $self->{buffer} .= $piece;
    my $stop = 0;
    while (1) {
        my $mode = $self->{mode};
        if ($mode eq 'start') {
            (my $text = $self->{buffer}) =~ s/\A\s+//;
            return $stop if !length $text || (length $text < length $THINK_OPEN && index($THINK_OPEN, $text) == 0);
            if (index($text, $THINK_OPEN) == 0) {
                $self->{buffer} = substr $text, length $THINK_OPEN;
                $self->{mode}   = 'reasoning';
            }
            else { $self->{mode} = 'content' }
        }
        elsif ($mode eq 'reasoning') {
            $self->{buffer} =~ s/\A\s+// unless length $self->{reasoning};
            my $end = index $self->{buffer}, $THINK_CLOSE;
            if ($end >= 0) {
                $self->_reasoning(substr $self->{buffer}, 0, $end);
                $self->{buffer} = substr $self->{buffer}, $end + length $THINK_CLOSE;
                $self->{mode}   = 'after_reasoning';
                next;
            }
            my $keep = _tag_prefix_length($self->{buffer}, [$THINK_CLOSE]);
            $self->_reasoning(substr $self->{buffer}, 0, length($self->{buffer}) - $keep, '');
            return $stop;
        }
        elsif ($mode eq 'after_reasoning') {
            $self->{buffer} =~ s/\A\s+//;
            return $stop unless length $self->{buffer};
            $self->{mode} = 'content';
        }
        else {
            return $stop || $self->_content_piece;
        }
    }
}

# Content up to the first tool-call marker; what follows is held back.
sub _content_piece {
    my ($self) = @_;
    my $format = $self->{tool_format};
    if (!defined $format) {
        return $self->_content(substr $self->{buffer}, 0, length $self->{buffer}, '');
    }
    return 0 if $self->{held};
    if (!length $self->{content} && $JSON_FIRST{$format}) {
        return 0 if $self->{buffer} =~ /\A\s*\z/;
        if ($self->{buffer} =~ /\A\s*\{/) { $self->{held} = 1; return 0 }
    }
    my $markers = $CALL_MARKERS{$format};
    my ($first) = sort { $a <=> $b } grep { $_ >= 0 } map { index $self->{buffer}, $_ } @$markers;
    $self->{held} = 1 if defined $first;
    my $keep = defined $first ? length($self->{buffer}) - $first : _tag_prefix_length($self->{buffer}, $markers);
    # blanks before a call are no content (parse trims them)
    $keep += length $1 if substr($self->{buffer}, 0, length($self->{buffer}) - $keep) =~ /(\s+)\z/;
    return $self->_content(substr $self->{buffer}, 0, length($self->{buffer}) - $keep, '');
}

# The length of the longest end of $text that begins one of the tags.
sub _tag_prefix_length {
    my ($text, $tags) = @_;
    my $best = 0;
    for my $tag (@$tags) {
        for my $n (reverse 1 .. length($tag) - 1) {
            next if $n <= $best || $n > length $text;
            if (substr($text, -$n) eq substr($tag, 0, $n)) { $best = $n; last }
        }
    }
    return $best;
}

sub _content {
    my ($self, $text) = @_;
    return 0 unless length $text;
    $self->{content} .= $text;
    return $self->{on_content} ? ($self->{on_content}->($text) ? 1 : 0) : 0;
}

sub _reasoning {
    my ($self, $text) = @_;
    return unless length $text;
    $self->{reasoning} .= $text;
    $self->{on_reasoning}->($text) if $self->{on_reasoning};
    return;
}

# Ends the stream with the whole reply's reading (from parse): sends what the
# pieces had not yet sent of its content and reasoning. Returns that reading.
sub finish {
    my ($self, $reply) = @_;
    Lugh::_croak('Usage: $stream->finish($reply) (a hash reference from Lugh::Chat::Reply->parse)')
        unless @_ == 2 && ref $reply eq 'HASH';
    for my $part ([ reasoning => $reply->{reasoning_content} ], [ content => $reply->{content} ]) {
        my ($name, $whole) = @$part;
        my $sent = $self->{$name};
        next unless defined $whole && length $whole > length $sent && index($whole, $sent) == 0;
        my $rest = substr $whole, length $sent;
        $name eq 'content' ? $self->_content($rest) : $self->_reasoning($rest);
    }
    return $reply;
}

sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Chat::Reply - read a chat model's reply: reasoning, tool calls, content

=head1 SYNOPSIS

    use Lugh;
    my $reply = Lugh::Chat::Reply->parse(
        qq(<think>The user wants weather.</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>),
        tool_format => 'hermes');
    print $reply->{reasoning_content}, "\n";                   # The user wants weather.
    print $reply->{tool_calls}[0]{function}{name}, "\n";       # get_weather
    print $reply->{tool_calls}[0]{function}{arguments}{city}, "\n";   # Paris
    print $reply->{tool_calls}[0]{id}, "\n";                   # call_0

=head1 DESCRIPTION

What L<Lugh::Chat> uses to read each reply when it was given C<tools>, or
when the model reasons between C<< <think> >> and C<< </think> >>, as
llama.cpp's C<common/chat.cpp> reads them. Usable on its own on any text.

=head1 METHODS

=head2 tool_format

    print Lugh::Chat::Reply->tool_format('... <tool_call> ...'), "\n";   # hermes

The family of tool-call markup a chat template's source asks for, chosen as
llama.cpp chooses it: C<hermes> (the template mentions C<< <tool_call> >>:
Hermes 2 Pro, Qwen 2.5/3), C<llama3> (C<< <|python_tag|> >> or C<ipython>:
Llama 3.x), C<mistral> (C<[TOOL_CALLS]>: Mistral Nemo), otherwise
C<generic>.

=head2 tool_formats

    print join(' ', Lugh::Chat::Reply->tool_formats), "\n";   # generic hermes llama3 mistral

=head2 parse

    my $r = Lugh::Chat::Reply->parse($text, tool_format => 'hermes', thinking => 0, first_id => 0);

Returns a hash reference: C<content> (the text outside the reasoning and the
calls, trimmed), C<reasoning_content> (the text between C<< <think> >> and
C<< </think> >>, or undef when the reply does not reason; with
C<< thinking => 1 >> the prompt already opened C<< <think> >>, so the reply
starts inside it) and C<tool_calls>, a list of

    { id => 'call_0', type => 'function',
      function => { name => 'get_weather', arguments => { city => 'Paris' },
                    arguments_json => '{"city":"Paris"}' } }

C<arguments> is the decoded Perl structure (arguments given as JSON text are
decoded too), C<arguments_json> its JSON text with sorted keys. A call
without an id from the model gets C<call_N>, N counting from C<first_id>:
ids are reproducible, unlike llama.cpp's random ones. Without
C<tool_format> no calls are read.

The forms read: C<hermes>, any number of C<< <tool_call>{"name": ...,
"arguments": ...}</tool_call> >>; C<mistral>, C<[TOOL_CALLS]> and a JSON
array of calls (their C<id>s kept); C<llama3>, a reply that is a JSON call
C<{"name": ..., "parameters": ...}> (several separated by C<;>), or
C<< <|python_tag|> >> followed by a builtin call C<name.call(key="value")>,
JSON calls, or python code (a call of C<python> with C<{code => ...}>);
C<hermes> also reads calls that open the reply without the tags, as
llama.cpp does (small Qwen models write them so);
C<generic>, the whole reply C<{"tool_call": {...}}>, C<{"tool_calls":
[...]}> or C<{"response": ...}>. Markup that does not parse (malformed
JSON, a call not closed) is left in the content.

=head2 stream

    my $stream = Lugh::Chat::Reply->stream(
        on_content   => sub { print $_[0]; 0 },     # true stops
        on_reasoning => sub { print STDERR $_[0] },
    );
    $stream->add($_) for '<thi', 'nk>Hmm', '.</th', 'ink>Hello';
    $stream->finish(Lugh::Chat::Reply->parse('<think>Hmm.</think>Hello'));
    print "\n";

Splits a reply that arrives in pieces: C<on_content> gets the content,
C<on_reasoning> the reasoning, each as soon as it can no longer be part of a
tag; with a C<tool_format>, content stops at the first tool-call marker (and
a reply that opens with C<{> in the C<llama3> and C<generic> forms is held
back whole). It takes C<tool_format> and C<thinking> as C<parse> does.

=head2 add

Adds a piece of text; returns true when C<on_content> returned true.

=head2 finish

Given the whole reply's C<parse> result, sends the content and reasoning the
pieces had not sent yet (the content of a held-back generic reply), and
returns that result.

=head1 SEE ALSO

L<Lugh::Chat/Tools and reasoning>

=cut
