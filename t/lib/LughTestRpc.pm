package LughTestRpc;
# Local ggml RPC servers for the tests: `lugh rpc-server` processes of this
# build (blib) on free loopback ports, stopped when their object goes away.
use strict;
use warnings;
use Exporter 'import';
use IO::Socket::INET;
use Time::HiRes qw(sleep);

our @EXPORT_OK = qw(rpc_built start_servers);

# Whether this Lugh was built with ggml's RPC backend.
sub rpc_built {
    require Lugh;
    return Lugh::has_rpc();
}

# $n servers (default 2, one thread each): an object whose endpoints method
# lists "127.0.0.1:PORT" and whose pids method the server processes.
sub start_servers {
    my ($n) = @_;
    my $self = bless { pids => [], endpoints => [] }, __PACKAGE__;
    for (1 .. $n // 2) {
        my $probe = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1, ReuseAddr => 1)
            or die "no free port: $!\n";
        my $port = $probe->sockport;
        close $probe;
        my $pid = fork // die "fork: $!\n";
        if (!$pid) {
            open STDOUT, '>', '/dev/null' or die $!;
            open STDERR, '>', '/dev/null' or die $!;
            exec $^X, '-Mblib', 'blib/script/lugh', 'rpc-server', '--port', $port, '--threads', 1 or die "exec: $!";
        }
        push @{ $self->{pids} }, $pid;
        push @{ $self->{endpoints} }, "127.0.0.1:$port";
        wait_for_port($port) or die "the RPC server on port $port did not start\n";
    }
    return $self;
}

# Whether something listens on the loopback port within 20 s (a connection
# that the server accepts and then sees closed, as it does every client's).
sub wait_for_port {
    my ($port) = @_;
    for (1 .. 200) {
        return 1 if IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 1);
        sleep 0.1;
    }
    return 0;
}

sub endpoints { @{ $_[0]{endpoints} } }
sub pids      { @{ $_[0]{pids} } }

sub DESTROY {
    my ($self) = @_;
    my @pids = @{ $self->{pids} } or return;
    kill 'CONT', @pids;
    kill 'KILL', @pids;
    waitpid $_, 0 for @pids;
}

1;
