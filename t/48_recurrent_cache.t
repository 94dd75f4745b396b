# Models with recurrent layers (qwen35: gated delta-net layers beside
# attention; lfm2: short convolutions beside attention; issue #36) and
# everything built on the KV cache: a recurrent
# state cannot be cut back, so the cache keeps checkpoints and rolls back
# only to them. Greedy continuations must not depend on how the context got
# into the cache: a cached prefix, chat turns reusing the cache, a saved and
# loaded cache, several caches in one batch, speculative decoding (which
# rolls back rejected drafts) all give what one-shot generation gives.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(arch_models croaks_like);
use Lugh;

my $dir = tempdir(CLEANUP => 1);
my $models = arch_models($dir, 1, 'qwen35', 'lfm2');
plan skip_all => $models unless ref $models;
my %GREEDY = (greedy => 1, max_tokens => 12);

for my $name (qw(qwen35 lfm2)) {
    my $model = Lugh::Model->new(model => $models->{$name});
    my $tokenizer = Lugh::Tokenizer->new(model => $model);

    my @first = $tokenizer->encode('Once upon a time, in a small village by the sea, there lived');
    my @second = $tokenizer->encode(' an old fisherman who went out every morning');

    for my $fa (0, 1) {
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, flash_attn => $fa);
        my $one_shot = sub { scalar $inference->generate([@_], %GREEDY) };

        subtest "$name fa $fa: a cached prefix continues as one-shot" => sub {
            my $cache = $inference->create_kv_cache;
            $inference->generate(\@first, %GREEDY, max_tokens => 1, cache => $cache);
            my @whole = (@first, @second);
            my $got = $inference->generate(\@whole, %GREEDY, cache => $cache, stats => \my %stats);
            is_deeply($got, $one_shot->(@whole), 'the same tokens as one-shot generation');
            is($stats{n_reused}, scalar @first, 'the first part came from the cache (its end is a checkpoint)');

            # a prompt that leaves the cache inside a decoded stretch: back to the
            # last checkpoint, the rest evaluated again
            my @branch = (@whole, @$got[ 0 .. 3 ], $tokenizer->encode(' and then'));
            my $branched = $inference->generate(\@branch, %GREEDY, cache => $cache, stats => \%stats);
            is_deeply($branched, $one_shot->(@branch), 'a branch inside the decoded tokens: as one-shot');
            is($stats{n_reused}, scalar @whole, 'reused up to the checkpoint at the prompt end');
        };

        subtest "$name fa $fa: rollback only to checkpoints" => sub {
            my $cache = $inference->create_kv_cache;
            $inference->forward(tokens => \@first, cache => $cache);
            $inference->forward(tokens => [ $second[0] ], cache => $cache);
            $inference->forward(tokens => [ $second[1] ], cache => $cache);
            my $n = $cache->n_cached;
            my $where = 'positions [0, ' . scalar(@first) . ", $n]";
            croaks_like(sub { $cache->resize($n - 1) },
                qr/cannot roll the cache back to ${\($n - 1)} positions: this model's recurrent layers .*\Q$where\E/,
                'between checkpoints: croaks, naming where it can go');
            is($cache->n_cached, $n, 'and changes nothing');
            $cache->resize(scalar @first);
            is($cache->n_cached, scalar @first, 'to a checkpoint');
            my @after = $inference->forward(tokens => [ $second[0] ], cache => $cache);
            # the same two calls on a fresh cache: the same numbers on every
            # kernel family (one call over both rounds otherwise on some)
            my $fresh_cache = $inference->create_kv_cache;
            $inference->forward(tokens => \@first, cache => $fresh_cache);
            my @fresh = $inference->forward(tokens => [ $second[0] ], cache => $fresh_cache);
            is_deeply(\@after, \@fresh, 'continuing from the restored checkpoint gives the logits of the same calls');
            $cache->resize(0);
            is($cache->n_cached, 0, 'to the start');
        };

        subtest "$name fa $fa: chat turns reuse the cache and equal one-shot" => sub {
            my $chat = Lugh::Chat->new(inference => $inference, %GREEDY);
            my @questions = ('What is the capital of France?', 'And of Germany?', 'Which is larger?');
            for my $turn (1 .. @questions) {
                my $reply = $chat->ask($questions[ $turn - 1 ]);
                my $s = $chat->stats;
                my @history = $chat->messages;
                pop @history;
                is($reply, $inference->chat(messages => \@history, %GREEDY), "turn $turn: as one-shot");
                cmp_ok($s->{n_reused}, '>', 0, "turn $turn: the cache reused ($s->{n_reused} of $s->{n_prompt})")
                    if $turn > 1;
            }
        };

        subtest "$name fa $fa: a saved cache continues as the one it was saved from" => sub {
            my $cache = $inference->create_kv_cache;
            my $reply = $inference->generate(\@first, %GREEDY, cache => $cache);
            my $file = "$dir/$name-fa$fa.kv";
            $cache->save($file);
            my @next = (@first, @$reply, @second);
            my $loaded = Lugh::KVCache->load($file, inference => $inference);
            is_deeply([ $loaded->tokens ], [ $cache->tokens ], 'the tokens come back');
            my $saved_at = $loaded->n_cached;
            my $from_loaded = $inference->generate(\@next, %GREEDY, cache => $loaded, stats => \my %stats);
            my $from_saved = $inference->generate(\@next, %GREEDY, cache => $cache);
            is_deeply($from_loaded, $from_saved, 'the loaded cache continues as the saved one');
            is($stats{n_reused}, $saved_at, 'from where it was saved');
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
                is($caches[$i]->n_cached, scalar @{ $sequences[$i] }, "sequence $i: its own cache");
            }
        };

        subtest "$name fa $fa: speculative decoding equals greedy decoding" => sub {
            # a repeated prompt, so that the n-gram draft finds what to propose
            my @prompt = (@first, @second, @first, @second);
            my $plain = $one_shot->(@prompt);
            for my $draft ($inference, 'ngram') {
                my $spec = Lugh::Speculative->new(inference => $inference, draft => $draft, k => 4, greedy => 1);
                my $got = $spec->generate(\@prompt, $GREEDY{max_tokens});
                my $kind = ref $draft ? 'model' : 'ngram';
                is_deeply($got, $plain, "$kind draft: the tokens of greedy decoding");
                cmp_ok($spec->tokens_drafted, '>', 0, "$kind draft: tokens were drafted");
            }
        };
    }

    require Lugh::Train;
    my $trainee = Lugh::Inference->new(model => $model, n_ctx => 64, n_threads => 2);
    croaks_like(sub { Lugh::Train->forward(inference => $trainee, tokens => [ @first[ 0 .. 5 ] ], train_full => 1) },
        qr/training is not supported for $name: ggml cannot differentiate its recurrent layers/,
        "$name: training a recurrent model croaks, naming why");
    is(scalar $trainee->generate([ @first[ 0 .. 5 ] ], %GREEDY, max_tokens => 2)->@*, 2,
        "$name: and the session stays usable");
}

# Files whose recurrent sizes do not fit together croak when loaded (ggml's
# ops would abort the process on them).
my $bad = arch_models(
    $dir, 1,
    '{"name":"bad-heads","base":"qwen35","delta_net":{"d_conv":4,"head_dim":32,"n_k_heads":3,"n_v_heads":4}}',
    '{"name":"bad-taps","base":"lfm2","short_conv":1}',
    '{"name":"bad-sections","base":"qwen35","rope_sections":[9,9,9,0]}'
);
croaks_like(sub { Lugh::Inference->new(model => Lugh::Model->new(model => $bad->{'bad-heads'}), n_threads => 1) },
    qr/delta-net sizes do not fit together: .*a multiple of ssm\.group_count 3/,
    'value heads not a multiple of key heads');
croaks_like(sub { Lugh::Inference->new(model => Lugh::Model->new(model => $bad->{'bad-taps'}), n_threads => 1) },
    qr/lfm2\.shortconv\.l_cache is 1, not between 2 and 64/, 'a short convolution of one tap');
croaks_like(sub { Lugh::Inference->new(model => Lugh::Model->new(model => $bad->{'bad-sections'}), n_threads => 1) },
    qr/qwen35\.rope\.dimension_sections \[9, 9, 9, 0\] must cover between 1 and n_rot \/ 2 = 8/,
    'RoPE sections wider than the rotated part');

done_testing;
