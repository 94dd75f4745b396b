//! WordPiece (`tokenizer.ggml.model = bert`), as llama.cpp's WPM tokenizer:
//! the text is normalised and cut into words (BERT's basic tokenizer), then
//! each word, behind a `▁`, is spelled greedily with the longest tokens
//! from the left; a word that cannot be spelled becomes the unknown token.
//!
//! The character classes are llama.cpp's (Unicode 15.1): the regex crate's
//! categories narrowed as the pre-tokenizers narrow them, its lower-case
//! mapping limited to characters llama.cpp knows, and the accent stripping
//! of `nfd_table.rs` (the first code point of each character's NFD).
use super::nfd_table::NFD_FIRST;
use super::pretokenize::with_llama_classes;
use super::utf8;
use regex::Regex;

/// The normaliser settings (`tokenizer.ggml.lowercase`,
/// `tokenizer.ggml.strip_accents`) and the compiled character classes.
pub struct WordPiece {
    lowercase: bool,
    strip_accents: bool,
    /// The longest token text, in bytes: the longest match tried.
    max_token_len: usize,
    control: Regex,
    accent_mark: Regex,
    punctuation: Regex,
    /// Characters llama.cpp has a lower-case mapping for, if Rust has one.
    cased: Regex,
}

/// Whether a code point is one of llama.cpp's whitespace characters
/// (Unicode White_Space).
fn is_whitespace(cpt: u32) -> bool {
    matches!(cpt, 0x09..=0x0D | 0x20 | 0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000)
}

/// The CJK ideograph blocks that BERT makes words of their own (with the
/// same upper end of Extension E as Hugging Face's code, which llama.cpp
/// copies).
fn is_chinese(cpt: u32) -> bool {
    matches!(cpt, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

/// The first code point of `cpt`'s canonical decomposition (itself if none).
fn nfd_first(cpt: u32) -> u32 {
    let at = NFD_FIRST.partition_point(|&(first, _, _)| first <= cpt);
    match at.checked_sub(1).map(|i| NFD_FIRST[i]) {
        Some((_, last, base)) if cpt <= last => base,
        _ => cpt,
    }
}

fn class(pattern: &str) -> Regex {
    Regex::new(&format!(r"\A{}\z", with_llama_classes(pattern))).expect("a valid character class")
}

impl WordPiece {
    pub fn new(lowercase: bool, strip_accents: bool, max_token_len: usize) -> WordPiece {
        WordPiece {
            lowercase,
            strip_accents,
            max_token_len,
            control: class(r"[\p{Cc}\p{Cf}\p{Co}]"),
            accent_mark: class(r"\p{M}"),
            punctuation: class(r"\p{P}"),
            cased: class(r"[\p{L}\p{Nl}\p{So}]"),
        }
    }

    fn is(&self, class: &Regex, c: char) -> bool {
        let mut buf = [0u8; 4];
        class.is_match(c.encode_utf8(&mut buf))
    }

    fn to_lower(&self, c: char) -> char {
        if c.is_ascii() {
            return c.to_ascii_lowercase();
        }
        match c.to_lowercase().next() {
            Some(lower) if lower != c && self.is(&self.cased, c) => lower,
            _ => c,
        }
    }

    /// BERT's basic tokenizer: the words of `text` (each non-empty), in
    /// `words` as ranges of `buf`.
    fn words(&self, text: &[u8], buf: &mut Vec<u8>, words: &mut Vec<(usize, usize)>) {
        buf.clear();
        words.clear();
        let mut start = 0;
        let end_word = |buf: &Vec<u8>, start: &mut usize, words: &mut Vec<(usize, usize)>| {
            if buf.len() > *start {
                words.push((*start, buf.len()));
            }
            *start = buf.len();
        };
        let mut i = 0;
        while i < text.len() {
            let (read, used) = utf8::read_lenient(&text[i..]);
            i += used;
            let cpt = if self.strip_accents { nfd_first(read) } else { read };
            if is_whitespace(cpt) {
                end_word(buf, &mut start, words);
                continue;
            }
            // surrogates (control characters to llama.cpp) have no char
            let Some(c) = char::from_u32(cpt) else { continue };
            let ascii = cpt < 0x80;
            let control = if ascii { c.is_ascii_control() } else { self.is(&self.control, c) };
            if cpt == 0 || cpt == 0xFFFD || control {
                continue;
            }
            if self.strip_accents && !ascii && self.is(&self.accent_mark, c) {
                continue;
            }
            let out = if self.lowercase { self.to_lower(c) } else { c };
            // ASCII punctuation and symbols, other punctuation, CJK: a word each
            let alone = if ascii { c.is_ascii_punctuation() } else { self.is(&self.punctuation, c) || is_chinese(cpt) };
            if alone {
                end_word(buf, &mut start, words);
            }
            utf8::push_cpt(buf, out as u32);
            if alone {
                end_word(buf, &mut start, words);
            }
        }
        end_word(buf, &mut start, words);
    }

    /// Appends the ids of `text` (special tokens already split out).
    pub fn tokenize(
        &self,
        text: &[u8],
        lookup: impl Fn(&[u8]) -> Option<i32>,
        unk: Option<i32>,
        scratch: &mut WpmState,
        out: &mut Vec<i32>,
    ) {
        let WpmState { buf, words, word } = scratch;
        self.words(text, buf, words);
        for &(start, end) in words.iter() {
            word.clear();
            word.extend_from_slice("▁".as_bytes());
            word.extend_from_slice(&buf[start..end]);
            let first = out.len();
            let n = word.len();
            let mut i = 0;
            while i < n {
                // the longest token at i (one byte longer than any is tried, as llama.cpp)
                let longest = (i + 1..=n.min(i + self.max_token_len + 1))
                    .rev()
                    .find_map(|j| lookup(&word[i..j]).map(|id| (id, j)));
                match longest {
                    Some((id, j)) => {
                        out.push(id);
                        i = j;
                    }
                    None => {
                        out.truncate(first);
                        break;
                    }
                }
            }
            if out.len() == first {
                out.extend(unk);
            }
        }
    }
}

/// Scratch of one encode call.
#[derive(Default)]
pub struct WpmState {
    buf: Vec<u8>,
    words: Vec<(usize, usize)>,
    word: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(wp: &WordPiece, text: &str) -> Vec<String> {
        let (mut buf, mut words) = (Vec::new(), Vec::new());
        wp.words(text.as_bytes(), &mut buf, &mut words);
        words.iter().map(|&(s, e)| String::from_utf8(buf[s..e].to_vec()).unwrap()).collect()
    }

    #[test]
    fn basic_tokenizer_splits_lowercases_and_strips_accents() {
        let wp = WordPiece::new(true, true, 16);
        assert_eq!(words(&wp, " Héllo,  WORLD!\u{7}x"), ["hello", ",", "world", "!", "x"]);
        assert_eq!(words(&wp, "a中文b"), ["a", "中", "文", "b"]);
        assert_eq!(words(&wp, "İ\u{301}"), ["i"]);
        let cased = WordPiece::new(false, false, 16);
        assert_eq!(words(&cased, "Héllo$x"), ["Héllo", "$", "x"]);
    }

    #[test]
    fn nfd_first_of_precomposed_and_hangul() {
        assert_eq!(nfd_first('é' as u32), 'e' as u32);
        assert_eq!(nfd_first('한' as u32), 0x1112);
        assert_eq!(nfd_first('a' as u32), 'a' as u32);
    }
}
