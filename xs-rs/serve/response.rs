//! The JSON that OpenAI's API (as llama-server writes it) answers with:
//! completions, their stream chunks, usage, log-probabilities.
use super::engine::Finished;
use crate::engine::generate::generation::TokenLogprob;
use crate::engine::model::tokenizer::Vocab;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// What `system_fingerprint` says.
pub const FINGERPRINT: &str = concat!("lugh-", env!("CARGO_PKG_VERSION"));

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A response id: the prefix and 32 hex digits, unique in this process.
pub fn new_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mixed = crate::engine::xxhash::xxh64(&[nanos.to_le_bytes(), u128::from(n).to_le_bytes()].concat());
    format!("{prefix}-{mixed:016x}{n:016x}")
}

/// The endpoint a completion answers: the objects and fields differ.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Text,
}

/// The fields every answer of one request shares.
pub struct Envelope {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    pub fn new(endpoint: Endpoint, model: &str) -> Envelope {
        let prefix = if endpoint == Endpoint::Chat { "chatcmpl" } else { "cmpl" };
        Envelope { endpoint, id: new_id(prefix), created: now(), model: model.to_string() }
    }

    fn wrap(&self, object: &str, choices: Value) -> Value {
        json!({
            "choices": choices,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "object": object,
            "id": self.id,
        })
    }

    /// The chunk that opens a chat stream: the role.
    pub fn role_chunk(&self) -> Value {
        let delta = json!({"role": "assistant", "content": null});
        self.wrap("chat.completion.chunk", json!([{"finish_reason": null, "index": 0, "delta": delta}]))
    }

    /// A stream chunk with `text`, and the log-probabilities of the tokens
    /// that released it (as llama-server sends them: in the chunk, not at
    /// the end).
    pub fn chunk(&self, text: &str, logprobs: Option<Value>) -> Value {
        let mut choice = match self.endpoint {
            Endpoint::Chat => json!({"finish_reason": null, "index": 0, "delta": {"content": text}}),
            Endpoint::Text => json!({"text": text, "index": 0, "logprobs": null, "finish_reason": null}),
        };
        if let Some(lp) = logprobs {
            choice["logprobs"] = lp;
        }
        let object = if self.endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" };
        self.wrap(object, json!([choice]))
    }

    /// A chat stream chunk with tool call `index` whole (OpenAI's
    /// `delta.tool_calls`, which clients join by index): its id, type, name
    /// and arguments.
    pub fn tool_call_chunk(&self, index: usize, call: &Value, logprobs: Option<Value>) -> Value {
        let mut call = call.clone();
        call["index"] = index.into();
        let mut choice = json!({"finish_reason": null, "index": 0, "delta": {"tool_calls": [call]}});
        if let Some(lp) = logprobs {
            choice["logprobs"] = lp;
        }
        self.wrap("chat.completion.chunk", json!([choice]))
    }

    /// The last chunk of a stream: the finish reason.
    pub fn final_chunk(&self, finish: &str) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => json!({"finish_reason": finish, "index": 0, "delta": {}}),
            Endpoint::Text => json!({"text": "", "index": 0, "logprobs": null, "finish_reason": finish}),
        };
        let object = if self.endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" };
        self.wrap(object, json!([choice]))
    }

    /// The chunk that carries the usage (`stream_options.include_usage`).
    pub fn usage_chunk(&self, done: &Finished) -> Value {
        let object = if self.endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" };
        let mut v = self.wrap(object, json!([]));
        v["usage"] = usage(done);
        v["timings"] = timings(done);
        v
    }

    /// The whole answer of a request that did not stream. `message` is the
    /// chat message (content, maybe tool_calls).
    pub fn complete(
        &self,
        message: Value,
        text: &str,
        finish: &str,
        done: &Finished,
        logprobs: Option<Value>,
    ) -> Value {
        let mut choice = match self.endpoint {
            Endpoint::Chat => json!({"finish_reason": finish, "index": 0, "message": message}),
            Endpoint::Text => json!({"text": text, "index": 0, "logprobs": null, "finish_reason": finish}),
        };
        if let Some(lp) = logprobs {
            choice["logprobs"] = lp;
        }
        let object = if self.endpoint == Endpoint::Chat { "chat.completion" } else { "text_completion" };
        let mut v = self.wrap(object, json!([choice]));
        v["usage"] = usage(done);
        v["timings"] = timings(done);
        v
    }
}

pub fn usage(done: &Finished) -> Value {
    json!({
        "completion_tokens": done.n_completion,
        "prompt_tokens": done.n_prompt,
        "total_tokens": done.n_completion + done.n_prompt,
        "prompt_tokens_details": {"cached_tokens": done.n_cached},
    })
}

fn timings(done: &Finished) -> Value {
    json!({
        "prompt_n": done.n_prompt,
        "prompt_ms": done.prompt_ms,
        "predicted_n": done.n_completion,
        "predicted_ms": done.predicted_ms,
    })
}

/// OpenAI's `logprobs.content`: each token's text, bytes, log-probability
/// and best alternatives.
pub fn logprobs(vocab: &Vocab, entries: &[TokenLogprob], top: usize) -> Value {
    let token = |id: i32, logprob: f32| {
        let bytes = vocab.piece(id, true).unwrap_or_default();
        json!({
            "id": id,
            "token": String::from_utf8_lossy(bytes),
            "bytes": bytes,
            "logprob": logprob,
        })
    };
    let content: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = token(e.id, e.logprob);
            v["top_logprobs"] = e.top.iter().take(top).map(|&(id, lp)| token(id, lp)).collect();
            v
        })
        .collect();
    json!({ "content": content })
}
