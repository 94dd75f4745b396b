package Lugh::Prompt;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Model;` alone works too.
require Lugh;
use Scalar::Util ();
use JSON::PP ();

our $VERSION = '0.20';

# The fixed formats, as data: what goes around each role's content, the
# generation prompt, the BOS and EOS texts, and whether the system message is
# folded into the first user message (families whose template has no system
# turn). Listed in Lugh 0.12's order, which available_formats keeps.
my @FORMAT_ORDER = qw(chatml llama2 llama3 mistral gemma zephyr alpaca vicuna raw);
my %EOS_TEXT = (llama2 => '</s>', mistral => '</s>', zephyr => '</s>', vicuna => '</s>');
my %FORMATS = (
    chatml => {
        system_prefix => "<|im_start|>system\n", system_suffix => "<|im_end|>\n",
        user_prefix => "<|im_start|>user\n", user_suffix => "<|im_end|>\n",
        assistant_prefix => "<|im_start|>assistant\n", assistant_suffix => "<|im_end|>\n",
        generation_prompt => "<|im_start|>assistant\n", bos => '',
    },
    llama2 => {
        # Meta's template: <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
        system_prefix => "<<SYS>>\n", system_suffix => "\n<</SYS>>\n\n", fold_system => 1,
        first_user_prefix => '[INST] ', user_prefix => '<s>[INST] ', user_suffix => ' [/INST]',
        assistant_prefix => ' ', assistant_suffix => ' </s>', generation_prompt => '', bos => '<s>',
    },
    llama3 => {
        system_prefix => "<|start_header_id|>system<|end_header_id|>\n\n", system_suffix => '<|eot_id|>',
        user_prefix => "<|start_header_id|>user<|end_header_id|>\n\n", user_suffix => '<|eot_id|>',
        assistant_prefix => "<|start_header_id|>assistant<|end_header_id|>\n\n", assistant_suffix => '<|eot_id|>',
        generation_prompt => "<|start_header_id|>assistant<|end_header_id|>\n\n", bos => '<|begin_of_text|>',
    },
    mistral => {
        system_prefix => '', system_suffix => "\n\n", fold_system => 1,
        user_prefix => '[INST] ', user_suffix => ' [/INST]',
        assistant_prefix => '', assistant_suffix => '</s>', generation_prompt => '', bos => '<s>',
    },
    gemma => {
        system_prefix => '', system_suffix => "\n\n", fold_system => 1,
        user_prefix => "<start_of_turn>user\n", user_suffix => "<end_of_turn>\n",
        assistant_prefix => "<start_of_turn>model\n", assistant_suffix => "<end_of_turn>\n",
        generation_prompt => "<start_of_turn>model\n", bos => '<bos>',
    },
    zephyr => {
        system_prefix => "<|system|>\n", system_suffix => "</s>\n",
        user_prefix => "<|user|>\n", user_suffix => "</s>\n",
        assistant_prefix => "<|assistant|>\n", assistant_suffix => "</s>\n",
        generation_prompt => "<|assistant|>\n", bos => '',
    },
    alpaca => {
        system_prefix => '', system_suffix => "\n\n",
        user_prefix => "### Instruction:\n", user_suffix => "\n\n",
        assistant_prefix => "### Response:\n", assistant_suffix => "\n\n",
        generation_prompt => "### Response:\n", bos => '',
    },
    vicuna => {
        system_prefix => '', system_suffix => "\n\n",
        user_prefix => 'USER: ', user_suffix => "\n",
        assistant_prefix => 'ASSISTANT: ', assistant_suffix => "</s>\n",
        generation_prompt => 'ASSISTANT:', bos => '',
    },
    raw => {
        system_prefix => '', system_suffix => "\n", user_prefix => '', user_suffix => "\n",
        assistant_prefix => '', assistant_suffix => "\n", generation_prompt => '', bos => '',
    },
);

# Lugh 0.12's table, with llama now meaning Llama 3 and the families added since.
my %ARCHITECTURE_FORMAT = (
    llama => 'llama3', llama2 => 'llama2', llama3 => 'llama3', mistral => 'mistral', mixtral => 'mistral',
    gemma => 'gemma', gemma2 => 'gemma', gemma3 => 'gemma',
    qwen => 'chatml', qwen2 => 'chatml', qwen2moe => 'chatml', qwen3 => 'chatml', qwen3moe => 'chatml',
    phi => 'chatml', phi2 => 'chatml', phi3 => 'chatml', yi => 'chatml', internlm => 'chatml', stablelm => 'zephyr',
    falcon => 'raw', gpt2 => 'raw', bloom => 'raw', starcoder => 'raw',
);

sub new {
    my ($class, @args) = @_;
    my %opt = Lugh::_options('Lugh::Prompt->new', { format => undef, model => undef, template => undef, now => undef },
        @args);
    Lugh::_croak('Lugh::Prompt->new: give format or template, not both') if defined $opt{format} && defined $opt{template};
    my $model = $opt{model};
    Lugh::_croak('Lugh::Prompt->new: model must be a Lugh::Model')
        if defined $model && !(Scalar::Util::blessed($model) && $model->isa('Lugh::Model'));
    my $self = bless { model => $model, now => $opt{now} }, $class;
    my $source = $opt{template};
    if (!defined $opt{format} && !defined $source && $model) {
        $source = $model->get_kv('tokenizer.chat_template');
        $opt{format} = format_for_architecture($model->architecture) unless defined $source;
    }
    if (defined $source) {
        Lugh::_croak('Lugh::Prompt->new: template must be a string of Jinja source') if ref $source;
        $self->{template} = $source;
        $self->{compiled} = _compile_template($source);
        $self->{format_name} = 'template';
    }
    else {
        my $name = lc($opt{format} // 'chatml');    # case-insensitive, as in 0.12
        Lugh::_croak("Lugh::Prompt->new: unknown format '$opt{format}' (known: @{[ available_formats() ]})")
            unless $FORMATS{$name};
        $self->{format_name} = $name;
    }
    return $self;
}

sub format_name { return $_[0]{format_name} }
sub template    { return $_[0]{template} }

sub available_formats {
    my @names = @FORMAT_ORDER;
    return wantarray ? @names : \@names;
}

sub has_format {
    my ($name) = @_ == 2 ? @_[ 1 .. 1 ] : @_;
    return defined $name && $FORMATS{ lc $name } ? 1 : 0;
}

sub get_format {
    my ($name) = @_ == 2 ? @_[ 1 .. 1 ] : @_;
    return undef unless defined $name && $FORMATS{ lc $name };
    my $f = $FORMATS{ lc $name };
    return { %$f, name => lc $name, bos_token => $f->{bos}, eos_token => $EOS_TEXT{ lc $name } // '' };
}

sub format_for_architecture {
    my ($arch) = @_ == 2 ? @_[ 1 .. 1 ] : @_;
    return $ARCHITECTURE_FORMAT{ lc($arch // '') } // 'chatml';
}

# Messages (hash references) first, then name => value pairs.
sub apply {
    my ($self, @args) = @_;
    my @messages;
    push @messages, shift @args while @args && ref $args[0];
    Lugh::_croak('Lugh::Prompt->apply: options after the messages must be name => value pairs') if @args % 2;
    my %vars = @args;
    for my $m (@messages) {
        Lugh::_croak('Lugh::Prompt->apply: a message must be a hash reference with role and content')
            unless ref $m eq 'HASH' && defined $m->{role};
    }
    return $self->{compiled} ? $self->_render(\@messages, \%vars) : $self->_fixed(\@messages, \%vars);
}

sub format_message {
    my ($self, $role, $content) = @_;
    Lugh::_croak('Usage: $prompt->format_message($role, $content)') unless defined $role && defined $content;
    Lugh::_croak('Lugh::Prompt->format_message: only fixed formats format one message alone') if $self->{compiled};
    my $f = $FORMATS{ $self->{format_name} };
    my $kind = $role =~ /\A(?:system|user|assistant)\z/ ? $role : 'user';
    return $f->{"${kind}_prefix"} . $content . $f->{"${kind}_suffix"};
}

sub _fixed {
    my ($self, $messages, $vars) = @_;
    my %known = map { $_ => 1 } qw(add_generation_prompt add_bos);
    if (my ($unknown) = grep { !$known{$_} } sort keys %$vars) {
        Lugh::_croak("Lugh::Prompt->apply: unknown option '$unknown' (a fixed format takes add_generation_prompt"
                . " and add_bos; template variables need a Jinja template)");
    }
    # Lugh 0.12: no messages, no text; no new assistant turn after an assistant's
    return '' unless @$messages;
    my $f = $FORMATS{ $self->{format_name} };
    my @list = @$messages;
    my $system = '';
    if ($f->{fold_system} && @list && $list[0]{role} eq 'system') {
        my $m = shift @list;
        $system = $f->{system_prefix} . ($m->{content} // '') . $f->{system_suffix};
    }
    # Lugh 0.12's defaults for its fixed formats: both on (see apply's POD)
    my %flag = (add_generation_prompt => 1, add_bos => 1, %$vars);
    my $out = $flag{add_bos} ? $f->{bos} : '';
    my $first_user = 1;
    for my $m (@list) {
        my $kind = $m->{role} =~ /\A(?:system|user|assistant)\z/ ? $m->{role} : 'user';
        my $prefix = $f->{"${kind}_prefix"};
        my $content = $m->{content} // '';
        if ($kind eq 'user' && $first_user) {
            $prefix = $f->{first_user_prefix} // $prefix;
            $content = $system . $content;
            $first_user = 0;
        }
        $out .= $prefix . $content . $f->{"${kind}_suffix"};
    }
    $out .= $f->{generation_prompt} if $flag{add_generation_prompt} && $messages->[-1]{role} ne 'assistant';
    return $out;
}

my $JSON = JSON::PP->new->canonical->allow_nonref->allow_blessed->convert_blessed;

sub _render {
    my ($self, $messages, $vars) = @_;
    my %vars = %$vars;
    my $now = delete $vars{now} // $self->{now};
    for my $flag (qw(add_generation_prompt add_bos)) {
        $vars{$flag} = $vars{$flag} ? JSON::PP::true() : JSON::PP::false() if exists $vars{$flag};
    }
    $vars{add_generation_prompt} //= JSON::PP::false();
    if (my $model = $self->{model}) {
        my $strings = $self->{special} //= _special_strings($model);
        $vars{$_} //= $strings->{$_} for keys %$strings;
    }
    # Given as JSON text, tools keep their key order exactly.
    my $tools = delete $vars{tools};
    my $vars_json = $JSON->encode(\%vars);
    if (defined $tools) {
        my $tools_json = ref $tools ? $JSON->encode($tools) : $tools;
        $vars_json =~ s/\}\z/(keys %vars ? ',' : '') . qq("tools":$tools_json})/e;
    }
    return _render_template($self->{compiled}, $JSON->encode($messages), $vars_json, $now);
}

sub _special_strings {
    my ($model) = @_;
    my $tok = eval { Lugh::Tokenizer->new(model => $model) } or return {};
    my %s;
    for my $name (qw(bos eos unk pad)) {
        my $method = "${name}_id";
        my $id = $tok->$method;
        $s{"${name}_token"} = $tok->token_to_text($id) if defined $id && $id >= 0;
    }
    return \%s;
}

# The functional shortcuts: Lugh::Prompt::chatml(@messages) etc.
for my $name (keys %FORMATS) {
    no strict 'refs';
    *{$name} = sub { return Lugh::Prompt->new(format => $name)->apply(@_, add_generation_prompt => 1) };
}

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

package Lugh::Prompt::Template;

sub CLONE_SKIP { 1 }

1;

__END__

=head1 NAME

Lugh::Prompt - chat prompts: the model's own Jinja template, or a fixed format

=head1 SYNOPSIS

    use Lugh;
    my $model  = Lugh::Model->new(model => 'SmolLM2-135M-Instruct.Q4_1.gguf');
    my $prompt = Lugh::Prompt->new(model => $model);       # the template in the GGUF file
    my $text   = $prompt->apply(
        { role => 'system', content => 'You are terse.' },
        { role => 'user',   content => 'Hello!' },
        add_generation_prompt => 1,
    );

    my $chatml = Lugh::Prompt->new(format => 'chatml');     # a fixed format
    print $chatml->apply({ role => 'user', content => 'Hi' });   # (ends with the generation prompt)
    print Lugh::Prompt::llama3({ role => 'user', content => 'Hi' });

    my $custom = Lugh::Prompt->new(template => '{% for m in messages %}{{ m.role }}: {{ m.content }}
    {% endfor %}');

=head1 DESCRIPTION

Turns a list of chat messages into the text a chat model was trained on. Most
GGUF files carry their chat template (C<tokenizer.chat_template>, Jinja);
Lugh::Prompt renders it as Hugging Face transformers' C<apply_chat_template>
does: trim_blocks and lstrip_blocks, loop controls (C<break>, C<continue>),
Python's string methods (C<.strip()>, C<.startswith()>, C<.split()> ...),
transformers' C<tojson> (Python's C<json.dumps>, not HTML-escaped),
C<raise_exception> and C<strftime_now>, and Python's printing of C<None>,
C<True>, C<False>, lists and dicts. The renderer is MiniJinja, in Rust.

A template comes from a downloaded file, so rendering is limited: a template
that loops too long, recurses too deep or writes more than 16 MB croaks with
its error (and line) in well under a second, as does a syntax error; a
template's C<raise_exception('...')> croaks with that message.

Perl hashes have no order, so hashes (messages, tools) are handed to the
template with their keys sorted; give C<tools> as a JSON string to keep
another order.

=head1 CONSTRUCTOR

=head2 new

    my $p = Lugh::Prompt->new(model => $model);              # its template, else its architecture's format
    my $p = Lugh::Prompt->new(template => $jinja_source);    # any template
    my $p = Lugh::Prompt->new(template => $src, model => $model);   # ... with the model's special tokens
    my $p = Lugh::Prompt->new(format => 'llama3');
    my $p = Lugh::Prompt->new(model => $model, now => 1700000000);  # a fixed time for strftime_now

With a model, C<bos_token>, C<eos_token>, C<unk_token> and C<pad_token>
default to the model's token strings. Croaks on an unknown format, a template
that does not compile (naming its line), and an unknown option.

=head1 METHODS

=head2 apply

    my $text = $p->apply(@messages, add_generation_prompt => 1);
    my $text = $p->apply(@messages, add_generation_prompt => 1, tools => \@tools,
        enable_thinking => 0, date_string => '26 Jul 2024');

The rendered conversation. Messages are hash references with C<role> and
C<content> (and whatever else the template reads, such as C<tool_calls>).
After them come the template's variables: C<add_generation_prompt> (the
start of the assistant's turn), C<tools>, and any other name the template
reads. A Jinja template gets them as given, C<add_generation_prompt>
false when not given, as transformers does.

A fixed format (C<< format => >>, or a model without a template) takes only
C<add_generation_prompt> and C<add_bos> (write the format's BOS text first),
and both are B<on by default>, as in Lugh 0.12, so that a 0.12 script's
C<< $p->apply(@messages) >> still ends with the assistant's turn. Give
C<< add_bos => 0 >> when the text goes to a tokenizer that adds the BOS token
itself (C<< $tokenizer->encode($text) >> with the model's C<add_bos>), or
encode with C<< add_special => 0, parse_special => 1 >>, which reads the BOS
text as the BOS token once:

    my $p = Lugh::Prompt->new(format => 'llama3');
    print $p->apply({ role => 'user', content => 'Hi' }, add_bos => 0, add_generation_prompt => 0);

As in 0.12, a fixed format renders no messages as the empty string, and
adds no generation prompt after a conversation that ends with the
assistant's message (the model continues that message). A role other than
C<system>, C<user> and C<assistant> (C<tool>, say) is written as a user's
message; 0.12 left such messages out.

=head2 format_name

    print $chatml->format_name;     # chatml (or llama3 ..., or 'template')

=head2 template

    print $p->template // 'a fixed format';

The Jinja source in use, or undef for a fixed format.

=head2 format_message

    print Lugh::Prompt->new(format => 'chatml')->format_message(user => 'Hi');

One message in a fixed format.

=head2 available_formats

    print join ' ', Lugh::Prompt->available_formats;   # chatml llama2 llama3 mistral gemma zephyr alpaca vicuna raw

In Lugh 0.12's order. Format names are case-insensitive everywhere
(C<ChatML> is C<chatml>).

=head2 has_format

    print Lugh::Prompt->has_format('chatml');            # 1

=head2 get_format

    my $f = Lugh::Prompt->get_format('chatml');
    print $f->{user_prefix};                               # <|im_start|>user\n

The format's pieces as a hash reference: C<name> (the format's name, as
in Lugh 0.12), C<bos_token> and C<eos_token> (the texts 0.12 gave; C<bos>
is C<bos_token> again), C<system_prefix>,
C<system_suffix>, C<user_prefix>, C<user_suffix>, C<assistant_prefix>,
C<assistant_suffix>, C<generation_prompt>, C<bos>, and C<fold_system> (the
system text goes into the first user message) and C<first_user_prefix>
where they apply.

Lugh 0.12's C<llama2> format wrote C<[INST]> twice around the first message;
this one follows Meta's template (C<< <s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ... >>).

=head2 format_for_architecture

    print Lugh::Prompt->format_for_architecture('qwen2');   # chatml

The fixed format used for a model of that architecture without a template
(C<chatml> when unknown).

=head1 FUNCTIONS

=head2 chatml, llama2, llama3, mistral, gemma, zephyr, alpaca, vicuna, raw

    my $text = Lugh::Prompt::chatml({ role => 'user', content => 'Hi' });

The messages in that format, with the generation prompt.

=head1 SEE ALSO

L<Lugh::Chat>, L<Lugh::Inference/chat>

=cut
