//! The tokenizer: llama.cpp's SPM and BPE tokenization, bit for bit.
//!
//! CONTRACT FIRST: the signatures below are what the rest of Lugh codes
//! against (generation's stop strings, EOG detection); issue #3 fills them in.
#![allow(dead_code, unused_variables)]
use super::gguf::Gguf;
use super::{Error, Result};

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

/// The immutable vocabulary of a model (shared through Arc).
pub struct Vocab {}

impl Vocab {
    /// Builds the vocabulary from a model's metadata. Errors: no vocabulary,
    /// unknown tokenizer model, unknown `tokenizer.ggml.pre` (named).
    pub fn from_gguf(gguf: &Gguf) -> Result<Vocab> {
        Err(Error::Argument("tokenizer not built yet".into()))
    }
    pub fn n_vocab(&self) -> usize {
        todo!()
    }
    /// `tokenizer.ggml.add_bos_token` (SmolLM2/Qwen false, Gemma true).
    pub fn add_bos_default(&self) -> bool {
        todo!()
    }
    pub fn bos_id(&self) -> Option<i32> {
        todo!()
    }
    pub fn eos_id(&self) -> Option<i32> {
        todo!()
    }
    /// End of generation: EOS, EOT and other EOG tokens.
    pub fn is_eog(&self, id: i32) -> bool {
        todo!()
    }
    /// Tokenizes text exactly like llama.cpp's llama_tokenize.
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<i32> {
        todo!()
    }
    /// The bytes a token stands for (byte tokens → their byte, `▁` → space,
    /// byte-level BPE unmapped). Control tokens give their text only when
    /// `special` is true. Errors for an id out of range.
    pub fn token_to_piece(&self, id: i32, special: bool) -> Result<Vec<u8>> {
        todo!()
    }
}
