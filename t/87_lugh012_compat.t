# Calls a Lugh 0.12 script makes, written the way 0.12's own test suite
# wrote them: the members and calling conventions this port had lacked
# (see "Differences from Lugh 0.12" in Lugh.pm for what deliberately
# differs). Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::TinyModel qw(tiny_model);

BEGIN {
    use_ok('Lugh');
    use_ok('Lugh::Autograd');
    use_ok('Lugh::Autograd::Tensor');
}

my $dir = tempdir(CLEANUP => 1);

# 0.12's t/0039-autograd-ops.t computes an op's graph through the raw pointer.
sub compute_tensor {
    my ($ctx, $tensor) = @_;
    my $graph = Lugh::Graph->new($ctx);
    my $raw = Lugh::Tensor->from_ptr($tensor->_raw_tensor_ptr);
    $graph->build_forward($raw);
    $graph->compute($ctx, 1);
}

subtest 'Lugh::Autograd::Tensor: id, _raw_tensor_ptr, Lugh::Tensor->from_ptr' => sub {
    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $a = Lugh::Autograd::Tensor->new($ctx, 'f32', 4, { requires_grad => 1 });
    my $b = Lugh::Autograd::Tensor->new($ctx, 'f32', 4, { requires_grad => 1 });
    $a->set_data(1.0, 2.0, 3.0, 4.0);
    $b->set_data(0.5, 1.0, 1.5, 2.0);
    ok($a->id > 0, 'id() returns a positive integer');
    isnt($a->id, $b->id, 'two live tensors have different ids');
    is($a->id, $a->id, 'an id is stable');

    my $c = Lugh::Autograd::Ops->add($ctx, $a, $b);
    compute_tensor($ctx, $c);
    is_deeply([ $c->get_data ], [ 1.5, 3, 4.5, 6 ], 'add computed through from_ptr / build_forward / compute($ctx, 1)');
    $c->backward(1.0, 1.0, 1.0, 1.0);
    is_deeply($a->grad, [ 1, 1, 1, 1 ], 'backward after it');

    my $raw = Lugh::Tensor->from_ptr($a->_raw_tensor_ptr);
    isa_ok($raw, 'Lugh::Tensor');
    is_deeply([ $raw->get_f32 ], [ 1, 2, 3, 4 ], 'from_ptr shares the values');
    $raw->set_f32(9, 8, 7, 6);
    is_deeply([ $a->get_data ], [ 9, 8, 7, 6 ], '... both ways');

    my $gone = do {
        my $short = Lugh::Autograd::Tensor->new($ctx, 'f32', 2);
        $short->_raw_tensor_ptr;
    };
    croaks_like(sub { Lugh::Tensor->from_ptr($gone) }, qr/handle \d+ is stale: its Lugh::Autograd::Tensor was freed/,
        'the handle of a freed tensor is refused');
    croaks_like(sub { Lugh::Tensor->from_ptr(0) }, qr/0 is not a handle from a Lugh::Autograd::Tensor/, 'a forged handle');
    croaks_like(sub { Lugh::Tensor->from_ptr(-1) }, qr/-1 is not a handle/, 'a negative one');
    croaks_like(sub { Lugh::Tensor->from_ptr(2**40) }, qr/is not a handle/, 'one never given');
    croaks_like(sub { Lugh::Tensor->from_ptr('0x7f00') }, qr/handle must be an integer/, 'an address-looking string');
    croaks_like(sub { Lugh::Tensor->from_ptr() }, qr/Usage: Lugh::Tensor->from_ptr\(handle\)/, 'no handle');
    my $kept = Lugh::Tensor->from_ptr($b->_raw_tensor_ptr);
    undef $b;
    is_deeply([ $kept->get_f32 ], [ 0.5, 1, 1.5, 2 ], 'a Lugh::Tensor already taken outlives its autograd tensor');
    is_deeply([ $a->get_data ], [ 9, 8, 7, 6 ], 'the process is usable after the croaks');
};

subtest 'sampling helpers called positionally (0.12 t/1003-memory-inference.t)' => sub {
    my $model = Lugh::Model->new(model => tiny_model($dir));
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 32, n_threads => 1);
    my @logits = $inference->forward_simple([ 1, 2, 3 ]);
    my $n_vocab = scalar @logits;
    my ($best) = sort { $logits[$b] <=> $logits[$a] || $a <=> $b } 0 .. $#logits;
    Lugh::srand(42);
    my $token = $inference->sample_top_p(\@logits, 0.9, 1.0);
    ok($token >= 0 && $token < $n_vocab, 'sample_top_p(\@logits, $top_p, $temperature)');
    Lugh::srand(42);
    is($inference->sample_top_p(\@logits, top_p => 0.9, temperature => 1.0), $token, '... the same as the named form');
    Lugh::srand(42);
    $token = $inference->sample_top_k(\@logits, 40, 1.0);
    Lugh::srand(42);
    is($inference->sample_top_k(\@logits, top_k => 40, temperature => 1.0), $token,
        'sample_top_k(\@logits, $top_k, $temperature) as the named form');
    is($inference->sample_top_k(\@logits, 1), $best, 'the values are applied: top_k 1 is the argmax');
    is($inference->sample_top_p(\@logits, 0.9, 0), $best, 'temperature 0 is greedy');
    croaks_like(sub { $inference->sample_top_k(\@logits, 40, 1.0, 5) }, qr/takes at most 2 values after the logits/,
        'too many positional values');
    croaks_like(sub { $inference->sample_top_k(\@logits, 1.5) }, qr/top_k must be an integer, got 1\.5/, 'a bad one');
    croaks_like(sub { $inference->sample_top_p(\@logits, 0.9, 'hot') }, qr/temperature must be a number/, 'a bad second one');
    croaks_like(sub { $inference->sample_top_p(\@logits, topp => 0.9) }, qr/unknown option 'topp'/, 'named options as before');
};

subtest "backends: 'auto' is listed and always available (0.12 t/0013-backend.t)" => sub {
    my @backends = Lugh::available_backends();
    ok(@backends > 0, 'available_backends returns at least one backend');
    ok((grep { $_ eq 'auto' } @backends), 'auto backend is always available');
    ok((grep { $_ eq 'CPU' } @backends), 'CPU backend should be available');
    is(Lugh::backend_count(), @backends - 1, 'backend_count equals backends minus auto');
    ok(Lugh::backend_available('auto'), 'auto is always available');
    is(Lugh::backend_available('NonExistentBackend123'), 0, 'a backend that does not exist: 0, not an empty string');
    is(Lugh::backend_available('CPU'), 1, 'the CPU: 1');
    is(Lugh::has_metal(), $^O eq 'darwin' ? Lugh::has_metal() : 0, 'has_metal is 0 or 1 as before');
    is(Lugh::backend_info('auto')->{name}, Lugh::best_backend(), "backend_info('auto') describes what auto picks");
    my $model = Lugh::Model->new(model => tiny_model($dir));
    ok(Lugh::Inference->new(model => $model, backend => 'auto', n_ctx => 16), "Inference->new(backend => 'auto')");
};

subtest 'Lugh::Prompt: get_format name, and 0.12 defaults for the fixed formats (0.12 t/0011-prompt.t)' => sub {
    is(Lugh::Prompt->get_format('chatml')->{name}, 'chatml', 'get_format has the name key');
    is(Lugh::Prompt->get_format('llama3')->{name}, 'llama3', '... for each format');
    my $text = Lugh::Prompt->new(format => 'llama3')->apply({ role => 'user', content => 'Hello!' });
    like($text, qr/\A<\|begin_of_text\|>/, 'llama3: BOS text by default');
    like($text, qr/<\|start_header_id\|>assistant<\|end_header_id\|>\n\n\z/, 'ends with the assistant header by default');
    $text = Lugh::Prompt->new(format => 'chatml')->apply({ role => 'user', content => 'Hello!' }, add_bos => 0);
    like($text, qr/<\|im_start\|>assistant\n\z/, 'chatml: ends with the assistant prompt');
    is(Lugh::Prompt->new(format => 'mistral')->apply({ role => 'user', content => 'Hi' }, add_bos => 0,
        add_generation_prompt => 0), '[INST] Hi [/INST]', 'both can be turned off');
    ok(Lugh::Prompt->has_format('ChatML'), 'format names are case-insensitive');
    is(Lugh::Prompt->new(format => 'ChatML')->format_name, 'chatml', '... in new');
    is_deeply([ Lugh::Prompt->available_formats ], [qw(chatml llama2 llama3 mistral gemma zephyr alpaca vicuna raw)],
        "available_formats in 0.12's order");
    my $f = Lugh::Prompt->get_format('llama2');
    is_deeply([ @$f{qw(bos_token eos_token)} ], [ '<s>', '</s>' ], "get_format's bos_token and eos_token");
    is(Lugh::Prompt->format_for_architecture($_->[0]), $_->[1], "format_for_architecture($_->[0])")
        for [ falcon => 'raw' ], [ gpt2 => 'raw' ], [ llama2 => 'llama2' ], [ phi2 => 'chatml' ], [ Gemma2 => 'gemma' ];
    is(Lugh::Prompt->new(format => 'chatml')->apply(), '', 'no messages: the empty string');
    is(Lugh::Prompt->new(format => 'chatml')->apply({ role => 'user', content => 'Hi' }, { role => 'assistant', content => 'Hel' }),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHel<|im_end|>\n",
        'no generation prompt after an assistant message');
    my $jinja = Lugh::Prompt->new(template => '{{ messages[0].content }}{% if add_generation_prompt %}|GEN{% endif %}');
    is($jinja->apply({ role => 'user', content => 'Hi' }), 'Hi', 'a Jinja template: add_generation_prompt off unless given');
    is($jinja->apply({ role => 'user', content => 'Hi' }, add_generation_prompt => 1), 'Hi|GEN', '... and on when given');
};

subtest 'get_trainable_weights: _n_tensors (0.12 t/0044-full-weight-training.t)' => sub {
    my $path = "$dir/created.gguf";
    Lugh::Model->create(file => $path, n_vocab => 256, n_embd => 64, n_layer => 2, n_head => 4, n_ff => 128, n_ctx => 32);
    ok(-f $path, 'Model->create(file => ...) writes the file');
    my $model = Lugh::Model->new(model => $path);
    my $weights = $model->get_trainable_weights(Lugh::Context->new(size => 512 * 1024 * 1024));
    ok(exists $weights->{_n_tensors}, '_n_tensors exists');
    is($weights->{_n_tensors}, scalar(keys %$weights), '... and counts the tensors');
    ok(!(grep { $_ eq '_n_tensors' } keys %$weights), '... without being one of the keys');
    my $n_tensors = delete $weights->{_n_tensors} || 0;
    delete $weights->{_model_id};
    cmp_ok($n_tensors, '>=', 10, 'delete returns the count, as 0.12 scripts read it');
    my @weights = values %$weights;
    is(scalar @weights, $n_tensors, 'values are the tensors');
    is(scalar(grep { ref $_ eq 'Lugh::Autograd::Tensor' } @weights), $n_tensors, '... each an autograd tensor');
    ok(exists $weights->{'token_embd.weight'} && exists $weights->{'output.weight'}, 'named by GGUF name');
    my $opt = Lugh::Optimizer::AdamW->new(lr => 0.01);
    $opt->add_param($_) for @weights;
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 32);
    my $ctx = Lugh::Context->new(size => 64 * 1024 * 1024);
    my $logits = Lugh::Train->forward(inference => $inference, context => $ctx, tokens => [ 1, 72, 101 ], train_lora => 0,
        train_full => 1);
    Lugh::Train->register_weight_tensors($logits, \@weights);
    my $loss = Lugh::Train->cross_entropy_loss($ctx, $logits, [ 72, 101, 108 ]);
    ok(eval { $loss->backward; $opt->step; 1 }, 'a training step on them') or diag $@;
};

done_testing;
