//! POST /v1/embeddings (with `--embeddings`): each input's pooled,
//! unit-length vector.
use super::super::engine::{Event, Work};
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

pub async fn embeddings(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    match run(&app, &headers, body).await {
        Ok(v) => sse::json_body(&v),
        Err(e) => e.into_response(),
    }
}

async fn run(app: &App, headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    if !app.config.embeddings {
        return Err(ApiError::not_supported("This server does not support embeddings. Start it with `--embeddings`"));
    }
    let f = super::read_json(app, headers, body).await?;
    super::check_model(app, &f)?;
    // the official openai client asks for base64 unless told otherwise
    let base64 = match f.string("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!("'encoding_format' must be 'float' or 'base64', got '{other}'")))
        }
    };
    let inputs = inputs(app, f.get("input").or_else(|| f.get("content")))?;
    let n_ctx = app.config.n_ctx_slot;
    if let Some((i, long)) = inputs.iter().enumerate().find(|(_, t)| t.len() > n_ctx) {
        return Err(ApiError::bad_request(format!(
            "input {i} ({} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
            long.len()
        )));
    }
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    let mut events = app.engine.submit(Work::Embed { inputs, pooling: app.config.pooling }, super::deadline(app))?;
    match events.recv().await {
        Some(Event::Embeddings(rows)) => Ok(json!({
            "model": app.config.model_id,
            "object": "list",
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
            "data": rows.iter().enumerate().map(|(i, v)| {
                let embedding = if base64 { json!(base64_of_floats(v)) } else { json!(v) };
                json!({"embedding": embedding, "index": i, "object": "embedding"})
            })
                .collect::<Vec<_>>(),
        })),
        Some(Event::Failed(e)) => Err(e),
        _ => Err(ApiError::internal("the engine stopped before the embeddings were computed")),
    }
}

/// `input`: a string, an array of strings, an array of token ids, or an
/// array of such arrays; each is one input.
fn inputs(app: &App, input: Option<&Value>) -> Result<Vec<Vec<i32>>, ApiError> {
    let want = "a string, an array of strings, or token ids";
    let encode = |text: &str| {
        let options = EncodeOptions {
            add_bos: app.vocab.add_bos_default(),
            add_eos: app.vocab.add_eos_default(),
            parse_special: true,
        };
        app.vocab.encode_bytes(text.as_bytes(), options)
    };
    let ids = |items: &[Value]| -> Result<Vec<i32>, ApiError> {
        items
            .iter()
            .map(|v| {
                v.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|&n| n >= 0 && (n as usize) < app.vocab.n_vocab())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("'input' has {v}, which is not a token id of this model"))
                    })
            })
            .collect()
    };
    let out = match input {
        None => return Err(ApiError::bad_request("'input' is required")),
        Some(Value::String(s)) => vec![encode(s)],
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => vec![ids(items)?],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(encode(s)),
                Value::Array(tokens) => ids(tokens),
                other => Err(wrong_type("input", want, other)),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(wrong_type("input", want, other)),
    };
    if out.is_empty() || out.iter().any(Vec::is_empty) {
        return Err(ApiError::bad_request("'input' must not be empty"));
    }
    Ok(out)
}

/// OpenAI's base64 encoding of a vector: its f32 values, little-endian, in
/// standard base64 with padding.
fn base64_of_floats(values: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let n = group.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_of_floats_is_standard_base64_of_the_le_bytes() {
        // 1.0f32 = 00 00 80 3f; 1.0, 2.0 = 00 00 80 3f 00 00 00 40
        assert_eq!(super::base64_of_floats(&[1.0]), "AACAPw==");
        assert_eq!(super::base64_of_floats(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(super::base64_of_floats(&[]), "");
    }
}
