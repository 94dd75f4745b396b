use strict;
use warnings;
use Test::More;

use_ok('Lugh') or BAIL_OUT('Lugh does not load');

is(Lugh::version(), $Lugh::VERSION, 'version() is the distribution version');
is(Lugh::ggml_version(), '0.26.0', 'built on ggml 0.26.0');

my @backends = Lugh::available_backends();
ok(scalar(grep { $_ eq 'CPU' } @backends), 'CPU backend available') or diag "backends: @backends";
ok(Lugh::backend_available('CPU'), 'backend_available(CPU)');
ok(Lugh::backend_available('cpu'), 'backend names are case-insensitive');
is(Lugh::backend_available('NoSuchBackend'), 0, 'unknown backend is not available: 0');
is(Lugh::backend_available('auto'), 1, 'auto is always available');
ok(defined Lugh::best_backend(), 'best_backend defined');
ok((grep { $_ eq Lugh::best_backend() } @backends), 'best backend is an available one');

my $info = Lugh::backend_info('CPU');
is(ref $info, 'HASH', 'backend_info returns a hash');
is($info->{name}, 'CPU', 'info name');
is($info->{type}, 'CPU', 'info type');
is($info->{is_gpu}, 0, 'CPU is not a GPU');
cmp_ok($info->{device_count}, '>=', 1, 'at least one CPU device');
ok(length $info->{description}, 'has a description');
is(Lugh::backend_info('NoSuchBackend'), undef, 'unknown backend has no info');

eval { Lugh::backend_available() };
like($@, qr/^Usage: Lugh::backend_available\(name\) at /, 'usage message');

done_testing;
