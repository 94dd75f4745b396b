# Token ids identical to llama.cpp b11434: its test vectors, the reference
# token files, and the hard cases of t/data; decode inverts encode.
use strict;
use warnings;
use Test::More;
use File::Spec;
use lib 't/lib';
use LughTest qw(model_path reference_dir read_jsonl);
use Lugh;

# name in the reference files => model or vocab file
my %VOCABS = (
    'gpt-2'                     => 'ggml-vocab-gpt-2',
    'llama-bpe'                 => 'ggml-vocab-llama-bpe',
    'llama-spm'                 => 'ggml-vocab-llama-spm',
    'phi-3'                     => 'ggml-vocab-phi-3',
    'qwen2'                     => 'ggml-vocab-qwen2',
    'qwen35'                    => 'ggml-vocab-qwen35',
    'deepseek-llm'              => 'ggml-vocab-deepseek-llm',
    'gemma-4'                   => 'ggml-vocab-gemma-4',
    'bert-bge'                  => 'ggml-vocab-bert-bge',
    'smollm2-135m-q4_1'         => 'smollm2-135m-q4_1',
    'qwen2.5-coder-0.5b-q4_k_m' => 'qwen2.5-coder-0.5b-q4_k_m',
    'gemma3-270m-q4_k_m'        => 'gemma3-270m-q4_k_m',
);

my @present = grep { model_path($VOCABS{$_}) } sort keys %VOCABS;
plan skip_all => 'no vocabulary files found (run: perl t/fetch-models)' unless @present;

my %tok = map { $_ => Lugh::Tokenizer->new(model => Lugh::Model->new(model => model_path($VOCABS{$_}))) } @present;

sub ids_ok {
    my ($got, $want, $name) = @_;
    return pass($name) if "@$got" eq "@$want";
    fail($name);
    diag("want: @$want\n got: @$got");
}

# llama.cpp's own test vectors: cases split by "\n__ggml_vocab_test__\n", no BOS.
for my $name (grep { /^(?:gpt-2|llama-bpe|llama-spm|phi-3|qwen2|qwen35|deepseek-llm|gemma-4|bert-bge)$/ } @present) {
    my $file = $VOCABS{$name};
    my ($inp, $out) = (model_path("$file.gguf.inp"), model_path("$file.gguf.out"));
    next unless $inp && $out;
    open my $fi, '<:raw', $inp or die $!;
    my $raw = do { local $/; <$fi> };
    my @cases = split /\n__ggml_vocab_test__\n/, $raw, -1;
    pop @cases if @cases && $cases[-1] eq '';
    open my $fo, '<', $out or die $!;
    chomp(my @want = <$fo>);
    is(scalar @cases, scalar @want, "$name: as many cases as expected lines");
    my $ok = 0;
    for my $i (0 .. $#cases) {
        my @got = $tok{$name}->encode($cases[$i], add_special => 0);
        my @exp = split ' ', $want[$i];
        $ok++ if "@got" eq "@exp";
        diag("$name case $i differs") unless "@got" eq "@exp";
    }
    is($ok, scalar @cases, "$name: $ok/" . scalar(@cases) . " llama.cpp test vectors identical");
}

# The reference token files (plain = parse_special off, special = on; no BOS).
my $ref = File::Spec->catdir(reference_dir(), 'tokens');
{
    for my $name (@present) {
        for my $mode (qw(plain special)) {
            my $path = File::Spec->catfile($ref, "tokens.$name.$mode.jsonl");
            next unless -f $path;
            my $rows = read_jsonl($path);
            my $ok = 0;
            for my $row (@$rows) {
                my @got = $tok{$name}->encode($row->{prompt}, add_special => 0, parse_special => $mode eq 'special');
                $ok++ if "@got" eq "@{$row->{tokens}}";
                diag("tokens.$name.$mode: '$row->{prompt}' differs") unless "@got" eq "@{$row->{tokens}}";
            }
            is($ok, scalar @$rows, "tokens.$name.$mode: $ok/" . scalar(@$rows) . ' identical');
        }
    }
}

# Hard cases (t/data/tokenizer-cases.pl) with llama.cpp's ids.
for my $name (@present) {
    my $path = File::Spec->catfile('t', 'data', 'tokenizer-golden', "$name.jsonl");
    next unless -f $path;
    my $rows = read_jsonl($path);
    my ($ok, $total) = (0, 0);
    for my $row (@$rows) {
        my $bytes = pack 'H*', $row->{hex};
        for my $mode (qw(plain special)) {
            my @got = $tok{$name}->encode($bytes, bytes => 1, add_special => 0, parse_special => $mode eq 'special');
            $total++;
            if ("@got" eq "@{$row->{$mode}}") { $ok++ } else { diag("$name $mode: hex $row->{hex} differs") }
        }
    }
    is($ok, $total, "hard cases, $name: $ok/$total identical");
}

# Pre-tokenizers whose vocabulary llama.cpp does not ship: a vocabulary-only
# file with another vocabulary's tokens and merges (t/make-arch-models), its
# hard cases against llama.cpp's ids for the same file.
SKIP: {
    require File::Temp;
    my $dir = File::Temp::tempdir(CLEANUP => 1);
    my $vocabs = LughTest::arch_models($dir, 1, 'vocab-gpt-4o');
    skip $vocabs, 2 unless ref $vocabs;
    my $tok = Lugh::Tokenizer->new(model => Lugh::Model->new(model => $vocabs->{'vocab-gpt-4o'}));
    is($tok->pre_tokenizer, 'gpt-4o', 'the derived vocabulary has the gpt-4o pre-tokenizer');
    my $rows = read_jsonl(File::Spec->catfile('t', 'data', 'tokenizer-golden', 'vocab-gpt-4o.jsonl'));
    my ($ok, $total) = (0, 0);
    for my $row (@$rows) {
        my $bytes = pack 'H*', $row->{hex};
        for my $mode (qw(plain special)) {
            my @got = $tok->encode($bytes, bytes => 1, add_special => 0, parse_special => $mode eq 'special');
            $total++;
            if ("@got" eq "@{$row->{$mode}}") { $ok++ } else { diag("gpt-4o $mode: hex $row->{hex} differs") }
        }
    }
    is($ok, $total, "hard cases, gpt-4o pre-tokenizer (Llama 3's merges): $ok/$total identical");
}

# decode(encode($s)) eq $s, on every valid-UTF-8 test string.
require Encode;
my @strings = map { my $b = $_; my $s = eval { Encode::decode('UTF-8', $b, Encode::FB_CROAK()) }; defined $s ? $s : () }
    do './t/data/tokenizer-cases.pl';
for my $name (@present) {
    my $tok = $tok{$name};
    my $bad = 0;
    # SentencePiece (and Gemma 4's BPE) write spaces as U+2581, so a literal
    # U+2581 comes back as a space.
    my $escapes = $tok->algorithm eq 'spm' || ($tok->pre_tokenizer // '') eq 'gemma4';
    # WordPiece normalises (lower case, no accents, spaces between words): no round trip
    next if $tok->algorithm eq 'wpm';
    my @own = $escapes ? grep { !/\x{2581}/ } @strings : @strings;
    for my $s (@own) {
        my $back = $tok->decode([$tok->encode($s)]);
        next if $back eq $s;
        $bad++;
        diag("$name: round trip of '" . join('', map { sprintf '\\x{%x}', ord } split //, $s) . "' failed");
    }
    is($bad, 0, "$name: decode(encode(\$s)) eq \$s for " . scalar(@own) . ' strings');
}

done_testing;
