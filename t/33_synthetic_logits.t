# Lugh::Logits on a tiny synthetic model: forward(..., as_object => 1) keeps
# the scores native; its answers equal those computed from the list.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use List::Util qw(sum);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::TinyModel qw(tiny_model);
use LughTestInference qw(argmax);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $model = Lugh::Model->new(model => tiny_model($dir));
my $inference = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
my @tokens = (1, 5, 9, 2);
my @list = $inference->forward(\@tokens);
my $logits = $inference->forward(\@tokens, as_object => 1);

isa_ok($logits, 'Lugh::Logits');
is($logits->n_vocab, scalar @list, 'n_vocab');
is_deeply([ $logits->to_list ], \@list, 'to_list equals the list forward returns');
is_deeply([ unpack 'f<*', $logits->packed ], \@list, 'packed: little-endian floats');
is($logits->argmax, argmax(\@list), 'argmax');
is($logits->get(3), $list[3], 'get');
my @order = sort { $list[$b] <=> $list[$a] || $a <=> $b } 0 .. $#list;
is_deeply([ map { $_->[0] } $logits->top_k(5) ], [ @order[ 0 .. 4 ] ], 'top_k: ids, best first');
is_deeply([ map { $_->[1] } $logits->top_k(2) ], [ @list[ @order[ 0, 1 ] ] ], 'top_k: scores');
is(scalar(my @none = $logits->top_k(0)), 0, 'top_k(0)');
is(scalar(my @all = $logits->top_k(1e6)), scalar @list, 'top_k beyond the vocabulary: all');

my $p = $logits->softmax;
isa_ok($p, 'Lugh::Logits', 'softmax');
cmp_ok(abs(sum($p->to_list) - 1), '<', 1e-4, 'probabilities sum to 1');
is($p->argmax, $logits->argmax, 'the most likely token keeps its place');
my $max = $list[ argmax(\@list) ];
my $z = sum(map { exp($_ - $max) } @list);
cmp_ok(abs($p->get(7) - exp($list[7] - $max) / $z), '<', 1e-5, 'a probability');
cmp_ok(abs($logits->log_softmax->get(7) - ($list[7] - $max - log $z)), '<', 1e-4, 'log_softmax');
cmp_ok($logits->softmax(temperature => 0.1)->get($logits->argmax), '>', $p->get($logits->argmax),
    'a lower temperature sharpens');

is($inference->sample($logits, greedy => 1), argmax(\@list), 'sample takes the object');
is($inference->sample($logits, seed => 4, temperature => 2), $inference->sample(\@list, seed => 4, temperature => 2),
    '... and draws what it draws from the list');

my $cache = $inference->create_kv_cache;
my $step = $inference->forward_cache($cache, \@tokens, as_object => 1);
is_deeply([ $step->to_list ], \@list, 'forward_cache with as_object');
my $rows = $inference->forward_all(\@tokens, as_object => 1);
is(scalar @$rows, scalar @tokens, 'forward_all: one object per position');
my $list_rows = $inference->forward_all(\@tokens);
is_deeply([ map { [ $_->to_list ] } @$rows ], $list_rows, '... each equal to the rows forward_all returns as lists');
my $batch = $inference->forward_batch([ \@tokens, [ 3, 4 ] ], as_object => 1);
is(ref $batch->[1], 'Lugh::Logits', 'forward_batch: objects');
is_deeply([ map { [ $_->to_list ] } @$batch ], $inference->forward_batch([ \@tokens, [ 3, 4 ] ]),
    '... equal to the lists forward_batch returns');

croaks_like(sub { $logits->get($logits->n_vocab) }, qr/token id \d+ is out of range \[0, \d+\)/, 'get out of range');
croaks_like(sub { $logits->get(-1) }, qr/token id -1 is out of range/, 'negative id');
croaks_like(sub { $logits->top_k(-2) }, qr/n must be an integer >= 0, got -2/, 'negative top_k');
croaks_like(sub { $logits->softmax(temperature => 0) }, qr/temperature must be a finite number > 0/, 'temperature 0');
croaks_like(sub { $logits->softmax(temp => 1) }, qr/unknown option 'temp'/, 'unknown option');
croaks_like(sub { Lugh::Logits->new }, qr/logits come from forward/, 'new');
croaks_like(sub { Lugh::Logits::argmax(bless {}, 'Lugh::Logits') }, qr/not a Lugh::Logits object/, 'a fake object');
croaks_like(sub { $inference->forward_simple(\@tokens, as_object => 1) }, qr/unknown option 'as_object'/,
    'forward_simple returns lists only');
croaks_like(sub { $inference->sample(bless({}, 'Lugh::Logits'), greedy => 1) }, qr/not an array|logits/,
    'sample with a fake object');

done_testing;
