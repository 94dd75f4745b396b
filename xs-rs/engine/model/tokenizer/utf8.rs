//! UTF-8 the way llama.cpp reads it, plus the incremental decoder that
//! streaming callers use.
//!
//! llama.cpp decodes text leniently: the lead byte alone decides a sequence's
//! length, only the continuation bits of the following bytes are checked, and
//! every byte that does not start a readable sequence becomes U+FFFD. So an
//! overlong form is read as the code point it spells and a UTF-16 surrogate
//! passes through. BPE then works on the text re-encoded from those code
//! points; we do the same so that odd bytes give the same tokens.
use std::borrow::Cow;

/// The length of the sequence a byte starts, from its high nibble (a stray
/// continuation byte counts as 1), as llama.cpp's `unicode_len_utf8`.
#[inline]
pub fn seq_len(lead: u8) -> usize {
    const BY_HIGH_NIBBLE: [u8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    BY_HIGH_NIBBLE[(lead >> 4) as usize] as usize
}

const REPLACEMENT: u32 = 0xFFFD;

/// Reads one code point at `bytes[0..]` (non-empty) the lenient way; returns
/// it and the bytes used. Unreadable input gives (U+FFFD, 1). Code points
/// above U+10FFFF, which llama.cpp cannot write back (it throws), are read as
/// one U+FFFD for the whole sequence.
pub fn read_lenient(bytes: &[u8]) -> (u32, usize) {
    let b0 = bytes[0] as u32;
    let cont = |i: usize| bytes.get(i).is_some_and(|&b| b & 0xC0 == 0x80);
    let low = |i: usize| (bytes[i] & 0x3F) as u32;
    if b0 & 0x80 == 0 {
        (b0, 1)
    } else if b0 & 0x40 == 0 {
        (REPLACEMENT, 1)
    } else if b0 & 0x20 == 0 {
        if cont(1) {
            (((b0 & 0x1F) << 6) | low(1), 2)
        } else {
            (REPLACEMENT, 1)
        }
    } else if b0 & 0x10 == 0 {
        if cont(1) && cont(2) {
            (((b0 & 0x0F) << 12) | (low(1) << 6) | low(2), 3)
        } else {
            (REPLACEMENT, 1)
        }
    } else if b0 & 0x08 == 0 {
        if cont(1) && cont(2) && cont(3) {
            let cpt = ((b0 & 0x07) << 18) | (low(1) << 12) | (low(2) << 6) | low(3);
            (if cpt > 0x10FFFF { REPLACEMENT } else { cpt }, 4)
        } else {
            (REPLACEMENT, 1)
        }
    } else {
        (REPLACEMENT, 1)
    }
}

/// Appends a code point as UTF-8; surrogates (which Rust's `char` cannot
/// hold) are written in the same 3-byte form as other BMP code points.
pub fn push_cpt(out: &mut Vec<u8>, cpt: u32) {
    match cpt {
        0..=0x7F => out.push(cpt as u8),
        0x80..=0x7FF => out.extend_from_slice(&[0xC0 | (cpt >> 6) as u8, 0x80 | (cpt & 0x3F) as u8]),
        0x800..=0xFFFF => out.extend_from_slice(&[
            0xE0 | (cpt >> 12) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]),
        _ => out.extend_from_slice(&[
            0xF0 | (cpt >> 18) as u8,
            0x80 | ((cpt >> 12) & 0x3F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]),
    }
}

/// The text as llama.cpp's BPE sees it: valid UTF-8 unchanged, anything else
/// decoded leniently and written back.
pub fn normalize(bytes: &[u8]) -> Cow<'_, [u8]> {
    if std::str::from_utf8(bytes).is_ok() {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() + 8);
    let mut i = 0;
    while i < bytes.len() {
        let (cpt, used) = read_lenient(&bytes[i..]);
        push_cpt(&mut out, cpt);
        i += used;
    }
    Cow::Owned(out)
}

/// A `str` view of normalized text for the regex engine. The only thing
/// normalized text can hold that `str` cannot is a surrogate (ED A0..BF xx);
/// each is replaced by U+E000, a private-use character of the same length and
/// the same class for every pre-tokenizer pattern (not a letter, number or
/// space), so byte offsets of matches are offsets into the original.
pub fn regex_view(normalized: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(normalized) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => {
            let mut copy = normalized.to_vec();
            let mut i = 0;
            while i + 2 < copy.len() {
                if copy[i] == 0xED && copy[i + 1] >= 0xA0 {
                    copy[i..i + 3].copy_from_slice(&[0xEE, 0x80, 0x80]);
                    i += 3;
                } else {
                    i += seq_len(copy[i]);
                }
            }
            Cow::Owned(String::from_utf8(copy).expect("normalized text with surrogates replaced is UTF-8"))
        }
    }
}

/// Converts bytes to a string, one U+FFFD per maximal invalid subsequence
/// (the W3C/WHATWG rule, as `String::from_utf8_lossy`).
pub fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// Turns a stream of byte chunks into text without ever splitting a
/// character: an incomplete sequence at the end is held until the bytes that
/// complete it arrive; bytes that can never become valid give U+FFFD at once.
#[derive(Default, Debug)]
pub struct StreamDecoder {
    held: Vec<u8>,
}

impl StreamDecoder {
    /// Adds bytes; appends to `out` all the text now complete.
    pub fn push(&mut self, bytes: &[u8], out: &mut String) {
        self.held.extend_from_slice(bytes);
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.held[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    self.held.clear();
                    return;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.held[start..valid]).expect("validated prefix"));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start = valid + bad;
                        }
                        None => {
                            // An incomplete sequence at the end: keep it.
                            self.held.drain(..valid);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// The bytes held back (an incomplete character), if any.
    pub fn pending(&self) -> &[u8] {
        &self.held
    }

    /// Ends the stream: held bytes become U+FFFD.
    pub fn finish(&mut self, out: &mut String) {
        if !self.held.is_empty() {
            out.push_str(&lossy(&self.held));
            self.held.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_text_is_borrowed() {
        assert!(matches!(normalize("héllo 🦙".as_bytes()), Cow::Borrowed(_)));
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        assert_eq!(&*normalize(b"a\xFFb"), "a\u{FFFD}b".as_bytes());
        // a truncated 3-byte sequence: each byte on its own
        assert_eq!(&*normalize(b"\xE2\x82"), "\u{FFFD}\u{FFFD}".as_bytes());
        // an overlong NUL is read as NUL, as llama.cpp does
        assert_eq!(&*normalize(b"\xC0\x80x"), b"\0x");
        // a surrogate passes through unchanged, and the regex view replaces it
        assert_eq!(&*normalize(b"\xED\xA0\x80!"), b"\xED\xA0\x80!");
        assert_eq!(&*regex_view(b"\xED\xA0\x80!"), "\u{E000}!");
        // beyond U+10FFFF
        assert_eq!(&*normalize(b"\xF4\x90\x80\x80"), "\u{FFFD}".as_bytes());
    }

    #[test]
    fn stream_decoder_holds_incomplete_characters() {
        let mut d = StreamDecoder::default();
        let mut out = String::new();
        let llama = "🦙".as_bytes();
        d.push(&llama[..1], &mut out);
        d.push(&llama[1..3], &mut out);
        assert_eq!(out, "");
        assert_eq!(d.pending().len(), 3);
        d.push(&llama[3..], &mut out);
        assert_eq!(out, "🦙");
        d.push(b"\xFFok\xE2\x82", &mut out);
        assert_eq!(out, "🦙\u{FFFD}ok");
        d.finish(&mut out);
        assert_eq!(out, "🦙\u{FFFD}ok\u{FFFD}");
    }
}
