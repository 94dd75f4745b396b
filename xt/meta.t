use strict;
use warnings;
use Test::More;

# Author test: the generated metadata is valid (CPAN::Meta::Spec 2) and
# carries what CPAN needs. Checks META.json of a distribution (make distdir)
# or MYMETA.json of a configured tree (perl Makefile.PL).
# Run: perl Makefile.PL && prove xt/meta.t
my ($file) = grep { -f } qw(META.json MYMETA.json);
plan skip_all => 'no META.json or MYMETA.json: run perl Makefile.PL first' unless $file;
eval { require CPAN::Meta; require CPAN::Meta::Validator; require JSON::PP; 1 }
    or plan skip_all => 'CPAN::Meta is needed for this author test';

open my $fh, '<:raw', $file or die "$file: $!";
my $data = JSON::PP->new->decode(do { local $/; <$fh> });
my $validator = CPAN::Meta::Validator->new($data);
ok($validator->is_valid, "$file is valid CPAN::Meta 2") or diag join "\n", $validator->errors;

my $meta = CPAN::Meta->load_file($file);
is($meta->meta_spec_version, 2, 'meta-spec 2');
is($meta->name, 'Lugh', 'name');
is($meta->version, lugh_version(), 'version is $Lugh::VERSION');
is_deeply([$meta->licenses], ['mit'], 'license');
my $resources = $meta->resources;
like($resources->{repository}{url} // '', qr{^https://.+\.git\z}, 'repository url');
like($resources->{repository}{web} // '', qr{^https://}, 'repository web');
is($resources->{repository}{type} // '', 'git', 'repository type');
like($resources->{bugtracker}{web} // '', qr{^https://.+/issues\z}, 'bugtracker');
ok($meta->effective_prereqs->requirements_for('runtime', 'requires')->requirements_for_module('perl'),
    'minimum perl version');

SKIP: {
    skip 'Test::CPAN::Meta::JSON is not installed', 1 unless $file eq 'META.json'
        && eval { require Test::CPAN::Meta::JSON; 1 };
    Test::CPAN::Meta::JSON::meta_spec_ok($file, undef, 'Test::CPAN::Meta::JSON');
}
SKIP: {
    (my $yml = $file) =~ s/\.json\z/.yml/;
    skip "Test::CPAN::Meta and $yml are needed for the YAML check", 1
        unless -f $yml && eval { require Test::CPAN::Meta; 1 };
    Test::CPAN::Meta::meta_spec_ok($yml, undef, "$yml is valid");
}

done_testing;

sub lugh_version {
    open my $pm, '<', 'lib/Lugh.pm' or die "lib/Lugh.pm: $!";
    while (<$pm>) { return $1 if /\$VERSION\s*=\s*'([^']+)'/ }
    return;
}
