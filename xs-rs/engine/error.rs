//! The engine's one error type. Messages name the thing that is wrong and,
//! where there is one, the fix; they never end in a newline, so perl appends
//! " at FILE line N." to them.
use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// A bad argument from the caller (wrong type, missing, out of range).
    Argument(String),
    /// An option name the method does not know.
    UnknownOption { name: String, known: Vec<&'static str> },
    /// The file cannot be opened or read.
    Io { path: PathBuf, reason: String },
    /// The file does not start with the GGUF magic.
    NotGguf { path: PathBuf },
    /// A GGUF version this reader does not understand.
    UnsupportedVersion { path: PathBuf, version: u32 },
    /// The file ends before the structure it announces.
    Truncated { path: PathBuf, what: String },
    /// The file is internally inconsistent.
    Corrupt { path: PathBuf, what: String },
    /// A well-formed file whose content the model cannot run with (a tensor
    /// type the op does not accept, a hyperparameter out of range).
    Invalid { path: PathBuf, what: String },
    /// A backend that is not compiled in or has no usable device.
    Backend(String),
    /// ggml refused or failed an operation.
    Ggml(String),
    /// The model file has no tokenizer vocabulary.
    NoVocabulary { path: PathBuf },
    /// A tokenizer model or pre-tokenizer that Lugh does not implement.
    UnsupportedTokenizer { path: PathBuf, what: String },
    /// A token id outside the vocabulary (`pos`: its index in the input).
    TokenOutOfRange { pos: Option<usize>, id: i64, n_vocab: usize },
    /// The model's architecture has no row in engine/model/arch.rs.
    UnsupportedArchitecture { path: PathBuf, name: String, supported: Vec<&'static str> },
    /// A tensor the architecture requires is not in the file.
    MissingTensor { path: PathBuf, name: String, arch: &'static str },
    /// More tokens than the KV cache has room for.
    KvOverflow { needed: usize, capacity: usize },
    /// A file cannot be written.
    Write { path: PathBuf, reason: String },
    /// The file does not start with the magic of a saved KV cache.
    NotSavedCache { path: PathBuf },
    /// A saved KV cache in a format version this Lugh does not read.
    UnsupportedCacheVersion { path: PathBuf, version: u32, readable: u32 },
    /// A well-formed saved KV cache made for another model or other
    /// session settings.
    CacheMismatch { path: PathBuf, what: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Argument(m) => write!(f, "{m}"),
            Error::UnknownOption { name, known } => {
                write!(f, "unknown option '{name}' (valid options: {})", known.join(", "))
            }
            Error::Io { path, reason } => write!(f, "cannot read '{}': {reason}", path.display()),
            Error::NotGguf { path } => {
                write!(f, "'{}' is not a GGUF file (bad magic)", path.display())
            }
            Error::UnsupportedVersion { path, version } => write!(
                f,
                "'{}' uses GGUF version {version}, which is not supported (versions 2 and 3 are)",
                path.display()
            ),
            Error::Truncated { path, what } => {
                write!(f, "'{}' is truncated: the file ends inside {what}", path.display())
            }
            Error::Corrupt { path, what } => write!(f, "'{}' is corrupt: {what}", path.display()),
            Error::Invalid { path, what } => write!(f, "'{}' is not a usable model: {what}", path.display()),
            Error::Backend(m) => write!(f, "{m}"),
            Error::Ggml(m) => write!(f, "ggml: {m}"),
            Error::NoVocabulary { path } => {
                write!(f, "'{}' has no tokenizer vocabulary (tokenizer.ggml.tokens is missing)", path.display())
            }
            Error::UnsupportedTokenizer { path, what } => write!(f, "'{}': {what}", path.display()),
            Error::TokenOutOfRange { pos, id, n_vocab } => {
                let at = pos.map(|p| format!(" at position {p}")).unwrap_or_default();
                write!(f, "token id {id}{at} is out of range [0, {n_vocab})")
            }
            Error::UnsupportedArchitecture { path, name, supported } => write!(
                f,
                "'{}': architecture '{name}' is not supported (supported: {})",
                path.display(),
                supported.join(", ")
            ),
            Error::MissingTensor { path, name, arch } => {
                write!(f, "'{}': tensor {name} is missing (architecture {arch})", path.display())
            }
            Error::KvOverflow { needed, capacity } => write!(
                f,
                "the KV cache holds {capacity} positions but {needed} are needed (create the session with a larger n_ctx, or clear/resize the cache)"
            ),
            Error::Write { path, reason } => write!(f, "cannot write '{}': {reason}", path.display()),
            Error::NotSavedCache { path } => {
                write!(f, "'{}' is not a saved Lugh KV cache (bad magic)", path.display())
            }
            Error::UnsupportedCacheVersion { path, version, readable } => write!(
                f,
                "'{}' is a saved KV cache of format version {version}, which this Lugh does not read (it reads \
                 versions 1 to {readable})",
                path.display()
            ),
            Error::CacheMismatch { path, what } => {
                write!(f, "'{}' cannot be loaded into this session: {what}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {}
