# Author test: every public function and method is documented — named in a
# =head2 or =item of its package's POD (a heading may list several names:
# "=head2 n_vocab, n_layer"). Only core modules, so it runs everywhere; the
# XS functions live in Lugh.so, so it needs the built tree:
#   make && prove -b xt/pod-coverage.t
# Names starting with an underscore are private; CLONE_SKIP is perl's hook.
use strict;
use warnings;
use Test::More;

eval { require Lugh; 1 } or plan skip_all => "Lugh does not load (build it, then run with -b): $@";

# The public subs of every Lugh package, by package.
my %subs;
my @packages = ('Lugh');
while (my $package = shift @packages) {
    no strict 'refs';
    for my $name (sort keys %{"${package}::"}) {
        if ($name =~ /\A(\w+)::\z/) { push @packages, "${package}::$1"; next }
        next if $name =~ /\A_/ || $name =~ /\A[A-Z_]+\z/ || $name eq 'bootstrap';
        push @{ $subs{$package} }, $name if defined &{"${package}::$name"};
    }
}

# The file documenting a package: its own, or the one it lives in.
my %inner = (
    'Lugh::Tokenizer::Decoder'     => 'Lugh::Tokenizer',
    'Lugh::Autograd::Ops'          => 'Lugh::Autograd',
    'Lugh::Optimizer::SGD'         => 'Lugh::Optimizer',
    'Lugh::Optimizer::AdamW'       => 'Lugh::Optimizer',
    'Lugh::Optimizer::LRScheduler' => 'Lugh::Optimizer',
);
for my $package (sort keys %subs) {
    (my $file = ($inner{$package} // $package) . '.pm') =~ s{::}{/}g;
    my $path = $INC{$file} or do { fail("$package: no file loaded for it"); next };
    open my $fh, '<', $path or die "$path: $!";
    my %documented;
    while (my $line = <$fh>) {
        next unless $line =~ /\A=(?:head[2-4]|item)\s+(.*)/;
        $documented{$_} = 1 for grep {length} split /[^\w:]+/, $1;
    }
    my @missing = grep { !$documented{$_} } @{ $subs{$package} };
    is("@missing", '', "$package: every public sub is documented in $file") or diag "undocumented: @missing";
}
done_testing;
