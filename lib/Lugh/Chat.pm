package Lugh::Chat;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;
require Lugh::Chat::Reply;
use JSON::PP ();
use Scalar::Util ();

our $VERSION = '0.20';

# Generation options a chat passes on to Lugh::Inference->generate, as
# defaults in new() and per turn in ask()/say().
my @GENERATE_OPTIONS = Lugh::Inference::_generate_tuning_options();

my %NEW_DEFAULTS = (
    inference => undef, tokenizer => undef, system => undef,
    prompt    => undef, template  => undef, format => undef,
    overflow  => 'error', max_tokens => 512, tools => undef,
    (map { $_ => undef } grep { $_ ne 'max_tokens' } @GENERATE_OPTIONS),
);
my %TURN_DEFAULTS = (callback => undef, on_reasoning => undef, tools => undef, (map { $_ => undef } @GENERATE_OPTIONS));
my %OVERFLOW = map { $_ => 1 } qw(error drop_oldest);

sub new {
    my ($class, @args) = @_;
    my %opt = Lugh::_options('Lugh::Chat->new', \%NEW_DEFAULTS, @args);
    my $inference = $opt{inference};
    Lugh::_croak('Lugh::Chat->new: missing inference => $inference (a Lugh::Inference)')
        unless Scalar::Util::blessed($inference) && $inference->isa('Lugh::Inference');
    Lugh::_croak("Lugh::Chat->new: overflow must be 'error' or 'drop_oldest', got '$opt{overflow}'")
        unless defined $opt{overflow} && $OVERFLOW{ $opt{overflow} };
    my $model = $inference->model;
    my $prompt = _prompt_from(\%opt, $model);
    _check_tools('Lugh::Chat->new', $opt{tools}, $prompt);
    my $tokenizer = $opt{tokenizer} // Lugh::Tokenizer->new(model => $model);
    my %generate = map { defined $opt{$_} ? ($_ => $opt{$_}) : () } @GENERATE_OPTIONS;
    my $self = bless {
        inference => $inference,
        tokenizer => $tokenizer,
        prompt    => $prompt,
        overflow  => $opt{overflow},
        generate  => \%generate,
        tools     => $opt{tools},
        messages  => [],
        n_tool_calls => 0,    # numbers the calls the model gives no id
        cache     => undef,    # made at the first turn
        stats     => undef,
    }, $class;
    $self->system($opt{system}) if defined $opt{system};
    return $self;
}

# The Lugh::Prompt that renders the conversation: given, or made from a
# template source, a format name, or the model's own template.
sub _prompt_from {
    my ($opt, $model) = @_;
    my @given = grep { defined $opt->{$_} } qw(prompt template format);
    Lugh::_croak("Lugh::Chat->new: give one of prompt, template and format, not @given") if @given > 1;
    return Lugh::Prompt->new(model => $model) unless @given;
    my $prompt = $opt->{prompt};
    if (defined $prompt) {
        Lugh::_croak('Lugh::Chat->new: prompt must be a Lugh::Prompt')
            unless Scalar::Util::blessed($prompt) && $prompt->isa('Lugh::Prompt');
        return $prompt;
    }
    return Lugh::Prompt->new($given[0] => $opt->{ $given[0] }, model => $model);
}

sub inference { return $_[0]{inference} }
sub tokenizer { return $_[0]{tokenizer} }
sub prompt    { return $_[0]{prompt} }
sub cache     { return $_[0]{cache} //= $_[0]{inference}->create_kv_cache }

# A copy of the last turn's statistics (see Lugh::Inference->generate).
sub stats {
    my ($self) = @_;
    return $self->{stats} ? { %{ $self->{stats} } } : undef;
}

# The last reply's tool calls and reasoning.
sub tool_calls {
    my ($self) = @_;
    Lugh::_croak('Usage: $chat->tool_calls') unless @_ == 1;
    my @calls = map { _copy_call($_) } @{ $self->{stats} ? $self->{stats}{tool_calls} : [] };
    return wantarray ? @calls : \@calls;
}

sub _copy_call {
    my ($call) = @_;
    return { %$call, function => { %{ $call->{function} } } };
}

sub reasoning {
    my ($self) = @_;
    Lugh::_croak('Usage: $chat->reasoning') unless @_ == 1;
    return $self->{stats} ? $self->{stats}{reasoning_content} : undef;
}

# Tools as OpenAI's API takes them: [ { type => 'function', function =>
# { name, description, parameters } }, ... ]. Only a Jinja template can
# describe them, as llama.cpp takes tools only with --jinja.
sub _check_tools {
    my ($method, $tools, $prompt) = @_;
    return unless defined $tools;
    my $shape = q(tools must be an array reference of { type => 'function', function => { name => ..., parameters => {...} } });
    Lugh::_croak("$method: $shape") unless ref $tools eq 'ARRAY';
    for my $i (0 .. $#$tools) {
        my $tool = $tools->[$i];
        Lugh::_croak("$method: tools->[$i] must be a hash reference; $shape") unless ref $tool eq 'HASH';
        Lugh::_croak("$method: tools->[$i]{type} must be 'function'")
            if defined $tool->{type} && (ref $tool->{type} || $tool->{type} ne 'function');
        my $function = $tool->{function};
        Lugh::_croak("$method: tools->[$i]{function} must be a hash reference with the tool's name")
            unless ref $function eq 'HASH';
        my $name = $function->{name};
        Lugh::_croak("$method: tools->[$i]{function}{name} is missing (a non-empty string)")
            unless defined $name && !ref $name && length $name;
        Lugh::_croak("$method: tools->[$i]{function}{parameters} of '$name' must be a hash reference (a JSON schema)")
            if defined $function->{parameters} && ref $function->{parameters} ne 'HASH';
        Lugh::_croak("$method: tools->[$i]{function}{description} of '$name' must be a string")
            if defined $function->{description} && ref $function->{description};
    }
    return unless $prompt;
    Lugh::_croak("$method: tools need a Jinja chat template (the model's own, or template => ...); the fixed format '"
            . $prompt->format_name . "' cannot describe tools")
        unless defined $prompt->template;
    return;
}

sub finish_reason {
    my ($self) = @_;
    return $self->{stats} ? $self->{stats}{stop_reason} : undef;
}

sub system {
    my ($self, @text) = @_;
    my $messages = $self->{messages};
    my $has = @$messages && $messages->[0]{role} eq 'system';
    return $has ? $messages->[0]{content} : undef unless @text;
    my ($text) = @text;
    if (!defined $text) { shift @$messages if $has; return undef }
    Lugh::_croak('Lugh::Chat->system: the system text must be a string') if ref $text;
    if ($has) { $messages->[0]{content} = $text }
    else      { unshift @$messages, { role => 'system', content => $text } }
    return $text;
}

sub messages {
    my ($self, @new) = @_;
    if (@new) {
        my ($list) = @new;
        Lugh::_croak('Usage: $chat->messages or $chat->messages(\@messages)') unless @new == 1 && ref $list eq 'ARRAY';
        $self->{messages} = [ map { _message($_, 'Lugh::Chat->messages') } @$list ];
    }
    my @messages = map { {%$_} } @{ $self->{messages} };
    return wantarray ? @messages : \@messages;
}

my $JSON = JSON::PP->new->canonical->allow_nonref->allow_blessed->convert_blessed;

sub add_message {
    my ($self, $role, $content, @extra) = @_;
    my $method = 'Lugh::Chat->add_message';
    my %extra = Lugh::_options($method, { tool_call_id => undef, name => undef, tool_calls => undef }, @extra);
    # a tool's result may be a structure: the template gets its JSON text
    $content = $JSON->encode($content) if defined $role && !ref $role && $role eq 'tool' && ref $content;
    Lugh::_croak("$method: tool_calls must be an array reference")
        if defined $extra{tool_calls} && ref $extra{tool_calls} ne 'ARRAY';
    my %message = (role => $role, content => $content, map { defined $extra{$_} ? ($_ => $extra{$_}) : () } keys %extra);
    push @{ $self->{messages} }, _message(\%message, $method);
    return $self;
}

sub _message {
    my ($m, $method) = @_;
    Lugh::_croak("$method: a message must be a hash reference with role and content") unless ref $m eq 'HASH';
    for my $key (qw(role content)) {
        Lugh::_croak("$method: a message needs a $key") unless defined $m->{$key};
    }
    Lugh::_croak("$method: the role must be a string") if ref $m->{role};
    return {%$m};
}

# Forgets the turns, keeps the system text. The KV cache is kept: the next
# turn reuses whatever prefix (the system turn) it still shares.
sub reset {
    my ($self) = @_;
    my $system = $self->system;
    $self->{messages} = [];
    $self->system($system) if defined $system;
    $self->{stats} = undef;
    return $self;
}

sub ask {
    my ($self, $text, @args) = @_;
    return $self->_turn('Lugh::Chat->ask', $text, @args);
}

sub say {
    my ($self, $text, @args) = @_;
    my %opt = @args % 2 ? () : @args;
    return $self->_turn('Lugh::Chat->say', $text, @args) if $opt{callback};
    local $| = 1;
    my $reply = $self->_turn('Lugh::Chat->say', $text, @args, callback => sub { print $_[0]; 0 });
    print "\n";
    return $reply;
}

sub _turn {
    my ($self, $method, $text, @args) = @_;
    Lugh::_croak("$method: give the user's text") unless defined $text && !ref $text;
    my %opt = Lugh::_options($method, \%TURN_DEFAULTS, @args);
    push @{ $self->{messages} }, { role => 'user', content => $text };
    my $reply = eval { $self->_reply($method, \%opt) };
    if (my $error = $@) {
        pop @{ $self->{messages} };    # the turn did not happen
        die $error;
    }
    push @{ $self->{messages} }, $self->_assistant_message;
    return $reply;
}

# The reply as the history keeps it: the template renders its tool calls
# (arguments as a structure, as templates expect) and reasoning next turn.
sub _assistant_message {
    my ($self) = @_;
    my $stats = $self->{stats};
    my %message = (role => 'assistant', content => $stats->{content});
    $message{reasoning_content} = $stats->{reasoning_content} if defined $stats->{reasoning_content};
    if (my @calls = @{ $stats->{tool_calls} }) {
        $message{tool_calls} = [ map {
            { id => $_->{id}, type => 'function',
              function => { name => $_->{function}{name}, arguments => $_->{function}{arguments} } }
        } @calls ];
    }
    return \%message;
}

# Generates the assistant's next message for the conversation as it stands.
sub _reply {
    my ($self, $method, $opt) = @_;
    my %generate = (%{ $self->{generate} }, map { defined $opt->{$_} ? ($_ => $opt->{$_}) : () } @GENERATE_OPTIONS);
    $generate{max_tokens} //= 512;
    my $tools = $opt->{tools} // $self->{tools};
    _check_tools($method, $opt->{tools}, $self->{prompt});
    $tools = undef if $tools && !@$tools;    # no tools: a plain turn
    local $self->{turn_tools} = $tools;
    my $tokens = $self->_fitting_prompt($method, $generate{max_tokens});
    my $format = $tools ? Lugh::Chat::Reply->tool_format($self->{prompt}->template) : undef;
    # llama.cpp's generic form constrains the whole reply to its JSON
    # and a Hermes call once <tool_call> opens it (lazily, as llama.cpp)
    if (defined $format && !grep { defined $generate{$_} } qw(grammar json_schema response_format)) {
        $generate{json_schema} = _generic_schema($tools) if $format eq 'generic';
        @generate{qw(grammar grammar_trigger)} = (_hermes_grammar($tools), '<tool_call>') if $format eq 'hermes';
    }
    my %reading = (tool_format => $format, thinking => $self->{thinking_open} ? 1 : 0);
    my $stream;
    if (defined $opt->{callback} || defined $opt->{on_reasoning}) {
        for my $name (qw(callback on_reasoning)) {
            Lugh::_croak("$method: $name must be a code reference") if defined $opt->{$name} && ref $opt->{$name} ne 'CODE';
        }
        $stream = Lugh::Chat::Reply->stream(%reading, on_content => $opt->{callback}, on_reasoning => $opt->{on_reasoning});
        $generate{on_text} = sub { $stream->add($_[0]) };
    }
    # A one-shot reply needs no cache of its own: generate's scratch cache
    # is reused across calls.
    my $cache = $self->{one_shot} ? undef : $self->cache;
    $self->{inference}->generate($tokens, %generate, cache => $cache, stats => \my %stats);
    my $reply = Lugh::Chat::Reply->parse($stats{text}, %reading, first_id => $self->{n_tool_calls});
    $self->{n_tool_calls} += @{ $reply->{tool_calls} };
    $self->{stats} = { %stats, %$reply };
    $stream->finish($reply) if $stream;
    return $reply->{content};
}

# The rendered conversation's tokens, after dropping the oldest turns if the
# overflow policy allows and the context needs it.
sub _fitting_prompt {
    my ($self, $method, $max_tokens) = @_;
    my $n_ctx = $self->{inference}->n_ctx;
    while (1) {
        my $tokens = $self->_tokens;
        my $needed = @$tokens + $max_tokens - 1;
        return $tokens if $needed <= $n_ctx;
        my $messages = $self->{messages};
        my $first = @$messages && $messages->[0]{role} eq 'system' ? 1 : 0;
        # Keep the newest message (the question being asked).
        if ($self->{overflow} eq 'drop_oldest' && @$messages - $first > 1) {
            splice @$messages, $first, 1;
            # a conversation resumes with a user turn
            splice @$messages, $first, 1 while @$messages > $first + 1 && $messages->[$first]{role} ne 'user';
            next;
        }
        Lugh::_croak("$method: the conversation (" . scalar(@$tokens) . " tokens) plus max_tokens ($max_tokens)"
                . " needs $needed positions, but n_ctx is $n_ctx"
                . ($self->{overflow} eq 'error'
                    ? "; start the chat with overflow => 'drop_oldest' to forget the oldest turns, or raise n_ctx"
                    : '; even the newest message alone does not fit: raise n_ctx or lower max_tokens'));
    }
}

sub _tokens {
    my ($self) = @_;
    # A fixed format writes its BOS text by default; the tokenizer's rule decides here.
    my @fixed = defined $self->{prompt}->template ? () : (add_bos => 0);
    my $tools = $self->{turn_tools};
    my @messages = @{ $self->{messages} };
    my @tools;
    if ($tools) {
        @tools = (tools => $tools);
        @messages = _describe_tools(\@messages, $tools)
            if Lugh::Chat::Reply->tool_format($self->{prompt}->template) eq 'generic';
    }
    my $text = $self->{prompt}->apply(@messages, add_generation_prompt => 1, @fixed, @tools);
    # a template that opens <think> itself: the reply starts inside it
    $self->{thinking_open} = $text =~ /<think>\s*\z/ ? 1 : 0;
    my $tokenizer = $self->{tokenizer};
    my @ids = $tokenizer->encode($text, parse_special => 1, add_special => 0);
    # Templates write the BOS token themselves when the model wants one; add
    # it only where the template did not.
    my $bos = $tokenizer->bos_id;
    unshift @ids, $bos if $tokenizer->add_bos && defined $bos && $bos >= 0 && (!@ids || $ids[0] != $bos);
    return \@ids;
}

# llama.cpp's generic form: a template that knows no tool markup is told in
# the system message which tools there are and how to answer in JSON.
sub _describe_tools {
    my ($messages, $tools) = @_;
    my $text = 'You can call any of the following tools to satisfy the user\'s requests: '
        . JSON::PP->new->canonical->pretty->encode($tools)
        . "\nRespond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to"
        . " the user's request, as {\"tool_call\": {\"name\": \"...\", \"arguments\": {...}}},"
        . ' {"tool_calls": [...]} or {"response": "..."}';
    my @list = map { {%$_} } @$messages;
    if (@list && $list[0]{role} eq 'system') { $list[0]{content} .= "\n\n$text" }
    else                                     { unshift @list, { role => 'system', content => $text } }
    return @list;
}

# The JSON schema (as text: the name comes before the arguments, as models
# write it) of a call of one of the tools.
sub _call_schema {
    my ($tools) = @_;
    my @calls = map {
        my $function = $_->{function};
        sprintf '{"type":"object","properties":{"name":{"const":%s},"arguments":%s},"required":["name","arguments"]}',
            $JSON->encode($function->{name}), $JSON->encode($function->{parameters} // { type => 'object' });
    } @$tools;
    return '{"anyOf":[' . join(',', @calls) . ']}';
}

# The JSON a generic reply may be: one call of a given tool, or a response.
sub _generic_schema {
    my ($tools) = @_;
    return '{"anyOf":[{"type":"object","properties":{"tool_call":' . _call_schema($tools) . '},"required":["tool_call"]},'
        . '{"type":"object","properties":{"response":{"type":"string"}},"required":["response"]}]}';
}

# Hermes/Qwen calls, for a lazy grammar that <tool_call> triggers.
sub _hermes_grammar {
    my ($tools) = @_;
    my $call = Lugh::Grammar->from_json_schema(_call_schema($tools))->text;
    $call =~ s/^root ::=/tool-call-json ::=/m;
    return qq(root ::= tool-call ([ \\t\\n]* tool-call)*\n)
        . qq(tool-call ::= "<tool_call>" [ \\t\\n]* tool-call-json [ \\t\\n]* "</tool_call>"\n$call);
}

# One-shot: a reply to a list of messages, without keeping a conversation.
sub _one_shot {
    my ($class, $inference, @args) = @_;
    my $method = 'Lugh::Inference->chat';
    my %opt = Lugh::_options($method, { %NEW_DEFAULTS, %TURN_DEFAULTS, messages => undef, stats => undef }, @args);
    Lugh::_croak("$method: missing messages => [...] (hash references with role and content)")
        unless ref $opt{messages} eq 'ARRAY' && @{ $opt{messages} };
    Lugh::_croak("$method: give the inference object as the invocant, not as an option") if defined $opt{inference};
    my %turn = map { $_ => delete $opt{$_} } grep { $_ ne 'max_tokens' && $_ ne 'tools' } keys %TURN_DEFAULTS;
    my $messages = delete $opt{messages};
    my $stats = delete $opt{stats};
    _check_tools($method, $opt{tools});
    Lugh::_croak("$method: stats must be a hash reference") if defined $stats && ref $stats ne 'HASH';
    my $chat = $class->new(%opt, inference => $inference);
    $chat->{one_shot} = 1;
    $chat->messages([ $chat->messages, @$messages ]);
    my $reply = $chat->_reply($method, \%turn);
    %$stats = %{ $chat->{stats} } if $stats;
    return $reply;
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Chat - a conversation with a chat model that keeps its KV cache between turns

=head1 SYNOPSIS

    use Lugh;
    my $model     = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 2048);
    my $chat      = Lugh::Chat->new(
        inference   => $inference,
        system      => 'You are a terse assistant.',
        temperature => 0.7,
    );

    $chat->say('What is the capital of France?');       # streams the reply to STDOUT
    my $reply = $chat->ask('And of Germany?');          # returns it
    $chat->ask('Which is bigger?', callback => sub { print $_[0]; 0 });

    printf "%s: %s\n", $_->{role}, $_->{content} for $chat->messages;
    printf "evaluated %d new tokens, reused %d\n", @{ $chat->stats }{qw(n_evaluated n_reused)};

=head1 DESCRIPTION

A Lugh::Chat holds a conversation: the messages so far, the L<Lugh::Prompt>
that renders them (by default the model's own chat template, stored in the
GGUF file), and a L<Lugh::KVCache>. Each turn renders the whole conversation
and hands it to L<Lugh::Inference/generate> with the cache: the tokens the
cache already holds from earlier turns are reused and only the new ones are
evaluated. If the rendering changes earlier text (a template that rewrites
old turns, or an edited history), the cache is rolled back to the longest
common token prefix; nothing still valid is computed again.

A reply ends at the model's end-of-turn token (which is not part of the
reply), at a stop string (not part of the reply either), at C<max_tokens>, or
when the callback returns true.

The context never overflows silently: when the rendered conversation plus
C<max_tokens> does not fit in C<n_ctx>, a turn croaks naming both lengths,
unless the chat was made with C<< overflow => 'drop_oldest' >>, which then
forgets the oldest turns (never the system message, never the new question).

=head2 Structured replies

    my $chat = Lugh::Chat->new(inference => $inference,
        grammar => Lugh::Grammar->new('root ::= ("yes" | "no")'));
    my $answer = $chat->ask('Is Paris in France?');     # "yes" or "no"

C<grammar> (a L<Lugh::Grammar> or GBNF text), like every option of
L<Lugh::Inference/generate> that tunes it, may be given to C<new> (for every
turn) or to C<ask>/C<say> (for that turn): the reply is then text the
grammar allows (see L<Lugh::Inference/Grammars>), ending where the grammar is
complete; L<Lugh::Inference/chat> takes it too. So do C<json_schema> and
C<response_format>, for replies in JSON that a schema describes (see
L<Lugh::Inference/JSON schemas and response_format>):

    my $chat = Lugh::Chat->new(inference => $inference, response_format => { type => 'json_object',
        schema => { type => 'object', properties => { city => { type => 'string' } }, required => ['city'] } });
    my $reply = JSON::PP->new->decode($chat->ask('Where is the Eiffel tower?'));

=head2 Tools and reasoning

    my $weather = { type => 'function', function => {
        name        => 'get_weather',
        description => 'The current weather in a city',
        parameters  => { type => 'object', properties => { city => { type => 'string' } }, required => ['city'] },
    } };
    my $agent = Lugh::Chat->new(inference => $inference, tools => [$weather], greedy => 1);
    my $answer = $agent->ask('What is the weather in Paris?');
    for my $call ($agent->tool_calls) {
        my $f = $call->{function};       # { name, arguments (a Perl structure), arguments_json }
        my $result = { city => $f->{arguments}{city}, temperature => 21 };   # run the tool here
        $agent->add_message(tool => $result, tool_call_id => $call->{id});
    }
    $answer = $agent->ask('Thanks. So, what is it like?') if $agent->tool_calls;
    print defined $agent->reasoning ? "thought: " . $agent->reasoning . "\n" : "no reasoning\n";

C<tools> (given to C<new> for every turn, or to C<ask>/C<say> for one)
are OpenAI's: a list of C<< { type => 'function', function => { name,
description, parameters } } >>, C<parameters> a JSON schema. The chat
template gets them as its C<tools> variable, so a template that knows tools
(Qwen 2.5, Hermes, Llama 3.1, Mistral Nemo...) describes them to the model
its own way. As in llama.cpp, only a Jinja template can: a chat with a fixed
C<format> croaks when given tools. A template with no tool markup of its own
gets llama.cpp's generic form: the system message lists the tools and asks
for a JSON reply, C<{"tool_call": {"name": ..., "arguments": ...}}>,
C<{"tool_calls": [...]}> or C<{"response": "..."}>; unless the turn has a
C<grammar>, C<json_schema> or C<response_format> of its own, the reply is
constrained to a call of one of the tools or a response, as llama.cpp
constrains it (the tools' C<parameters> schemas become grammar rules). A
Hermes/Qwen chat is constrained lazily: once the model writes
C<< <tool_call> >>, the rest is a well-formed call of one of the tools (see
L<Lugh::Inference/Grammars>, C<grammar_trigger>).

The reply is read as llama.cpp reads it, in the family its template's text
names (see L<Lugh::Chat::Reply/tool_format>): Hermes/Qwen
C<< <tool_call> >>, Llama 3.x JSON and C<< <|python_tag|> >>, Mistral
C<[TOOL_CALLS]>, or the generic JSON. C<ask> then returns the content only
(the text outside the calls), and C<tool_calls> the calls, each

    { id => 'call_0', type => 'function',
      function => { name => 'get_weather', arguments => { city => 'Paris' },
                    arguments_json => '{"city":"Paris"}' } }

A call the model gives no id gets C<call_N>, N counting the chat's calls
from 0: reproducible, where llama.cpp's ids are random. The assistant
message the history keeps carries the C<tool_calls> (arguments as a
structure, which templates render), and C<< add_message(tool => $result,
tool_call_id => $id) >> adds the tool's result (a structure is sent as its
JSON text) for the next turn.

Reasoning between C<< <think> >> and C<< </think> >> at the start of a reply
(or from the start, when the template's prompt already opened
C<< <think> >>) is taken out of the reply: C<reasoning> returns it. While
streaming, the C<callback> gets the content only, and C<on_reasoning> the
reasoning, in pieces that hold no part of a tag; with tools, the content
stops at the first tool-call markup. C<stats> has C<content>,
C<reasoning_content>, C<tool_calls> and the raw C<text> too.

=head1 CONSTRUCTOR

=head2 new

    my $chat = Lugh::Chat->new(
        inference  => $inference,       # required, a Lugh::Inference
        system     => 'Be brief.',      # an optional system message
        template   => $jinja_source,    # or format => 'chatml', or prompt => $lugh_prompt;
                                        # default: the model's own template
        overflow   => 'error',          # or 'drop_oldest'
        max_tokens => 512,              # per reply
        stop       => ["\n\nUser:"],
        greedy     => 1,                # and any sampling option of generate()
        tools      => [ { type => 'function', function => { name => 'now' } } ],   # see Tools and reasoning
    );

C<tokenizer> may be given; by default one is made from the model. Sampling
options given here are the defaults of every turn; C<ask> and C<say> can
override them for one turn.

=head1 CONVERSATION

=head2 ask

    my $reply = $chat->ask('Name three rivers.');
    my $reply = $chat->ask('And three lakes?', max_tokens => 64, callback => sub {
        my ($text) = @_;      # whole UTF-8 characters, never part of a stop string
        print $text;
        return 0;             # true stops the reply here
    });

Adds the user's message, generates the assistant's reply, adds it to the
conversation and returns its text (its content: without reasoning and tool
calls, see L</Tools and reasoning>). If generation croaks (or a callback
dies), the user's message is taken back and the conversation is as before.

    my $reply = $chat->ask('Why is the sky blue?',
        on_reasoning => sub { print STDERR $_[0] },   # the <think> text, as it comes
        tools        => [ { type => 'function', function => { name => 'search',
                            parameters => { type => 'object', properties => { q => { type => 'string' } } } } } ],
    );

=head2 say

    $chat->say('Tell me a joke.');

Like C<ask>, but without a C<callback> the reply is printed to the selected
output handle as it is generated, followed by a newline. Returns the reply.

=head2 messages

    my @messages = $chat->messages;                 # copies: { role => ..., content => ... }
    $chat->messages([ { role => 'user', content => 'Hi' },
                      { role => 'assistant', content => 'Hello!' } ]);

The conversation so far, or replaces it (the KV cache keeps whatever prefix
still matches).

=head2 add_message

    $chat->add_message(user => 'Here is some context.');
    $chat->add_message(tool => { temperature => 21 }, tool_call_id => 'call_0');

Appends one message without generating. After the role and the content it
takes C<tool_call_id>, C<name> and C<tool_calls> (an array reference), for
the messages of tool calls; a C<tool> message's content may be a structure,
which the template gets as JSON text.

=head2 tool_calls

    my @calls = $chat->tool_calls;      # copies; an array reference in scalar context
    print scalar(@calls), " tool calls\n";

The tool calls of the last reply (see L</Tools and reasoning>): an empty
list when it made none, or before the first turn.

=head2 reasoning

    my $thought = $chat->reasoning;     # the last reply's <think> text, or undef

=head2 system

    print $chat->system;            # (the system text, or undef)
    $chat->system('Answer in French.');
    $chat->system(undef);           # no system message

=head2 reset

    $chat->reset;

Forgets every turn, keeps the system message.

=head2 stats

    my $s = $chat->stats;
    print "$s->{n_evaluated} tokens evaluated, $s->{n_reused} reused, $s->{tokens_per_second} tokens/s\n";

The last turn's statistics, as L<Lugh::Inference/generate> reports them
(C<stop_reason>, C<n_prompt>, C<n_reused>, C<n_evaluated>, C<n_generated>,
timings), or undef before the first turn. A turn asked with
C<< logprobs => N >> has each reply token's log-probability and its C<N>
best alternatives in C<< $chat->stats->{logprobs} >> (see
L<Lugh::Inference/Log-probabilities>); C<< progress => sub {...} >> is
passed to generate as well.

=head2 finish_reason

    print $chat->finish_reason;     # eos, stop_string, max_tokens or callback

Why the last reply ended.

=head2 inference, tokenizer, prompt, cache

    my $cache = $chat->cache;
    print $cache->n_cached, " positions cached\n";

The objects the chat works with.

=head1 SEE ALSO

L<Lugh::Prompt>, L<Lugh::Chat::Reply>, L<Lugh::Inference/chat>, L<Lugh::Inference/generate>

=cut
