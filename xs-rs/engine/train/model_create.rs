//! Small random llama models (Lugh::Model->create): f32 weights drawn from
//! a seeded generator and a byte-level SentencePiece vocabulary, written as
//! GGUF, for training experiments and tests that need no download.
use crate::engine::model::gguf::{Array, Value};
use crate::engine::model::gguf_writer::GgufWriter;
use crate::engine::rng::rng_for_call;
use crate::engine::{Error, Result};
use std::path::Path;

/// The shape of a model to create (Lugh 0.12's defaults).
#[derive(Clone, Debug)]
pub struct RandomModel {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    pub n_ctx: usize,
    pub rope_freq_base: f32,
    pub norm_eps: f32,
    pub seed: Option<u64>,
}

impl Default for RandomModel {
    fn default() -> RandomModel {
        RandomModel {
            n_vocab: 256,
            n_embd: 64,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 128,
            n_ctx: 128,
            rope_freq_base: 10000.0,
            norm_eps: 1e-5,
            seed: None,
        }
    }
}

/// Special tokens ahead of the byte tokens.
const SPECIALS: [&str; 4] = ["<unk>", "<s>", "</s>", "<pad>"];
const LIMIT: usize = 1 << 20;

impl RandomModel {
    fn check(&self) -> Result<()> {
        let sizes = [
            ("n_vocab", self.n_vocab),
            ("n_embd", self.n_embd),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_head_kv", self.n_head_kv),
            ("n_ff", self.n_ff),
            ("n_ctx", self.n_ctx),
        ];
        if let Some((name, v)) = sizes.iter().find(|(_, v)| !(1..=LIMIT).contains(v)) {
            return Err(Error::Argument(format!("{name} must be between 1 and {LIMIT}, got {v}")));
        }
        if self.n_vocab < SPECIALS.len() + 1 {
            return Err(Error::Argument(format!(
                "n_vocab must be at least 5 (4 special tokens), got {}",
                self.n_vocab
            )));
        }
        if self.n_embd % self.n_head != 0 {
            return Err(Error::Argument(format!(
                "n_embd ({}) must be divisible by n_head ({})",
                self.n_embd, self.n_head
            )));
        }
        if self.n_head % self.n_head_kv != 0 {
            return Err(Error::Argument(format!(
                "n_head ({}) must be a multiple of n_head_kv ({})",
                self.n_head, self.n_head_kv
            )));
        }
        if (self.n_embd / self.n_head) % 2 != 0 {
            return Err(Error::Argument(format!(
                "the head size n_embd/n_head ({}) must be even for RoPE",
                self.n_embd / self.n_head
            )));
        }
        let weights = self.n_embd * (2 * self.n_vocab + self.n_layer * (2 * self.n_embd + 3 * self.n_ff) + 4);
        if weights > 1 << 30 {
            return Err(Error::Argument(format!("the model would have {weights} weights; create makes at most 2^30")));
        }
        for (name, v) in [("rope_freq_base", self.rope_freq_base), ("norm_eps", self.norm_eps)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::Argument(format!("{name} must be a positive number, got {v}")));
            }
        }
        Ok(())
    }

    /// Writes the model to `path` as a GGUF file (architecture llama).
    pub fn write(&self, path: &Path) -> Result<()> {
        self.check()?;
        let (n_embd, n_ff, n_vocab) = (self.n_embd as u64, self.n_ff as u64, self.n_vocab as u64);
        let head_dim = self.n_embd / self.n_head;
        let kv_dim = (head_dim * self.n_head_kv) as u64;
        let mut w = GgufWriter::new();
        let u32_of = |v: usize| Value::U32(v as u32);
        w.kv("general.architecture", Value::Str("llama".into()));
        w.kv("general.name", Value::Str("lugh-created-model".into()));
        w.kv("general.file_type", Value::U32(0));
        w.kv("llama.vocab_size", u32_of(self.n_vocab));
        w.kv("llama.context_length", u32_of(self.n_ctx));
        w.kv("llama.embedding_length", u32_of(self.n_embd));
        w.kv("llama.block_count", u32_of(self.n_layer));
        w.kv("llama.feed_forward_length", u32_of(self.n_ff));
        w.kv("llama.attention.head_count", u32_of(self.n_head));
        w.kv("llama.attention.head_count_kv", u32_of(self.n_head_kv));
        w.kv("llama.rope.dimension_count", u32_of(head_dim));
        w.kv("llama.rope.freq_base", Value::F32(self.rope_freq_base));
        w.kv("llama.attention.layer_norm_rms_epsilon", Value::F32(self.norm_eps));
        let (tokens, scores, types) = vocabulary(self.n_vocab);
        w.kv("tokenizer.ggml.model", Value::Str("llama".into()));
        w.kv("tokenizer.ggml.tokens", Value::Array(Array::Str(tokens)));
        w.kv("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
        w.kv("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        w.kv("tokenizer.ggml.unknown_token_id", Value::U32(0));
        w.kv("tokenizer.ggml.bos_token_id", Value::U32(1));
        w.kv("tokenizer.ggml.eos_token_id", Value::U32(2));
        w.kv("tokenizer.ggml.padding_token_id", Value::U32(3));

        let mut rng = rng_for_call(self.seed);
        // GPT-2's initialisation scale (std 0.02), drawn uniform
        let bound = 0.02 * 3f64.sqrt();
        let mut random =
            |n: u64| -> Vec<f32> { (0..n).map(|_| ((2.0 * rng.next_f64() - 1.0) * bound) as f32).collect() };
        let ones = |n: u64| vec![1.0f32; n as usize];
        w.tensor_f32("token_embd.weight", &[n_embd, n_vocab], &random(n_embd * n_vocab));
        for il in 0..self.n_layer {
            let name = |kind: &str| format!("blk.{il}.{kind}.weight");
            w.tensor_f32(&name("attn_norm"), &[n_embd], &ones(n_embd));
            w.tensor_f32(&name("attn_q"), &[n_embd, n_embd], &random(n_embd * n_embd));
            w.tensor_f32(&name("attn_k"), &[n_embd, kv_dim], &random(n_embd * kv_dim));
            w.tensor_f32(&name("attn_v"), &[n_embd, kv_dim], &random(n_embd * kv_dim));
            w.tensor_f32(&name("attn_output"), &[n_embd, n_embd], &random(n_embd * n_embd));
            w.tensor_f32(&name("ffn_norm"), &[n_embd], &ones(n_embd));
            w.tensor_f32(&name("ffn_gate"), &[n_embd, n_ff], &random(n_embd * n_ff));
            w.tensor_f32(&name("ffn_up"), &[n_embd, n_ff], &random(n_embd * n_ff));
            w.tensor_f32(&name("ffn_down"), &[n_ff, n_embd], &random(n_ff * n_embd));
        }
        w.tensor_f32("output_norm.weight", &[n_embd], &ones(n_embd));
        w.tensor_f32("output.weight", &[n_embd, n_vocab], &random(n_embd * n_vocab));
        w.write(path)
    }
}

/// The four special tokens, the byte tokens <0x00>... (as many as fit), and
/// unused filler tokens beyond 260.
fn vocabulary(n_vocab: usize) -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    let mut types = vec![2, 3, 3, 3];
    for i in SPECIALS.len()..n_vocab {
        let byte = i - SPECIALS.len();
        if byte < 256 {
            tokens.push(format!("<0x{byte:02X}>"));
            types.push(6);
        } else {
            tokens.push(format!("<unused{}>", byte - 256));
            types.push(5);
        }
    }
    let scores = (0..n_vocab).map(|i| if i < SPECIALS.len() { 0.0 } else { -(i as f32) }).collect();
    (tokens, scores, types)
}
