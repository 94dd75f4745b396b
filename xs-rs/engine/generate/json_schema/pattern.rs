//! A string's `pattern` (a regular expression anchored with `^` and `$`)
//! as GBNF, the way llama.cpp b11434's `_pattern_to_rule` translates it,
//! byte by byte: literals (runs of plain characters, merged), `.` (a "dot"
//! rule: any character but CR and LF), groups `( )` and `(?: )` (at most
//! 100 deep), alternatives `|`, classes `[...]` copied as GBNF classes, the
//! quantifiers `* + ?` and `{m}`, `{m,}`, `{,n}`, `{m,n}` (a repeated
//! group or class gets its own rule, "NAME-1", "NAME-2", ...), and the
//! escapes GBNF shares (`\t \r \n \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH`)
//! plus `\` before a regex operator.
//!
//! As in llama.cpp, a pattern it cannot translate (not anchored, look-around
//! or named groups, `\d \w \s` and other escapes, an inner anchor, ...)
//! falls back to any string, with a warning; a pattern that is not a valid
//! regex (unbalanced parentheses, an unterminated class, nothing to repeat,
//! a trailing backslash) is an error. Its quirks are kept, since the text
//! must be the same: a quantifier after an escaped operator applies to the
//! whole literal before it, a class is copied without checking it.
//!
//! One difference: llama.cpp splits a multi-byte character followed by a
//! quantifier into its bytes, writing a grammar that is not UTF-8; that is
//! refused here, naming the pattern.
use super::converter::{build_repetition, too_large, Converter};
use crate::engine::error::Result;
use std::collections::HashMap;

/// Groups nested deeper than this make the pattern unsupported (llama.cpp's
/// MAX_PATTERN_DEPTH).
const MAX_PATTERN_DEPTH: usize = 100;

/// Characters that end a literal run.
const NON_LITERAL: &[u8] = b"|.()[]{}*+?^$";
/// Characters a `\` makes literal in a regex, written bare in GBNF.
const ESCAPED_OPERATORS: &[u8] = b"^$.[]()|{}*+?";

enum PatternError {
    /// A valid regex with no GBNF translation: any string instead.
    Unsupported(String),
    /// Not a valid regex: an error.
    Invalid(String),
}

/// One piece of a sequence: a literal's (escaped) text, or GBNF to use as is.
struct Piece {
    text: Vec<u8>,
    literal: bool,
}

fn as_rule(piece: &Piece) -> Vec<u8> {
    if piece.literal {
        let mut out = Vec::with_capacity(piece.text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(&piece.text);
        out.push(b'"');
        out
    } else {
        piece.text.clone()
    }
}

/// The length of a GBNF-compatible escape at `pos`, 0 if there is none
/// (llama.cpp's `gbnf_escape_length`, in step with its grammar parser).
fn gbnf_escape_length(pattern: &[u8], pos: usize) -> usize {
    if pos + 1 >= pattern.len() || pattern[pos] != b'\\' {
        return 0;
    }
    let hex_digits = match pattern[pos + 1] {
        b'x' => 2,
        b'u' => 4,
        b'U' => 8,
        b't' | b'r' | b'n' | b'\\' | b'"' | b'[' | b']' | b'-' => return 2,
        _ => return 0,
    };
    if pos + 2 + hex_digits > pattern.len() {
        return 0;
    }
    if pattern[pos + 2..pos + 2 + hex_digits].iter().all(u8::is_ascii_hexdigit) {
        2 + hex_digits
    } else {
        0
    }
}

/// `std::stoi`: leading white space, a sign, at least one digit, the rest
/// ignored; None where it throws (no digits, out of int's range).
fn parse_stoi(text: &[u8]) -> Option<i32> {
    let mut i = 0;
    while i < text.len() && matches!(text[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let negative = text.get(i) == Some(&b'-');
    if matches!(text.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let start = i;
    let mut value: i64 = 0;
    while i < text.len() && text[i].is_ascii_digit() {
        value = value.checked_mul(10)?.checked_add(i64::from(text[i] - b'0'))?;
        i += 1;
    }
    if i == start {
        return None;
    }
    i32::try_from(if negative { -value } else { value }).ok()
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct PatternState<'p> {
    /// The whole pattern, for messages.
    source: &'p str,
    /// The pattern without its anchors.
    pattern: &'p [u8],
    i: usize,
    paren_depth: usize,
    /// A repeated group or class's text -> its rule's name.
    sub_rule_ids: HashMap<Vec<u8>, String>,
    /// The rule the pattern becomes (its repeated parts are NAME-1, ...).
    name: String,
}

impl Converter<'_, '_> {
    /// The rule for a string with `pattern`, or the fallback / error
    /// llama.cpp's `_visit_pattern` gives; a rule the failed translation
    /// added is taken back.
    pub(super) fn visit_pattern(&mut self, pattern: &str, name: &str) -> Result<String> {
        self.rules.start_journal();
        match self.pattern_to_rule(pattern, name) {
            Ok(Ok(rule)) => {
                self.rules.keep_journal();
                Ok(rule)
            }
            Ok(Err(PatternError::Unsupported(what))) => {
                self.rules.undo_journal();
                self.warnings.push(format!("pattern {pattern} is not supported ({what}), accepting any string"));
                let string = self.add_named_primitive("string", "string");
                Ok(self.rules.add(name, string))
            }
            Ok(Err(PatternError::Invalid(what))) => {
                self.rules.undo_journal();
                self.errors.push(format!("Invalid pattern {pattern}: {what}"));
                Ok(String::new())
            }
            Err(e) => {
                self.rules.undo_journal();
                Err(e)
            }
        }
    }

    fn pattern_to_rule(&mut self, pattern: &str, name: &str) -> Result<Result<String, PatternError>> {
        let bytes = pattern.as_bytes();
        if bytes.len() < 2 || bytes[0] != b'^' || bytes[bytes.len() - 1] != b'$' {
            return Ok(Err(PatternError::Unsupported("not anchored with '^' and '$'".into())));
        }
        let mut state = PatternState {
            source: pattern,
            pattern: &bytes[1..bytes.len() - 1],
            i: 0,
            paren_depth: 0,
            sub_rule_ids: HashMap::new(),
            name: name.to_string(),
        };
        let body = match self.transform(&mut state)? {
            Ok(piece) => as_rule(&piece),
            Err(e) => return Ok(Err(e)),
        };
        if state.paren_depth != 0 {
            return Ok(Err(PatternError::Invalid("unbalanced parentheses".into())));
        }
        let mut text = br#""\"" ("#.to_vec();
        text.extend_from_slice(&body);
        text.extend_from_slice(br#") "\"""#);
        let text = utf8(text, pattern)?;
        Ok(Ok(self.rules.add(name, text)))
    }

    /// One sequence, up to its closing `)` or the end of the pattern.
    fn transform(&mut self, st: &mut PatternState) -> Result<Result<Piece, PatternError>> {
        use PatternError::{Invalid, Unsupported};
        let mut seq: Vec<Piece> = Vec::new();
        let length = st.pattern.len();
        while st.i < length {
            let c = st.pattern[st.i];
            match c {
                b'.' => {
                    let dot = self.rules.add("dot", r"[^\x0A\x0D]".to_string());
                    seq.push(Piece { text: dot.into_bytes(), literal: false });
                    st.i += 1;
                }
                b'(' => {
                    st.i += 1;
                    if st.i < length && st.pattern[st.i] == b'?' {
                        if st.i + 1 < length && st.pattern[st.i + 1] == b':' {
                            st.i += 2; // a non-capturing group is a group
                        } else {
                            return Ok(Err(Unsupported("unsupported group syntax".into())));
                        }
                    }
                    st.paren_depth += 1;
                    if st.paren_depth > MAX_PATTERN_DEPTH {
                        return Ok(Err(Unsupported("pattern nesting too deep".into())));
                    }
                    let inner = match self.transform(st)? {
                        Ok(piece) => as_rule(&piece),
                        Err(e) => return Ok(Err(e)),
                    };
                    let mut text = b"(".to_vec();
                    text.extend_from_slice(&inner);
                    text.push(b')');
                    seq.push(Piece { text, literal: false });
                }
                b')' => {
                    st.i += 1;
                    if st.paren_depth == 0 {
                        return Ok(Err(Invalid("unbalanced parentheses".into())));
                    }
                    st.paren_depth -= 1;
                    return Ok(Ok(join_seq(&seq)));
                }
                b'^' | b'$' => return Ok(Err(Unsupported("anchor inside the pattern".into()))),
                b'[' => {
                    let mut class = vec![b'['];
                    st.i += 1;
                    while st.i < length && st.pattern[st.i] != b']' {
                        if st.pattern[st.i] == b'\\' {
                            let escape = gbnf_escape_length(st.pattern, st.i);
                            if escape == 0 {
                                let shown = lossy(&st.pattern[st.i..(st.i + 2).min(length)]);
                                return Ok(Err(Unsupported(format!("unsupported escape in character class: {shown}"))));
                            }
                            class.extend_from_slice(&st.pattern[st.i..st.i + escape]);
                            st.i += escape;
                        } else {
                            class.push(st.pattern[st.i]);
                            st.i += 1;
                        }
                    }
                    if st.i >= length {
                        return Ok(Err(Invalid("unterminated character class".into())));
                    }
                    class.push(b']');
                    st.i += 1;
                    seq.push(Piece { text: class, literal: false });
                }
                b'|' => {
                    seq.push(Piece { text: b"|".to_vec(), literal: false });
                    st.i += 1;
                }
                b'*' | b'+' | b'?' => {
                    let Some(last) = seq.last_mut() else {
                        return Ok(Err(Invalid("nothing to repeat".into())));
                    };
                    let mut text = as_rule(last);
                    text.push(c);
                    *last = Piece { text, literal: false };
                    st.i += 1;
                }
                b'{' => {
                    let start = st.i + 1;
                    st.i += 1;
                    while st.i < length && st.pattern[st.i] != b'}' {
                        st.i += 1;
                    }
                    if st.i >= length {
                        return Ok(Err(Unsupported("unterminated curly brackets".into())));
                    }
                    let inside = &st.pattern[start..st.i];
                    st.i += 1;
                    let nums: Vec<&[u8]> = inside.split(|&b| b == b',').collect();
                    let (min_times, max_times) = match nums.as_slice() {
                        [one] => match parse_stoi(one) {
                            Some(n) => (n, n),
                            None => return Ok(Err(Unsupported("invalid number in curly brackets".into()))),
                        },
                        [low, high] => {
                            let min = if low.is_empty() { Some(0) } else { parse_stoi(low) };
                            let max = if high.is_empty() { Some(i32::MAX) } else { parse_stoi(high) };
                            match (min, max) {
                                (Some(min), Some(max)) => (min, max),
                                _ => return Ok(Err(Unsupported("invalid number in curly brackets".into()))),
                            }
                        }
                        _ => return Ok(Err(Unsupported("wrong number of values in curly brackets".into()))),
                    };
                    let Some(last) = seq.last_mut() else {
                        return Ok(Err(Invalid("nothing to repeat".into())));
                    };
                    let item = if last.literal {
                        let mut quoted = b"\"".to_vec();
                        quoted.extend_from_slice(&last.text);
                        quoted.push(b'"');
                        utf8(quoted, st.source)?
                    } else {
                        // a group or class repeated gets a rule of its own
                        let count = st.sub_rule_ids.len() + 1;
                        match st.sub_rule_ids.get(&last.text) {
                            Some(id) => id.clone(),
                            None => {
                                let text = utf8(last.text.clone(), st.source)?;
                                let id = self.rules.add(&format!("{}-{count}", st.name), text);
                                st.sub_rule_ids.insert(last.text.clone(), id.clone());
                                id
                            }
                        }
                    };
                    *last =
                        Piece { text: build_repetition(&item, min_times, max_times, "").into_bytes(), literal: false };
                }
                _ => {
                    let mut literal: Vec<u8> = Vec::new();
                    while st.i < length {
                        let b = st.pattern[st.i];
                        if b == b'\\' {
                            if st.i == length - 1 {
                                return Ok(Err(Invalid("trailing backslash".into())));
                            }
                            let next = st.pattern[st.i + 1];
                            if ESCAPED_OPERATORS.contains(&next) {
                                literal.push(next);
                                st.i += 2;
                            } else {
                                let escape = gbnf_escape_length(st.pattern, st.i);
                                if escape == 0 {
                                    let shown = lossy(&st.pattern[st.i..st.i + 2]);
                                    return Ok(Err(Unsupported(format!("unsupported escape: {shown}"))));
                                }
                                literal.extend_from_slice(&st.pattern[st.i..st.i + escape]);
                                st.i += escape;
                            }
                        } else if b == b'"' {
                            literal.extend_from_slice(b"\\\"");
                            st.i += 1;
                        } else if !NON_LITERAL.contains(&b)
                            && (st.i == length - 1
                                || literal.is_empty()
                                || st.pattern[st.i + 1] == b'.'
                                || !NON_LITERAL.contains(&st.pattern[st.i + 1]))
                        {
                            literal.push(b);
                            st.i += 1;
                        } else {
                            break;
                        }
                    }
                    if literal.is_empty() {
                        // nothing taken: a stray ']' or '}'
                        return Ok(Err(Unsupported(format!("unsupported character: {}", c as char))));
                    }
                    seq.push(Piece { text: literal, literal: true });
                }
            }
        }
        Ok(Ok(join_seq(&seq)))
    }
}

/// The sequence as GBNF: consecutive literals merged into one, pieces
/// separated by spaces.
fn join_seq(seq: &[Piece]) -> Piece {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut literal: Vec<u8> = Vec::new();
    for piece in seq {
        if piece.literal {
            literal.extend_from_slice(&piece.text);
        } else {
            if !literal.is_empty() {
                parts.push(as_rule(&Piece { text: std::mem::take(&mut literal), literal: true }));
            }
            parts.push(piece.text.clone());
        }
    }
    if !literal.is_empty() {
        parts.push(as_rule(&Piece { text: literal, literal: true }));
    }
    Piece { text: parts.join(&b' '), literal: false }
}

/// Rule text must be UTF-8; llama.cpp's would not be where it cut a
/// multi-byte character from its quantifier.
fn utf8(text: Vec<u8>, pattern: &str) -> Result<String> {
    String::from_utf8(text).map_err(|_| {
        too_large(&format!(
            "pattern {pattern} puts a quantifier on a multi-byte character, which llama.cpp's converter splits into bytes (not supported; use a group: (é)+)"
        ))
    })
}
