use strict;
use warnings;
use Test::More;

# Author test: every public function and method is documented. The XS
# functions live in Lugh.so, so this needs the built tree:
#   make && prove -b xt/pod-coverage.t
# Names starting with an underscore are private; CLONE_SKIP is perl's hook.
eval { require Test::Pod::Coverage; Test::Pod::Coverage->VERSION(1.08); 1 }
    or plan skip_all => 'Test::Pod::Coverage 1.08 is needed for this author test';
eval { require Pod::Coverage; Pod::Coverage->VERSION(0.18); 1 }
    or plan skip_all => 'Pod::Coverage 0.18 is needed for this author test';
eval { require Lugh; 1 }
    or plan skip_all => "Lugh does not load (build it, then run with -b): $@";

my %options = (also_private => [qr/^CLONE_SKIP$/]);

my @modules = Test::Pod::Coverage::all_modules();
# Packages that share a file with another one: checked against that file.
my %inner = ('Lugh::Tokenizer::Decoder' => 'Lugh::Tokenizer');

plan tests => @modules + keys %inner;
Test::Pod::Coverage::pod_coverage_ok($_, \%options) for @modules;
for my $package (sort keys %inner) {
    (my $file = "$inner{$package}.pm") =~ s{::}{/}g;
    (my $own = "$package.pm") =~ s{::}{/}g;
    require $file;
    local $INC{$own} = $INC{$file};    # Pod::Coverage requires the package
    Test::Pod::Coverage::pod_coverage_ok($package,
        { %options, pod_from => $INC{$file} });
}
