use strict;
use warnings;
use Test::More;

# Author test: Changes follows CPAN::Changes::Spec and its newest entry is the
# version being released, with a date. Run: prove xt/changes.t
eval { require Test::CPAN::Changes; 1 }
    or plan skip_all => 'Test::CPAN::Changes is needed for this author test';

open my $pm, '<', 'lib/Lugh.pm' or die "lib/Lugh.pm: $!";
my ($version) = map { /\$VERSION\s*=\s*'([^']+)'/ ? $1 : () } <$pm>;
close $pm;

Test::CPAN::Changes::changes_file_ok('Changes', { version => $version });
my $changes = CPAN::Changes->load('Changes');
my ($newest) = reverse $changes->releases;
is($newest->version, $version, "the newest entry in Changes is $version");
like($newest->date // '', qr/^\d{4}-\d\d-\d\d/, 'and it has a date');
done_testing;
