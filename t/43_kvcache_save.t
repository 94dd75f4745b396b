# Lugh::KVCache->save and Lugh::KVCache->load: a saved cache, loaded into a
# new session of the same model file, n_ctx and flash-attention setting,
# continues exactly as the cache that was never saved (the tokens of one
# uninterrupted generation; the same logits, bit for bit), on tiny synthetic
# models and on SmolLM2 (skipped when absent); and the refusals, each a
# croak naming the file and what is wrong, after which the session still
# works: another model, n_ctx or flash-attention setting, every truncation
# and every flipped byte of a small file, other files, bad paths and
# arguments.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Copy ();
use lib 't/lib';
use LughTest qw(croaks_like model_path);
use LughTest::TinyModel qw(tiny_model);
use Lugh;

my $dir = tempdir(CLEANUP => 1);

# Whether two lists of logits are the same floats, bit for bit.
sub same_floats { return pack('f*', @{ $_[0] }) eq pack('f*', @{ $_[1] }) }

# Generating from a loaded cache equals generating without saving, and
# forward_cache after loading gives the logits it gives on the saved cache.
sub check_round_trip {
    my ($label, $path, $prompt, %settings) = @_;
    my ($n_first, $n_rest) = (6, 10);
    for my $fa (0, 1) {
        subtest "$label, flash_attn $fa" => sub {
            my %opt = (n_threads => 2, backend => 'CPU', %settings, flash_attn => $fa);
            my $inf = Lugh::Inference->new(model => Lugh::Model->new(model => $path), %opt);
            my @gen = (greedy => 1);
            my @whole = $inf->generate($prompt, @gen, max_tokens => $n_first + $n_rest);
            cmp_ok(scalar @whole, '>', $n_first, 'the uninterrupted generation goes past the save point');

            my $cache = $inf->create_kv_cache;
            my @first = $inf->generate($prompt, @gen, max_tokens => $n_first, cache => $cache);
            is_deeply(\@first, [ @whole[ 0 .. $n_first - 1 ] ], 'generating with a cache: the same first tokens');
            my $file = "$dir/$label-fa$fa.kv";
            is($cache->save($file), 1, 'save returns true');

            # a new model object and session, as another process would make
            my $later = Lugh::Inference->new(model => Lugh::Model->new(model => $path), %opt);
            my $loaded = Lugh::KVCache->load($file, inference => $later);
            isa_ok($loaded, 'Lugh::KVCache');
            is_deeply([ $loaded->tokens ], [ $cache->tokens ], 'the token history');
            is($loaded->n_cached, @$prompt + $n_first - 1, 'n_cached: the prompt and all but the last token');
            is($loaded->n_ctx, $inf->n_ctx, 'n_ctx');
            is($loaded->n_layer, $inf->n_layer, 'n_layer');

            my @context = (@$prompt, @first);
            my @rest = $later->generate(\@context, @gen, max_tokens => $n_rest, cache => $loaded, stats => \my %stats);
            is($stats{n_evaluated}, 1, 'only the last token is evaluated');
            is_deeply([ @first, @rest ], \@whole, 'continuing from the loaded cache: the uninterrupted generation');
            my @unsaved = $inf->generate(\@context, @gen, max_tokens => $n_rest, cache => $cache);
            is_deeply(\@rest, \@unsaved, 'and what the cache that was saved continues with');

            my $c = $inf->create_kv_cache;
            $inf->forward_cache($c, $prompt);
            $c->save($file);
            my $back = Lugh::KVCache->load($file, inference => $later);
            for my $token (@whole[ 0 .. 2 ]) {
                my @direct = $inf->forward_cache($c, [$token]);
                my @after  = $later->forward_cache($back, [$token]);
                ok(same_floats(\@after, \@direct), "forward_cache of $token after loading: the same logits, bit for bit");
            }
            is_deeply([ $back->tokens ], [ $c->tokens ], 'both caches went on alike');
            is_deeply([ grep { /\.tmp-/ } glob("$dir/*") ], [], 'no temporary file is left');
        };
    }
}

my @tiny_prompt = map { 3 + ord } split //, 'Once upon a time, th';
for my $arch (qw(llama gemma3)) {
    check_round_trip("tiny-$arch", tiny_model($dir, arch => $arch), \@tiny_prompt, n_ctx => 64);
}
my $smollm2 = model_path('smollm2-135m-q4_1');
SKIP: {
    skip 'SmolLM2 not found (run: perl t/fetch-models)', 2 unless $smollm2;
    check_round_trip('smollm2', $smollm2, [ 6403, 1980, 253, 655, 28, 260, 2240, 282 ], n_ctx => 512);
}

# --- refusals, on the tiny model ---

my $path  = tiny_model($dir);
my $model = Lugh::Model->new(model => $path);
my %opt   = (n_threads => 1, backend => 'CPU', n_ctx => 64, flash_attn => 0);
my $inf   = Lugh::Inference->new(model => $model, %opt);
my $cache = $inf->create_kv_cache;
$inf->forward_cache($cache, [ @tiny_prompt[ 0 .. 3 ] ]);
my $file = "$dir/four.kv";
$cache->save($file);
my $good = do { local $/; open my $fh, '<:raw', $file or die "$file: $!"; <$fh> };

# Croaks (like croaks_like), and the session still generates afterwards.
sub refused {
    my ($code, $re, $name) = @_;
    croaks_like($code, $re, $name);
    my @ids = $inf->generate([ 5, 6, 7 ], max_tokens => 2, greedy => 1);
    is(scalar @ids, 2, "$name: the session still generates");
}

my $load = sub { Lugh::KVCache->load($_[0], inference => $_[1] // $inf) };
ok($load->($file), 'the file loads into the session that saved it');

subtest 'another model' => sub {
    # the same metadata and tensor table, other weights
    my $other = Lugh::Inference->new(model => Lugh::Model->new(model => tiny_model($dir, seed => 2)), %opt);
    refused(sub { $load->($file, $other) },
        qr/\ALugh::KVCache->load: '\Q$file\E' cannot be loaded into this session: it was saved for the model '[^']+' \(llama, fingerprint [0-9a-f]{16}\), but this session runs '[^']+' \(llama, fingerprint [0-9a-f]{16}\)/,
        'other weights');
    my $qwen = Lugh::Inference->new(model => Lugh::Model->new(model => tiny_model($dir, arch => 'qwen2', types => 'f32')),
        %opt);
    refused(sub { $load->($file, $qwen) }, qr/saved for the model .*\(llama, .* this session runs .*\(qwen2, /,
        'another architecture');
    SKIP: {
        skip 'SmolLM2 not found', 4 unless $smollm2;
        my $real = Lugh::Inference->new(model => Lugh::Model->new(model => $smollm2), %opt);
        refused(sub { $load->($file, $real) }, qr/this session runs 'Smollm2 135M[^']*' \(llama, fingerprint/,
            'a real model');
    }
    my $copy = "$dir/copy.gguf";
    File::Copy::copy($path, $copy) or die "copy: $!";
    my $same = Lugh::Inference->new(model => Lugh::Model->new(model => $copy, use_mmap => 0), %opt);
    ok($load->($file, $same), 'a copy of the model file, read without mmap, is the same model');
};

subtest 'other settings' => sub {
    my $wide = Lugh::Inference->new(model => $model, %opt, n_ctx => 128);
    refused(sub { $load->($file, $wide) },
        qr/it was saved from a session with n_ctx 64, and this session has n_ctx 128 \(load it into a session with n_ctx 64\)/,
        'another n_ctx');
    my $fa = Lugh::Inference->new(model => $model, %opt, flash_attn => 1);
    refused(sub { $load->($file, $fa) },
        qr/saved with flash attention off \(V stored transposed\), and this session has flash_attn on/, 'flash attention');
    my $other_batch = Lugh::Inference->new(model => $model, %opt, n_batch => 7, n_threads => 2);
    ok($load->($file, $other_batch), 'n_batch and n_threads may differ');
};

# Writes bytes to a file of their own; its path.
my $n_written = 0;
sub write_bytes {
    my $p = "$dir/damaged-" . $n_written++ . '.kv';
    open my $fh, '>:raw', $p or die "$p: $!";
    print $fh $_[0];
    close $fh or die;
    return $p;
}

subtest 'every truncation' => sub {
    my @bad;
    for my $len (0 .. length($good) - 1) {
        my $p = write_bytes(substr($good, 0, $len));
        my $ok = eval { $load->($p); 1 };
        push @bad, "$len: " . ($ok ? 'loaded' : $@) unless !$ok && $@ =~ /'\Q$p\E' is truncated: the file ends inside /;
        unlink $p;
    }
    is(scalar @bad, 0, 'a file cut at any of ' . length($good) . ' points croaks saying it is truncated')
        or diag join '', @bad[ 0 .. ($#bad < 4 ? $#bad : 4) ];
    refused(sub { $load->(write_bytes(substr($good, 0, 300))) },
        qr/is truncated: the file ends inside the keys of layer 0 \(its header announces 4 positions in \d+ bytes; it has 300\)/,
        'a cut in the data says where');
};

subtest 'every flipped byte' => sub {
    my @bad;
    for my $at (0 .. length($good) - 1) {
        my $bytes = $good;
        substr($bytes, $at, 1) = chr(ord(substr($bytes, $at, 1)) ^ 0x41);
        my $p = write_bytes($bytes);
        my $ok = eval { $load->($p); 1 };
        my $want = $at < 8 ? qr/not a saved Lugh KV cache \(bad magic\)/
            : $at < 12 ? qr/of format version \d+, which this Lugh does not read/
            : $at < 256 ? qr/is corrupt: the header's checksum does not match/
            : qr/is corrupt: the checksum does not match the content/;
        push @bad, "$at: " . ($ok ? 'loaded' : $@) unless !$ok && $@ =~ /'\Q$p\E'/ && $@ =~ $want;
        unlink $p;
    }
    is(scalar @bad, 0, 'a damaged byte anywhere in ' . length($good) . ' croaks saying what is wrong')
        or diag join '', @bad[ 0 .. ($#bad < 4 ? $#bad : 4) ];
    refused(sub { $load->(write_bytes($good . "\0")) }, qr/is corrupt: 1 bytes follow the checksum/, 'a byte too many');
};

subtest 'other files and paths' => sub {
    refused(sub { $load->($path) }, qr/'\Q$path\E' is not a saved Lugh KV cache \(bad magic\)/, 'a GGUF model');
    my $v3 = $good;
    substr($v3, 8, 4) = pack 'V', 4;
    refused(sub { $load->(write_bytes($v3)) },
        qr/is a saved KV cache of format version 4, which this Lugh does not read \(it reads versions 1 to 3\)/,
        'version 4');
    refused(sub { $load->("$dir/absent.kv") }, qr/cannot read '\Q$dir\E\/absent.kv': No such file/, 'a missing file');
    refused(sub { $load->($dir) }, qr/cannot read '\Q$dir\E': it is a directory/, 'a directory');
    refused(sub { $cache->save("$dir/no/such/dir/c.kv") }, qr/\ALugh::KVCache->save: cannot write '\Q$dir\E\/no\/such\/dir\/c.kv': .*No such file/,
        'save into a missing directory');
    refused(sub { $cache->save($dir) }, qr/cannot write '\Q$dir\E': it is a directory/, 'save over a directory');
    SKIP: {
        skip 'root writes anywhere', 4 if $> == 0;
        my $ro = "$dir/read-only";
        mkdir $ro or die;
        chmod 0555, $ro;
        refused(sub { $cache->save("$ro/c.kv") }, qr/cannot write '\Q$ro\E\/c.kv': .*Permission denied/,
            'save into a read-only directory');
        chmod 0755, $ro;
    }
    my $twice = "$dir/twice.kv";
    $cache->save($twice);
    $inf->forward_cache($cache, [9]);
    $cache->save($twice);
    is($load->($twice)->n_cached, 5, 'saving again replaces the file');
    $cache->resize(4);
};

subtest 'arguments' => sub {
    refused(sub { Lugh::KVCache->load($file) }, qr/missing inference => \$inference/, 'load without inference');
    refused(sub { Lugh::KVCache->load($file, inference => $model) }, qr/not a Lugh::Inference object/,
        'inference is not a session');
    refused(sub { Lugh::KVCache->load($file, inference => $inf, n_ctx => 64) },
        qr/unknown option 'n_ctx' \(valid options: inference\)/, 'an unknown option');
    refused(sub { Lugh::KVCache->load() }, qr/\AUsage: Lugh::KVCache->load\(\$path, inference => \$inference\)/,
        'no path');
    refused(sub { Lugh::KVCache->load(undef, inference => $inf) }, qr/path must be a file name, got undef/, 'undef path');
    refused(sub { Lugh::KVCache->load('', inference => $inf) }, qr/the path is empty/, 'empty path');
    refused(sub { $cache->save() }, qr/\AUsage: Lugh::KVCache->save\(self, path\)/, 'save without a path');
    refused(sub { $cache->save([]) }, qr/path must be a file name, got ARRAY reference/, 'a reference as path');
    refused(sub { Lugh::KVCache::save('Lugh::KVCache', $file) }, qr/not a Lugh::KVCache object/, 'save on the class');
    my $standalone = Lugh::KVCache->new(n_layer => 2, n_ctx => 64, n_head_kv => 2, head_dim => 16);
    refused(sub { $standalone->save("$dir/s.kv") }, qr/has not been used by a session yet/, 'an unused standalone cache');
    refused(
        sub { $inf->generate([ 1, 2 ], max_tokens => 2, cache => $cache, callback => sub { $cache->save("$dir/b.kv"); 0 }) },
        qr/in use by a generate call/, 'save from inside a generate on the cache');
};

subtest 'a loaded cache belongs to its session' => sub {
    my $loaded = $load->($file);
    my $other = Lugh::Inference->new(model => $model, %opt);
    croaks_like(sub { $other->forward_cache($loaded, [1]) }, qr/belongs to another Lugh::Inference/,
        'another session of the same model');
    @My::Cache::ISA = ('Lugh::KVCache');
    isa_ok(My::Cache->load($file, inference => $inf), 'My::Cache', 'load from a subclass');
    my $keep = Lugh::KVCache->load($file, inference => Lugh::Inference->new(model => Lugh::Model->new(model => $path), %opt));
    unlink $file;
    is_deeply([ $keep->tokens ], [ @tiny_prompt[ 0 .. 3 ] ], 'the cache outlives its session object and its file');
};

done_testing;
