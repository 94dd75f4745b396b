package Lugh::Grammar;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Grammar;` alone works too.
require Lugh;

our $VERSION = '0.20';

sub new {
    my ($class, @args) = @_;
    Lugh::_croak('Usage: Lugh::Grammar->new($gbnf, root => $name)') unless @args % 2 == 1 && !ref $class;
    my ($gbnf, %opt) = @args;
    for my $key (sort keys %opt) {
        Lugh::_croak("Lugh::Grammar->new: unknown option '$key' (valid options: root)") unless $key eq 'root';
    }
    my $root = exists $opt{root} ? $opt{root} : 'root';
    Lugh::_croak('Lugh::Grammar->new: root is undefined') unless defined $root;
    Lugh::_croak('Lugh::Grammar->new: the grammar text is undefined') unless defined $gbnf;
    return _new($class, $gbnf, $root);
}

sub from_file {
    my ($class, @args) = @_;
    Lugh::_croak('Usage: Lugh::Grammar->from_file($path, root => $name)')
        unless @args % 2 == 1 && defined $args[0] && !ref $args[0];
    my ($path, %opt) = @args;
    open my $fh, '<:raw', $path or Lugh::_croak("Lugh::Grammar->from_file: cannot open '$path': $!");
    my $text = do { local $/; <$fh> };
    close $fh;
    Lugh::_croak("Lugh::Grammar->from_file: cannot read '$path'") unless defined $text;
    utf8::decode($text) or Lugh::_croak("Lugh::Grammar->from_file: '$path' is not UTF-8 text");
    return $class->new($text, %opt);
}

sub from_json_schema {
    my ($class, @args) = @_;
    Lugh::_croak('Usage: Lugh::Grammar->from_json_schema($schema)') unless @args == 1 && !ref $class;
    return _from_json_schema($class, _json_text($args[0], 'Lugh::Grammar->from_json_schema: the schema'));
}

# A schema (or response_format) given as a Perl structure, as JSON text
# with every hash's keys in sorted order; JSON text is passed on as it is,
# keeping its own order. Values follow JSON::PP's rules: a scalar last used
# as a string is a string, \1 and \0 or JSON::PP::true/false are booleans.
my $JSON;
sub _json_text {
    my ($value, $what) = @_;
    Lugh::_croak("$what is undefined") unless defined $value;
    return $value unless ref $value;
    Lugh::_croak("$what must be a hash reference or JSON text, not a " . ref($value) . ' reference')
        unless ref $value eq 'HASH' || ref $value eq 'ARRAY';
    require JSON::PP;
    $JSON //= JSON::PP->new->utf8(0)->canonical->allow_nonref->max_depth(512);
    my $text = eval { $JSON->encode($value) };
    return $text if defined $text;
    (my $error = $@) =~ s/ at \S+ line \d+\.?\n?\z//;
    $error = 'it is nested deeper than 512 levels' if $error =~ /maximum nesting level/;
    Lugh::_croak("$what cannot be written as JSON: $error");
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Grammar - a GBNF grammar that constrains generation (llama.cpp's syntax and semantics)

=head1 SYNOPSIS

    use Lugh;
    my $grammar = Lugh::Grammar->new(<<'GBNF');
    root   ::= answer "."
    answer ::= "Yes" | "No"
    GBNF
    print $grammar->accepts('Yes.') ? "ok\n" : "no\n";       # ok
    print $grammar->accepts('Maybe.') ? "ok\n" : "no\n";     # no

    # only text the grammar allows is generated, and generation ends when it is complete
    my @ids = $inference->generate(\@prompt, grammar => $grammar, greedy => 1, stats => \my %stats);
    print $stats{text};                                      # "No." or "Yes."

=head1 DESCRIPTION

A Lugh::Grammar is a grammar in GBNF, the notation of llama.cpp's
C<--grammar>, parsed and checked once and then shared by every generation it
constrains (any number of calls, sessions and threads of the same process).
Lugh reads it exactly as llama.cpp b11434 does (C<src/llama-grammar.cpp>):

=over 4

=item * rules C<name ::= ...>, one per line (a rule continues on the next
line inside parentheses or after C<|>); names of letters, digits and C<->

=item * sequences, alternatives C<|>, groups C<( ... )>, and C<*>, C<+>,
C<?>, C<{m}>, C<{m,}>, C<{m,n}> (expanded into rules as llama.cpp expands
them: at most 2000 repetitions; a larger maximum means "no maximum")

=item * literals C<"...">, classes C<[a-z0-9_]> and negated classes
C<[^"\\]>, any character C<.>, escapes C<\n \t \r \\ \" \[ \] \->,
C<\xHH>, C<\uHHHH>, C<\UHHHHHHHH>; literal UTF-8 anywhere

=item * tokens: C<< <[id]> >> (a token by id), C<< <text> >> (the one token
of that text in the model's vocabulary, resolved when it is used with a
model) and C<< !<[id]> >> (any token but that one)

=item * comments from C<#> to the end of the line

=back

A grammar is checked when it is made: a syntax error croaks naming the line
and column, and so do an undefined rule, a missing root rule and left
recursion (a rule that can begin with itself, which llama.cpp refuses too:
write C<list ::= item ("," item)*> rather than C<list ::= list "," item |
item>). Whatever the input, making a grammar ends within a second with
bounded memory: beyond llama.cpp's repetition limit, groups nest at most 500
deep, rules expand to at most 8M elements, and a grammar that has more than
10,000 ways to parse a text at once is refused as too ambiguous.

=head2 How generation is constrained

As llama.cpp's sampler does: each token is first sampled without the grammar;
if the grammar does not allow it, every token the grammar rejects is set to
-inf and the sampler draws again (a second draw of its random generator). A
greedy generation thus gives the most likely token the grammar allows. The
end-of-generation token is allowed only when the text is a complete sentence
of the grammar, and when nothing else can follow it is the only token left,
so generation ends there. A token's text may end inside a UTF-8 character;
the grammar follows it into the next token. Control tokens are matched by
their text (C<< <|im_end|> >>), as llama.cpp matches them.

With the same model file, prompt and options, a greedy constrained generation
gives the tokens llama.cpp b11434 gives (C<llama-completion --grammar-file>,
compared by t/39_grammar.t).

=head1 METHODS

=head2 new

    my $g = Lugh::Grammar->new($gbnf);
    my $g = Lugh::Grammar->new($gbnf, root => 'start');

Parses GBNF text (a character string; bytes that spell UTF-8 are read as
UTF-8). C<root> names the start rule (default C<root>). Croaks on a syntax
error (C<grammar syntax error at line L, column C: ...>) and on the problems
listed above.

    my $g = Lugh::Grammar->new(qq{root ::= [0-9]{1,3} "%"\n});
    print $g->accepts('42%') ? 1 : 0, "\n";                  # 1 # expected output

=head2 from_file

    my $g = Lugh::Grammar->from_file('json.gbnf', root => 'root');

As L</new>, with the text of a UTF-8 file.

=head2 from_json_schema

    my $g = Lugh::Grammar->from_json_schema({ type => 'array', items => { type => 'integer' }, maxItems => 3 });
    my $g = Lugh::Grammar->from_json_schema('{"type": "object", "properties": {"b": {}, "a": {}}}');

The grammar of a JSON schema (a hash reference, or JSON text), written
exactly as llama.cpp b11434's C<json_schema_to_grammar> writes it, rule for
rule: L</text> shows it. A hash has no key order, so a schema given as a
hash is read with its keys sorted (its properties are written in sorted
order); JSON text keeps its own order. Scalars follow L<JSON::PP>'s rules: a
value last used as a string is a string; C<\1>, C<\0> and
C<JSON::PP::true>/C<false> are booleans.

Supported: C<type> (one or a list), C<properties>, C<required>,
C<additionalProperties>, C<enum>, C<const>, C<items>, C<prefixItems>,
C<minItems>, C<maxItems>, C<$ref> into the same document (C<$defs>,
C<definitions>, recursive schemas), C<anyOf>, C<oneOf>, C<allOf> (of
objects or enums), a string's C<pattern>, C<format> (date, time, date-time,
uuid), C<minLength> and C<maxLength>, an integer's C<minimum>, C<maximum>,
C<exclusiveMinimum> and C<exclusiveMaximum>.

Croaks, naming the keyword: a validation keyword llama.cpp's converter
would silently ignore (C<not>, C<if>, C<patternProperties>, C<uniqueItems>,
C<multipleOf>, ...), so that the grammar never lets the model write what the
schema forbids; what llama.cpp refuses (an unknown type, a remote C<$ref>, an
invalid pattern); and, to stay bounded, nesting deeper than 512 levels (128
schema levels), over 100,000 schema objects, or a grammar over 16 MB. What
the grammar does not enforce is in L</schema_warnings>.

    my $g = Lugh::Grammar->from_json_schema({ enum => ['red', 'green'] });
    print $g->accepts('"red"') ? 1 : 0, "\n";              # 1 # expected output

=head2 schema_warnings

    my @warnings = $g->schema_warnings;

What the grammar does not enforce of the schema it was made from, as
C<WHERE: WHAT> lines (llama.cpp ignores these parts too: a number's bounds,
an unknown C<format>, a pattern the translation does not cover...). Empty
for a grammar given as GBNF.

    my $g = Lugh::Grammar->from_json_schema({ type => 'number', maximum => 1 });
    print scalar($g->schema_warnings), "\n";                # 1 # expected output

=head2 text

The GBNF text as given.

    print Lugh::Grammar->new('root ::= "a"')->text, "\n";   # root ::= "a" # expected output

=head2 root

The name of the start rule.

    print Lugh::Grammar->new('s ::= "a"', root => 's')->root, "\n";   # s # expected output

=head2 n_rules

The number of rules, those made for groups and repetitions included.

    print Lugh::Grammar->new('root ::= ("a" | "b")+')->n_rules, "\n";   # 3 # expected output

=head2 rules

The rules as llama.cpp prints them (C<--verbose>): every rule on a line,
the ones made for groups and repetitions included, characters outside
printable ASCII as C<< <U+XXXX> >>.

    print Lugh::Grammar->new('root ::= "a"+')->rules;
    # root ::= [a] root_1
    # root_1 ::= [a] root_1 |

=head2 accepts

    my $ok = $g->accepts($text);

True when the whole of C<$text> is a sentence of the grammar (llama.cpp's
test of a string: each character accepted in turn, then some parse
complete).

    my $g = Lugh::Grammar->new('root ::= "ab"*');
    print join(',', map { $g->accepts($_) ? 1 : 0 } '', 'ab', 'aba'), "\n";   # 1,1,0 # expected output

=head2 accepts_prefix

    my $ok = $g->accepts_prefix($text);

True when C<$text> can begin a sentence of the grammar (a generation cut
short by C<max_tokens> is such a prefix).

    my $g = Lugh::Grammar->new('root ::= "ab"*');
    print $g->accepts_prefix('aba') ? 1 : 0, "\n";          # 1 # expected output

=head1 USING A GRAMMAR

C<grammar> is an option of L<Lugh::Inference/generate>, of
L<Lugh::Inference/chat> and of L<Lugh::Chat> (for every turn, or one). It
takes a Lugh::Grammar or GBNF text (parsed at each call, with root C<root>).
So is it of L<Lugh::Speculative/generate>, whose drafted tokens are judged
over what the grammar allows. The command line takes C<--grammar GBNF>,
C<--grammar-file FILE>, C<--json-schema JSON> and C<--json-schema-file FILE>
(see L<lugh>). C<json_schema> and C<response_format> take a schema itself
(see L<Lugh::Inference/JSON schemas and response_format>).

    my $chat = Lugh::Chat->new(inference => $inference, grammar => $grammar);

=head1 SEE ALSO

L<Lugh::Inference>, L<Lugh::Chat>, llama.cpp's C<grammars/README.md>.

=cut
