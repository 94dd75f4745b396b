# Tool calls and reasoning: Lugh::Chat::Reply reads each family's tool-call
# markup (Hermes/Qwen, Llama 3.x, Mistral Nemo, llama.cpp's generic JSON) and
# <think> reasoning from fixed texts, and splits a stream of pieces; Lugh::Chat
# and Lugh::Inference->chat take tools, hand them to the template and return
# the calls; bad tools croak naming the problem. The live part needs the Qwen
# test model; the rest runs on a tiny synthetic model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $R = 'Lugh::Chat::Reply';

sub calls_of {
    my ($reply) = @_;
    return [ map { [ $_->{id}, $_->{function}{name}, $_->{function}{arguments} ] } @{ $reply->{tool_calls} } ];
}

subtest 'the family a template asks for' => sub {
    is($R->tool_format("{% if tools %}<tool_call>{% endif %}"), 'hermes', '<tool_call>: hermes');
    is($R->tool_format('<|start_header_id|>ipython<|end_header_id|>'), 'llama3', 'ipython: llama3');
    is($R->tool_format('{{ "<|python_tag|>" }}'), 'llama3', '<|python_tag|>: llama3');
    is($R->tool_format('[AVAILABLE_TOOLS][TOOL_CALLS]'), 'mistral', '[TOOL_CALLS]: mistral');
    is($R->tool_format('{{ messages }}'), 'generic', 'otherwise generic');
    is_deeply([ $R->tool_formats ], [qw(generic hermes llama3 mistral)], 'tool_formats');
};

subtest 'hermes / qwen' => sub {
    my $r = $R->parse(qq(<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>),
        tool_format => 'hermes');
    is_deeply(calls_of($r), [ [ 'call_0', 'get_weather', { city => 'Paris', days => 2 } ] ], 'one call');
    is($r->{content}, '', 'no content');
    is($r->{tool_calls}[0]{type}, 'function', 'type function');
    is($r->{tool_calls}[0]{function}{arguments_json}, '{"city":"Paris","days":2}', 'arguments_json, keys sorted');
    is($r->{reasoning_content}, undef, 'no reasoning');

    $r = $R->parse(qq(Let me look.\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>\n```json\n)
            . qq({"name": "b", "arguments": "{\\"x\\": [1]}"}\n```\n</tool_call>), tool_format => 'hermes', first_id => 4);
    is_deeply(calls_of($r), [ [ 'call_4', 'a', {} ], [ 'call_5', 'b', { x => [1] } ] ], 'two calls, ids from first_id, JSON-text arguments decoded');
    is($r->{content}, 'Let me look.', 'the content around them');

    my $bad = qq(Sure <tool_call>{"name": "a", "arguments": {</tool_call> done);
    $r = $R->parse($bad, tool_format => 'hermes');
    is_deeply($r->{tool_calls}, [], 'malformed JSON: no call');
    is($r->{content}, $bad, 'and left as content');
    $r = $R->parse(qq(<tool_call>{"name": "a", "arguments": {"x": 1}}), tool_format => 'hermes');
    is_deeply($r->{tool_calls}, [], 'an unterminated call is no call');
    like($r->{content}, qr/\A<tool_call>/, 'and stays content');
    $r = $R->parse(qq(<tool_call>{"arguments": {}}</tool_call>), tool_format => 'hermes');
    is_deeply($r->{tool_calls}, [], 'a call without a name is no call');
    $r = $R->parse(qq(<tool_call>{"name": "a"}</tool_call>), tool_format => 'hermes');
    is_deeply(calls_of($r), [ [ 'call_0', 'a', {} ] ], 'no arguments: {}');
    $r = $R->parse(qq(\n{"name": "a", "arguments": {"x": 1}}\nThat is all.), tool_format => 'hermes');
    is_deeply(calls_of($r), [ [ 'call_0', 'a', { x => 1 } ] ], 'a bare JSON call opening the reply (tags missing)');
    is($r->{content}, 'That is all.', 'the text after it is content');
    $r = $R->parse(qq(<tool_call>{"name":"a","arguments":{}}</tool_call>));
    is_deeply($r->{tool_calls}, [], 'without tool_format no calls are read');
};

subtest 'llama 3.x' => sub {
    my $r = $R->parse(qq({"name": "get_weather", "parameters": {"city": "Oslo"}}), tool_format => 'llama3');
    is_deeply(calls_of($r), [ [ 'call_0', 'get_weather', { city => 'Oslo' } ] ], 'a JSON call with parameters');
    $r = $R->parse(qq({"type": "function", "name": "a", "parameters": {}}; {"name": "b", "arguments": {"y": true}}),
        tool_format => 'llama3');
    is_deeply([ map { $_->[1] } @{ calls_of($r) } ], [qw(a b)], 'two calls separated by ;');
    ok($r->{tool_calls}[1]{function}{arguments}{y}, 'a JSON true');
    $r = $R->parse(qq(Searching.<|python_tag|>brave_search.call(query="lugh perl", count=3)), tool_format => 'llama3');
    is_deeply(calls_of($r), [ [ 'call_0', 'brave_search', { query => 'lugh perl', count => 3 } ] ], 'a builtin call');
    is($r->{content}, 'Searching.', 'the content before <|python_tag|>');
    $r = $R->parse(qq(<|python_tag|>print(6 * 7)), tool_format => 'llama3');
    is_deeply(calls_of($r), [ [ 'call_0', 'python', { code => 'print(6 * 7)' } ] ], 'code: a call of python');
    $r = $R->parse(qq(<|python_tag|>{"name": "a", "parameters": {"n": 1}}), tool_format => 'llama3');
    is_deeply(calls_of($r), [ [ 'call_0', 'a', { n => 1 } ] ], 'JSON after <|python_tag|>');
    $r = $R->parse(qq({"name": "a", "parameters": {), tool_format => 'llama3');
    is_deeply($r->{tool_calls}, [], 'malformed JSON: no call');
    is($r->{content}, qq({"name": "a", "parameters": {), 'left as content');
    $r = $R->parse(qq({"city": "Oslo"}), tool_format => 'llama3');
    is_deeply($r->{tool_calls}, [], 'JSON that is no call stays content');
};

subtest 'mistral nemo' => sub {
    my $r = $R->parse(qq([TOOL_CALLS][{"name": "a", "arguments": {"q": "x"}, "id": "abc123XYZ"}, {"name": "b", "arguments": {}}]),
        tool_format => 'mistral');
    is_deeply(calls_of($r), [ [ 'abc123XYZ', 'a', { q => 'x' } ], [ 'call_1', 'b', {} ] ], 'two calls, the given id kept');
    is($r->{content}, '', 'no content');
    $r = $R->parse(qq(Hm. [TOOL_CALLS][{"name": "a", "arguments": ), tool_format => 'mistral');
    is_deeply($r->{tool_calls}, [], 'unterminated: no call');
    like($r->{content}, qr/\[TOOL_CALLS\]/, 'left as content');
};

subtest 'generic' => sub {
    my $r = $R->parse(qq({"tool_call": {"name": "a", "arguments": {"k": [1, 2]}}}), tool_format => 'generic');
    is_deeply(calls_of($r), [ [ 'call_0', 'a', { k => [ 1, 2 ] } ] ], 'tool_call');
    $r = $R->parse(qq({"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}, "id": "x"}]}),
        tool_format => 'generic');
    is_deeply(calls_of($r), [ [ 'call_0', 'a', {} ], [ 'x', 'b', {} ] ], 'tool_calls');
    $r = $R->parse(qq( {"response": "It is sunny."} ), tool_format => 'generic');
    is($r->{content}, 'It is sunny.', 'response: the content');
    is_deeply($r->{tool_calls}, [], 'and no call');
    $r = $R->parse('Just text.', tool_format => 'generic');
    is($r->{content}, 'Just text.', 'not JSON: content as it is');
    $r = $R->parse('{"tool_call": {"name": ', tool_format => 'generic');
    is($r->{content}, '{"tool_call": {"name":', 'malformed: content as it is');
};

subtest 'reasoning' => sub {
    my $r = $R->parse("<think>\nThe user greets.\n</think>\n\nHello!");
    is($r->{reasoning_content}, 'The user greets.', 'reasoning between the tags');
    is($r->{content}, 'Hello!', 'content after them');
    $r = $R->parse("Already thinking.</think>Hi", thinking => 1);
    is($r->{reasoning_content}, 'Already thinking.', 'a prompt that opened <think>: reasoning up to </think>');
    is($r->{content}, 'Hi', 'then content');
    $r = $R->parse('<think>never closed');
    is($r->{reasoning_content}, 'never closed', 'unclosed: all reasoning');
    is($r->{content}, '', 'no content');
    $r = $R->parse('No <think> here');
    is($r->{reasoning_content}, undef, 'a <think> not at the start is content');
    $r = $R->parse(qq(<think>call it</think><tool_call>{"name": "a", "arguments": {}}</tool_call>), tool_format => 'hermes');
    is($r->{reasoning_content}, 'call it', 'reasoning before a call');
    is_deeply(calls_of($r), [ [ 'call_0', 'a', {} ] ], 'and the call');
};

# Feeds the pieces; returns (content pieces, reasoning pieces, the parse).
sub run_stream {
    my ($pieces, %opt) = @_;
    my (@content, @reasoning);
    my $stream = $R->stream(%opt, on_content => sub { push @content, $_[0]; 0 }, on_reasoning => sub { push @reasoning, $_[0] });
    $stream->add($_) for @$pieces;
    my $reply = $stream->finish($R->parse(join('', @$pieces), %opt));
    return (\@content, \@reasoning, $reply);
}

subtest 'streaming' => sub {
    my ($content, $reasoning, $reply) = run_stream([ '<', 'thi', 'nk>', 'Let me', ' see.', '</', 'thi', 'nk>', "\n\n", 'Hel', 'lo', '!' ]);
    is(join('', @$reasoning), 'Let me see.', 'reasoning pieces join to the reasoning');
    is(join('', @$content), 'Hello!', 'content pieces join to the content, no tag leaks');
    ok(!grep({ /[<>]/ } @$content, @$reasoning), 'no piece holds part of a tag');
    is($reply->{content}, 'Hello!', 'the parse agrees');
    ok(@$reasoning >= 2, 'reasoning streamed in pieces, not only at the end');

    ($content, $reasoning) = run_stream([ 'Still ', 'thinking', '</think>', 'Done' ], thinking => 1);
    is(join('', @$reasoning), 'Still thinking', 'opened by the prompt: reasoning first');
    is(join('', @$content), 'Done', 'then content');

    ($content) = run_stream([ '<b>', 'old</b> <thin', 'g>' ]);
    is(join('', @$content), '<b>old</b> <thing>', 'tag-like text that is no tag passes as content');

    ($content, undef, $reply) = run_stream([ 'Checking.', "\n<tool", "_call>\n", '{"name": "a", ', '"arguments": {}}', "\n</tool_call>" ],
        tool_format => 'hermes');
    is(join('', @$content), 'Checking.', 'content stops before the call');
    is(scalar @{ $reply->{tool_calls} }, 1, 'the call is read at the end');

    ($content) = run_stream([ '{"resp', 'onse": "Sun', 'ny."}' ], tool_format => 'generic');
    is(join('', @$content), 'Sunny.', 'generic: the response is sent at the end');

    my $stop = $R->stream(on_content => sub { 1 });
    ok($stop->add('Hi'), 'a true on_content result: add returns true');
};

my $dir = tempdir(CLEANUP => 1);
my $inference = Lugh::Inference->new(model => Lugh::Model->new(model => tiny_model($dir)), n_ctx => 128, n_threads => 1);
my $weather = { type => 'function', function => { name => 'get_weather', description => 'The weather in a city',
    parameters => { type => 'object', properties => { city => { type => 'string' } }, required => ['city'] } } };
my $template = '{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.tool_calls %}<tool_call>'
    . '{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}</tool_call>{% endif %}'
    . "\n{% endfor %}{% for t in tools %}tool {{ t.function.name }}\n{% endfor %}assistant:";

subtest 'hostile tools and callbacks' => sub {
    my %base = (inference => $inference, template => $template, max_tokens => 2, greedy => 1);
    croaks_like(sub { Lugh::Chat->new(%base, tools => { name => 'x' }) }, qr/tools must be an array reference/, 'tools not an array');
    croaks_like(sub { Lugh::Chat->new(%base, tools => ['x']) }, qr/tools->\[0\] must be a hash reference/, 'a tool not a hash');
    croaks_like(sub { Lugh::Chat->new(%base, tools => [ { type => 'function', function => { description => 'd' } } ]) },
        qr/tools->\[0\]\{function\}\{name\} is missing/, 'a tool without a name');
    croaks_like(sub { Lugh::Chat->new(%base, tools => [ { type => 'function', function => { name => 'f', parameters => [] } } ]) },
        qr/\{parameters\} of 'f' must be a hash reference/, 'parameters not a hash');
    croaks_like(sub { Lugh::Chat->new(%base, tools => [ { type => 'web', function => { name => 'f' } } ]) },
        qr/\{type\} must be 'function'/, 'a type other than function');
    croaks_like(sub { Lugh::Chat->new(%base, tools => [ { type => 'function' } ]) },
        qr/tools->\[0\]\{function\} must be a hash reference/, 'no function');
    croaks_like(sub { Lugh::Chat->new(inference => $inference, format => 'chatml', tools => [$weather]) },
        qr/tools need a Jinja chat template.*'chatml' cannot describe tools/, 'a fixed format cannot describe tools');
    my $chat = Lugh::Chat->new(%base);
    croaks_like(sub { $chat->ask('hi', tools => 'x') }, qr/Lugh::Chat->ask: tools must be an array reference/, 'per turn too');
    croaks_like(sub { $chat->ask('hi', on_reasoning => 'x') }, qr/on_reasoning must be a code reference/, 'on_reasoning not code');
    croaks_like(sub { $inference->chat(messages => [ { role => 'user', content => 'hi' } ], template => $template, tools => 5) },
        qr/Lugh::Inference->chat: tools must be an array reference/, 'inference->chat too');
    croaks_like(sub { $R->parse('x', tool_format => 'json') }, qr/unknown tool_format 'json'/, 'an unknown tool_format');
    croaks_like(sub { $R->stream(on_reasoning => 1) }, qr/on_reasoning must be a code reference/, 'stream: on_reasoning not code');
    croaks_like(sub { $chat->add_message(tool => 'x', tool_calls => 'y') }, qr/tool_calls must be an array reference/, 'add_message tool_calls');
    is(scalar(my @none = $chat->messages), 0, 'no turn was added');

    my $none = Lugh::Chat->new(%base, tools => []);
    ok(defined $none->ask('hi'), 'an empty tools list: a plain turn');
    my $forced = Lugh::Chat->new(%base, template => "$template<think>\n", max_tokens => 3);
    eval { $forced->ask('hi', on_reasoning => sub { die "reasoning died\n" }) };
    is($@, "reasoning died\n", 'a dying on_reasoning: the exception propagates');
    is(scalar(my @left = $forced->messages), 0, 'and the turn is taken back');
    my $reply = $forced->ask('hi', on_reasoning => sub { 0 });
    ok(defined $reply, 'the chat is usable afterwards');
    ok(defined $forced->reasoning, 'a prompt ending in <think>: the reply is reasoning');
};

subtest 'the template gets the tools; the history keeps calls and tool results' => sub {
    my $chat = Lugh::Chat->new(inference => $inference, template => $template, tools => [$weather], max_tokens => 2, greedy => 1);
    my $text = $chat->prompt->apply({ role => 'user', content => 'x' }, tools => [$weather]);
    like($text, qr/tool get_weather/, 'the template renders the tools');
    $chat->ask('Weather in Paris?');
    is_deeply([ $chat->tool_calls ], [], 'tool_calls: a list (empty for this model)');
    ok(exists $chat->stats->{tool_calls} && exists $chat->stats->{content}, 'stats carry content and tool_calls');
    $chat->messages([ { role => 'user', content => 'Weather?' },
        { role => 'assistant', content => '', tool_calls => [ { id => 'call_0', type => 'function',
            function => { name => 'get_weather', arguments => { city => 'Paris' } } } ] } ]);
    $chat->add_message(tool => { temperature => 21 }, tool_call_id => 'call_0');
    my @m = $chat->messages;
    is_deeply($m[-1], { role => 'tool', content => '{"temperature":21}', tool_call_id => 'call_0' }, 'a tool result, JSON-encoded');
    like($chat->prompt->apply(@m), qr/<tool_call>get_weather\{"city": ?"Paris"\}<\/tool_call>/, 'the calls render');

    my %stats;
    my $reply = $inference->chat(messages => [ { role => 'user', content => 'hi' } ], template => $template,
        tools => [$weather], max_tokens => 2, greedy => 1, stats => \%stats);
    is($stats{content}, $reply, 'inference->chat: stats => \%s has the content');
    is(ref $stats{tool_calls}, 'ARRAY', 'and tool_calls');
};

subtest 'generic: tools described in the system message, the reply constrained to JSON' => sub {
    my $plain = '{% for m in messages %}{{ m.role }}: {{ m.content }}' . "\n" . '{% endfor %}assistant:';
    # the tiny model knows 256 positions; what it writes here matters not
    local $SIG{__WARN__} = sub { warn @_ unless $_[0] =~ /was trained on/ };
    my $wide = Lugh::Inference->new(model => $inference->model, n_ctx => 2048, n_threads => 1);
    my $chat = Lugh::Chat->new(inference => $wide, template => $plain, tools => [$weather], max_tokens => 24, greedy => 1);
    my $reply = $chat->ask('Weather in Paris?');
    my $text = $chat->stats->{text};
    note "raw reply: $text";
    like($text, qr/\A\{\s*"(?:tool_call|response)"/, 'the reply is the generic JSON');
    my $expect = Lugh::Chat::Reply->parse($text, tool_format => 'generic');
    is($reply, $expect->{content}, 'read as the generic form');
    my $messages = [ $chat->messages ];
    my $rendered = $chat->prompt->apply(Lugh::Chat::_describe_tools($messages, [$weather]));
    like($rendered, qr/\Asystem: You can call any of the following tools.*"get_weather".*Respond in JSON format/s,
        'a system message describes the tools');
    $chat->ask('Again?', grammar => 'root ::= "ok"');
    is($chat->stats->{text}, 'ok', "a turn's own grammar wins");
};

subtest 'a lazy grammar: free text until its trigger, constrained from it' => sub {
    my $tok = Lugh::Tokenizer->new(model => $inference->model);
    my @prompt = $tok->encode('hello world');
    my @free = $inference->generate(\@prompt, greedy => 1, max_tokens => 12, stats => \my %free);
    my ($at) = grep { $tok->decode([ $free[$_] ]) =~ /\A[ -~]+\z/ } 0 .. $#free;
    plan skip_all => 'the tiny model wrote no plain ASCII token' unless defined $at;
    my $trigger = $tok->decode([ $free[$at] ]);
    (my $literal = $trigger) =~ s/(["\\])/\\$1/g;
    my @lazy = $inference->generate(\@prompt, greedy => 1, max_tokens => 12, stats => \my %lazy,
        grammar => qq(root ::= "$literal" [a-z ]*), grammar_trigger => $trigger);
    is_deeply([ @lazy[ 0 .. $at ] ], [ @free[ 0 .. $at ] ], 'up to the trigger: the free text');
    my $after = $tok->decode([ @lazy[ $at + 1 .. $#lazy ] ]);
    like($after, qr/\A[a-z ]*\z/, "after it: what the grammar allows ('$after')");
    croaks_like(sub { $inference->generate(\@prompt, max_tokens => 2, grammar_trigger => 'x') },
        qr/grammar_trigger needs a grammar/, 'a trigger without a grammar');
    croaks_like(sub { $inference->generate(\@prompt, max_tokens => 2, grammar => 'root ::= "x"', grammar_trigger => '') },
        qr/grammar_trigger must not be empty/, 'an empty trigger');
    like(Lugh::Chat::_hermes_grammar([$weather]), qr/\Aroot ::= tool-call .*"<tool_call>"/s,
        'a Hermes chat with tools: a grammar for its calls, that <tool_call> triggers');
    ok(Lugh::Grammar->new(Lugh::Chat::_hermes_grammar([$weather]))
            ->accepts(qq(<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>)),
        'which accepts a call of the tool');
};

my $qwen = model_path('qwen2.5-coder-0.5b-q4_k_m');
SKIP: {
    skip 'needs the Qwen test model (run: perl t/fetch-models)', 1 unless $qwen;
    subtest 'qwen2.5-coder: get_weather' => sub {
        my $inf = Lugh::Inference->new(model => Lugh::Model->new(model => $qwen), n_ctx => 2048, n_threads => 2);
        my $chat = Lugh::Chat->new(inference => $inf, tools => [$weather], greedy => 1, max_tokens => 64);
        my $text = $chat->prompt->apply({ role => 'user', content => 'x' }, tools => [$weather], add_generation_prompt => 1);
        like($text, qr/<tools>.*"get_weather".*<\/tools>/s, 'the Qwen template describes the tool');
        is(Lugh::Chat::Reply->tool_format($chat->prompt->template), 'hermes', 'Qwen: the hermes family');
        my @pieces;
        my $reply = $chat->ask('What is the weather like in Paris today?', callback => sub { push @pieces, $_[0]; 0 });
        my $raw = $chat->stats->{text};
        note "raw reply: $raw";
        my $expect = Lugh::Chat::Reply->parse($raw, tool_format => 'hermes');
        is($reply, $expect->{content}, 'ask returns the content of the reply');
        is_deeply([ $chat->tool_calls ], $expect->{tool_calls}, 'tool_calls: the parse of the raw reply');
        is(join('', @pieces), $reply, 'the streamed pieces are the content');
        unlike(join('', @pieces), qr/<tool_call>/, 'no call markup streamed');
        if (my @calls = $chat->tool_calls) {
            is($calls[0]{function}{name}, 'get_weather', 'the model called get_weather');
            my $last = ($chat->messages)[-1];
            is($last->{tool_calls}[0]{function}{name}, 'get_weather', 'the history keeps the call');
            $chat->add_message(tool => { temperature => 21, sky => 'clear' }, tool_call_id => $calls[0]{id});
            like($chat->prompt->apply($chat->messages), qr/<tool_response>\n\{"sky":"clear","temperature":21\}\n<\/tool_response>/,
                'the tool result renders as Qwen expects');
            my $answer = $chat->ask('Answer me now.', tools => [$weather]);
            ok(defined $answer, "a turn after the tool result: $answer");
        }
    };
}

done_testing;
