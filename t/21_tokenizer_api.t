# Lugh::Tokenizer's API: options, accessors, the streaming decoder, object
# lifetime, and every bad input croaking with a message that names it.
use strict;
use warnings;
use utf8;
use Test::More;
use lib 't/lib';
use LughTest qw(require_model model_path);
use Lugh;

my $path  = require_model('smollm2-135m-q4_1');
my $model = Lugh::Model->new(model => $path);
my $tok   = Lugh::Tokenizer->new(model => $model);
isa_ok($tok, 'Lugh::Tokenizer');

# accessors (SmolLM2: BPE, pre smollm, 49152 tokens, no BOS by default)
is($tok->n_vocab, 49152, 'n_vocab');
is($tok->bos_id, 1, 'bos_id');
is($tok->eos_id, 2, 'eos_id');
is($tok->eot_id, 2, 'eot_id: <|im_end|>');
is($tok->pad_id, 2, 'pad_id');
is($tok->unk_id, 0, 'unk_id');
ok(!$tok->add_bos, 'SmolLM2 adds no BOS by default');
is($tok->algorithm, 'bpe', 'algorithm');
is($tok->model_name, 'gpt2', 'model_name');
is($tok->pre_tokenizer, 'smollm', 'pre_tokenizer');
ok($tok->is_eog(2), '<|im_end|> ends generation');
ok($tok->is_eog(0), '<|endoftext|> ends generation');
ok(!$tok->is_eog(905), 'a word does not');
ok(!$tok->is_eog(-5) && !$tok->is_eog(10**12), 'numbers outside the vocabulary are not EOG');
is_deeply([$tok->eog_ids], [0, 2, 4], 'eog_ids: <|endoftext|>, <|im_end|> and <reponame> (a FIM token, as llama.cpp)');
is($tok->type(2), 'control', 'type control');
is($tok->type(905), 'normal', 'type normal');
is($tok->token_to_text(905), 'Ġworld', 'token_to_text');
is($tok->text_to_token('<|im_end|>'), 2, 'text_to_token');
is($tok->text_to_token('Ġworld'), 905, 'text_to_token of a byte-level text');
is($tok->text_to_token('no such token text'), undef, 'text_to_token: undef when absent');

# encode options
is_deeply([$tok->encode('Hello world')], [19556, 905], 'encode');
is_deeply([$tok->encode('Hello world', add_bos => 1)], [1, 19556, 905], 'add_bos => 1');
is_deeply([$tok->encode('<|im_start|>user')], [44, 108, 306, 79, 3738, 108, 46, 4093], 'control tokens are text by default');
is_deeply([$tok->encode('<|im_start|>user', parse_special => 1)], [1, 4093], 'parse_special => 1');
is_deeply([$tok->encode('')], [], 'empty text');
is_deeply([$tok->encode('', add_bos => 1)], [1], 'empty text with BOS');

# characters or UTF-8 bytes alike
my $chars = 'café 🦙';
my $up    = $chars;
utf8::upgrade($up);
my $bytes = $chars;
utf8::encode($bytes);
my @want = $tok->encode($chars);
is_deeply([$tok->encode($up)], \@want, 'upgraded string: same ids');
is_deeply([$tok->encode($bytes)], \@want, 'UTF-8 byte string: same ids');
is_deeply([$tok->encode("caf\xe9")], [$tok->encode('café')], 'a Latin-1 byte string is read as Latin-1');
my $l1 = "caf\xe9";
utf8::upgrade($l1);
is_deeply([$tok->encode($l1)], [$tok->encode('café')], '... upgraded or not');
is_deeply([$tok->encode("ok \xff", bytes => 1)], [$tok->encode("ok \x{fffd}")], 'bytes => 1: an invalid byte reads as U+FFFD');

# decode
is($tok->decode([19556, 905]), 'Hello world', 'decode(\@ids)');
is($tok->decode(19556, 905), 'Hello world', 'decode(@ids)');
is($tok->decode([]), '', 'decode of nothing');
is($tok->decode([1, 4093, 2]), 'user', 'control tokens give no text');
is($tok->decode([1, 4093, 2], special => 1), '<|im_start|>user<|im_end|>', 'special => 1 renders them');
my @llama = $tok->encode('🦙');
ok(@llama > 1, 'the emoji takes several byte-level tokens');
is($tok->decode(\@llama), '🦙', 'decode reassembles the character');
ok(utf8::is_utf8($tok->decode(\@llama)), 'decode returns characters');
is($tok->decode([$llama[0]]), "\x{fffd}", 'an incomplete character alone is U+FFFD');
is($tok->decode([$llama[0]], bytes => 1), substr(do { my $b = '🦙'; utf8::encode($b); $b }, 0, length $tok->token_to_piece($llama[0])),
    'bytes => 1 keeps the incomplete tail');
is($tok->token_to_piece(905), ' world', 'token_to_piece');
is($tok->token_to_piece(2), '', 'token_to_piece of a control token');
is($tok->token_to_piece(2, special => 1), '<|im_end|>', '... with special => 1');
ok(!utf8::is_utf8($tok->token_to_piece($llama[0])), 'token_to_piece returns bytes');

# streaming decoder: never splits a character
my $dec  = $tok->decoder;
my @ids  = $tok->encode('emoji 🦙🚀 done');
my @out  = map { $dec->add($_) } @ids;
is(join('', @out), 'emoji 🦙🚀 done', 'decoder: whole text');
ok(!(grep { /\x{fffd}/ } @out), 'decoder: no partial characters');
is($dec->flush, '', 'decoder: nothing held at the end');
is($dec->add($llama[0]), '', 'decoder holds an incomplete character');
ok(length $dec->pending, 'pending shows the held bytes');
is($dec->add(@llama[1 .. $#llama]), '🦙', '... and emits it once complete');
$dec->add($llama[0]);
is($dec->flush, "\x{fffd}", 'flush: a held incomplete character becomes U+FFFD');
is($dec->pending, '', 'flush empties it');
$dec->add($llama[0]);
$dec->reset;
is($dec->add(19556), 'Hello', 'reset drops what was held');
is($tok->decoder(special => 1)->add(1, 4093), '<|im_start|>user', 'decoder(special => 1)');

# SPM: the leading-space rule
SKIP: {
    my $spm_path = model_path('ggml-vocab-llama-spm') or skip 'ggml-vocab-llama-spm not fetched', 5;
    my $spm = Lugh::Tokenizer->new(model => Lugh::Model->new(model => $spm_path));
    is($spm->algorithm, 'spm', 'llama-spm is SentencePiece');
    ok($spm->add_bos && $spm->add_space_prefix, 'adds BOS and a space prefix');
    my @ids = $spm->encode('Hello world');
    is($ids[0], 1, 'BOS by default');
    is($spm->decode(\@ids), 'Hello world', 'the prefix space is dropped again');
    is($spm->decode([$spm->encode(' Hello')]), ' Hello', 'a space of the text is kept');
}

# the tokenizer keeps its vocabulary alive
{
    my $m = Lugh::Model->new(model => $path);
    my $t = Lugh::Tokenizer->new(model => $m);
    undef $m;
    is_deeply([$t->encode('Hello world')], [19556, 905], 'works after the model object is gone');
}

# bad input
my @bad = (
    [sub { Lugh::Tokenizer->new }, qr/^Lugh::Tokenizer->new: missing model => \$model/, 'new without model'],
    [sub { Lugh::Tokenizer->new(model => 'x.gguf') }, qr/^Lugh::Tokenizer->new: not a Lugh::Model object \(got x\.gguf\)/, 'new with a string'],
    [sub { Lugh::Tokenizer->new(model => {}) }, qr/not a Lugh::Model object \(got HASH reference\)/, 'new with a hash'],
    [sub { Lugh::Tokenizer->new(model => $model, foo => 1) }, qr/unknown option 'foo' \(valid options: model\)/, 'new: unknown option'],
    [sub { Lugh::Tokenizer->new('model') }, qr/options must be name => value pairs/, 'new: odd arguments'],
    [sub { $tok->encode(undef) }, qr/^Lugh::Tokenizer->encode: text is missing \(undef\)/, 'encode(undef)'],
    [sub { $tok->encode([]) }, qr/text must be a string, not a reference/, 'encode(ref)'],
    [sub { $tok->encode('x', foo => 1) }, qr/unknown option 'foo' \(valid options: add_bos, add_special, bytes, parse_special\)/, 'encode: unknown option'],
    [sub { $tok->encode("\x{1F999}\x{110000}") }, qr/beyond Unicode/, 'encode: a character beyond Unicode'],
    [sub { $tok->encode("\x{263a}", bytes => 1) }, qr/must be a byte string/, 'bytes => 1 with wide characters'],
    [sub { $tok->decode([1, 49152]) }, qr/^Lugh::Tokenizer->decode: token id 49152 at position 1 is out of range \[0, 49152\) at /, 'decode: id too large'],
    [sub { $tok->decode([-1]) }, qr/token id -1 at position 0 is out of range \[0, 49152\)/, 'decode: negative id'],
    [sub { $tok->decode(['abc']) }, qr/token ids element 0 must be an integer/, 'decode: not a number'],
    [sub { $tok->decode(1, special => 1) }, qr/options need the array-reference form/, 'decode: options with a flat list'],
    [sub { $tok->decode([1], foo => 1) }, qr/unknown option 'foo' \(valid options: bytes, special\)/, 'decode: unknown option'],
    [sub { $tok->token_to_piece(49152) }, qr/^Lugh::Tokenizer->token_to_piece: token id 49152 is out of range \[0, 49152\)/, 'token_to_piece: out of range'],
    [sub { $tok->token_to_text(-3) }, qr/token id -3 is out of range/, 'token_to_text: out of range'],
    [sub { $tok->type(1e6) }, qr/^Lugh::Tokenizer->type: token id 1000000 is out of range/, 'type: out of range'],
    [sub { $tok->text_to_token(undef) }, qr/token text is missing/, 'text_to_token(undef)'],
    [sub { $tok->decoder->add(5, 49999) }, qr/^Lugh::Tokenizer::Decoder->add: token id 49999 at position 1 is out of range/, 'decoder: out of range'],
    [sub { $tok->decoder(foo => 1) }, qr/unknown option 'foo' \(valid options: special\)/, 'decoder: unknown option'],
    [sub { Lugh::Tokenizer::encode('Lugh::Tokenizer', 'x') }, qr/Usage|not a Lugh::Tokenizer/, 'encode as a class method'],
    [sub { Lugh::Tokenizer::_encode(bless({}, 'Lugh::Tokenizer'), 'x') }, qr/not a Lugh::Tokenizer object/, 'a hand-blessed hash is not a tokenizer'],
);
for my $case (@bad) {
    my ($code, $re, $name) = @$case;
    eval { $code->() };
    like($@, $re, "croaks: $name");
    unlike($@, qr/\n.+/s, "$name: one line");
}
is_deeply([$tok->encode('still fine')], [$tok->encode('still fine')], 'the tokenizer still works after the errors');

# a model without a vocabulary, and an unsupported pre-tokenizer, are named
SKIP: {
    skip 'no writable temp dir', 2 unless -d '/tmp' && -w '/tmp';
    require File::Temp;
    my $tmp = File::Temp->new(SUFFIX => '.gguf');
    binmode $tmp;
    # a minimal GGUF v3: no tensors, one key general.architecture = "llama"
    my $kv = pack('Q<', 20) . 'general.architecture' . pack('L<', 8) . pack('Q<', 5) . 'llama';
    print $tmp 'GGUF', pack('L<', 3), pack('Q<', 0), pack('Q<', 1), $kv;
    close $tmp;
    my $empty = Lugh::Model->new(model => $tmp->filename);
    eval { Lugh::Tokenizer->new(model => $empty) };
    like($@, qr/has no tokenizer vocabulary/, 'a model without a vocabulary croaks');

    my $tmp2 = File::Temp->new(SUFFIX => '.gguf');
    binmode $tmp2;
    my $str = sub { pack('Q<', length $_[0]) . $_[0] };
    my $kvs = $str->('general.architecture') . pack('L<', 8) . $str->('llama')
            . $str->('tokenizer.ggml.model') . pack('L<', 8) . $str->('gpt2')
            . $str->('tokenizer.ggml.pre') . pack('L<', 8) . $str->('no-such-pre')
            . $str->('tokenizer.ggml.tokens') . pack('L<', 9) . pack('L<', 8) . pack('Q<', 2) . $str->('a') . $str->('b')
            . $str->('tokenizer.ggml.merges') . pack('L<', 9) . pack('L<', 8) . pack('Q<', 1) . $str->('a b');
    print $tmp2 'GGUF', pack('L<', 3), pack('Q<', 0), pack('Q<', 5), $kvs;
    close $tmp2;
    eval { Lugh::Tokenizer->new(model => Lugh::Model->new(model => $tmp2->filename)) };
    like($@, qr/pre-tokenizer 'no-such-pre' \(tokenizer\.ggml\.pre\) is not supported/, 'an unknown pre-tokenizer is named');
}

done_testing;
