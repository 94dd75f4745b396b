//! Ollama's API over the same engine path as /v1/chat/completions:
//! GET /api/tags, GET /api/version, POST /api/chat, POST /api/generate.
//! Replies stream as NDJSON (one JSON object a line) unless `"stream":
//! false`; the sampling settings come in `options` (Ollama's names);
//! errors are Ollama's `{"error": "..."}`.
use super::super::engine::{Event, Finished};
use super::super::error::ApiError;
use super::super::request::{self, wrong_type, Fields};
use super::super::response::{Endpoint, Envelope};
use super::super::{sse, tools, App};
use super::generate::{submit, Prepared};
use crate::engine::model::tokenizer::EncodeOptions;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;

/// The Ollama version /api/version reports: the API this follows.
const OLLAMA_VERSION: &str = "0.12.0";

/// Ollama's `options` that map onto the request fields
/// [`request::generation`] reads (Ollama name, field name).
const SAMPLING_OPTIONS: &[(&str, &str)] = &[
    ("temperature", "temperature"),
    ("top_k", "top_k"),
    ("top_p", "top_p"),
    ("min_p", "min_p"),
    ("typical_p", "typical_p"),
    ("repeat_penalty", "repeat_penalty"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
    ("repeat_last_n", "repeat_last_n"),
    ("mirostat", "mirostat"),
    ("mirostat_tau", "mirostat_tau"),
    ("mirostat_eta", "mirostat_eta"),
    ("seed", "seed"),
    ("stop", "stop"),
    ("num_predict", "n_predict"),
];

/// Ollama's `options` about loading and running the model: set when the
/// server starts here, so a request's are ignored (as Ollama ignores those
/// it cannot change for a loaded model).
const RUNNER_OPTIONS: &[&str] = &[
    "numa",
    "num_ctx",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "low_vram",
    "f16_kv",
    "logits_all",
    "vocab_only",
    "use_mmap",
    "use_mlock",
    "num_thread",
    "num_keep",
    "penalize_newline",
    "tfs_z",
];

/// Which of Ollama's two generation endpoints answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Generate,
}

/// An error as Ollama writes it.
fn ollama_error(e: ApiError) -> Response {
    let mut response = (e.status, sse::json_body(&json!({ "error": e.message }))).into_response();
    if let Some(seconds) = e.retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The time now as RFC 3339 with nanoseconds, in UTC (Ollama's `created_at`).
fn created_at() -> String {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    rfc3339(since.as_secs() as i64, since.subsec_nanos())
}

/// A time (seconds and nanoseconds since the epoch) as RFC 3339 in UTC.
pub fn rfc3339(seconds: i64, nanos: u32) -> String {
    let (year, month, day) = crate::engine::generate::chat_template::civil_from_days(seconds.div_euclid(86_400));
    let s = seconds.rem_euclid(86_400);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z", s / 3600, s / 60 % 60, s % 60)
}

pub async fn version() -> Response {
    sse::json_body(&json!({ "version": OLLAMA_VERSION }))
}

/// The one model served, in /api/tags' shape.
pub async fn tags(State(app): State<Arc<App>>) -> Response {
    let id = &app.config.model_id;
    let meta = &app.meta;
    let n_params = meta["n_params"].as_f64().unwrap_or(0.0);
    let parameter_size =
        if n_params >= 1e9 { format!("{:.1}B", n_params / 1e9) } else { format!("{:.0}M", n_params / 1e6) };
    let family = app.details["architecture"].clone();
    sse::json_body(&json!({
        "models": [{
            "name": id,
            "model": id,
            "modified_at": app.details["modified_at"],
            "size": app.details["file_size"],
            "digest": "",
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": family,
                "families": [family],
                "parameter_size": parameter_size,
                "quantization_level": app.details["file_type"],
            },
        }],
    }))
}

pub async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    run(app, headers, body, Api::Chat).await
}

pub async fn generate(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    run(app, headers, body, Api::Generate).await
}

async fn run(app: Arc<App>, headers: HeaderMap, body: Body, api: Api) -> Response {
    let started = Instant::now();
    let mut p = match prepare(&app, &headers, body, api).await {
        Ok(p) => p,
        Err(e) => return ollama_error(e),
    };
    let events = match submit(&app, &mut p) {
        Ok(events) => events,
        Err(e) => return ollama_error(e),
    };
    let reply = Reply { app, p, api, started, text: String::new() };
    if reply.p.generation.stream {
        stream(reply, events)
    } else {
        whole(reply, events).await
    }
}

/// The request as the engine takes it: `options` and `format` read into
/// the fields of /v1/chat/completions, the prompt through the chat
/// template (/api/generate: `system` and `prompt` as two messages, or the
/// prompt as it is with `raw`).
async fn prepare(app: &App, headers: &HeaderMap, body: Body, api: Api) -> Result<Prepared, ApiError> {
    let f = super::read_json(app, headers, body).await?;
    super::check_model(app, &f)?;
    let mut generation = request::generation(&Fields(settings(&f)?)).map_err(ollama_names)?;
    // Ollama streams unless told not to
    generation.stream = f.bool("stream")?.unwrap_or(true);
    let tools = match f.get("tools") {
        None => None,
        Some(v @ Value::Array(_)) if api == Api::Chat => Some(v.clone()),
        Some(other) => return Err(wrong_type("tools", "an array", other)),
    };
    let prompt = match api {
        Api::Chat => super::chat::chat_prompt(app, &super::chat::messages(&f)?, tools.as_ref())?,
        Api::Generate => {
            let text = f.string("prompt")?.unwrap_or_default();
            if text.is_empty() {
                return Err(ApiError::bad_request("'prompt' is required"));
            }
            if f.bool("raw")?.unwrap_or(false) {
                let options =
                    EncodeOptions { add_bos: app.vocab.add_bos_default(), add_eos: false, parse_special: true };
                app.vocab.encode_bytes(text.as_bytes(), options)
            } else {
                let mut messages = Vec::new();
                if let Some(system) = f.string("system")? {
                    messages.push(json!({"role": "system", "content": system}));
                }
                messages.push(json!({"role": "user", "content": text}));
                super::chat::chat_prompt(app, &Value::Array(messages), None)?
            }
        }
    };
    Ok(Prepared {
        envelope: Envelope::new(Endpoint::Chat, &app.config.model_id),
        prompt,
        generation,
        top_logprobs: None,
        tools: tools.is_some(),
    })
}

/// The generation fields of a request's `options` and `format`.
fn settings(f: &Fields) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    match f.get("options") {
        None => {}
        Some(Value::Object(options)) => {
            for (name, value) in options {
                if let Some(&(_, field)) = SAMPLING_OPTIONS.iter().find(|(o, _)| o == name) {
                    // -2 is Ollama's "until the context is full": no limit here either
                    let value =
                        if field == "n_predict" && value.as_i64() == Some(-2) { json!(-1) } else { value.clone() };
                    out.insert(field.to_string(), value);
                } else if !RUNNER_OPTIONS.contains(&name.as_str()) {
                    let known: Vec<&str> =
                        SAMPLING_OPTIONS.iter().map(|(o, _)| *o).chain(RUNNER_OPTIONS.iter().copied()).collect();
                    return Err(ApiError::bad_request(format!(
                        "unknown option '{name}' (options: {})",
                        known.join(", ")
                    )));
                }
            }
        }
        Some(other) => return Err(wrong_type("options", "an object", other)),
    }
    match f.get("format") {
        None => {}
        Some(Value::String(s)) if s == "json" => {
            out.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some(Value::String(s)) if s.is_empty() => {}
        Some(schema @ Value::Object(_)) => {
            out.insert("response_format".into(), json!({"type": "json_object", "schema": schema}));
        }
        Some(other) => return Err(wrong_type("format", "\"json\" or a JSON schema (an object)", other)),
    }
    Ok(out)
}

/// An error about the settings [`settings`] made, naming Ollama's options
/// rather than the fields they became.
fn ollama_names(mut e: ApiError) -> ApiError {
    for (option, field) in SAMPLING_OPTIONS {
        e.message = e.message.replace(&format!("'{field}'"), &format!("'options.{option}'"));
    }
    e
}

/// One reply being written.
struct Reply {
    app: Arc<App>,
    p: Prepared,
    api: Api,
    started: Instant,
    /// The text so far (tool calls are parsed from it at the end).
    text: String,
}

impl Reply {
    /// A line of the reply carrying `piece` (not the last).
    fn piece(&self, piece: &str) -> Value {
        let mut v = json!({ "model": self.app.config.model_id, "created_at": created_at() });
        match self.api {
            Api::Chat => v["message"] = json!({"role": "assistant", "content": piece}),
            Api::Generate => v["response"] = json!(piece),
        }
        v["done"] = json!(false);
        v
    }

    /// The last line: the counts and durations (nanoseconds), and with
    /// `whole` the whole text (a reply that did not stream).
    fn last(&self, done: &Finished, whole: bool) -> Value {
        let text = if whole { self.text.as_str() } else { "" };
        let mut v = self.piece(text);
        if self.api == Api::Chat && self.p.tools {
            if let Some(parsed) = tools::parse(&self.text) {
                let calls: Vec<Value> = parsed.calls.iter().map(ollama_call).collect();
                v["message"] = json!({
                    "role": "assistant",
                    "content": if whole { parsed.content.unwrap_or_default() } else { String::new() },
                    "tool_calls": calls,
                });
            }
        }
        let ns = |ms: f64| (ms * 1e6).round() as u64;
        v["done"] = json!(true);
        v["done_reason"] = json!(done.finish.name());
        v["total_duration"] = json!(self.started.elapsed().as_nanos() as u64);
        v["load_duration"] = json!(0);
        v["prompt_eval_count"] = json!(done.n_prompt);
        v["prompt_eval_duration"] = json!(ns(done.prompt_ms));
        v["eval_count"] = json!(done.n_completion);
        v["eval_duration"] = json!(ns(done.predicted_ms));
        v
    }
}

/// An OpenAI tool call as Ollama gives it: the arguments as an object.
fn ollama_call(call: &Value) -> Value {
    let function = &call["function"];
    let arguments =
        function["arguments"].as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()).unwrap_or_else(|| json!({}));
    json!({"function": {"name": function["name"], "arguments": arguments}})
}

async fn whole(mut reply: Reply, mut events: UnboundedReceiver<Event>) -> Response {
    while let Some(event) = events.recv().await {
        match event {
            Event::Token(piece, _) | Event::Tail(piece) => reply.text.push_str(&piece),
            Event::Finished(done) => return sse::json_body(&reply.last(&done, true)),
            Event::Embeddings(_) => break,
            Event::Failed(e) => return ollama_error(e),
        }
    }
    ollama_error(ApiError::internal("the engine stopped before the reply was complete"))
}

/// One JSON object and a newline.
fn line(value: &Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

fn stream(reply: Reply, events: UnboundedReceiver<Event>) -> Response {
    let state = (reply, events, false);
    let mut response = sse::stream(futures_util::stream::unfold(state, |(mut reply, mut events, ended)| async move {
        if ended {
            return None;
        }
        loop {
            match events.recv().await {
                Some(Event::Token(piece, _)) | Some(Event::Tail(piece)) => {
                    if !piece.is_empty() {
                        reply.text.push_str(&piece);
                        let chunk = line(&reply.piece(&piece));
                        return Some((chunk, (reply, events, false)));
                    }
                }
                Some(Event::Finished(done)) => {
                    let chunk = line(&reply.last(&done, false));
                    return Some((chunk, (reply, events, true)));
                }
                Some(Event::Failed(e)) => return Some((line(&json!({ "error": e.message })), (reply, events, true))),
                Some(Event::Embeddings(_)) | None => return None,
            }
        }
    }));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(1_691_176_965, 499_127_000), "2023-08-04T19:22:45.499127000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.000000005Z");
    }

    #[test]
    fn options_become_request_fields() {
        let f = Fields::parse(br#"{"options": {"temperature": 0, "num_predict": -2, "num_ctx": 4096, "stop": ["x"]}}"#)
            .unwrap();
        let out = settings(&f).unwrap();
        assert_eq!(out["temperature"], json!(0));
        assert_eq!(out["n_predict"], json!(-1));
        assert_eq!(out["stop"], json!(["x"]));
        assert!(!out.contains_key("num_ctx"));
        let bad = Fields::parse(br#"{"options": {"temprature": 1}}"#).unwrap();
        assert!(settings(&bad).unwrap_err().message.contains("unknown option 'temprature'"));
        let wrong = Fields::parse(br#"{"options": {"num_predict": "many"}}"#).unwrap();
        let e = request::generation(&Fields(settings(&wrong).unwrap())).map_err(ollama_names).err().unwrap();
        assert_eq!(e.message, "'options.num_predict' must be an integer, got a string");
        let format = Fields::parse(br#"{"format": "json"}"#).unwrap();
        assert_eq!(settings(&format).unwrap()["response_format"], json!({"type": "json_object"}));
    }
}
