package Lugh::ModelStore::Hub;

# Models of the Hugging Face Hub by repository and quantization,
# hf.co/ORG/REPO[:QUANT], as llama-server -hf and ollama pull hf.co/... take
# them: the Hub's file list (GET ENDPOINT/api/models/ORG/REPO/tree/main)
# gives each file's size and, for files kept in LFS (every GGUF), its
# sha256; QUANT picks the GGUF file whose name ends in it (llama.cpp's rule:
# default Q4_K_M, then Q8_0, then the first model file); a model split in
# parts (NAME-00001-of-0000N.gguf) is downloaded whole. Downloads go
# through Lugh::ModelStore::Download (curl, resumed from FILE.part). Models
# are kept under MODEL_DIR/hf.co/ORG/REPO/, with a record of what each
# quantization resolved to, so that a later resolve needs no network.
# Internal; pure perl.

use strict;
use warnings;
use Fcntl qw(:flock);
use File::Path ();
use File::Spec ();

our $VERSION = '0.20';

our $DEFAULT_ENDPOINT = 'https://huggingface.co';

# The Hub's repository names: letters, digits, '-', '_', '.'; at most 96.
my $PART  = qr/[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?/;
my $QUANT = qr/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}/;

# Files with these in their names go with a model but are not one
# (llama.cpp's gguf_filename_is_model).
my @NOT_A_MODEL = qw(mmproj imatrix mtp- eagle3- dflash- dspark-);

# Whether $value names a Hub model (hf.co/..., huggingface.co/..., with or
# without https://).
sub _is_hub_name {
    my ($value) = @_;
    return defined $value && !ref $value && $value =~ m{\A(?:https?://)?(?:hf\.co|huggingface\.co)/}i;
}

# (org, repo, quant) of a Hub name; quant is undef for the default (none
# given, or Ollama's 'latest'). Dies naming what is wrong.
sub _parse {
    my ($value) = @_;
    my ($org, $repo, $quant) = $value =~ m{\A(?:https?://)?(?:hf\.co|huggingface\.co)/([^/:]*)/([^/:]*)(?::(.*))?\z}is
        or die "'$value' is not a Hugging Face model name (hf.co/ORG/REPO or hf.co/ORG/REPO:QUANT)\n";
    for ([ organization => $org ], [ repository => $repo ]) {
        my ($what, $part) = @$_;
        die "'$value': the $what '$part' is not a Hub name (letters, digits, - _ .; at most 96)\n"
            unless $part =~ /\A$PART\z/ && $part !~ /\.\./;
    }
    if (defined $quant) {
        die "'$value': the quantization '$quant' is not a name (letters, digits, _ . -; e.g. Q4_K_M)\n"
            unless $quant =~ /\A$QUANT\z/;
        undef $quant if lc $quant eq 'latest';
    }
    return ($org, $repo, $quant);
}

# The Hub's base URL: $MODEL_ENDPOINT, else $HF_ENDPOINT (as llama.cpp
# reads them), else huggingface.co.
sub _endpoint {
    for my $variable (qw(MODEL_ENDPOINT HF_ENDPOINT)) {
        my $value = $ENV{$variable};
        next unless defined $value && length $value;
        die "$variable must be an http:// or https:// URL, got '$value'\n" unless $value =~ m{\Ahttps?://[^\s/]+}i;
        (my $endpoint = $value) =~ s{/+\z}{};
        return $endpoint;
    }
    return $DEFAULT_ENDPOINT;
}

# A URL's path segments escaped.
sub _escape_path {
    my ($path) = @_;
    return join '/', map { (my $s = $_) =~ s/([^A-Za-z0-9._~-])/sprintf '%%%02X', ord $1/ge; $s } split m{/}, $path;
}

# curl options that send $HF_TOKEN as a Bearer token: a header file (mode
# 0600) in $dir, so that the token is not on curl's command line for ps to
# show; none without a token.
sub _auth_options {
    my ($dir) = @_;
    my $token = $ENV{HF_TOKEN};
    return () unless defined $token && length $token;
    die "HF_TOKEN holds spaces or control characters; a Hub token is one word\n" if $token =~ /[\s\x00-\x1f\x7f]/;
    my $file = File::Spec->catfile($dir, '.authorization');
    my $old = umask 077;
    my $ok = open my $fh, '>', $file;
    umask $old;
    die "cannot write $file: $!\n" unless $ok;
    print {$fh} "Authorization: Bearer $token\n";
    close $fh or die "cannot write $file: $!\n";
    return ('--header', "\@$file");
}

# The directory the Hub's models are kept in, and a repository's.
sub _hub_dir  { return File::Spec->catdir(Lugh::ModelStore::_model_dir(), 'hf.co') }
sub _repo_dir { my ($org, $repo) = @_; return File::Spec->catdir(_hub_dir(), $org, $repo) }

# The record of the quantizations pulled from a repository: tag => [file
# paths relative to the repository's directory].
sub _record_file { return File::Spec->catfile(_repo_dir(@_), '.lugh-pulled.json') }

sub _read_record {
    my ($org, $repo) = @_;
    my $file = _record_file($org, $repo);
    open my $fh, '<:raw', $file or return {};
    my $text = do { local $/; <$fh> };
    require JSON::PP;
    my $record = eval { JSON::PP->new->utf8->decode($text) };
    return ref $record eq 'HASH' ? $record : {};
}

sub _write_record {
    my ($org, $repo, $tag, $paths) = @_;
    my $record = _read_record($org, $repo);
    $record->{$tag} = $paths;
    my $file = _record_file($org, $repo);
    require JSON::PP;
    open my $fh, '>:raw', "$file.new" or die "cannot write $file.new: $!\n";
    print {$fh} JSON::PP->new->canonical->pretty->encode($record);
    close $fh or die "cannot write $file.new: $!\n";
    rename "$file.new", $file or die "cannot move $file.new to $file: $!\n";
    return;
}

# The record's key for a quantization: upper case, '' for the default.
sub _tag { my ($quant) = @_; return defined $quant ? uc $quant : '' }

# The canonical name: hf.co/ORG/REPO[:QUANT].
sub _display { my ($org, $repo, $quant) = @_; return "hf.co/$org/$repo" . (defined $quant ? ":$quant" : '') }

# The path of the model's first file when every file of it is here (from
# the record); undef otherwise.
sub _present {
    my ($org, $repo, $quant) = @_;
    my $paths = _read_record($org, $repo)->{ _tag($quant) };
    return undef unless ref $paths eq 'ARRAY' && @$paths;
    my @files = map { File::Spec->catfile(_repo_dir($org, $repo), $_) } @$paths;
    return undef if grep { !-f } @files;
    return $files[0];
}

# For Lugh::ModelStore::resolve and Lugh::Model->new: the model's file,
# pulled unless present (or croaking when $download is false).
sub _resolve {
    my ($name, $download, %opt) = @_;
    my ($org, $repo, $quant) = _parse($name);
    my $path = _present($org, $repo, $quant);
    return $path if defined $path;
    die "model '$name' is not downloaded yet (run: lugh pull $name)\n" if defined $download && !$download;
    return _pull($name, %opt);
}

# The downloaded Hub models for Lugh::ModelStore::list: one entry per
# quantization recorded.
sub _list {
    my @list;
    for my $record (sort glob File::Spec->catfile(_hub_dir(), '*', '*', '.lugh-pulled.json')) {
        my ($org, $repo) = (File::Spec->splitdir($record))[ -3, -2 ];
        my $pulled = _read_record($org, $repo);
        for my $tag (sort keys %$pulled) {
            my $paths = $pulled->{$tag};
            next unless ref $paths eq 'ARRAY' && @$paths;
            my @files = map { File::Spec->catfile(_repo_dir($org, $repo), $_) } @$paths;
            my $present = !grep { !-f } @files;
            my $size = 0;
            $size += -s $_ // 0 for @files;
            push @list, { name => _display($org, $repo, length $tag ? $tag : undef), path => $files[0],
                present => $present ? 1 : 0, size => $present ? $size : undef, partial => 0,
                description => @files > 1 ? "$paths->[0] (" . @files . ' parts)' : $paths->[0], origin => 'hf.co' };
        }
    }
    return @list;
}

# ---------------------------------------------------------------------------
# The Hub's API

# The repository's files: [{ path, size, sha256 (LFS files), oid (the git
# blob's sha1, other files) }]. Dies naming the problem: no such
# repository, a token needed or refused, the network.
sub _repo_files {
    my ($curl, $org, $repo, $endpoint, @auth) = @_;
    my $url = "$endpoint/api/models/" . _escape_path("$org/$repo") . '/tree/main?recursive=true';
    my ($status, $body) = Lugh::ModelStore::Download::_curl_get($curl, $url, @auth);
    my $said = _hub_error($body);
    my $repo_name = "$org/$repo";
    if ($status == 401) {
        die "the Hub refuses the token in HF_TOKEN for $repo_name (401$said)\n" if @auth;
        die "$repo_name is private, gated or does not exist: the Hub wants a token (set HF_TOKEN; 401$said)\n";
    }
    die "the Hub refuses access to $repo_name (403$said): accept its conditions on the Hub, or use a token "
        . "that may read it\n" if $status == 403;
    die "no repository $repo_name on " . _host($endpoint) . " (404$said)\n" if $status == 404;
    die "the Hub answered $status for $url$said\n" unless $status == 200;
    require JSON::PP;
    my $tree = eval { JSON::PP->new->utf8->decode($body) };
    die "the Hub's file list of $repo_name ($url) is not a JSON array\n" unless ref $tree eq 'ARRAY';
    my @files;
    for my $item (@$tree) {
        next unless ref $item eq 'HASH' && ($item->{type} // '') eq 'file' && defined $item->{path} && !ref $item->{path};
        my $path = $item->{path};
        # nothing outside the repository's directory
        next if $path =~ m{\A/|(?:\A|/)\.\.?(?:/|\z)|[\x00-\x1f\\]};
        my %file = (path => $path);
        my $lfs = ref $item->{lfs} eq 'HASH' ? $item->{lfs} : undef;
        my $size = $lfs ? $lfs->{size} : $item->{size};
        $file{size} = $size if defined $size && !ref $size && $size =~ /\A\d+\z/;
        if ($lfs) {
            my $sha = $lfs->{oid} // $lfs->{sha256};
            $file{sha256} = lc $sha if defined $sha && !ref $sha && $sha =~ /\A[0-9a-fA-F]{64}\z/;
        }
        elsif (defined $item->{oid} && !ref $item->{oid} && $item->{oid} =~ /\A[0-9a-fA-F]{40}\z/) {
            $file{oid} = lc $item->{oid};
        }
        push @files, \%file;
    }
    return \@files;
}

# ": the Hub's error message" from an error response's JSON, or ''.
sub _hub_error {
    my ($body) = @_;
    return '' unless defined $body && $body =~ /\A\s*\{/;
    require JSON::PP;
    my $data = eval { JSON::PP->new->utf8->decode($body) };
    return '' unless ref $data eq 'HASH' && defined $data->{error} && !ref $data->{error};
    (my $error = $data->{error}) =~ s/\s+/ /g;
    return ": $error";
}

sub _host { my ($url) = @_; return $url =~ m{\A\w+://([^/]+)} ? $1 : $url }

# A GGUF file's split: (prefix, index, count, tag); a file not split is
# part 1 of 1. The tag is what follows the last - or . of the name before
# .gguf and the split suffix (llama.cpp's get_gguf_split_info).
sub _split_info {
    my ($path) = @_;
    (my $prefix = $path) =~ s/\.gguf\z//i;
    my ($index, $count) = (1, 1);
    if ($prefix =~ s/-([0-9]{5})-of-([0-9]{5})\z//i) { ($index, $count) = ($1 + 0, $2 + 0) }
    my ($tag) = $prefix =~ /[-.]([A-Za-z0-9_]+)\z/;
    return ($prefix, $index, $count, defined $tag ? uc $tag : undef);
}

sub _is_model_file {
    my ($path) = @_;
    return 0 unless $path =~ /\.gguf\z/i;
    (my $name = $path) =~ s{.*/}{};
    return !grep { index($name, $_) >= 0 } @NOT_A_MODEL;
}

# The files of the model $quant picks (the first part of a split one first):
# the first model file whose path has QUANT followed by '.' or '-' (case
# apart); without a quantization Q4_K_M, then Q8_0, then the first model
# file. Dies listing the quantizations there when none fits.
sub _choose {
    my ($files, $quant, $repo_name) = @_;
    my @models = grep { _is_model_file($_->{path}) && (_split_info($_->{path}))[1] == 1 } @$files;
    my @tags = defined $quant ? ($quant) : qw(Q4_K_M Q8_0);
    my $chosen;
    for my $tag (@tags) {
        ($chosen) = grep { $_->{path} =~ /\Q$tag\E[.-]/i } @models;
        last if $chosen;
    }
    $chosen //= $models[0] unless defined $quant;
    if (!$chosen) {
        die "$repo_name has no GGUF model file (its files: "
            . join(', ', map { $_->{path} } @$files[ 0 .. ($#$files < 9 ? $#$files : 9) ]) . ")\n" unless @models;
        my %seen;
        my @available = grep { !$seen{$_}++ } map { (_split_info($_->{path}))[3] // $_->{path} } @models;
        die "$repo_name has no GGUF file for the quantization '$quant' (it has: " . join(', ', @available) . ")\n";
    }
    my ($prefix, undef, $count) = _split_info($chosen->{path});
    return [$chosen] if $count == 1;
    my %part;
    for my $file (@$files) {
        my ($p, $i, $c) = _split_info($file->{path});
        $part{$i} = $file if $p eq $prefix && $c == $count && $file->{path} =~ /\.gguf\z/i;
    }
    my @missing = grep { !$part{$_} } 1 .. $count;
    die "$repo_name lists " . ($count - @missing) . " of the $count parts of $prefix (missing: "
        . join(', ', map { sprintf '%05d', $_ } @missing) . ")\n" if @missing;
    return [ map { $part{$_} } 1 .. $count ];
}

# ---------------------------------------------------------------------------
# Pulling

# The git blob sha1 of a file (the oid the Hub gives files not in LFS).
sub _git_oid {
    my ($path) = @_;
    require Digest::SHA;
    my $sha = Digest::SHA->new(1);
    $sha->add('blob ' . (-s $path) . "\0");
    $sha->addfile($path, 'b');
    return $sha->hexdigest;
}

sub _pull {
    my ($name, %opt) = @_;
    my ($org, $repo, $quant) = _parse($name);
    my $display = _display($org, $repo, $quant);
    my $report = Lugh::ModelStore::Progress::_reporter($display, $opt{progress});
    my $endpoint = _endpoint();
    my $work = File::Spec->catdir(Lugh::ModelStore::_model_dir(), '.partial', "hf.co--$org--$repo");
    eval { File::Path::make_path($work); 1 } or die "cannot create $work: " . Lugh::ModelStore::_message($@) . "\n";
    open my $lock, '>>', File::Spec->catfile($work, '.lock') or die "cannot write in $work: $!\n";
    if (!flock $lock, LOCK_EX | LOCK_NB) {
        $report->({ phase => 'note', message => "another process is pulling from $org/$repo: waiting for it" });
        flock $lock, LOCK_EX or die "cannot lock $work/.lock: $!\n";
    }
    my $result = eval { _pull_locked($org, $repo, $quant, $endpoint, $work, $report, $lock) };
    my $error = $@;
    unlink File::Spec->catfile($work, '.authorization');
    close $lock;
    my $kept = 0;
    if (opendir my $dh, $work) { $kept = grep { !/\A\./ } readdir $dh }
    Lugh::ModelStore::_remove_work($work) unless $kept;
    die $error unless defined $result;
    $report->({ phase => 'done', path => $result });
    return $result;
}

sub _pull_locked {
    my ($org, $repo, $quant, $endpoint, $work, $report, $lock) = @_;
    my $downloader = Lugh::ModelStore::_downloader($report, undef);
    die "downloading from the Hugging Face Hub needs curl, which is not installed\n" unless $downloader->{curl};
    my @auth = _auth_options($work);
    my $repo_name = "$org/$repo";
    my $files = _choose(_repo_files($downloader->{curl}, $org, $repo, $endpoint, @auth), $quant, $repo_name);
    my $dir = _repo_dir($org, $repo);
    my @todo;
    my $progress = { done => 0, before => 0, started => Lugh::ModelStore::Progress::_now(), known => 0, unknown => 0 };
    for my $file (@$files) {
        my $target = File::Spec->catfile($dir, $file->{path});
        # a file already here, whole
        if (-f $target && (!defined $file->{size} || -s $target == $file->{size})) {
            $report->({ phase => 'verify', file => $target });
            next if _matches($target, $file);
            $report->({ phase => 'note', message => "$target does not match the Hub's checksum: downloading it again" });
        }
        (my $base = $file->{path}) =~ s{.*/}{};
        push @todo, { %$file, target => $target, filename => $base,
            url => "$endpoint/" . _escape_path("$org/$repo") . '/resolve/main/' . _escape_path($file->{path}),
            curl_options => \@auth };
        defined $file->{size} ? ($progress->{known} += $file->{size}) : $progress->{unknown}++;
    }
    $progress->{total} = $progress->{unknown} ? undef : $progress->{known};
    for my $file (@todo) {
        my $path = eval { Lugh::ModelStore::Download::_fetch_file($file, $work, $report, $lock, $downloader, $progress) };
        if (!defined $path) {
            my $error = $@;
            # a gated repository lists its files to anyone, but gives them only with a token that may read it
            if ($error =~ /returned error: (40[13])\b/) {
                die "the Hub refuses $file->{path} of $repo_name ($1): "
                    . (@auth ? 'the token in HF_TOKEN may not read it (accept its conditions on the Hub?)'
                        : 'it is gated or private: set HF_TOKEN to a token that may read it') . "\n";
            }
            die $error =~ /sha256 mismatch/ ? "$repo_name: $error" : $error;
        }
        if (defined $file->{oid} && (my $got = _git_oid($path)) ne $file->{oid}) {
            unlink $path;
            die "$repo_name: $file->{path}: git object id mismatch: got $got, expected $file->{oid} (the Hub's; "
                . "the download was deleted)\n";
        }
        $progress->{done} += -s $path;
        my $parent = (File::Spec->splitpath($file->{target}))[1];
        eval { File::Path::make_path($parent); 1 } or die "cannot create $parent: " . Lugh::ModelStore::_message($@) . "\n";
        rename $path, $file->{target} or die "cannot move $path to $file->{target}: $!\n";
    }
    _write_record($org, $repo, _tag($quant), [ map { $_->{path} } @$files ]);
    return File::Spec->catfile($dir, $files->[0]{path});
}

# Whether a file here has the Hub's checksum.
sub _matches {
    my ($path, $file) = @_;
    return Lugh::ModelStore::_sha256_file($path) eq $file->{sha256} if defined $file->{sha256};
    return _git_oid($path) eq $file->{oid} if defined $file->{oid};
    return 1;
}

1;

__END__

=head1 NAME

Lugh::ModelStore::Hub - models of the Hugging Face Hub for Lugh::ModelStore (internal)

=head1 DESCRIPTION

Part of Lugh's implementation, with no public interface: see
L<Lugh::ModelStore> (L<Lugh::ModelStore/Models of the Hugging Face Hub>).

=cut
