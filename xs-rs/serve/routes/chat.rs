//! POST /v1/chat/completions: the messages through the model's chat
//! template, then a generation.
use super::super::error::ApiError;
use super::super::request::{self, wrong_type, Fields};
use super::super::response::{Endpoint, Envelope};
use super::super::App;
use super::generate::{respond, Prepared};
use crate::engine::model::tokenizer::EncodeOptions;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use std::sync::Arc;

pub async fn chat_completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    match prepare(&app, &headers, body).await {
        Ok(prepared) => respond(app, prepared).await,
        Err(e) => e.into_response(),
    }
}

async fn prepare(app: &App, headers: &HeaderMap, body: Body) -> Result<Prepared, ApiError> {
    let f = super::read_json(app, headers, body).await?;
    super::check_model(app, &f)?;
    let messages = messages(&f)?;
    let tools = match f.get("tools") {
        None => None,
        Some(v @ Value::Array(_)) => Some(v.clone()),
        Some(other) => return Err(wrong_type("tools", "an array", other)),
    };
    let generation = request::generation(&f)?;
    let top_logprobs = match f.bool("logprobs")? {
        Some(true) => Some(request::top_logprobs(&f)?),
        _ => None,
    };
    let prompt = chat_prompt(app, &messages, tools.as_ref())?;
    Ok(Prepared {
        envelope: Envelope::new(Endpoint::Chat, &app.config.model_id),
        prompt,
        generation,
        top_logprobs,
        tools: tools.is_some(),
    })
}

/// The prompt tokens of `messages` (checked by [`messages`]) through the
/// model's chat template, with the assistant's turn begun.
pub(super) fn chat_prompt(app: &App, messages: &Value, tools: Option<&Value>) -> Result<Vec<i32>, ApiError> {
    let template = app.template.as_ref().ok_or_else(|| {
        ApiError::bad_request("the model has no chat template: start the server with --chat-template-file FILE")
    })?;
    let mut vars = Map::new();
    vars.insert("add_generation_prompt".into(), true.into());
    vars.insert("bos_token".into(), app.bos_text.clone().into());
    vars.insert("eos_token".into(), app.eos_text.clone().into());
    if let Some(t) = tools {
        vars.insert("tools".into(), t.clone());
    }
    let text = template.render(messages, &vars, Some(super::super::response::now() as i64))?;
    let options = EncodeOptions { add_bos: app.vocab.add_bos_default(), add_eos: false, parse_special: true };
    let mut prompt = app.vocab.encode_bytes(text.as_bytes(), options);
    // a template that writes the BOS itself: not twice (llama.cpp warns and keeps one)
    if let (Some(bos), [first, second, ..]) = (app.vocab.bos_id(), prompt.as_slice()) {
        if options.add_bos && *first == bos && *second == bos {
            prompt.remove(0);
        }
    }
    Ok(prompt)
}

/// `messages`: a non-empty array of objects with a string `role`; `content`
/// a string, an array of text parts (joined), or null.
pub(super) fn messages(f: &Fields) -> Result<Value, ApiError> {
    let list = match f.get("messages") {
        None => return Err(ApiError::bad_request("'messages' is required")),
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => return Err(ApiError::bad_request("'messages' must not be empty")),
        Some(other) => return Err(wrong_type("messages", "an array", other)),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let Value::Object(fields) = m else { return Err(wrong_type(&format!("messages[{i}]"), "an object", m)) };
        let mut fields = fields.clone();
        match fields.get("role") {
            Some(Value::String(_)) => {}
            Some(other) => return Err(wrong_type(&format!("messages[{i}].role"), "a string", other)),
            None => return Err(ApiError::bad_request(format!("messages[{i}] has no 'role'"))),
        }
        let content = match fields.get("content") {
            None | Some(Value::Null) | Some(Value::String(_)) => None,
            Some(Value::Array(parts)) => Some(text_parts(i, parts)?),
            Some(other) => {
                return Err(wrong_type(&format!("messages[{i}].content"), "a string or an array of parts", other))
            }
        };
        if let Some(text) = content {
            fields.insert("content".into(), text.into());
        }
        out.push(Value::Object(fields));
    }
    Ok(Value::Array(out))
}

fn text_parts(i: usize, parts: &[Value]) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
            (Some("text"), Some(t)) => text.push_str(t),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}].content[{j}]: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported"
                )))
            }
        }
    }
    Ok(text)
}
