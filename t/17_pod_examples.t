# The examples in the POD run, and print what their comments say.
#
# For each package, its SYNOPSIS runs as a program with SmolLM2's path in
# place of 'SmolLM2-135M-Instruct.Q4_1.gguf' (or as it is, for the tensor
# packages, which need no model); then each method example that
# has a print with a comment (`print ...;   # EXPECTED`) runs after that
# SYNOPSIS, whose objects ($model, $inference ...) it uses. EXPECTED must
# appear in the output; a remark after it in parentheses, and quotes around
# it, are not part of it. The C<lugh> program's and README's examples are
# tested in t/71_cli.t.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use LughTest qw(require_model);

my $model = require_model('smollm2-135m-q4_1');
my $dir   = tempdir(CLEANUP => 1);

# Verbatim paragraphs under each =head1/=head2, in order.
sub examples {
    my ($file) = @_;
    open my $fh, '<:encoding(UTF-8)', $file or die "$file: $!";
    my (@found, $heading, $in_pod);
    local $/ = '';    # paragraphs
    while (my $para = <$fh>) {
        if ($para =~ /\A=(?:head\d|item)\s+(.*)/) { $heading = $1; $in_pod = 1; next }
        $in_pod = 1, next if $para =~ /\A=\w/ && $para !~ /\A=cut/;
        $in_pod = 0, next if $para =~ /\A=cut/;
        next unless $in_pod && $para =~ /\A[ \t]/;
        # consecutive verbatim paragraphs are one example
        if (@found && $found[-1]{heading} eq $heading && $found[-1]{open}) { $found[-1]{code} .= $para }
        else { push @found, { heading => $heading, code => $para, open => 1 } }
    } continue {
        $found[-1]{open} = 0 if @found && $para !~ /\A[ \t]/;
    }
    return @found;
}

# Runs perl code in a child; returns (exit status, output).
sub run_code {
    my ($code) = @_;
    my $script = "$dir/example.pl";
    open my $out, '>:encoding(UTF-8)', $script or die $!;
    # Generation is capped at 16 tokens (a later max_tokens wins): what the
    # examples show does not depend on how long a reply is, and the chat
    # examples would otherwise take minutes.
    print $out <<'PRELUDE', $code;
use utf8;
binmode STDOUT, ':encoding(UTF-8)';
use Lugh;
{
    no warnings 'redefine';
    my $generate = \&Lugh::Inference::generate;
    *Lugh::Inference::generate = sub { $generate->(@_, max_tokens => 16) };
}
PRELUDE
    close $out;
    my $output = `$^X -Mblib "$script" 2>&1 </dev/null`;
    return ($? >> 8, $output);
}

# The texts a `# EXPECTED` comment promises (any one of them will do), or
# none. "a, b or c" and "a, b, ..." are choices; a remark in parentheses is
# not output, nor is a comment that is all remark.
sub expectations {
    my ($line) = @_;
    return () unless $line =~ /^\s*(?:print|printf|say)\b.*;\s*#\s*(.+?)\s*$/;
    my $want = $1;
    $want =~ s/\s*\(.*\)\z//;
    my @choices = $want =~ /\bor\b|\.\.\./ ? split(/\s*(?:,|\bor\b|\.\.\.)\s*/, $want) : ($want);
    for (@choices) { s/\A(["'])(.*)\1\z/$2/; s/\\n/\n/g }
    return grep { length } @choices;
}

# Whether the output has one of the texts.
sub has_one {
    my ($output, @choices) = @_;
    return grep { index($output, $_) >= 0 } @choices;
}

my @packages = ('lib/Lugh.pm', sort glob 'lib/Lugh/*.pm');
for my $file (@packages) {
    my @examples = examples($file);
    my ($synopsis) = grep { $_->{heading} eq 'SYNOPSIS' } @examples;
    # packages whose SYNOPSIS loads the model, and the tensor packages,
    # whose SYNOPSIS makes a Lugh::Context
    next unless $synopsis && $synopsis->{code} =~ /SmolLM2-135M-Instruct\.Q4_1\.gguf|Lugh::Context->new|use Lugh::Quant/;
    (my $setup = $synopsis->{code}) =~ s/'SmolLM2-135M-Instruct\.Q4_1\.gguf'/'$model'/g;
    subtest $file => sub {
        # All the package's examples in one run, each in a block of its own
        # after the SYNOPSIS, their output told apart by markers.
        my @tested = grep { $_ ne $synopsis && grep { expectations($_) } split /\n/, $_->{code} } @examples;
        my $program = $setup;
        for my $i (0 .. $#tested) {
            $program .= "\nprint qq{\\n--8<-- $i\\n};\neval {\n$tested[$i]{code}\n1 } or print qq{\\n--died-- \$\@};\n";
        }
        my ($status, $output) = run_code($program);
        is($status, 0, 'SYNOPSIS and examples run') or diag $output;
        my ($synopsis_output) = $output =~ /\A(.*?)(?:\n--8<-- 0\n|\z)/s;
        for my $line (split /\n/, $synopsis->{code}) {
            my @want = expectations($line) or next;
            ok(has_one($synopsis_output, @want), "SYNOPSIS: $line") or diag "output: $synopsis_output";
        }
        for my $i (0 .. $#tested) {
            my ($part) = $output =~ /--8<-- $i\n(.*?)(?:\n--8<-- \d+\n|\z)/s;
            $part //= '';
            my $example = $tested[$i];
            unlike($part, qr/--died--/, "$example->{heading}: runs") or diag $part;
            for my $line (grep { expectations($_) } split /\n/, $example->{code}) {
                ok(has_one($part, expectations($line)), "$example->{heading}: $line") or diag "output: $part";
            }
        }
    };
}

done_testing;
