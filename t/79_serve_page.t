# The chat page of lugh serve in a real browser: headless Chromium, driven
# through chromedriver's WebDriver HTTP API (HTTP::Tiny and JSON::PP), opens
# /, types a message, sends it, and watches the reply stream into the page:
# the assistant's bubble grows over several looks before the reply is
# complete, and a second message continues the conversation. Skips without
# Chromium and chromedriver (Debian: apt-get install chromium
# chromium-driver) or without SmolLM2.
use strict;
use warnings;
use Test::More;
use HTTP::Tiny;
use JSON::PP;
use File::Temp qw(tempdir);
use POSIX ();
use Time::HiRes qw(sleep time);
use lib 't/lib';
use LughTest qw(require_model);
use LughTestServe qw(free_port);
use Lugh;
use Lugh::Server;

plan skip_all => 'this Lugh was built without the server (LUGH_SERVER=0)' unless Lugh::Server->available;
my $chromium = $ENV{LUGH_CHROMIUM} // '/usr/bin/chromium';
my $chromedriver = $ENV{LUGH_CHROMEDRIVER} // '/usr/bin/chromedriver';
plan skip_all => "no Chromium at $chromium (apt-get install chromium chromium-driver)" unless -x $chromium;
plan skip_all => "no chromedriver at $chromedriver (apt-get install chromium-driver)" unless -x $chromedriver;
my $model = require_model('smollm2-135m-q4_1');

my $dir = tempdir(CLEANUP => 1);
my @children;
END { local $?; for my $pid (grep { kill 0, $_ } @children) { kill 'KILL', $pid; waitpid $pid, 0 } }

# Runs a program in the background, its output in $log.
sub start {
    my ($log, @command) = @_;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $log or die $!;
        open STDERR, '>&', \*STDOUT or die $!;
        exec @command or POSIX::_exit(127);
    }
    push @children, $pid;
    return $pid;
}
sub slurp { open my $fh, '<', $_[0] or return ''; local $/; return <$fh> }
my $http = HTTP::Tiny->new(timeout => 120);

# Waits until GET $url answers 200; false when $pid died first or time ran out.
sub wait_for {
    my ($url, $pid, $seconds) = @_;
    my $until = time + $seconds;
    while (time < $until) {
        return 1 if $http->get($url)->{status} == 200;
        return 0 if waitpid($pid, POSIX::WNOHANG()) == $pid;
        sleep 0.1;
    }
    return 0;
}

my $port = free_port();
my $base = "http://127.0.0.1:$port";
my $server = start("$dir/serve.log", $^X, '-Mblib', 'blib/script/lugh', 'serve', $model, '--port', $port, '-c', 512,
    '-np', 1, '-t', 2);
ok(wait_for("$base/health", $server, 60), 'lugh serve answers') or do { diag(slurp("$dir/serve.log")); done_testing; exit };

my $driver_port = free_port();
my $driver_url = "http://127.0.0.1:$driver_port";
my $driver = start("$dir/chromedriver.log", $chromedriver, "--port=$driver_port");
ok(wait_for("$driver_url/status", $driver, 30), 'chromedriver answers')
    or do { diag(slurp("$dir/chromedriver.log")); done_testing; exit };

# One WebDriver command: its value, or a test failure naming the error.
sub webdriver {
    my ($method, $path, $body) = @_;
    my $r = $http->request($method, "$driver_url$path", {
        headers => { 'Content-Type' => 'application/json' },
        defined $body ? (content => encode_json($body)) : (),
    });
    my $answer = eval { decode_json($r->{content}) } // {};
    my $value = $answer->{value};
    if ($r->{status} != 200) {
        my $error = ref $value eq 'HASH' ? "$value->{error}: $value->{message}" : $r->{content};
        die "WebDriver $method $path: $r->{status} $error\n";
    }
    return $value;
}

my @flags = ('--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage',
    "--user-data-dir=$dir/profile");
my $session = eval {
    webdriver(POST => '/session', { capabilities => { alwaysMatch => {
        browserName => 'chrome', 'goog:chromeOptions' => { binary => $chromium, args => \@flags } } } })->{sessionId};
};
ok($session, 'a browser session') or do { diag($@, slurp("$dir/chromedriver.log")); done_testing; exit };
END { eval { webdriver(DELETE => "/session/$session") } if $session }

# the W3C WebDriver key of an element reference
my $ELEMENT = 'element-6066-11e4-a52e-4f735466cecf';
sub element {
    my ($css) = @_;
    my $found = webdriver(POST => "/session/$session/element", { using => "css selector", value => $css });
    return $found->{$ELEMENT} // die "no element id in the answer for $css: " . encode_json($found) . "\n";
}
sub js { my ($script) = @_; return webdriver(POST => "/session/$session/execute/sync", { script => $script, args => [] }) }

webdriver(POST => "/session/$session/url", { url => "$base/" });
is(webdriver(GET => "/session/$session/title"), 'Lugh chat', 'the page opens: its title');

# Sends $text through the form and watches the last assistant bubble: the
# texts seen while it streamed, and the reply once the conversation has it.
sub converse {
    my ($text, $turns) = @_;
    my $input = element('#input');
    webdriver(POST => "/session/$session/element/$input/value", { text => $text });
    webdriver(POST => "/session/$session/element/" . element('#send') . '/click', {});
    my (%seen, @growth);
    my $until = time + 180;
    while (time < $until) {
        my $state = js(q{
            const bubbles = document.querySelectorAll('#log .msg');
            const last = bubbles[bubbles.length - 1];
            return { n: messages.length, text: last ? last.textContent : '', kind: last ? last.className : '' };
        });
        push @growth, $state->{text} if length $state->{text} && !$seen{ $state->{text} }++;
        return ($state, \@growth) if $state->{n} >= $turns || $state->{kind} =~ /error/;
        sleep 0.05;
    }
    return ({ text => 'timed out' }, \@growth);
}

my ($state, $growth) = converse('Hi!', 2);
is($state->{kind}, 'msg assistant', 'the reply is an assistant bubble, not an error') or diag($state->{text});
my $WAITING = "\x{2026}";    # what the bubble shows before the first token
ok(length($state->{text}) > 0 && $state->{text} ne $WAITING, "a reply: '$state->{text}'");
my @partial = grep { $_ ne $WAITING && $_ ne $state->{text} } @$growth;
cmp_ok(scalar @partial, '>=', 2, 'it streamed: the bubble showed ' . scalar(@partial) . ' shorter texts first');
my @not_prefix = grep { index($state->{text}, $_) != 0 } @partial;
ok(!@not_prefix, 'each a beginning of the reply') or diag(explain(\@not_prefix));
is(js(q{return document.querySelectorAll('#log .msg.user').length}), 1, 'one user bubble');
is(js(q{return document.getElementById('input').value}), '', 'the input is emptied');

($state) = converse('Thanks!', 4);
SKIP: {
    # the page asks for no max_tokens: a first reply that filled the slot leaves no room for a second turn
    skip "the first reply filled the context: $state->{text}", 2 if $state->{text} =~ /exceeds the available context size/;
    is($state->{kind}, 'msg assistant', 'a second message: a second reply') or diag($state->{text});
    is(js(q{return messages.map(m => m.role).join(',')}), 'user,assistant,user,assistant', 'the conversation is kept');
}

webdriver(DELETE => "/session/$session");
undef $session;
done_testing;
