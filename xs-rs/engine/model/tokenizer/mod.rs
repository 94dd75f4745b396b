//! The tokenizer: llama.cpp's SPM and BPE tokenization, bit for bit.
//!
//! `Vocab` is the immutable data (token texts, scores, attributes, merge
//! ranks, compiled pre-tokenizer), built once per model and shared through
//! `Arc`; each `encode` call keeps its scratch state in local sessions, so
//! one vocabulary serves many threads.
//!
//! The pipeline is llama.cpp's `llama_vocab::impl::tokenize`: special tokens
//! are split out first (`special`), then each piece of text goes through SPM
//! (`spm`), pre-tokenizer + byte-level BPE (`pretokenize`, `bpe`), or
//! BERT's WordPiece (`wpm`).
mod bpe;
mod hash;
mod load;
mod nfd_table;
mod pretokenize;
mod special;
mod spm;
#[cfg(test)]
mod tests;
pub mod utf8;
mod wpm;

use super::gguf::Gguf;
use crate::engine::{Error, Result};
use hash::{new_map, Map};
use special::{Fragment, SpecialTokens};

/// Token types, as in GGUF's tokenizer.ggml.token_type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    pub fn name(self) -> &'static str {
        match self {
            TokenType::Undefined => "undefined",
            TokenType::Normal => "normal",
            TokenType::Unknown => "unknown",
            TokenType::Control => "control",
            TokenType::UserDefined => "user_defined",
            TokenType::Unused => "unused",
            TokenType::Byte => "byte",
        }
    }
}

/// llama.cpp's token attribute bits (`llama_token_attr`).
mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const LSTRIP: u16 = 1 << 7;
    pub const RSTRIP: u16 = 1 << 8;
}

/// Which algorithm the vocabulary uses.
enum Kind {
    /// SentencePiece (`tokenizer.ggml.model = llama`).
    Spm {
        add_space_prefix: bool,
        byte_tokens: Box<[Option<i32>; 256]>,
        /// Characters that some token has right before a `▁` (other than in
        /// a leading run of `▁`); None when there are too many to bother.
        joined_before_space: Option<Vec<Box<[u8]>>>,
    },
    /// BPE (`gpt2`: byte-level; `gemma4`: over UTF-8 characters).
    Bpe(Box<BpeModel>),
    /// WordPiece (`bert`).
    Wpm(Box<wpm::WordPiece>),
}

struct BpeModel {
    pre_name: String,
    pre: pretokenize::PreTokenizer,
    merges: bpe::Merges,
    bytes: pretokenize::ByteMap,
    ignore_merges: bool,
    /// The pre-tokenizer's settings of the same names (`PreSpec`).
    byte_encode: bool,
    escape_spaces: bool,
    whole_newline_words: bool,
    /// The `<0xAB>` tokens, which spell unknown symbols where the symbols
    /// are UTF-8 characters.
    byte_tokens: Box<[Option<i32>; 256]>,
}

/// The special token ids a model declares (or llama.cpp infers).
#[derive(Clone, Copy, Debug, Default)]
pub struct SpecialIds {
    pub bos: Option<i32>,
    pub eos: Option<i32>,
    pub eot: Option<i32>,
    pub eom: Option<i32>,
    pub unk: Option<i32>,
    pub sep: Option<i32>,
    pub pad: Option<i32>,
    pub mask: Option<i32>,
}

/// Strings stored end to end, addressed by index.
#[derive(Default)]
struct Texts {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Texts {
    fn push(&mut self, text: &[u8]) {
        self.bytes.extend_from_slice(text);
        self.ends.push(self.bytes.len() as u32);
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }
}

/// The immutable vocabulary of a model (shared through Arc).
pub struct Vocab {
    kind: Kind,
    /// The tokenizer.ggml.model value.
    model_name: String,
    texts: Texts,
    scores: Vec<f32>,
    attrs: Vec<u16>,
    ids: IdMap,
    /// What each token prints as when control tokens are rendered.
    pieces: Texts,
    special_tokens: SpecialTokens,
    special_ids: SpecialIds,
    /// End-of-generation tokens, sorted.
    eog: Vec<i32>,
    add_bos: bool,
    add_eos: bool,
    /// `tokenizer.ggml.suppress_tokens`, which sampling never picks.
    suppress: Vec<i32>,
}

/// Options of one `encode` call.
#[derive(Clone, Copy, Debug, Default)]
pub struct EncodeOptions {
    pub add_bos: bool,
    pub add_eos: bool,
    pub parse_special: bool,
}

impl Vocab {
    /// Builds the vocabulary from a model's metadata. Errors: no vocabulary,
    /// unknown tokenizer model, unknown `tokenizer.ggml.pre` (named).
    pub fn from_gguf(gguf: &Gguf) -> Result<Vocab> {
        load::build(gguf)
    }

    pub fn n_vocab(&self) -> usize {
        self.attrs.len()
    }

    /// The ids of `tokenizer.ggml.suppress_tokens` within the vocabulary.
    pub fn suppress_tokens(&self) -> &[i32] {
        &self.suppress
    }

    /// `tokenizer.ggml.add_bos_token` (SmolLM2/Qwen false, Gemma true).
    pub fn add_bos_default(&self) -> bool {
        self.add_bos
    }

    /// `tokenizer.ggml.add_eos_token`.
    pub fn add_eos_default(&self) -> bool {
        self.add_eos
    }

    pub fn bos_id(&self) -> Option<i32> {
        self.special_ids.bos
    }

    /// The token that adding special tokens puts at the end: SEP for
    /// WordPiece (as llama.cpp), else EOS.
    pub fn closing_id(&self) -> Option<i32> {
        match self.kind {
            Kind::Wpm(_) => self.special_ids.sep,
            _ => self.special_ids.eos,
        }
    }

    pub fn special_ids(&self) -> SpecialIds {
        self.special_ids
    }

    /// End of generation: EOS, EOT and other EOG tokens.
    pub fn is_eog(&self, id: i32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> &[i32] {
        &self.eog
    }

    /// "spm", "bpe" or "wpm".
    pub fn algorithm(&self) -> &'static str {
        match self.kind {
            Kind::Spm { .. } => "spm",
            Kind::Bpe(_) => "bpe",
            Kind::Wpm(_) => "wpm",
        }
    }

    /// The tokenizer.ggml.model value ("llama", "gpt2").
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// The pre-tokenizer's name (BPE only).
    pub fn pre_name(&self) -> Option<&str> {
        match &self.kind {
            Kind::Bpe(m) => Some(&m.pre_name),
            Kind::Spm { .. } | Kind::Wpm(_) => None,
        }
    }

    /// Whether decoding drops the space SPM encoding put in front of text.
    pub fn adds_space_prefix(&self) -> bool {
        matches!(self.kind, Kind::Spm { add_space_prefix: true, .. })
    }

    fn check_id(&self, id: i32) -> Result<usize> {
        if id >= 0 && (id as usize) < self.n_vocab() {
            Ok(id as usize)
        } else {
            Err(Error::TokenOutOfRange { pos: None, id: id as i64, n_vocab: self.n_vocab() })
        }
    }

    /// The token's text as stored in the model (`▁Hello`, `ĠHello`, `<s>`).
    pub fn token_text(&self, id: i32) -> Result<&[u8]> {
        Ok(self.texts.get(self.check_id(id)?))
    }

    /// The token whose stored text is exactly `text`.
    pub fn text_to_token(&self, text: &[u8]) -> Option<i32> {
        self.ids.get(text).copied()
    }

    /// The token's type after llama.cpp's adjustments (e.g. end-of-turn
    /// tokens that a file marks as normal are treated as control tokens).
    pub fn token_type(&self, id: i32) -> Result<TokenType> {
        let a = self.attrs[self.check_id(id)?];
        Ok(if a & attr::BYTE != 0 {
            TokenType::Byte
        } else if a & attr::CONTROL != 0 {
            TokenType::Control
        } else if a & attr::USER_DEFINED != 0 {
            TokenType::UserDefined
        } else if a & attr::UNKNOWN != 0 {
            TokenType::Unknown
        } else if a & attr::UNUSED != 0 {
            TokenType::Unused
        } else if a & attr::NORMAL != 0 {
            TokenType::Normal
        } else {
            TokenType::Undefined
        })
    }

    /// Control and unknown tokens: empty text unless rendered as special.
    fn is_hidden(&self, id: usize) -> bool {
        self.attrs[id] & (attr::CONTROL | attr::UNKNOWN) != 0
    }

    /// Tokenizes text exactly like llama.cpp's llama_tokenize.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<i32> {
        self.encode_bytes(text.as_bytes(), EncodeOptions { add_bos, add_eos: false, parse_special })
    }

    /// Tokenizes UTF-8 text given as bytes (invalid sequences are read the
    /// way llama.cpp reads them). A BOS or EOS asked for but missing from the
    /// vocabulary is left out.
    pub fn encode_bytes(&self, text: &[u8], options: EncodeOptions) -> Vec<i32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if options.add_bos {
            out.extend(self.special_ids.bos);
        }
        let mut fragments = Vec::new();
        self.special_tokens.partition(text, options.parse_special, &mut fragments);
        match &self.kind {
            Kind::Spm { add_space_prefix, byte_tokens, joined_before_space } => {
                let lookup = SpmLookup { vocab: self, byte_tokens };
                let mut state = SpmState::default();
                let mut escaped = Vec::new();
                // llama.cpp puts a space before the text and after every
                // special token (when the vocabulary asks for the prefix).
                let mut after_special = true;
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                        Fragment::Text { start, end } => {
                            escaped.clear();
                            if *add_space_prefix && after_special {
                                escaped.extend_from_slice(SPACE_MARK);
                            }
                            escape_spaces_onto(&text[start..end], &mut escaped);
                            spm_fragment(&lookup, joined_before_space.as_deref(), &escaped, &mut state, &mut out);
                            after_special = false;
                        }
                    }
                }
            }
            Kind::Bpe(model) => {
                let mut state = BpeState::default();
                let mut escaped = Vec::new();
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text { start, end } if model.escape_spaces => {
                            escape_spaces(&text[start..end], &mut escaped);
                            self.bpe_fragment(model, &escaped, &mut state, &mut out)
                        }
                        Fragment::Text { start, end } => {
                            self.bpe_fragment(model, &text[start..end], &mut state, &mut out)
                        }
                    }
                }
            }
            Kind::Wpm(model) => {
                let mut state = wpm::WpmState::default();
                let lookup = |t: &[u8]| self.ids.get(t).copied();
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text { start, end } => {
                            model.tokenize(&text[start..end], lookup, self.special_ids.unk, &mut state, &mut out)
                        }
                    }
                }
            }
        }
        if options.add_eos {
            out.extend(self.closing_id());
        }
        out
    }

    fn bpe_fragment(&self, model: &BpeModel, raw: &[u8], state: &mut BpeState, out: &mut Vec<i32>) {
        let normalized = utf8::normalize(raw);
        let view = utf8::regex_view(&normalized);
        model.pre.split(&view, &mut state.words, &mut state.scratch);
        let text: &[u8] = &normalized;
        let words = std::mem::take(&mut state.words);
        for &(start, end) in &words {
            let word = &text[start..end];
            if let Some(&(from, to)) = state.cache.get(word) {
                out.extend_from_slice(&state.cached[from as usize..to as usize]);
                continue;
            }
            let from = out.len();
            self.bpe_word(model, word, state, out);
            if state.cache.len() < 1 << 16 {
                let at = state.cached.len();
                state.cached.extend_from_slice(&out[from..]);
                state.cache.insert(word.into(), (at as u32, state.cached.len() as u32));
            }
        }
        state.words = words;
    }

    fn bpe_word(&self, model: &BpeModel, word: &[u8], state: &mut BpeState, out: &mut Vec<i32>) {
        // The word as the vocabulary spells it.
        let spelled: &[u8] = if model.byte_encode {
            state.mapped.clear();
            for &b in word {
                state.mapped.extend_from_slice(model.bytes.char_of(b));
            }
            &state.mapped
        } else {
            word
        };
        let whole = model.ignore_merges || (model.whole_newline_words && word.iter().all(|&b| b == b'\n'));
        if whole {
            if let Some(&id) = self.ids.get(spelled) {
                out.push(id);
                return;
            }
        }
        state.pieces.clear();
        if model.byte_encode {
            state.session.merge_bytes(&model.merges, word, &mut state.pieces);
        } else {
            let piece_of = |c: &[u8]| {
                self.ids
                    .get(c)
                    .map(|&id| id as u32)
                    .or_else(|| model.merges.extra_piece(c))
                    .unwrap_or(bpe::UNKNOWN_PIECE)
            };
            state.session.merge(&model.merges, Utf8Chars(word).map(piece_of), &mut state.pieces);
        }
        // Where a symbol is not a token, llama.cpp spells it byte by byte
        // with one-byte tokens (byte-level: the mapped characters; else the
        // `<0xAB>` tokens) and drops bytes that have none.
        let mut at = 0; // offset in `word` of the current piece
        for &piece in &state.pieces {
            let len = if piece == bpe::UNKNOWN_PIECE {
                utf8::seq_len(word[at]).min(word.len() - at)
            } else if model.merges.is_token(piece) {
                self.texts.get(piece as usize).len()
            } else {
                model.merges.extra_text(piece).len()
            };
            if model.merges.is_token(piece) {
                out.push(piece as i32);
            } else if model.byte_encode {
                for &b in model.merges.extra_text(piece) {
                    if let Some(&id) = self.ids.get(&[b][..]) {
                        out.push(id);
                    }
                }
            } else {
                out.extend(word[at..at + len].iter().filter_map(|&b| model.byte_tokens[b as usize]));
            }
            at += len;
        }
    }

    /// The bytes a token stands for (byte tokens → their byte, `▁` → space,
    /// byte-level BPE unmapped). Control tokens give their text only when
    /// `special` is true. Errors for an id out of range.
    #[cfg(test)]
    pub fn token_to_piece(&self, id: i32, special: bool) -> Result<Vec<u8>> {
        Ok(self.piece(id, special)?.to_vec())
    }

    /// As `token_to_piece`, borrowed.
    pub fn piece(&self, id: i32, special: bool) -> Result<&[u8]> {
        let i = self.check_id(id)?;
        Ok(if !special && self.is_hidden(i) { &[] } else { self.pieces.get(i) })
    }

    /// The bytes of a token sequence. For vocabularies that put a space in
    /// front of text (SPM's add_space_prefix), one leading space is dropped
    /// from the text at the start and after each control, user-defined or
    /// unknown token: the spaces that encoding inserted. Errors name the
    /// first id out of range and its position.
    pub fn decode(&self, ids: &[i32], special: bool) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        let mut decoder = self.piece_decoder(special);
        for (pos, &id) in ids.iter().enumerate() {
            let piece = decoder.next(self, id).map_err(|e| match e {
                Error::TokenOutOfRange { id, n_vocab, .. } => Error::TokenOutOfRange { pos: Some(pos), id, n_vocab },
                other => other,
            })?;
            out.extend_from_slice(piece);
        }
        Ok(out)
    }

    /// A token-by-token decoder applying the same rules as `decode`.
    pub fn piece_decoder(&self, special: bool) -> PieceDecoder {
        PieceDecoder { special, strip_space: self.adds_space_prefix() }
    }
}

/// Decoding state carried from token to token (see `Vocab::decode`).
#[derive(Clone, Copy, Debug)]
pub struct PieceDecoder {
    special: bool,
    /// The next text token loses one leading space.
    strip_space: bool,
}

impl PieceDecoder {
    /// Whether control tokens are rendered.
    pub fn special(&self) -> bool {
        self.special
    }

    /// The bytes of the next token.
    pub fn next<'v>(&mut self, vocab: &'v Vocab, id: i32) -> Result<&'v [u8]> {
        let mut piece = vocab.piece(id, self.special)?;
        if !vocab.adds_space_prefix() {
            return Ok(piece);
        }
        let a = vocab.attrs[id as usize];
        if a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
            self.strip_space = true;
        } else {
            if self.strip_space {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            self.strip_space = false;
        }
        Ok(piece)
    }
}

/// SentencePiece's escaped space.
const SPACE_MARK: &[u8] = "▁".as_bytes();

/// `text` with every space written as `▁`, into `out` (cleared first).
fn escape_spaces(text: &[u8], out: &mut Vec<u8>) {
    out.clear();
    escape_spaces_onto(text, out);
}

/// Appends `text` with every space written as `▁`.
fn escape_spaces_onto(text: &[u8], out: &mut Vec<u8>) {
    for &b in text {
        if b == b' ' {
            out.extend_from_slice(SPACE_MARK);
        } else {
            out.push(b);
        }
    }
}

/// The UTF-8 characters of normalized text, as llama.cpp cuts symbols: the
/// lead byte gives the length (cut short at the end).
struct Utf8Chars<'a>(&'a [u8]);

impl<'a> Iterator for Utf8Chars<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let first = *self.0.first()?;
        let (c, rest) = self.0.split_at(utf8::seq_len(first).min(self.0.len()));
        self.0 = rest;
        Some(c)
    }
}

/// Scratch for SPM, reused across the segments of one call.
#[derive(Default)]
struct SpmState {
    session: spm::SpmSession,
    /// Segments already tokenized in this call → their ids in `cached`.
    cache: Map<Box<[u8]>, (u32, u32)>,
    cached: Vec<i32>,
}

/// Tokenizes escaped SPM text. A merge can only join two symbols if some
/// token contains both; so where a `▁` follows a character that no token
/// has before a `▁`, no merge will ever cross, and the text is cut there
/// (at symbol boundaries, as the merger would see them). The pieces are
/// tokenized alone: the same result, with small queues and a cache for
/// repeated words.
fn spm_fragment(
    lookup: &SpmLookup,
    joined_before_space: Option<&[Box<[u8]>]>,
    text: &[u8],
    state: &mut SpmState,
    out: &mut Vec<i32>,
) {
    let Some(joined) = joined_before_space else {
        state.session.tokenize(lookup, text, out);
        return;
    };
    let mut segment_start = 0;
    let mut prev: &[u8] = &[];
    let mut i = 0;
    while i < text.len() {
        let len = utf8::seq_len(text[i]).min(text.len() - i);
        let symbol = &text[i..i + len];
        if symbol == SPACE_MARK && i > segment_start && prev != SPACE_MARK && !joined.iter().any(|j| **j == *prev) {
            spm_segment(lookup, &text[segment_start..i], state, out);
            segment_start = i;
        }
        prev = symbol;
        i += len;
    }
    spm_segment(lookup, &text[segment_start..], state, out);
}

fn spm_segment(lookup: &SpmLookup, segment: &[u8], state: &mut SpmState, out: &mut Vec<i32>) {
    if segment.is_empty() {
        return;
    }
    if let Some(&(from, to)) = state.cache.get(segment) {
        out.extend_from_slice(&state.cached[from as usize..to as usize]);
        return;
    }
    let from = out.len();
    state.session.tokenize(lookup, segment, out);
    if state.cache.len() < 1 << 16 {
        let at = state.cached.len();
        state.cached.extend_from_slice(&out[from..]);
        state.cache.insert(segment.into(), (at as u32, state.cached.len() as u32));
    }
}

/// Scratch for BPE, reused across the words of one call.
#[derive(Default)]
struct BpeState {
    words: Vec<(usize, usize)>,
    scratch: Vec<(usize, usize)>,
    session: bpe::BpeSession,
    pieces: Vec<u32>,
    mapped: Vec<u8>,
    /// Words already tokenized in this call → their ids in `cached`.
    cache: Map<Box<[u8]>, (u32, u32)>,
    cached: Vec<i32>,
}

struct SpmLookup<'a> {
    vocab: &'a Vocab,
    byte_tokens: &'a [Option<i32>; 256],
}

impl spm::SpmVocab for SpmLookup<'_> {
    #[inline]
    fn spm_token(&self, text: &[u8]) -> Option<(i32, f32)> {
        self.vocab.ids.get(text).map(|&id| (id, self.vocab.scores[id as usize]))
    }

    #[inline]
    fn byte_token(&self, byte: u8) -> Option<i32> {
        self.byte_tokens[byte as usize]
    }
}

/// Token text to id.
type IdMap = Map<Box<[u8]>, i32>;

/// Used by the loader: an empty map sized for the vocabulary.
fn id_map(n: usize) -> IdMap {
    new_map(n)
}
