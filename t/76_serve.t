# lugh serve: every endpoint, the errors (400, 401, 404, 413, 503), a client
# that disconnects mid-stream (its slot is free at once), and SIGTERM (the
# running stream ends, the server exits 0). The server runs as `lugh serve`
# on a free loopback port, with one slot and no queue, so that a second
# request while one streams is refused.
use strict;
use warnings;
use Test::More;
use HTTP::Tiny;
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(sleep time);
use lib 't/lib';
use LughTest qw(require_model);
use LughTestServe qw(free_port);
use Lugh;
use Lugh::Server;

plan skip_all => 'this Lugh was built without the server (LUGH_SERVER=0)' unless Lugh::Server->available;
my $model = require_model('smollm2-135m-q4_1');

my $KEY = 'test-key';
my $port = free_port();
my $base = "http://127.0.0.1:$port";
my $log = "/tmp/lugh-76-serve-$$.log";
my $pid = fork // die "fork: $!";
if (!$pid) {
    open STDERR, '>', $log or die $!;
    open STDOUT, '>&', \*STDERR or die $!;
    exec $^X, '-Mblib', 'blib/script/lugh', 'serve', $model, '--port', $port, '-c', 512, '-np', 1, '-t', 1,
        '--api-key', $KEY, '--embeddings', '--max-queue', 0, '-a', 'smol';
    die "exec: $!";
}
END { kill 'KILL', $pid if $pid && kill 0, $pid; unlink $log if $log }

my $http = HTTP::Tiny->new(timeout => 120, default_headers => { Authorization => "Bearer $KEY" });
my $anonymous = HTTP::Tiny->new(timeout => 30);
my $up;
for (1 .. 600) {
    my $r = $anonymous->get("$base/health");
    if ($r->{status} == 200) { $up = 1; last }
    last if waitpid($pid, POSIX::WNOHANG()) == $pid;
    sleep 0.1;
}
ok($up, 'the server answers /health') or do { diag(slurp($log)); done_testing(); exit };

sub slurp { open my $fh, '<', $_[0] or return ''; local $/; return <$fh> }
sub post {
    my ($path, $body, $client) = @_;
    my $content = ref $body ? encode_json($body) : $body;
    return ($client // $http)->post("$base$path", { headers => { 'Content-Type' => 'application/json' }, content => $content });
}
sub json_of { my $r = shift; return eval { decode_json($r->{content}) } // {} }
sub error_is {
    my ($r, $status, $type, $name) = @_;
    is($r->{status}, $status, "$name: status $status");
    my $e = json_of($r)->{error} // {};
    is($e->{code}, $status, "$name: error.code");
    is($e->{type}, $type, "$name: error.type $type") if $type;
    ok(length($e->{message} // ''), "$name: a message ($e->{message})");
}
my @hello = (messages => [ { role => 'user', content => 'What is the capital of France?' } ], temperature => 0);

# /health without a key; the rest want it
is(json_of($anonymous->get("$base/health"))->{status}, 'ok', '/health: ok without the key');
error_is($anonymous->get("$base/v1/models"), 401, 'authentication_error', 'no key');
error_is(HTTP::Tiny->new(default_headers => { Authorization => 'Bearer wrong' })->get("$base/v1/models"), 401, undef, 'a wrong key');
my $models = json_of($http->get("$base/v1/models"));
is($models->{data}[0]{id}, 'smol', '/v1/models: the alias');
is($models->{data}[0]{meta}{n_ctx}, 512, '/v1/models: the slot context');
like($anonymous->get("$base/")->{content}, qr/<title>Lugh chat<\/title>/, '/: the chat page, without the key');

# chat, whole and streamed
my $r = post('/v1/chat/completions', { @hello, max_tokens => 12 });
is($r->{status}, 200, 'chat: 200');
my $chat = json_of($r);
is($chat->{object}, 'chat.completion', 'chat: object');
is($chat->{choices}[0]{finish_reason}, 'length', 'chat: finish_reason length at max_tokens');
is($chat->{usage}{completion_tokens}, 12, 'chat: usage.completion_tokens');
is($chat->{usage}{prompt_tokens}, 37, 'chat: usage.prompt_tokens (the chat template applied)');
is($chat->{usage}{total_tokens}, 49, 'chat: usage.total_tokens');
my $content = $chat->{choices}[0]{message}{content};
ok(length $content, "chat: content '$content'");

$r = post('/v1/chat/completions', { @hello, max_tokens => 12, stream => JSON::PP::true, stream_options => { include_usage => JSON::PP::true } });
like($r->{headers}{'content-type'}, qr{^text/event-stream}, 'stream: text/event-stream');
my @data = $r->{content} =~ /^data: (.*)$/mg;
is($data[-1], '[DONE]', 'stream: ends with data: [DONE]');
my @chunks = map { decode_json($_) } @data[ 0 .. $#data - 1 ];
is($chunks[0]{choices}[0]{delta}{role}, 'assistant', 'stream: the first chunk gives the role');
is(join('', map { $_->{choices}[0]{delta}{content} // '' } @chunks), $content, 'stream: the chunks make the same text');
my ($last) = grep { @{ $_->{choices} } && $_->{choices}[0]{finish_reason} } @chunks;
is($last->{choices}[0]{finish_reason}, 'length', 'stream: finish_reason');
is($chunks[-1]{usage}{completion_tokens}, 12, 'stream: include_usage gives the usage');

# stop strings, completions, logprobs, response_format
$r = json_of(post('/v1/chat/completions', { @hello, max_tokens => 60, stop => [','] }));
is($r->{choices}[0]{finish_reason}, 'stop', 'stop: finish_reason stop');
unlike($r->{choices}[0]{message}{content}, qr/,/, 'stop: the stop string is not in the content');
$r = json_of(post('/v1/completions', { prompt => 'The capital of France is', temperature => 0, max_tokens => 5 }));
is($r->{object}, 'text_completion', 'completions: object');
ok(length $r->{choices}[0]{text}, "completions: text '$r->{choices}[0]{text}'");
is($r->{usage}{completion_tokens}, 5, 'completions: usage');
$r = json_of(post('/v1/chat/completions', { @hello, max_tokens => 4, logprobs => JSON::PP::true, top_logprobs => 2 }));
my $lp = $r->{choices}[0]{logprobs}{content} // do { diag(encode_json($r)); [] };
is(scalar @$lp, 4, 'logprobs: one entry per token');
is(scalar @{ $lp->[0]{top_logprobs} // [] }, 2, 'logprobs: top_logprobs alternatives');
ok($lp->[0]{logprob} <= 0, 'logprobs: a log-probability');
# streamed logprobs come with the chunks, as llama-server sends them: each
# chunk with text carries choices[0].logprobs.content for its tokens
$r = post('/v1/chat/completions', { @hello, max_tokens => 6, logprobs => JSON::PP::true, top_logprobs => 2,
    stream => JSON::PP::true });
my @lp_chunks = map { decode_json($_) } grep { /^\{/ } $r->{content} =~ /^data: (.*)$/mg;
my @with_text = grep { length($_->{choices}[0]{delta}{content} // '') } @lp_chunks;
ok(@with_text && !grep({ !@{ $_->{choices}[0]{logprobs}{content} // [] } } @with_text),
    'stream logprobs: every chunk with text has its tokens\' logprobs');
my @streamed_lp = map { @{ $_->{choices}[0]{logprobs}{content} // [] } } @lp_chunks;
is(scalar @streamed_lp, 6, 'stream logprobs: one entry per token over the chunks');
is(join('', map { $_->{token} } @streamed_lp), join('', map { $_->{choices}[0]{delta}{content} // '' } @lp_chunks),
    'stream logprobs: their tokens make the streamed text');
is(scalar @{ $streamed_lp[0]{top_logprobs} // [] }, 2, 'stream logprobs: top_logprobs alternatives');
$r = post('/v1/completions', { prompt => 'The capital of France is', temperature => 0, max_tokens => 4, logprobs => 1,
    stream => JSON::PP::true });
my @text_lp = map { @{ decode_json($_)->{choices}[0]{logprobs}{content} // [] } } grep { /^\{/ } $r->{content} =~ /^data: (.*)$/mg;
is(scalar @text_lp, 4, 'completions stream logprobs: one entry per token');

# tool calls (the Hermes blocks Qwen writes; here a grammar makes SmolLM2
# write one), whole and streamed as delta.tool_calls
my @tools = (tools => [ { type => 'function', function => { name => 'weather',
    parameters => { type => 'object', properties => { city => { type => 'string' } } } } } ],
    grammar => 'root ::= "Let me look.\\n<tool_call>\\n{\\"name\\": \\"weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\"}}\\n</tool_call>"',
    max_tokens => 60);
$r = json_of(post('/v1/chat/completions', { @hello, @tools }));
is($r->{choices}[0]{finish_reason}, 'tool_calls', 'tools: finish_reason tool_calls');
is($r->{choices}[0]{message}{content}, 'Let me look.', 'tools: the content before the call');
my $call = $r->{choices}[0]{message}{tool_calls}[0] // {};
is("$call->{function}{name} $call->{function}{arguments}", 'weather {"city":"Paris"}', 'tools: the call parsed');
$r = post('/v1/chat/completions', { @hello, @tools, stream => JSON::PP::true });
my @tool_chunks = map { decode_json($_) } grep { /^\{/ } $r->{content} =~ /^data: (.*)$/mg;
is(join('', map { $_->{choices}[0]{delta}{content} // '' } @tool_chunks), 'Let me look.',
    'tools stream: the content streamed, the call not in it');
my @deltas = map { @{ $_->{choices}[0]{delta}{tool_calls} // [] } } @tool_chunks;
is(scalar @deltas, 1, 'tools stream: one delta.tool_calls');
is($deltas[0]{index}, 0, 'tools stream: ... with its index');
ok(length $deltas[0]{id} && $deltas[0]{type} eq 'function', 'tools stream: ... its id and type');
is("$deltas[0]{function}{name} $deltas[0]{function}{arguments}", 'weather {"city":"Paris"}', 'tools stream: ... name and arguments');
my ($tool_finish) = grep { defined } map { $_->{choices}[0]{finish_reason} } @tool_chunks;
is($tool_finish, 'tool_calls', 'tools stream: finish_reason tool_calls');

my $schema = { type => 'object', properties => { city => { type => 'string' } }, required => ['city'] };
$r = json_of(post('/v1/chat/completions', { @hello, max_tokens => 40,
    response_format => { type => 'json_schema', json_schema => { name => 'x', schema => $schema } } }));
my $object = eval { decode_json($r->{choices}[0]{message}{content}) };
ok($object && defined $object->{city}, "response_format: JSON that follows the schema ($r->{choices}[0]{message}{content})");

# tokenize, detokenize, embeddings
my $tokens = json_of(post('/tokenize', { content => 'Hello world' }))->{tokens};
ok(@$tokens >= 2, 'tokenize: tokens');
is(json_of(post('/detokenize', { tokens => $tokens }))->{content}, 'Hello world', 'detokenize: the text back');
is(json_of(post('/tokenize', { content => 'Hi', with_pieces => JSON::PP::true }))->{tokens}[0]{piece}, 'Hi', 'tokenize: with_pieces');
$r = json_of(post('/v1/embeddings', { input => [ 'a cat', 'a dog' ] }));
is(scalar @{ $r->{data} }, 2, 'embeddings: one per input');
my $v = $r->{data}[0]{embedding};
is(scalar @$v, 576, 'embeddings: n_embd values');
my $norm = 0; $norm += $_**2 for @$v;
ok(abs(sqrt($norm) - 1) < 1e-3, 'embeddings: unit length');
require MIME::Base64;
my $b64 = json_of(post('/v1/embeddings', { input => 'a cat', encoding_format => 'base64' }))->{data}[0]{embedding};
my @floats = unpack 'f<*', MIME::Base64::decode_base64($b64 // '');
ok(@floats == 576 && abs($floats[0] - $v->[0]) < 1e-6, 'embeddings: encoding_format base64 (the f32 values, little-endian)');

# bad input: the right status, an OpenAI error, and the server still serves
error_is(post('/v1/chat/completions', '{"messages": [}'), 400, 'invalid_request_error', 'malformed JSON');
error_is(post('/v1/chat/completions', '[1, 2]'), 400, 'invalid_request_error', 'a body that is no object');
error_is(post('/v1/chat/completions', { @hello, temperature => 'hot' }), 400, 'invalid_request_error', 'temperature a string');
error_is(post('/v1/chat/completions', { @hello, max_tokens => -5 }), 400, undef, 'max_tokens out of range');
error_is(post('/v1/chat/completions', { temperature => 0 }), 400, undef, 'no messages');
error_is(post('/v1/chat/completions', { messages => 'hi' }), 400, undef, 'messages a string');
error_is(post('/v1/chat/completions', { messages => [ { content => 'hi' } ] }), 400, undef, 'a message without role');
error_is(post('/v1/chat/completions', { @hello, model => 'gpt-4' }), 400, undef, 'an unknown model');
is(post('/v1/chat/completions', { @hello, model => 'smol', max_tokens => 1 })->{status}, 200, 'the model by its alias');
error_is(post('/v1/chat/completions', { @hello, stop => [''] }), 400, undef, 'an empty stop string');
error_is(post('/v1/chat/completions', { @hello, n => 2 }), 400, undef, 'n > 1');
error_is(post('/v1/chat/completions', { @hello, response_format => { type => 'xml' } }), 400, undef, 'a bad response_format');
error_is(post('/v1/chat/completions', { messages => [ { role => 'user', content => 'word ' x 600 } ] }), 400,
    'invalid_request_error', 'a prompt longer than the slot');
like(json_of(post('/v1/completions', { prompt => 'word ' x 600 }))->{error}{message}, qr/exceeds the available context size \(512 tokens\)/,
    'the context error says the slot size');
error_is(post('/v1/embeddings', { input => 42 }), 400, undef, 'embeddings: input a number');
error_is(post('/detokenize', { tokens => 'abc' }), 400, undef, 'detokenize: tokens a string');
# (a raw request: the server answers 413 from the declared length without
# reading the body, and HTTP::Tiny, still writing it, would see the reset)
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or die $!;
    print {$s} "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\n"
        . "Content-Type: application/json\r\nContent-Length: " . (9 << 20) . "\r\nConnection: close\r\n\r\n{\"x\": \"aaaa";
    my $answer = '';
    while (sysread($s, $answer, 4096, length $answer)) { }
    my ($status) = $answer =~ m{\AHTTP/1\.1 (\d+)};
    my ($body) = $answer =~ /\r\n\r\n(.*)\z/s;
    error_is({ status => $status, content => $body }, 413, 'invalid_request_error', 'a body over the size limit');
}
# a client that sends the whole body before reading (as HTTP::Tiny does) sees
# the 413 too, not a reset connection
error_is(post('/v1/completions', '{"prompt": "' . ('a' x (8 << 20)) . '"}'), 413, 'invalid_request_error',
    'a body over the size limit, sent whole');
error_is($http->get("$base/v1/nothing"), 404, 'not_found_error', 'an unknown path');
is(post('/v1/chat/completions', { @hello, max_tokens => 2 })->{status}, 200, 'still serving after the bad requests');

# A raw streaming request: returns the socket once the first token's chunk arrived.
sub open_stream {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or die $!;
    my $body = encode_json({ @hello, max_tokens => 400, stream => JSON::PP::true });
    print {$s} "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\n"
        . "Content-Type: application/json\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body";
    my $got = '';
    while ($got !~ /"content":"/) { sysread($s, $got, 4096, length $got) or last }
    return ($s, $got);
}

# the one slot busy: 503 with Retry-After; the client goes away: the slot is free at once
my ($stream) = open_stream();
my $busy = post('/v1/chat/completions', { @hello, max_tokens => 2 });
error_is($busy, 503, 'unavailable_error', 'every slot busy');
ok($busy->{headers}{'retry-after'}, '503 says Retry-After');
close $stream;
my $t0 = time;
my $after;
for (1 .. 50) {
    $after = post('/v1/chat/completions', { @hello, max_tokens => 2 });
    last if $after->{status} == 200;
    sleep 0.1;
}
is($after->{status}, 200, 'a client that disconnects mid-stream frees its slot');
ok(time - $t0 < 5, sprintf('... at once (%.2f s, not the 400 tokens it asked for)', time - $t0));

# SIGTERM: the running stream ends, the server exits 0
($stream, my $got) = open_stream();
kill 'TERM', $pid;
my $rest = '';
$stream->timeout(30);
while (sysread($stream, $rest, 4096, length $rest)) { }
my $waited = 0;
while (waitpid($pid, POSIX::WNOHANG()) == 0 && $waited < 30) { sleep 0.1; $waited += 0.1 }
is($?, 0, 'SIGTERM: the server exits with status 0');
ok($waited < 30, "SIGTERM: ... promptly ($waited s)");
unlike($rest, qr/"finish_reason":"length"/, 'SIGTERM: the stream was cancelled, not run out');
like($rest, qr/shutting down/, 'SIGTERM: ... with an error event that says so');
$pid = 0;

done_testing();
