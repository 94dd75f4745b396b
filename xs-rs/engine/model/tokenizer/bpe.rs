//! BPE (`tokenizer.ggml.model = gpt2` or `gemma4`), as llama.cpp's
//! `llm_tokenizer_bpe_session`: each word from the pre-tokenizer is mapped
//! byte by byte to GPT-2's characters (or, for Gemma 4, taken as its UTF-8
//! characters), then adjacent symbols are merged, always the pair with the
//! lowest merge rank first (ties: the leftmost).
//!
//! llama.cpp compares symbol texts; we give every text that can ever be a
//! symbol a number (a "piece") when the vocabulary is loaded, so merging
//! compares integers: pieces below n_vocab are the tokens themselves, the
//! others are merge results or byte characters that are not tokens.
use super::hash::{new_map, Map};
use super::pretokenize::ByteMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub struct Merges {
    /// (left piece, right piece) → (rank, merged piece).
    pairs: Map<u64, (u32, u32)>,
    /// The piece of the character standing for each byte (byte-level BPE).
    byte_piece: [u32; 256],
    /// Texts of the pieces that are not tokens (piece id - n_vocab).
    extra_texts: Vec<Box<[u8]>>,
    /// The same, text → piece (to find the pieces of UTF-8 characters).
    extra_pieces: Map<Box<[u8]>, u32>,
    n_vocab: u32,
}

/// The piece of a character that neither is a token nor appears in any
/// merge: it is never merged, and is spelled with byte tokens.
pub const UNKNOWN_PIECE: u32 = u32::MAX;

#[inline]
fn pair_key(left: u32, right: u32) -> u64 {
    ((left as u64) << 32) | right as u64
}

impl Merges {
    /// `token_id` finds a token by its text; `merges` are the
    /// "left right" lines of `tokenizer.ggml.merges`, best first; `bytes`
    /// is GPT-2's byte mapping for byte-level BPE, None where the symbols
    /// are UTF-8 characters.
    pub fn new(
        n_vocab: usize,
        token_id: impl Fn(&[u8]) -> Option<i32>,
        merges: &[String],
        bytes: Option<&ByteMap>,
    ) -> Merges {
        let n_vocab = n_vocab as u32;
        let mut extra: Map<Box<[u8]>, u32> = new_map(1024);
        let mut extra_texts: Vec<Box<[u8]>> = Vec::new();
        let mut piece_of = |text: &[u8], extra: &mut Map<Box<[u8]>, u32>| -> u32 {
            if let Some(id) = token_id(text) {
                return id as u32;
            }
            if let Some(&p) = extra.get(text) {
                return p;
            }
            let p = n_vocab + extra_texts.len() as u32;
            extra_texts.push(text.into());
            extra.insert(text.into(), p);
            p
        };
        let mut byte_piece = [UNKNOWN_PIECE; 256];
        if let Some(bytes) = bytes {
            for b in 0..=255u8 {
                byte_piece[b as usize] = piece_of(bytes.char_of(b), &mut extra);
            }
        }
        // llama.cpp splits a merge line at the first space after its first
        // byte (a line without one becomes a pair of empty strings, which can
        // never match); the first of duplicate lines keeps its rank.
        let split = |line: &str| -> Option<(usize, usize)> {
            let at = line.as_bytes().iter().skip(1).position(|&b| b == b' ')? + 1;
            Some((at, line.len()))
        };
        // Every merge result is a piece, so a rule whose halves come from
        // later (worse) rules still finds them. Where the symbols are UTF-8
        // characters, any one character can start as a symbol, so a half that
        // is a single character is a piece too.
        let mut results = Vec::with_capacity(merges.len());
        for line in merges {
            results.push(split(line).map(|(at, _)| {
                let bytes_of_line = line.as_bytes();
                if bytes.is_none() {
                    for half in [&bytes_of_line[..at], &bytes_of_line[at + 1..]] {
                        if !half.is_empty() && super::utf8::seq_len(half[0]) == half.len() {
                            piece_of(half, &mut extra);
                        }
                    }
                }
                let mut joined = Vec::with_capacity(line.len() - 1);
                joined.extend_from_slice(&bytes_of_line[..at]);
                joined.extend_from_slice(&bytes_of_line[at + 1..]);
                piece_of(&joined, &mut extra)
            }));
        }
        let lookup = |text: &[u8], extra: &Map<Box<[u8]>, u32>| -> Option<u32> {
            token_id(text).map(|id| id as u32).or_else(|| extra.get(text).copied())
        };
        let mut pairs: Map<u64, (u32, u32)> = new_map(merges.len());
        for (rank, (line, merged)) in merges.iter().zip(results).enumerate() {
            let Some(merged) = merged else { continue };
            let (at, _) = split(line).expect("split before");
            let (Some(left), Some(right)) =
                (lookup(&line.as_bytes()[..at], &extra), lookup(&line.as_bytes()[at + 1..], &extra))
            else {
                continue; // a half that no text can ever form
            };
            pairs.entry(pair_key(left, right)).or_insert((rank as u32, merged));
        }
        Merges { pairs, byte_piece, extra_texts, extra_pieces: extra, n_vocab }
    }

    /// The piece of a text that is not a token, if some merge makes it.
    pub fn extra_piece(&self, text: &[u8]) -> Option<u32> {
        self.extra_pieces.get(text).copied()
    }

    /// The text of a piece that is not a token.
    pub fn extra_text(&self, piece: u32) -> &[u8] {
        &self.extra_texts[(piece - self.n_vocab) as usize]
    }

    pub fn is_token(&self, piece: u32) -> bool {
        piece < self.n_vocab
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    piece: u32,
    prev: i32,
    next: i32,
    alive: bool,
}

/// Per-call scratch for merging, reused from word to word.
#[derive(Default)]
pub struct BpeSession {
    symbols: Vec<Symbol>,
    /// (rank, left index, left piece, right piece), smallest first.
    queue: BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
}

impl BpeSession {
    /// Merges one word of byte-level BPE (the pieces of its bytes);
    /// appends the resulting pieces to `out`.
    pub fn merge_bytes(&mut self, merges: &Merges, word: &[u8], out: &mut Vec<u32>) {
        self.merge(merges, word.iter().map(|&b| merges.byte_piece[b as usize]), out);
    }

    /// Merges one word given as the pieces of its symbols; appends the
    /// resulting pieces to `out`.
    pub fn merge(&mut self, merges: &Merges, symbols: impl Iterator<Item = u32>, out: &mut Vec<u32>) {
        self.symbols.clear();
        self.queue.clear();
        self.symbols.extend(symbols.enumerate().map(|(i, piece)| Symbol {
            piece,
            prev: i as i32 - 1,
            next: i as i32 + 1,
            alive: true,
        }));
        if let Some(last) = self.symbols.last_mut() {
            last.next = -1;
        }
        for i in 1..self.symbols.len() {
            self.push_pair(merges, i - 1, i);
        }
        while let Some(Reverse((_, left, left_piece, right_piece))) = self.queue.pop() {
            let left = left as usize;
            let l = self.symbols[left];
            if !l.alive || l.piece != left_piece || l.next < 0 {
                continue;
            }
            let right = l.next as usize;
            let r = self.symbols[right];
            if !r.alive || r.piece != right_piece {
                continue; // stale: one side has changed since it was queued
            }
            let (_, merged) = merges.pairs[&pair_key(left_piece, right_piece)];
            self.symbols[left].piece = merged;
            self.symbols[left].next = r.next;
            self.symbols[right].alive = false;
            if r.next >= 0 {
                self.symbols[r.next as usize].prev = left as i32;
            }
            if l.prev >= 0 {
                self.push_pair(merges, l.prev as usize, left);
            }
            if r.next >= 0 {
                self.push_pair(merges, left, r.next as usize);
            }
        }
        out.extend(self.symbols.iter().filter(|s| s.alive).map(|s| s.piece));
    }

    #[inline]
    fn push_pair(&mut self, merges: &Merges, left: usize, right: usize) {
        let (lp, rp) = (self.symbols[left].piece, self.symbols[right].piece);
        if let Some(&(rank, _)) = merges.pairs.get(&pair_key(lp, rp)) {
            self.queue.push(Reverse((rank, left as u32, lp, rp)));
        }
    }
}
