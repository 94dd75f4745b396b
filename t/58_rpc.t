use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path croaks_like lora_adapters);
use LughTestInference qw(run_parity_set max_abs_diff);
use LughTestRpc qw(rpc_built start_servers);
use Time::HiRes qw(time);
use Lugh;

# ggml's RPC backend (a build with LUGH_BACKENDS=rpc), on this machine: two
# `lugh rpc-server` processes on loopback ports.
# - The parity prompts with the last 12 of n_layer + 1 layers on the two
#   servers (half each) and the rest on the CPU, against llama.cpp making the
#   same split over two of its own ggml-rpc-server processes (set `rpc-split`).
# - A server that dies, or stops answering, during a generation: a croak
#   naming it, within rpc_timeout; the session refuses to go on; the process
#   and its other sessions carry on.

plan skip_all => 'this Lugh was built without the RPC backend (LUGH_BACKENDS=rpc perl Makefile.PL builds it)'
    unless rpc_built();

{
    my $servers = start_servers(2);
    my @endpoints = $servers->endpoints;
    my %split = (backend => 'CPU', rpc => \@endpoints, n_gpu_layers => 12, tensor_split => [ 1, 1 ]);
    SKIP: {
        my $path = model_path('smollm2-135m-q4_1') or skip('test model smollm2-135m-q4_1 not found', 1);
        my $model = Lugh::Model->new(model => $path);
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 256, %split);
        # llama.cpp's split of 30 layers + output, 12 offloaded over two
        # equal shares: layers 19-24 on the first server, 25-29 and the
        # output on the second
        is_deeply([ map { [ $_->{name}, $_->{layers} ] } $inference->devices ],
            [ [ 'RPC0', 6 ], [ 'RPC1', 5 ], [ 'CPU', 19 ] ], 'the layers as llama.cpp shares them out')
            or diag explain [ $inference->devices ];
        is($inference->devices, 3, 'three devices');
        is((grep { $_->{description} eq $endpoints[0] } $inference->devices), 1, 'a remote device is described by its server');
        my @all_remote = Lugh::Inference->new(model => $model, n_ctx => 256, backend => 'CPU', rpc => \@endpoints)->devices;
        is_deeply([ map { $_->{name} } @all_remote ], [ 'RPC0', 'RPC1' ], 'n_gpu_layers defaults to all: nothing on the CPU');
        my @main = Lugh::Inference->new(model => $model, n_ctx => 256, backend => 'CPU', rpc => \@endpoints,
            main_device => 1)->devices;
        is_deeply([ map { [ $_->{name}, $_->{layers} ] } @main ], [ [ 'RPC1', 30 ] ], 'main_device: every layer there');
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => \@endpoints, tensor_split => [1]) },
            qr/tensor_split has 1 value\(s\) but the session has 2 device\(s\) that take layers \(RPC0, RPC1\)/,
            'tensor_split of the wrong length');
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => \@endpoints, tensor_split => [ 0, 0 ]) },
            qr/tensor_split must be numbers >= 0 with a positive sum/, 'tensor_split of zeros');
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => \@endpoints, main_device => 2) },
            qr/main_device 2 is out of range: the session has 2 device/, 'main_device out of range');
        croaks_like(sub { Lugh::Inference->new(model => $model, rpc => \@endpoints, main_device => 0, tensor_split => [1, 1]) },
            qr/main_device and tensor_split exclude each other/, 'main_device with tensor_split');
        # A LoRA adapter's pairs are copied to the servers beside the weights
        # they adapt (not sent with every step): the same logits as the
        # local session's, the remote devices computing as this CPU does.
        my $adapters = lora_adapters('smollm2-135m-q4_1');
        skip($adapters, 2) unless ref $adapters;
        my $lora = Lugh::LoRA->new(adapter => $adapters->{gguf}, model => $model);
        my $local = Lugh::Inference->new(model => $model, n_ctx => 256, backend => 'CPU');
        my @prompt = (1, 504, 2365, 6354);
        for my $round (1, 2) {
            my $diff = max_abs_diff([ $inference->forward(tokens => \@prompt, lora => [ $lora, 0.75 ]) ],
                [ $local->forward(tokens => \@prompt, lora => [ $lora, 0.75 ]) ]);
            cmp_ok($diff, '<=', 0.05, "with a LoRA adapter (use $round), the local session's logits (max diff "
                . sprintf('%.5f', $diff) . ')');
        }
    }
    my $checked = run_parity_set(set => 'rpc-split', tolerance => 0.05, greedy => 16, inference_options => \%split);
    diag("$checked reference cases checked");
}

SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip('test model smollm2-135m-q4_1 not found', 1);
    my $model = Lugh::Model->new(model => $path);
    my @prompt = (1, 504, 2365, 6354);
    my $local = Lugh::Inference->new(model => $model, backend => 'CPU', n_ctx => 256);
    my @expected = $local->generate(\@prompt, max_tokens => 12, greedy => 1);
    for my $fault ([ KILL => 'a server killed' ], [ STOP => 'a server that stops answering' ]) {
        my ($signal, $what) = @$fault;
        my $servers = start_servers(2);
        my @endpoints = $servers->endpoints;
        my $victim = ($servers->pids)[1];
        my $inference = Lugh::Inference->new(model => $model, backend => 'CPU', n_ctx => 256, rpc => \@endpoints,
            n_gpu_layers => 20, rpc_timeout => 2);
        my @before = $inference->generate(\@prompt, max_tokens => 12, greedy => 1);
        is_deeply(\@before, \@expected, "$what: before the fault, the split session generates as the local one");
        my @got;
        my $started = time;
        my $ok = eval {
            $inference->generate(\@prompt, max_tokens => 12, greedy => 1, callback => sub {
                my ($token, $count) = @_;
                push @got, $token;
                kill $signal, $victim if $count == 3;
                return 0;
            });
            1;
        };
        my $took = time - $started;
        ok(!$ok, "$what: generate croaks");
        like($@, qr/RPC server \Q$endpoints[1]\E stopped answering during a forward pass/, "$what: naming the server");
        cmp_ok($took, '<', 30, sprintf("$what: within the timeout and a margin (%.1f s)", $took));
        is_deeply(\@got, [ @expected[ 0 .. 2 ] ], "$what: no token from the lost step reached the callback");
        croaks_like(sub { $inference->forward(\@prompt) }, qr/RPC server \Q$endpoints[1]\E stopped answering/,
            "$what: the session refuses to go on");
        SKIP: {
            my $adapters = lora_adapters('smollm2-135m-q4_1');
            skip($adapters, 1) unless ref $adapters;
            # its pairs would be copied to the servers first: refused before that
            my $lora = Lugh::LoRA->new(adapter => $adapters->{gguf}, model => $model);
            croaks_like(sub { $inference->forward(tokens => \@prompt, lora => $lora) },
                qr/RPC server \Q$endpoints[1]\E stopped answering/, "$what: with a LoRA adapter too");
        }
        is_deeply([ $local->generate(\@prompt, max_tokens => 12, greedy => 1) ], \@expected,
            "$what: another session of the process carries on");
        undef $inference;
        pass("$what: the broken session is freed");
    }
    my $servers = start_servers(1);
    my $again = Lugh::Inference->new(model => $model, backend => 'CPU', n_ctx => 256, rpc => [ $servers->endpoints ],
        n_gpu_layers => 8);
    is_deeply([ $again->generate(\@prompt, max_tokens => 12, greedy => 1) ], \@expected,
        'after the faults, a new split session works');
}

done_testing;
