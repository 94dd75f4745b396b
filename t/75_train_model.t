use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Spec;
use lib 't/lib';
use LughTest qw(arch_models croaks_like require_model steps_keep_memory_flat);
use Lugh;
use Lugh::Autograd;
use Lugh::Train;
use Lugh::Optimizer;
use Lugh::LoRA;

# Training through the model's own graph (issue #17): Lugh::Model->create,
# trainable LoRA adapters (create, save as llama.cpp reads them), and
# Lugh::Train->forward, whose gradients come from ggml's backward graph
# and are checked here against central differences of the loss.

my $dir = tempdir(CLEANUP => 1);

sub loss_of {
    my ($inf, $lora, $in, $targets) = @_;
    return Lugh::Autograd::no_grad {
        my $logits = Lugh::Train->forward(inference => $inf, tokens => $in, lora => $lora);
        (Lugh::Train->cross_entropy_loss($logits, $targets)->get_data)[0];
    };
}

# Every trainable value moved by $step along the unit direction of the
# gradient: (L(+h) - L(-h)) / 2h is then the gradient's norm.
sub directional_check {
    my ($inf, $lora, $in, $targets, $h) = @_;
    my @params = $lora->trainable_parameters;
    $_->zero_grad for @params;
    my $logits = Lugh::Train->forward(inference => $inf, tokens => $in, lora => $lora);
    Lugh::Train->cross_entropy_loss($logits, $targets)->backward;
    my @grads  = map { $_->grad } @params;
    my @values = map { [ $_->get_data ] } @params;
    my $norm = 0;
    $norm += $_**2 for map {@$_} @grads;
    $norm = sqrt $norm;
    my @loss;
    for my $sign (1, -1) {
        for my $i (0 .. $#params) {
            my ($v, $g) = ($values[$i], $grads[$i]);
            $params[$i]->set_data(map { $v->[$_] + $sign * $h * $g->[$_] / $norm } 0 .. $#$v);
        }
        push @loss, loss_of($inf, $lora, $in, $targets);
    }
    $params[$_]->set_data(@{ $values[$_] }) for 0 .. $#params;
    return ($norm, ($loss[0] - $loss[1]) / (2 * $h));
}

# Central differences of the loss for a few elements of each tensor: its
# two largest gradients and a random one (gradients below the f32 loss's
# resolution left out). The step is 0.05, or smaller where the gradient is
# steep (so that the loss moves by about 0.01: curvature spoils a larger
# one, f32 rounding a smaller). Gives the worst relative error and the count.
sub elementwise_check {
    my ($params, $loss_fn) = @_;
    my ($worst, $checked) = (0, 0);
    for my $p (@$params) {
        my @v = $p->get_data;
        my @g = @{ $p->grad };
        my @order = sort { abs($g[$b]) <=> abs($g[$a]) } 0 .. $#g;
        for my $i (@order[ 0, 1 ], int rand @v) {
            next if abs($g[$i]) < 1e-3;
            my $h = 0.05 / (abs($g[$i]) > 0.1 ? 10 * abs($g[$i]) : 1);
            my @up = @v;
            $up[$i] += $h;
            $p->set_data(@up);
            my $loss_up = $loss_fn->();
            my @down = @v;
            $down[$i] -= $h;
            $p->set_data(@down);
            my $loss_down = $loss_fn->();
            $p->set_data(@v);
            my $numeric = ($loss_up - $loss_down) / (2 * $h);
            my $err = abs($g[$i] - $numeric) / abs($numeric);
            $worst = $err if $err > $worst;
            $checked++;
        }
    }
    return ($worst, $checked);
}

sub randomize {
    my ($lora, $size) = @_;
    for my $p ($lora->trainable_parameters) {
        $p->set_data(map { (rand() - 0.5) * $size } 1 .. $p->nelements);
    }
}

my $tiny_path = File::Spec->catfile($dir, 'tiny.gguf');

subtest 'Model->create' => sub {
    my $model = Lugh::Model->create(path => $tiny_path, seed => 1);
    isa_ok($model, 'Lugh::Model');
    ok(-s $tiny_path, 'the file is written');
    is($model->architecture, 'llama', 'a llama model');
    is($model->n_vocab, 256, 'default n_vocab');
    is($model->n_embd,  64,  'default n_embd');
    is($model->n_layer, 2,   'default n_layer');
    is($model->tensor_type_name('blk.0.attn_q.weight'), 'f32', 'f32 weights');
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    my @ids = $tokenizer->encode('hi', add_special => 0);
    ok(@ids >= 1, 'its byte vocabulary encodes text');
    my $again = Lugh::Model->create(path => File::Spec->catfile($dir, 'again.gguf'), seed => 1);
    my $inf1 = Lugh::Inference->new(model => $model, n_ctx => 32, n_threads => 1);
    my $inf2 = Lugh::Inference->new(model => $again, n_ctx => 32, n_threads => 1);
    is_deeply([ $inf1->forward(tokens => [ 5, 6 ]) ], [ $inf2->forward(tokens => [ 5, 6 ]) ], 'the same seed, the same model');
    my $custom = Lugh::Model->create(path => File::Spec->catfile($dir, 'c.gguf'), n_vocab => 300, n_embd => 32,
        n_layer => 1, n_head => 2, n_head_kv => 1, n_ff => 48, n_ctx => 64);
    is($custom->n_vocab, 300, 'n_vocab beyond the bytes');
    croaks_like(sub { Lugh::Model->create(n_embd => 64) }, qr/requires 'path'/, 'path is required');
    croaks_like(sub { Lugh::Model->create(path => "$dir/x.gguf", n_embd => 65) }, qr/divisible by n_head/,
        'n_embd must split into heads');
    croaks_like(sub { Lugh::Model->create(path => "$dir/x.gguf", n_head => 4, n_head_kv => 3) },
        qr/multiple of n_head_kv/, 'n_head_kv must divide n_head');
    croaks_like(sub { Lugh::Model->create(path => "$dir/x.gguf", n_layer => 0) }, qr/n_layer must be between/,
        'n_layer 0');
    croaks_like(sub { Lugh::Model->create(path => "$dir/x.gguf", architecture => 'gpt2') }, qr/makes llama models/,
        'only llama');
    croaks_like(sub { Lugh::Model->create(path => "$dir/x.gguf", layers => 2) }, qr/unknown option 'layers'/,
        'unknown options');
    croaks_like(sub { Lugh::Model->create(path => "$dir/no/such/dir/x.gguf") }, qr/cannot write/,
        'an unwritable path');
};

my $tiny = Lugh::Model->new(model => $tiny_path);
my $inf  = Lugh::Inference->new(model => $tiny, n_ctx => 64, n_threads => 2, flash_attn => 0);

subtest 'LoRA->create' => sub {
    my $lora = Lugh::LoRA->create(model => $tiny, rank => 8, alpha => 16, seed => 2);
    ok($lora->trainable, 'trainable');
    is($lora->format, 'trainable', 'format');
    is($lora->alpha, 16, 'alpha');
    is($lora->scale, 1, 'scale');
    is_deeply([ $lora->weight_names ],
        [ map { ("blk.$_.attn_q.weight", "blk.$_.attn_v.weight") } 0, 1 ], 'default targets attn_q and attn_v');
    my $a = $lora->get_weight_tensor('blk.0.attn_q.weight', 'a');
    my $b = $lora->get_weight_tensor('blk.0.attn_q.weight', 'B');
    isa_ok($a, 'Lugh::Autograd::Tensor');
    ok($a->requires_grad, 'A requires a gradient');
    is_deeply([ $a->shape ], [ 64, 8 ], 'A is [n_in, rank]');
    is_deeply([ $b->shape ], [ 8, 64 ], 'B is [rank, n_out]');
    ok((grep { $_ != 0 } $a->get_data), 'A is random');
    ok(!(grep { $_ != 0 } $b->get_data), 'B is zero');
    is(scalar(my @p = $lora->trainable_parameters), 8, 'A and B of four weights');
    my $v = Lugh::LoRA->create(model => $tiny, targets => [qw(attn_k attn_v ffn_down output)], scale => 0.5);
    is($v->scale, 0.5, 'scale option');
    is_deeply([ $v->get_weight_tensor('blk.1.ffn_down.weight', 'a')->shape ], [ 128, 16 ], 'ffn_down takes n_ff');
    is_deeply([ $v->get_weight_tensor('blk.0.attn_k.weight', 'b')->shape ], [ 16, 32 ], 'GQA keys are narrower');
    ok((grep { $_ eq 'output.weight' } $v->weight_names), 'the output projection');
    croaks_like(sub { Lugh::LoRA->create(model => $tiny, rank => 0) }, qr/rank must be between 1 and 256, got 0 \(an integer\)/,
        'rank 0');
    croaks_like(sub { Lugh::LoRA->create(model => $tiny, rank => 512) }, qr/between 1 and 256/, 'rank 512');
    croaks_like(sub { Lugh::LoRA->create(rank => 4) }, qr/requires 'model'/, 'model is required');
    croaks_like(sub { Lugh::LoRA->create(model => $tiny, targets => ['attn_x']) }, qr/'attn_x' matches no weight/,
        'an unknown target');
    croaks_like(sub { Lugh::LoRA->create(model => $tiny, targets => ['token_embd']) }, qr/not a projection/,
        'the embeddings are not a target');
    croaks_like(sub { Lugh::LoRA->create(model => 'x') }, qr/model must be a Lugh::Model/, 'a model object');
    croaks_like(sub { $lora->get_weight_tensor('blk.9.attn_q.weight', 'a') }, qr/LoRA weight .* not found/,
        'an unknown weight');
    croaks_like(sub { $lora->get_weight_tensor('blk.0.attn_q.weight', 'c') }, qr/type must be 'a' or 'b'/,
        'a or b');
    croaks_like(sub { $lora->save("$dir/x.safetensors") }, qr/must end with \.gguf/, 'save writes .gguf');
};

subtest 'gradients against central differences (tiny model, f32)' => sub {
    srand 7;
    my $lora = Lugh::LoRA->create(model => $tiny, rank => 4, alpha => 8,
        targets => [qw(attn_q attn_k attn_v attn_output ffn_gate ffn_up ffn_down output)], seed => 3);
    randomize($lora, 0.2);
    my @in      = map { 4 + (7 * $_) % 50 } 0 .. 9;
    my @targets = map { 4 + (11 * $_) % 50 } 0 .. 9;
    my $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, lora => $lora);
    Lugh::Train->cross_entropy_loss($logits, \@targets)->backward;
    my ($worst, $checked) = elementwise_check([ $lora->trainable_parameters ], sub { loss_of($inf, $lora, \@in, \@targets) });
    cmp_ok($checked, '>=', 20, "$checked elements checked");
    cmp_ok($worst, '<=', 1e-2, sprintf 'worst relative error %.2e', $worst);
    my ($norm, $numeric) = directional_check($inf, $lora, \@in, \@targets, 1e-2);
    cmp_ok(abs($numeric - $norm) / $norm, '<=', 1e-2, sprintf 'along the gradient: |g| %.6f, numeric %.6f', $norm,
        $numeric);
};

subtest 'the logits are the model\'s' => sub {
    my $lora = Lugh::LoRA->create(model => $tiny, rank => 4, targets => [qw(attn_q ffn_down output)], seed => 4);
    randomize($lora, 0.2);
    my @in = (5, 9, 14, 20, 27);
    my $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, lora => $lora);
    is_deeply([ $logits->shape ], [ 256, 5 ], 'one row per token');
    my @all = $logits->get_data;
    my $worst = 0;
    for my $n (1 .. @in) {
        my @row = @all[ 256 * ($n - 1) .. 256 * $n - 1 ];
        my @ref = $inf->forward(tokens => [ @in[ 0 .. $n - 1 ] ], lora => $lora);
        for (0 .. 255) { my $d = abs($row[$_] - $ref[$_]); $worst = $d if $d > $worst }
    }
    # the inference's KV cache holds keys and values in f16
    cmp_ok($worst, '<=', 1e-2, sprintf 'each row equals the inference logits of its prefix (worst %.5f)', $worst);

    my $path = "$dir/adapter.gguf";
    ok($lora->save($path), 'saved');
    open my $fh, '<:raw', $path or die;
    read $fh, my $magic, 4;
    is($magic, 'GGUF', 'a GGUF file');
    my $loaded = Lugh::LoRA->new(adapter => $path, model => $tiny);
    ok(!$loaded->trainable, 'a loaded adapter is not trainable');
    is_deeply([ sort $loaded->weight_names ], [ sort $lora->weight_names ], 'the same weights');
    is($loaded->alpha, $lora->alpha, 'the same alpha');
    is_deeply([ $inf->forward(tokens => \@in, lora => $loaded) ], [ $inf->forward(tokens => \@in, lora => $lora) ],
        'the saved adapter gives the same logits');
    croaks_like(sub { $loaded->trainable_parameters }, qr/only available on trainable LoRA/,
        'trainable_parameters of a loaded adapter');
    croaks_like(sub { $loaded->get_weight_tensor('blk.0.attn_q.weight', 'a') }, qr/only available on trainable/,
        'get_weight_tensor of a loaded adapter');
    croaks_like(sub { $loaded->save("$dir/again.gguf") }, qr/only adapters made by Lugh::LoRA->create/,
        'a loaded adapter is not saved again');
};

subtest 'a tiny model learns a toy sequence to near-zero loss' => sub {
    my $lora = Lugh::LoRA->create(model => $tiny, rank => 8, alpha => 16,
        targets => [qw(attn_q attn_v ffn_down output)], seed => 5);
    my @seq = map { 4 + ($_ * 3) % 7 } 0 .. 24;    # a repeating pattern
    my @in = @seq[ 0 .. 23 ];
    my @targets = @seq[ 1 .. 24 ];
    my $opt = Lugh::Optimizer::AdamW->new(lr => 1e-2, weight_decay => 0, params => [ $lora->trainable_parameters ]);
    my ($first, $loss);
    for my $step (1 .. 80) {
        $opt->zero_grad;
        my $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, lora => $lora);
        my $l = Lugh::Train->cross_entropy_loss($logits, \@targets);
        $l->backward;
        $opt->step;
        $loss = ($l->get_data)[0];
        $first //= $loss;
    }
    cmp_ok($first, '>', 4, sprintf 'starts near log(256) (%.3f)', $first);
    cmp_ok($loss, '<', 0.02, sprintf 'ends near zero (%.4f)', $loss);
    my @greedy;
    Lugh::Autograd::no_grad {
        my @row = (Lugh::Train->forward(inference => $inf, tokens => \@in, lora => $lora)->get_data);
        for my $t (0 .. $#in) {
            my ($best) = sort { $row[ 256 * $t + $b ] <=> $row[ 256 * $t + $a ] } 0 .. 255;
            push @greedy, $best;
        }
    };
    is_deeply(\@greedy, \@targets, 'it predicts every next token');
};

subtest 'train_full: the model\'s own weights' => sub {
    my $weights = $tiny->get_trainable_weights;
    is(ref $weights, 'HASH', 'a hash of name => tensor');
    is(scalar(keys %$weights), 2 + 2 * 9 + 1 - 0, 'every f32 weight of the tiny model');
    isa_ok($weights->{'blk.0.attn_q.weight'}, 'Lugh::Autograd::Tensor');
    is_deeply([ $weights->{'token_embd.weight'}->shape ], [ 64, 256 ], 'shapes as in the file');
    my $again = $tiny->get_trainable_weights;
    $weights->{'output_norm.weight'}->set_data((1.5) x 64);
    is(($again->{'output_norm.weight'}->get_data)[0], 1.5, 'the same tensors on every call');
    $weights->{'output_norm.weight'}->set_data((1) x 64);

    my @in      = map { 4 + (5 * $_) % 40 } 0 .. 9;
    my @targets = map { 4 + (9 * $_) % 40 } 0 .. 9;
    my @params = map { $weights->{$_} } sort keys %$weights;
    $_->zero_grad for @params;
    my $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, train_full => 1);
    Lugh::Train->cross_entropy_loss($logits, \@targets)->backward;
    my @grads = map { $_->grad } @params;
    my @values = map { [ $_->get_data ] } @params;
    my $norm = 0;
    $norm += $_**2 for map {@$_} @grads;
    $norm = sqrt $norm;
    my $h = 1e-2;
    my @loss;
    for my $sign (1, -1) {
        for my $i (0 .. $#params) {
            my ($v, $g) = ($values[$i], $grads[$i]);
            $params[$i]->set_data(map { $v->[$_] + $sign * $h * $g->[$_] / $norm } 0 .. $#$v);
        }
        push @loss, Lugh::Autograd::no_grad {
            my $l = Lugh::Train->forward(inference => $inf, tokens => \@in, train_full => 1);
            (Lugh::Train->cross_entropy_loss($l, \@targets)->get_data)[0];
        };
    }
    $params[$_]->set_data(@{ $values[$_] }) for 0 .. $#params;
    my $numeric = ($loss[0] - $loss[1]) / (2 * $h);
    cmp_ok(abs($numeric - $norm) / $norm, '<=', 1e-2,
        sprintf 'every weight along the gradient: |g| %.6f, numeric %.6f', $norm, $numeric);
    ok((grep { $_ != 0 } @{ $weights->{'token_embd.weight'}->grad }), 'the embeddings get a gradient');
    ok((grep { $_ != 0 } @{ $weights->{'blk.1.ffn_norm.weight'}->grad }), 'so do the norms');

    # register_weight_tensors: only those get gradients
    $_->zero_grad for @params;
    $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, train_full => 1);
    Lugh::Train->register_weight_tensors($logits, [ $weights->{'blk.0.attn_q.weight'} ]);
    Lugh::Train->cross_entropy_loss($logits, \@targets)->backward;
    ok((grep { $_ != 0 } @{ $weights->{'blk.0.attn_q.weight'}->grad }), 'a registered weight gets its gradient');
    ok(!(grep { $_ != 0 } @{ $weights->{'blk.0.attn_k.weight'}->grad }), 'the others none');
    my $lora = Lugh::LoRA->create(model => $tiny, rank => 2, seed => 1);
    croaks_like(sub { Lugh::Train->register_weight_tensors($logits, [ ($lora->trainable_parameters)[0] ]) },
        qr/weight 0 .* is not trained by this forward pass/, 'a tensor the pass does not train');
    croaks_like(sub { Lugh::Train->register_weight_tensors($weights->{'blk.0.attn_q.weight'}, []) },
        qr/not from Lugh::Train->forward/, 'tensors that are not training logits');
    croaks_like(sub { Lugh::Train->register_weight_tensors($logits, 'x') }, qr/Usage/, 'an array of weights');

    # both at once: the adapter and the weights
    $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, train_full => 1, lora => $lora);
    Lugh::Train->cross_entropy_loss($logits, \@targets)->backward;
    ok((grep { $_ != 0 } @{ ($lora->trainable_parameters)[1]->grad }), 'with lora and train_full both train (B: A\'s is 0 while B is)');

    my $opt = Lugh::Optimizer::AdamW->new(lr => 1e-2, weight_decay => 0, params => \@params);
    my @seq = map { 4 + ($_ * 3) % 7 } 0 .. 24;
    my ($first, $last);
    for (1 .. 60) {
        $opt->zero_grad;
        my $l = Lugh::Train->cross_entropy_loss(
            Lugh::Train->forward(inference => $inf, tokens => [ @seq[ 0 .. 23 ] ], train_full => 1), [ @seq[ 1 .. 24 ] ]);
        $l->backward;
        $opt->step;
        $last = ($l->get_data)[0];
        $first //= $last;
    }
    cmp_ok($last, '<', 0.02, sprintf 'full training learns the toy task too (%.3f -> %.4f)', $first, $last);
    $params[$_]->set_data(@{ $values[$_] }) for 0 .. $#params;    # as made, for the tests after
};

subtest 'SmolLM2: the full model loss against central differences' => sub {
    my $path = require_model('smollm2-135m-q4_1');
    # in f32: a quantized model's matmuls quantize their activations too,
    # which makes the loss a step function at the scale of a difference
    my $f32 = File::Spec->catfile($dir, 'smollm2-f32.gguf');
    Lugh::Model->new(model => $path)->save($f32, dequantize => 1);
    my $model = Lugh::Model->new(model => $f32);
    is($model->tensor_type_name('blk.0.ffn_down.weight'), 'f32', 'dequantized');
    my $session = Lugh::Inference->new(model => $model, n_ctx => 32, n_threads => 2, flash_attn => 0);
    srand 11;
    my $lora = Lugh::LoRA->create(model => $model, rank => 4, alpha => 8, targets => [qw(attn_q attn_v ffn_down)], seed => 3);
    randomize($lora, 0.1);
    my $weights = $model->get_trainable_weights;
    my @norms = @$weights{qw(blk.0.attn_norm.weight blk.15.ffn_norm.weight blk.29.attn_norm.weight output_norm.weight)};
    my $tok = Lugh::Tokenizer->new(model => $model);
    my @ids = $tok->encode('The quick brown fox jumps over the lazy dog.');
    my @in = @ids[ 0 .. $#ids - 1 ];
    my @targets = @ids[ 1 .. $#ids ];
    my $loss_fn = sub {
        Lugh::Autograd::no_grad {
            my $l = Lugh::Train->forward(inference => $session, tokens => \@in, lora => $lora, train_full => 1);
            (Lugh::Train->cross_entropy_loss($l, \@targets)->get_data)[0];
        };
    };
    my @lora_params = ($lora->trainable_parameters)[ 0, 1, -2, -1 ];
    $_->zero_grad for @lora_params, @norms;
    my $logits = Lugh::Train->forward(inference => $session, tokens => \@in, lora => $lora, train_full => 1);
    Lugh::Train->cross_entropy_loss($logits, \@targets)->backward;
    my ($worst, $checked) = elementwise_check([ @lora_params, @norms ], $loss_fn);
    cmp_ok($checked, '>=', 16, "$checked elements of LoRA matrices and norm weights checked");
    cmp_ok($worst, '<=', 1e-2, sprintf 'worst relative error %.2e', $worst);
};

subtest 'Model->save' => sub {
    my $model = Lugh::Model->create(path => "$dir/tosave.gguf", seed => 21, n_layer => 1);
    my $session = Lugh::Inference->new(model => $model, n_ctx => 32, n_threads => 1, flash_attn => 0);
    $model->save("$dir/copy.gguf");
    my $copy = Lugh::Model->new(model => "$dir/copy.gguf");
    is_deeply([ Lugh::Inference->new(model => $copy, n_ctx => 32, n_threads => 1, flash_attn => 0)->forward(tokens => [ 5, 6 ]) ],
        [ $session->forward(tokens => [ 5, 6 ]) ], 'a saved copy computes the same');
    my $weights = $model->get_trainable_weights;
    my $opt = Lugh::Optimizer::SGD->new(lr => 0.5, params => [ values %$weights ]);
    my $logits = Lugh::Train->forward(inference => $session, tokens => [ 5, 6, 7 ], train_full => 1);
    Lugh::Train->cross_entropy_loss($logits, [ 6, 7, 8 ])->backward;
    $opt->step;
    my @trained = Lugh::Autograd::no_grad {
        (Lugh::Train->forward(inference => $session, tokens => [ 5, 6, 7 ], train_full => 1)->get_data)[ 512 .. 767 ];
    };
    $model->save("$dir/trained.gguf");
    my $reloaded = Lugh::Model->new(model => "$dir/trained.gguf");
    my @logits = Lugh::Inference->new(model => $reloaded, n_ctx => 32, n_threads => 1, flash_attn => 0)
        ->forward(tokens => [ 5, 6, 7 ]);
    my $worst = 0;
    for (0 .. 255) { my $d = abs($logits[$_] - $trained[$_]); $worst = $d if $d > $worst }
    cmp_ok($worst, '<=', 1e-2, sprintf 'the saved model holds the trained weights (worst difference %.5f)', $worst);
    croaks_like(sub { $model->save("$dir/x.bin") }, qr/must end with \.gguf/, 'a .gguf path');
    croaks_like(sub { $model->save("$dir/x.gguf", quantize => 1) }, qr/unknown option 'quantize'/, 'options');
    croaks_like(sub { $model->save("$dir/none/x.gguf") }, qr/cannot write/, 'an unwritable path');
};

subtest '1,000 training steps keep memory flat' => sub {
    my $live = Lugh::_live_objects();
    {
        my $lora = Lugh::LoRA->create(model => $tiny, rank => 4, targets => [qw(attn_q ffn_down)], seed => 8);
        my $opt = Lugh::Optimizer::AdamW->new(lr => 1e-3, params => [ $lora->trainable_parameters ]);
        my @in = map { 4 + $_ % 9 } 0 .. 15;
        my @targets = map { 4 + ($_ + 1) % 9 } 0 .. 15;
        my $step = sub {
            $opt->zero_grad;
            my $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, lora => $lora);
            my $loss = Lugh::Train->cross_entropy_loss($logits, \@targets);
            $loss->backward;
            $opt->step;
            ($loss->get_data)[0];
        };
        steps_keep_memory_flat($step);
    }
    is(Lugh::_live_objects(), $live, 'every object of the loop was freed');
};

subtest 'forward: arguments and errors' => sub {
    my $lora = Lugh::LoRA->create(model => $tiny, rank => 2, seed => 6);
    my $ctx = Lugh::Context->new(mem_size => 4 << 20);
    my $logits = Lugh::Train->forward(inference => $inf, tokens => [ 5, 6 ], lora => $lora, context => $ctx);
    ok($logits->requires_grad, 'the logits require a gradient');
    ok(!$logits->is_leaf, 'and remember the model');
    my $plain = Lugh::Autograd::no_grad { Lugh::Train->forward(model => $inf, tokens => [ 5, 6 ], lora => $lora) };
    ok(!$plain->requires_grad, 'under no_grad they do not');
    # backward twice: the second reruns the forward half
    my $loss = Lugh::Train->cross_entropy_loss($logits, [ 6, 7 ]);
    $loss->backward;
    my @once = @{ ($lora->trainable_parameters)[0]->grad };
    $loss->backward;
    my @twice = @{ ($lora->trainable_parameters)[0]->grad };
    my $worst = 0;
    for (0 .. $#once) { my $d = abs($twice[$_] - 2 * $once[$_]); $worst = $d if $d > $worst }
    cmp_ok($worst, '<=', 1e-6, 'a second backward adds the same gradient again');

    croaks_like(sub { Lugh::Train->forward(tokens => [1], lora => $lora) }, qr/requires inference/, 'inference');
    croaks_like(sub { Lugh::Train->forward(inference => $inf, lora => $lora) }, qr/requires tokens/, 'tokens');
    croaks_like(sub { Lugh::Train->forward(inference => $inf, tokens => [], lora => $lora) }, qr/non-empty/,
        'no tokens');
    croaks_like(sub { Lugh::Train->forward(inference => $inf, tokens => [ 1, 999 ], lora => $lora) },
        qr/999.*out of range|out of range.*999/, 'a token outside the vocabulary');
    croaks_like(sub { Lugh::Train->forward(inference => $inf, tokens => [ (5) x 65 ], lora => $lora) },
        qr/do not fit the session's context of 64/, 'more tokens than the context');
    croaks_like(sub { Lugh::Train->forward(inference => $inf, tokens => [1]) }, qr/requires lora .* or train_full/,
        'lora or train_full');
    croaks_like(sub { Lugh::Train->forward(inference => 'x', tokens => [1], lora => $lora) },
        qr/must be a Lugh::Inference/, 'an inference object');
    croaks_like(sub { Lugh::Train->forward(inference => $inf, tokens => [1], lora => $lora, train_lora => 0) },
        qr/nothing to train/, 'train_lora => 0 and no train_full');
    croaks_like(sub { Lugh::Train->forward(inference => $inf, tokens => [1], lora => $lora, epochs => 2) },
        qr/unknown option 'epochs'/, 'unknown options');
    my $other = Lugh::Model->create(path => "$dir/other.gguf", seed => 9, n_layer => 1);
    my $foreign = Lugh::LoRA->create(model => $other, rank => 2);
    croaks_like(sub { Lugh::Train->forward(inference => $inf, tokens => [1], lora => $foreign) },
        qr/was loaded for the model/, 'an adapter of another model');
    my $after = Lugh::Train->forward(inference => $inf, tokens => [ 5, 6 ], lora => $lora);
    ok($after, 'the session still trains after the errors');
};

subtest 'every architecture: gradients along their direction (f32 weights; mixture-of-experts too)' => sub {
    my @cases = qw(falcon gemma gemma2 gemma3 gpt2 granite llama-fused-qkv-bias llama3-rope-freqs olmo2-swa phi3
        qwen2 qwen3 stablelm2-12b starcoder2 mixtral qwen2moe qwen3moe);
    my $models = arch_models(File::Spec->catdir($dir, 'arch'), 1,
        map {qq({"name":"$_-f32","base":"$_","f32":true})} @cases);
    plan skip_all => $models unless ref $models;
    for my $name (sort keys %$models) {
        my $model = Lugh::Model->new(model => $models->{$name});
        my %kinds = map { /^blk\.\d+\.(\w+)\.weight\z/ ? ($1 => 1) : () } $model->tensor_names;
        my @targets = grep { $kinds{$_} } qw(attn_q attn_qkv attn_v ffn_down);
        my $session = Lugh::Inference->new(model => $model, n_ctx => 64, n_threads => 2, flash_attn => 0);
        my $lora = Lugh::LoRA->create(model => $model, rank => 4, alpha => 8, targets => \@targets, seed => 3);
        randomize($lora, 0.1);
        my $nv = $model->n_vocab;
        my @in      = map { (7 + 31 * $_) % $nv } 0 .. 7;
        my @targets_ = map { (11 + 17 * $_) % $nv } 0 .. 7;
        # a small step: a larger one may cross a router's choice (a real
        # jump of the loss, in inference too)
        my ($norm, $numeric) = directional_check($session, $lora, \@in, \@targets_, 1e-3);
        cmp_ok(abs($numeric - $norm) / $norm, '<=', 1e-2,
            sprintf '%s (%s): |g| %.6f, numeric %.6f', $name, $model->architecture, $norm, $numeric);
    }
};

done_testing;
