//! Running a generation for /v1/chat/completions and /v1/completions: the
//! context check, the job, and the answer, whole or streamed.
use super::super::engine::{Event, Finished, Work};
use super::super::error::ApiError;
use super::super::request::Generation;
use super::super::response::{logprobs, Endpoint, Envelope};
use super::super::sse;
use super::super::{tools, App};
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// A request ready to run: its prompt tokens and settings.
pub struct Prepared {
    pub envelope: Envelope,
    pub prompt: Vec<i32>,
    pub generation: Generation,
    /// With `logprobs` on: how many alternatives per token.
    pub top_logprobs: Option<usize>,
    /// The request gave `tools`: tool calls in the reply are parsed.
    pub tools: bool,
}

pub async fn respond(app: Arc<App>, mut p: Prepared) -> Response {
    let events = match submit(&app, &mut p) {
        Ok(events) => events,
        Err(e) => return e.into_response(),
    };
    if p.generation.stream {
        stream(app, p, events)
    } else {
        whole(app, p, events).await
    }
}

/// Checks the prompt against the slot's context and hands the generation
/// to the engine (the prompt is taken out of `p`); its events come back.
pub fn submit(app: &App, p: &mut Prepared) -> Result<UnboundedReceiver<Event>, ApiError> {
    let n_ctx = app.config.n_ctx_slot;
    let n_prompt = p.prompt.len();
    if n_prompt == 0 {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if n_prompt >= n_ctx {
        let message = format!(
            "request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
        );
        return Err(ApiError::bad_request(message));
    }
    // as llama-server without context shift: at most until the context is full
    let room = n_ctx - n_prompt;
    let options = &mut p.generation.options;
    options.max_tokens = p.generation.max_tokens.map_or(room, |m| m.min(room));
    options.logprobs = p.top_logprobs;
    options.overrides = app.config.overrides.clone();
    let work = Work::Generate {
        prompt: std::mem::take(&mut p.prompt),
        options: Box::new(options.clone()),
        cache_prompt: p.generation.cache_prompt,
    };
    app.engine.submit(work, super::deadline(app))
}

/// The finish reason and the chat message of a finished reply.
fn message(p: &Prepared, text: &str, done: &Finished) -> (&'static str, Value) {
    if p.tools {
        if let Some(parsed) = tools::parse(text) {
            return ("tool_calls", json!({"role": "assistant", "content": parsed.content, "tool_calls": parsed.calls}));
        }
    }
    (done.finish.name(), json!({"role": "assistant", "content": text}))
}

fn logprobs_of(app: &App, p: &Prepared, done: &Finished) -> Option<Value> {
    p.top_logprobs.map(|top| logprobs(&app.vocab, &done.logprobs, top))
}

async fn whole(app: Arc<App>, p: Prepared, mut events: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Token(piece) => text.push_str(&piece),
            Event::Tail(rest) => text.push_str(&rest),
            Event::Finished(done) => {
                let (finish, message) = message(&p, &text, &done);
                let lp = logprobs_of(&app, &p, &done);
                return sse::json_body(&p.envelope.complete(message, &text, finish, &done, lp));
            }
            Event::Embeddings(_) => break,
            Event::Failed(e) => return e.into_response(),
        }
    }
    ApiError::internal("the engine stopped before the reply was complete").into_response()
}

/// Where a stream is.
struct Streaming {
    app: Arc<App>,
    p: Prepared,
    events: UnboundedReceiver<Event>,
    /// Chunks ready to send.
    ready: std::collections::VecDeque<Bytes>,
    ended: bool,
}

fn stream(app: Arc<App>, p: Prepared, events: UnboundedReceiver<Event>) -> Response {
    let mut ready = std::collections::VecDeque::new();
    if p.envelope.endpoint == Endpoint::Chat {
        ready.push_back(sse::event(&p.envelope.chunk("", true)));
    }
    let state = Streaming { app, p, events, ready, ended: false };
    sse::stream(futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(chunk) = s.ready.pop_front() {
                return Some((chunk, s));
            }
            if s.ended {
                return None;
            }
            match s.events.recv().await {
                Some(Event::Token(text)) | Some(Event::Tail(text)) => {
                    if !text.is_empty() {
                        s.ready.push_back(sse::event(&s.p.envelope.chunk(&text, false)));
                    }
                }
                Some(Event::Finished(done)) => {
                    let lp = logprobs_of(&s.app, &s.p, &done);
                    s.ready.push_back(sse::event(&s.p.envelope.final_chunk(done.finish.name(), lp)));
                    if s.p.generation.include_usage {
                        s.ready.push_back(sse::event(&s.p.envelope.usage_chunk(&done)));
                    }
                    s.ready.push_back(sse::done());
                    s.ended = true;
                }
                Some(Event::Failed(e)) => {
                    s.ready.push_back(sse::event(&e.body()));
                    s.ended = true;
                }
                Some(Event::Embeddings(_)) | None => s.ended = true,
            }
        }
    }))
}
