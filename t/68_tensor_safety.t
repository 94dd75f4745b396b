# Lugh::Context, Lugh::Tensor and Lugh::Graph objects keep alive what they
# depend on, whatever is freed first; a context that runs out of memory
# croaks instead of aborting; hostile arguments croak; a loop of tensor work
# that dies leaks nothing; threads get no copies of the objects. Needs no
# downloaded model.
use strict;
use warnings;
use Config;
BEGIN {
    if ($Config{useithreads}) { require threads; threads->import }
}
use Test::More;
use List::Util qw(shuffle);
use Scalar::Util qw(blessed);
use lib 't/lib';
use LughTest qw(croaks_like in_child);
use Lugh;

srand 68;

my $LIVE = Lugh::_live_objects();

sub f32 {
    my ($ctx, $shape, @values) = @_;
    my $t = Lugh::Tensor->new_f32($ctx, @$shape);
    $t->set_f32(@values) if @values;
    return $t;
}

sub compute {
    my ($ctx, @results) = @_;
    my $graph = Lugh::Graph->new($ctx);
    $graph->build_forward($_) for @results;
    $graph->compute($ctx, 1);
    return $graph;
}

# A small graph computes a right answer: the check after each croak.
sub still_works {
    my ($name) = @_;
    my $ctx = Lugh::Context->new(mem_size => 64 * 1024);
    my $a = f32($ctx, [3], 1, 2, 3);
    my $r = Lugh::Ops::mul($ctx, $a, $a);
    compute($ctx, $r);
    is_deeply([ $r->get_f32 ], [ 1, 4, 9 ], "$name: then a graph still computes");
}

sub croaks_then_works {
    my ($code, $re, $name) = @_;
    croaks_like($code, $re, $name);
    still_works($name);
}

subtest 'a tensor keeps its context alive' => sub {
    my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
    my $id  = $ctx->id;
    my $t   = f32($ctx, [5, 3]);
    undef $ctx;
    $t->set_f32(1 .. 15);
    is_deeply([ $t->get_f32 ], [ 1 .. 15 ], 'set and get after the context variable is gone');
    my $home = $t->context;
    isa_ok($home, 'Lugh::Context', '->context');
    is($home->id, $id, 'the same context');
    is($home->mem_size, 1024 * 1024, 'its mem_size');
    my $used = $home->used_mem;
    my $more = f32($home, [4], 1, 1, 1, 1);
    cmp_ok($home->used_mem, '>', $used, 'a new tensor in it takes its memory');
    my $sum = Lugh::Ops::add($home, $t, $t);
    my $col = Lugh::Ops::mul($home, Lugh::Ops::view($home, $t, 0, 4), $more);
    undef $home;
    compute($t->context, $sum, $col);
    is_deeply([ $sum->get_f32 ], [ map { 2 * $_ } 1 .. 15 ], 'ops on it compute');
    is_deeply([ $col->get_f32 ], [ 1 .. 4 ], 'and ops with a view of it');
    undef $t;
    undef $more;
    is_deeply([ $sum->get_f32 ], [ map { 2 * $_ } 1 .. 15 ], 'a result outlives its operands');
    is($sum->context->id, $id, 'and holds their context');
};

subtest 'tensors freed in random order' => sub {
    for my $round (1 .. 20) {
        my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
        my @in  = map { f32($ctx, [4, 3], map { $_ + $round } 1 .. 12) } 1 .. 4;
        my @ops = (
            Lugh::Ops::add($ctx, $in[0], $in[1]),
            Lugh::Ops::mul_mat($ctx, $in[2], $in[3]),
            Lugh::Ops::transpose($ctx, $in[0]),
            Lugh::Ops::view($ctx, $in[1], 2, 5),
            Lugh::Ops::reshape($ctx, $in[2], 12),
        );
        push @ops, Lugh::Ops::cont($ctx, $ops[2]), Lugh::Ops::silu($ctx, $ops[0]);
        my $graph = compute($ctx, @ops[ 0, 1, 5, 6 ]);
        my @all = ($ctx, $graph, @in, @ops);
        my @order = shuffle 0 .. $#all;
        my $keep = $order[-1];
        undef $all[$_] for @order[ 0 .. $#order - 1 ];
        my $last = $all[$keep];
        ok(defined $last, "round $round: the last object is alive");
        if (ref $last eq 'Lugh::Tensor' && $last->has_data) {
            is(scalar(my @v = $last->get_f32), $last->nelements, "round $round: the last tensor reads");
        }
        elsif (ref $last eq 'Lugh::Graph') {
            ok(eval { $last->compute(1); 1 }, "round $round: the last graph computes") or diag $@;
        }
        elsif (ref $last eq 'Lugh::Context') {
            ok(f32($last, [2], 1, 2), "round $round: the last context takes a tensor");
        }
        undef $all[$keep];
    }
    is(Lugh::_live_objects(), $LIVE, 'every object freed');
};

subtest 'a graph holds its tensors and contexts' => sub {
    my ($graph, $x, $y);
    {
        my $ctx = Lugh::Context->new(mem_size => 1024 * 1024);
        $x = f32($ctx, [3], 1, 2, 3);
        my $w = f32($ctx, [3], 10, 20, 30);
        my $s = Lugh::Ops::add($ctx, $x, $w);
        $y = Lugh::Ops::sqr($ctx, $s);
        $graph = Lugh::Graph->new($ctx);
        $graph->build_forward($y);
    }
    $graph->compute(1);
    is_deeply([ $y->get_f32 ], [ 121, 484, 1089 ], 'computes after the context and the operand variables are gone');
    $x->set_f32(0, 0, 1);
    $graph->compute(1);
    is_deeply([ $y->get_f32 ], [ 100, 400, 961 ], 'recomputes with a new input');
    undef $x;
    undef $y;
    ok(eval { $graph->compute(1); 1 }, 'computes with no other object left') or diag $@;
    is($graph->n_nodes, 2, 'its two ops');
    undef $graph;
    is(Lugh::_live_objects(), $LIVE, 'every object freed');
};

subtest 'operands of a context whose variable is gone, op in another' => sub {
    my $ca = Lugh::Context->new(mem_size => 64 * 1024);
    my $cb = Lugh::Context->new(mem_size => 64 * 1024);
    my $a  = f32($ca, [4], 1, 2, 3, 4);
    my $b  = f32($cb, [4], 5, 6, 7, 8);
    undef $ca;
    my $r = Lugh::Ops::mul($cb, $a, $b);
    undef $a;
    undef $b;
    my $graph = compute($cb, $r);
    is_deeply([ $r->get_f32 ], [ 5, 12, 21, 32 ], 'the result of tensors from a freed context variable');
    undef $cb;
    $graph->compute(1);
    is_deeply([ $r->get_f32 ], [ 5, 12, 21, 32 ], 'recomputed with only the graph and the result left');
};

subtest 'the memory limit of a context' => sub {
    my $ctx  = Lugh::Context->new(mem_size => 64 * 1024);
    my $used = $ctx->used_mem;
    croaks_then_works(sub { Lugh::Tensor->new_f32($ctx, 100_000) },
        qr/\ALugh::Tensor->new: Lugh::Context \d+ is out of memory: a f32 tensor of shape \[100000\] needs (\d+) bytes \(400000 of data\), and (\d+) of its 65536 bytes are left/,
        'a tensor larger than the context');
    is($ctx->used_mem, $used, 'the failed tensor took nothing');
    my $big = f32($ctx, [ 10_240 ], (1) x 10_240);    # 40 kB of the 64
    croaks_then_works(sub { Lugh::Ops::add($ctx, $big, $big) },
        qr/\ALugh::Ops::add: Lugh::Context \d+ is out of memory: .*needs \d+ bytes .*, and \d+ of its 65536 bytes are left/,
        'an op result that does not fit');
    croaks_then_works(sub { $big->quantize($ctx, 'q8_0')->dequantize($ctx) }, qr/out of memory: .* bytes/,
        'a dequantized copy that does not fit');
    my $small = f32($ctx, [4], 1, 2, 3, 4);
    my $r = Lugh::Ops::scale($ctx, $small, 2);
    compute($ctx, $r);
    is_deeply([ $r->get_f32 ], [ 2, 4, 6, 8 ], 'the context still takes a small tensor and op');

    my $tiny = Lugh::Context->new(mem_size => 1024);
    is($tiny->mem_size, 1024, 'a 1024-byte context');
    my $t = f32($tiny, [4], 1, 2, 3, 4);
    is_deeply([ $t->get_f32 ], [ 1, 2, 3, 4 ], 'holds a 4-element tensor');
    croaks_like(sub { Lugh::Tensor->new_f32($tiny, 1000) },
        qr/out of memory: a f32 tensor of shape \[1000\] needs \d+ bytes \(4000 of data\), and \d+ of its 1024 bytes are left/,
        'not a 1000-element one');

    croaks_then_works(sub { Lugh::Context->new(mem_size => 0) }, qr/\ALugh::Context->new: mem_size must be positive/,
        'mem_size 0');
    croaks_then_works(sub { Lugh::Context->new(mem_size => -5) }, qr/\ALugh::Context->new: mem_size must be positive/,
        'mem_size -5');
    croaks_then_works(sub { Lugh::Context->new(mem_size => 'lots') }, qr/\ALugh::Context->new: mem_size must be an integer/,
        'mem_size lots');
    croaks_then_works(sub { Lugh::Context->new(bytes => 1024) }, qr/\ALugh::Context->new: unknown option 'bytes'/,
        'an unknown option');

    # More than the machine can allocate: malloc fails, and that must croak
    # (in a child process: ggml's own check aborts the process).
    for my $size ('2**46', '2**62') {
        my ($status, $out) = in_child(qq{
            my \$c = eval { Lugh::Context->new(mem_size => $size) };
            print \$c ? "made\\n" : "croaked: \$@";
            print "alive\\n";
        });
        my $bytes = eval $size;
        is($status, 0, "mem_size $size: the process is not aborted") or diag $out;
        like($out, qr/\Acroaked: Lugh::Context->new: .*(?:\b$bytes\b|bytes)/, "mem_size $size: croaks naming the size")
            if $out =~ /\Acroaked/;
    }
};

subtest 'hostile arguments' => sub {
    my $ctx   = Lugh::Context->new(mem_size => 1024 * 1024);
    my $t     = f32($ctx, [3], 1, 2, 3);
    my $graph = Lugh::Graph->new($ctx);

    croaks_then_works(sub { $t->set_f32('abc', 1, 2) },
        qr/\ALugh::Tensor->set_f32: value 0 must be a number, got 'abc'/, 'set_f32 with a string');
    croaks_then_works(sub { $t->set_f32(1, undef, 2) }, qr/\ALugh::Tensor->set_f32: value 1 is missing \(undef\)/,
        'set_f32 with undef');
    croaks_then_works(sub { $t->set_f32(1, 2, {}) }, qr/\ALugh::Tensor->set_f32: value 2 must be a number, got .*HASH/,
        'set_f32 with a hash reference');
    croaks_then_works(sub { $t->set_f32([ 1, [2], 3 ]) }, qr/\ALugh::Tensor->set_f32: value 1 must be a number, got .*ARRAY/,
        'set_f32 with a nested array');
    croaks_then_works(sub { $t->set_f32(\1, 2, 3) }, qr/\ALugh::Tensor->set_f32: value 0 must be a number/,
        'set_f32 with a scalar reference');
    croaks_then_works(sub { $t->set_f32(1, 2) }, qr/\ALugh::Tensor->set_f32: Expected 3 values, got 2/,
        'set_f32 with too few');
    croaks_then_works(sub { $t->set_f32(1 .. 4) }, qr/\ALugh::Tensor->set_f32: Expected 3 values, got 4/,
        'set_f32 with too many');
    croaks_then_works(sub { Lugh::Tensor->new_i32($ctx, 1)->set_f32(1.5) }, qr/\ALugh::Tensor->set_f32: value 0 \(1\.5\) is not an integer/,
        'set_f32 of an i32 tensor with 1.5');
    is_deeply([ $t->get_f32 ], [ 1, 2, 3 ], 'the failed sets changed nothing');
    croaks_then_works(sub { $t->set_bytes('abc') }, qr/\ALugh::Tensor->set_bytes: .*holds 12 bytes, got 3/,
        'set_bytes of the wrong length');
    croaks_then_works(sub { $t->set_bytes("\x{263a}" x 12) }, qr/\ALugh::Tensor->set_bytes: bytes must be a byte string/,
        'set_bytes with wide characters');

    for my $case (
        [ 'a string',         'Lugh::Tensor' ],
        [ 'undef',            undef ],
        [ 'a hash reference', {} ],
        [ 'a plain hash blessed into Lugh::Tensor', bless {}, 'Lugh::Tensor' ],
        [ 'a scalar blessed into Lugh::Tensor', bless \(my $s = 1), 'Lugh::Tensor' ],
        [ 'a Lugh::Context',  $ctx ],
        [ 'a Lugh::Graph',    $graph ],
    ) {
        my ($what, $value) = @$case;
        for my $method (qw(get_f32 nelements shape context has_data)) {
            croaks_then_works(sub { Lugh::Tensor->can($method)->($value) },
                qr/\ALugh::Tensor->$method: not a Lugh::Tensor object/, "Lugh::Tensor::$method on $what");
        }
    }
    croaks_then_works(sub { Lugh::Context::mem_size($t) }, qr/\ALugh::Context->mem_size: not a Lugh::Context object/,
        'Lugh::Context::mem_size on a tensor');
    croaks_then_works(sub { Lugh::Context::used_mem($graph) }, qr/\ALugh::Context->used_mem: not a Lugh::Context object/,
        'Lugh::Context::used_mem on a graph');
    croaks_then_works(sub { Lugh::Graph::n_nodes($ctx) }, qr/\ALugh::Graph->n_nodes: not a Lugh::Graph object/,
        'Lugh::Graph::n_nodes on a context');
    croaks_then_works(sub { Lugh::Graph::compute($t, 1) }, qr/\ALugh::Graph->compute: not a Lugh::Graph object/,
        'Lugh::Graph::compute on a tensor');
    croaks_then_works(sub { Lugh::Graph::build_forward($ctx, $t) }, qr/\ALugh::Graph->build_forward: not a Lugh::Graph object/,
        'Lugh::Graph::build_forward on a context');
    {
        my $c2 = Lugh::Context->new(mem_size => 4096);
        bless $c2, 'Lugh::Tensor';
        croaks_then_works(sub { $c2->nelements }, qr/\ALugh::Tensor->nelements: not a Lugh::Tensor object/,
            'a context reblessed into Lugh::Tensor');
    }
    {
        @My::Tensor::ISA = ('Lugh::Tensor');
        my $sub = bless f32($ctx, [2], 1, 2), 'My::Tensor';
        is($sub->nelements, 2, 'a subclass of Lugh::Tensor is a tensor');
    }

    # huge extents croak, whatever the byte count wraps to
    for my $case (
        [ 'f32 [2**62]',          sub { Lugh::Tensor->new_f32($ctx, 2**62) } ],
        [ 'i32 [2**62]',          sub { Lugh::Tensor->new_i32($ctx, 2**62) } ],
        [ 'f16 [2**62]',          sub { Lugh::Tensor->new_f16($ctx, 2**62) } ],
        [ 'f32 [3 * 2**61]',      sub { Lugh::Tensor->new_f32($ctx, 3 * 2**61) } ],
        [ 'q8_0 [2**62]',         sub { Lugh::Tensor->new($ctx, 'q8_0', 2**62) } ],
        [ 'f32 [2**62, 1]',       sub { Lugh::Tensor->new_f32($ctx, 2**62, 1) } ],
        [ 'f32 [1, 2**62]',       sub { Lugh::Tensor->new_f32($ctx, 1, 2**62) } ],
        [ 'f32 [2**31, 2**31]',   sub { Lugh::Tensor->new_f32($ctx, 2**31, 2**31) } ],
        [ 'f32 [2**62, 2]',       sub { Lugh::Tensor->new_f32($ctx, 2**62, 2) } ],
        [ 'f32 [2**20 x 3]',      sub { Lugh::Tensor->new_f32($ctx, 2**20, 2**20, 2**20) } ],
    ) {
        my ($what, $code) = @$case;
        my $made = eval { $code->() };
        my $error = $@;
        ok(!$made, "new $what croaks") or diag 'made a tensor of nbytes ' . $made->nbytes;
        like($error, qr/\ALugh::Tensor->new: .*(?:out of memory|too many elements|too large)/, "new $what: the message")
            unless $made;
        undef $made;
    }
    still_works('huge extents');
    croaks_then_works(sub { Lugh::Tensor->new_f32($ctx, 2**63) }, qr/\ALugh::Tensor->new: dimension 0 must be an integer/,
        'new f32 [2**63]');
    croaks_then_works(sub { Lugh::Tensor->new_f32($ctx, 0) }, qr/\ALugh::Tensor->new: Invalid dimension 0 at position 0/,
        'new f32 [0]');
    croaks_then_works(sub { Lugh::Tensor->new_f32($ctx, 2, -1) }, qr/\ALugh::Tensor->new: Invalid dimension -1 at position 1/,
        'new f32 [2, -1]');
    croaks_then_works(sub { Lugh::Tensor->new_f32($ctx, 1, 1, 1, 1, 1) }, qr/\ALugh::Tensor->new: Maximum 4 dimensions/,
        'new f32 with 5 extents');
    croaks_then_works(sub { Lugh::Tensor->new_f32($ctx) }, qr/\ALugh::Tensor->new: a tensor needs at least one dimension/,
        'new f32 with no extent');

    croaks_then_works(sub { Lugh::Tensor->new($ctx, 'q9_9', 32) }, qr/\ALugh::Tensor->new: unknown type 'q9_9'/,
        'new with an unknown type name');
    croaks_then_works(sub { Lugh::Tensor->new($ctx, 999, 32) }, qr/\ALugh::Tensor->new: Invalid type: 999/,
        'new with type id 999');
    croaks_then_works(sub { Lugh::Tensor->new($ctx, 4, 32) }, qr/\ALugh::Tensor->new: Invalid type: 4 /,
        'new with type id 4 (Q4_2, removed from ggml)');
    croaks_then_works(sub { Lugh::Tensor->new($ctx, -1, 32) }, qr/\ALugh::Tensor->new: Invalid type: -1/,
        'new with type id -1');
    croaks_then_works(sub { Lugh::Tensor->new($ctx, 'q8_0', 33) },
        qr/\ALugh::Tensor->new: a q8_0 tensor's first dimension must be a multiple of 32 \(its block size\), got 33/,
        'new q8_0 with a partial block');
    croaks_then_works(sub { Lugh::Tensor->new_f32('Lugh::Context', 2) }, qr/\ALugh::Tensor->new: the context must be a Lugh::Context object/,
        'new_f32 with a class name for the context');
    croaks_then_works(sub { f32($ctx, [256])->quantize('iq2_xxs') }, qr/\ALugh::Tensor->quantize: .*importance matrix/,
        'quantize to a type that needs an importance matrix');
    croaks_then_works(sub { Lugh::Graph->new($ctx)->compute(n_threads => 0) }, qr/\ALugh::Graph->compute: n_threads must be 1 to \d+, got 0/,
        'compute with n_threads 0');
    is(scalar(my @v = $t->get_f32), 3, 'the tensor is intact');
};

subtest 'a loop of tensor work that dies leaks nothing' => sub {
    my $live = Lugh::_live_objects();
    my $cycle = sub {
        my ($i) = @_;
        my $ok = eval {
            my $ctx = Lugh::Context->new(mem_size => 64 * 1024);
            my $a   = f32($ctx, [8], map { $_ + $i } 1 .. 8);
            my $b   = f32($ctx, [8], (2) x 8);
            my $sum = Lugh::Ops::add($ctx, $a, $b);
            my $graph = Lugh::Graph->new($ctx);
            $graph->build_forward($sum);
            $graph->compute($ctx, 1);
            my @v = $sum->get_f32;
            die "wrong value $v[0]\n" unless $v[0] == 3 + $i;
            # every other cycle dies with everything alive, or croaks in Lugh
            die "planned\n" if $i % 4 == 1;
            Lugh::Ops::add($ctx, $a, f32($ctx, [3])) if $i % 4 == 2;    # croaks: shapes
            if ($i % 4 == 3) {                                          # croaks at compute: a bad row id
                my $ids = Lugh::Tensor->new_i32($ctx, 1);
                $ids->set_f32(5);
                my $rows = Lugh::Ops::get_rows($ctx, Lugh::Ops::reshape($ctx, $a, 2, 4), $ids);
                my $g = Lugh::Graph->new;
                $g->build_forward($rows);
                $g->compute(1);
            }
            1;
        };
        die "cycle $i: unexpected: $@" if !$ok && $@ !~ /\A(?:planned|Lugh::Ops::add: shapes|Lugh::Graph->compute: get_rows id 5)/;
    };
    $cycle->($_) for 1 .. 1000;
    is(Lugh::_live_objects(), $live, 'no object left after 1,000 cycles');
  SKIP: {
        skip 'no /proc/self/statm', 1 unless -r '/proc/self/statm';
        my $rss = sub { open my $f, '<', '/proc/self/statm' or die $!; my @f = split ' ', scalar <$f>; $f[1] * 4096 };
        my $before = $rss->();
        $cycle->($_) for 1001 .. 11_000;
        my $grown = $rss->() - $before;
        cmp_ok($grown, '<', 4e6, 'RSS flat over 10,000 more cycles') or diag "grew by $grown bytes";
    }
    is(Lugh::_live_objects(), $live, 'no object left at the end');
};

subtest 'threads' => sub {
    plan skip_all => 'perl without ithreads' unless $Config{useithreads};
    my $ctx   = Lugh::Context->new(mem_size => 64 * 1024);
    my $t     = f32($ctx, [3], 1, 2, 3);
    my $sq    = Lugh::Ops::sqr($ctx, $t);
    my $graph = compute($ctx, $sq);

    my @results = map { $_->join } map {
        my $k = $_;
        threads->create(sub {
            my $own = Lugh::Context->new(mem_size => 64 * 1024);
            my $x   = f32($own, [4], map { $_ * $k } 1 .. 4);
            my $y   = Lugh::Ops::mul($own, $x, $x);
            compute($own, $y);
            return join ',', $y->get_f32;
        })
    } 1 .. 2;
    is_deeply(\@results, [ '1,4,9,16', '4,16,36,64' ], 'two threads each compute in their own context');

    my $seen = threads->create(sub {
        my @out;
        for my $case ([ tensor => $t ], [ context => $ctx ], [ graph => $graph ], [ result => $sq ]) {
            my ($what, $copy) = @$case;
            push @out, "$what: " . (defined $copy && blessed($copy) ? 'still an object' : 'no object');
        }
        push @out, 'get_f32: ' . (eval { Lugh::Tensor::get_f32($t); 1 } ? 'read' : $@ =~ /not a Lugh::Tensor object/ ? 'croaked' : $@);
        push @out, 'add: ' . (eval {
            my $own = Lugh::Context->new(mem_size => 4096);
            Lugh::Ops::add($own, $t, $t); 1 } ? 'made' : $@ =~ /must be a Lugh::Tensor object/ ? 'croaked' : $@);
        push @out, 'compute: ' . (eval { Lugh::Graph::compute($graph, 1); 1 } ? 'ran' : $@ =~ /not a Lugh::Graph object/ ? 'croaked' : $@);
        push @out, 'method: ' . (eval { $t->nelements; 1 } ? 'ran' : $@ =~ /unblessed reference|undefined value/ ? 'dies' : $@);
        return join "\n", @out;
    })->join;
    is($seen, join("\n",
            'tensor: no object', 'context: no object', 'graph: no object', 'result: no object',
            'get_f32: croaked', 'add: croaked', 'compute: croaked', 'method: dies'),
        'objects are not cloned into a thread (CLONE_SKIP), and their copies croak without crashing');

    $t->set_f32(4, 5, 6);
    $graph->compute(1);
    is_deeply([ $sq->get_f32 ], [ 16, 25, 36 ], 'the parent\'s objects are intact after the threads');
};

is(Lugh::_live_objects(), $LIVE, 'in the end no Lugh object is left');

done_testing;
