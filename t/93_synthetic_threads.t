# Threads and fork with live objects on a tiny synthetic model
# (t/lib/LughTest/TinyModel.pm): objects are not cloned into new threads
# (CLONE_SKIP), a thread can load and run its own model, and a forked child
# runs the parent's session. Needs no downloaded model.
use strict;
use warnings;
use Config;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(in_forked_child);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $path = tiny_model($dir);
my $model = Lugh::Model->new(model => $path);
my $inference = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
my $tok = Lugh::Tokenizer->new(model => $model);
my $cache = $inference->create_kv_cache;
my $pool = $inference->create_memory_pool;
my @prompt = $tok->encode('Once upon a time');
my @logits = $inference->forward(\@prompt);
my @ids = $inference->generate(\@prompt, max_tokens => 4, greedy => 1, eos_token => $inference->n_vocab - 1);
$inference->forward_cache($cache, [ @prompt[ 0, 1 ] ]);

sub same { my ($a, $b) = @_; return @$a == @$b && !grep { abs($a->[$_] - $b->[$_]) > 1e-4 } 0 .. $#$a }

my $spec = Lugh::Speculative->new(inference => $inference, draft => 'ngram', temperature => 0);
$spec->generate(\@prompt, 2);
my $rope = Lugh::RoPE->linear_2x(64);
my @scaled = $inference->forward(\@prompt, rope => $rope);

for my $class (qw(Lugh::Model Lugh::Inference Lugh::KVCache Lugh::MemoryPool Lugh::Speculative Lugh::RoPE Lugh::LoRA)) {
    is($class->CLONE_SKIP, 1, "$class: CLONE_SKIP");
}

SKIP: {
    skip 'this perl has no ithreads', 3 unless $Config{useithreads};
    require threads;
    my $thr = threads->create({ context => 'list' }, sub {
        my $clone = eval { $inference->n_ctx; 1 } ? 'usable' : 'not an object';
        my $m = Lugh::Model->new(model => $path);
        my $i = Lugh::Inference->new(model => $m, n_threads => 1, n_ctx => 64);
        my @l = $i->forward(\@prompt);
        my @t = Lugh::Tokenizer->new(model => $m)->encode('Once upon a time');
        return ($clone, same(\@l, \@logits) ? 'same' : 'different', "@t");
    });
    my ($clone, $same, $tokens) = $thr->join;
    is($clone, 'not an object', 'objects are not cloned into the thread');
    is($same, 'same', 'the thread ran its own session: the same logits');
    is($tokens, "@prompt", '... and its own tokenizer');
}

is($cache->n_cached, 2, 'the parent\'s cache is intact');
my @l = $inference->forward_cache_pool($cache, $pool, [ @prompt[ 2 .. $#prompt ] ]);
ok(!grep({ abs($l[$_] - $logits[$_]) > 0.02 } 0 .. $#l), 'the parent\'s objects still work');
is(scalar @{ $spec->generate(\@prompt, 2) }, 2, '... a Lugh::Speculative too');
ok(same([ $inference->forward(\@prompt, rope => $rope) ], \@scaled), '... and a Lugh::RoPE');

# A session keeps its CPU worker threads between passes; a forked child has
# none, so it must start its own rather than wait for them (alarm: no hang).
my $two = Lugh::Inference->new(model => $model, n_threads => 2, n_ctx => 64);
ok(same([ $two->forward(\@prompt) ], \@logits), 'two threads: the same logits');
for my $round (1, 2) {
    my $status = in_forked_child(sub {
        my @child = $two->forward(\@prompt);
        my @gen = $two->generate(\@prompt, max_tokens => 2, greedy => 1, eos_token => $two->n_vocab - 1);
        return same(\@child, \@logits) && "@gen" eq "@ids[0, 1]";
    });
    is($status, 0, "round $round: a forked child runs the parent's session and gets the same tokens");
}
ok(same([ $two->forward(\@prompt) ], \@logits), 'the parent still runs after its children');
undef $_ for $cache, $pool, $inference, $two, $tok, $model;
pass('freed afterwards without a crash');

done_testing;
