use strict;
use warnings;
use Test::More;
use ExtUtils::Manifest qw(maniread maniskip);
use Cwd qw(getcwd);
use File::Spec;

# Author test: MANIFEST lists what the distribution needs and nothing else.
# - every file in MANIFEST exists;
# - in a git checkout, MANIFEST is exactly the tracked files less MANIFEST.SKIP
#   (`make manifest-from-git` rewrites it so; review the diff);
# - with Test::DistManifest, nothing on disk is neither in MANIFEST nor skipped;
# - no third-party source: of C/C++ only Lugh's own shim and bench tools, and
#   of vendor/ only the ggml pin's manifest, lock file and stub, and our list
#   of the ggml struct layouts build.rs asserts.
# Run: prove xt/manifest.t

plan skip_all => 'no MANIFEST (run from the top of the distribution)' unless -f 'MANIFEST';

my $manifest = maniread();
my @listed = sort keys %$manifest;
my $skip = maniskip();

my @missing = grep { !-e } @listed;
ok(!@missing, 'every file in MANIFEST exists') or diag "missing: @missing";

my @skipped = grep { $skip->($_) } @listed;
ok(!@skipped, 'MANIFEST lists no file that MANIFEST.SKIP excludes') or diag "skipped: @skipped";

SKIP: {
    my $top = git_toplevel();
    skip 'not the top of a git checkout', 1 unless defined $top;
    my @git = grep { !$skip->($_) } split /\n/, `git ls-files`;
    my %git = map { $_ => 1 } @git;
    my @untracked = grep { !$git{$_} } @listed;
    my @unlisted = grep { !exists $manifest->{$_} } @git;
    ok(!@untracked && !@unlisted, 'MANIFEST is git ls-files less MANIFEST.SKIP')
        or diag join "\n", 'make manifest-from-git rewrites it;',
            (map {"  not tracked by git: $_"} @untracked),
            (map {"  not in MANIFEST: $_"} @unlisted);
}

# Lugh's own C and C++: the perl shim, its x86 kernels, and the build glue
# around ggml's RPC backend (which includes ggml's files from the pin) and
# Vulkan backend (declarations older Vulkan headers lack).
my %glue = map { $_ => 1 } qw(vendor/ggml/rpc-client.cpp vendor/ggml/rpc-transport.cpp vendor/ggml/ggml-vulkan-compat.h);
my %own_c = (map({ $_ => 1 } qw(xs-rs/glue/shim.c)), %glue);
my @foreign_c = grep { /\.(?:c|cc|cpp|cxx|h|hpp|cu|m|metal|cmake)\z|CMakeLists\.txt\z/i && !$own_c{$_}
        && !m{^bench/[^/]+\.cpp\z} && !m{^xs-rs/kernels/[^/]+\.[ch]\z} } @listed;
ok(!@foreign_c, 'no third-party C/C++ source in MANIFEST') or diag "C/C++: @foreign_c";
my %pin = (map({ $_ => 1 } qw(vendor/ggml/Cargo.toml vendor/ggml/Cargo.lock vendor/ggml/pin.rs vendor/ggml/layout.txt)), %glue);
my @vendor = grep { m{^vendor/} && !$pin{$_} } @listed;
ok(!@vendor, 'vendor/ holds only the ggml pin') or diag "vendor: @vendor";
# (xs-rs/engine/ggml/ is Lugh's own Rust layer over ggml, not a copy of it.)
my @ggml = grep { m{(?:^|/)(?:ggml|llama\.cpp|llama-cpp-sys-2[^/]*)/} && !$pin{$_} && !m{^xs-rs/engine/ggml/[^/]+\.rs\z} } @listed;
ok(!@ggml, 'no ggml or llama.cpp tree in MANIFEST') or diag "ggml: @ggml";

# What the cargo build and the tests need is there.
for my $need (qw(Cargo.toml Cargo.lock build.rs build/vulkan.rs Makefile.PL MANIFEST MANIFEST.SKIP xs-rs/lib.rs lib/Lugh.pm bin/lugh
                 vendor/ggml/Cargo.toml vendor/ggml/Cargo.lock vendor/ggml/pin.rs)) {
    ok(exists $manifest->{$need}, "MANIFEST lists $need");
}
my @rs = grep { /\.rs\z/ && !exists $manifest->{$_} } rust_sources('xs-rs');
ok(!@rs, 'every Rust source under xs-rs/ is in MANIFEST') or diag "not listed: @rs";

SKIP: {
    skip 'Test::DistManifest is needed for the check against the files on disk', 1
        unless eval { require Test::DistManifest; 1 };
    subtest 'Test::DistManifest: files on disk against MANIFEST and MANIFEST.SKIP' => sub {
        Test::DistManifest::manifest_ok();
    };
}

done_testing;

sub git_toplevel {
    my $top = `git rev-parse --show-toplevel 2>/dev/null`;
    return undef if $? || !defined $top;
    chomp $top;
    return File::Spec->canonpath($top) eq File::Spec->canonpath(getcwd()) ? $top : undef;
}

sub rust_sources {
    my ($dir) = @_;
    opendir my $dh, $dir or return;
    my @out;
    for my $e (sort grep { !/^\./ } readdir $dh) {
        my $path = "$dir/$e";
        push @out, -d $path ? rust_sources($path) : $path;
    }
    return @out;
}
