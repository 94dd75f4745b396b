//! Response bodies: one JSON value, or server-sent events (`data: JSON`
//! blocks, ending with `data: [DONE]`).
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use std::convert::Infallible;

/// A JSON body with its content type.
pub fn json_body(value: &serde_json::Value) -> Response {
    let mut response = value.to_string().into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
    response
}

/// One event carrying `value`.
pub fn event(value: &serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The event that ends an OpenAI stream.
pub fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// A streaming response of the events `events` yields. When the client goes
/// away the body, and with it `events` (which holds the job's receiver), is
/// dropped: that is how the engine learns to cancel.
pub fn stream(events: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    use futures_util::StreamExt;
    let mut response = Body::from_stream(events.map(Ok::<_, Infallible>)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
