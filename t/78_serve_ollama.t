# lugh serve's Ollama endpoints: /api/tags, /api/version, /api/chat and
# /api/generate, whole ("stream": false) and streamed as NDJSON, with
# Ollama's options, done_reason and counts; the greedy text equals what
# /v1/chat/completions gives for the same request; errors are Ollama's
# {"error": "..."}. The server runs as `lugh serve` with SmolLM2 on a free
# loopback port.
use strict;
use warnings;
use Test::More;
use HTTP::Tiny;
use JSON::PP;
use lib 't/lib';
use LughTest qw(require_model);
use LughTestServe qw(start_lugh);
use Lugh;
use Lugh::Server;

plan skip_all => 'this Lugh was built without the server (LUGH_SERVER=0)' unless Lugh::Server->available;
my $model = require_model('smollm2-135m-q4_1');

my $log = "/tmp/lugh-78-serve-$$.log";
my $server = eval { start_lugh($model, $log, '-c', 512, '-np', 1, '-t', 1, '-a', 'smollm2:135m') };
ok($server, 'the server answers /health') or do { diag($@); done_testing(); exit };
my ($base, $pid) = @$server{qw(base pid)};
END { kill 'KILL', $pid if $pid && kill 0, $pid; unlink $log if $log }
my $http = HTTP::Tiny->new(timeout => 120);

sub post {
    my ($path, $body) = @_;
    my $content = ref $body ? encode_json($body) : $body;
    return $http->post("$base$path", { headers => { 'Content-Type' => 'application/json' }, content => $content });
}
sub json_of { my $r = shift; return eval { decode_json($r->{content}) } // {} }
sub lines_of { my $r = shift; return map { decode_json($_) } grep {length} split /\n/, $r->{content} }

my $question = [ { role => 'user', content => 'What is the capital of France?' } ];
my %greedy = (temperature => 0, num_predict => 12);

# /api/tags, /api/version
my $tags = json_of($http->get("$base/api/tags"));
is($tags->{models}[0]{name}, 'smollm2:135m', '/api/tags: the model by its alias');
is($tags->{models}[0]{details}{format}, 'gguf', '/api/tags: details.format');
is($tags->{models}[0]{details}{family}, 'llama', '/api/tags: details.family');
is($tags->{models}[0]{details}{quantization_level}, 'Q4_1', '/api/tags: details.quantization_level');
is($tags->{models}[0]{details}{parameter_size}, '135M', '/api/tags: details.parameter_size');
is($tags->{models}[0]{size}, -s $model, '/api/tags: size, the file\'s');
like($tags->{models}[0]{modified_at}, qr/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z\z/, '/api/tags: modified_at, RFC 3339');
like(json_of($http->get("$base/api/version"))->{version}, qr/\A\d+\.\d+\.\d+\z/, '/api/version');

# /api/chat, whole: the same text as /v1/chat/completions
my $openai = json_of(post('/v1/chat/completions', { messages => $question, temperature => 0, max_tokens => 12 }));
my $expected = $openai->{choices}[0]{message}{content};
my $r = post('/api/chat', { model => 'smollm2:135m', messages => $question, stream => JSON::PP::false, options => \%greedy });
is($r->{status}, 200, '/api/chat: 200');
like($r->{headers}{'content-type'}, qr{^application/json}, '/api/chat whole: JSON');
my $chat = json_of($r);
is($chat->{message}{role}, 'assistant', '/api/chat: message.role');
is($chat->{message}{content}, $expected, "/api/chat: the text of /v1/chat/completions ('$expected')");
is($chat->{model}, 'smollm2:135m', '/api/chat: model');
ok($chat->{done}, '/api/chat: done');
is($chat->{done_reason}, 'length', '/api/chat: done_reason length at num_predict');
is($chat->{eval_count}, 12, '/api/chat: eval_count');
is($chat->{prompt_eval_count}, $openai->{usage}{prompt_tokens}, '/api/chat: prompt_eval_count');
ok($chat->{total_duration} > 0 && $chat->{eval_duration} > 0 && $chat->{prompt_eval_duration} > 0, '/api/chat: durations (ns)');
like($chat->{created_at}, qr/\A\d{4}-\d\d-\d\dT[\d:.]+Z\z/, '/api/chat: created_at');

# /api/chat streamed (the default): NDJSON whose pieces make the same text
$r = post('/api/chat', { messages => $question, options => \%greedy });
like($r->{headers}{'content-type'}, qr{^application/x-ndjson}, '/api/chat stream: application/x-ndjson');
my @lines = lines_of($r);
ok(@lines > 2, 'several lines');
ok(!grep({ $_->{done} } @lines[ 0 .. $#lines - 1 ]), 'done is false until the last line');
is(join('', map { $_->{message}{content} } @lines), $expected, '/api/chat stream: the pieces make the same text');
is($lines[-1]{done_reason}, 'length', 'the last line: done_reason');
is($lines[-1]{eval_count}, 12, 'the last line: eval_count');

# stop, seed
$chat = json_of(post('/api/chat', { messages => $question, stream => JSON::PP::false,
    options => { temperature => 0, num_predict => 60, stop => [','] } }));
is($chat->{done_reason}, 'stop', 'options.stop: done_reason stop');
unlike($chat->{message}{content}, qr/,/, 'options.stop: not in the text');
my @seeded = map {
    json_of(post('/api/chat', { messages => $question, stream => JSON::PP::false,
        options => { temperature => 0.9, top_k => 40, top_p => 0.9, seed => 42, num_predict => 10 } }))->{message}{content}
} 1 .. 2;
is($seeded[0], $seeded[1], 'options.seed: the same text twice');

# /api/generate: the prompt through the chat template, or raw
my $gen = json_of(post('/api/generate', { prompt => 'What is the capital of France?', stream => JSON::PP::false, options => \%greedy }));
is($gen->{response}, $expected, '/api/generate: the prompt as a user message: the same text');
ok($gen->{done} && $gen->{eval_count} == 12, '/api/generate: done, eval_count');
my $raw = json_of(post('/v1/completions', { prompt => 'The capital of France is', temperature => 0, max_tokens => 6 }));
$gen = json_of(post('/api/generate', { prompt => 'The capital of France is', raw => JSON::PP::true, stream => JSON::PP::false,
    options => { temperature => 0, num_predict => 6 } }));
is($gen->{response}, $raw->{choices}[0]{text}, '/api/generate raw: the text of /v1/completions');
@lines = lines_of(post('/api/generate', { prompt => 'What is the capital of France?', options => \%greedy }));
is(join('', map { $_->{response} } @lines), $expected, '/api/generate stream: the pieces make the same text');
my $system = [ { role => 'system', content => 'Answer in one word.' }, { role => 'user', content => 'Name a colour.' } ];
$chat = json_of(post('/api/chat', { messages => $system, stream => JSON::PP::false, options => { temperature => 0, num_predict => 5 } }));
$gen = json_of(post('/api/generate', { prompt => 'Name a colour.', system => 'Answer in one word.', stream => JSON::PP::false,
    options => { temperature => 0, num_predict => 5 } }));
is($gen->{response}, $chat->{message}{content}, '/api/generate: system and prompt as the two messages of /api/chat');
is($gen->{prompt_eval_count}, $chat->{prompt_eval_count}, '/api/generate: the same prompt');

# format: "json", or a schema
$chat = json_of(post('/api/chat', { messages => [ { role => 'user', content => 'Give a city as JSON.' } ], format => 'json',
    stream => JSON::PP::false, options => { temperature => 0, num_predict => 8 } }));
like($chat->{message}{content}, qr/\A\s*[\{\[]/, "format json: JSON begins ($chat->{message}{content})");
my $schema = { type => 'object', properties => { city => { type => 'string' } }, required => ['city'] };
$chat = json_of(post('/api/chat', { messages => $question, format => $schema, stream => JSON::PP::false,
    options => { temperature => 0, num_predict => 40 } }));
my $object = eval { decode_json($chat->{message}{content}) };
ok($object && defined $object->{city}, "format schema: JSON that follows it ($chat->{message}{content})");

# errors: Ollama's {"error": "..."}, and the server still serves
my @bad = (
    [ '{"messages": [}', 400, qr/not valid JSON/, 'malformed JSON' ],
    [ { messages => $question, options => { temprature => 1 } }, 400, qr/unknown option 'temprature'/, 'an unknown option' ],
    [ { messages => $question, options => { num_predict => 'many' } }, 400, qr/'options\.num_predict' must be an integer/, 'a wrong type' ],
    [ { messages => $question, options => [1] }, 400, qr/'options' must be an object/, 'options not an object' ],
    [ { messages => $question, format => 5 }, 400, qr/'format' must be/, 'a bad format' ],
    [ { messages => $question, model => 'llama3' }, 400, qr/model 'llama3' not found/, 'another model' ],
    [ { options => \%greedy }, 400, qr/'messages' is required/, 'no messages' ],
);
for my $case (@bad) {
    my ($body, $status, $message, $name) = @$case;
    $r = post('/api/chat', $body);
    is($r->{status}, $status, "$name: $status");
    like(json_of($r)->{error}, $message, "$name: {\"error\": ...}");
}
$r = post('/api/generate', { stream => JSON::PP::false });
is($r->{status}, 400, '/api/generate without a prompt: 400');
like(json_of($r)->{error}, qr/'prompt' is required/, 'and says so');
$chat = json_of(post('/api/chat', { messages => $question, stream => JSON::PP::false, options => \%greedy }));
is($chat->{message}{content}, $expected, 'still serving, the same text');

done_testing;
