# Models of the Hugging Face Hub by name (hf.co/ORG/REPO[:QUANT]) through
# Lugh::ModelStore, against a Hub served on 127.0.0.1 by the test
# (t/lib/LughTest/FakeIndex.pm, pointed at with HF_ENDPOINT): the file lists
# are recorded Hub answers (t/data/hf/*.json: GET
# /api/models/ORG/REPO/tree/main?recursive=true, as the Hub gives them), the
# files small GGUF headers made here (their sha256 are the lists' lfs.oid;
# LUGH_WRITE_HF_FIXTURES=1 writes the lists again after a change to them).
# Covers the quantization chosen (given, case apart, the default, none
# that fits), a model split in parts, a download resumed after a lost
# connection, a sha256 mismatch, a missing repository (404), a gated one
# (401 without a token, HF_TOKEN sent as a Bearer token), resolve and
# Lugh::Model->new by Hub name, and `lugh pull`. Needs no network.
use strict;
use warnings;
use Test::More;
use File::Path qw(make_path);
use Digest::SHA qw(sha256_hex sha1_hex);
use JSON::PP ();
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::GGUF qw(gguf_bytes);
use LughTest::TinyModel qw(tiny_model_split);
use LughTest::FakeIndex;
use Lugh;

my ($dir, $models, $tiny_path, $tiny) = LughTest::FakeIndex::model_store();
my $hub = LughTest::FakeIndex->new("$dir/hub");
local $ENV{HF_ENDPOINT} = $hub->url . '/';
delete local $ENV{MODEL_ENDPOINT};
delete local $ENV{HF_TOKEN};

# A small GGUF file (a header, no tensors) named after its quantization;
# $split is [index (from 1), count] for a part of a split model.
sub hub_gguf {
    my ($name, $split) = @_;
    my @kv = ('general.architecture' => [ string => 'llama' ], 'general.name' => [ string => $name ],
        'general.description' => [ string => "a test file of t/19_hf_pull.t\n" x 80 ]);
    push @kv, 'split.no' => [ u16 => $split->[0] - 1 ], 'split.count' => [ u16 => $split->[1] ],
        'split.tensors.count' => [ i32 => 0 ] if $split;
    return gguf_bytes(kv => \@kv);
}

my $GITATTRIBUTES = "*.gguf filter=lfs diff=lfs merge=lfs -text\n";
my $README = "---\nlicense: apache-2.0\n---\n# Test GGUF files\n";
my %REPOS = (
    'lugh-test/Tiny-GGUF' => [
        'Tiny-Q4_K_M.gguf' => hub_gguf('Tiny-Q4_K_M'),
        'Tiny-Q8_0.gguf'   => hub_gguf('Tiny-Q8_0'),
        'Tiny-F16.gguf'    => hub_gguf('Tiny-F16'),
        'mmproj-Tiny-F16.gguf' => hub_gguf('mmproj-Tiny-F16'),
    ],
    'lugh-test/Split-GGUF' => [
        (map { sprintf('Split-Q4_K_M-%05d-of-00003.gguf', $_) => hub_gguf("Split-Q4_K_M part $_", [ $_, 3 ]) } 1 .. 3),
        'Split-Q8_0.gguf' => hub_gguf('Split-Q8_0'),
    ],
    'lugh-test/NoDefault-GGUF' => [ 'NoDefault-IQ4_XS.gguf' => hub_gguf('NoDefault-IQ4_XS') ],
    'lugh-test/Broken-GGUF' => [ 'Broken-Q4_K_M.gguf' => hub_gguf('Broken-Q4_K_M') ],
    'lugh-test/Gated-GGUF'  => [ 'Gated-Q4_K_M.gguf'  => hub_gguf('Gated-Q4_K_M') ],
);
# the Broken list's sha256 is not its file's
my %WRONG_SHA = ('lugh-test/Broken-GGUF' => 'ab' x 32);

# The list of a repository as the Hub gives it: .gitattributes and
# README.md in git (oid: the blob's sha1), the GGUF files in LFS.
sub tree_json {
    my ($repo) = @_;
    my @entries;
    my $git = sub {
        my ($path, $bytes) = @_;
        push @entries, { type => 'file', oid => sha1_hex('blob ' . length($bytes) . "\0" . $bytes),
            size => length $bytes, path => $path };
    };
    $git->('.gitattributes', $GITATTRIBUTES);
    $git->('README.md', $README);
    my @files = @{ $REPOS{$repo} };
    while (my ($path, $bytes) = splice @files, 0, 2) {
        my $pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" . sha256_hex($bytes)
            . "\nsize " . length($bytes) . "\n";
        push @entries, { type => 'file', oid => sha1_hex('blob ' . length($pointer) . "\0" . $pointer),
            size => length $bytes,
            lfs => { oid => $WRONG_SHA{$repo} // sha256_hex($bytes), size => length $bytes,
                pointerSize => length $pointer },
            path => $path };
    }
    return JSON::PP->new->canonical->pretty->encode(\@entries);
}

sub fixture_file { my ($repo) = @_; (my $name = $repo) =~ s{/}{--}; return "t/data/hf/$name.json" }

for my $repo (sort keys %REPOS) {
    my $file = fixture_file($repo);
    if ($ENV{LUGH_WRITE_HF_FIXTURES}) {
        make_path('t/data/hf');
        open my $fh, '>:raw', $file or die "$file: $!";
        print {$fh} tree_json($repo);
        close $fh;
    }
    my $json = do { open my $fh, '<:raw', $file or die "$file: $! (LUGH_WRITE_HF_FIXTURES=1 writes it)"; local $/; <$fh> };
    is($json, tree_json($repo), "$file is the list of the files served (LUGH_WRITE_HF_FIXTURES=1 writes it)");
    my %files = (@{ $REPOS{$repo} }, '.gitattributes' => $GITATTRIBUTES, 'README.md' => $README);
    $hub->add_hub_repo($repo, $json, \%files, $repo =~ /Gated/ ? (token => 'hf_secret') : ());
}
# the Gated list is public (a gated repository's is), its files are not
for my $path ('api/models/lugh-test/Gated-GGUF/tree/main') { unlink $hub->root . "/$path.token" or die $! }

sub requests_of { my ($code) = @_; $hub->clear_requests; $code->(); return [ $hub->requests ] }
sub bytes_of { my ($path) = @_; open my $fh, '<:raw', $path or return undef; local $/; return <$fh> }
my %BYTES = map { %{ { @{ $REPOS{$_} } } } } keys %REPOS;
my $repo_dir = "$models/hf.co";

subtest 'names' => sub {
    ok(Lugh::ModelStore::Hub::_is_hub_name($_), "$_ is a Hub name")
        for qw(hf.co/a/b hf.co/a/b:Q4_K_M huggingface.co/a/b https://hf.co/a/b HF.CO/a/b);
    ok(!Lugh::ModelStore::Hub::_is_hub_name($_), "$_ is not") for qw(smollm2-135m-q4_1 hf.com/a/b ./hf.co/a/b);
    is_deeply([ Lugh::ModelStore::Hub::_parse('hf.co/Org/Repo-GGUF:q8_0') ], [qw(Org Repo-GGUF q8_0)], 'parsed');
    is_deeply([ Lugh::ModelStore::Hub::_parse('hf.co/Org/Repo:latest') ], [ 'Org', 'Repo', undef ], ':latest is the default');
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/onlyone') }, qr/\ALugh::ModelStore::pull: 'hf\.co\/onlyone' is not a Hugging Face model name/,
        'no repository');
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/a/../b') }, qr/pull: 'hf\.co\/a\/\.\.\/b' is not a Hugging Face model name/,
        'no ..');
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/a/..') }, qr/the repository '\.\.' is not a Hub name/, 'not .. as a name');
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/a/b:Q4 K') }, qr/the quantization 'Q4 K' is not a name/, 'a bad quantization');
    local $ENV{HF_ENDPOINT} = 'ftp://example.com';
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/a/b') }, qr/HF_ENDPOINT must be an http:\/\/ or https:\/\/ URL/, 'a bad endpoint');
};

subtest 'the default quantization: Q4_K_M' => sub {
    my @events;
    my $path;
    my $requests = requests_of(sub {
        $path = Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF', progress => sub { push @events, $_[0] });
    });
    is($path, "$repo_dir/lugh-test/Tiny-GGUF/Tiny-Q4_K_M.gguf", 'the Q4_K_M file, in the model directory');
    is(bytes_of($path), $BYTES{'Tiny-Q4_K_M.gguf'}, 'its bytes');
    is_deeply([ map { $_->{path} } @$requests ],
        [ '/api/models/lugh-test/Tiny-GGUF/tree/main', '/lugh-test/Tiny-GGUF/resolve/main/Tiny-Q4_K_M.gguf' ],
        'the file list, then the one file');
    ok(!$requests->[0]{authorization}, 'no Authorization without HF_TOKEN');
    is($events[-1]{phase}, 'done', 'progress ends with done');
    is($events[-1]{name}, 'hf.co/lugh-test/Tiny-GGUF', 'named after the model');
    ok(!-e "$models/.partial", 'no work directory left');
    $requests = requests_of(sub { is(Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF', progress => 0), $path, 'again') });
    is(scalar @$requests, 1, 'a second pull asks for the list only (the file is checked here)');
    $requests = requests_of(sub {
        is(Lugh::ModelStore::resolve('hf.co/lugh-test/Tiny-GGUF', download => 0), $path, 'resolve');
        is(Lugh::ModelStore::resolve('huggingface.co/lugh-test/Tiny-GGUF:latest'), $path, 'huggingface.co, :latest');
    });
    is(scalar @$requests, 0, 'resolve of a pulled model needs no network');
    my ($listed) = grep { $_->{name} eq 'hf.co/lugh-test/Tiny-GGUF' } Lugh::ModelStore::list();
    ok($listed && $listed->{present}, 'list shows it');
    is($listed->{origin}, 'hf.co', 'from hf.co');
    is($listed->{size}, length $BYTES{'Tiny-Q4_K_M.gguf'}, 'its size');
};

subtest 'a quantization by name, case apart' => sub {
    my $path = Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF:q8_0', progress => 0);
    is($path, "$repo_dir/lugh-test/Tiny-GGUF/Tiny-Q8_0.gguf", ':q8_0 picks Tiny-Q8_0.gguf');
    is(bytes_of($path), $BYTES{'Tiny-Q8_0.gguf'}, 'its bytes');
    is(Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF:F16', progress => 0), "$repo_dir/lugh-test/Tiny-GGUF/Tiny-F16.gguf",
        ':F16 picks the model, not the mmproj file');
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF:Q5_K_S', progress => 0) },
        qr/\ALugh::ModelStore::pull: lugh-test\/Tiny-GGUF has no GGUF file for the quantization 'Q5_K_S' \(it has: Q4_K_M, Q8_0, F16\)/,
        'no file for a quantization lists those there');
    croaks_like(sub { Lugh::ModelStore::resolve('hf.co/lugh-test/Tiny-GGUF:Q5_K_S', download => 0) },
        qr/resolve: model 'hf\.co\/lugh-test\/Tiny-GGUF:Q5_K_S' is not downloaded yet \(run: lugh pull hf\.co\/lugh-test\/Tiny-GGUF:Q5_K_S\)/,
        'download => 0 says to pull');
    is(Lugh::ModelStore::pull('hf.co/lugh-test/NoDefault-GGUF', progress => 0),
        "$repo_dir/lugh-test/NoDefault-GGUF/NoDefault-IQ4_XS.gguf", 'neither Q4_K_M nor Q8_0: the first model file');
};

subtest 'a model split in parts' => sub {
    my $path;
    my $requests = requests_of(sub { $path = Lugh::ModelStore::pull('hf.co/lugh-test/Split-GGUF', progress => 0) });
    my $base = "$repo_dir/lugh-test/Split-GGUF";
    is($path, "$base/Split-Q4_K_M-00001-of-00003.gguf", 'the path of the first part');
    for my $i (1 .. 3) {
        my $name = sprintf 'Split-Q4_K_M-%05d-of-00003.gguf', $i;
        is(bytes_of("$base/$name"), $BYTES{$name}, "part $i is here");
    }
    is(scalar(grep { m{/resolve/} } map { $_->{path} } @$requests), 3, 'three downloads');
    is(Lugh::ModelStore::pull('hf.co/lugh-test/Split-GGUF:Q8_0', progress => 0), "$base/Split-Q8_0.gguf",
        ':Q8_0 picks the file in one piece');
    unlink "$base/Split-Q4_K_M-00002-of-00003.gguf";
    $requests = requests_of(sub { is(Lugh::ModelStore::resolve('hf.co/lugh-test/Split-GGUF'), $path, 'a part missing: resolve pulls') });
    is_deeply([ grep { m{/resolve/} } map { $_->{path} } @$requests ],
        ['/lugh-test/Split-GGUF/resolve/main/Split-Q4_K_M-00002-of-00003.gguf'], 'the missing part only');
};

subtest 'a lost connection, then a resumed download' => sub {
    my $name = 'Tiny-Q4_K_M.gguf';
    my $served = $hub->root . "/lugh-test/Tiny-GGUF/resolve/main/$name";
    my $half = int(length($BYTES{$name}) / 2);
    { open my $fh, '>', "$served.cut" or die $!; print {$fh} $half; close $fh }
    unlink "$repo_dir/lugh-test/Tiny-GGUF/$name";
    my $error;
    my $requests = requests_of(sub { eval { Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF', progress => 0) }; $error = $@ });
    like($error, qr/\ALugh::ModelStore::pull: .*kept: pull again to resume/, 'the lost connection croaks, keeping the bytes');
    my $part = "$models/.partial/hf.co--lugh-test--Tiny-GGUF/$name.part";
    is(-s $part, $half, 'the partial file holds the half served');
    unlink "$served.cut";
    my @notes;
    $requests = requests_of(sub {
        Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF', progress => sub { push @notes, $_[0]{message} if $_[0]{phase} eq 'note' });
    });
    my ($download) = grep { m{/resolve/} } map { $_->{path} } @$requests;
    my ($asked) = grep { $_->{path} =~ m{/resolve/} } @$requests;
    is($asked->{range}, $half, 'the second pull asks for the rest only (Range)');
    is($asked->{status}, 206, 'and gets it');
    like("@notes", qr/resuming \Q$name\E at/, 'a note says so');
    is(bytes_of("$repo_dir/lugh-test/Tiny-GGUF/$name"), $BYTES{$name}, 'the whole file');
    ok(!-e "$models/.partial", 'no work directory left');
};

subtest 'a sha256 mismatch' => sub {
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Broken-GGUF', progress => 0) },
        qr/\ALugh::ModelStore::pull: lugh-test\/Broken-GGUF: Broken-Q4_K_M\.gguf: sha256 mismatch: got [0-9a-f]{64}, expected (?:ab){32}/,
        'croaks with both sums');
    ok(!-e "$repo_dir/lugh-test/Broken-GGUF/Broken-Q4_K_M.gguf", 'nothing is moved into place');
    ok(!-e "$models/.partial", 'the bad download is deleted');
};

subtest 'no such repository' => sub {
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Nope-GGUF', progress => 0) },
        qr/\ALugh::ModelStore::pull: no repository lugh-test\/Nope-GGUF on 127\.0\.0\.1:\d+ \(404: Repository not found\)/,
        '404 names the repository');
    croaks_like(sub { Lugh::Model->new(model => 'hf.co/lugh-test/Nope-GGUF') },
        qr/\ALugh::Model->new: no repository lugh-test\/Nope-GGUF/, 'Lugh::Model->new says the same');
};

subtest 'a gated repository and HF_TOKEN' => sub {
    my $requests = requests_of(sub {
        croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Gated-GGUF', progress => 0) },
            qr/\ALugh::ModelStore::pull: the Hub refuses Gated-Q4_K_M\.gguf of lugh-test\/Gated-GGUF \(401\): it is gated or private: set HF_TOKEN/,
            'without a token: 401, saying to set HF_TOKEN');
    });
    ok(!-e "$models/.partial", 'nothing kept');
    {
        local $ENV{HF_TOKEN} = 'hf_wrong';
        croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Gated-GGUF', progress => 0) },
            qr/the Hub refuses Gated-Q4_K_M\.gguf of lugh-test\/Gated-GGUF \(401\): the token in HF_TOKEN may not read it/,
            'a wrong token');
        local $ENV{HF_TOKEN} = "hf_a\nX-Injected: 1";
        croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Gated-GGUF', progress => 0) },
            qr/HF_TOKEN holds spaces or control characters/, 'a token with a line break');
    }
    local $ENV{HF_TOKEN} = 'hf_secret';
    my $path;
    $requests = requests_of(sub { $path = Lugh::ModelStore::pull('hf.co/lugh-test/Gated-GGUF', progress => 0) });
    is(bytes_of($path), $BYTES{'Gated-Q4_K_M.gguf'}, 'with the token: the file');
    is(scalar(grep { $_->{authorization} } @$requests), 2, 'both requests carried the token');
    ok(!-e "$models/.partial", 'the header file is gone with the work directory');
    # a private repository's list needs the token too
    my $list = $hub->root . '/api/models/lugh-test/Gated-GGUF/tree/main';
    { open my $fh, '>', "$list.token" or die $!; print {$fh} "hf_secret\n"; close $fh }
    delete local $ENV{HF_TOKEN};
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Gated-GGUF', progress => 0) },
        qr/pull: lugh-test\/Gated-GGUF is private, gated or does not exist: the Hub wants a token \(set HF_TOKEN; 401: Invalid credentials/,
        'a private list without a token: 401');
    unlink "$list.token";
};

subtest 'no network' => sub {
    my $closed = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1) or die;
    my $port = $closed->sockport;
    close $closed;
    local $ENV{HF_ENDPOINT} = "http://127.0.0.1:$port";
    croaks_like(sub { Lugh::ModelStore::pull('hf.co/lugh-test/Tiny-GGUF:Q8_0', progress => 0) },
        qr/\ALugh::ModelStore::pull: cannot connect to 127\.0\.0\.1 \(no network\?\)/, 'says it cannot connect');
};

subtest 'Lugh::Model->new and lugh pull by Hub name' => sub {
    # a model that loads: the tiny model of t/lib, listed as the Hub would
    my $sha = sha256_hex($tiny);
    my $tree = JSON::PP->new->canonical->encode([ { type => 'file', oid => '0' x 40, size => length $tiny,
        lfs => { oid => $sha, size => length $tiny, pointerSize => 134 }, path => 'tiny-Q8_0.gguf' } ]);
    $hub->add_hub_repo('lugh-test/TinyModel-GGUF', $tree, { 'tiny-Q8_0.gguf' => $tiny });
    croaks_like(sub { Lugh::Model->new(model => 'hf.co/lugh-test/TinyModel-GGUF', download => 0) },
        qr/\ALugh::Model->new: model 'hf\.co\/lugh-test\/TinyModel-GGUF' is not downloaded yet/, 'download => 0');
    my $model = Lugh::Model->new(model => 'hf.co/lugh-test/TinyModel-GGUF');
    ok($model->n_params > 0, 'pulled and loaded');
    my $out = `$^X -Mblib bin/lugh pull --quiet hf.co/lugh-test/Tiny-GGUF:Q8_0 2>&1`;
    is($?, 0, 'lugh pull: status 0');
    like($out, qr{\Ahf\.co/lugh-test/Tiny-GGUF:Q8_0: \Q$repo_dir\E/lugh-test/Tiny-GGUF/Tiny-Q8_0\.gguf \([\d.]+ MB\)\n\z}, 'prints the path');
    $out = `$^X -Mblib bin/lugh info hf.co/lugh-test/TinyModel-GGUF 2>&1`;
    is($?, 0, 'lugh info by Hub name: status 0');
    like($out, qr/llama/, 'it describes the model pulled');
    $out = `$^X -Mblib bin/lugh pull --quiet hf.co/lugh-test/Tiny-GGUF:Q2_K 2>&1`;
    is($? >> 8, 1, 'a quantization not there: status 1');
    like($out, qr/\Alugh: lugh-test\/Tiny-GGUF has no GGUF file for the quantization 'Q2_K' \(it has: Q4_K_M, Q8_0, F16\)\n\z/,
        'the message');
};

subtest 'a split model from the Hub loads' => sub {
    my %parts = tiny_model_split('tiny-Q8_0', 3);
    my @names = sort keys %parts;
    my $tree = JSON::PP->new->canonical->encode([ map { { type => 'file', oid => '0' x 40, size => length $parts{$_},
        lfs => { oid => sha256_hex($parts{$_}), size => length $parts{$_}, pointerSize => 134 }, path => $_ } } @names ]);
    $hub->add_hub_repo('lugh-test/TinySplit-GGUF', $tree, \%parts);
    my $path = Lugh::ModelStore::pull('hf.co/lugh-test/TinySplit-GGUF:Q8_0', progress => 0);
    like($path, qr/tiny-Q8_0-00001-of-00003\.gguf\z/, 'the first part');
    my ($tokens) = ([ 1, 5, 9, 3, 7 ]);
    for my $mmap (1, 0) {
        my $split = Lugh::Model->new(model => $path, use_mmap => $mmap);
        my $whole = Lugh::Model->new(model => $tiny_path, use_mmap => $mmap);
        is($split->n_tensors, $whole->n_tensors, "use_mmap $mmap: the tensors of all three parts");
        my @logits = map { [ Lugh::Inference->new(model => $_, n_threads => 1, backend => 'CPU')->forward($tokens) ] } $split, $whole;
        is_deeply($logits[0], $logits[1], "use_mmap $mmap: the same logits as the model in one file");
    }
    my $dir = "$repo_dir/lugh-test/TinySplit-GGUF";
    croaks_like(sub { Lugh::Model->new(model => "$dir/$names[1]") },
        qr/is not a usable model: it is part 2 of a model split in 3 files \(split\.no = 1\): open the first part/, 'the second part alone');
    rename "$dir/$names[2]", "$dir/moved" or die $!;
    croaks_like(sub { Lugh::Model->new(model => $path) },
        qr/it is the first of 3 files of a split model, and part 3 \(\Q$dir\E\/tiny-Q8_0-00003-of-00003\.gguf\) is missing/,
        'a part missing');
    rename "$dir/moved", "$dir/$names[2]" or die $!;
    symlink "$dir/$names[0]", "$dir/renamed.gguf" or die $!;
    croaks_like(sub { Lugh::Model->new(model => "$dir/renamed.gguf") },
        qr/its name does not end in -00001-of-00003\.gguf, so the other parts cannot be found/, 'a first part renamed');
};

done_testing;
