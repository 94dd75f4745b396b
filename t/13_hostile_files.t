# Well-formed but wrong GGUF files, hand-made from the tiny synthetic model
# (t/lib/LughTest/TinyModel.pm): right structure, wrong types, shapes or
# values. ggml would abort or crash on each; Lugh must croak with a message
# naming the file, the tensor or key, and the rule, and stay usable.
# Also hostile paths (a FIFO, a device) and integer arguments out of range.
# Needs no downloaded model.
use strict;
use warnings;
use Test::More;
use List::Util ();
use File::Temp qw(tempdir);
use POSIX ();
use lib 't/lib';
use LughTest qw(croaks_like);
use LughTest::TinyModel qw(tiny_model write_tiny_model);
use LughTest::GGUF ();
use Lugh;

my $dir = tempdir(CLEANUP => 1);

# Fails the test instead of hanging it.
local $SIG{ALRM} = sub { die "timed out\n" };

# A variant of the tiny model, with its keys and tensors edited.
my $n_variants = 0;
sub variant {
    my ($edit, %opt) = @_;
    my $path = "$dir/variant-" . ++$n_variants . '.gguf';
    return write_tiny_model($path, %opt, edit => $edit);
}

# Sets (or adds) a key.
sub set_kv {
    my ($kv, $key, $value) = @_;
    for (my $i = 0; $i < @$kv; $i += 2) {
        next unless $kv->[$i] eq $key;
        $kv->[ $i + 1 ] = $value;
        return;
    }
    push @$kv, $key, $value;
}

# Changes a tensor's type, resizing its data so that the file stays
# consistent (zero bytes: the content never matters, the type does).
my %BLOCK = (f16 => [ 1, 1, 2 ], q8_1 => [ 9, 32, 36 ], i32 => [ 26, 1, 4 ], f64 => [ 28, 1, 8 ],
    q8_k => [ 15, 256, 292 ], i8 => [ 24, 1, 1 ]);
sub retype {
    my ($tensors, $name, $type) = @_;
    my ($id, $block, $bytes) = @{ $BLOCK{$type} };
    my ($t) = grep { $_->[0] eq $name } @$tensors or die "no tensor $name";
    my $n = 1;
    $n *= $_ for @{ $t->[2] };
    $t->[1] = $id;
    $t->[3] = "\0" x ($n / $block * $bytes);
}

# Loads the model (which must work: the file is well-formed) and croaks
# when a session is made on it.
sub refused_at_session {
    my ($path, $re, $name) = @_;
    my $model = eval { Lugh::Model->new(model => $path) };
    ok($model, "$name: the model loads") or return diag $@;
    croaks_like(sub { Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 32) },
        qr/^Lugh::Inference->new: \Q'$path' is not a usable model: \E$re/, $name);
}

subtest 'tensor types the ops cannot take' => sub {
    for my $case (
        [ 'blk.0.attn_q.weight', 'q8_1', 'a matrix-multiplication weight' ],
        [ 'blk.1.ffn_down.weight', 'i32', 'a matrix-multiplication weight' ],
        [ 'blk.0.attn_v.weight', 'i8', 'a matrix-multiplication weight' ],
        [ 'output.weight', 'f64', 'a matrix-multiplication weight' ],
        [ 'token_embd.weight', 'q8_1', 'an embedding table' ],
        [ 'token_embd.weight', 'i32', 'an embedding table' ],
        [ 'blk.0.attn_norm.weight', 'f16', 'a norm weight' ],
        [ 'output_norm.weight', 'f64', 'a norm weight' ],
    ) {
        my ($tensor, $type, $role) = @$case;
        my $path = variant(sub { retype($_[1], $tensor, $type) });
        refused_at_session($path, qr/tensor \Q$tensor\E has type \Q$type\E, which $role cannot have \(architecture llama; allowed: f32/,
            "$tensor as $type");
    }
    my $path = variant(sub { retype($_[1], 'blk.1.attn_k_norm.weight', 'f16') }, arch => 'gemma3');
    refused_at_session($path, qr/tensor blk\.1\.attn_k_norm\.weight has type f16, which a norm weight/, 'gemma3 k norm as f16');
    $path = variant(sub { retype($_[1], 'blk.0.attn_q.bias', 'f16') }, arch => 'qwen2');
    refused_at_session($path, qr/tensor blk\.0\.attn_q\.bias has type f16, which a bias cannot have/, 'qwen2 bias as f16');
    $path = variant(sub { retype($_[1], 'token_embd.weight', 'i8') }, tied => 1);
    refused_at_session($path, qr/tensor token_embd\.weight has type i8, which an embedding table/, 'tied embedding as i8');
};

subtest 'hyperparameters out of range' => sub {
    my $nan = 9**9**9 / 9**9**9;
    my $path = variant(sub { set_kv($_[0], 'llama.rope.dimension_count', [ u32 => 15 ]) });
    refused_at_session($path, qr/llama\.rope\.dimension_count: is 15, but RoPE needs an even count in 2\.\.=16/,
        'odd rope dimension count');
    $path = variant(sub { set_kv($_[0], 'llama.rope.dimension_count', [ u32 => 18 ]) });
    refused_at_session($path, qr/llama\.rope\.dimension_count: is 18/, 'rope dimensions beyond the head');
    $path = variant(sub { set_kv($_[0], 'llama.attention.scale', [ f32 => $nan ]) });
    refused_at_session($path, qr/llama\.attention\.scale: is NaN, but must be a finite number > 0/, 'NaN attention scale');
    $path = variant(sub { set_kv($_[0], 'llama.attention.scale', [ f32 => -0.5 ]) });
    refused_at_session($path, qr/llama\.attention\.scale: is -0\.5/, 'negative attention scale');
    $path = variant(sub { set_kv($_[0], 'llama.rope.freq_base', [ f32 => 1e-45 ]) });
    refused_at_session($path, qr/llama\.rope\.freq_base: is 1e-45, but a RoPE frequency base must be a finite number >= 1/,
        'tiny rope base');
    $path = variant(sub { set_kv($_[0], 'llama.attention.layer_norm_rms_epsilon', [ f64 => 1e-60 ]) });
    refused_at_session($path, qr/llama\.attention\.layer_norm_rms_epsilon: is 0e0 as f32, but must be a finite number > 0/,
        'epsilon that is 0 as f32');
    $path = variant(sub {
        set_kv($_[0], 'llama.rope.scaling.type', [ string => 'linear' ]);
        set_kv($_[0], 'llama.rope.scaling.factor', [ f32 => 9**9**9 ]);
    });
    refused_at_session($path, qr/llama\.rope\.scaling\.factor: gives a RoPE frequency scale of 0e0/, 'infinite rope scaling');
    $path = variant(sub { set_kv($_[0], 'llama.attention.head_count_kv', [ u32 => 3 ]) });
    ok(!eval { Lugh::Inference->new(model => Lugh::Model->new(model => $path)); 1 }, 'KV heads that do not divide: croaks');
    like($@, qr/3 KV heads/, 'KV heads that do not divide: message');
    # fewer layers than its pattern: every layer local, as llama.cpp runs it
    $path = tiny_model($dir, arch => 'gemma3', swa_pattern => 6);
    my @logits = Lugh::Inference->new(model => Lugh::Model->new(model => $path), n_threads => 1)->forward([ 1 .. 12 ]);
    is(scalar(grep { $_ != $_ || abs($_) == 9**9**9 } @logits), 0, 'gemma3: fewer layers than its pattern runs, every layer local');
    $path = variant(sub { set_kv($_[0], 'gemma3.rope.freq_base_swa', [ f32 => 0.001 ]) }, arch => 'gemma3');
    refused_at_session($path, qr/gemma3\.rope\.freq_base_swa: is 1e-3/, 'gemma3: tiny sliding-window rope base');
};

subtest 'tokenizer metadata' => sub {
    my $good = Lugh::Model->new(model => tiny_model($dir));
    my $n = Lugh::Tokenizer->new(model => $good)->n_vocab;
    for my $case ([ bos_token_id => [ u32 => $n ] ], [ eos_token_id => [ u32 => 1 << 20 ] ],
        [ eot_token_id => [ i32 => -7 ] ], [ padding_token_id => [ u32 => $n + 5 ] ])
    {
        my ($key, $value) = @$case;
        my $path = variant(sub { set_kv($_[0], "tokenizer.ggml.$key", $value) });
        my $model = Lugh::Model->new(model => $path);
        croaks_like(sub { Lugh::Tokenizer->new(model => $model) },
            qr/^Lugh::Tokenizer->new: \Q'$path' is corrupt: tokenizer.ggml.$key is $value->[1], not a token id in [0, $n) or -1 (none)\E/,
            "$key $value->[1]");
    }
    my $path = variant(sub { set_kv($_[0], 'tokenizer.ggml.eot_token_id', [ i32 => -1 ]) });
    ok(Lugh::Tokenizer->new(model => Lugh::Model->new(model => $path)), 'an id of -1 means none');

    $path = variant(sub {
        my ($kv) = @_;
        for (my $i = 0; $i < @$kv; $i += 2) {
            $kv->[ $i + 1 ][2][-1] = 'x' x 5000 if $kv->[$i] eq 'tokenizer.ggml.tokens';
        }
    });
    my $model = Lugh::Model->new(model => $path);
    alarm 10;
    croaks_like(sub { Lugh::Tokenizer->new(model => $model) },
        qr/tokenizer\.ggml\.tokens: token \d+ is 5000 bytes long \(the limit is 1024/, 'a 5000-byte token');
    alarm 0;

    $path = variant(sub { set_kv($_[0], 'llama.vocab_size', [ u32 => $n + 16 ]) });
    refused_at_session($path, qr/tokenizer\.ggml\.tokens has $n tokens, but the model's vocabulary .* has ${\($n + 16)}/,
        'fewer tokens than the model has ids');
};

subtest 'paths that are not regular files' => sub {
    my $fifo = "$dir/fifo.gguf";
    SKIP: {
        skip 'no mkfifo', 3 unless POSIX::mkfifo($fifo, 0600);
        alarm 10;
        croaks_like(sub { Lugh::Model->new(model => $fifo) },
            qr/cannot read '\Q$fifo\E': it is not a regular file \(a FIFO, socket or device\)/, 'a FIFO');
        alarm 0;
    }
    SKIP: {
        skip 'no /dev/zero', 3 unless -c '/dev/zero';
        alarm 10;
        croaks_like(sub { Lugh::Model->new(model => '/dev/zero', use_mmap => 0) }, qr/it is not a regular file/,
            '/dev/zero');
        alarm 0;
    }
};

my $model = Lugh::Model->new(model => tiny_model($dir));

subtest 'integer arguments out of range' => sub {
    for my $n (2**31, 2**32 + 2, 513, 65536) {
        croaks_like(sub { Lugh::Inference->new(model => $model, n_threads => $n) },
            qr/n_threads must be an integer <= 512, got $n/, "n_threads $n");
    }
    croaks_like(sub { Lugh::Inference->new(model => $model, n_threads => ~0) },
        qr/n_threads must be an integer below 2\*\*63, got ${\ ~0}/, 'n_threads ~0');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_threads => 2**70) }, qr/n_threads must be an integer/,
        'n_threads 2**70');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_ctx => 2**40) },
        qr/n_ctx must be an integer <= 16777216, got ${\ 2**40}/, 'n_ctx 2**40');
    croaks_like(sub { Lugh::Inference->new(model => $model, n_batch => 2**33) }, qr/n_batch must be an integer <= 16777216/,
        'n_batch 2**33');
    my $inference = Lugh::Inference->new(model => $model, n_threads => 1, n_ctx => 64);
    croaks_like(sub { $inference->generate([ 1, 2 ], max_tokens => 2**40) },
        qr/max_tokens must be an integer <= 2147483647/, 'max_tokens 2**40');
    croaks_like(sub { $inference->generate([ 1, 2 ], max_tokens => 1, seed => ~0) }, qr/seed must be an integer below 2\*\*63/,
        'seed ~0');
};

subtest 'hostile vocabularies build in linear time' => sub {
    # 100k control (and user-defined) tokens sharing a 200-byte prefix, and a
    # control token of 1000 bytes (the longest allowed): quadratic work in
    # the special-token tables or a floodable hash would take minutes
    for my $tok (qw(bpe spm)) {
        my $prefix = '<' . ('x' x 200);
        my $path = variant(sub {
            my ($kv) = @_;
            my %at;
            for (my $i = 0; $i < @$kv; $i += 2) { $at{ $kv->[$i] } = $i + 1 }
            my ($toks, $types) = map { $kv->[ $at{"tokenizer.ggml.$_"} ][2] } qw(tokens token_type);
            my $scores = $at{'tokenizer.ggml.scores'} && $kv->[ $at{'tokenizer.ggml.scores'} ][2];
            for my $i (0 .. 99_999) {
                push @$toks, "$prefix$i>";
                push @$types, $i % 2 ? 3 : 4;
                push @$scores, 0 if $scores;
            }
            push @$toks, '<' . ('y' x 998) . '>';
            push @$types, 3;
            push @$scores, 0 if $scores;
        }, tokenizer => $tok);
        my $model = Lugh::Model->new(model => $path);
        alarm 20;
        my $tokenizer = eval { Lugh::Tokenizer->new(model => $model) };
        ok($tokenizer, "$tok: 100k tokens sharing a prefix, one of 1000 bytes: built") or diag $@;
        my @ids = $tokenizer ? $tokenizer->encode("a$prefix" . "77>b$prefix" . "78>" . ('y' x 998), parse_special => 1) : ();
        alarm 0;
        my $n = $tokenizer ? $tokenizer->n_vocab : 0;
        ok((grep { $_ == $n - 100_001 + 77 } @ids) && (grep { $_ == $n - 100_001 + 78 } @ids),
            "$tok: the shared-prefix tokens are found in text");
    }
};

subtest 'metadata memory is bounded by the file size' => sub {
    # 200k one-byte keys: ~20 bytes each in the file, ~200 in memory
    my $path = LughTest::GGUF::write_gguf("$dir/many-keys.gguf",
        kv => [ map { (sprintf('k%06d', $_) => [ u8 => 0 ]) } 0 .. 199_999 ]);
    alarm 20;
    croaks_like(sub { Lugh::Model->new(model => $path) },
        qr/^Lugh::Model->new: \Q'$path' is corrupt: its metadata would take more than\E \d+ bytes of memory .*limit is 8 times the file size/,
        '200k keys: croaks naming the file and the limit');
    alarm 0;
};

subtest 'still usable' => sub {
    my $inference = Lugh::Inference->new(model => $model, n_threads => 2, n_ctx => 64);
    is($inference->n_threads, List::Util::min(2, Lugh::cpu_features()->{n_cpus}), 'n_threads');
    my @logits = $inference->forward([ 1, 2, 3 ]);
    is(scalar @logits, $inference->n_vocab, 'a forward pass after every refusal');
    ok(!(grep { $_ != $_ } @logits), 'finite logits');
};

done_testing;
