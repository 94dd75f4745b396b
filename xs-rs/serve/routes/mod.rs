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
    use futures_util::StreamExt;
    let limit = app.config.max_body_bytes;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|n: usize| n > limit) {
        tokio::spawn(discard(stream));
        return Err(ApiError::too_large(limit));
    }
    let read = async {
        let mut bytes = Vec::with_capacity(declared.unwrap_or(0).min(1 << 20));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
            if bytes.len() + chunk.len() > limit {
                return Ok(None);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Some(bytes))
    };
    match tokio::time::timeout(app.config.timeout, read).await {
        Err(_) => Err(ApiError::timed_out("the request body did not arrive within the server's --timeout")),
        Ok(Err(e)) => Err(e),
        Ok(Ok(None)) => {
            tokio::spawn(discard(stream));
            Err(ApiError::too_large(limit))
        }
        Ok(Ok(Some(bytes))) => Fields::parse(&bytes),
    }
}

/// How much of a body over the limit is read and thrown away after the 413
/// is sent, and how long a pause in it ends the reading.
const DISCARD_AT_MOST: usize = 64 << 20;
const DISCARD_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads the rest of a body over the limit and drops it, while the 413 goes
/// out: a client that sends its whole body before reading the answer (most
/// do, without `Expect: 100-continue`) would otherwise find the connection
/// reset mid-send and never see the 413. Past DISCARD_AT_MOST, or when the
/// client pauses, the connection is closed.
async fn discard(mut stream: axum::body::BodyDataStream) {
    use futures_util::StreamExt;
    let mut discarded = 0;
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(DISCARD_PAUSE, stream.next()).await {
        discarded += chunk.len();
        if discarded > DISCARD_AT_MOST {
            break;
        }
    }
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
