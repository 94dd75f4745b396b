package Lugh::Optimizer;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads.
require Lugh;
require Lugh::Autograd;

our $VERSION = '0.20';

# clip_grad_norm($max_norm, @tensors) and clip_grad_value($max_value, @tensors),
# as class methods (Lugh::Optimizer->clip_grad_norm(...)) or functions.
sub clip_grad_norm {
    shift if @_ && defined $_[0] && !ref $_[0] && $_[0] =~ /\ALugh::Optimizer/;
    return _clip_grad_norm(@_);
}

sub clip_grad_value {
    shift if @_ && defined $_[0] && !ref $_[0] && $_[0] =~ /\ALugh::Optimizer/;
    return _clip_grad_value(@_);
}

# Read-only hyperparameters (momentum, weight_decay, nesterov; beta1, beta2, eps).
for my $name (qw(momentum weight_decay nesterov beta1 beta2 eps)) {
    no strict 'refs';
    *{$name} = sub {
        Lugh::_croak("Usage: \$optimizer->$name") unless @_ == 1;
        my %h = _hyperparameters($_[0]);
        Lugh::_croak("$name is not a hyperparameter of " . ref($_[0])) unless exists $h{$name};
        return $h{$name};
    };
}

sub CLONE_SKIP { 1 }

package Lugh::Optimizer::SGD;

our @ISA = ('Lugh::Optimizer');
our $VERSION = '0.20';

sub new {
    my ($class, @args) = @_;
    return Lugh::Optimizer::_new_sgd($class, @args);
}

package Lugh::Optimizer::AdamW;

our @ISA = ('Lugh::Optimizer');
our $VERSION = '0.20';

sub new {
    my ($class, @args) = @_;
    return Lugh::Optimizer::_new_adamw($class, @args);
}

package Lugh::Optimizer::LRScheduler;

use POSIX ();
our $VERSION = '0.20';

my %SCHEDULES = map { $_ => 1 } qw(constant linear cosine exponential step warmup);

sub new {
    my ($class, $optimizer, @args) = @_;
    Lugh::_croak('Usage: Lugh::Optimizer::LRScheduler->new($optimizer, schedule => NAME, ...)')
        unless ref $optimizer && eval { $optimizer->isa('Lugh::Optimizer') };
    my @pairs = @args;
    for (my $i = 0; $i < $#pairs; $i += 2) {
        $pairs[$i] = 'schedule'   if $pairs[$i] eq 'type';
        $pairs[$i] = 'decay_rate' if $pairs[$i] eq 'gamma';
    }
    my %opt = Lugh::_options('Lugh::Optimizer::LRScheduler->new',
        { schedule => 'constant', warmup_steps => 0, total_steps => 1000, min_lr => 0, decay_rate => 0.1,
          milestones => [] }, @pairs);
    my $schedule = defined $opt{schedule} ? "'$opt{schedule}'" : 'undef';
    Lugh::_croak("Lugh::Optimizer::LRScheduler->new: unknown schedule $schedule (schedules: "
        . join(', ', sort keys %SCHEDULES) . ')') unless defined $opt{schedule} && $SCHEDULES{ $opt{schedule} };
    for my $key (qw(min_lr decay_rate)) {
        Lugh::_croak("Lugh::Optimizer::LRScheduler->new: $key must be a number >= 0")
            unless defined $opt{$key} && !ref $opt{$key} && $opt{$key} =~ /\A[+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\z/;
    }
    for my $key (qw(warmup_steps total_steps)) {
        Lugh::_croak("Lugh::Optimizer::LRScheduler->new: $key must be an integer >= 0")
            unless defined $opt{$key} && $opt{$key} =~ /\A\d+\z/;
    }
    Lugh::_croak('Lugh::Optimizer::LRScheduler->new: milestones must be an array reference of step numbers')
        unless ref $opt{milestones} eq 'ARRAY' && !grep { !defined || ref || !/\A\d+\z/ } @{ $opt{milestones} };
    return bless { %opt, optimizer => $optimizer, initial_lr => $optimizer->get_lr, current_step => 0 }, $class;
}

# The learning rate of step $s (Lugh 0.12's formulas).
sub lr_at {
    my ($self, $s) = @_;
    my ($init, $w, $t, $min) = @$self{qw(initial_lr warmup_steps total_steps min_lr)};
    my $schedule = $self->{schedule};
    my $progress = $t - $w > 0 ? ($s - $w) / ($t - $w) : undef;
    $progress = 1 if defined $progress && $progress > 1;
    if ($schedule eq 'linear' || $schedule eq 'cosine') {
        return $init * $s / $w if $w > 0 && $s <= $w;
        return $init unless defined $progress;
        return $init + ($min - $init) * $progress if $schedule eq 'linear';
        return $min + 0.5 * ($init - $min) * (1 + cos(POSIX::M_PI() * $progress)) if $schedule eq 'cosine';
    }
    if ($schedule eq 'exponential') {
        my $lr = $init * $self->{decay_rate}**$s;
        return $lr < $min ? $min : $lr;
    }
    if ($schedule eq 'step') {
        my $passed = grep { $s >= $_ } @{ $self->{milestones} };
        my $lr = $init * $self->{decay_rate}**$passed;
        return $lr < $min ? $min : $lr;
    }
    return $init * $s / $w if $schedule eq 'warmup' && $w > 0 && $s <= $w;
    return $init;
}

sub step {
    my ($self) = @_;
    my $lr = $self->lr_at(++$self->{current_step});
    $self->{optimizer}->set_lr($lr);
    return $lr;
}

sub get_lr   { return $_[0]{optimizer}->get_lr }
sub get_step { return $_[0]{current_step} }

package Lugh::Optimizer;

1;

__END__

=head1 NAME

Lugh::Optimizer - SGD and AdamW for Lugh::Autograd parameters, and learning-rate schedules

=head1 SYNOPSIS

    use Lugh;
    use Lugh::Optimizer;

    # fit w so that w * x = y
    my $ctx = Lugh::Context->new(mem_size => 64 * 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 1, { requires_grad => 1 });
    my $x = Lugh::Autograd::Tensor->new($ctx, 'f32', 4);
    my $y = Lugh::Autograd::Tensor->new($ctx, 'f32', 4);
    $x->set_data(1, 2, 3, 4);
    $y->set_data(3, 6, 9, 12);
    my $opt = Lugh::Optimizer::AdamW->new(lr => 0.1, weight_decay => 0, params => [$w]);
    for (1 .. 200) {
        $opt->zero_grad;
        my $err  = Lugh::Autograd::Ops->sub($ctx, Lugh::Autograd::Ops->mul($ctx, $x, $w), $y);
        my $loss = Lugh::Autograd::Ops->mean($ctx, Lugh::Autograd::Ops->mul($ctx, $err, $err));
        $loss->backward;
        $opt->step;
    }
    printf "w = %.2f\n", ($w->get_data)[0];    # w = 3.00

=head1 DESCRIPTION

An optimizer updates L<Lugh::Autograd> leaf tensors from their gradients.
Each parameter's step is a ggml graph built once (AdamW is ggml-opt's own
C<opt_step_adamw> op), so stepping allocates nothing: memory stays flat over
any number of steps. Contexts fill up with the results of the ops of each
forward pass, though: make the forward pass's tensors in a context of their
own and let it go each step (or size one for the whole run).

=head1 Lugh::Optimizer::SGD

=head2 new

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    my $sgd = Lugh::Optimizer::SGD->new(lr => 0.1, momentum => 0.9, nesterov => 1, weight_decay => 1e-4, params => [$w]);
    print $sgd->momentum, "\n";    # 0.9

C<lr> (or C<learning_rate>, 0.001), C<momentum> (0), C<weight_decay> (0),
C<nesterov> (0), C<params> (an array reference). Each step, per element:
C<g += weight_decay * p; v = momentum * v + g; p -= lr * (nesterov ? g + momentum * v : v)>.

=head1 Lugh::Optimizer::AdamW

=head2 new

    my $adamw = Lugh::Optimizer::AdamW->new(lr => 1e-3, beta1 => 0.9, beta2 => 0.999, eps => 1e-8, weight_decay => 0.01);
    print $adamw->beta2, "\n";    # 0.999

C<lr> (or C<learning_rate>, 0.001), C<beta1> (0.9), C<beta2> (0.999), C<eps>
(or C<epsilon>, 1e-8), C<weight_decay> (0.01), C<params>. Step C<t>:
C<m = beta1 m + (1-beta1) g; v = beta2 v + (1-beta2) g**2;
p = p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)>, with C<m_hat = m / (1-beta1^t)> and
C<v_hat = v / (1-beta2^t)>.

=head1 METHODS (both optimizers)

=head2 add_param

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $opt = Lugh::Optimizer::SGD->new(lr => 0.1);
    $opt->add_param(Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 }));
    print scalar(my @p = $opt->params), "\n";    # 1

Adds a leaf tensor that requires a gradient.

=head2 params

The parameters, in the order they were added (see L</add_param>).

=head2 step

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 1, { requires_grad => 1 });
    $w->set_data(1);
    Lugh::Autograd::Ops->scale($ctx, $w, 2)->backward;    # gradient 2
    my $opt = Lugh::Optimizer::SGD->new(lr => 0.25, params => [$w]);
    $opt->step;
    print(($w->get_data)[0], "\n");    # 0.5

Updates every parameter from its gradient.

=head2 zero_grad

Sets every parameter's gradient to zero (they add up over C<backward> calls).

    my $opt = Lugh::Optimizer::SGD->new;
    $opt->zero_grad;

=head2 get_lr

    my $opt = Lugh::Optimizer::SGD->new(lr => 0.5);
    print $opt->get_lr, "\n";    # 0.5

=head2 set_lr

    my $opt = Lugh::Optimizer::SGD->new(lr => 0.5);
    $opt->set_lr(0.25);
    print $opt->get_lr, "\n";    # 0.25

=head2 get_step_count

    my $opt = Lugh::Optimizer::AdamW->new;
    $opt->step for 1 .. 3;
    print $opt->get_step_count, "\n";    # 3

=head2 momentum, weight_decay, nesterov, beta1, beta2, eps

The optimizer's fixed hyperparameters (SGD: the first three; AdamW:
C<weight_decay> and the last three).

    my $opt = Lugh::Optimizer::AdamW->new(eps => 1e-6);
    print $opt->eps, "\n";    # 1e-06

=head1 GRADIENT CLIPPING

=head2 clip_grad_norm

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    $w->backward(3, 4);
    my $norm = Lugh::Optimizer->clip_grad_norm(1, $w);
    printf "%.1f -> %.2f,%.2f\n", $norm, @{ $w->grad };    # 5.0 -> 0.60,0.80

C<clip_grad_norm($max_norm, @tensors)>: when the gradients' joint L2 norm is
above C<$max_norm>, scales them all by C<max_norm / (norm + 1e-6)>. Returns
the norm before clipping.

=head2 clip_grad_value

    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $w = Lugh::Autograd::Tensor->new($ctx, 'f32', 2, { requires_grad => 1 });
    $w->backward(3, -0.5);
    Lugh::Optimizer->clip_grad_value(1, $w);
    print join(',', @{ $w->grad }), "\n";    # 1,-0.5

C<clip_grad_value($max_value, @tensors)>: clamps each gradient element to
C<[-max_value, max_value]>.

=head1 Lugh::Optimizer::LRScheduler

=head2 new

    my $opt = Lugh::Optimizer::SGD->new(lr => 0.1);
    my $sched = Lugh::Optimizer::LRScheduler->new($opt, schedule => 'cosine', warmup_steps => 10, total_steps => 100, min_lr => 0.001);
    $sched->step for 1 .. 5;
    printf "%.3f\n", $opt->get_lr;    # 0.050

C<new($optimizer, schedule =E<gt> NAME, ...)> (C<type> is another name for
C<schedule>): C<warmup_steps> (0), C<total_steps> (1000), C<min_lr> (0),
C<decay_rate> (or C<gamma>, 0.1), C<milestones> (an array reference). The
optimizer's learning rate when the scheduler is made is C<I>; at step C<s>
(the first C<step> is step 1), with C<W> warmup steps, C<T> total steps and
C<p = min(1, (s-W)/(T-W))>:

=over

=item constant: C<I>

=item warmup: C<I s/W> while C<s E<lt>= W>, then C<I>

=item linear: warmup, then C<I + (min_lr - I) p>

=item cosine: warmup, then C<min_lr + (I - min_lr)(1 + cos(pi p))/2>

=item exponential: C<max(I decay_rate^s, min_lr)>

=item step: C<max(I decay_rate^k, min_lr)>, C<k> the milestones reached

=back

=head2 step

    my $opt = Lugh::Optimizer::SGD->new(lr => 0.1);
    my $sched = Lugh::Optimizer::LRScheduler->new($opt, schedule => 'step', milestones => [2], decay_rate => 0.5);
    $sched->step for 1 .. 2;
    print $opt->get_lr, "\n";    # 0.05

Moves to the next step and sets the optimizer's learning rate; returns it.

=head2 lr_at

    my $sched = Lugh::Optimizer::LRScheduler->new(Lugh::Optimizer::SGD->new(lr => 1), schedule => 'exponential', decay_rate => 0.5);
    print $sched->lr_at(3), "\n";    # 0.125

The learning rate of a given step, without moving.

=head2 get_lr

The optimizer's current learning rate.

    my $sched = Lugh::Optimizer::LRScheduler->new(Lugh::Optimizer::SGD->new(lr => 0.2));
    print $sched->get_lr, "\n";    # 0.2

=head2 get_step

    my $sched = Lugh::Optimizer::LRScheduler->new(Lugh::Optimizer::SGD->new);
    $sched->step;
    print $sched->get_step, "\n";    # 1

=head1 SEE ALSO

L<Lugh::Autograd>

=cut
