package Lugh::Logits;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;

our $VERSION = '0.20';

# softmax and log_softmax are XS subs; their option (temperature) is the
# table of xs-rs/subs/logits.rs.

sub new {
    Lugh::_croak('Lugh::Logits->new: logits come from forward(..., as_object => 1)');
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Logits - next-token scores kept on the native side

=head1 SYNOPSIS

    use Lugh;
    my $model     = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $inference = Lugh::Inference->new(model => $model);

    my $logits = $inference->forward([504, 3575, 282, 4649, 314], as_object => 1);
    print $logits->argmax, "\n";                       # 7042 (" Paris")
    for my $pair ($logits->top_k(5)) {
        my ($id, $score) = @$pair;
        printf "%6d %8.3f\n", $id, $score;
    }
    my $p = $logits->softmax;                          # probabilities, also a Lugh::Logits
    printf "P(Paris) = %.3f\n", $p->get(7042);
    my $next = $inference->sample($logits, temperature => 0.7, seed => 1);

=head1 DESCRIPTION

The forward family returns, by default, one Perl number per vocabulary entry:
262,144 of them for Gemma, for every call. With C<< as_object => 1 >> it
returns a Lugh::Logits instead, which keeps the scores in native memory and
answers the questions a program usually asks (the best token, the top few,
one probability) without making a Perl value for each entry.
L<Lugh::Inference/sample> takes it as it takes an array reference.

With C<forward_all> and the batched spellings, C<as_object> gives an array
reference of Lugh::Logits, one per position or sequence.

=head1 METHODS

=head2 n_vocab

    print $logits->n_vocab;

The number of scores.

=head2 get

    my $score = $logits->get($id);

The score of one token id; croaks when the id is outside C<[0, n_vocab)>.

=head2 argmax

    my $id = $logits->argmax;

The id with the highest score (the lowest id among equals; NaN never wins),
undef when every score is NaN.

=head2 top_k

    my @best = $logits->top_k(10);     # ([$id, $score], ...), best first

The C<$n> highest scores with their ids, best first, the lower id first among
equal scores. Only C<$n> entries are sorted.

=head2 softmax

    my $probabilities = $logits->softmax;
    my $sharper       = $logits->softmax(temperature => 0.5);

A new Lugh::Logits holding C<softmax(scores / temperature)>: probabilities
that sum to 1. The temperature defaults to 1 and must be finite and above 0;
croaks when a score is NaN.

=head2 log_softmax

    my $log_p = $logits->log_softmax;
    printf "log P = %.4f\n", $log_p->get($id);

The same, as natural logarithms (computed stably, without overflow).

=head2 to_list

    my @scores = $logits->to_list;

Every score, as the list C<forward> returns without C<as_object>.

=head2 packed

    my @scores = unpack 'f<*', $logits->packed;

Every score as a byte string of little-endian 32-bit floats (4 bytes each):
one Perl value for the whole vector.

=head2 new

Croaks: logits come from the forward family with C<< as_object => 1 >>.

=head1 SEE ALSO

L<Lugh::Inference/forward>, L<Lugh::Inference/sample>

=cut
