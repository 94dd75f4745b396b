# Hard tokenizer cases: scripts, emoji sequences, whitespace runs, control
# characters, special-token look-alikes, invalid UTF-8. Returns a list of
# byte strings (UTF-8, except the deliberately invalid ones at the end).
# t/data/tokenizer-golden/*.jsonl hold llama.cpp b11434's ids for each.
use strict;
use warnings;
use utf8;

my @text = (
    # emoji: ZWJ families, flags, skin tones, keycaps, variation selectors
    "👩‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽👍🏿", "🇺🇸🇬🇧🇯🇵", "1️⃣ #️⃣", "❤️ ♥ ❤", "🦙🚀🌍", " 🦙", "🫩🫆 new emoji",
    # combining marks and composed forms
    "e\x{301} é", "Z\x{351}\x{36b}\x{343}\x{36a}algo", "n\x{303} ñ", "\x{1100}\x{1161}\x{11A8} 각", "a\x{300}\x{301}\x{302}",
    # scripts
    "नमस्ते दुनिया, यह एक परीक्षण है।", "สวัสดีครับ ภาษาไทยไม่มีช่องว่าง", "مرحبا بالعالم! ١٢٣",
    "שלום עולם", "我爱北京天安门。日本語のテキスト、カタカナ", "안녕하세요 세계", "Привет, мир!", "Γειά σου Κόσμε",
    "Ελληνικά ΑΒΓ αβγ", "ქართული ენა", "Հայերեն", "தமிழ் மொழி", "বাংলা ভাষা", "ᚠᚢᚦ runes", "𝕳𝖊𝖑𝖑𝖔 𝐁𝐨𝐥𝐝",
    # whitespace
    "a  b   c    d", "\t\t\tx", "x\n\n\n\ny", " \n \n ", "    ", "\r\n\r\n", "line1\r\nline2\r\n", "\x{3000}全角スペース",
    "\x{a0}nbsp\x{a0}", "trailing   ", "\t", "\n", " ", "  ", "   \n   x", "\x0b\x0c vertical", "a \t \n b", " \t\n\r ",
    "\x{2003}em\x{2009}thin\x{202f}", "x\x{85}y", "\n\n\n", "  \n\n  \n", "\r", "\r\r\n\n",
    # control characters
    "\x00\x01\x02 nul and bell\x07", "\x1b[31mred\x1b[0m", "\x7f del", "a\x{200b}b zero-width", "\x{feff}BOM",
    "\x{2028}\x{2029} separators", "\x{200d}\x{200c} joiners", "\x{202e}rtl override",
    # special-token look-alikes and special tokens
    "<|im_start", "< |im_start|>", "<|im_start|><|im_start|>", "<|im_end|>\n<|im_start|>assistant\n",
    "<<|im_start|>>", "<|endoftext|>", "<s>hello</s>", "<unk>", "<start_of_turn>user\nhi<end_of_turn>\n",
    "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<|endoftext|> trailing  <|endoftext|>",
    "<|end|>\n text <|end|> x", "<|user|>\nhi<|end|>\n<|assistant|>", "<|system|>  sys  <|end|>  ", "<0x41>",
    "▁ underscores ▁▁", "Ġ ĠĠ Ċ", "[INST] hi [/INST]", "<|im_start|>system\nYou are helpful.<|im_end|>",
    "<bos><eos><pad>", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<tool_call>{}</tool_call>", "<repo_name>x<file_sep>y", "<im_start>", "<|IM_START|>",
    # leading spaces
    " Hello", "  Hello", "   Hello", " 123", " \n", "  leading", " ", " a",
    # numbers
    "1234567890123", "3.14159e-10", "1,000,000.00", "٣٤٥ ४५६ ๕๖๗", "１２３ full width", "Ⅻ roman", "²³ superscripts",
    "½ ¾ fractions", "0x1F 0b101 1e9", "12 345 678", "v1.2.3-rc.4",
    # apostrophes
    "don't won't I'm you're they've we'll she'd", "DON'T I'M YOU'RE THEY'VE WE'LL SHE'D", "'s 'S 'll 'LL 'Ve",
    "rock 'n' roll", "it’s curly", "''quoted''", "x'", "'",
    # code and markup
    "def f(x):\n    return x**2  # comment\n", "fn main() { println!(\"hi\"); }", "if (a<=b && c>=d) {}",
    "<html><body>Hi</body></html>", "https://example.com/path?q=1&r=2#frag", "user\@example.com",
    "\tint x = 0;\n\tif (x) {\n\t\treturn;\n\t}\n", "    four\n        eight\n", "\$var = \@arr[0] % \$h{k};",
    # Unicode 16 additions (unassigned for llama.cpp), private use, unassigned
    "\x{1C89}\x{1C8A} new letters", "\x{1CCF0}\x{1CCF1} new digits", "\x{E000}\x{F8FF} private", "\x{10FFFD}",
    "\x{0378}\x{0379} unassigned", "\x{2FFFF}x", "a\x{1E5D0}b",
    # long runs
    "a" x 300, "🦙" x 40, " " x 100, "\n" x 40, "abc " x 60, "1" x 100, "ab" x 150, "\t " x 30, ".,;" x 30,
    # mixed
    "Hello world! 你好世界 🌍 Привет мир", "Ça va? Très bien. Œuvre — «quotes» „German“ ‚single‘",
    "Ellipsis… dash – — ‐", "math ∑∫√∞≠≤≥ π≈3.14", "€100 £50 ¥1000 ₹500 ₿", "café naïve résumé Ångström",
    "ÀÉÎÕÜ àéîõü ß ẞ", "Hello\u{00A0}World", "TeSt CaSe MiXeD", "__init__ snake_case camelCase",
);

my @cases = map { my $s = $_; utf8::encode($s); $s } @text;

# Invalid UTF-8 (byte strings).
push @cases, "\xff\xfe", "abc\xc3", "\xc3\x28 x", "\xe2\x82\x28", "\xed\xa0\x80 surrogate", "\xc0\x80 overlong",
    "\xf8\x88\x80\x80\x80 five", "\x80\x81\x82 cont", "ok \xe2\x82\xac \xe2\x82";

@cases;
