# Lugh::Model on tiny synthetic models (t/lib/LughTest/TinyModel.pm): the
# accessors, hyperparameters and metadata of complete llama, qwen2 and gemma3
# files in F32, F16, Q8_0 and mixed types. Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest::TinyModel qw(tiny_model tiny_config tiny_vocab @TINY_VARIANTS);
use Lugh;

my $dir = tempdir(CLEANUP => 1);

# Bytes per element of each ggml type the tiny models use.
my %BYTES = (0 => 4, 1 => 2, 8 => 34 / 32);
my %TYPE_NAME = (0 => 'f32', 1 => 'f16', 8 => 'q8_0');

my @variants = @TINY_VARIANTS;

for my $opt (@variants) {
    my $c = tiny_config(%$opt);
    my $label = join ' ', map {"$_=$c->{$_}"} qw(arch tokenizer types tied);
    subtest $label => sub {
        my $path = tiny_model($dir, %$opt);
        my $m = Lugh::Model->new(model => $path);
        isa_ok($m, 'Lugh::Model');
        is($m->filename, $path, 'filename');
        is($m->architecture, $c->{arch}, 'architecture');
        is($m->arch_type, $c->{arch}, 'arch_type');
        is($m->gguf_version, 3, 'gguf_version');
        my $n_vocab = @{ tiny_vocab($c->{tokenizer}, gemma => $c->{arch} eq 'gemma3')->{tokens} };
        is_deeply([ map { $m->$_ } qw(n_layer n_embd n_head n_head_kv n_ff n_ctx_train n_vocab) ],
            [ @$c{qw(n_layer n_embd n_head n_head_kv n_ff n_ctx)}, $n_vocab ], 'hyperparameters');
        cmp_ok(abs($m->rope_freq_base - $c->{rope_freq_base}), '<', 1e-3, 'rope_freq_base');
        cmp_ok(abs($m->norm_eps - 1e-5), '<', 1e-9, 'norm_eps');
        ok($m->arch_has_ffn_gate, 'gated FFN');
        ok(!$m->arch_has_combined_qkv, 'no fused QKV');
        is(!!$m->arch_has_post_norm, $c->{arch} eq 'gemma3', 'post norms only for gemma3');
        ok(!$m->arch_is_recurrent, 'not recurrent');
        is($m->file_type, { f32 => 'F32', f16 => 'F16', q8_0 => 'Q8_0', mixed => 'Q8_0' }->{ $c->{types} }, 'file_type');

        my @names = $m->tensor_names;
        is($m->n_tensors, scalar @names, 'n_tensors');
        my $per_layer = 9 + ($c->{arch} eq 'qwen2' ? 3 : 0) + ($c->{arch} eq 'gemma3' ? 4 : 0);
        is(scalar @names, 2 + !$c->{tied} + $c->{n_layer} * $per_layer, 'the tensors the architecture needs');
        is($names[0], 'token_embd.weight', 'token_embd first');
        is(!!(grep { $_ eq 'output.weight' } @names), !$c->{tied}, $c->{tied} ? 'tied: no output.weight' : 'output.weight');
        my ($type, $n_dims, @shape) = $m->tensor_info('token_embd.weight');
        is_deeply([ $n_dims, @shape ], [ 2, $c->{n_embd}, $n_vocab ], 'token_embd shape (ggml order)');
        is_deeply([ ($m->tensor_info('blk.0.attn_k.weight'))[ 1 .. 3 ] ],
            [ 2, $c->{n_embd}, $c->{n_head_kv} * $c->{n_embd} / $c->{n_head} ], 'attn_k shape (grouped-query)');
        is_deeply([ ($m->tensor_info('blk.1.ffn_down.weight'))[ 1 .. 3 ] ], [ 2, $c->{n_ff}, $c->{n_embd} ],
            'ffn_down shape');
        is($m->tensor_type_name('blk.0.attn_norm.weight'), 'f32', 'norms are f32');
        if ($c->{types} eq 'mixed') {
            is($m->tensor_type_name('token_embd.weight'), 'q8_0', 'mixed: q8_0 embeddings');
            is($m->tensor_type_name('blk.0.attn_q.weight'), 'f16', 'mixed: f16 attn_q');
            is($m->tensor_type_name('blk.0.ffn_up.weight'), 'q8_0', 'mixed: q8_0 ffn_up');
        }
        else {
            is($m->tensor_type_name('blk.1.ffn_gate.weight'), $c->{types}, "matrices are $c->{types}");
        }
        is($m->tensor_type_name('blk.0.attn_q.bias'), $c->{arch} eq 'qwen2' ? 'f32' : undef, 'q bias only for qwen2');
        is($m->tensor_type_name('blk.0.attn_q_norm.weight'), $c->{arch} eq 'gemma3' ? 'f32' : undef,
            'q norm only for gemma3');

        my ($params, $bytes) = (0, 0);
        for my $name (@names) {
            my ($t, $nd, @dims) = $m->tensor_info($name);
            my $n = 1;
            $n *= $_ for @dims;
            $params += $n;
            $bytes  += $n * $BYTES{$t};
            is($m->tensor_type_name($name), $TYPE_NAME{$t}, "$name: type name of type $t") if $name =~ /^blk\.0\./;
        }
        is($m->n_params, $params, 'n_params is the sum over the tensors');
        is($m->size_bytes, $bytes, 'size_bytes');
        cmp_ok(-s $path, '>', $bytes, 'the file holds the weights and a header');

        my $tokens = $m->get_kv('tokenizer.ggml.tokens');
        is(scalar @$tokens, $n_vocab, 'tokenizer.ggml.tokens');
        is($m->get_kv_type('tokenizer.ggml.tokens'), 'array[string]', 'get_kv_type array[string]');
        is($m->get_kv_type("$c->{arch}.block_count"), 'uint32', 'get_kv_type uint32');
        is($m->get_kv('tokenizer.ggml.model'), $c->{tokenizer} eq 'spm' ? 'llama' : 'gpt2', 'tokenizer.ggml.model');
        is($m->get_kv('general.name'), "Lugh tiny $c->{arch} test model", 'general.name');
        is(($m->kv_keys)[0], 'general.architecture', 'kv_keys in file order');
        is(scalar(my @keys = $m->kv_keys), $m->n_kv, 'n_kv');
        if ($c->{tokenizer} eq 'bpe') {
            is_deeply([ @{ $m->get_kv('tokenizer.ggml.merges') }[ 0, 1 ] ], [ "\x{120} t", "\x{120}t h" ],
                'merges in order, byte-level characters decoded as UTF-8');
        }
        else {
            is($tokens->[3], '<0x00>', 'SentencePiece byte tokens');
            ok((grep { $_ eq "\x{2581}the" } @$tokens), 'a ▁-word piece');
        }
        if ($c->{arch} eq 'gemma3') {
            is($m->get_kv('gemma3.attention.sliding_window'), 8, 'sliding window');
        }

        my $read = Lugh::Model->new(model => $path, use_mmap => 0);
        is($read->use_mmap, 0, 'use_mmap => 0');
        is_deeply([ $read->tensor_names ], \@names, 'the same tensors without mmap');
        is($read->n_params, $params, 'the same n_params without mmap');
    };
}

# The writer is deterministic: the same options give the same file.
{
    require LughTest::TinyModel;
    my $a = LughTest::TinyModel::tiny_model_bytes(arch => 'qwen2');
    my $b = LughTest::TinyModel::tiny_model_bytes(arch => 'qwen2');
    ok($a eq $b, 'the same options give the same bytes');
    ok($a ne LughTest::TinyModel::tiny_model_bytes(arch => 'qwen2', seed => 2), 'another seed, other weights');
}

done_testing;
