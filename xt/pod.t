# Author test: every file with POD (modules, bin/lugh, README.pod) parses
# without errors or warnings. Pod::Checker is core, so this runs everywhere.
# Run: prove -b xt/pod.t
use strict;
use warnings;
use Test::More;
use File::Find ();
use Pod::Checker ();

my @files = ('README.pod', 'bin/lugh');
File::Find::find(sub { push @files, $File::Find::name if /\.pm\z/ }, 'lib');
for my $file (sort @files) {
    my $report = '';
    open my $out, '>', \$report or die;
    my $checker = Pod::Checker->new(-warnings => 2);
    $checker->parse_from_file($file, $out);
    # Two methods may each have an option of the same name (=item bytes).
    my @warnings = grep { /WARNING/ && !/multiple occurrences \(\d+\) of link target/ } split /\n/, $report;
    ok($checker->num_errors == 0 && !@warnings, "$file: POD is clean") or diag $report;
}
done_testing;
