use strict;
use warnings;
use Test::More;

# Author test: every file with POD (modules, bin/lugh, README.pod) parses
# cleanly. Run: prove -b xt/pod.t
eval { require Test::Pod; Test::Pod->VERSION(1.41); 1 }
    or plan skip_all => 'Test::Pod 1.41 is needed for this author test';

Test::Pod::all_pod_files_ok(
    Test::Pod::all_pod_files(grep { -e } qw(blib lib bin)),
    'README.pod',
);
