use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(smollm2);

# 1,000 cycles of new session / cache / pool, forward, generate (with a
# callback, one of them dying), destroy: the resident set must stay flat.
# Run: prove -b xt/leaks.t  (LUGH_LEAK_CYCLES=N to change the count)

plan skip_all => '/proc/self/statm is needed' unless -r '/proc/self/statm';

my $cycles = $ENV{LUGH_LEAK_CYCLES} || 1000;
my $page_kb = 4;
sub rss_kb {
    open my $fh, '<', '/proc/self/statm' or die $!;
    my (undef, $resident) = split ' ', scalar <$fh>;
    return $resident * $page_kb;
}

my ($model) = smollm2();
my @prompt = (504, 3575, 282, 4649, 314);
my %rss;
for my $n (1 .. $cycles) {
    my $inference = Lugh::Inference->new(model => $model, n_ctx => 64, n_threads => 2);
    my $cache = $inference->create_kv_cache;
    my $pool = $inference->create_memory_pool;
    my @l = $inference->forward(\@prompt);
    $inference->forward_cache_pool($cache, $pool, \@prompt);
    my $rows = $inference->forward_batch([ \@prompt, [ 6403, 1980 ] ]);
    my $id = $inference->sample(\@l, seed => $n);
    my @ids = $inference->generate(\@prompt, max_tokens => 3, seed => $n, callback => sub { 0 });
    eval { $inference->generate(\@prompt, max_tokens => 3, callback => sub { die { n => $n } }) };
    eval { $inference->forward([ 99999 ]) };
    next unless $n == 10 || $n == 100 || $n % 250 == 0 || $n == $cycles;
    $rss{$n} = rss_kb();
    diag(sprintf "RSS after %4d cycles: %7.1f MB", $n, $rss{$n} / 1024);
}
my $base = $cycles >= 100 ? 100 : 10;
my $growth = ($rss{$cycles} - $rss{$base}) / 1024;
diag(sprintf "growth from cycle %d to %d: %.1f MB", $base, $cycles, $growth);
cmp_ok($growth, '<', 8, 'RSS flat (under 8 MB of growth over the cycles after warm-up)');

done_testing;
