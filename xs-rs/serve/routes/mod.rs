//! The endpoints (llama-server's paths, with and without `/v1`), the API
//! key check in front of them, and reading a request body.
mod chat;
mod completions;
mod embeddings;
mod generate;
mod info;
mod ollama;
mod tokens;

use super::error::ApiError;
use super::request::Fields;
use super::App;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use std::time::Instant;

pub use ollama::rfc3339;

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(info::page))
        .route("/health", get(info::health))
        .route("/v1/health", get(info::health))
        .route("/models", get(info::models))
        .route("/v1/models", get(info::models))
        .route("/chat/completions", post(chat::chat_completions))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/completions", post(completions::completions))
        .route("/v1/completions", post(completions::completions))
        .route("/embeddings", post(embeddings::embeddings))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/tokenize", post(tokens::tokenize))
        .route("/detokenize", post(tokens::detokenize))
        .route("/api/tags", get(ollama::tags))
        .route("/api/version", get(ollama::version))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .fallback(info::not_found)
        .layer(middleware::from_fn_with_state(app.clone(), check_api_key))
        .with_state(app)
}

/// With `--api-key`, everything but /health (and the chat page, which asks
/// for the key itself) wants `Authorization: Bearer KEY`.
async fn check_api_key(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    use axum::response::IntoResponse;
    let Some(key) = &app.config.api_key else { return next.run(request).await };
    let path = request.uri().path();
    if matches!(path, "/" | "/health" | "/v1/health") {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes())) {
        next.run(request).await
    } else {
        ApiError::unauthorized().into_response()
    }
}

/// Compares without stopping at the first difference, so that the time
/// taken says nothing about how much of a guessed key was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The request's JSON object: 413 over the size limit, 408 past the
/// timeout, 400 when it is not a JSON object.
async fn read_json(app: &App, headers: &HeaderMap, body: Body) -> Result<Fields, ApiError> {
    let limit = app.config.max_body_bytes;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if declared.is_some_and(|n: usize| n > limit) {
        return Err(ApiError::too_large(limit));
    }
    let bytes = match tokio::time::timeout(app.config.timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => return Err(ApiError::timed_out("the request body did not arrive within the server's --timeout")),
        Ok(Err(e)) if is_length_limit(&e) => return Err(ApiError::too_large(limit)),
        Ok(Err(e)) => return Err(ApiError::bad_request(format!("cannot read the request body: {e}"))),
        Ok(Ok(bytes)) => bytes,
    };
    Fields::parse(&bytes)
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.to_string().contains("length limit exceeded") {
            return true;
        }
        source = s.source();
    }
    false
}

/// When a request that arrives now must be done.
fn deadline(app: &App) -> Instant {
    Instant::now() + app.config.timeout
}

/// The request's `model`, when it names one, must be the server's (its id,
/// the file's name with or without `.gguf`): else 400, as llama-server
/// answers in router mode (with one model it ignores the field).
fn check_model(app: &App, f: &Fields) -> Result<(), ApiError> {
    let Some(name) = f.string("model")? else { return Ok(()) };
    let id = &app.config.model_id;
    let file = std::path::Path::new(id).file_name().and_then(|n| n.to_str()).unwrap_or(id);
    let stem = file.strip_suffix(".gguf").unwrap_or(file);
    if ![id.as_str(), file, stem].contains(&name) {
        return Err(ApiError::bad_request(format!("model '{name}' not found (this server serves '{id}')")));
    }
    Ok(())
}
