//! GET /health, /v1/models, the chat page at /, and 404 for the rest.
use super::super::error::ApiError;
use super::super::response::now;
use super::super::sse;
use super::super::App;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;
use std::sync::Arc;

/// The built-in chat page: one file, no build step.
const PAGE: &str = include_str!("../page.html");

pub async fn page() -> Html<&'static str> {
    Html(PAGE)
}

pub async fn health() -> Response {
    sse::json_body(&json!({"status": "ok"}))
}

/// llama-server's answer: Ollama's `models` and OpenAI's `data`, the model
/// named by its file as given (or the alias).
pub async fn models(State(app): State<Arc<App>>) -> Response {
    let id = &app.config.model_id;
    sse::json_body(&json!({
        "models": [{
            "name": id, "model": id, "modified_at": "", "size": "", "digest": "", "type": "model",
            "description": "", "tags": [""], "capabilities": ["completion"],
        }],
        "object": "list",
        "data": [{
            "id": id, "object": "model", "created": now(), "owned_by": "llamacpp", "meta": app.meta,
        }],
    }))
}

pub async fn not_found(uri: Uri) -> Response {
    ApiError::not_found(format!("File Not Found: {}", uri.path())).into_response()
}
