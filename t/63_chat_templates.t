# Real chat templates (llama.cpp's collection, fetched by
# `perl t/fetch-models templates`, and the templates inside the test models)
# render exactly as Hugging Face transformers renders them: the expected
# texts in t/data/templates/expected.jsonl come from
# bench/make-template-expectations (jinja2 in transformers' configuration).
# Also: hostile templates croak fast, raise_exception croaks with its message.
use strict;
use warnings;
use Test::More;
use Digest::SHA qw(sha256_hex);
use Encode qw(encode);
use JSON::PP ();
use Time::HiRes qw(time);
use lib 't/lib';
use LughTest qw(model_dir model_path read_jsonl croaks_like);
use Lugh;

binmode Test::More->builder->$_, ':encoding(UTF-8)' for qw(output failure_output todo_output);

my $NOW = 1_700_000_000;    # the time the expectations were rendered at

# Templates that cannot render as transformers does, with the reason.
my %KNOWN_DIFFERENT = (
    'llama-cpp-deepseek-r1.jinja' => "llama.cpp's own template passes map()'s result to tojson: jinja2's map is a"
        . ' generator, which json.dumps refuses, so transformers fails on the two tool conversations; MiniJinja'
        . "'s map gives a list and renders them (the other five conversations are identical)",
    'meetkai-functionary-medium-v3.1.jinja' => "adds a |safe string to tojson's output: jinja2's Markup then"
        . ' HTML-escapes the JSON (&#34;), MiniJinja does not (the five conversations without tools are identical)',
);

my $rows = read_jsonl('t/data/templates/expected.jsonl');
my %by_template;
push @{ $by_template{ $_->{template} } }, $_ for @$rows;

subtest 'the corpus renders as transformers does' => sub {
    my $dir = model_dir() . '/templates';
    plan skip_all => "the template corpus is not fetched (run: perl t/fetch-models templates)" unless -d $dir;
    my ($matched, $total) = (0, 0);
    for my $name (sort keys %by_template) {
        my $source = template_source($dir, $name);
        if (!defined $source) { note "$name: not available here"; next }
        my $cases = $by_template{$name};
        if (sha256_hex(encode('UTF-8', $source)) ne $cases->[0]{sha256}) {
            fail("$name: the file differs from the one the expectations were made from");
            next;
        }
        my $prompt = eval { Lugh::Prompt->new(template => $source, now => $NOW) };
        if (!$prompt) { fail("$name compiles") or diag $@; next }
        my $ok = 1;
        for my $case (@$cases) {
            $total++;
            my %vars = %{ $case->{variables} };
            # tools as JSON text: the order of their keys as Python had it
            $vars{tools} = JSON::PP->new->canonical->encode($vars{tools}) if $vars{tools};
            my $got = eval { $prompt->apply(@{ $case->{messages} }, %vars) };
            my $error = $@;
            if (defined $case->{error}) {
                if (defined $got) { $ok = 0; diag "$name/$case->{case}: rendered, transformers refused: $case->{error}" }
                else { $matched++ }
                next;
            }
            if (!defined $got) { $ok = 0; diag "$name/$case->{case}: $error"; next }
            if ($got eq $case->{text}) { $matched++; next }
            $ok = 0;
            diag "$name/$case->{case}: differs at " . first_difference($got, $case->{text});
        }
        if (my $why = $KNOWN_DIFFERENT{$name}) { TODO: { local $TODO = $why; ok($ok, $name) } }
        else { ok($ok, "$name: " . scalar(@$cases) . ' conversations') }
    }
    note "$matched of $total renderings identical";
};

sub template_source {
    my ($dir, $name) = @_;
    if ($name =~ /\.gguf\z/) {
        (my $model = $name) =~ s/\.gguf\z//;
        my $path = model_path($model) or return undef;
        return Lugh::Model->new(model => $path)->get_kv('tokenizer.chat_template');
    }
    open my $fh, '<:encoding(UTF-8)', "$dir/$name" or return undef;
    local $/;
    return scalar <$fh>;
}

sub first_difference {
    my ($got, $want) = @_;
    my $i = 0;
    $i++ while $i < length($got) && $i < length($want) && substr($got, $i, 1) eq substr($want, $i, 1);
    my $show = sub { my $s = substr($_[0], $i > 20 ? $i - 20 : 0, 60); $s =~ s/\n/\\n/g; $s };
    return "character $i: got '" . $show->($got) . "', want '" . $show->($want) . "'";
}

subtest 'hostile templates croak fast' => sub {
    my %hostile = (
        'an endless loop'    => '{% for i in range(1000000000) %}{% for j in range(1000000000) %}{% endfor %}{% endfor %}',
        'a gigabyte of text' => "{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}",
        'deep recursion'     => '{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}',
        'a huge range'       => '{{ range(10000000000) | list | length }}',
        'a syntax error'     => "{% for m in messages %}\n{{ m.content }\n{% endfor %}",
    );
    for my $name (sort keys %hostile) {
        my $t0 = time;
        my $ok = eval { Lugh::Prompt->new(template => $hostile{$name})->apply({ role => 'user', content => 'x' }); 1 };
        my $error = $@;
        ok(!$ok, "$name: croaks");
        like($error, qr/\ALugh::Prompt->(?:new|apply): (?:chat template error|the chat template's output)/, '... naming the template');
        cmp_ok(time - $t0, '<', 1, '... within a second');
    }
    like(do { eval { Lugh::Prompt->new(template => "{{ 'x' }}\n{% if %}") }; $@ }, qr/line 2/, 'a syntax error names its line');
    croaks_like(sub { Lugh::Prompt->new(template => "{{ raise_exception('Conversation roles must alternate') }}")->apply },
        qr/the chat template raised an exception: Conversation roles must alternate/, 'raise_exception');
    my $p = Lugh::Prompt->new(template => '{{ messages[0].content }}');
    is($p->apply({ role => 'user', content => 'still fine' }), 'still fine', 'the process stays usable');
};

subtest 'fixed formats' => sub {
    is_deeply([ Lugh::Prompt->available_formats ], [qw(chatml llama2 llama3 mistral gemma zephyr alpaca vicuna raw)],
        'available_formats');
    my @conversation = ({ role => 'system', content => 'S' }, { role => 'user', content => 'U1' },
        { role => 'assistant', content => 'A1' }, { role => 'user', content => 'U2' });
    my %want = (
        chatml => "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            . "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n",
        llama2 => "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]",
        llama3 => "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU1"
            . "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|><|start_header_id|>user"
            . "<|end_header_id|>\n\nU2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        gemma => "<start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
            . "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n",
        mistral => "[INST] S\n\nU1 [/INST]A1</s>[INST] U2 [/INST]",
    );
    for my $format (sort keys %want) {
        my $p = Lugh::Prompt->new(format => $format);
        is($p->apply(@conversation, add_generation_prompt => 1, add_bos => 0), $want{$format}, $format);
    }
    is(Lugh::Prompt->new(format => 'llama3')->apply({ role => 'user', content => 'x' }, add_generation_prompt => 0),
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>", 'add_bos on by default (0.12)');
    is(Lugh::Prompt->new(format => 'llama3')->apply({ role => 'user', content => 'x' }, add_bos => 0),
        "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        'add_generation_prompt on by default (0.12); add_bos => 0');
    is(Lugh::Prompt::chatml({ role => 'user', content => 'Hi' }), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        'the functional shortcut');
    is(Lugh::Prompt->new(format => 'chatml')->format_message(user => 'Hi'), "<|im_start|>user\nHi<|im_end|>\n",
        'format_message');
    ok(Lugh::Prompt->has_format('zephyr') && !Lugh::Prompt->has_format('nope'), 'has_format');
    is(Lugh::Prompt->get_format('chatml')->{user_prefix}, "<|im_start|>user\n", 'get_format');
    is(Lugh::Prompt->format_for_architecture('qwen2'), 'chatml', 'format_for_architecture');
    is(Lugh::Prompt->new(format => 'gemma')->template, undef, 'no template for a fixed format');
    croaks_like(sub { Lugh::Prompt->new(format => 'klingon') }, qr/unknown format 'klingon'/, 'unknown format');
    croaks_like(sub { Lugh::Prompt->new(format => 'chatml')->apply({ role => 'user', content => 'x' }, tools => []) },
        qr/unknown option 'tools'/, 'a fixed format takes no template variables');
    croaks_like(sub { Lugh::Prompt->new(format => 'chatml')->apply('hi') }, qr/name => value pairs|hash reference/,
        'a message that is not a hash');
};

SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip 'the SmolLM2 test model is not fetched', 1;
    subtest 'a model brings its template and its special tokens' => sub {
        my $model = Lugh::Model->new(model => $path);
        my $p = Lugh::Prompt->new(model => $model);
        is($p->template, $model->get_kv('tokenizer.chat_template'), 'the template in the GGUF file');
        is($p->format_name, 'template', 'format_name');
        like($p->apply({ role => 'user', content => 'Hi' }, add_generation_prompt => 1),
            qr/<\|im_start\|>user\nHi<\|im_end\|>\n<\|im_start\|>assistant\n\z/, 'renders');
        my $bos = Lugh::Prompt->new(template => '{{ bos_token }}|{{ eos_token }}', model => $model)->apply;
        is($bos, '<|im_start|>|<|im_end|>', "the model's special token strings");
    };
}

done_testing;
