# The lugh command: help and version on stdout with status 0, usage errors
# as one line with status 2, runtime errors as one line with status 1, the
# prompt from an argument, a file or standard input (UTF-8), generation and a
# non-interactive chat.
use strict;
use warnings;
use utf8;
use Test::More;
use File::Temp qw(tempdir);
use IPC::Open3 qw(open3);
use Symbol qw(gensym);
use lib 't/lib';
use LughTest qw(model_path);

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
        [qw(info --help)])
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
            qr/give one of --grammar and --json-schema, not several/ ])
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
                qr/Unknown scaling_type 'dynamic'/ ]) : ()))
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
    subtest 'chat without a terminal' => sub {
        my ($out, $err, $status) = lugh("What is 2+2?\n/save /dev/null\n", qw(chat --greedy --max-tokens 16), $model);
        is($status, 0, 'status 0');
        like($out, qr/\S.*\n\[saved 2 messages to \/dev\/null\]\n\z/s, 'a reply per line read, then /save');
        is($err, '', 'no errors');
    };
}

done_testing;
