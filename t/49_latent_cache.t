# DeepSeek's multi-head latent attention (deepseek2, issue #36): its cache
# holds one compressed latent (and the RoPE part) per position instead of
# each head's keys and values, and its values are read from the keys' rows.
# Everything built on the cache must not notice: a cached prefix, chat turns
# reusing the cache, a saved and loaded cache, several caches in one batch
# and speculative decoding all give what one-shot generation gives, with
# flash attention on and off.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(arch_models croaks_like);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $models = arch_models($dir, 1, 'deepseek2', 'deepseek3');
plan skip_all => $models unless ref $models;
my %GREEDY = (greedy => 1, max_tokens => 12);

for my $name (qw(deepseek2 deepseek3)) {
    my $model = Lugh::Model->new(model => $models->{$name});
    my $tokenizer = Lugh::Tokenizer->new(model => $model);
    my @first = $tokenizer->encode('Once upon a time, in a small village by the sea, there lived');
    my @second = $tokenizer->encode(' an old fisherman who went out every morning', add_special => 0);

    for my $fa (0, 1) {
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, flash_attn => $fa);
        my $one_shot = sub { scalar $inference->generate([@_], %GREEDY) };

        # DeepSeek-V3's grouped sigmoid routing turns the last-bit differences
        # between one-shot and cached evaluation (llama.cpp's kernels have
        # them too: t/52 matches its own two-call run exactly) into other
        # experts, so only V2's routing is held to one-shot over three turns
        subtest "$name fa $fa: a cached prefix and chat turns continue as one-shot" => sub {
            plan skip_all => 'grouped routing: see above' if $name eq 'deepseek3';
            my $cache = $inference->create_kv_cache;
            my $reply = $inference->generate(\@first, %GREEDY, cache => $cache);
            is_deeply($reply, $one_shot->(@first), 'turn 1 as one-shot');
            my @turn2 = (@first, @$reply, @second);
            my $got = $inference->generate(\@turn2, %GREEDY, cache => $cache, stats => \my %stats);
            is_deeply($got, $one_shot->(@turn2), 'turn 2 from the cache as one-shot');
            cmp_ok($stats{n_reused}, '>=', @first + @$reply - 1, 'turn 2 reused the cache');
            my @turn3 = (@turn2, @$got, @first);
            is_deeply(scalar $inference->generate(\@turn3, %GREEDY, cache => $cache),
                $one_shot->(@turn3), 'turn 3 as well');
            # any position, not only checkpoints: no recurrent state here
            $cache->resize(5);
            is($cache->n_cached, 5, 'the cache rolls back to any position');
        };

        subtest "$name fa $fa: a saved cache continues as the one it was saved from" => sub {
            my $cache = $inference->create_kv_cache;
            my $reply = $inference->generate(\@first, %GREEDY, cache => $cache);
            my $file = "$dir/$name-fa$fa.kv";
            $cache->save($file);
            my $loaded = Lugh::KVCache->load($file, inference => $inference);
            is_deeply([ $loaded->tokens ], [ $cache->tokens ], 'the tokens come back');
            my @next = (@first, @$reply, @second);
            is_deeply(scalar $inference->generate(\@next, %GREEDY, cache => $loaded),
                scalar $inference->generate(\@next, %GREEDY, cache => $cache), 'the same continuation');
            # one latent and the RoPE part a position per layer, no values apart
            my $per_position = $model->n_layer * $model->get_kv('deepseek2.attention.key_length') * 2;
            cmp_ok(-s $file, '<', 256 + 4 * $cache->n_cached + ($per_position + 100) * $cache->n_cached,
                "the file holds about $per_position bytes a position (keys only)");
        };

        subtest "$name fa $fa: several caches in one batch" => sub {
            my @sequences = (\@first, \@second, [ @second, @first ]);
            my @caches = map { $inference->create_kv_cache } @sequences;
            my $rows = $inference->forward_batch(sequences => \@sequences, caches => \@caches);
            for my $i (0 .. $#sequences) {
                my @alone = $inference->forward(tokens => $sequences[$i]);
                my $diff = 0;
                for my $j (0 .. $#alone) { my $d = abs($rows->[$i][$j] - $alone[$j]); $diff = $d if $d > $diff }
                cmp_ok($diff, '<', 1e-3, "sequence $i: as alone ($diff)");
            }
        };

        subtest "$name fa $fa: speculative decoding equals greedy decoding" => sub {
            my @prompt = (@first, @second, @first, @second);
            my $plain = $one_shot->(@prompt);
            for my $draft ($inference, 'ngram') {
                my $spec = Lugh::Speculative->new(inference => $inference, draft => $draft, k => 4, greedy => 1);
                my $kind = ref $draft ? 'model' : 'ngram';
                is_deeply($spec->generate(\@prompt, $GREEDY{max_tokens}), $plain, "$kind draft: greedy's tokens");
            }
        };
    }

    require Lugh::Train;
    my $trainee = Lugh::Inference->new(model => $model, n_ctx => 64, n_threads => 2);
    croaks_like(sub { Lugh::Train->forward(inference => $trainee, tokens => [ @first[ 0 .. 5 ] ], train_full => 1) },
        qr/training is not supported for deepseek2: ggml cannot differentiate its expert routing/,
        "$name: training croaks, naming why");
}

done_testing;
