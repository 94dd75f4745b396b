//! Running a generation for /v1/chat/completions and /v1/completions: the
//! context check, the job, and the answer, whole or streamed.
use super::super::engine::{Event, Finished, Work};
use super::super::error::ApiError;
use super::super::request::Generation;
use super::super::response::{logprobs, Endpoint, Envelope};
use super::super::sse;
use super::super::{tools, App};
use crate::engine::generate::generation::TokenLogprob;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::VecDeque;
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
            return (
                "tool_calls",
                json!({"role": "assistant", "content": parsed.content.unwrap_or_default(), "tool_calls": parsed.calls}),
            );
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
            Event::Token(piece, _) => text.push_str(&piece),
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
    ready: VecDeque<Bytes>,
    ended: bool,
    /// With tools: the reply so far, and how much of it went out as
    /// content (what may be a tool call is held until the end, parsed).
    text: String,
    sent: usize,
    /// Log-probabilities of tokens whose text has not gone out yet: they go
    /// with the next chunk.
    pending: Vec<TokenLogprob>,
}

impl Streaming {
    fn push(&mut self, chunk: &Value) {
        self.ready.push_back(sse::event(chunk));
    }

    fn take_logprobs(&mut self) -> Option<Value> {
        let top = self.p.top_logprobs?;
        if self.pending.is_empty() {
            return None;
        }
        Some(logprobs(&self.app.vocab, &std::mem::take(&mut self.pending), top))
    }

    fn send_content(&mut self, text: &str) {
        if !text.is_empty() {
            let lp = self.take_logprobs();
            let chunk = self.p.envelope.chunk(text, lp);
            self.push(&chunk);
        }
    }

    /// Text a token released (or the tail held back to the end).
    fn on_text(&mut self, piece: &str) {
        if !self.p.tools {
            return self.send_content(piece);
        }
        self.text.push_str(piece);
        let end = tools::content_end(&self.text).max(self.sent);
        let content = self.text[self.sent..end].to_string();
        self.sent = end;
        self.send_content(&content);
    }

    /// The end: the tool calls parsed from what was held, the finish
    /// reason, the usage when asked for, and [DONE].
    fn on_finished(&mut self, done: &Finished) {
        let mut finish = done.finish.name();
        if self.p.tools {
            // what was held: the rest of the content, then the calls
            let start = self.sent;
            self.sent = self.text.len();
            let parsed = tools::parse(&self.text);
            let end = match &parsed {
                Some(_) => tools::content_end(&self.text).max(start),
                None => self.text.len(),
            };
            let content = self.text[start..end].to_string();
            self.send_content(&content);
            if let Some(parsed) = parsed {
                for (i, call) in parsed.calls.iter().enumerate() {
                    let lp = self.take_logprobs();
                    let chunk = self.p.envelope.tool_call_chunk(i, call, lp);
                    self.push(&chunk);
                }
                finish = "tool_calls";
            }
        }
        let mut last = self.p.envelope.final_chunk(finish);
        if let Some(lp) = self.take_logprobs() {
            last["choices"][0]["logprobs"] = lp;
        }
        self.push(&last);
        if self.p.generation.include_usage {
            let chunk = self.p.envelope.usage_chunk(done);
            self.push(&chunk);
        }
        self.ready.push_back(sse::done());
        self.ended = true;
    }
}

fn stream(app: Arc<App>, p: Prepared, events: UnboundedReceiver<Event>) -> Response {
    let mut state = Streaming {
        app,
        p,
        events,
        ready: VecDeque::new(),
        ended: false,
        text: String::new(),
        sent: 0,
        pending: Vec::new(),
    };
    if state.p.envelope.endpoint == Endpoint::Chat {
        let chunk = state.p.envelope.role_chunk();
        state.push(&chunk);
    }
    sse::stream(futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(chunk) = s.ready.pop_front() {
                return Some((chunk, s));
            }
            if s.ended {
                return None;
            }
            match s.events.recv().await {
                Some(Event::Token(text, logprob)) => {
                    s.pending.extend(logprob);
                    s.on_text(&text);
                }
                Some(Event::Tail(text)) => s.on_text(&text),
                Some(Event::Finished(done)) => s.on_finished(&done),
                Some(Event::Failed(e)) => {
                    s.push(&e.body());
                    s.ended = true;
                }
                Some(Event::Embeddings(_)) | None => s.ended = true,
            }
        }
    }))
}
