# Lugh::Chat with the test chat models and their own templates: a
# three-turn greedy conversation gives the same replies as one-shot
# generation over the whole rendered conversation, and turns 2 and 3
# evaluate only the tokens that are new. Also the conversation's API:
# streaming, stop strings, the context overflow policy, errors.
use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use Lugh;

binmode Test::More->builder->$_, ':encoding(UTF-8)' for qw(output failure_output todo_output);

my @MODELS = grep { model_path($_) } qw(smollm2-135m-q4_1 qwen2.5-coder-0.5b-q4_k_m);
plan skip_all => 'needs the SmolLM2 or Qwen test model (run: perl t/fetch-models)' unless @MODELS;

my @QUESTIONS = ('What is the capital of France? Answer in one sentence.', 'And what is the capital of Germany?',
    'Which of these two cities has more inhabitants? Answer in one sentence.');
my %GREEDY = (greedy => 1, max_tokens => 48);

for my $name (@MODELS) {
    subtest "$name: three turns" => sub {
        my $model = Lugh::Model->new(model => model_path($name));
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 2);
        my $chat = Lugh::Chat->new(inference => $inference, %GREEDY);
        for my $turn (1 .. @QUESTIONS) {
            my $question = $QUESTIONS[ $turn - 1 ];
            my $cached = $chat->cache->n_cached;
            my $previous = $chat->stats;
            my @pieces;
            my $reply = $chat->ask($question, callback => sub { push @pieces, $_[0]; 0 });
            my $s = $chat->stats;
            note sprintf 'turn %d: %d prompt tokens, %d reused, %d evaluated, %d generated (%s): %s', $turn,
                @{$s}{qw(n_prompt n_reused n_evaluated n_generated stop_reason)}, $reply;
            ok(length $reply, "turn $turn: a reply");
            is(join('', @pieces), $reply, "turn $turn: the streamed pieces are the reply");
            unlike($reply, qr/<\|im_end\|>|<\|endoftext\|>/, "turn $turn: no end-of-turn marker in the reply");
            my @history = $chat->messages;
            pop @history;    # the reply
            my $one_shot = $inference->chat(messages => \@history, %GREEDY);
            is($reply, $one_shot, "turn $turn: the same reply as one-shot generation over the whole conversation");
            if ($turn > 1) {
                # After a reply that ended at the end-of-turn token, the cache
                # holds the whole conversation so far: all of it is reused.
                if ($previous->{stop_reason} eq 'eos') {
                    is($s->{n_reused}, $cached, "turn $turn: all $cached cached tokens reused");
                }
                else {
                    cmp_ok($s->{n_reused}, '>', $previous->{n_prompt}, "turn $turn: the earlier turns reused");
                }
                is($s->{n_evaluated}, $s->{n_prompt} - $s->{n_reused},
                    "turn $turn: only the $s->{n_evaluated} new tokens evaluated");
                cmp_ok($s->{n_evaluated}, '<', 40, "turn $turn: that is the new question and the reply's end");
            }
        }
        is(scalar(my @m = $chat->messages), 2 * @QUESTIONS, 'user and assistant messages');
    };
}

my $model = Lugh::Model->new(model => model_path($MODELS[0]));
my $inference = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2);

subtest 'system, reset, messages' => sub {
    my $chat = Lugh::Chat->new(inference => $inference, system => 'You answer in one word.', %GREEDY);
    is($chat->system, 'You answer in one word.', 'system');
    my $reply = $chat->ask('What colour is the sky?');
    is_deeply([ map { $_->{role} } $chat->messages ], [qw(system user assistant)], 'roles');
    $chat->reset;
    is_deeply([ map { $_->{role} } $chat->messages ], ['system'], 'reset keeps the system message');
    is($chat->ask('What colour is the sky?'), $reply, 'the same reply after reset');
    is($chat->stats->{n_reused} > 0, 1, '... reusing the cached system turn');
    $chat->system(undef);
    is($chat->system, undef, 'system removed');
    $chat->messages([ { role => 'user', content => 'Hi' }, { role => 'assistant', content => 'Hello!' } ]);
    is(scalar(my @m = $chat->messages), 2, 'messages replaced');
    $chat->add_message(user => 'Say hello again.');
    is(($chat->messages)[-1]{content}, 'Say hello again.', 'add_message');
};

subtest 'stop strings, max_tokens, a callback that stops or dies' => sub {
    my $chat = Lugh::Chat->new(inference => $inference, %GREEDY);
    my $full = $chat->ask('Count from one to ten in words, separated by commas.');
    $chat->reset;
    my ($first_word) = $full =~ /(\w+)/;
    plan skip_all => "no word in the reply '$full'" unless defined $first_word;
    my $stopped = $chat->ask('Count from one to ten in words, separated by commas.', stop => [$first_word]);
    is($chat->finish_reason, 'stop_string', 'finish_reason stop_string');
    is($stopped, substr($full, 0, index($full, $first_word)), 'the reply ends before the stop string');
    $chat->reset;
    $chat->ask('Count from one to ten in words, separated by commas.', max_tokens => 3);
    is($chat->finish_reason, 'max_tokens', 'finish_reason max_tokens');
    $chat->reset;
    my $calls = 0;
    $chat->ask('Count from one to ten in words.', callback => sub { ++$calls == 2 });
    is($chat->finish_reason, 'callback', 'a true callback result stops the reply');
    $chat->reset;
    eval { $chat->ask('Hello', callback => sub { die "interrupted\n" }) };
    is($@, "interrupted\n", 'a dying callback: the exception propagates');
    is(scalar(my @m = $chat->messages), 0, '... and the turn is taken back');
    ok(length $chat->ask('Hello'), 'the chat stays usable');
};

subtest 'context overflow is never silent' => sub {
    my $small = Lugh::Inference->new(model => $model, n_ctx => 96, n_threads => 2);
    my $chat = Lugh::Chat->new(inference => $small, greedy => 1, max_tokens => 24);
    my $long = join ' ', ('Tell me about rivers.') x 4;
    eval { $chat->ask($long) for 1 .. 4 };
    like($@, qr/Lugh::Chat->ask: the conversation \(\d+ tokens\) plus max_tokens \(24\) needs \d+ positions, but n_ctx is 96/,
        'overflow croaks naming the lengths and n_ctx');
    like($@, qr/drop_oldest/, '... and says how to keep going');
    my $rolling = Lugh::Chat->new(inference => $small, greedy => 1, max_tokens => 24, overflow => 'drop_oldest',
        system => 'Be brief.');
    $rolling->ask($long) for 1 .. 4;
    my @m = $rolling->messages;
    is($m[0]{role}, 'system', 'drop_oldest keeps the system message');
    cmp_ok(scalar @m, '<', 9, 'and forgets the oldest turns');
    is($m[-2]{content}, $long, 'the newest question is there');
    my $tiny = Lugh::Chat->new(inference => $small, max_tokens => 90, overflow => 'drop_oldest');
    eval { $tiny->ask($long) };
    like($@, qr/even the newest message alone does not fit/, 'drop_oldest croaks when nothing more can go');
};

subtest 'errors' => sub {
    croaks_like(sub { Lugh::Chat->new }, qr/Lugh::Chat->new: missing inference/, 'no inference');
    croaks_like(sub { Lugh::Chat->new(inference => $model) }, qr/missing inference => \$inference/, 'a model');
    croaks_like(sub { Lugh::Chat->new(inference => $inference, overflow => 'wrap') },
        qr/overflow must be 'error' or 'drop_oldest', got 'wrap'/, 'bad overflow');
    croaks_like(sub { Lugh::Chat->new(inference => $inference, tempreature => 1) },
        qr/unknown option 'tempreature'/, 'unknown option');
    my $chat = Lugh::Chat->new(inference => $inference);
    croaks_like(sub { $chat->ask }, qr/Lugh::Chat->ask: give the user's text/, 'no text');
    croaks_like(sub { $chat->ask('hi', max_tokns => 3) }, qr/unknown option 'max_tokns'/, 'unknown turn option');
    croaks_like(sub { $chat->messages([ 'hi' ]) }, qr/a message must be a hash reference/, 'bad message');
    croaks_like(sub { $inference->chat(max_tokens => 3) }, qr/Lugh::Inference->chat: missing messages/,
        'chat without messages');
};

done_testing;
