package Lugh::ModelStore::Progress;

# Lugh::ModelStore's progress reports: the caller's code, or lines on
# STDERR. Internal; pure perl.

use strict;
use warnings;
use Time::HiRes ();

our $VERSION = '0.20';

sub _now { return scalar(Time::HiRes::time()) }


sub _bytes {
    my ($n) = @_;
    return '?' unless defined $n;
    return sprintf('%.1f GB', $n / 1e9) if $n >= 1e9;
    return sprintf('%.1f MB', $n / 1e6) if $n >= 1e6;
    return sprintf('%.1f kB', $n / 1e3) if $n >= 1e3;
    return "$n B";
}

# A sub that takes progress events ({ phase, ... }): the caller's code, a
# bar on STDERR (progress => 1, or undef with STDERR a terminal), or nothing.
sub _reporter {
    my ($name, $progress) = @_;
    if (ref $progress eq 'CODE') {
        return sub { my %event = (%{ $_[0] }, name => $name); delete @event{qw(before final)}; $progress->(\%event) };
    }
    return sub { } if defined $progress ? !$progress : !-t STDERR;
    my ($last, $open) = (0, 0);
    my $line = sub {
        my ($text, $end) = @_;
        print STDERR "\r$text\e[K" . ($end ? "\n" : '');
        $open = !$end;
    };
    return sub {
        my ($e) = @_;
        my $phase = $e->{phase};
        if ($phase eq 'download') {
            my $now = _now();
            return if !$e->{final} && $now - $last < 0.2;
            $last = $now;
            my ($done, $total) = @$e{qw(done total)};
            my $elapsed = $now - $e->{started};
            my $rate = $elapsed > 0.5 ? ($done - $e->{before}) / $elapsed : undef;
            my $text;
            if (defined $total && $total > 0) {
                my $width = 24;
                my $fill = int($width * $done / $total + 1e-9);
                $fill = $width if $fill > $width;
                $text = sprintf('%s [%s%s] %3d%% %s/%s', $name, '#' x $fill, '.' x ($width - $fill),
                    int(100 * $done / $total), _bytes($done), _bytes($total));
                $text .= sprintf(' %s/s', _bytes($rate)) if defined $rate;
                if (defined $rate && $rate > 0 && $total > $done) {
                    my $left = int(($total - $done) / $rate);
                    $text .= sprintf(' %d:%02d left', int($left / 60), $left % 60);
                }
            }
            else {
                $text = sprintf('%s %s', $name, _bytes($done));
                $text .= sprintf(' %s/s', _bytes($rate)) if defined $rate;
            }
            $line->($text, 0);
        }
        elsif ($phase eq 'note') {
            $line->("$name: $e->{message}", 1);
        }
        elsif ($phase eq 'verify') {
            $line->("$name: checking sha256", 0);
        }
        elsif ($phase eq 'assemble') {
            $line->("$name: joining the parts", 0);
        }
        elsif ($phase eq 'done') {
            $line->("$name: " . ($e->{present} ? 'present' : 'downloaded') . ", sha256 ok: $e->{path}", 1);
        }
    };
}

1;

__END__

=head1 NAME

Lugh::ModelStore::Progress - the progress reports of Lugh::ModelStore (internal)

=head1 DESCRIPTION

Part of Lugh's implementation, with no public interface: see L<Lugh> and
L<Lugh::ModelStore>.

=cut
