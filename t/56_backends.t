use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use Lugh;

# What every build has: the registry as Lugh reports it, the device list of
# a session, and the options that share layers out over devices, refused
# with a message where they cannot apply.

my @available = grep { $_ ne 'auto' } Lugh::available_backends();
is(Lugh::backend_info('auto')->{name}, Lugh::best_backend(), 'auto: the information of the backend it picks');
ok((grep { $_ eq 'CPU' } @available), 'the CPU backend is always there');
for my $name (@available) {
    my $info = Lugh::backend_info($name);
    is($info->{name}, $name, "$name: backend_info names it");
    like($info->{type}, qr/\A(?:CPU|GPU|IGPU|ACCEL)\z/, "$name: a device type");
    is(scalar @{ $info->{devices} }, $info->{device_count}, "$name: one entry per device");
    for my $key (qw(memory_free memory_total)) {
        like($info->{$key}, qr/\A\d+\z/, "$name: $key is a byte count");
    }
    cmp_ok($info->{memory_free}, '<=', $info->{memory_total}, "$name: free memory within the total");
    is(join(',', sort keys %{ $info->{devices}[0] }), 'description,memory_free,memory_total,name',
        "$name: each device has its name, description and memory");
}
cmp_ok(Lugh::backend_info('CPU')->{memory_total}, '>', 0, "the CPU's memory is known");
ok(defined Lugh::best_backend(), 'a best backend');
is(Lugh::has_rpc(), (grep { $_ eq 'RPC' } Lugh::_registered_backends()) ? 1 : 0, 'has_rpc says whether RPC is built in');

SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip('test model smollm2-135m-q4_1 not found (run: perl t/fetch-models)', 1);
    my $model = Lugh::Model->new(model => $path);
    my $cpu = Lugh::Inference->new(model => $model, backend => 'CPU', n_ctx => 64, n_gpu_layers => 99);
    is_deeply([ $cpu->devices ], [ { name => 'CPU', description => Lugh::backend_info('CPU')->{description}, layers => 30 } ],
        'a CPU session: every layer on the CPU (n_gpu_layers with no device for them takes none)');

    croaks_like(sub { Lugh::Inference->new(model => $model, backend => 'CPU', tensor_split => [ 1, 1 ]) },
        qr/tensor_split needs devices that take layers/, 'tensor_split without devices');
    croaks_like(sub { Lugh::Inference->new(model => $model, backend => 'CPU', main_device => 0) },
        qr/main_device 0 is out of range/, 'main_device without devices');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_gpu_layers => -1) },
        qr/n_gpu_layers must be an integer >= 0, got -1/, 'n_gpu_layers below 0');
    croaks_like(sub { Lugh::Inference->new(model => $model, tensor_split => 'half') },
        qr/tensor_split must be an ARRAY reference/, 'tensor_split not an array');
    croaks_like(sub { Lugh::Inference->new(model => $model, tensor_split => [ 'x' ]) },
        qr/tensor_split value/, 'tensor_split with a word');
    for my $bad ('nowhere', ':5', 'host:0', 'host:70000', 'a b:5') {
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => [$bad]) },
            qr/RPC server '\Q$bad\E' is not host:port/, "rpc server '$bad'");
    }
    croaks_like(sub { Lugh::Inference->new(model => $model, rpc => []) }, qr/rpc needs at least one server/, 'rpc => []');
    croaks_like(sub { Lugh::Inference->new(model => $model, rpc => { a => 1 }) }, qr/rpc/, 'rpc => {}');
    if (Lugh::has_rpc()) {
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => ['127.0.0.1:1']) },
            qr/cannot use RPC server '127\.0\.0\.1:1': Failed to connect/, 'an RPC server nobody runs');
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => [ '127.0.0.1:9', '127.0.0.1:9' ]) },
            qr/RPC server '127\.0\.0\.1:9' is listed twice/, 'the same server twice');
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => ['127.0.0.1:1'], rpc_timeout => -1) },
            qr/rpc_timeout must be a number of seconds in 0\.\.86400/, 'a negative rpc_timeout');
    }
    else {
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => ['127.0.0.1:50052']) },
            qr/built without ggml's RPC backend: rebuild it with LUGH_BACKENDS=rpc/, 'rpc in a build without RPC');
        croaks_like(sub { Lugh::rpc_server(port => 50052) },
            qr/built without ggml's RPC backend/, 'rpc_server in a build without RPC');
    }
    my @still = $cpu->generate([ 1, 2, 3 ], max_tokens => 2, greedy => 1);
    is(scalar @still, 2, 'the session still works after the refusals');
}

croaks_like(sub { Lugh::rpc_server(port => 0) }, qr/port must be an integer in 1\.\.65535, got 0/, 'rpc_server: port 0');
croaks_like(sub { Lugh::rpc_server(port => 5, threads => 0) }, qr/threads must be an integer in 1\.\.512, got 0/,
    'rpc_server: no threads');
croaks_like(sub { Lugh::rpc_server(port => 5, backend => 'Nothing') }, qr/backend 'Nothing' has no device/,
    'rpc_server: an unknown backend');
croaks_like(sub { Lugh::rpc_server(prot => 5) }, qr/unknown option 'prot'/, 'rpc_server: a misspelt option');

done_testing;
