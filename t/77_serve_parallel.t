# lugh serve with -np 4 (issue #38): 8 clients streaming at once, their
# requests batched into the 4 slots; every stream must equal its prompt's
# solo answer (none crossed), and a client that disconnects mid-stream must
# not disturb the others. Then the same under --deterministic, and there
# also with ~110-token prompts sent with cache_prompt after other requests
# filled the slots' caches with their common prefix: each must still equal
# its solo, uncached answer.
use strict;
use warnings;
use Test::More;
use HTTP::Tiny;
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use File::Temp qw(tempdir);
use Time::HiRes qw(sleep);
use lib 't/lib';
use LughTest qw(require_model);
use LughTestServe qw(free_port);
use Lugh;
use Lugh::Server;

plan skip_all => 'this Lugh was built without the server (LUGH_SERVER=0)' unless Lugh::Server->available;
my $model = require_model('smollm2-135m-q4_1');
my $dir = tempdir(CLEANUP => 1);

my @PROMPTS = map { "Tell me about $_ in one sentence." }
    ('the sea', 'mountains', 'a small village', 'the moon', 'bread', 'rivers', 'winter', 'old books');

# A server on a free loopback port; returns its base URL and pid.
sub start_server {
    my (@extra) = @_;
    my $port = free_port();
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDERR, '>', "$dir/server-$port.log" or die $!;
        open STDOUT, '>&', \*STDERR or die $!;
        exec $^X, '-Mblib', 'blib/script/lugh', 'serve', $model, '--port', $port, '-c', 2048, '-np', 4, '-t', 2,
            @extra;
        die "exec: $!";
    }
    my $base = "http://127.0.0.1:$port";
    for (1 .. 600) {
        last if HTTP::Tiny->new(timeout => 5)->get("$base/health")->{status} == 200;
        last if waitpid($pid, POSIX::WNOHANG()) == $pid;
        sleep 0.1;
    }
    return ($base, $pid);
}

# ~90 tokens that the long prompts share.
my $PREFIX = 'The history of the printing press begins with movable type in East Asia and continues with '
    . 'Gutenberg in Mainz around 1450, whose press spread across Europe within decades, changing how books, '
    . 'pamphlets and newspapers were made, sold and read, and how ideas travelled between cities and '
    . 'universities. With that in mind, ';
my @LONG = map { "${PREFIX}tell me about $_ in one sentence." }
    ('the sea', 'mountains', 'a small village', 'the moon', 'bread', 'rivers', 'winter', 'old books');

sub request_body {
    my ($prompt, $stream, $cache) = @_;
    return encode_json({ messages => [ { role => 'user', content => $prompt } ], max_tokens => 16,
        temperature => 0, stream => $stream ? JSON::PP::true : JSON::PP::false,
        cache_prompt => $cache ? JSON::PP::true : JSON::PP::false });
}

# The text of a streamed reply (the deltas of its server-sent events).
sub streamed_text {
    my ($body) = @_;
    my $text = '';
    for my $line (split /\n/, $body) {
        next unless $line =~ /\Adata: (\{.*)\z/;
        my $chunk = eval { decode_json($1) } or next;
        $text .= $chunk->{choices}[0]{delta}{content} // '';
    }
    return $text;
}

# A request alone and uncached (or with cache_prompt, $cache): its text (and
# in list context its prompt's length).
sub solo {
    my ($base, $prompt, $cache) = @_;
    my $r = HTTP::Tiny->new(timeout => 300)->post("$base/v1/chat/completions",
        { headers => { 'Content-Type' => 'application/json' }, content => request_body($prompt, 0, $cache) });
    return "HTTP $r->{status}" unless $r->{status} == 200;
    my $body = decode_json($r->{content});
    return wantarray ? ($body->{choices}[0]{message}{content}, $body->{usage}{prompt_tokens})
        : $body->{choices}[0]{message}{content};
}

# Every prompt streamed by its own client at once (forked), plus one client
# that reads a little of a stream and leaves; the texts by prompt.
sub all_at_once {
    my ($base, $prompts, $cache) = @_;
    my @pids;
    for my $i (0 .. $#$prompts) {
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            my $r = HTTP::Tiny->new(timeout => 300)->post("$base/v1/chat/completions",
                { headers => { 'Content-Type' => 'application/json' },
                  content => request_body($prompts->[$i], 1, $cache) });
            open my $fh, '>', "$dir/stream-$i" or POSIX::_exit(1);
            print $fh $r->{status} == 200 ? streamed_text($r->{content}) : "HTTP $r->{status}";
            close $fh;
            POSIX::_exit(0);
        }
        push @pids, $pid;
    }
    my $leaver = fork // die "fork: $!";
    if (!$leaver) {
        my ($host, $port) = $base =~ m{//([^:]+):(\d+)};
        my $sock = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port) or POSIX::_exit(1);
        my $body = request_body('Count slowly from one to fifty.', 1);
        print $sock "POST /v1/chat/completions HTTP/1.1\r\nHost: $host\r\nContent-Type: application/json\r\n"
            . 'Content-Length: ' . length($body) . "\r\n\r\n$body";
        my $got = '';
        while (length $got < 400) { my $n = sysread($sock, my $buf, 100) or last; $got .= $buf }
        close $sock;
        POSIX::_exit(0);
    }
    waitpid $_, 0 for @pids, $leaver;
    return map { open my $fh, '<', "$dir/stream-$_" or return ''; local $/; scalar <$fh> } 0 .. $#$prompts;
}

for my $mode ([], ['--deterministic']) {
    my $name = @$mode ? 'deterministic' : 'batched';
    my ($base, $pid) = start_server(@$mode);
    subtest "$name: 8 streams at once over 4 slots, each its prompt's solo answer" => sub {
        my @solo = map { scalar solo($base, $_) } @PROMPTS;
        ok((grep { length && !/\AHTTP / } @solo) == @PROMPTS, 'every solo request answered');
        my @together = all_at_once($base, \@PROMPTS);
        for my $i (0 .. $#PROMPTS) {
            is($together[$i], $solo[$i], "stream $i: '$PROMPTS[$i]' as alone");
        }
        is(HTTP::Tiny->new->get("$base/health")->{status}, 200, 'the server is alive after the client that left');
    };
    subtest "$name: 8 streams of ~110-token prompts after the caches were filled, each its solo uncached answer" => sub {
        my (@solo, @lengths);
        for my $p (@LONG) {
            my ($text, $n) = solo($base, $p);
            push @solo, $text;
            push @lengths, $n // 0;
        }
        ok((grep { $_ >= 100 && $_ <= 130 } @lengths) == @LONG, "the prompts are ~110 tokens (@lengths)");
        # other requests with the same prefix fill every slot's cache
        my @fill = all_at_once($base, [ map { "${PREFIX}what came before $_?" } qw(paper ink books scrolls) ], 1);
        ok((grep { length && !/\AHTTP / } @fill) == 4, 'the requests that fill the caches answered');
        my @together = all_at_once($base, \@LONG, 1);
        for my $i (0 .. $#LONG) {
            is($together[$i], $solo[$i], "long prompt $i, cache_prompt on, as alone and uncached");
        }
    } if @$mode;
    kill 'TERM', $pid;
    waitpid $pid, 0;
    is($? >> 8, 0, "$name: SIGTERM ends the server cleanly");
}

done_testing;
