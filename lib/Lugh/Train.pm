package Lugh::Train;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;
require Lugh::Autograd;

our $VERSION = '0.20';

# Class methods (Lugh::Train->cross_entropy_loss(...)); a plain call works too.
sub _class_args { shift @_ if @_ && defined $_[0] && !ref $_[0] && $_[0] eq __PACKAGE__; return @_ }

sub cross_entropy_loss {
    my @args = _class_args(@_);
    unshift @args, undef if @args == 2;    # ($logits, \@targets): a context of its own
    my ($ctx, $logits, $targets, @more) = @args;
    Lugh::_croak('Usage: Lugh::Train->cross_entropy_loss($ctx, $logits, \@targets)') if @more || !defined $targets;
    Lugh::_croak('Lugh::Train->cross_entropy_loss: targets must be an array reference of class ids')
        unless ref $targets eq 'ARRAY';
    return _cross_entropy_loss($ctx, $Lugh::Autograd::GRAD_ENABLED, $logits, $targets);
}

sub mse_loss {
    my ($ctx, $predictions, $targets, @more) = _class_args(@_);
    Lugh::_croak('Usage: Lugh::Train->mse_loss($ctx, $predictions, $targets)') if @more || !defined $targets;
    return _mse_loss($ctx, $Lugh::Autograd::GRAD_ENABLED, $predictions, $targets);
}

# forward's options and defaults are the table of xs-rs/subs/train.rs; the
# session may be named inference or model, and the context context or ctx.
# record is the grad mode, not an option.
my %FORWARD_VALID = map { $_ => undef } grep { $_ ne 'record' } _forward_options(), qw(inference model ctx);

sub forward {
    my (@args) = _class_args(@_);
    my %opt = Lugh::_options('Lugh::Train->forward', \%FORWARD_VALID, @args);
    my %given = @args;
    my $inference = defined $opt{inference} ? $opt{inference} : $opt{model};
    Lugh::_croak('Lugh::Train->forward requires inference => $inference (a Lugh::Inference)') unless defined $inference;
    Lugh::_croak('Lugh::Train->forward requires tokens => \@tokens') unless defined $opt{tokens};
    Lugh::_croak('Lugh::Train->forward: tokens must be a non-empty array reference of token ids')
        unless ref $opt{tokens} eq 'ARRAY' && @{ $opt{tokens} };
    Lugh::_croak('Lugh::Train->forward requires lora => $adapter (made by Lugh::LoRA->create) or train_full => 1')
        unless defined $opt{lora} || $opt{train_full};
    my $ctx = defined $opt{context} ? $opt{context} : $opt{ctx};
    # a flag given as undef is false, as Perl reads it (not the default)
    my @flags = map { $_ => ($given{$_} ? 1 : 0) } grep { exists $given{$_} } qw(train_lora train_full);
    return _forward($inference, tokens => $opt{tokens}, lora => $opt{lora}, context => $ctx,
        record => $Lugh::Autograd::GRAD_ENABLED, @flags);
}

sub register_weight_tensors {
    my ($logits, $weights, @more) = _class_args(@_);
    Lugh::_croak('Usage: Lugh::Train->register_weight_tensors($logits, \@weights)')
        if @more || ref $weights ne 'ARRAY';
    _register_weight_tensors($logits, $weights);
    return;
}

sub batch_data {
    my ($data, @opts) = _class_args(@_);
    Lugh::_croak('Usage: Lugh::Train->batch_data(\@data, batch_size => 32, shuffle => 0)') unless ref $data eq 'ARRAY';
    my %opt = Lugh::_options('Lugh::Train->batch_data', { batch_size => 32, shuffle => 0 }, @opts);
    Lugh::_croak("Lugh::Train->batch_data: batch_size must be a positive integer, got "
        . (defined $opt{batch_size} ? $opt{batch_size} : 'undef'))
        unless defined $opt{batch_size} && $opt{batch_size} =~ /\A[1-9]\d*\z/;
    my @items = @$data;
    if ($opt{shuffle}) {    # Fisher-Yates on perl's rand, so srand makes it repeatable
        for (my $i = $#items; $i > 0; $i--) {
            my $j = int rand($i + 1);
            @items[ $i, $j ] = @items[ $j, $i ];
        }
    }
    my @batches;
    push @batches, [ splice @items, 0, $opt{batch_size} ] while @items;
    return @batches;
}

sub tokenize_batch {
    my ($tokenizer, $texts, @opts) = _class_args(@_);
    Lugh::_croak('Lugh::Train->tokenize_batch: a Lugh::Tokenizer is required')
        unless ref $tokenizer && eval { $tokenizer->can('encode') };
    Lugh::_croak('Lugh::Train->tokenize_batch: texts must be an array reference') unless ref $texts eq 'ARRAY';
    my %opt = Lugh::_options('Lugh::Train->tokenize_batch', { max_length => 512 }, @opts);
    my (@inputs, @targets);
    for my $text (@$texts) {
        my @tokens = $tokenizer->encode($text);
        splice @tokens, $opt{max_length} if @tokens > $opt{max_length};
        next if @tokens < 2;    # nothing to predict
        push @inputs,  [ @tokens[ 0 .. $#tokens - 1 ] ];
        push @targets, [ @tokens[ 1 .. $#tokens ] ];
    }
    return (\@inputs, \@targets);
}

sub training_step {
    my ($model, $optimizer, $inputs, $targets, @opts) = _class_args(@_);
    my %opt = Lugh::_options('Lugh::Train->training_step', { loss_fn => 'cross_entropy', ctx => undef }, @opts);
    Lugh::_croak('Lugh::Train->training_step: the ctx option is required') unless defined $opt{ctx};
    Lugh::_croak('Lugh::Train->training_step: the model must have a forward method')
        unless ref $model && eval { $model->can('forward') };
    my $loss_fn = $opt{loss_fn} eq 'cross_entropy' ? \&cross_entropy_loss
        : $opt{loss_fn} eq 'mse' ? \&mse_loss
        : Lugh::_croak("Lugh::Train->training_step: unknown loss_fn '$opt{loss_fn}' (cross_entropy or mse)");
    $optimizer->zero_grad if $optimizer;
    my $output = $model->forward($inputs);
    Lugh::_croak('Lugh::Train->training_step: the model\'s forward returned nothing') unless defined $output;
    my $loss = $loss_fn->($opt{ctx}, $output, $targets);
    $loss->backward;
    $optimizer->step if $optimizer;
    return ($loss->get_data)[0];
}

sub zero_grad {
    my @tensors = _class_args(@_);
    $_->zero_grad for grep { defined && ref && eval { $_->can('zero_grad') } } @tensors;
    return;
}

1;

__END__

=head1 NAME

Lugh::Train - losses and training-loop helpers for Lugh::Autograd

=head1 SYNOPSIS

    use Lugh;

    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $logits = Lugh::Autograd::Tensor->new($ctx, 'f32', 5, 2, { requires_grad => 1 });    # 2 rows of 5 classes
    my $loss = Lugh::Train->cross_entropy_loss($ctx, $logits, [ 1, 3 ]);
    printf "%.4f\n", ($loss->get_data)[0];    # 1.6094
    $loss->backward;
    printf "%.2f\n", $logits->grad->[1];    # -0.40

=head1 DESCRIPTION

The losses are L<Lugh::Autograd> ops: computed at once, and differentiated
by ggml's backward graph. The helpers batch data and run one optimizer step
of a model with a C<forward> method.

L</forward> trains a LoRA adapter on a language model: it runs the
model's own forward graph (the one inference builds, for every
architecture Lugh runs) in a form ggml can differentiate, and the loss's backward goes on through it to the adapter,
so the gradients are exact.

=head1 METHODS

=head2 forward

    use Lugh;
    use Lugh::Train;
    use Lugh::Optimizer;
    my $model = Lugh::Model->create(path => '/tmp/lugh-tiny.gguf', seed => 1);
    my $inf   = Lugh::Inference->new(model => $model, n_ctx => 64);
    my $lora  = Lugh::LoRA->create(model => $model, rank => 8, targets => [qw(attn_q attn_v ffn_down output)], seed => 1);
    my $opt   = Lugh::Optimizer::AdamW->new(lr => 1e-2, weight_decay => 0, params => [ $lora->trainable_parameters ]);
    my @seq = map { 4 + ($_ * 3) % 7 } 0 .. 16;
    for my $step (1 .. 60) {
        $opt->zero_grad;
        my $logits = Lugh::Train->forward(inference => $inf, tokens => [ @seq[0 .. 15] ], lora => $lora);
        my $loss = Lugh::Train->cross_entropy_loss($logits, [ @seq[1 .. 16] ]);
        $loss->backward;
        $opt->step;
        printf "%d %.4f\n", $step, ($loss->get_data)[0] if $step % 20 == 0;
    }

Runs the model of C<inference> (a L<Lugh::Inference>; alias C<model>)
over C<tokens> with the adapter C<lora> (one made by L<Lugh::LoRA/create>,
C<[$lora, $scale]>, or an array of adapters, of which the trainable ones
are trained) and returns the logits of every position, an
L<Lugh::Autograd::Tensor> of shape [n_vocab, n_tokens]. Each token
attends to those before it in the list, from position 0, with no KV cache
and without flash attention. Under L<Lugh::Autograd/no_grad> the logits
are a plain tensor; otherwise they keep the pass, and a C<backward> of a
loss computed from them adds each adapter matrix's gradient to its
C<grad>. A second C<backward> reruns the forward half first.

The pass runs on the CPU, with the session's thread count, on the weights
in their plain layout (a second mapping of the file, not a copy), and
holds its activations until the logits are freed. It is the inference
graph with these differences: tanh, GELU and layer norm are built from ops
ggml has gradients for; a mixture-of-experts layer runs every expert over
every token, weighted by its routing weight where the router chose it and
by 0 elsewhere (the same function, at n_expert/n_expert_used times the
work); and keys and values stay f32 where the inference cache keeps f16.
So the logits equal the inference logits of each prefix to about 1e-3
(f32 weights), not bit for bit. Quantized weights stay quantized: their
gradients (of the weights' dequantized values) are exact, but the
forward's matmuls quantize their activations, so a finite-difference check
wants a model saved with C<dequantize =E<gt> 1> (L<Lugh::Model/save>),
which also trains about three times faster.

With C<train_full =E<gt> 1> the model's own weights train too: the pass
reads the trainable copies that L<Lugh::Model/get_trainable_weights>
returns (made on first use) in place of the file's, and the backward
gives each its gradient. C<train_lora> (default 1) trains the adapters
given; with it off they are applied as they are. One of the two must have
something to train.

C<context> (alias C<ctx>) is the L<Lugh::Context> the logits are made in;
without one they get a context of their own, freed with them. Croaks name
the problem: nothing to train, an adapter of another model, a token out
of range, more tokens than the session's C<n_ctx>.

=head2 register_weight_tensors

    my $w = $model->get_trainable_weights;
    my $logits = Lugh::Train->forward(inference => $inf, tokens => \@in, train_full => 1);
    Lugh::Train->register_weight_tensors($logits, [ @$w{qw(blk.0.attn_q.weight blk.0.attn_v.weight)} ]);
    Lugh::Train->cross_entropy_loss($logits, \@targets)->backward;   # only those two get gradients

Limits which of the tensors a L</forward> pass trains get gradients from
its backward pass (the others keep theirs); an empty list gives them to
all again. Each must be one the pass trains, and C<$logits> must come from
C<forward> with gradients on; else it croaks.

=head2 cross_entropy_loss

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $logits = Lugh::Autograd::Tensor->new($ctx, 'f32', 5);
    $logits->set_data(1, 2, 3, 4, 5);
    printf "%.4f\n", (Lugh::Train->cross_entropy_loss($ctx, $logits, [4])->get_data)[0];    # 0.4519

C<cross_entropy_loss($ctx, $logits, \@targets)>: C<$logits> has one row of
class scores per example (C<[n_classes, n_rows]>) and C<\@targets> one class
id per row; the loss is the mean over rows of C<-log softmax(row)[target]>
(ggml's C<cross_entropy_loss>). Its gradient is C<(softmax - one_hot) / n_rows>.

=head2 mse_loss

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $p = Lugh::Autograd::Tensor->new($ctx, 'f32', 3);
    $p->set_data(1, 2, 3);
    my $t = Lugh::Autograd::Tensor->new($ctx, 'f32', 3);
    $t->set_data(2, 2, 2);
    printf "%.4f\n", (Lugh::Train->mse_loss($ctx, $p, $t)->get_data)[0];    # 0.6667

C<mse_loss($ctx, $predictions, $targets)>: C<sum((p - t)**2) / n> over tensors with
the same number of elements.

=head2 batch_data

    my @batches = Lugh::Train->batch_data([ 1 .. 10 ], batch_size => 3);
    print join(' ', map { scalar @$_ } @batches), "\n";    # 3 3 3 1

Splits an array reference into array references of C<batch_size> (32)
items, in order or, with C<< shuffle => 1 >>, shuffled with perl's C<rand>
(so C<srand> repeats it).

=head2 tokenize_batch

    my $model = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $tok = Lugh::Tokenizer->new(model => $model);
    my ($inputs, $targets) = Lugh::Train->tokenize_batch($tok, [ 'Hello world, again' ], max_length => 8);
    print scalar(@{ $inputs->[0] }) == scalar(@{ $targets->[0] }) ? "aligned\n" : "not\n";

Encodes each text (truncated to C<max_length> tokens, 512) and returns
C<(\@inputs, \@targets)>: each text's tokens without its last one, and
without its first one (next-token prediction). Texts of fewer than two
tokens are left out.

=head2 training_step

    package Linear { sub new { bless { w => $_[1] }, $_[0] } sub forward { Lugh::Autograd::Ops->mul($_[0]{ctx}, $_[1], $_[0]{w}) } }
    my $ctx = Lugh::Context->new(mem_size => 16 * 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 1, { requires_grad => 1 });
    my $m = Linear->new($w); $m->{ctx} = $ctx;
    my $x = Lugh::Autograd::Tensor->new($ctx, 'f32', 2); $x->set_data(1, 2);
    my $y = Lugh::Autograd::Tensor->new($ctx, 'f32', 2); $y->set_data(2, 4);
    my $opt = Lugh::Optimizer::SGD->new(lr => 0.1, params => [$w]);
    my $loss = Lugh::Train->training_step($m, $opt, $x, $y, loss_fn => 'mse', ctx => $ctx);
    printf "%.2f\n", $loss;    # 10.00

C<training_step($model, $optimizer, $inputs, $targets, ctx =E<gt> $ctx,
loss_fn =E<gt> 'cross_entropy' | 'mse')>: zeroes the optimizer's gradients,
calls C<< $model->forward($inputs) >>, computes the loss in C<$ctx>,
back-propagates, steps the optimizer and returns the loss.

=head2 zero_grad

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 1, { requires_grad => 1 });
    $w->backward;
    Lugh::Train->zero_grad($w);
    print $w->grad->[0], "\n";    # 0

Zeroes the gradients of the tensors given.

=head1 SEE ALSO

L<Lugh::Autograd>, L<Lugh::Optimizer>

=cut
