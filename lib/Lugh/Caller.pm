package Lugh::Caller;

# Where a message from Lugh points: the line of the first caller outside
# Lugh's own packages, so that an error names the user's code. Shared by
# Lugh.pm (every croak and warning) and Lugh::ModelStore, which runs without
# Lugh.so; so it is pure perl with nothing to load. Internal.

use strict;
use warnings;

our $VERSION = '0.20';

# The message with " at FILE line N." of the first caller outside Lugh.
sub _at_caller {
    my ($message) = @_;
    my $level = 1;
    $level++ while (caller($level))[0] && (caller($level))[0] =~ /\ALugh(?:::|\z)/;
    my (undef, $file, $line) = caller($level);
    return defined $file ? "$message at $file line $line.\n" : "$message\n";
}

1;

__END__

=head1 NAME

Lugh::Caller - where Lugh's errors and warnings point (internal)

=head1 DESCRIPTION

Part of Lugh's implementation, with no public interface: see L<Lugh> and
L<Lugh::ModelStore>.

=cut
