# generate's progress callback (after each prompt batch; true cancels
# cleanly), last_stats, and %SIG handlers running during generate without
# any callback (a handler that dies stops it; one that returns lets it go
# on). The progress part runs on a tiny synthetic model; the signal part
# needs SmolLM2 (a generation long enough to be interrupted).
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use Time::HiRes qw(time ualarm);
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir = tempdir(CLEANUP => 1);

subtest 'progress and cancel' => sub {
    my $model = Lugh::Model->new(model => tiny_model($dir));
    my $inf = Lugh::Inference->new(model => $model, n_threads => 1, n_batch => 4);
    my @prompt = map { 3 + $_ % 40 } 1 .. 18;
    is($inf->last_stats, undef, 'last_stats: undef before any generate');

    my @calls;
    my @ids = $inf->generate(\@prompt, max_tokens => 3, greedy => 1, progress => sub { push @calls, [@_]; 0 });
    is_deeply(\@calls, [ [ 4, 18 ], [ 8, 18 ], [ 12, 18 ], [ 16, 18 ], [ 18, 18 ] ], 'called after every batch of 4');
    my $s = $inf->last_stats;
    is($s->{n_generated}, scalar @ids, 'last_stats: n_generated');
    is($s->{n_evaluated}, 18, 'last_stats: n_evaluated');
    like($s->{stop_reason}, qr/\A(?:max_tokens|eos)\z/, 'last_stats: stop_reason');
    $s->{n_generated} = -1;
    isnt($inf->last_stats->{n_generated}, -1, 'last_stats gives a copy');

    my $cache = $inf->create_kv_cache;
    @calls = ();
    @ids = $inf->generate(\@prompt, max_tokens => 3, cache => $cache,
        progress => sub { push @calls, [@_]; $_[0] >= 8 });
    is(scalar @ids, 0, 'cancelled: nothing generated');
    is($inf->last_stats->{stop_reason}, 'cancelled', 'stop_reason cancelled');
    is($inf->last_stats->{n_evaluated}, 8, 'n_evaluated: the batches done');
    is_deeply([ $cache->tokens ], [ @prompt[0 .. 7] ], 'the cache keeps what was evaluated');
    @calls = ();
    my @again = $inf->generate(\@prompt, max_tokens => 3, greedy => 1, cache => $cache,
        progress => sub { push @calls, [@_]; 0 });
    is($inf->last_stats->{n_reused}, 8, 'a later generate reuses it');
    is_deeply($calls[0], [ 4, 10 ], 'progress counts only the tokens evaluated');
    my @fresh = $inf->generate(\@prompt, max_tokens => 3, greedy => 1);
    is_deeply(\@again, \@fresh, 'and generates what a fresh one does');

    my $err = eval { $inf->generate(\@prompt, max_tokens => 3, progress => sub { die { why => 'mine' } }); 1 } ? undef : $@;
    is(ref $err eq 'HASH' && $err->{why}, 'mine', 'a dying progress callback: the exception, unchanged');
    croaks_like(sub { $inf->generate(\@prompt, progress => 'nope') }, qr/progress must be a CODE reference/,
        'progress must be code');
    is(scalar $inf->generate(\@prompt, max_tokens => 2, eos_token => 0)->@*, 2, 'the session is usable');
    croaks_like(sub { Lugh::Inference::last_stats($inf, 1) }, qr/Usage: \$inference->last_stats/, 'last_stats usage');
};

subtest 'signal handlers during generate' => sub {
    my $path = model_path('smollm2-135m-q4_1') or plan skip_all => 'SmolLM2 is not downloaded (perl t/fetch-models)';
    my $inf = Lugh::Inference->new(model => Lugh::Model->new(model => $path), n_threads => 2, n_ctx => 512);
    my @prompt = (504, 3575, 282, 4649, 314);
    my %gen = (max_tokens => 400, greedy => 1, eos_token => 0);

    # A handler that dies: generate stops soon after the signal, with no
    # callback given, and the exception is the handler's.
    my ($t_signal, $t0);
    my $cache = $inf->create_kv_cache;
    local $SIG{ALRM} = sub { $t_signal = time; die "interrupted by the alarm\n" };
    $t0 = time;
    ualarm(300_000);
    my $ok = eval { $inf->generate(\@prompt, %gen, cache => $cache); 1 };
    ualarm(0);
    my $t_back = time;
    ok(!$ok, 'generate was interrupted');
    is($@, "interrupted by the alarm\n", "the handler's exception, unchanged");
    cmp_ok($cache->n_cached, '<', @prompt + $gen{max_tokens} - 1, 'before the end of the generation ('
        . ($cache->n_cached - @prompt) . ' tokens)');
    diag(sprintf 'signal to return: %.1f ms', 1000 * ($t_back - $t_signal)) if $t_signal;
    my @after = $inf->generate(\@prompt, max_tokens => 4, greedy => 1, cache => $cache);
    is(scalar @after, 4, 'the session and its cache still generate');

    # A handler that returns: it runs during the generation, which goes on.
    my $t_ran;
    local $SIG{ALRM} = sub { $t_ran = time };
    $t0 = time;
    ualarm(300_000);
    my @ids = $inf->generate(\@prompt, %gen, max_tokens => 200);
    my $t_end = time;
    ualarm(0);
    is(scalar @ids, 200, 'a handler that returns lets generation go on');
    ok(defined $t_ran && $t_ran - $t0 < 0.5 * ($t_end - $t0), sprintf(
        'and ran during it (%.2f s in, of %.2f s)', ($t_ran // $t_end) - $t0, $t_end - $t0));
};

done_testing();
