# `lugh chat` driven through a pseudo-terminal with real key presses: a turn,
# /save, a reply interrupted with Ctrl-C (the session goes on), /reset,
# /load, a message continued over two lines, and Ctrl-D to leave.
# The terminal comes from Python's pty module (python3 is needed anyway to
# fetch the test models).
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use JSON::PP ();
use lib 't/lib';
use LughTest qw(model_path);

my ($name) = grep { model_path($_) } qw(qwen2.5-coder-0.5b-q4_k_m smollm2-135m-q4_1);
plan skip_all => 'needs the Qwen or SmolLM2 test model (run: perl t/fetch-models)' unless $name;
plan skip_all => 'needs python3 for the pseudo-terminal' unless system('python3 -c "import pty" 2>/dev/null') == 0;

my $dir = tempdir(CLEANUP => 1);
my $saved = "$dir/conversation.json";
my @steps = (
    { expect => '>>> ' },
    { send => "What is the capital of France?\r" },
    { expect => "\n.*>>> ", timeout => 120 },
    { send => "/save $saved\r" },
    { expect => 'saved 2 messages.*>>> ' },
    { send => "Write a very long story about a dragon who learns to read, in many chapters.\r" },
    { expect => 'dragon.*?\n.*?\w+ \w+ \w+', timeout => 120 },    # the reply has begun
    { send => "\x03" },
    { expect => '\[interrupted\].*>>> ', timeout => 60 },
    { send => "/reset\r" },
    { expect => 'conversation reset.*>>> ' },
    { send => "/load $saved\r" },
    { expect => 'loaded 2 messages.*>>> ' },
    { send => "Answer with one word: \\\r" },
    { expect => '\.\.\. ' },
    { send => "what colour is the sky?\r" },
    { expect => "\n.*>>> ", timeout => 120 },
    { send => "\x04" },
);
open my $fh, '>', "$dir/steps.json" or die $!;
print {$fh} JSON::PP->new->encode(\@steps);
close $fh;

my @command = ($^X, '-Mblib', 'blib/script/lugh', 'chat', '--greedy', '--max-tokens', 200, '--n-ctx', 1024,
    model_path($name));
my $transcript = `python3 t/lib/LughTest/pty_drive.py $dir/steps.json -- @command 2>&1`;
note $transcript;
like($transcript, qr/EXIT 0\n\z/, 'every step seen, and Ctrl-D leaves with status 0');
like($transcript, qr/Paris/, 'the first reply');
like($transcript, qr/\[interrupted\]/, 'Ctrl-C stopped the long reply');
unlike($transcript, qr/lugh: /, 'no error message');
ok(-s $saved, '/save wrote the conversation');
my $data = JSON::PP->new->utf8->decode(do { local (@ARGV, $/) = $saved; <> });
is_deeply([ map { $_->{role} } @{ $data->{messages} } ], [qw(user assistant)], '... as JSON messages');
like($transcript, qr/Answer with one word: \\.*?\.\.\. .*?what colour/s, 'a line ending in \\ continues');

done_testing;
