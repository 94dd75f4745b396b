use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(croaks_like);
use Lugh;

# What ggml's CPU kernels were compiled for: the kernel variant that picks
# the parity tests' reference outputs.

my $cpu = Lugh::cpu_features();
is(ref $cpu, 'HASH', 'cpu_features returns a hash reference');
is_deeply([ sort keys %$cpu ], [qw(arch build features n_cpus variant)], 'its keys');
like($cpu->{n_cpus}, qr/\A[1-9][0-9]*\z/, 'n_cpus: a positive count');
like($cpu->{variant}, qr/\A[a-z0-9_]+(?:-[a-z0-9]+)?\z/, "variant '$cpu->{variant}'");
like($cpu->{build}, qr/\A[\w.+-]+\z/, "build '$cpu->{build}'");
is(ref $cpu->{features}, 'ARRAY', 'features is an array reference');
ok(!grep({ !/\A[A-Z0-9_]+\z/ } @{ $cpu->{features} }), "feature names: @{ $cpu->{features} }");
isnt(Lugh::cpu_features(), $cpu, 'a new hash each call (changing one changes nothing)');

if ($cpu->{arch} eq 'x86_64') {
    my %has = map { $_ => 1 } @{ $cpu->{features} };
    my $expected = $has{AMX_INT8} ? 'x86_64-amx' : $has{AVX512FP16} ? 'x86_64-avx512fp16'
        : $has{AVX512F} ? 'x86_64-avx512'
        : $has{AVX2} && $has{FMA} ? 'x86_64-avx2' : $has{AVX} ? 'x86_64-avx' : 'x86_64-sse';
    is($cpu->{variant}, $expected, 'the variant follows from the features');
    if ($cpu->{build} eq 'portable') {
        is($cpu->{variant}, 'x86_64-avx2', 'LUGH_CPU_PORTABLE=1 builds the AVX2 kernels');
        ok(!$has{AVX512F}, 'a portable build uses no AVX-512');
    }
}

is(Lugh::backend_info('CPU')->{kernel_variant}, $cpu->{variant}, "backend_info('CPU') names the kernel variant");
croaks_like(sub { Lugh::cpu_features(1) }, qr/^Usage: Lugh::cpu_features\(\)/, 'cpu_features with an argument');
diag("kernel variant $cpu->{variant} ($cpu->{build}): @{ $cpu->{features} }");

done_testing;
