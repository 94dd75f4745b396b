# Author test: the Rust sources are formatted (cargo fmt --check) and clippy
# finds nothing, warnings included (cargo clippy -D warnings), in the crate
# and in the fuzz crate. .ci/run runs it.
use strict;
use warnings;
use Test::More;

my $cargo = $ENV{CARGO} // 'cargo';
plan skip_all => 'cargo is not installed' unless system("$cargo --version >/dev/null 2>&1") == 0;

# The PERL make used, so that cargo reuses the build.
local $ENV{PERL} = $ENV{PERL} // $^X;
for my $dir ('.', 'fuzz') {
    my $manifest = "$dir/Cargo.toml";
    next unless -e $manifest;
    SKIP: {
        skip 'rustfmt is not installed', 1 unless system("$cargo fmt --version >/dev/null 2>&1") == 0;
        my $out = `$cargo fmt --manifest-path $manifest --check 2>&1`;
        is($?, 0, "cargo fmt --check ($dir)") or diag $out;
    }
    SKIP: {
        skip 'clippy is not installed', 1 unless system("$cargo clippy --version >/dev/null 2>&1") == 0;
        my $out = `$cargo clippy --manifest-path $manifest --release --all-targets --quiet -- -D warnings 2>&1`;
        is($?, 0, "cargo clippy -D warnings ($dir)") or diag $out;
    }
}
done_testing;
