//! What `lugh serve` was told: the address, the slots, the limits, and
//! what the endpoints say about the model.
use crate::engine::forward::settings::Overrides;
use crate::engine::generate::embedding::Pooling;
use std::time::Duration;

/// The server's settings (the session itself is made by the caller).
#[derive(Clone, Debug)]
pub struct Config {
    pub host: String,
    pub port: u16,
    /// Slots: requests served at once (`-np`), advancing together one graph
    /// a step (continuous batching).
    pub n_parallel: usize,
    /// `--deterministic`: every request's output is its solo, uncached
    /// result, whoever else is served (at a cost in throughput).
    pub deterministic: bool,
    /// Positions each slot's context holds (`-c` divided by `-np`, as
    /// llama-server divides it).
    pub n_ctx_slot: usize,
    /// `--api-key`: every endpoint but /health wants `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// `--embeddings`: /v1/embeddings answers (it says 501 otherwise, as
    /// llama-server does).
    pub embeddings: bool,
    /// `--pooling`: None means the model's own (mean when it names none).
    pub pooling: Option<Pooling>,
    /// The model's name in /v1/models and in responses: `-a/--alias`, else
    /// the model file as given with `-m`.
    pub model_id: String,
    /// The chat template's Jinja source (`--chat-template-file`, else the
    /// model's `tokenizer.chat_template`).
    pub chat_template: Option<String>,
    /// Adapters applied to every request (`--lora`).
    pub overrides: Overrides,
    /// `--timeout`: the longest a request may take, waiting included.
    pub timeout: Duration,
    /// Requests that may wait for a slot before more are refused with 503.
    pub max_queue: usize,
    /// The largest request body accepted (413 above it).
    pub max_body_bytes: usize,
}

impl Config {
    /// Defaults as llama-server's where it has them (`--timeout 600`).
    pub fn new(model_id: String, n_ctx_slot: usize) -> Config {
        Config {
            host: "127.0.0.1".into(),
            port: 8080,
            n_parallel: 1,
            deterministic: false,
            n_ctx_slot,
            api_key: None,
            embeddings: false,
            pooling: None,
            model_id,
            chat_template: None,
            overrides: Overrides::NONE,
            timeout: Duration::from_secs(600),
            max_queue: 64,
            max_body_bytes: 8 << 20,
        }
    }
}
