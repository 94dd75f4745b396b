//! BPE pre-tokenizers: the regexes that cut text into words before merging,
//! chosen by `tokenizer.ggml.pre`, and the GPT-2 byte-to-character mapping.
//!
//! Each named pre-tokenizer is one row of `PRE_TOKENIZERS`. The patterns are
//! the Hugging Face ones that llama.cpp uses; the text is cut by the first
//! pattern, then every piece by the next, and so on, and any text between
//! matches is a word of its own.
//!
//! Two details make the results identical to llama.cpp b11434:
//! - Character classes are those of llama.cpp's tables, which follow Unicode
//!   15.1. The regex crate follows Unicode 16.0, so the characters that 16.0
//!   added to \p{L}, \p{N} and \p{P} are subtracted (`UNICODE_16_ADDITIONS`);
//!   to llama.cpp they are unassigned, i.e. neither letters nor numbers.
//! - `\s+(?!\S)` needs a look-ahead, which the regex crate (fast, linear time)
//!   does not have. A pattern ending in `\s+(?!\S)` or `\s+(?!\S)|\s+` is run
//!   with a plain `\s+` instead, and a whitespace run it matches that is
//!   followed by more text and is longer than one character gives back its
//!   last character: exactly what the look-ahead does by backtracking. The
//!   unit tests check this against fancy-regex running the original pattern.
use crate::engine::{Error, Result};
use regex::Regex;
use std::path::Path;

/// GPT-2's pattern.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's pattern (digits in groups of up to three), with the
/// case-insensitive contractions spelled out as llama.cpp does.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's pattern: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 3.5's pattern: Qwen2's with combining marks (\p{M}) joining letters.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-4o's pattern (o200k: gpt-oss, Llama 4), as llama.cpp writes it: a
/// letter that is not lower case is `(?=[\p{L}])([^a-z])`. The regex crate
/// has no look-ahead; [`PreTokenizer::new`] reads those as the classes they
/// stand for (`[\p{L}--a-z]`), and the unit tests check the two split alike.
const GPT4O: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?",
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// GPT-4o's letter look-aheads and the classes they stand for.
const LETTER_LOOKAHEADS: [(&str, &str); 2] =
    [(r"((?=[\p{L}])([^a-z]))", r"[\p{L}--a-z]"), (r"((?=[\p{L}])([^A-Z]))", r"[\p{L}--A-Z]")];

/// DeepSeek LLM's patterns. llama.cpp runs those without a `\p{..}` class
/// through std::wregex after replacing every non-ASCII space by U+000B: `\s`
/// still means every space, but a literal range that holds a non-ASCII space
/// never matches it. Those two ranges (U+3000 in the third, the spaces of
/// U+0800..U+4E00 in the fifth) subtract `\s` here to say so.
const DEEPSEEK_LLM: &[&str] = &[
    "[\r\n]",
    concat!(
        r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}",
        r"\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}",
        r"\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}",
        r"\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}",
        r"\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}",
        r"\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}",
        r"\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}",
        r"\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}",
        r"\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}",
        r"\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}",
        r"\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}",
        r"\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}",
        r"\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
    ),
    r"\s?[[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]--\s]+",
    r"\s+$",
    r"[[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]--\s]+",
    r"\p{N}+",
];

/// One named pre-tokenizer: its patterns and the vocabulary settings that
/// llama.cpp ties to the same names.
pub struct PreSpec {
    pub names: &'static [&'static str],
    pub patterns: &'static [&'static str],
    /// A word that is itself a token is emitted without merging (Llama 3).
    pub ignore_merges: bool,
    /// The default of add_bos before `tokenizer.ggml.add_bos_token` is read.
    pub add_bos: bool,
    /// BOS is added whatever the file says (Gemma 4: llama.cpp overrides a
    /// false add_bos_token).
    pub always_add_bos: bool,
    /// Words are mapped to GPT-2's byte characters before merging; false for
    /// SentencePiece-style BPE, which merges the UTF-8 characters themselves
    /// and spells missing characters with `<0xAB>` byte tokens.
    pub byte_encode: bool,
    /// Spaces become `▁` before splitting (and `▁` a space when decoding).
    pub escape_spaces: bool,
    /// A word of newlines only that is itself a token is emitted as it is
    /// (Gemma 4's fix: its merges never build runs of newlines).
    pub whole_newline_words: bool,
}

/// The settings most rows share.
const BYTE_LEVEL: PreSpec = PreSpec {
    names: &[],
    patterns: &[],
    ignore_merges: false,
    add_bos: false,
    always_add_bos: false,
    byte_encode: true,
    escape_spaces: false,
    whole_newline_words: false,
};

pub const PRE_TOKENIZERS: &[PreSpec] = &[
    PreSpec {
        names: &["default"],
        patterns: &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        ..BYTE_LEVEL
    },
    PreSpec {
        names: &["gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "trillion", "gigachat", "a.x-4.0", "mellum"],
        patterns: &[GPT2],
        ..BYTE_LEVEL
    },
    PreSpec {
        names: &["smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"],
        patterns: &[r"\p{N}", GPT2],
        ..BYTE_LEVEL
    },
    PreSpec {
        names: &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        patterns: &[LLAMA3],
        ignore_merges: true,
        add_bos: true,
        ..BYTE_LEVEL
    },
    PreSpec { names: &["dbrx", "smaug-bpe"], patterns: &[LLAMA3], ..BYTE_LEVEL },
    PreSpec {
        names: &["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"],
        patterns: &[QWEN2],
        ..BYTE_LEVEL
    },
    PreSpec { names: &["qwen35"], patterns: &[QWEN35], ..BYTE_LEVEL },
    PreSpec { names: &["gpt-4o", "llama4", "kanana2", "talkie"], patterns: &[GPT4O], ..BYTE_LEVEL },
    PreSpec { names: &["deepseek-llm"], patterns: DEEPSEEK_LLM, ..BYTE_LEVEL },
    PreSpec {
        // Also the pre-tokenizer of every `tokenizer.ggml.model = gemma4` file.
        names: &["gemma4", "granite-embed-multi-311m"],
        patterns: &[r"[^\n]+|\n+"],
        always_add_bos: true,
        byte_encode: false,
        escape_spaces: true,
        whole_newline_words: true,
        ..BYTE_LEVEL
    },
];

/// The pre-tokenizer row for a `tokenizer.ggml.pre` value (None: missing,
/// which llama.cpp treats as "default"); errors name the file `path`.
pub fn find_spec(pre: Option<&str>, path: &Path) -> Result<&'static PreSpec> {
    let name = pre.unwrap_or("default");
    PRE_TOKENIZERS.iter().find(|spec| spec.names.contains(&name)).ok_or_else(|| {
        let mut known: Vec<&str> = PRE_TOKENIZERS.iter().flat_map(|s| s.names.iter().copied()).collect();
        known.sort_unstable();
        Error::UnsupportedTokenizer {
            path: path.to_path_buf(),
            what: format!(
                "pre-tokenizer '{name}' (tokenizer.ggml.pre) is not supported; supported: {}",
                known.join(", ")
            ),
        }
    })
}

/// Code points that Unicode 16.0 added to the letter, number, punctuation
/// and mark categories; llama.cpp b11434's tables (Unicode 15.1) do not have
/// them.
const UNICODE_16_ADDITIONS: [(&str, &str); 4] = [
    (
        r"\p{L}",
        r"\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65}\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{11380}-\x{11389}\x{1138B}\x{1138E}\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{13460}-\x{143FA}\x{16100}-\x{1611D}\x{16D40}-\x{16D6C}\x{18CFF}\x{1E5D0}-\x{1E5ED}\x{1E5F0}",
    ),
    (
        r"\p{N}",
        r"\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1E5F1}-\x{1E5FA}",
    ),
    (
        r"\p{P}",
        r"\x{1B4E}-\x{1B4F}\x{1B7F}\x{10D6E}\x{113D4}-\x{113D5}\x{113D7}-\x{113D8}\x{11BE1}\x{16D6D}-\x{16D6F}\x{1E5FF}",
    ),
    (
        r"\p{M}",
        r"\x{897}\x{10D69}-\x{10D6D}\x{10EFC}\x{113B8}-\x{113C0}\x{113C2}\x{113C5}\x{113C7}-\x{113CA}\x{113CC}-\x{113D0}\x{113D2}\x{113E1}-\x{113E2}\x{11F5A}\x{1611E}-\x{1612F}\x{1E5EE}-\x{1E5EF}",
    ),
];

/// The pattern with each Unicode category narrowed to llama.cpp's tables. A
/// nested class is a union inside a bracket, so this works in and out of `[]`.
pub fn with_llama_classes(pattern: &str) -> String {
    let mut out = pattern.to_string();
    for (class, added) in UNICODE_16_ADDITIONS {
        out = out.replace(class, &format!("[{class}--[{added}]]"));
    }
    out
}

/// How a compiled pattern treats whitespace runs (see the module notes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SpaceRun {
    /// The pattern has no `\s+(?!\S)`.
    AsIs,
    /// Ends in `\s+(?!\S)`: every all-whitespace match is such a run.
    Gpt2,
    /// Ends in `\s*[\r\n]+|\s+(?!\S)|\s+`: runs holding CR or LF are matched
    /// by `\s*[\r\n]+`, so a match ending in other whitespace is such a run.
    AfterLineBreaks,
}

struct Splitter {
    regex: Regex,
    space_run: SpaceRun,
}

/// A compiled pre-tokenizer.
pub struct PreTokenizer {
    splitters: Vec<Splitter>,
}

fn is_space(c: char) -> bool {
    // Unicode White_Space: the same set as llama.cpp's and the regex crate's \s.
    matches!(c, '\t'..='\r' | ' ' | '\u{85}' | '\u{A0}' | '\u{1680}' | '\u{2000}'..='\u{200A}'
        | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}')
}

impl PreTokenizer {
    pub fn new(spec: &PreSpec) -> Result<PreTokenizer> {
        let splitters = spec
            .patterns
            .iter()
            .map(|&pattern| {
                let (base, space_run) = if let Some(head) = pattern.strip_suffix(r"|\s+(?!\S)|\s+") {
                    (format!(r"{head}|\s+"), SpaceRun::AfterLineBreaks)
                } else if let Some(head) = pattern.strip_suffix(r"|\s+(?!\S)") {
                    (format!(r"{head}|\s+"), SpaceRun::Gpt2)
                } else {
                    (pattern.to_string(), SpaceRun::AsIs)
                };
                let base = LETTER_LOOKAHEADS.iter().fold(base, |p, (lookahead, class)| p.replace(lookahead, class));
                let regex = Regex::new(&with_llama_classes(&base)).map_err(|e| {
                    Error::Argument(format!("Lugh's pre-tokenizer pattern {pattern} does not compile: {e}"))
                })?;
                Ok(Splitter { regex, space_run })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PreTokenizer { splitters })
    }

    /// Cuts `text` into words, as byte ranges; `scratch` is reused storage.
    pub fn split(&self, text: &str, words: &mut Vec<(usize, usize)>, scratch: &mut Vec<(usize, usize)>) {
        words.clear();
        if text.is_empty() {
            return;
        }
        words.push((0, text.len()));
        for splitter in &self.splitters {
            scratch.clear();
            for &(start, end) in words.iter() {
                splitter.split_into(&text[start..end], start, scratch);
            }
            std::mem::swap(words, scratch);
        }
    }
}

impl Splitter {
    fn split_into(&self, piece: &str, base: usize, out: &mut Vec<(usize, usize)>) {
        let mut pos = 0;
        while pos < piece.len() {
            let Some(m) = self.regex.find_at(piece, pos) else {
                break;
            };
            let (start, mut end) = (m.start(), m.end());
            if start > pos {
                out.push((base + pos, base + start));
            }
            if end < piece.len() && self.space_run != SpaceRun::AsIs {
                let matched = &piece[start..end];
                let mut chars = matched.chars();
                let last = chars.next_back().expect("matches are never empty");
                let from_space_run = is_space(last)
                    && (self.space_run == SpaceRun::Gpt2 || (last != '\r' && last != '\n'))
                    && chars.next().is_some();
                if from_space_run {
                    end -= last.len_utf8();
                }
            }
            out.push((base + start, base + end));
            pos = end;
        }
        if pos < piece.len() {
            out.push((base + pos, base + piece.len()));
        }
    }
}

/// GPT-2's reversible mapping of bytes to printable characters: the printable
/// Latin-1 bytes stand for themselves, the other 68 take U+0100 onwards.
pub struct ByteMap {
    /// UTF-8 of the character standing for each byte (1 or 2 bytes long).
    encoded: [([u8; 2], u8); 256],
}

impl ByteMap {
    pub fn new() -> ByteMap {
        let mut encoded = [([0u8; 2], 0u8); 256];
        let mut next = 0x100u32;
        for byte in 0..=255u8 {
            let printable = matches!(byte, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let c = if printable {
                byte as u32
            } else {
                next += 1;
                next - 1
            };
            let ch = char::from_u32(c).expect("mapped bytes are below U+0144");
            let mut buf = [0u8; 4];
            let len = ch.encode_utf8(&mut buf).len();
            encoded[byte as usize] = ([buf[0], buf[1]], len as u8);
        }
        ByteMap { encoded }
    }

    /// The UTF-8 of the character that stands for `byte`.
    #[inline]
    pub fn char_of(&self, byte: u8) -> &[u8] {
        let (bytes, len) = &self.encoded[byte as usize];
        &bytes[..*len as usize]
    }

    /// The byte a character stands for.
    pub fn byte_of(&self, c: char) -> Option<u8> {
        let c = c as u32;
        match c {
            0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(c as u8),
            0x100..=0x143 => {
                let nth = c - 0x100;
                (0..=255u8).filter(|b| !matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)).nth(nth as usize)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<'a>(pre: &PreTokenizer, text: &'a str) -> Vec<&'a str> {
        let (mut w, mut s) = (vec![], vec![]);
        pre.split(text, &mut w, &mut s);
        w.iter().map(|&(a, b)| &text[a..b]).collect()
    }

    /// The reference: fancy-regex running llama.cpp's pattern unchanged
    /// (with its classes narrowed to Unicode 15.1), unmatched text as words.
    fn reference_words<'a>(patterns: &[fancy_regex::Regex], text: &'a str) -> Vec<&'a str> {
        let mut words = vec![(0, text.len())];
        for re in patterns {
            let mut next = vec![];
            for (s, e) in words {
                let piece = &text[s..e];
                let mut pos = 0;
                for m in re.find_iter(piece) {
                    let m = m.unwrap();
                    if m.start() > pos {
                        next.push((s + pos, s + m.start()));
                    }
                    next.push((s + m.start(), s + m.end()));
                    pos = m.end();
                }
                if pos < piece.len() {
                    next.push((s + pos, e));
                }
            }
            words = next;
        }
        words.iter().map(|&(a, b)| &text[a..b]).collect()
    }

    fn reference_regexes(spec: &PreSpec) -> Vec<fancy_regex::Regex> {
        spec.patterns.iter().map(|p| fancy_regex::Regex::new(&with_llama_classes(p)).unwrap()).collect()
    }

    const TRICKY: &[&str] = &[
        "Hello world",
        " Hello  world  ",
        "a \t b\t\tc \n\n d\r\n\r\n  e   ",
        "   ",
        "\n",
        " \n",
        "x\u{3000}\u{3000}y\u{a0} z",
        "don't I'LL we'Ve 's 'S",
        "1234567 12 3.14159 ١٢٣٤",
        "日本語のテキスト and 中文",
        "emoji 🦙🚀 👩‍👩‍👧 done",
        "café naïve e\u{301}",
        "नमस्ते दुनिया ภาษาไทย مرحبا",
        "<|im_start|>user\nhi<|im_end|>",
        "tabs\tand\nnewlines\n\n",
        "\u{1}\u{7f}ctrl\u{200b}zero",
        "\u{1C89}new\u{1C89} \u{1CCF0}9",
        "a\u{E000}b \u{E000} \u{10FFFD}",
        "!!! ... ?! $$ ++ <=> ^~|",
        "  leading spaces and trailing  ",
        "\t\t\tx",
        " \t\u{3000}\n x",
        "word\r\n\r\n\r\nword",
        "e\u{301}\u{301}x \u{301}a \u{897}b 1\u{301}",
        "µÀ ℂ한국어 中文\u{3000}、。！？ ‘q’ 𐐀 a\u{1680}b\u{2000}\n\r",
        "trailing spaces   ",
        "HelloWorld XMLHttpRequest camelCase ÉCOLE Ünïcödé don'T I'M WE'LL x/y\n/z",
    ];

    #[test]
    fn fast_split_equals_lookahead_regex() {
        for spec in PRE_TOKENIZERS {
            let pre = PreTokenizer::new(spec).unwrap();
            let reference = reference_regexes(spec);
            for text in TRICKY {
                assert_eq!(words(&pre, text), reference_words(&reference, text), "{:?} on {text:?}", spec.names);
            }
        }
    }

    #[test]
    fn fast_split_equals_lookahead_regex_on_random_text() {
        // A deterministic generator over an alphabet of the interesting classes.
        let alphabet: Vec<char> =
            " \t\n\r\u{3000}\u{a0}aZé日'sStTlL19١.!,<>|$+🦙\u{301}\u{1C89}\u{E000}\u{897}µ한、！\u{1680}"
                .chars()
                .collect();
        let mut state = 0x2545F4914F6CDD1Du64;
        for spec in PRE_TOKENIZERS {
            let pre = PreTokenizer::new(spec).unwrap();
            let reference = reference_regexes(spec);
            for _ in 0..3000 {
                let mut text = String::new();
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let len = (state % 24) as usize;
                for _ in 0..len {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    text.push(alphabet[(state % alphabet.len() as u64) as usize]);
                }
                assert_eq!(words(&pre, &text), reference_words(&reference, &text), "{:?} on {text:?}", spec.names);
            }
        }
    }

    #[test]
    fn known_splits() {
        let gpt2 = PreTokenizer::new(find_spec(Some("gpt-2"), Path::new("v.gguf")).unwrap()).unwrap();
        assert_eq!(words(&gpt2, "Hello  world"), ["Hello", " ", " world"]);
        let llama3 = PreTokenizer::new(find_spec(Some("llama-bpe"), Path::new("v.gguf")).unwrap()).unwrap();
        assert_eq!(words(&llama3, "1234567"), ["123", "456", "7"]);
        let qwen2 = PreTokenizer::new(find_spec(Some("qwen2"), Path::new("v.gguf")).unwrap()).unwrap();
        assert_eq!(words(&qwen2, "a\n\n b"), ["a", "\n\n", " b"]);
        let qwen35 = PreTokenizer::new(find_spec(Some("qwen35"), Path::new("v.gguf")).unwrap()).unwrap();
        assert_eq!(words(&qwen35, "e\u{301}x \u{301}y"), ["e\u{301}x", " \u{301}y"]);
        assert_eq!(words(&qwen2, "e\u{301}x"), ["e", "\u{301}x"]);
        let deepseek = PreTokenizer::new(find_spec(Some("deepseek-llm"), Path::new("v.gguf")).unwrap()).unwrap();
        assert_eq!(words(&deepseek, "Hi 中文 123!\n  "), ["Hi", " ", "中文", " ", "123", "!", "\n", "  "]);
        // U+3000 is a space to llama.cpp's std::wregex, never one of the class's characters
        assert_eq!(words(&deepseek, "！\u{3000}！"), ["！", "\u{3000}！"]);
        let gemma4 = PreTokenizer::new(find_spec(Some("gemma4"), Path::new("v.gguf")).unwrap()).unwrap();
        assert_eq!(words(&gemma4, "a b\n\nc"), ["a b", "\n\n", "c"]);
    }

    #[test]
    fn unknown_pre_tokenizer_is_named() {
        let err = find_spec(Some("no-such-pre"), Path::new("v.gguf")).err().unwrap().to_string();
        assert!(err.contains("'no-such-pre'"), "{err}");
    }

    #[test]
    fn byte_map_round_trips() {
        let map = ByteMap::new();
        for b in 0..=255u8 {
            let s = std::str::from_utf8(map.char_of(b)).unwrap();
            assert_eq!(map.byte_of(s.chars().next().unwrap()), Some(b));
        }
        assert_eq!(map.char_of(b' '), "Ġ".as_bytes());
        assert_eq!(map.char_of(b'\n'), "Ċ".as_bytes());
    }
}
