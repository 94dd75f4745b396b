//! POST /tokenize and /detokenize, as llama-server answers them.
use super::super::error::ApiError;
use super::super::request::wrong_type;
use super::super::sse;
use super::super::App;
use crate::engine::model::tokenizer::EncodeOptions;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;

pub async fn tokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    answer(async {
        let f = super::read_json(&app, &headers, body).await?;
        let content = f.string("content")?.ok_or_else(|| ApiError::bad_request("'content' is required"))?;
        // llama-server's defaults: no BOS, special-token texts recognised
        let options = EncodeOptions {
            add_bos: f.bool("add_special")?.unwrap_or(false) && app.vocab.add_bos_default(),
            add_eos: false,
            parse_special: f.bool("parse_special")?.unwrap_or(true),
        };
        let tokens = app.vocab.encode_bytes(content.as_bytes(), options);
        if !f.bool("with_pieces")?.unwrap_or(false) {
            return Ok(json!({ "tokens": tokens }));
        }
        let pieces = tokens
            .iter()
            .map(|&id| {
                let bytes = app.vocab.piece(id, true).unwrap_or_default();
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => json!(s),
                    Err(_) => json!(bytes),
                };
                json!({"id": id, "piece": piece})
            })
            .collect::<Vec<_>>();
        Ok(json!({ "tokens": pieces }))
    })
    .await
}

pub async fn detokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    answer(async {
        let f = super::read_json(&app, &headers, body).await?;
        let tokens = match f.get("tokens") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| wrong_type("tokens", "an array of integers", v))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => return Err(wrong_type("tokens", "an array of token ids", other)),
        };
        let bytes = app.vocab.decode(&tokens, true)?;
        Ok(json!({ "content": String::from_utf8_lossy(&bytes) }))
    })
    .await
}

async fn answer(work: impl std::future::Future<Output = Result<Value, ApiError>>) -> Response {
    match work.await {
        Ok(v) => sse::json_body(&v),
        Err(e) => e.into_response(),
    }
}
