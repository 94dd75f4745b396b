//! SentencePiece-style BPE (`tokenizer.ggml.model = llama`), as llama.cpp's
//! `llm_tokenizer_spm_session`: the text (spaces already written as `▁`) is
//! cut into UTF-8 characters, then the adjacent pair whose concatenation is
//! the token with the highest score is merged, again and again (ties: the
//! leftmost). What is left and is not a token is written as byte tokens.
use std::collections::BinaryHeap;

use super::utf8::seq_len;

/// A candidate merge, ordered by score (highest first), then by position
/// (leftmost first).
#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    len: u32,
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // llama.cpp's comparator treats incomparable scores (NaN) as equal.
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

/// What the SPM merger needs from the vocabulary.
pub trait SpmVocab {
    /// The token with exactly this text, if it is a candidate for merging.
    fn spm_token(&self, text: &[u8]) -> Option<(i32, f32)>;
    /// The token for a raw byte (`<0xAB>`), if the vocabulary has one.
    fn byte_token(&self, byte: u8) -> Option<i32>;
}

/// Per-call scratch, reused between fragments.
#[derive(Default)]
pub struct SpmSession {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

impl SpmSession {
    /// Tokenizes `text` (already escaped) and appends the ids to `out`.
    pub fn tokenize(&mut self, vocab: &impl SpmVocab, text: &[u8], out: &mut Vec<i32>) {
        self.symbols.clear();
        self.queue.clear();
        let mut offset = 0usize;
        while offset < text.len() {
            let len = seq_len(text[offset]).min(text.len() - offset);
            let index = self.symbols.len() as i32;
            self.symbols.push(Symbol {
                start: offset as u32,
                len: len as u32,
                prev: index - 1,
                next: if offset + len == text.len() { -1 } else { index + 1 },
            });
            offset += len;
        }
        for i in 1..self.symbols.len() {
            self.try_add(vocab, text, i - 1, i);
        }
        while let Some(bigram) = self.queue.pop() {
            let (l, r) = (self.symbols[bigram.left as usize], self.symbols[bigram.right as usize]);
            // Skip a pair one of whose symbols has changed since it was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != bigram.len {
                continue;
            }
            let left = bigram.left as usize;
            self.symbols[left].len += r.len;
            self.symbols[bigram.right as usize].len = 0;
            self.symbols[left].next = r.next;
            if r.next >= 0 {
                self.symbols[r.next as usize].prev = left as i32;
            }
            if l.prev >= 0 {
                self.try_add(vocab, text, l.prev as usize, left);
            }
            if r.next >= 0 {
                self.try_add(vocab, text, left, r.next as usize);
            }
        }
        let mut i = if self.symbols.is_empty() { -1 } else { 0 };
        while i >= 0 {
            let s = self.symbols[i as usize];
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            match vocab.spm_token(piece) {
                Some((id, _)) => out.push(id),
                // Merged symbols are always tokens; an unknown character is
                // written byte by byte (a vocabulary without byte tokens
                // drops it, where llama.cpp would fail).
                None => out.extend(piece.iter().filter_map(|&b| vocab.byte_token(b))),
            }
            i = s.next;
        }
    }

    fn try_add(&mut self, vocab: &impl SpmVocab, text: &[u8], left: usize, right: usize) {
        let start = self.symbols[left].start as usize;
        let len = (self.symbols[left].len + self.symbols[right].len) as usize;
        if let Some((_, score)) = vocab.spm_token(&text[start..start + len]) {
            self.queue.push(Bigram { score, left: left as u32, right: right as u32, len: len as u32 });
        }
    }
}
