use strict;
use warnings;
use Config;
use Test::More;
BEGIN {
    plan skip_all => 'perl without ithreads' unless $Config{useithreads};
}
use threads;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest::GGUF qw(write_gguf);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $path = write_gguf("$dir/t.gguf", kv => ['general.architecture' => [string => 't']]);
my $m = Lugh::Model->new(model => $path);

# Objects are not cloned into threads (CLONE_SKIP): in a thread the copy is no
# longer an object (calling a method dies, freeing it frees nothing twice), the
# thread can load its own, and the parent's object is untouched.
my @results = map { $_->join } map {
    threads->create(sub { my $seen = eval { $m->architecture; 1 } ? 'cloned' : $@ =~ /unblessed reference/ ? "skipped" : $@;
        my $own = Lugh::Model->new(model => $path); "$seen " . $own->architecture })
} 1 .. 4;
is_deeply(\@results, [('skipped t') x 4], 'threads get no copy and can load their own');
is($m->architecture, 't', 'parent object intact after threads ended');
done_testing;
