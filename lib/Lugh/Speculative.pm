package Lugh::Speculative;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Speculative;` alone works too.
require Lugh;

our $VERSION = '0.20';

# Settings and statistics: one accessor per row of the XS table.
Lugh::_install_accessors(__PACKAGE__);

# new, generate, step, draft_tokens, verify_tokens, init_caches, reset and
# reset_stats are XS subs (xs-rs/subs/speculative.rs).

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Speculative - faster generation: a cheap draft proposes, the model verifies several tokens at once

=head1 SYNOPSIS

    use Lugh;
    my $model     = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024);

    # Prompt lookup: no second model; pays off when the output repeats the input.
    my $spec = Lugh::Speculative->new(inference => $inference, draft => 'ngram', k => 4, temperature => 0);
    my @prompt = $tokenizer->encode("one two three four five six seven eight nine ten\none two three four five");
    my $ids = $spec->generate(\@prompt, 24);
    print $tokenizer->decode($ids), "\n";           # six seven eight nine ...
    printf "%d%% of %d drafted tokens accepted in %d steps\n",
        100 * $spec->acceptance_rate, $spec->tokens_drafted, $spec->total_steps;

    # Greedy: the tokens plain generation gives.
    my @plain = $inference->generate(\@prompt, max_tokens => 24, greedy => 1);
    print "@plain" eq "@$ids" ? "same\n" : "different\n";     # same

    # A draft model: a smaller model with the same vocabulary, sampled.
    my $draft = Lugh::Inference->new(model => $model, n_ctx => 1024);   # (use a smaller one)
    my $sampled = Lugh::Speculative->new(inference => $inference, draft => $draft,
        temperature => 0.8, top_p => 0.95);
    Lugh::srand(42);                                  # reproducible draws
    print $tokenizer->decode($sampled->generate(\@prompt, 16)), "\n";

=head1 DESCRIPTION

Generating a token costs one forward pass of the model, and on a CPU that
pass is dominated by reading every weight once; evaluating several tokens
in one pass reads them once too. Speculative decoding (Leviathan et al.
2023; Chen et al. 2023) uses that: a cheap I<draft> proposes the next C<k>
tokens, the model (the I<main> model, C<inference>) evaluates the last
token and all of them in batched forward passes (of up to 3 rows, see
below), and keeps the longest prefix of the proposal it agrees with plus
one token of its own. Each step yields between 1 and C<k + 1> tokens for
the price of a few batched passes.

The agreement is decided so that the output is distributed exactly as the
main model's own sampling, whatever the draft proposes:

=over

=item *

a drafted token C<x>, drawn from the draft's distribution C<q>, is accepted
with probability C<min(1, p(x) / q(x))>, where C<p> is the main model's
distribution at that position; C<p> and C<q> are both taken after the same
temperature, top-k, top-p and min-p transform, the one
L<Lugh::Inference/generate> samples from with the same options;

=item *

at the first rejection the token is drawn from the normalised
C<max(0, p - q)> instead, and the rest of the proposal is dropped;

=item *

when every drafted token is accepted, one more (the I<bonus> token) is
drawn from the main model's distribution after the last of them.

=back

Greedy decoding (C<temperature =E<gt> 0>) is the limit where C<p> and C<q>
are the best tokens: a drafted token is accepted if and only if it is the
main model's most likely token, and the correction is that token. So the
output is the main model's greedy output, computed in fewer passes.

B<Exactness, and its one limit.> ggml multiplies a batch of 4 rows or
more with other kernels than a single row (the repacked K-quant GEMM of
Qwen2.5-Coder Q4_K_M and Gemma-3 Q4_K_M), whose sums are rounded in another
order. So greedy verification passes the rows to the main model at most 3
at a time, which go through the one-row kernels, and evaluates a prompt
exactly as plain generation does: every logit it compares is bit-identical
to a decode step's, and speculative greedy output is plain greedy output,
token for token (F<t/45_speculative.t> checks it on the three test models,
with a model draft and with prompt lookup). The limit: with flash attention
on, once the cache holds 512 positions or more, ggml splits the attention of
a single row across the threads and adds the parts up, which it does not for
the rows of a batch, so past that length the two can part where the two best
tokens are nearly tied (a few hundredths apart). With
C<< flash_attn => 0 >> the identity holds at any length. Sampled decoding
passes its rows the same way; there the groups pay off otherwise: a
rejection in the first group ends the step before the rest are computed.

The KV caches hold exactly the accepted context: before each step each
model's cache keeps the prefix it shares with the context (rejected draft
tokens are rolled back, see L<Lugh::KVCache/resize>) and evaluates what is
missing, so the draft sees the correction and bonus tokens before drafting
again. Calls can therefore be given any context: a call that continues the
previous one evaluates only the new tokens.

=head2 Drafts

=over

=item C<< draft => $inference >>

A L<Lugh::Inference> of a smaller model with the same vocabulary (its size
is checked). It drafts C<k> tokens one by one with its own KV cache,
sampling them with the same settings. The same object as C<inference> is
allowed (every proposal is then accepted; useful only for testing).

=item C<< draft => 'ngram' >>

Prompt lookup, as llama.cpp's lookup decoding and transformers' prompt
lookup do: the last C<ngram_max> down to C<ngram_min> tokens of the context
(prompt and generated tokens) are looked up earlier in the context, the
longest match first and the most recent among equals, and up to C<k> tokens
that followed it are proposed. It needs no second model and costs nothing
to compute, and it pays off where the output repeats the input: rewriting
or editing a given text or program, quoting, filling templates. The
proposals are certain (C<q> is 1 for the proposed token), so a proposed
token is accepted with probability C<p(x)>, greedy: when it is the best
token. A step without a match evaluates the last token alone, as plain
generation does; and after two proposals in a row whose first token was
rejected, lookups pause for as many steps as there were such failures (up
to 16; an accepted proposal starts the count again), so that text which
does not repeat itself costs little more than plain generation.

F<bench/speculative-bench> measures it: Qwen2.5-Coder rewriting a 30-line
Perl module through its chat template, and continuing prose. The gain
depends on how much cheaper ggml makes a batch than its rows one by one.
On an Intel Xeon (one thread, 200 tokens, before verification was exact)
rewriting ran 1.67 times as fast as plain generation greedy (84% of the
proposals accepted) and 1.53 times at temperature 0.8; prose 1.26 and
1.01 times. On a 2-core AMD EPYC (2 threads, 256 tokens) rewriting ran
1.18 times as fast greedy (84% accepted, the same tokens; 1.29 times with
C<< exact => 0 >>) and 1.06 times at temperature 0.8; prose 1.09 and 0.98
times.

=back

=head1 METHODS

=head2 new

    my $spec = Lugh::Speculative->new(
        inference   => $inference,     # the main model (alias: main)
        draft       => 'ngram',        # or a Lugh::Inference (alias: draft_inference)
        k           => 4,              # tokens drafted per step, 1 to 16 (alias: depth)
        temperature => 0.8,            # 0: greedy
        top_p       => 0.95,
    );
    print $spec->k, "\n";              # 4

Options:

=over

=item inference (alias main)

The L<Lugh::Inference> whose output is wanted. Required.

=item draft (alias draft_inference)

A L<Lugh::Inference> with the same vocabulary size, or the string
C<'ngram'>. Required.

=item k (alias depth)

How many tokens a step drafts, 1 to 16; default 4.

=item temperature, top_k, top_p, min_p, typical_p, top_n_sigma, logit_bias, samplers, greedy, seed

The sampling, as L<Lugh::Inference/generate> takes it, with the same
defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 (llama.cpp's).
Greedy is
C<< temperature => 0 >> or C<< greedy => 1 >>. C<seed> makes every call
draw the same numbers; without it each call takes its seed from Lugh's
default generator, which L<Lugh/srand> reseeds. The repetition penalties
are not supported (they would depend on each verified row's own history),
nor are DRY, XTC (a random step) and mirostat (a state carried from token to
token). Drafting and verifying draw from Lugh's own generator, so the tokens
are not llama.cpp's for a seed, as plain generation's are.

=item ngram_min, ngram_max

With C<< draft => 'ngram' >>: the shortest and longest n-grams looked up;
default 2 and 4.

=item exact

True (the default): the main model verifies in passes of at most 3 rows,
which ggml computes exactly as decode steps (see L</DESCRIPTION>), so
greedy output is plain greedy output token for token. False: all the rows
of a step in one pass. On CPUs where ggml's multi-row kernels make a batch
much cheaper than its rows one by one, that is faster; greedy output may
then part from plain greedy output where two tokens are nearly tied.
Measured on a 2-core AMD EPYC with Qwen2.5-Coder rewriting code: exact
1.18 times as fast as plain generation, not exact 1.29 times (with one
thread, 0.93 and 1.08).

=back

Croaks naming the problem: a missing C<inference> or C<draft> ("requires
inference => ..."), an argument that is not a Lugh::Inference ("inference
must be a Lugh::Inference object"), C<k> outside 1 to 16 ("k must be
between 1 and 16"), a draft model whose vocabulary differs from the main
model's (both sizes named), an unknown option (the valid ones listed), a
sampling value out of range.

=head2 generate

    my $ids = $spec->generate(\@prompt, 24);
    print scalar(@$ids), " tokens\n";                # 24 tokens
    $ids = $spec->generate(\@prompt, max_tokens => 8, seed => 7,
        callback => sub { my ($token, $count) = @_; return 0 });

Generates up to C<$max_tokens> tokens (default 256) after the prompt and
returns an array reference of their ids. It stops at the model's
end-of-generation tokens (those of its tokenizer, L<Lugh::Tokenizer/eog_ids>),
which are not returned. The second form takes C<max_tokens>, C<seed> (this
call's draws) and C<callback>, called with each token's id and count as
L<Lugh::Inference/generate>'s is; a true return stops generation after that
token. Croaks when the prompt is empty, has an id outside the vocabulary,
or does not fit in the context with C<$max_tokens>.

C<< grammar => $grammar >> (a L<Lugh::Grammar>, or GBNF text; for a JSON
schema, a grammar made by L<Lugh::Grammar/from_json_schema>) makes the
output follow the grammar as L<Lugh::Inference/Grammars> does: the main
model judges each drafted token over the tokens the grammar allows at that
point (a token it rejects is never accepted) and draws its own from them,
and generation ends once the grammar is complete and nothing may follow.
Greedy, the output is that of C<< $inference->generate(..., greedy => 1,
grammar => $grammar) >>, token for token. C<step>, C<draft_tokens> and
C<verify_tokens> take no grammar (they judge any context given).

    my $yes_no = Lugh::Grammar->new('root ::= " " ("Yes" | "No") "."');
    my $answer = $spec->generate(\@prompt, max_tokens => 8, grammar => $yes_no);

=head2 step

    my $new = $spec->step(\@prompt);
    print scalar(@$new) >= 1 ? "ok\n" : "none\n";   # ok

One speculation step after the context C<\@tokens>: drafts C<k> tokens,
verifies them, and returns the accepted ones followed by the main model's
own token (so at least one token, at most C<k + 1>). End-of-generation
tokens are returned like any other. Updates the statistics.

=head2 draft_tokens

    my $drafted = $spec->draft_tokens(\@prompt, 4);
    print $tokenizer->decode($drafted), "\n";       # six seven eight nine

The tokens the draft proposes after C<\@tokens>, at most C<$n_draft>
(0 to 16; default C<k>); prompt lookup may propose fewer, or none. The
proposal and the draft's distributions are remembered for a following
C<verify_tokens> of the same tokens. Counts in C<tokens_drafted>.

=head2 verify_tokens

    my $drafted  = $spec->draft_tokens(\@prompt, 4);
    my $accepted = $spec->verify_tokens(\@prompt, $drafted);
    print scalar(@$accepted), " tokens\n";           # 5 tokens

Verifies a proposal (at most 16 tokens) after C<\@tokens> in one forward
pass of the main model and returns the accepted prefix followed by the
correction or bonus token. The draft's distribution of each proposed token
is the one C<draft_tokens> remembered for this context and proposal, or
else is computed (a draft model evaluates the proposal; prompt lookup's
proposals are certain). Counts a step, and the accepted tokens.

=head2 init_caches

    print $spec->init_caches, "\n";                  # 1

Makes the KV caches (one per model, each of its session's C<n_ctx>) and
compute pools now rather than at the first call. Returns 1.

=head2 reset

    $spec->reset;

Empties the KV caches and forgets the remembered draft; the next call
evaluates its whole context. The statistics stay (C<reset_stats> clears them).

=head2 k, temperature, top_p, top_k, min_p, exact, n_vocab, draft_type

    printf "k %d, temperature %.1f, top_p %.2f, top_k %d, min_p %.1f\n",
        $spec->k, $spec->temperature, $spec->top_p, $spec->top_k, $spec->min_p;
    print $spec->exact, "\n";                        # 1
    print $spec->n_vocab, "\n";                      # 49152
    print $spec->draft_type, "\n";                   # ngram

The settings (temperature 0 when greedy; C<exact> 1 or 0), the vocabulary
size the models share, and the kind of draft: C<model> or C<ngram>.

=head2 acceptance_rate, tokens_drafted, tokens_accepted, total_steps, reset_stats

    $spec->reset_stats;
    $spec->generate(\@prompt, 24);
    printf "%d of %d accepted (%.2f), %d steps\n", $spec->tokens_accepted,
        $spec->tokens_drafted, $spec->acceptance_rate, $spec->total_steps;
    print $spec->reset_stats, "\n";                  # 1

Counts since the object was made or C<reset_stats> was last called: the
tokens drafted, those accepted, their ratio (0 when nothing was drafted),
and the verification steps. Each step also yields one token of the main
model's, so C<total_steps + tokens_accepted> tokens were produced (less any
cut off by C<max_tokens> or an end-of-generation token).

=head1 THREADS

A Lugh::Speculative is not copied into new threads (C<CLONE_SKIP>). Its
calls take its caches for their duration: a C<callback> that calls the same
object again croaks instead of waiting.

=head1 SEE ALSO

L<Lugh::Inference>, L<Lugh::KVCache>, F<bench/speculative-bench>.

Yaniv Leviathan, Matan Kalman, Yossi Matias: "Fast Inference from
Transformers via Speculative Decoding", ICML 2023. Charlie Chen, Sebastian
Borgeaud, Geoffrey Irving, Jean-Baptiste Lespiau, Laurent Sifre, John
Jumper: "Accelerating Large Language Model Decoding with Speculative
Sampling", 2023.

=cut
