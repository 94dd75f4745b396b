# The lugh command: help and version on stdout with status 0, usage errors
# as one line with status 2, runtime errors as one line with status 1, the
# prompt from an argument, a file or standard input (UTF-8), generation and a
# non-interactive chat; embed and rerank as the API computes them.
use strict;
use warnings;
use utf8;
use Test::More;
use File::Temp qw(tempdir);
use IPC::Open3 qw(open3);
use Symbol qw(gensym);
use lib 't/lib';
use LughTest qw(model_path arch_models);
use JSON::PP ();

binmode Test::More->builder->$_, ':encoding(UTF-8)' for qw(output failure_output todo_output);

# (stdout, stderr, status) of lugh with @args, $stdin fed to it (bytes).
sub lugh {
    my ($stdin, @args) = @_;
    my $err = gensym;
    my @bytes = map { my $b = $_; utf8::encode($b); $b } @args;
    my $pid = open3(my $in, my $out, $err, $^X, '-Mblib', 'blib/script/lugh', @bytes);
    binmode $in;
    if (defined $stdin) { utf8::encode($stdin); print {$in} $stdin }
    close $in;
    my ($o, $e) = (do { local $/; <$out> } // '', do { local $/; <$err> } // '');
    waitpid $pid, 0;
    utf8::decode($o);
    utf8::decode($e);
    return ($o, $e, $? >> 8);
}

subtest 'help and version' => sub {
    for my $args ([qw(--help)], [qw(-h)], [qw(help)], [qw(help generate)], [qw(generate --help)], [qw(chat -h)],
        [qw(info --help)], [qw(embed --help)], [qw(help rerank)])
    {
        my ($out, $err, $status) = lugh(undef, @$args);
        is($status, 0, "lugh @$args: status 0");
        like($out, qr/lugh/, '... help on stdout');
        is($err, '', '... nothing on stderr');
    }
    my ($out) = lugh(undef, qw(generate --help));
    like($out, qr/--temperature/, 'lugh generate --help lists the generation options');
    ($out, my $err, my $status) = lugh(undef, '--version');
    is($status, 0, '--version: status 0');
    like($out, qr/\Alugh \(Lugh \d+\.\d+\), ggml \S+, CPU kernels \S+/, '--version names Lugh, ggml and the kernels');
};

subtest 'usage errors: one line, status 2' => sub {
    my $model = model_path('smollm2-135m-q4_1') // 'model.gguf';
    for my $case ([ [], qr/no command given/ ], [ ['frobnicate'], qr/unknown command 'frobnicate'/ ],
        [ [qw(generate --bogus x y)], qr/unknown option '--bogus'/ ],
        [ [ 'generate', $model ], qr/needs a prompt/ ],
        [ [ 'generate', $model, 'a', 'b' ], qr/unexpected argument 'b'/ ],
        [ [ 'generate', '--max-tokens', 'many', $model, 'x' ], qr/invalid value 'many' for --max-tokens/ ],
        [ [qw(info)], qr/info needs one model file/ ], [ [qw(help nope)], qr/unknown command 'nope'/ ],
        [ [ 'generate', '--grammar', 'root ::= "x"', '-j', '{}', $model, 'x' ],
            qr/give one of --grammar and --json-schema, not several/ ],
        [ [qw(embed text)], qr/embed needs a model: -m MODEL/ ],
        [ [ 'embed', '-m', $model ], qr/embed needs texts/ ],
        [ [ 'embed', '-m', $model, '--pooling', 'max', 'x' ], qr/--pooling must be mean, cls, last, none or rank, got 'max'/ ],
        [ [ 'embed', '-m', $model, '--embd-normalize', '-2', 'x' ], qr/--embd-normalize must be -1/ ],
        [ [ 'embed', '-m', $model, '--file', 'x.txt', 'y' ], qr/give the texts once/ ],
        [ [ 'rerank', '-m', $model, 'doc' ], qr/rerank needs --query TEXT/ ],
        [ [qw(rerank --query q doc)], qr/rerank needs a model/ ])
    {
        my ($args, $re) = @$case;
        my ($out, $err, $status) = lugh(undef, @$args);
        is($status, 2, "lugh @$args: status 2");
        like($err, qr/\Alugh: [^\n]*$re[^\n]*\nTry 'lugh[ a-z]* --help' for more information\.\n\z/, '... one line and a hint');
        is($out, '', '... nothing on stdout');
    }
};

subtest 'runtime errors: one line, status 1' => sub {
    my $dir = tempdir(CLEANUP => 1);
    open my $fh, '>', "$dir/bad.gguf" or die $!;
    print {$fh} "not a model";
    close $fh;
    for my $case ([ [qw(info /no/such/file.gguf)], qr/no such file: \/no\/such\/file\.gguf/ ],
        [ [ 'info', "$dir/bad.gguf" ], qr/bad\.gguf/ ], [ [ 'generate', "$dir/bad.gguf", 'hi' ], qr/bad\.gguf/ ],
        (model_path('smollm2-135m-q4_1') ? (
            [ [ 'generate', '--lora', '/no/such/adapter.gguf', model_path('smollm2-135m-q4_1'), 'hi' ],
                qr/Lugh::LoRA->new: cannot read '\/no\/such\/adapter\.gguf'/ ],
            [ [ 'generate', '--rope-scaling', 'dynamic', model_path('smollm2-135m-q4_1'), 'hi' ],
                qr/Unknown scaling_type 'dynamic'/ ],
            [ [ 'embed', '-m', model_path('smollm2-135m-q4_1'), 'a', '' ], qr/text 2 \(an argument\) is empty/ ],
            [ [ 'rerank', '-m', model_path('smollm2-135m-q4_1'), '--query', '', 'doc' ], qr/the query is empty/ ],
            [ [ 'rerank', '-m', model_path('smollm2-135m-q4_1'), '--query', 'q', 'doc' ],
                qr/llama model has no classification head .*it cannot rerank/ ]) : ()),
        [ [ 'embed', '-m', "$dir/bad.gguf", 'x' ], qr/bad\.gguf/ ])
    {
        my ($args, $re) = @$case;
        my ($out, $err, $status) = lugh(undef, @$args);
        is($status, 1, "lugh @$args: status 1");
        like($err, qr/\Alugh: .*$re/, '... the message names the problem');
        unlike($err, qr/ line \d+\.$/m, '... without a perl line number');
        is(scalar(() = $err =~ /\n/g), 1, '... on one line');
    }
};

SKIP: {
    my $model = model_path('smollm2-135m-q4_1') or skip 'the SmolLM2 test model is not fetched', 1;
    subtest 'generate' => sub {
        my @g = (qw(generate --greedy --max-tokens 8), $model);
        my ($out, $err, $status) = lugh(undef, @g, 'The capital of France is');
        is($status, 0, 'status 0');
        like($out, qr/\AThe capital of France is .+\n\z/s, 'the prompt, then the continuation');
        my ($quiet) = lugh(undef, @g[ 0 .. 3 ], '--no-echo', $model, 'The capital of France is');
        # --json-schema-file and -j: JSON the schema describes, as the API writes it
        my ($json) = lugh(undef, qw(generate --greedy --no-echo --max-tokens 48 --json-schema-file),
            't/data/json-schema/cases/person.json', $model, 'Describe a person as JSON:');
        like($json, qr/\A\{\s*"name": "[^"]+",\s*"age": \d+[^{}]*\}\n\z/s, "--json-schema-file: $json");
        my ($number) = lugh(undef, qw(generate --greedy --no-echo --max-tokens 8 -j), '{"enum": [1, 2]}', $model,
            'One or two?');
        like($number, qr/\A[12]\n\z/, "-j: $number");
        # --lora and --rope-* reach the session: the same tokens as the API gives
        require Lugh;
        my $m = Lugh::Model->new(model => $model);
        my $inf = Lugh::Inference->new(model => $m);
        my $tok = Lugh::Tokenizer->new(model => $m);
        my @prompt = $tok->encode('The capital of France is');
        my $rope = Lugh::RoPE->new(scaling_type => 'yarn', freq_scale => 0.5, n_ctx_orig => 4);
        my ($yarn) = lugh(undef, @g[ 0 .. 3 ], qw(--no-echo --rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 4),
            $model, 'The capital of France is');
        is($yarn, $tok->decode([ $inf->generate(\@prompt, greedy => 1, max_tokens => 8, rope => $rope) ]) . "\n",
            '--rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 4');
        is("The capital of France is$quiet", $out, '--no-echo prints only the continuation');
        my ($stdin) = lugh("The capital of France is", @g, '-');
        is($stdin, $out, 'the prompt from standard input');
        my $dir = tempdir(CLEANUP => 1);
        open my $fh, '>:raw', "$dir/prompt.txt" or die $!;
        print {$fh} "The capital of France is";
        close $fh;
        my ($file) = lugh(undef, @g[ 0 .. 3 ], '--file', "$dir/prompt.txt", $model);
        is($file, $out, '--file');
        my ($utf8) = lugh(undef, @g, "Ünïcödé café ☕ is");
        like($utf8, qr/\AÜnïcödé café ☕ is/, 'a non-ASCII prompt is echoed once, correctly');
        ($out, $err) = lugh(undef, @g, '--verbose', 'Hello');
        like($err, qr/\Alugh: \d+ tokens, stopped at the/, '--verbose says why it stopped and how fast');
    };
    subtest 'embed' => sub {
        require Lugh;
        my $inf = Lugh::Inference->new(model => Lugh::Model->new(model => $model));
        my @texts = ('The capital of France', 'Ünïcödé café ☕');
        my ($out, $err, $status) = lugh(undef, 'embed', '-m', $model, @texts);
        is($status, 0, 'status 0');
        is($err, '', 'nothing on stderr');
        my @lines = split /\n/, $out;
        is(scalar @lines, 2, 'a line a text');
        my @want = $inf->embed_batch(\@texts);
        for my $i (0 .. 1) {
            my $got = JSON::PP->new->decode($lines[$i]);
            is(scalar @$got, $inf->model->n_embd, "text $i: n_embd numbers");
            is(max_diff($got, $want[$i]), 0, "text $i: the API's vector (mean pooling, unit length)");
        }
        my ($json) = lugh(undef, 'embed', '--json', '-m', $model, @texts);
        my $doc = JSON::PP->new->decode($json);
        is_deeply([ map { $_->{index} } @{ $doc->{data} } ], [ 0, 1 ], '--json: one document, llama-embedding\'s shape');
        is(max_diff($doc->{data}[1]{embedding}, $want[1]), 0, '--json: the same vectors');
        my ($stdin) = lugh(join("\n", @texts) . "\n", 'embed', '-m', $model, '-');
        is($stdin, $out, 'the texts from standard input, one a line');
        my $dir = tempdir(CLEANUP => 1);
        open my $fh, '>:raw', "$dir/texts.txt" or die $!;
        print {$fh} map { my $t = "$_\n"; utf8::encode($t); $t } @texts;
        close $fh;
        my ($file) = lugh(undef, 'embed', '-m', $model, '--file', "$dir/texts.txt");
        is($file, $out, '--file');
        open $fh, '>:raw', "$dir/gap.txt" or die $!;
        print {$fh} "one\n\nthree\n";
        close $fh;
        (undef, $err, $status) = lugh(undef, 'embed', '-m', $model, '--file', "$dir/gap.txt");
        is($status, 1, 'an empty line: status 1');
        like($err, qr/\Alugh: line 2 of \S+gap\.txt is empty\n\z/, '... naming the line');
        my ($raw) = lugh(undef, qw(embed --pooling last --embd-normalize -1 -m), $model, $texts[0]);
        my $last = $inf->embed($texts[0], pooling => 'last', normalize => 0);
        is(max_diff(JSON::PP->new->decode($raw), $last), 0, '--pooling last --embd-normalize -1');
        my ($taxicab) = lugh(undef, qw(embed --embd-normalize 1 -m), $model, $texts[0]);
        my $sum = 0;
        $sum += abs for @{ JSON::PP->new->decode($taxicab) };
        ok(abs($sum - 1) < 1e-5, "--embd-normalize 1: taxicab length 1 ($sum)");
        my ($tokens) = lugh(undef, qw(embed --pooling none -m), $model, 'a b c');
        my $rows = JSON::PP->new->decode($tokens);
        is(scalar @$rows, scalar @{ $inf->embed('a b c', pooling => 'none') }, '--pooling none: a vector a token');
    };
    subtest 'chat without a terminal' => sub {
        my ($out, $err, $status) = lugh("What is 2+2?\n/save /dev/null\n", qw(chat --greedy --max-tokens 16), $model);
        is($status, 0, 'status 0');
        like($out, qr/\S.*\n\[saved 2 messages to \/dev\/null\]\n\z/s, 'a reply per line read, then /save');
        is($err, '', 'no errors');
    };
}

SKIP: {
    my $dir = tempdir(CLEANUP => 1);
    my $models = arch_models($dir, 1, 'bert');
    skip "no random-weight reranker: $models", 1 unless ref $models;
    subtest 'rerank' => sub {
        require Lugh;
        my $inf = Lugh::Inference->new(model => Lugh::Model->new(model => $models->{bert}));
        my @docs = ('The giant panda is a bear of China.', 'Paris is in France.');
        my $want = $inf->rerank(query => 'what is a panda?', documents => \@docs);
        my ($out, $err, $status) = lugh(undef, 'rerank', '-m', $models->{bert}, '--query', 'what is a panda?', @docs);
        is($status, 0, 'status 0');
        is($err, '', 'nothing on stderr');
        is(max_diff([ split /\n/, $out ], $want), 0, 'a score a line, as the API gives them');
        my ($json) = lugh(undef, 'rerank', '--json', '-m', $models->{bert}, '-q', 'what is a panda?', @docs);
        my $doc = JSON::PP->new->decode($json);
        is_deeply([ map { $_->{document} } @{ $doc->{results} } ], \@docs, '--json: the documents in order');
        is(max_diff([ map { $_->{relevance_score} } @{ $doc->{results} } ], $want), 0, '--json: the scores');
        my ($rank) = lugh(undef, qw(embed --pooling rank -m), $models->{bert}, "what is a panda?\t$docs[0]");
        is(max_diff(JSON::PP->new->decode($rank), [ $want->[0] ]), 0, 'embed --pooling rank: QUERY<TAB>DOCUMENT');
        (undef, $err, $status) = lugh(undef, qw(embed --pooling rank -m), $models->{bert}, 'no tab');
        is($status, 1, 'rank pooling without a separator: status 1');
        like($err, qr/\Alugh: 'no tab' has no query and document separated by --cls-separator\n\z/, '... says so');
    };
}

# The largest difference between two lists of numbers, beyond the f32
# rounding of the printed ones.
sub max_diff {
    my ($got, $want) = @_;
    return 1e9 unless @$got == @$want;
    my $worst = 0;
    for my $i (0 .. $#$want) {
        my $d = abs($got->[$i] - $want->[$i]);
        $d = 0 if $d <= 1e-7 * (1 + abs $want->[$i]);
        $worst = $d if $d > $worst;
    }
    return $worst;
}

done_testing;
