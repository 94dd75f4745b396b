//! `lugh serve`: an OpenAI-compatible HTTP server over one session, on axum
//! and tokio. A layer above the engine: it imports the engine, nothing in
//! the engine imports it, and it knows nothing of perl (Lugh::Server's XS
//! sub hands it a session and a [`Config`]).
//!
//! - [`config`]: the settings; [`error`]: OpenAI-style errors;
//! - [`request`]: reading and checking request fields; [`response`]: the
//!   JSON answered; [`sse`]: bodies, streamed or not;
//! - [`engine`]: the one thread that runs the model, fed over a channel;
//! - [`routes`]: the endpoints, one file per family, and the API key check.
pub mod config;
mod engine;
mod error;
mod request;
mod response;
mod routes;
mod sse;
mod tools;

pub use config::Config;

use crate::engine::generate::chat_template::ChatTemplate;
use crate::engine::generate::inference::Inference;
use crate::engine::model::tokenizer::Vocab;
use crate::engine::{Error, Result};
use std::sync::Arc;

/// What every handler shares.
pub struct App {
    pub config: Config,
    pub engine: engine::Engine,
    pub vocab: Arc<Vocab>,
    pub template: Option<ChatTemplate>,
    /// The texts of the model's BOS and EOS tokens, for the chat template.
    pub bos_text: String,
    pub eos_text: String,
    /// Sent as `meta` in /v1/models.
    pub meta: serde_json::Value,
    /// What Ollama's /api/tags says of the model: architecture, file_type,
    /// file_size, modified_at.
    pub details: serde_json::Value,
}

/// Serves until SIGTERM or SIGINT, then cancels what runs and returns.
/// `announce` is told the address once the server listens.
pub fn run(session: Arc<Inference>, config: Config, announce: impl FnOnce(&str)) -> Result<()> {
    let vocab = session.runner.model().vocab()?;
    let template = config.chat_template.as_deref().map(ChatTemplate::new).transpose()?;
    let text_of = |id: Option<i32>| {
        id.and_then(|id| vocab.piece(id, true).ok())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let ids = vocab.special_ids();
    let model = session.runner.model();
    let meta = serde_json::json!({
        "vocab_type": vocab.algorithm(),
        "n_vocab": vocab.n_vocab(),
        "n_ctx": config.n_ctx_slot,
        "n_ctx_train": model.n_ctx_train(),
        "n_embd": model.n_embd(),
        "n_params": model.n_params(),
        "size": model.size_bytes(),
    });
    let file = std::fs::metadata(model.path()).ok();
    let modified =
        file.as_ref().and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let details = serde_json::json!({
        "architecture": model.architecture().unwrap_or_default(),
        "file_type": model.file_type(),
        "file_size": file.as_ref().map_or(0, |m| m.len()),
        "modified_at": modified.map(|d| routes::rfc3339(d.as_secs() as i64, d.subsec_nanos())).unwrap_or_default(),
    });
    let (bos_text, eos_text) = (text_of(ids.bos), text_of(ids.eos));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Error::Argument(format!("cannot start the server's runtime: {e}")))?;
    let address = format!("{}:{}", config.host, config.port);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(&address))
        .map_err(|e| Error::Argument(format!("cannot listen on {address}: {e}")))?;
    let engine = engine::Engine::start(session, config.n_parallel, config.max_queue, config.deterministic);
    let app = Arc::new(App { config, engine, vocab, template, bos_text, eos_text, meta, details });
    let router = routes::router(app.clone());
    let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or(address);
    runtime.block_on(async {
        let signals = shutdown_signal()?;
        announce(&format!("http://{bound}"));
        let stopping = app.clone();
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                signals.await;
                // cancel the running generation: its stream ends, and the
                // graceful shutdown does not wait for it to run out
                stopping.engine.stop();
            })
            .await
            .map_err(|e| Error::Argument(format!("the server failed: {e}")))
    })?;
    app.engine.join();
    Ok(())
}

/// A future that completes at the first SIGTERM or SIGINT.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let fail = |e: std::io::Error| Error::Argument(format!("cannot watch for signals: {e}"));
    let mut term = signal(SignalKind::terminate()).map_err(fail)?;
    let mut int = signal(SignalKind::interrupt()).map_err(fail)?;
    Ok(async move {
        let term = Box::pin(term.recv());
        let int = Box::pin(int.recv());
        futures_util::future::select(term, int).await;
    })
}
