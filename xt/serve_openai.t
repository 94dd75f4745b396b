# The official `openai` Python client against `lugh serve`, unchanged: chat
# (whole and streamed), completions, models, embeddings, and an error as the
# client's exception. Needs a python that can import openai: $LUGH_OPENAI_PYTHON
# (e.g. python3 -m venv /tmp/oai && /tmp/oai/bin/pip install openai), else python3.
use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use HTTP::Tiny;
use Time::HiRes qw(sleep);
use lib 't/lib';
use LughTest qw(require_model);
use Lugh;
use Lugh::Server;

plan skip_all => 'this Lugh was built without the server' unless Lugh::Server->available;
my $model = require_model('smollm2-135m-q4_1');
my $python = $ENV{LUGH_OPENAI_PYTHON} // 'python3';
plan skip_all => "$python cannot import openai (set LUGH_OPENAI_PYTHON)" if system($python, '-c', 'import openai') != 0;

my $port = do { my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1', LocalPort => 0) or die $!; $s->sockport };
my $pid = fork // die $!;
if (!$pid) {
    open STDERR, '>', '/dev/null';
    exec $^X, '-Mblib', 'blib/script/lugh', 'serve', $model, '--port', $port, '-c', 1024, '-t', 1, '--api-key', 'k',
        '--embeddings', '-a', 'smol';
    die $!;
}
END { kill 'TERM', $pid if $pid }
for (1 .. 600) { last if HTTP::Tiny->new->get("http://127.0.0.1:$port/health")->{status} == 200; sleep 0.1 }

my $script = <<'PY';
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1], api_key="k")
msgs = [{"role": "user", "content": "What is the capital of France?"}]
r = c.chat.completions.create(model="smol", messages=msgs, temperature=0, max_tokens=10)
print("chat", r.choices[0].finish_reason, r.usage.completion_tokens, repr(r.choices[0].message.content))
s = c.chat.completions.create(model="smol", messages=msgs, temperature=0, max_tokens=10, stream=True)
print("stream", repr("".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)))
t = c.completions.create(model="smol", prompt="The capital of France is", temperature=0, max_tokens=5)
print("completion", t.usage.completion_tokens)
print("models", [m.id for m in c.models.list()])
e = c.embeddings.create(model="smol", input=["a cat", "a dog"])
print("embeddings", len(e.data), len(e.data[0].embedding))
try:
    c.chat.completions.create(model="gpt-4", messages=msgs)
except openai.BadRequestError as err:
    print("error", err.status_code)
PY
my $out = `$python -c '$script' http://127.0.0.1:$port/v1 2>&1`;
diag $out;
my %line = map { /^(\w+) (.*)$/ ? ($1 => $2) : () } split /\n/, $out;
like($line{chat} // '', qr/^length 10 .+$/, 'chat: finish_reason, usage, content');
my ($content) = ($line{chat} // '') =~ /^length 10 (.*)$/;
is($line{stream}, $content, 'stream: the same text');
is($line{completion}, 5, 'completions');
is($line{models}, "['smol']", 'models.list');
is($line{embeddings}, '2 576', 'embeddings');
is($line{error}, 400, 'an unknown model: BadRequestError');
done_testing();
