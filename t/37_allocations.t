# Decoding a token allocates nothing on the Rust side once the buffers are
# warm (Lugh::_allocations counts every allocation made through Rust's
# allocator): the graph, its inputs, the logits, the sampler's candidates and
# the text stream are all reused from token to token.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(model_path);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $tiny = Lugh::Model->new(model => tiny_model($dir));

# Allocations made between successive callbacks, from the 3rd token on.
sub per_token {
    my ($inference, @options) = @_;
    my @seen;
    $inference->generate([ 1, 2, 3 ], max_tokens => 40, @options,
        callback => sub { push @seen, Lugh::_allocations(); 0 });
    return [ map { $seen[$_] - $seen[ $_ - 1 ] } 3 .. $#seen ];
}

my $inference = Lugh::Inference->new(model => $tiny, n_threads => 1, n_ctx => 128);
my $eos = $inference->n_vocab - 1;
my %cases = (
    'greedy'                  => [ greedy => 1, eos_token => $eos ],
    'default sampling'        => [ seed => 1, eos_token => $eos ],
    'sampling with penalties' => [ seed => 2, repeat_penalty => 1.3, frequency_penalty => 0.2, eos_token => $eos ],
    'a stop string'           => [ greedy => 1, eos_token => $eos, stop => ['never in this text'] ],
);
for my $name (sort keys %cases) {
    my $counts = per_token($inference, @{ $cases{$name} });
    is_deeply($counts, [ (0) x @$counts ], "$name: no allocation per token") or diag "@$counts";
}
cmp_ok(Lugh::_allocations(), '>', 0, 'the counter counts');

SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip 'the SmolLM2 test model is not fetched', 2;
    my $real = Lugh::Inference->new(model => Lugh::Model->new(model => $path), n_ctx => 256);
    my $counts = per_token($real, greedy => 1, on_text => sub {0});
    is_deeply($counts, [ (0) x @$counts ], 'SmolLM2, streaming text: no allocation per token') or diag "@$counts";
    $counts = per_token($real, temperature => 0.7, seed => 3, stats => \my %stats);
    is_deeply($counts, [ (0) x @$counts ], 'SmolLM2, sampling with stats: no allocation per token') or diag "@$counts";
}

done_testing;
