# Members of Lugh 0.12's API that this port had left out: backend counts and
# Metal probes, Lugh::Model's mmap/prefetch options and mmap_size,
# Lugh::Inference's hyperparameter accessors, the standalone Lugh::KVCache;
# and one placed copy of a model's weights shared by all its sessions.
# Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir  = tempdir(CLEANUP => 1);
my $path = tiny_model($dir);

subtest 'backends' => sub {
    my @available = grep { $_ ne 'auto' } Lugh::available_backends();
    is((Lugh::available_backends())[-1], 'auto', "available_backends ends with 'auto', as in 0.12");
    is(Lugh::backend_count(), scalar @available, 'backend_count counts the available backends, not auto');
    my $devices = 0;
    $devices += Lugh::backend_info($_)->{device_count} for @available;
    is(Lugh::backend_device_count(), $devices, 'backend_device_count sums their devices');
    cmp_ok(Lugh::backend_device_count(), '>=', 1, 'the CPU is a device');
    my $metal = grep { /\A(?:MTL|Metal)\z/i } @available;
    is(Lugh::metal_available(), $metal ? 1 : 0, 'metal_available agrees with the backend list');
    ok(!Lugh::metal_available() || Lugh::has_metal(), 'available implies compiled in');
    like(Lugh::has_metal(), qr/\A[01]\z/, 'has_metal is 0 or 1');
    croaks_like(sub { Lugh::backend_count(1) }, qr/Usage: Lugh::backend_count\(\)/, 'no arguments');
    croaks_like(sub { Lugh::backend_info() }, qr/\AUsage: Lugh::backend_info\(\$name\) at /, 'backend_info usage names the caller');
};

subtest 'Lugh::Model mmap and prefetch' => sub {
    ok(Lugh::Model->mmap_supported, 'mmap_supported');
    my $size = -s $path;
    my $mapped = Lugh::Model->new(model => $path, mmap => 1, prefetch => 1);
    ok($mapped->use_mmap, 'mmap => 1 (the 0.12 name) maps');
    is($mapped->mmap_size, $size, 'mmap_size is the file size');
    my $read = Lugh::Model->new(model => $path, mmap => 0);
    ok(!$read->use_mmap, 'mmap => 0 reads');
    is($read->mmap_size, 0, 'mmap_size 0 when read');
    croaks_like(sub { Lugh::Model->new(model => $path, mmap => 1, use_mmap => 1) }, qr/give only one of use_mmap, mmap/,
        'mmap and use_mmap together');
    croaks_like(sub { Lugh::Model->new(model => $path, use_mmap => 0, prefetch => 1) }, qr/prefetch .* needs use_mmap/,
        'prefetch without mmap');
    croaks_like(sub { Lugh::Model->new(model => $path, prefech => 1) }, qr/unknown option 'prefech'/, 'typo');
    my @a = Lugh::Inference->new(model => $mapped, n_threads => 1)->forward([ 1, 2, 3 ]);
    my @b = Lugh::Inference->new(model => $read, n_threads => 1)->forward([ 1, 2, 3 ]);
    is_deeply(\@a, \@b, 'prefetched, mapped and read models give the same logits');
};

my $model = Lugh::Model->new(model => $path);
my $inf   = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);

subtest 'Lugh::Inference hyperparameters' => sub {
    for my $name (qw(n_layer n_embd n_head n_head_kv n_ff n_ctx_train n_vocab)) {
        is($inf->$name, $model->$name, "$name as the model says");
    }
    is($inf->head_dim, $inf->n_embd / $inf->n_head, 'head_dim');
    cmp_ok(abs($inf->rope_freq_base - $model->rope_freq_base), '<', 1e-3, 'rope_freq_base');
    cmp_ok(abs($inf->norm_eps - $model->norm_eps), '<', 1e-9, 'norm_eps');
    is($inf->architecture, $model->architecture, 'architecture');
    ok($inf->n_rot > 0, 'n_rot');
    croaks_like(sub { $inf->n_embd(1) }, qr/Usage: \$inference->n_embd/, 'no arguments');
};

subtest 'standalone Lugh::KVCache' => sub {
    my %shape = (n_layer => $inf->n_layer, n_ctx => 64, n_head_kv => $inf->n_head_kv, head_dim => $inf->head_dim);
    my $cache = Lugh::KVCache->new(%shape);
    isa_ok($cache, 'Lugh::KVCache');
    is($cache->n_ctx, 64, 'n_ctx');
    is($cache->n_layer, $shape{n_layer}, 'n_layer');
    is($cache->n_cached, 0, 'empty');
    my @with  = $inf->forward(tokens => [ 1, 2, 3 ], cache => $cache);
    my @fresh = $inf->forward([ 1, 2, 3 ]);
    is_deeply(\@with, \@fresh, 'a session adopts it: same logits as without a cache');
    is($cache->n_cached, 3, 'and it holds the tokens');
    my @next = $inf->forward(tokens => [4], cache => $cache);
    my $made = $inf->create_kv_cache;
    $inf->forward(tokens => [ 1, 2, 3 ], cache => $made);
    is_deeply(\@next, [ $inf->forward(tokens => [4], cache => $made) ], 'incremental decoding as on a session-made cache');
    my $other = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
    croaks_like(sub { $other->forward(tokens => [5], cache => $cache) }, qr/belongs to another Lugh::Inference/,
        'then it belongs to that session');
    my $wrong = Lugh::KVCache->new(%shape, n_layer => $shape{n_layer} + 1);
    croaks_like(sub { $inf->forward(tokens => [1], cache => $wrong) },
        qr/the KV cache has n_layer \d+, n_ctx 64, .* but this session needs n_layer/, 'a wrong shape names both');
    my $short = Lugh::KVCache->new(%shape, n_ctx => 32);
    croaks_like(sub { $inf->forward(tokens => [1], cache => $short) }, qr/n_ctx 32, .*needs .*n_ctx 64/, 'n_ctx too');
    croaks_like(sub { Lugh::KVCache->new(%shape, n_ctx => 0) }, qr/n_ctx must be an integer in \[1, \d+\], got 0/,
        'zero');
    croaks_like(sub { Lugh::KVCache->new(n_layer => 2) }, qr/missing n_ctx/, 'missing option');
    croaks_like(sub { Lugh::KVCache->new(%shape, heads => 2) }, qr/unknown option 'heads'/, 'unknown option');
    croaks_like(sub { Lugh::KVCache->new(%shape, head_dim => -1) }, qr/head_dim must be a positive integer/, 'negative');
};

subtest 'weights are placed once per model' => sub {
    my @sessions = map { Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 32) } 1 .. 10;
    my %ids = map { Lugh::Inference::_weights_id($_) => 1 } $inf, @sessions;
    is(scalar keys %ids, 1, 'eleven sessions of one model share one copy of the weights');
    my $again = Lugh::Model->new(model => $path);
    isnt(Lugh::Inference::_weights_id(Lugh::Inference->new(model => $again, n_threads => 1)),
        Lugh::Inference::_weights_id($inf), 'another model object has its own');
    my @logits = map { [ $_->forward([ 7, 8, 9 ]) ] } $inf, $sessions[-1];
    is_deeply($logits[0], $logits[1], 'and they compute the same');
};

done_testing;
