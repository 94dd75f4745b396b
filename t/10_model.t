use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(model_path);
use LughTest::GGUF qw(write_gguf);
use Lugh;

my $dir = tempdir(CLEANUP => 1);

# --- a GGUF file with every value type, written here ---
my $long = 'x' x 100_000;
my $unicode = "caf\x{e9} \x{1F600} \x{65e5}\x{672c}";
my $data = pack('f<*', 1 .. 8);
my $path = write_gguf("$dir/all.gguf",
    kv => [
        'general.architecture' => [string => 'testarch'],
        'test.u8'   => [u8 => 200],        'test.i8'  => [i8 => -100],
        'test.u16'  => [u16 => 60000],     'test.i16' => [i16 => -30000],
        'test.u32'  => [u32 => 4000000000], 'test.i32' => [i32 => -2000000000],
        'test.u64'  => [u64 => 2**40],     'test.i64' => [i64 => -2**40],
        'test.f32'  => [f32 => 1.5],       'test.f64' => [f64 => 0.1],
        'test.true' => [bool => 1],        'test.false' => [bool => 0],
        'test.str'  => [string => 'hello'], 'test.long' => [string => $long],
        'test.unicode' => [string => $unicode], 'test.empty_str' => [string => ''],
        'test.arr_i32' => [array => i32 => [1, -2, 3]],
        'test.arr_u8'  => [array => u8 => [0, 255]],
        'test.arr_f32' => [array => f32 => [0.5, -1.25]],
        'test.arr_f64' => [array => f64 => [2.5]],
        'test.arr_u64' => [array => u64 => [2**33]],
        'test.arr_bool' => [array => bool => [1, 0, 1]],
        'test.arr_str' => [array => string => ['a', '', $unicode]],
        'test.arr_empty' => [array => i32 => []],
        'test.arr_empty_str' => [array => string => []],
        'test.nested' => [array => array => [[i32 => [1, 2]], [i32 => []]]],
        'testarch.block_count' => [u32 => 1],
        'testarch.embedding_length' => [u32 => 8],
    ],
    tensors => [['blk.0.w.weight', 0, [8], $data], ['token_embd.weight', 0, [4, 2], $data]],
);

my $m = Lugh::Model->new(model => $path);
isa_ok($m, 'Lugh::Model');
is($m->filename, $path, 'filename');
is($m->architecture, 'testarch', 'architecture');
is($m->arch_type, 'testarch', 'arch_type');
is($m->gguf_version, 3, 'gguf_version');
is($m->n_kv, 29, 'n_kv');
is($m->n_tensors, 2, 'n_tensors');
is_deeply([$m->tensor_names], ['blk.0.w.weight', 'token_embd.weight'], 'tensor_names in file order');
is(($m->kv_keys)[0], 'general.architecture', 'kv_keys in file order');
is($m->get_kv('test.u8'), 200, 'u8');
is($m->get_kv('test.i8'), -100, 'i8');
is($m->get_kv('test.u16'), 60000, 'u16');
is($m->get_kv('test.i16'), -30000, 'i16');
is($m->get_kv('test.u32'), 4000000000, 'u32');
is($m->get_kv('test.i32'), -2000000000, 'i32');
is($m->get_kv('test.u64'), 2**40, 'u64');
is($m->get_kv('test.i64'), -2**40, 'i64');
is($m->get_kv('test.f32'), 1.5, 'f32');
cmp_ok(abs($m->get_kv('test.f64') - 0.1), '<', 1e-15, 'f64');
ok($m->get_kv('test.true'), 'bool true');
ok(!$m->get_kv('test.false') && defined $m->get_kv('test.false'), 'bool false');
is($m->get_kv('test.str'), 'hello', 'string');
is($m->get_kv('test.long'), $long, 'long string');
is($m->get_kv('test.unicode'), $unicode, 'unicode string comes back as characters');
is($m->get_kv('test.empty_str'), '', 'empty string');
is_deeply($m->get_kv('test.arr_i32'), [1, -2, 3], 'array of i32');
is_deeply($m->get_kv('test.arr_u8'), [0, 255], 'array of u8');
is_deeply($m->get_kv('test.arr_f32'), [0.5, -1.25], 'array of f32');
is_deeply($m->get_kv('test.arr_f64'), [2.5], 'array of f64');
is_deeply($m->get_kv('test.arr_u64'), [2**33], 'array of u64');
is_deeply([map { $_ ? 1 : 0 } @{ $m->get_kv('test.arr_bool') }], [1, 0, 1], 'array of bool');
is_deeply($m->get_kv('test.arr_str'), ['a', '', $unicode], 'array of strings');
is_deeply($m->get_kv('test.arr_empty'), [], 'empty array');
is_deeply($m->get_kv('test.arr_empty_str'), [], 'empty string array');
is_deeply($m->get_kv('test.nested'), [[1, 2], []], 'nested arrays');
is($m->get_kv('no.such.key'), undef, 'missing key is undef');
is($m->get_kv_type('test.arr_str'), 'array[string]', 'get_kv_type of an array');
is($m->get_kv_type('test.f32'), 'float32', 'get_kv_type of a float');
is($m->get_kv_type('nope'), undef, 'get_kv_type of a missing key');
is_deeply([$m->tensor_info('token_embd.weight')], [0, 2, 4, 2], 'tensor_info (type, n_dims, shape)');
is_deeply([$m->tensor_info('nope')], [], 'tensor_info of an unknown tensor is empty');
is($m->tensor_type_name('blk.0.w.weight'), 'f32', 'tensor_type_name');
is($m->tensor_type_name('nope'), undef, 'tensor_type_name of an unknown tensor');
is($m->n_params, 16, 'n_params');
is($m->size_bytes, 64, 'size_bytes');
is($m->file_type, 'F32', 'file_type inferred from the tensors');
is($m->n_layer, 1, 'n_layer');
is($m->n_embd, 8, 'n_embd');
is($m->n_head, undef, 'absent hyperparameter is undef');
is($m->n_vocab, 2, 'n_vocab from token_embd when there is no token list');
is($m->use_mmap, 1, 'mmap by default');
ok(!$m->arch_has_combined_qkv && !$m->arch_has_ffn_gate && !$m->arch_has_post_norm && !$m->arch_is_recurrent,
    'architecture facts from tensors');

my $m2 = Lugh::Model->new(file => $path, use_mmap => 0);
is($m2->use_mmap, 0, 'use_mmap => 0');
is_deeply($m2->get_kv('test.nested'), [[1, 2], []], 'same values without mmap');
my $m3 = Lugh::Model->new(path => $path);
is($m3->architecture, 'testarch', 'path alias');

# --- GGUF version 2 has the same layout ---
my $v2 = write_gguf("$dir/v2.gguf", version => 2, kv => ['general.architecture' => [string => 'x']]);
is(Lugh::Model->new(model => $v2)->gguf_version, 2, 'GGUF v2 loads');

# --- objects are freed when the last reference goes ---
{
    my $before = Lugh::_live_objects();
    my @many = map { Lugh::Model->new(model => $path) } 1 .. 10;
    is(Lugh::_live_objects(), $before + 10, 'ten live models');
    @many = ();
    is(Lugh::_live_objects(), $before, 'all freed (DESTROY)');
}

# --- across fork ---
SKIP: {
    my $pid = fork;
    skip "fork failed: $!", 1 unless defined $pid;
    if (!$pid) {
        my $ok = eval { $m->n_kv == 29 && Lugh::Model->new(model => $path)->architecture eq 'testarch' };
        undef $m;
        require POSIX;
        POSIX::_exit($ok ? 0 : 1);
    }
    waitpid $pid, 0;
    is($?, 0, 'a forked child can use and free a model');
}
is($m->n_kv, 29, 'parent model still fine after fork');

# --- SmolLM2 ---
SKIP: {
    my $smol = model_path('smollm2-135m-q4_1') or skip 'SmolLM2 not fetched (run: perl t/fetch-models)', 12;
    my $s = Lugh::Model->new(model => $smol);
    is($s->architecture, 'llama', 'SmolLM2 is llama');
    is($s->get_kv('llama.block_count'), 30, 'llama.block_count 30');
    my $tokens = $s->get_kv('tokenizer.ggml.tokens');
    is(scalar @$tokens, 49152, 'tokenizer.ggml.tokens has 49152 entries');
    is(scalar @{ $s->get_kv('tokenizer.ggml.merges') }, 48900, 'merges complete');
    my ($type, $n_dims, @shape) = $s->tensor_info('token_embd.weight');
    is_deeply([$type, $n_dims, @shape], [8, 2, 576, 49152], 'tensor_info token_embd.weight (q8_0, 576 x 49152)');
    is($s->tensor_type_name('blk.0.attn_q.weight'), 'q4_1', 'attention weights are q4_1');
    is($s->file_type, 'Q4_1', 'file_type Q4_1');
    is_deeply([map { $s->$_ } qw(n_layer n_embd n_head n_head_kv n_ff n_ctx_train n_vocab)],
        [30, 576, 9, 3, 1536, 8192, 49152], 'hyperparameters');
    cmp_ok(abs($s->rope_freq_base - 100000), '<', 1e-3, 'rope_freq_base');
    cmp_ok(abs($s->norm_eps - 1e-5), '<', 1e-9, 'norm_eps');
    ok($s->arch_has_ffn_gate && !$s->arch_has_combined_qkv && !$s->arch_has_post_norm && !$s->arch_is_recurrent,
        'llama facts: gate, no fused qkv, no post norms, not recurrent');
    cmp_ok(abs($s->n_params - 134_515_008), '<', 1, 'n_params');
}

SKIP: {
    my $gemma = model_path('gemma3-270m-q4_k_m') or skip 'Gemma-3 not fetched', 1;
    ok(Lugh::Model->new(model => $gemma)->arch_has_post_norm, 'gemma3 has post norms');
}

done_testing;
