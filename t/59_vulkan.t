use strict;
use warnings;
# ggml lists a Vulkan device of CPU type, such as Mesa's lavapipe on a
# machine without a GPU, only when GGML_VK_VISIBLE_DEVICES names it; this
# must be set before Lugh starts ggml's backends.
BEGIN { $ENV{GGML_VK_VISIBLE_DEVICES} //= '0' }
use Test::More;
use lib 't/lib';
use LughTest qw(model_path croaks_like lora_adapters @LORA_MODELS);
use LughTestInference qw(run_parity_set);
use Lugh;

# ggml's Vulkan backend (a build with LUGH_BACKENDS=vulkan) on the first
# Vulkan device: in CI, lavapipe (Mesa's Vulkan on the CPU, packages
# mesa-vulkan-drivers). Three of the parity prompts with every layer on the
# device, against llama.cpp built with Vulkan (bench/build-llama-reference
# vulkan) on the same driver: set `vulkan`, and `vulkan-split` with the last
# 12 layers on the device, and `vulkan-lora`, that split with a LoRA
# adapter. Not against the CPU set: the CPU
# backend multiplies quantized weights by activations it quantizes to 8 bits
# and Vulkan (without integer dot products) by f16/f32 activations, which
# moves the top-20 logits by up to 1.10 in llama.cpp itself.

plan skip_all => 'this Lugh was built without the Vulkan backend (LUGH_BACKENDS=vulkan perl Makefile.PL builds it)'
    unless grep { $_ eq 'Vulkan' } Lugh::available_backends();
my $info = Lugh::backend_info('Vulkan');
plan skip_all => 'no Vulkan device (install a driver: mesa-vulkan-drivers gives lavapipe)' unless $info->{device_count};

is($info->{is_gpu}, 1, 'a Vulkan device counts as a GPU');
is($info->{devices}[0]{name}, 'Vulkan0', 'its first device is Vulkan0');
diag("Vulkan device 0: $info->{devices}[0]{description}");
cmp_ok($info->{devices}[0]{memory_total}, '>', 0, 'it reports its memory');

SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip('test model smollm2-135m-q4_1 not found (run: perl t/fetch-models)', 1);
    my $model = Lugh::Model->new(model => $path);
    my $vulkan = Lugh::Inference->new(model => $model, backend => 'Vulkan', n_ctx => 256);
    is($vulkan->backend, 'Vulkan', "the session's backend is Vulkan");
    is_deeply([ map { [ $_->{name}, $_->{layers} ] } $vulkan->devices ], [ [ 'Vulkan0', 30 ] ],
        'every layer on the device by default');
    my $partial = Lugh::Inference->new(model => $model, backend => 'Vulkan', n_ctx => 256, n_gpu_layers => 12);
    is_deeply([ map { [ $_->{name}, $_->{layers} ] } $partial->devices ], [ [ 'Vulkan0', 11 ], [ 'CPU', 19 ] ],
        'n_gpu_layers 12: the last 11 layers and the output on the device');
    my $none = Lugh::Inference->new(model => $model, backend => 'Vulkan', n_ctx => 256, n_gpu_layers => 0);
    # the device still takes part: ggml's scheduler may hand it the
    # matrix products of long prompts, as in llama.cpp with -ngl 0
    is_deeply([ map { [ $_->{name}, $_->{layers} ] } $none->devices ], [ [ 'Vulkan0', 0 ], [ 'CPU', 30 ] ],
        'n_gpu_layers 0: every layer on the CPU');
    # The three sessions compute the same model: the split ones agree with
    # the device-only one as closely as Vulkan and the CPU agree at all.
    my @prompt = (504, 3458, 282, 4649, 314);
    my @on_device = $vulkan->forward(\@prompt);
    for my $case ([ partial => $partial ], [ cpu => $none ]) {
        my @logits = $case->[1]->forward(\@prompt);
        my $worst = 0;
        for my $i (0 .. $#logits) {
            my $d = abs($logits[$i] - $on_device[$i]);
            $worst = $d if $d > $worst;
        }
        cmp_ok($worst, '<', 2, "$case->[0]: logits near the device's (worst difference " . sprintf('%.3f', $worst) . ')');
    }
    croaks_like(sub { Lugh::Inference->new(model => $model, backend => 'Vulkan', main_device => 1) },
        qr/main_device 1 is out of range: the session has 1 device\(s\) that take layers \(Vulkan0\)/,
        'main_device past the devices');
}

my $checked = run_parity_set(set => 'vulkan', tolerance => 0.05, greedy => 8, inference_options => { backend => 'Vulkan' });
# The last 12 of n_layer + 1 layers on the device, the rest on the CPU, whose
# weights then sit in the device's host memory, as in llama.cpp.
$checked += run_parity_set(set => 'vulkan-split', tolerance => 0.05, greedy => 8,
    inference_options => { backend => 'Vulkan', n_gpu_layers => 12 });
# With a LoRA adapter (t/54's, at its scale): each pair goes beside its base
# weight, on the device for the offloaded layers, on the CPU for the others,
# as llama.cpp places them.
SKIP: {
    my %adapters;
    for my $name (@LORA_MODELS) {
        my $a = lora_adapters($name);
        skip($a, 1) unless ref $a;
        $adapters{$name} = $a->{gguf};
    }
    $checked += run_parity_set(set => 'vulkan-lora', tolerance => 0.05, greedy => 8, models => \@LORA_MODELS,
        inference_options => { backend => 'Vulkan', n_gpu_layers => 12 },
        call => sub {
            my ($name, $model) = @_;
            return (lora => [ Lugh::LoRA->new(adapter => $adapters{$name}, model => $model), 0.75 ]);
        });
}
diag("$checked reference cases checked");

done_testing;
