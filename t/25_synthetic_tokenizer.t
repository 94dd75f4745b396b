# Lugh::Tokenizer on the tiny synthetic vocabularies (t/lib/LughTest/TinyModel.pm):
# a byte-level BPE (256 byte tokens, merges that make each listed word one
# token) and a SentencePiece one (byte fallback, ▁-word pieces). The ids are
# known by construction, so encode is checked exactly; decode inverts it on
# the hard cases of t/data. Needs no downloaded model.
use strict;
use warnings;
use utf8;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::TinyModel qw(tiny_model tiny_vocab bpe_byte_char);
use Lugh;

binmode Test::More->builder->$_, ':encoding(UTF-8)' for qw(output failure_output todo_output);

my $dir = tempdir(CLEANUP => 1);
my $bpe_vocab = tiny_vocab('bpe');
my $spm_vocab = tiny_vocab('spm');
my %BW = %{ $bpe_vocab->{words} };    # " the" => id, "Hello" => id
my %SW = %{ $spm_vocab->{words} };    # " the" => id (▁the)
my $bytes = sub { my $s = shift; utf8::encode($s); map { 3 + $_ } unpack 'C*', $s };

my $bpe   = Lugh::Tokenizer->new(model => Lugh::Model->new(model => tiny_model($dir)));
my $spm   = Lugh::Tokenizer->new(model => Lugh::Model->new(model => tiny_model($dir, tokenizer => 'spm')));
my $qwen  = Lugh::Tokenizer->new(model => Lugh::Model->new(model => tiny_model($dir, arch => 'qwen2')));
my $gemma = Lugh::Tokenizer->new(model => Lugh::Model->new(model => tiny_model($dir, arch => 'gemma3')));

subtest 'BPE accessors' => sub {
    isa_ok($bpe, 'Lugh::Tokenizer');
    is($bpe->n_vocab, scalar @{ $bpe_vocab->{tokens} }, 'n_vocab');
    is($bpe->algorithm, 'bpe', 'algorithm');
    is($bpe->model_name, 'gpt2', 'model_name');
    is($bpe->pre_tokenizer, 'smollm', 'pre_tokenizer');
    is($qwen->pre_tokenizer, 'qwen2', 'pre_tokenizer of the qwen2 model');
    is($bpe->bos_id, 1, 'bos_id');
    is($bpe->eos_id, 2, 'eos_id');
    is($bpe->eot_id, 2, 'eot_id: <|im_end|> found by its text');
    is($bpe->unk_id, 0, 'unk_id');
    is($bpe->pad_id, 2, 'pad_id');
    is($bpe->eom_id, undef, 'no eom_id');
    ok(!$bpe->add_bos, 'adds no BOS (add_bos_token false)');
    ok(!$bpe->add_eos, 'adds no EOS');
    is_deeply([ $bpe->eog_ids ], [ 0, 2 ], 'eog_ids: <|endoftext|> and <|im_end|>');
    ok($bpe->is_eog(0) && $bpe->is_eog(2), 'is_eog');
    ok(!$bpe->is_eog(1) && !$bpe->is_eog($BW{' the'}), 'BOS and a word do not end generation');
    ok(!$bpe->is_eog(-1) && !$bpe->is_eog(10**9), 'numbers outside the vocabulary are not EOG');
    is($bpe->type(1), 'control', 'type control');
    is($bpe->type($BW{' the'}), 'normal', 'type normal');
    is($bpe->token_to_text($BW{' world'}), "\x{120}world", 'token_to_text: Ġ for the space');
    is($bpe->token_to_text(3 + 10), bpe_byte_char(10), 'a byte character');
    is($bpe->text_to_token("\x{120}world"), $BW{' world'}, 'text_to_token');
    is($bpe->text_to_token('<|im_end|>'), 2, 'text_to_token of a special token');
    is($bpe->text_to_token('nope, not a token'), undef, 'text_to_token: undef when absent');
};

subtest 'BPE encode' => sub {
    is_deeply([ $bpe->encode('Hello world') ], [ @BW{ 'Hello', ' world' } ], 'two words, two tokens');
    is_deeply([ $bpe->encode('The capital of France is') ], [ @BW{ 'The', ' capital', ' of', ' France', ' is' } ],
        'a sentence of listed words');
    is_deeply([ $bpe->encode('the') ], [ $bytes->('the') ], 'without the space "the" is not a token: bytes');
    is_deeply([ $bpe->encode(' the catalogue') ], [ $BW{' the'}, $BW{' cat'}, $bytes->('alogue') ],
        'the longest merge chain, then bytes');
    is_deeply([ $bpe->encode('2024') ], [ $bytes->('2024') ], 'digits');
    is_deeply([ $bpe->encode('🦙') ], [ $bytes->('🦙') ], 'an emoji is its four bytes');
    is_deeply([ $bpe->encode("a\n\n b") ], [ $bytes->("a\n\n"), $bytes->(' b') ], 'newlines');
    is_deeply([ $bpe->encode('Hello', add_bos => 1) ], [ 1, $BW{Hello} ], 'add_bos => 1');
    is_deeply([ $bpe->encode('') ], [], 'empty text');
    is_deeply([ $bpe->encode('<|im_start|>user') ], [ $bytes->('<|im_start|>user') ], 'control tokens are text by default');
    is_deeply([ $bpe->encode('<|im_start|>user<|im_end|>', parse_special => 1) ], [ 1, $bytes->('user'), 2 ],
        'parse_special => 1');
    my @chars = $bpe->encode('café');
    my $b = 'café';
    utf8::encode($b);
    is_deeply([ $bpe->encode($b) ], \@chars, 'a UTF-8 byte string gives the same ids');
    is_deeply([ $bpe->encode("caf\xe9") ], \@chars, 'a Latin-1 string is read as characters');
    is_deeply([ $bpe->encode("ok \xff", bytes => 1) ], [ $bpe->encode("ok \x{fffd}") ], 'bytes => 1: invalid UTF-8 is U+FFFD');
};

subtest 'BPE decode' => sub {
    is($bpe->decode([ @BW{ 'Hello', ' world' } ]), 'Hello world', 'decode(\@ids)');
    is($bpe->decode(@BW{ 'Hello', ' world' }), 'Hello world', 'decode(@ids)');
    is($bpe->decode([]), '', 'nothing');
    is($bpe->decode([ 1, $BW{Hello}, 2 ]), 'Hello', 'control tokens give no text');
    is($bpe->decode([ 1, $BW{Hello}, 2 ], special => 1), '<|im_start|>Hello<|im_end|>', 'special => 1');
    my @llama = $bytes->('🦙');
    is($bpe->decode(\@llama), '🦙', 'bytes reassemble a character');
    ok(utf8::is_utf8($bpe->decode(\@llama)), 'decode returns characters');
    is($bpe->decode([ $llama[0] ]), "\x{fffd}", 'an incomplete character is U+FFFD');
    is($bpe->decode([ @llama[ 0, 1 ] ], bytes => 1), "\xf0\x9f", 'bytes => 1 keeps it');
    is($bpe->token_to_piece($BW{' world'}), ' world', 'token_to_piece');
    is($bpe->token_to_piece(2), '', 'token_to_piece of a control token');
    is($bpe->token_to_piece(2, special => 1), '<|im_end|>', '... with special => 1');
    ok(!utf8::is_utf8($bpe->token_to_piece($llama[0])), 'token_to_piece returns bytes');
};

subtest 'SentencePiece' => sub {
    is($spm->algorithm, 'spm', 'algorithm');
    is($spm->model_name, 'llama', 'model_name');
    is($spm->n_vocab, scalar @{ $spm_vocab->{tokens} }, 'n_vocab');
    ok($spm->add_bos, 'adds BOS');
    ok($spm->add_space_prefix, 'adds a space prefix');
    is_deeply([ $spm->bos_id, $spm->eos_id, $spm->unk_id ], [ 1, 2, 0 ], 'bos, eos, unk');
    is($spm->type(0), 'unknown', '<unk> is unknown');
    is($spm->type(3), 'byte', '<0x00> is a byte token');
    is($spm->token_to_text($SW{' cat'}), "\x{2581}cat", 'token_to_text with ▁');
    is_deeply([ $spm->encode('the cat sat on the mat') ], [ 1, @SW{ ' the', ' cat', ' sat', ' on', ' the', ' mat' } ],
        'BOS, then one piece per listed word (the space prefix makes "the" ▁the)');
    is_deeply([ $spm->encode('Hello world', add_special => 0) ], [ @SW{ ' Hello', ' world' } ], 'add_special => 0');
    my $mark = $spm->text_to_token("\x{2581}");
    is_deeply([ $spm->encode('🦙', add_special => 0) ], [ $mark, $bytes->('🦙') ], 'byte fallback for an unknown character');
    is_deeply([ $spm->encode('xyz', add_special => 0) ], [ $mark, map { $spm->text_to_token($_) } qw(x y z) ],
        'characters that are pieces');
    is_deeply([ $spm->encode('cat</s>', parse_special => 1, add_special => 0) ], [ $SW{' cat'}, 2 ], 'parse_special');
    is_deeply([ $spm->encode('</s>', parse_special => 1, add_special => 0) ], [2], '... no space prefix before a special token');
    is($spm->decode([ $spm->encode('the cat') ]), 'the cat', 'the prefix space is dropped again');
    is($spm->decode([ $spm->encode(' the cat') ]), ' the cat', 'a space of the text is kept');
    is($spm->decode([ 1, $SW{' cat'}, 2 ], special => 1), '<s>cat</s>',
        'special => 1 renders BOS and EOS (and drops the space after a special token)');
    is($spm->token_to_piece($SW{' the'}), ' the', 'token_to_piece: ▁ is a space');
    is($spm->token_to_piece(3 + 65), 'A', 'token_to_piece of a byte token');
    is_deeply([ $spm->eog_ids ], [2], 'eog_ids: </s>');
};

subtest 'Gemma-style SentencePiece with <end_of_turn>' => sub {
    my $eot = $gemma->text_to_token('<end_of_turn>');
    ok(defined $eot, '<end_of_turn> is a token');
    is($gemma->eot_id, $eot, 'found as the end-of-turn token by its text');
    ok($gemma->is_eog($eot) && $gemma->is_eog(2), '<end_of_turn> and </s> end generation');
    is($gemma->type($eot), 'control', 'a control token');
    is_deeply([ $gemma->encode('<start_of_turn>user', parse_special => 1, add_special => 0) ],
        [ map { $gemma->text_to_token($_) } '<start_of_turn>', "\x{2581}u", qw(s e r) ],
        'parse_special: a space prefix after a special token, as llama.cpp');
};

subtest 'streaming decoder' => sub {
    for my $tok ($bpe, $spm) {
        my $name = $tok->algorithm;
        my $dec = $tok->decoder;
        my @ids = $tok->encode('emoji 🦙🚀 done', add_special => 0);
        my @out = map { $dec->add($_) } @ids;
        is(join('', @out), $tok->decode(\@ids), "$name: the whole text");
        ok(!(grep {/\x{fffd}/} @out), "$name: never a partial character");
        is($dec->flush, '', "$name: nothing held at the end");
        my @llama = $tok->encode('🦙', add_special => 0);
        my $first = $tok->type($llama[0]) eq 'byte' || $tok->algorithm eq 'bpe' ? 0 : 1;
        is($dec->add($llama[$first]), '', "$name: holds an incomplete character");
        ok(length $dec->pending, "$name: pending");
        is($dec->flush, "\x{fffd}", "$name: flush gives U+FFFD");
        $dec->add($llama[$first]);
        $dec->reset;
        is($dec->pending, '', "$name: reset drops it");
    }
    is($bpe->decoder(special => 1)->add(1, $BW{Hello}), '<|im_start|>Hello', 'decoder(special => 1)');
};

# decode(encode($s)) eq $s on every valid-UTF-8 hard case, for every
# pre-tokenizer and both algorithms: the tiny vocabularies cover all bytes.
subtest 'round trips on the hard cases' => sub {
    require Encode;
    my @strings = map { my $b = $_; my $s = eval { Encode::decode('UTF-8', $b, Encode::FB_CROAK()) }; defined $s ? $s : () }
        do './t/data/tokenizer-cases.pl';
    cmp_ok(scalar @strings, '>', 20, 'test strings loaded');
    my %tok = (bpe => $bpe, qwen2 => $qwen, spm => $spm, gemma3 => $gemma);
    for my $name (sort keys %tok) {
        my $tok = $tok{$name};
        my @own = $tok->algorithm eq 'spm' ? grep { !/\x{2581}/ } @strings : @strings;
        my $bad = 0;
        for my $s (@own) {
            my @ids = $tok->encode($s);
            next if $tok->decode(\@ids) eq $s && !grep { $_ < 0 || $_ >= $tok->n_vocab } @ids;
            $bad++;
            diag("$name: round trip of '" . join('', map { sprintf '\\x{%x}', ord } split //, $s) . "' failed");
        }
        is($bad, 0, "$name: decode(encode(\$s)) eq \$s for " . scalar(@own) . ' strings');
    }
};

subtest 'the tokenizer keeps its vocabulary alive' => sub {
    my $m = Lugh::Model->new(model => tiny_model($dir));
    my $t = Lugh::Tokenizer->new(model => $m);
    undef $m;
    is_deeply([ $t->encode('Hello world') ], [ @BW{ 'Hello', ' world' } ], 'works after the model object is gone');
};

subtest 'bad input' => sub {
    my $n = $bpe->n_vocab;
    croaks_like(sub { Lugh::Tokenizer->new(model => 'x.gguf') }, qr/not a Lugh::Model object/, 'new with a string');
    croaks_like(sub { $bpe->encode(undef) }, qr/text is missing \(undef\)/, 'encode(undef)');
    croaks_like(sub { $bpe->encode([]) }, qr/text must be a string, not a reference/, 'encode(ref)');
    croaks_like(sub { $bpe->encode('x', colour => 1) }, qr/unknown option 'colour'/, 'encode: unknown option');
    croaks_like(sub { $bpe->decode([ 1, $n ]) }, qr/token id $n at position 1 is out of range \[0, $n\)/,
        'decode: id too large');
    croaks_like(sub { $spm->decode([-1]) }, qr/token id -1 at position 0 is out of range/, 'decode: negative id');
    croaks_like(sub { $bpe->decode(['abc']) }, qr/token ids element 0 must be an integer/, 'decode: not a number');
    croaks_like(sub { $bpe->token_to_piece($n) }, qr/token id $n is out of range/, 'token_to_piece out of range');
    croaks_like(sub { $spm->type(10**6) }, qr/token id 1000000 is out of range/, 'type out of range');
    croaks_like(sub { $bpe->decoder->add(5, $n + 1) }, qr/out of range/, 'decoder: out of range');
    is_deeply([ $bpe->encode('Hello') ], [ $BW{Hello} ], 'still usable');
};

done_testing;
