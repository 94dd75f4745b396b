//! POST /v1/completions: a text prompt continued.
use super::super::error::ApiError;
use super::super::request::{self, wrong_type};
use super::super::response::{Endpoint, Envelope};
use super::super::App;
use super::generate::{respond, Prepared};
use crate::engine::model::tokenizer::EncodeOptions;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::Arc;

pub async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    match prepare(&app, &headers, body).await {
        Ok(prepared) => respond(app, prepared).await,
        Err(e) => e.into_response(),
    }
}

async fn prepare(app: &App, headers: &HeaderMap, body: Body) -> Result<Prepared, ApiError> {
    let f = super::read_json(app, headers, body).await?;
    super::check_model(app, &f)?;
    let generation = request::generation(&f)?;
    // OpenAI's completions take a count: that many alternatives
    let top_logprobs = f.integer("logprobs", 0, 20)?.map(|n| n as usize);
    let text = match f.get("prompt") {
        None => return Err(ApiError::bad_request("'prompt' is required")),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            items[0].as_str().unwrap_or_default().to_string()
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::bad_request("'prompt' must be one string (one prompt per request is supported)"))
        }
        Some(other) => return Err(wrong_type("prompt", "a string", other)),
    };
    let options = EncodeOptions { add_bos: app.vocab.add_bos_default(), add_eos: false, parse_special: true };
    Ok(Prepared {
        envelope: Envelope::new(Endpoint::Text, &app.config.model_id),
        prompt: app.vocab.encode_bytes(text.as_bytes(), options),
        generation,
        top_logprobs,
        tools: false,
    })
}
