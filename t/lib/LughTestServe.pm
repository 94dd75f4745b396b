package LughTestServe;
# Servers for the serve tests and benchmarks: `lugh serve` and llama-server
# started on free loopback ports, waited for, sampled (RSS) and stopped; and
# HTTP requests fired from forked clients at once. Core modules only.
use strict;
use warnings;
use Exporter 'import';
use HTTP::Tiny;
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(sleep time);

our @EXPORT_OK = qw(free_port start_lugh start_llama stop_server rss_kib post_json concurrently llama_server_path);

sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1', LocalPort => 0, ReuseAddr => 1) or die $!;
    my $p = $s->sockport;
    close $s;
    return $p;
}

# llama-server b11434: $LLAMA_SERVER, else the reference build's.
sub llama_server_path {
    my $ref = $ENV{LUGH_REF} // "$ENV{HOME}/.cache/lugh-ref";
    return $ENV{LLAMA_SERVER} // "$ref/native/bin/llama-server";
}

# Starts `@command` (it must take --port PORT at the end) with its output in
# $log; returns {base, pid, log} once /health answers 200, or dies with the
# log's tail.
sub start_command {
    my ($log, @command) = @_;
    my $port = free_port();
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDERR, '>', $log or die "$log: $!";
        open STDOUT, '>&', \*STDERR or die $!;
        exec @command, '--port', $port;
        die "exec $command[0]: $!";
    }
    my $server = { base => "http://127.0.0.1:$port", pid => $pid, log => $log };
    my $http = HTTP::Tiny->new(timeout => 5);
    for (1 .. 1200) {
        return $server if $http->get("$server->{base}/health")->{status} == 200;
        last if waitpid($pid, POSIX::WNOHANG()) == $pid;
        sleep 0.1;
    }
    kill 'KILL', $pid;
    waitpid $pid, 0;
    open my $fh, '<', $log;
    my @lines = $fh ? <$fh> : ();
    die "$command[0] did not come up:\n", @lines[ -(@lines < 20 ? @lines : 20) .. -1 ];
}

# `lugh serve MODEL @args` from this build (blib).
sub start_lugh {
    my ($model, $log, @args) = @_;
    return start_command($log, $^X, '-Mblib', 'blib/script/lugh', 'serve', $model, @args);
}

sub start_llama {
    my ($model, $log, @args) = @_;
    return start_command($log, llama_server_path(), '-m', $model, '--host', '127.0.0.1', '--no-webui', @args);
}

# SIGTERM, then the exit status (KILL after 30 s).
sub stop_server {
    my ($server) = @_;
    kill 'TERM', $server->{pid};
    for (1 .. 300) {
        return $? if waitpid($server->{pid}, POSIX::WNOHANG()) == $server->{pid};
        sleep 0.1;
    }
    kill 'KILL', $server->{pid};
    waitpid $server->{pid}, 0;
    return $?;
}

# The resident set of a process in KiB (/proc/PID/status VmRSS), or undef.
sub rss_kib {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/status" or return undef;
    while (<$fh>) { return $1 if /^VmRSS:\s+(\d+)\s+kB/ }
    return undef;
}

# POSTs a JSON body (a reference, or a string sent as it is); the response.
sub post_json {
    my ($base, $path, $body, %opt) = @_;
    my $http = HTTP::Tiny->new(timeout => $opt{timeout} // 600);
    my $content = ref $body ? encode_json($body) : $body;
    return $http->post("$base$path", { headers => { 'Content-Type' => 'application/json' }, content => $content });
}

# Runs each code reference in a process of its own, all at once; each
# returns a JSON-able value, and the list of them (in order) comes back with
# the wall time from the first start to the last end. A hash first, {tick =>
# CODE}, has CODE called about once a second while they run.
sub concurrently {
    my (@jobs) = @_;
    my $opt = ref $jobs[0] eq 'HASH' ? shift @jobs : {};
    my $dir = File::Temp::tempdir(CLEANUP => 1);
    my $t0 = time;
    my @pids;
    for my $i (0 .. $#jobs) {
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            my $result = eval { $jobs[$i]->() } // { error => "$@" };
            open my $fh, '>', "$dir/$i" or POSIX::_exit(1);
            print $fh encode_json($result);
            close $fh;
            POSIX::_exit(0);
        }
        push @pids, $pid;
    }
    my %running = map { $_ => 1 } @pids;
    my $next_tick = time;
    while (%running) {
        # each by its pid: a server started here is a child too
        delete $running{$_} for grep { waitpid($_, POSIX::WNOHANG()) == $_ } keys %running;
        if ($opt->{tick} && time >= $next_tick) { $opt->{tick}->(); $next_tick = time + 1 }
        sleep 0.05;
    }
    my $wall = time - $t0;
    my @results = map {
        open my $fh, '<', "$dir/$_";
        $fh ? decode_json(do { local $/; <$fh> }) : { error => "client $_ left no result" };
    } 0 .. $#jobs;
    return ($wall, @results);
}

require File::Temp;

1;
