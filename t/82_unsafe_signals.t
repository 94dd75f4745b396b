# With PERL_SIGNALS=unsafe a signal handler runs the moment the signal
# arrives. One that dies during a forward pass must not jump out of the
# native code (it held the cache's lock: the next call hung): Lugh blocks
# signals while a call runs, and the handler runs as the call returns.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest::TinyModel qw(tiny_model);

plan skip_all => 'no POSIX signals on Windows' if $^O eq 'MSWin32';

my $dir  = tempdir(CLEANUP => 1);
my $path = tiny_model($dir);

my $script = <<'PERL';
use strict;
use warnings;
use Time::HiRes qw(ualarm time);
use Lugh;
my ($path) = @ARGV;
my $model     = Lugh::Model->new(model => $path);
my $inference = Lugh::Inference->new(model => $model, n_threads => 1);
my $cache     = $inference->create_kv_cache;
my $n_ctx     = $inference->n_ctx;
my @long      = map { $_ % 7 } 1 .. $n_ctx - 8;
my ($died, $rounds) = (0, 0);
$SIG{ALRM} = sub { die "alarm\n" };
# Alarms at many points of the call: each handler's die must come after the
# native code has let go of the cache.
for my $delay (map { $_ * 150 } 1 .. 40) {
    $cache->clear;
    $rounds++;
    my $ok = eval { ualarm($delay); $inference->forward_cache($cache, \@long); ualarm(0); 1 };
    ualarm(0);
    $died++ if !$ok && $@ eq "alarm\n";
    die "unexpected error: $@" if !$ok && $@ ne "alarm\n";
}
# The cache is usable: not locked, not half-written.
$SIG{ALRM} = 'DEFAULT';
$cache->clear;
my @logits = $inference->forward_cache($cache, [1, 2, 3]);
print "rounds $rounds died $died cached ", $cache->n_cached, " logits ", scalar @logits, "\n";
PERL

my $file = "$dir/signals.pl";
open my $fh, '>', $file or die $!;
print $fh $script;
close $fh;

local $ENV{PERL_SIGNALS} = 'unsafe';
# A hang (the old failure) ends at the watchdog, as a failure.
my $pid = open my $child, '-|';
die "fork: $!" unless defined $pid;
if (!$pid) {
    open STDERR, '>&', \*STDOUT;
    exec $^X, '-Mblib', $file, $path or exit 99;
}
my $output = eval {
    local $SIG{ALRM} = sub { kill 'KILL', $pid; die "the child hung (killed after 120 s)\n" };
    alarm 120;
    my $text = do { local $/; <$child> };
    alarm 0;
    $text;
} // $@;
close $child;
is($? >> 8, 0, 'the child ran to the end') or diag $output;
like($output, qr/rounds 40 died \d+ cached 3 logits \d+/, 'the cache works after handlers died') or diag $output;
my ($died) = $output =~ /died (\d+)/;
note "handlers that died during or right after a call: " . ($died // 'none');
ok(($died // 0) > 0, 'some alarms fired during the calls');

done_testing;
