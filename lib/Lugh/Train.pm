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
    my ($ctx, $logits, $targets, @more) = _class_args(@_);
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

Training a loaded language model (C<forward> through a model's own graph,
trainable LoRA adapters) is not part of this release.

=head1 METHODS

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
