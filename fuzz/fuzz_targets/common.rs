//! Shared by the fuzz targets: a fuzz input becomes a file, because the
//! engine loads models from paths (a regular file, mapped) as Perl users do.
use lugh::engine::model::Model;
use std::path::PathBuf;
use std::sync::Arc;

/// Writes `data` to a per-process file in /dev/shm (or the temp dir) and opens
/// it as a model. Err is an ordinary rejection; only a crash is a finding.
pub fn open_model(data: &[u8]) -> lugh::engine::Result<Arc<Model>> {
    let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let path = dir.join(format!("lugh-fuzz-{}.gguf", std::process::id()));
    std::fs::write(&path, data).expect("write the fuzz input");
    let model = Model::open(&path, true);
    let _ = std::fs::remove_file(&path);
    model.map(Arc::new)
}

/// Every rejection must say which file it is about.
pub fn check_error(e: &lugh::engine::Error) {
    let text = e.to_string();
    assert!(text.contains("lugh-fuzz-"), "an error that does not name the file: {text}");
}
