# GBNF grammars (llama.cpp b11434's syntax and semantics): Lugh::Grammar's
# parser and its errors, hostile grammars, and grammar-constrained
# generation compared with llama.cpp's (t/data/reference/VARIANT/
# grammar.MODEL.jsonl, written by bench/make-grammar-reference): greedy and
# seeded generations must equal llama.cpp's tokens (a seeded one draws twice
# where the grammar rejects the first draw, as common_sampler does).
use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path reference_dir read_jsonl croaks_like @TEST_MODELS);
use File::Spec;
use File::Temp qw(tempdir);
use Time::HiRes qw(time);
use Lugh;

binmode Test::More->builder->$_, ':encoding(UTF-8)' for qw(output failure_output todo_output);

my $GRAMMARS = 't/data/grammars';

subtest 'parsing and matching' => sub {
    my $g = Lugh::Grammar->new(qq{root ::= answer "."\nanswer ::= "Yes" | "No"\n});
    isa_ok($g, 'Lugh::Grammar');
    is($g->root, 'root', 'root');
    like($g->text, qr/answer ::= "Yes"/, 'text is the GBNF as given');
    is($g->n_rules, 2, 'two rules');
    is($g->rules, "root ::= answer [.] \nanswer ::= [Y] [e] [s] | [N] [o] \n", 'rules as llama.cpp prints them');
    ok($g->accepts('Yes.'), 'accepts a sentence');
    ok(!$g->accepts('Yes'), 'not an unfinished one');
    ok($g->accepts_prefix('Ye'), 'but it is a prefix');
    ok(!$g->accepts_prefix('Yo'), 'a wrong prefix is not');
    my $r = Lugh::Grammar->new(qq{start ::= [a-c]{2,3} | "\\u00e9"+}, root => 'start');
    is($r->root, 'start', 'another root');
    ok($r->accepts('abc') && !$r->accepts('abcd') && !$r->accepts('a'), '{m,n}');
    ok($r->accepts("\x{e9}\x{e9}"), 'UTF-8 characters');
    my $dir = tempdir(CLEANUP => 1);
    for my $file (glob "$GRAMMARS/*.gbnf") {
        my $f = Lugh::Grammar->from_file($file);
        ok($f->n_rules > 0, "from_file $file");
    }
    ok(Lugh::Grammar->from_file("$GRAMMARS/json.gbnf")->accepts(qq({"a": [1, 2.5, "x\\n"], "b": null})), 'JSON');
    ok(Lugh::Grammar->from_file("$GRAMMARS/utf8.gbnf")->accepts("\x{e9}t\x{e9} \x{3b1}\x{3b2} \x{1F600}."), 'UTF-8 classes');
    croaks_like(sub { Lugh::Grammar->from_file("$dir/missing.gbnf") }, qr/cannot open/, 'a missing file');
};

subtest 'errors name the line and column' => sub {
    croaks_like(sub { Lugh::Grammar->new(qq{root ::= "a"\nitem ::= [abc}) },
        qr/grammar syntax error at line 2, column 14: unexpected end of input/, 'an unterminated class');
    croaks_like(sub { Lugh::Grammar->new(qq{root ::= "a"\n  x = "b"}) }, qr/line 2, column 5: expecting ::=/,
        'a missing ::=');
    croaks_like(sub { Lugh::Grammar->new(q{root ::= "\q"}) }, qr/line 1, column 11: unknown escape/, 'an escape');
    croaks_like(sub { Lugh::Grammar->new('root ::= ("a" | "b"') }, qr/expecting '\)'/, 'an open group');
    croaks_like(sub { Lugh::Grammar->new('root ::= "a"{3000}') }, qr/more than 2000 repetitions/, 'repetitions');
    croaks_like(sub { Lugh::Grammar->new('root ::= item') }, qr/undefined rule 'item'/, 'an undefined rule');
    croaks_like(sub { Lugh::Grammar->new(qq{root ::= list\nlist ::= list "," "x" | "x"}) },
        qr/left recursion in rule 'root'/, 'left recursion');
    croaks_like(sub { Lugh::Grammar->new('') }, qr/the grammar is empty/, 'empty');
    croaks_like(sub { Lugh::Grammar->new("# only a comment\n") }, qr/the grammar is empty/, 'only a comment');
    croaks_like(sub { Lugh::Grammar->new('main ::= "a"') }, qr/has no rule 'root'/, 'no root');
    croaks_like(sub { Lugh::Grammar->new('root ::= "a"', rooot => 'x') }, qr/unknown option 'rooot'/, 'an option');
    croaks_like(sub { Lugh::Grammar->new(undef) }, qr/undefined/, 'undef');
    croaks_like(sub { Lugh::Grammar->new("root ::= \"a\0\"") }, qr/NUL byte/, 'a NUL byte');
};

subtest 'hostile grammars croak or parse within a second' => sub {
    my %hostile = (
        '1 MB literal'              => [ 'root ::= "' . ('a' x 2**20) . '"', undef ],
        '1 MB of alternatives'      => [ 'root ::= ' . ('"a" | ' x 2**17) . '"a"', qr/too ambiguous/ ],
        '1 MB of rules'             => [ join('', 'root ::= r0', map {"\nr$_ ::= \"x\" r" . ($_ + 1)} 0 .. 49_999) . "\nr50000 ::= \"y\"", undef ],
        'deep nesting'              => [ 'root ::= ' . ('(' x 100_000) . '"a"' . (')' x 100_000), qr/nested more than/ ],
        'unclosed groups'           => [ 'root ::= ' . ('(' x 2**20), qr/nested more than/ ],
        'a long literal repeated'   => [ 'root ::= "' . ('a' x 100_000) . '"{2000}', qr/expands to more than/ ],
        'nested repetitions'        => [ 'root ::= (((("x"*){0,99}){0,99}){0,99}){0,99}', qr/exceed 2000/ ],
        'exponentially many parses' => [ join("\n", 'root ::= p0', (map { "p$_ ::= p" . ($_ + 1) . ' "x" | p' . ($_ + 1) . ' "y"' } 0 .. 59), 'p60 ::= "z"'), qr/too ambiguous/ ],
        'a chain of left-first rules' => [ join("\n", 'root ::= c0', (map { "c$_ ::= c" . ($_ + 1) . ' "x"' } 0 .. 49_999), 'c50000 ::= "y"'), qr/too ambiguous/ ],
    );
    for my $name (sort keys %hostile) {
        my ($text, $error) = @{ $hostile{$name} };
        my $t0 = time;
        my $g = eval { Lugh::Grammar->new($text) };
        my $elapsed = time - $t0;
        if ($error) {
            like($@, $error, "$name: croaks");
        } else {
            ok($g, "$name: parses") or diag $@;
        }
        cmp_ok($elapsed, '<', 1, sprintf '%s: within a second (%.3f s)', $name, $elapsed);
    }
};

my $variant = Lugh::cpu_features()->{variant};
my @models = grep { model_path($_) } @TEST_MODELS;
my %GRAMMAR_OF;    # file => Lugh::Grammar, parsed once and reused
for my $name (@models) {
    subtest "$name: constrained generation" => sub {
        my $file = File::Spec->catfile(reference_dir(), $variant, "grammar.$name.jsonl");
        plan skip_all => "no grammar reference for this build's kernel variant ($variant): run"
            . " bench/make-grammar-reference" unless -f $file;
        my $model = Lugh::Model->new(model => model_path($name));
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 2, flash_attn => 1);
        my $tokenizer = Lugh::Tokenizer->new(model => $model);
        my %eog = map { $_ => 1 } grep { $tokenizer->is_eog($_) } 0 .. $tokenizer->n_vocab - 1;
        my ($equal, $cases, $seeded_equal, $seeded) = (0, 0, 0, 0);
        for my $case (@{ read_jsonl($file) }) {
            my $g = $GRAMMAR_OF{ $case->{grammar} } //= Lugh::Grammar->from_file("$GRAMMARS/$case->{grammar}");
            my @sampling = $case->{mode} eq 'greedy' ? (greedy => 1)
                : (seed => $case->{seed}, temperature => $case->{temperature});
            my @ids = $inference->generate($case->{tokens}, max_tokens => $case->{n}, grammar => $g, @sampling,
                stats => \my %stats);
            my @got = (@ids, $stats{stop_reason} eq 'eos' ? ('eog') : ());
            my @want = map { $eog{$_} ? 'eog' : $_ } @{ $case->{sampled} };
            my $label = "$case->{case} ($case->{mode}" . ($case->{seed} ? " seed $case->{seed}" : '') . ')';
            my $same = "@got" eq "@want";
            if ($case->{mode} eq 'greedy') {
                $cases++;
                $equal++ if $same;
            } else {
                $seeded++;
                $seeded_equal++ if $same;
            }
            is("@got", "@want", "$label: llama.cpp's tokens") or diag "text: $stats{text}";
            my $complete = $stats{stop_reason} eq 'eos';
            ok($complete ? $g->accepts($stats{text}) : $g->accepts_prefix($stats{text}),
                "$label: the text " . ($complete ? 'is a sentence of' : 'is a prefix in') . ' the grammar')
                or diag $stats{text};
        }
        diag "$name: greedy $equal/$cases, seeded $seeded_equal/$seeded equal to llama.cpp's tokens";
    };
}

SKIP: {
    my ($name) = @models or skip 'no test model (run: perl t/fetch-models)', 1;
    subtest "$name: the grammar option" => sub {
        my $model = Lugh::Model->new(model => model_path($name));
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 512, n_threads => 2);
        my $prompt = [ Lugh::Tokenizer->new(model => $model)->encode('Is the sky blue? Answer:') ];
        my $text = qq{root ::= " " ("Yes" | "No") "."\n};
        my $g = Lugh::Grammar->new($text);
        my %s;
        my @a = $inference->generate($prompt, max_tokens => 8, greedy => 1, grammar => $g, stats => \%s);
        like($s{text}, qr/\A (?:Yes|No)\.\z/, "an answer: '$s{text}'");
        is($s{stop_reason}, 'eos', 'the grammar complete, generation ends');
        my @b = $inference->generate($prompt, max_tokens => 8, greedy => 1, grammar => $g);
        my @c = $inference->generate($prompt, max_tokens => 8, greedy => 1, grammar => $text);
        is("@b", "@a", 'the object is reusable');
        is("@c", "@a", 'text gives the same as the object');
        my $other = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2);
        is(join(' ', $other->generate($prompt, max_tokens => 8, greedy => 1, grammar => $g)), "@a",
            'and shared between sessions');
        my @t = $inference->generate($prompt, max_tokens => 8, temperature => 0.9, seed => 3, grammar => $g,
            stats => \%s);
        like($s{text}, qr/\A (?:Yes|No)\.\z/, "sampled, still an answer: '$s{text}'");
        my $reply = $inference->chat(messages => [ { role => 'user', content => 'Name a colour.' } ],
            grammar => 'root ::= ("red" | "green" | "blue")', greedy => 1, max_tokens => 8);
        like($reply, qr/\A(?:red|green|blue)\z/, "chat: '$reply'");
        my $chat = Lugh::Chat->new(inference => $inference, grammar => $g, greedy => 1, max_tokens => 8);
        like($chat->ask('Is water wet?'), qr/\A (?:Yes|No)\.\z/, 'Lugh::Chat');
        croaks_like(sub { $inference->generate($prompt, grammar => 'root ::= [a') },
            qr/grammar syntax error at line 1, column 12/, 'generate: a syntax error');
        croaks_like(sub { $inference->generate($prompt, grammar => [1]) }, qr/not a Lugh::Grammar object/,
            'generate: not a grammar');
        croaks_like(sub { $inference->generate($prompt, grammar => "root ::= <[99999999]>") },
            qr/allows no token/, 'a grammar no token can start');
        croaks_like(sub { Lugh::Speculative->new(inference => $inference, draft => 'ngram', grammar => $g) },
            qr/grammar is an option of generate/, 'Lugh::Speculative->new points to generate');
        # Speculative decoding under a grammar: greedy, the tokens of plain
        # constrained greedy generation, whatever the draft proposes
        my $json = Lugh::Grammar->from_file("$GRAMMARS/json.gbnf");
        my $jp = [ Lugh::Tokenizer->new(model => $model)->encode('A JSON object describing a cat named Tom:') ];
        my @plain = $inference->generate($jp, max_tokens => 40, greedy => 1, grammar => $json);
        for my $draft ('ngram', $other) {
            my $spec = Lugh::Speculative->new(inference => $inference, draft => $draft, k => 4, temperature => 0);
            my @fast = @{ $spec->generate($jp, max_tokens => 40, grammar => $json) };
            is("@fast", "@plain", 'Lugh::Speculative->generate with a grammar, ' . (ref $draft ? 'model' : 'ngram')
                . ' draft: the tokens of constrained greedy generation');
        }
        my $spec = Lugh::Speculative->new(inference => $inference, draft => 'ngram', k => 4, temperature => 0.9);
        my $answer = Lugh::Tokenizer->new(model => $model)->decode($spec->generate($prompt, max_tokens => 8, grammar => $g,
            seed => 5));
        like($answer, qr/\A (?:Yes|No)\.\z/, "Lugh::Speculative, sampled: '$answer'");
    };
}

done_testing;
