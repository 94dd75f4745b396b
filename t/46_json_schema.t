# JSON schemas (llama.cpp b11434's json-schema-to-grammar): Lugh::Grammar->
# from_json_schema, generate(json_schema => ...) and response_format, and
# schema-constrained generation against llama.cpp's (t/data/reference/
# VARIANT/json-schema.MODEL.jsonl, written by bench/make-grammar-reference
# from the schemas of t/data/json-schema/cases): greedy and seeded
# generations give llama.cpp's tokens, and what they write is JSON that the
# schema accepts. The conversion itself is compared with llama.cpp's text
# for a corpus of schemas by cargo test (json_schema::tests).
use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path reference_dir read_jsonl croaks_like @TEST_MODELS);
use File::Spec;
use JSON::PP ();
use Time::HiRes qw(time);
use Lugh;

my $CASES = 't/data/json-schema/cases';
my $JSON = JSON::PP->new->utf8(0)->allow_nonref;

sub slurp { my ($f) = @_; open my $fh, '<:raw', $f or die "$f: $!"; local $/; return scalar <$fh> }

# Whether $value satisfies $schema, for the keywords the cases use; the
# reason it does not otherwise.
sub violation {
    my ($schema, $value, $where, $root) = @_;
    $root //= $schema;
    if (my $ref = $schema->{'$ref'}) {
        my ($name) = $ref =~ m{\A#/\$defs/(.+)\z} or return "$where: unknown \$ref $ref";
        return violation($root->{'$defs'}{$name}, $value, $where, $root);
    }
    if (my $any = $schema->{anyOf}) {
        return (grep { !defined violation($_, $value, $where, $root) } @$any) ? undef : "$where: no anyOf branch";
    }
    if (my $enum = $schema->{enum}) {
        return (grep { defined $value && !ref $value && $_ eq $value } @$enum) ? undef : "$where: not in the enum";
    }
    my $type = $schema->{type} // return undef;
    if ($type eq 'object') {
        return "$where: not an object" unless ref $value eq 'HASH';
        for my $key (@{ $schema->{required} // [] }) {
            return "$where: $key is missing" unless exists $value->{$key};
        }
        for my $key (sort keys %$value) {
            my $sub = $schema->{properties}{$key} or return "$where: unexpected key $key";
            my $v = violation($sub, $value->{$key}, "$where/$key", $root);
            return $v if defined $v;
        }
        return undef;
    }
    if ($type eq 'array') {
        return "$where: not an array" unless ref $value eq 'ARRAY';
        return "$where: too few items" if @$value < ($schema->{minItems} // 0);
        return "$where: too many items" if defined $schema->{maxItems} && @$value > $schema->{maxItems};
        for my $i (0 .. $#$value) {
            my $v = violation($schema->{items}, $value->[$i], "$where/$i", $root);
            return $v if defined $v;
        }
        return undef;
    }
    if ($type eq 'integer') {
        return "$where: not an integer" unless defined $value && !ref $value && $value =~ /\A-?\d+\z/;
        return "$where: below the minimum" if defined $schema->{minimum} && $value < $schema->{minimum};
        return "$where: above the maximum" if defined $schema->{maximum} && $value > $schema->{maximum};
        return undef;
    }
    if ($type eq 'string') {
        return "$where: not a string" unless defined $value && !ref $value;
        my $length = length $value;
        return "$where: too short" if $length < ($schema->{minLength} // 0);
        return "$where: too long" if defined $schema->{maxLength} && $length > $schema->{maxLength};
        return "$where: not a date" if ($schema->{format} // '') eq 'date' && $value !~ /\A\d{4}-\d\d-\d\d\z/;
        return "$where: does not match $schema->{pattern}"
            if defined $schema->{pattern} && $value !~ /$schema->{pattern}/;
        return undef;
    }
    return JSON::PP::is_bool($value) ? undef : "$where: not a boolean" if $type eq 'boolean';
    return defined $value ? "$where: not null" : undef if $type eq 'null';
    return "$where: type $type is not checked here";
}

subtest 'from_json_schema' => sub {
    my %person = (type => 'object', properties => { name => { type => 'string' }, age => { type => 'integer' } },
        required => [qw(name age)]);
    my $g = Lugh::Grammar->from_json_schema(\%person);
    isa_ok($g, 'Lugh::Grammar');
    like($g->text, qr/^root ::= "\{" space age-kv "," space name-kv space "\}"$/m,
        'a hash: properties in sorted key order');
    my $text = Lugh::Grammar->from_json_schema(
        '{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}');
    like($text->text, qr/^root ::= "\{" space name-kv "," space age-kv space "\}"$/m, 'JSON text: its own order');
    ok($g->accepts('{"age": 30, "name": "Alice"}'), 'accepts an instance');
    ok(!$g->accepts('{"name": "Alice", "age": 30}'), 'in its order only, as llama.cpp');
    ok(!$g->accepts('{"age": "30", "name": "Alice"}'), 'not a wrong type');
    is_deeply([ $g->schema_warnings ], [], 'nothing ignored');
    my $loose = Lugh::Grammar->from_json_schema({ type => 'number', minimum => 3 });
    like(join("\n", $loose->schema_warnings), qr/bounds of a number are not enforced/, 'what is not enforced');
    ok(Lugh::Grammar->from_json_schema({ type => 'boolean', const => JSON::PP::true() })->accepts('true'),
        'JSON::PP booleans');
    ok(Lugh::Grammar->from_json_schema({ enum => [ '1', 2 ] })->accepts('"1"'), 'a string stays a string');
    ok(Lugh::Grammar->from_json_schema({})->accepts('[1, {"a": null}]'), 'the empty schema: any JSON value');
    for my $file (glob "$CASES/*.json") {
        ok(Lugh::Grammar->from_json_schema(slurp($file))->n_rules > 1, "from_json_schema of $file");
    }
};

subtest 'bad schemas croak within a second' => sub {
    my $deep = {};
    my $at = $deep;
    $at = $at->{properties}{a} = { type => 'object' } for 1 .. 10_000;
    my %bad = (
        'an unsupported keyword'      => [ { type => 'string', not => { const => 'x' } }, qr/unsupported keyword not/ ],
        'an unknown type'             => [ { type => 'decimal' }, qr/decimal/ ],
        'a remote $ref'               => [ { '$ref' => 'https://example.com/s.json' }, qr/only references into the same document/ ],
        'invalid JSON'                => [ '{"type": ', qr/not valid JSON/ ],
        '10,000-deep hash'            => [ $deep, qr/nested deeper than 512 levels/ ],
        '10,000-deep text'            => [ ('{"items":' x 10_000) . '{}' . ('}' x 10_000), qr/recursion limit|deeper/ ],
        'a code reference'            => [ sub {1}, qr/must be a hash reference or JSON text/ ],
        'undef'                       => [ undef, qr/is undefined/ ],
    );
    for my $name (sort keys %bad) {
        my ($schema, $error) = @{ $bad{$name} };
        my $t0 = time;
        croaks_like(sub { Lugh::Grammar->from_json_schema($schema) }, $error, $name);
        cmp_ok(time - $t0, '<', 1, "$name: within a second");
    }
    croaks_like(sub { Lugh::Grammar->from_json_schema() }, qr/Usage/, 'no schema');
};

my $variant = Lugh::cpu_features()->{variant};
my @models = grep { model_path($_) } @TEST_MODELS;
for my $name (@models) {
    subtest "$name: schema-constrained generation" => sub {
        my $file = File::Spec->catfile(reference_dir(), $variant, "json-schema.$name.jsonl");
        plan skip_all => "no JSON-schema reference for this build's kernel variant ($variant): run"
            . ' bench/make-grammar-reference' unless -f $file;
        my $model = Lugh::Model->new(model => model_path($name));
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 1024, n_threads => 2, flash_attn => 1);
        my $tokenizer = Lugh::Tokenizer->new(model => $model);
        my %eog = map { $_ => 1 } grep { $tokenizer->is_eog($_) } 0 .. $tokenizer->n_vocab - 1;
        my (%equal, %total, $valid, $complete);
        for my $case (@{ read_jsonl($file) }) {
            my $text = slurp("$CASES/$case->{schema}");
            my @sampling = $case->{mode} eq 'greedy' ? (greedy => 1)
                : (seed => $case->{seed}, temperature => $case->{temperature});
            my @ids = $inference->generate($case->{tokens}, max_tokens => $case->{n}, json_schema => $text,
                @sampling, stats => \my %stats);
            my @got = (@ids, $stats{stop_reason} eq 'eos' ? ('eog') : ());
            my @want = map { $eog{$_} ? 'eog' : $_ } @{ $case->{sampled} };
            my $label = "$case->{case} ($case->{mode}" . ($case->{seed} ? " seed $case->{seed}" : '') . ')';
            $total{ $case->{mode} }++;
            $equal{ $case->{mode} }++ if "@got" eq "@want";
            is("@got", "@want", "$label: llama.cpp's tokens") or diag "text: $stats{text}";
            next unless $stats{stop_reason} eq 'eos';
            $complete++;
            my $value = eval { $JSON->decode($stats{text}) };
            my $violation = $@ ? "not JSON: $@" : violation($JSON->decode($text), $value, '#');
            ok(!defined $violation, "$label: the schema accepts what it wrote") or diag "$violation: $stats{text}";
            $valid++ unless defined $violation;
        }
        diag sprintf '%s: greedy %d/%d, seeded %d/%d equal to llama.cpp\'s tokens; %d of %d complete outputs valid',
            $name, $equal{greedy} // 0, $total{greedy}, $equal{seeded} // 0, $total{seeded}, $valid // 0,
            $complete // 0;
    };
}

SKIP: {
    my ($name) = @models or skip 'no test model (run: perl t/fetch-models)', 1;
    subtest "$name: the json_schema and response_format options" => sub {
        my $model = Lugh::Model->new(model => model_path($name));
        my $inference = Lugh::Inference->new(model => $model, n_ctx => 512, n_threads => 2);
        my $prompt = [ Lugh::Tokenizer->new(model => $model)->encode('A colour and a number, as JSON:') ];
        my $schema = { type => 'object', properties => { colour => { enum => [qw(red green blue)] },
            n => { type => 'integer', minimum => 1, maximum => 9 } }, required => [qw(colour n)] };
        my @gen = (max_tokens => 40, greedy => 1);
        my @a = $inference->generate($prompt, @gen, json_schema => $schema, stats => \my %s);
        my $value = eval { $JSON->decode($s{text}) };
        ok(ref $value eq 'HASH' && !defined violation($schema, $value, '#'), "valid: $s{text}");
        is(join(' ', $inference->generate($prompt, @gen, json_schema => JSON::PP->new->canonical->encode($schema))),
            "@a", 'the same schema as JSON text (keys sorted) gives the same');
        is(join(' ', $inference->generate($prompt, @gen, grammar => Lugh::Grammar->from_json_schema($schema))),
            "@a", 'and as a grammar');
        is(join(' ', $inference->generate($prompt, @gen, json_schema => Lugh::Grammar->from_json_schema($schema))),
            "@a", 'json_schema takes a grammar made by from_json_schema');
        is(join(' ', $inference->generate(prompt => $prompt, @gen, json_schema => $schema)), "@a",
            'with the prompt given as an option');
        is(join(' ', $inference->generate($prompt, @gen, response_format => { type => 'json_object', schema => $schema })),
            "@a", "response_format json_object with a schema");
        is(join(' ', $inference->generate($prompt, @gen,
            response_format => { type => 'json_schema', json_schema => { name => 'x', schema => $schema } })),
            "@a", "response_format json_schema (OpenAI's form)");
        $inference->generate($prompt, @gen, response_format => { type => 'json_object' }, stats => \%s);
        ok($s{stop_reason} eq 'eos' ? defined eval { $JSON->decode($s{text}) }
            : Lugh::Grammar->from_json_schema({})->accepts_prefix($s{text}),
            "json_object alone: any JSON value, or the start of one ($s{stop_reason}): $s{text}");
        my @free = $inference->generate($prompt, @gen);
        is(join(' ', $inference->generate($prompt, @gen, response_format => { type => 'text' })), "@free",
            'response_format text: no constraint');
        my $reply = $inference->chat(messages => [ { role => 'user', content => 'Pick a colour and a number.' } ],
            json_schema => $schema, greedy => 1, max_tokens => 40);
        ok(!defined violation($schema, eval { $JSON->decode($reply) }, '#'), "chat: $reply");
        my $chat = Lugh::Chat->new(inference => $inference,
            response_format => { type => 'json_object', schema => $schema }, greedy => 1, max_tokens => 40);
        my $answer = $chat->ask('Pick a colour and a number.');
        ok(!defined violation($schema, eval { $JSON->decode($answer) }, '#'), "Lugh::Chat: $answer");
        croaks_like(sub { $inference->generate($prompt, json_schema => $schema, grammar => 'root ::= "x"') },
            qr/give one of grammar, json_schema and response_format, not both grammar and json_schema/, 'two constraints');
        croaks_like(sub { $inference->generate($prompt, json_schema => { type => 'string', format => 'email', not => {} }) },
            qr/generate: json_schema: .*unsupported keyword not/, 'an unsupported keyword');
        croaks_like(sub { $inference->generate($prompt, response_format => { type => 'xml' }) },
            qr/response_format type must be 'text', 'json_object' or 'json_schema', got 'xml'/, 'a response_format type');
        croaks_like(sub { $inference->generate($prompt, response_format => [1]) },
            qr/response_format must be a hash/, 'response_format not a hash');
        croaks_like(sub { $inference->generate($prompt, json_schema => \'x') },
            qr/json_schema must be a hash reference or JSON text, not a SCALAR reference/, 'a scalar reference');
        is(join(' ', $inference->generate($prompt, @gen, json_schema => $schema)), "@a", 'usable after the errors');
    };
}

done_testing;
