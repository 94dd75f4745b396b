//! Errors as OpenAI's API and llama-server write them:
//! `{"error": {"code": 400, "message": "...", "type": "invalid_request_error"}}`
//! with the matching HTTP status.
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds a client should wait before trying again (503 only).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), retry_after: None }
    }
    /// Malformed JSON, a field of the wrong type or out of range.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "Invalid API Key")
    }
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is larger than {limit} bytes"))
    }
    pub fn not_supported(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, message)
    }
    /// Every slot busy and the queue full.
    pub fn busy(retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is busy: too many requests are waiting")
        }
    }
    /// SIGTERM: what runs is cancelled, what waits refused.
    pub fn shutting_down() -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down")
    }
    pub fn timed_out(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::REQUEST_TIMEOUT, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The `type` field, as llama-server names it.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => "invalid_request_error",
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::NOT_IMPLEMENTED => "not_supported_error",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
            StatusCode::REQUEST_TIMEOUT => "timeout_error",
            _ => "server_error",
        }
    }

    /// The JSON object, also sent as an SSE event when a stream fails.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.status.as_u16(), "message": self.message, "type": self.kind()}})
    }
}

impl From<crate::engine::Error> for ApiError {
    /// What the engine refuses is the request's fault (an argument); the
    /// rest is the server's.
    fn from(e: crate::engine::Error) -> ApiError {
        match e {
            crate::engine::Error::Argument(m) => ApiError::bad_request(m),
            other => ApiError::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, super::sse::json_body(&self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
