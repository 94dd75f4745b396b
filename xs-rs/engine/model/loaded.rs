//! A loaded GGUF model: its header, the mapped (or readable) tensor data, and
//! the facts derived from them. Immutable after load and shared through `Arc`
//! by everything built on it (tokenizer, inference sessions).
use crate::engine::ggml::placement::Placement;
use crate::engine::model::gguf::{Gguf, TensorInfo, Value};
use crate::engine::model::tokenizer::Vocab;
use crate::engine::model::weights::ModelWeights;
use crate::engine::{ggml::sys, Error, Result};
use memmap2::{Mmap, MmapOptions};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

pub struct Model {
    /// The header of the (first) file, with the tensors of every part of a
    /// split model.
    pub gguf: Gguf,
    /// The model's files: one, or the parts of a split model in order.
    parts: Vec<Part>,
    /// The tokenizer vocabulary, built on first use and shared.
    vocab: OnceLock<Arc<Vocab>>,
    /// The weights placed on each device, shared by every session there
    /// (as llama.cpp's contexts share one llama_model); dropped with the last.
    placed: Mutex<Vec<(Placement, Weak<ModelWeights>)>>,
    /// See [`Model::fingerprint`]; computed on first use.
    fingerprint: OnceLock<u64>,
    /// What the training layer keeps with the model (its trainable copies of
    /// the f32 weights, `train::pass::trainable_weights`), made on first use.
    /// Typed there: nothing below training knows training's types.
    pub(crate) training_state: OnceLock<Box<dyn std::any::Any + Send + Sync>>,
    _live: crate::engine::live::Live,
}

/// One file of a model: the whole model, or one part of a model split in
/// several files (llama.cpp's gguf-split: NAME-00001-of-0000N.gguf, ...).
struct Part {
    path: PathBuf,
    /// Absolute offset of the file's tensor data.
    data_offset: u64,
    /// The whole file mapped read-only, when loaded with use_mmap.
    mmap: Option<Mmap>,
}

/// Bytes of each tensor's data that go into the fingerprint.
const FINGERPRINT_SAMPLE: u64 = 64;

/// The smallest memory page of the systems Lugh runs on. Where pages are
/// larger a released range is widened to whole pages, which can drop a
/// neighbouring tensor's page: it is read back at its next touch.
#[cfg(unix)]
const SMALLEST_PAGE: usize = 4096;

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Model({})", self.gguf.path.display())
    }
}

impl Model {
    /// Opens `path`; with `use_mmap` the file is mapped so that weights are
    /// used in place, without a second copy.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn open(path: &Path, use_mmap: bool) -> Result<Model> {
        Model::open_with(path, use_mmap, false)
    }

    /// `open`, and with `prefetch` (and `use_mmap`) the whole mapping is read
    /// in at once (MAP_POPULATE where the system has it, and a will-need
    /// advice), as llama.cpp's prefetch does, instead of page by page at
    /// first use.
    pub fn open_with(path: &Path, use_mmap: bool, prefetch: bool) -> Result<Model> {
        crate::engine::ggml::backend::init_logging();
        let started = std::time::Instant::now();
        let model = Model::open_file(path, use_mmap, prefetch)?;
        crate::debug_log!(
            "opened '{}' in {:.1} ms: architecture {}, {} tensors, {}",
            path.display(),
            started.elapsed().as_secs_f64() * 1e3,
            model.architecture().unwrap_or("(none)"),
            model.gguf.tensors.len(),
            if use_mmap {
                format!(
                    "{:.1} MiB mapped{}",
                    crate::engine::debug::mib(model.mapped_bytes()),
                    if prefetch { ", prefetched" } else { "" }
                )
            } else {
                "read without mmap".into()
            }
        );
        Ok(model)
    }

    fn open_file(path: &Path, use_mmap: bool, prefetch: bool) -> Result<Model> {
        let (mut gguf, first) = open_part(path, use_mmap, prefetch)?;
        // a later part of a split model has no metadata: say what it is first
        let others = split_parts(&gguf)?;
        check_metadata(&gguf)?;
        let mut parts = vec![first];
        let count = others.len() + 1;
        for (index, part_path) in others.into_iter().enumerate().map(|(i, p)| (i + 1, p)) {
            let (header, part) = open_part(&part_path, use_mmap, prefetch).map_err(|e| match e {
                Error::Io { reason, .. } if !part_path.exists() => Error::Invalid {
                    path: path.to_path_buf(),
                    what: format!(
                        "it is the first of {count} files of a split model, and part {} ({}) is missing ({reason})",
                        index + 1,
                        part_path.display()
                    ),
                },
                e => e,
            })?;
            let says = (header.get_i64("split.no"), header.get_i64("split.count"));
            if says != (Some(index as i64), Some(count as i64)) {
                let what = format!(
                    "as part {} of {count} of a split model it should have split.no = {index} and split.count = {count}, \
                     not {:?} and {:?}",
                    index + 1,
                    says.0,
                    says.1
                );
                return Err(Error::Corrupt { path: part_path, what });
            }
            gguf.add_part_tensors(header, index)?;
            parts.push(part);
        }
        if let Some(total) = gguf.get_i64("split.tensors.count").filter(|_| count > 1) {
            if total != gguf.tensors.len() as i64 {
                let what = format!("split.tensors.count is {total}, but its {count} parts hold {}", gguf.tensors.len());
                return Err(Error::Corrupt { path: path.to_path_buf(), what });
            }
        }
        Ok(Model {
            gguf,
            parts,
            vocab: OnceLock::new(),
            placed: Mutex::default(),
            fingerprint: OnceLock::new(),
            training_state: OnceLock::new(),
            _live: crate::engine::live::Live::new(),
        })
    }

    /// The model's tokenizer vocabulary, built once and then shared by every
    /// tokenizer and inference session on this model.
    pub fn vocab(&self) -> Result<Arc<Vocab>> {
        if let Some(v) = self.vocab.get() {
            return Ok(v.clone());
        }
        let built = Arc::new(Vocab::from_gguf(&self.gguf)?);
        // Two threads may build at once; both then use the first one stored.
        Ok(self.vocab.get_or_init(|| built).clone())
    }

    /// The weights placed as `placement` says: those a live session placed
    /// so, or `place()`d now. The lock is held while placing, so two
    /// sessions created at once place them once.
    pub fn weights_on(
        &self,
        placement: &Placement,
        place: impl FnOnce() -> Result<ModelWeights>,
    ) -> Result<Arc<ModelWeights>> {
        let mut placed = self.placed.lock().unwrap_or_else(|e| e.into_inner());
        placed.retain(|(_, w)| w.strong_count() > 0);
        if let Some(weights) = placed.iter().find(|(p, _)| p == placement).and_then(|(_, w)| w.upgrade()) {
            crate::debug_log!("weights of '{}' already placed on this device: shared", self.path().display());
            return Ok(weights);
        }
        let started = std::time::Instant::now();
        let weights = Arc::new(place()?);
        if crate::engine::debug::enabled() {
            let buffers: Vec<String> = weights
                .placement
                .iter()
                .map(|(buft, bytes)| format!("{buft} {:.1} MiB", crate::engine::debug::mib(*bytes)))
                .collect();
            crate::debug_log!(
                "placed the weights of '{}' in {:.1} ms: {}",
                self.path().display(),
                started.elapsed().as_secs_f64() * 1e3,
                if buffers.is_empty() { "in the mapping".into() } else { buffers.join(", ") }
            );
        }
        placed.push((placement.clone(), Arc::downgrade(&weights)));
        Ok(weights)
    }

    pub fn path(&self) -> &PathBuf {
        &self.gguf.path
    }

    pub fn uses_mmap(&self) -> bool {
        self.parts[0].mmap.is_some()
    }

    /// Bytes of the files mapped (0 when they were read instead).
    pub fn mapped_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.mmap.as_ref().map_or(0, |m| m.len())).sum()
    }

    /// The tensor's bytes in the mapping (None when not mapped).
    pub fn mapped_data(&self, t: &TensorInfo) -> Option<&[u8]> {
        let part = &self.parts[t.part];
        let start = (part.data_offset + t.offset) as usize;
        part.mmap.as_ref().map(|m| &m[start..start + t.size as usize])
    }

    /// Lets go of the mapped pages of a tensor whose bytes were copied into
    /// a buffer of their own (the CPU's repacked layouts, a device's
    /// memory), so that the file's copy does not stay resident beside it.
    /// Only pages wholly inside the tensor are dropped; they stay in the
    /// file (and the page cache), and a later read maps them in again.
    pub fn release_mapped(&self, t: &TensorInfo) {
        #[cfg(unix)]
        let part = &self.parts[t.part];
        if let Some(map) = &part.mmap {
            let start = (part.data_offset + t.offset) as usize;
            let first = start.next_multiple_of(SMALLEST_PAGE);
            let end = (start + t.size as usize) / SMALLEST_PAGE * SMALLEST_PAGE;
            if end > first {
                // SAFETY: the mapping is a read-only shared mapping of the
                // file, so a dropped page reads back the same bytes at its
                // next touch and every slice into the mapping stays valid.
                // Advice only: a kernel that declines it changes nothing.
                let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first) };
            }
        }
    }

    /// How many files the model is in (more than 1: a split model).
    pub fn n_parts(&self) -> usize {
        self.parts.len()
    }

    /// The whole mapping of file `part` (None when not mapped), for
    /// backends that can use host memory in place.
    pub fn mapping(&self, part: usize) -> Option<&[u8]> {
        self.parts[part].mmap.as_deref()
    }

    /// Copies the tensor's bytes into `dst` (which must be `t.size` long).
    pub fn read_tensor_data(&self, t: &TensorInfo, dst: &mut [u8]) -> Result<()> {
        assert_eq!(dst.len() as u64, t.size, "read_tensor_data: destination size");
        self.read_at(&mut None, t.part, self.parts[t.part].data_offset + t.offset, dst)
    }

    /// Fills `dst` with file `part`'s bytes from `offset` on: from the
    /// mapping, or read through `file` (opened on first use, kept for the
    /// next read of the same part).
    fn read_at(&self, file: &mut Option<(usize, File)>, part: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let Part { path, mmap, .. } = &self.parts[part];
        let io_err = |e: std::io::Error| Error::Io { path: path.clone(), reason: e.to_string() };
        if let Some(map) = mmap {
            let src = usize::try_from(offset).ok().and_then(|o| map.get(o..o.checked_add(dst.len())?));
            let src = src.ok_or_else(|| Error::Truncated { path: path.clone(), what: "the tensor data".into() })?;
            dst.copy_from_slice(src);
            return Ok(());
        }
        if file.as_ref().is_none_or(|(open, _)| *open != part) {
            *file = Some((part, File::open(path).map_err(io_err)?));
        }
        let (_, f) = file.as_mut().expect("opened above");
        f.seek(SeekFrom::Start(offset)).map_err(io_err)?;
        f.read_exact(dst).map_err(io_err)
    }

    /// An identity of the model file, cheap to compute yet different for
    /// any other file: XXH64 over the file's header as it is on disk (every
    /// metadata key and value and the tensor table: names, types, shapes,
    /// offsets), then the first 64 bytes of each tensor's data, so that two
    /// files with the same metadata but other weights (a fine-tune) differ.
    /// A few megabytes at most are read (the vocabulary), never the
    /// weights; computed on first use and kept.
    pub fn fingerprint(&self) -> Result<u64> {
        if let Some(&f) = self.fingerprint.get() {
            return Ok(f);
        }
        let mut file = None;
        let mut hash = crate::engine::xxhash::Xxh64::new(0);
        let mut bytes = vec![0u8; self.gguf.data_offset as usize];
        self.read_at(&mut file, 0, 0, &mut bytes)?;
        hash.update(&bytes);
        for t in &self.gguf.tensors {
            bytes.resize(t.size.min(FINGERPRINT_SAMPLE) as usize, 0);
            self.read_at(&mut file, t.part, self.parts[t.part].data_offset + t.offset, &mut bytes)?;
            hash.update(&bytes);
        }
        Ok(*self.fingerprint.get_or_init(|| hash.digest()))
    }

    /// The model's name for messages: `general.name`, else the file's name.
    pub fn display_name(&self) -> String {
        match self.gguf.get_str("general.name") {
            Some(name) if !name.trim().is_empty() => name.to_string(),
            _ => self
                .path()
                .file_name()
                .map_or_else(|| self.path().display().to_string(), |f| f.to_string_lossy().into_owned()),
        }
    }

    pub fn architecture(&self) -> Option<&str> {
        self.gguf.architecture()
    }

    fn arch_int(&self, suffix: &str) -> Option<i64> {
        self.gguf.arch_value(suffix).and_then(|v| v.as_i64().or_else(|| first_int(v)))
    }

    /// `ARCH.pooling_type`: how an embedding model pools (llama.cpp's
    /// numbering), when the file says.
    pub fn pooling_type(&self) -> Option<i64> {
        self.arch_int("pooling_type")
    }

    pub fn n_layer(&self) -> Option<i64> {
        self.arch_int("block_count")
    }

    pub fn n_embd(&self) -> Option<i64> {
        self.arch_int("embedding_length")
    }

    pub fn n_head(&self) -> Option<i64> {
        self.arch_int("attention.head_count")
    }

    /// Defaults to n_head (no grouped-query attention) when the key is absent.
    pub fn n_head_kv(&self) -> Option<i64> {
        self.arch_int("attention.head_count_kv").or_else(|| self.n_head())
    }

    pub fn n_ff(&self) -> Option<i64> {
        self.arch_int("feed_forward_length")
    }

    pub fn n_ctx_train(&self) -> Option<i64> {
        self.arch_int("context_length")
    }

    /// The vocabulary size: the key, else the token list, else the embedding rows.
    pub fn n_vocab(&self) -> Option<i64> {
        self.arch_int("vocab_size")
            .or_else(|| self.gguf.get_array("tokenizer.ggml.tokens").map(|a| a.len() as i64))
            .or_else(|| self.gguf.tensor("token_embd.weight").and_then(|t| t.shape.get(1)).map(|&n| n as i64))
    }

    pub fn rope_freq_base(&self) -> Option<f64> {
        self.gguf.arch_value("rope.freq_base").and_then(Value::as_f64)
    }

    pub fn norm_eps(&self) -> Option<f64> {
        self.gguf
            .arch_value("attention.layer_norm_rms_epsilon")
            .or_else(|| self.gguf.arch_value("attention.layer_norm_epsilon"))
            .and_then(Value::as_f64)
    }

    /// Whether some layer has a tensor `blk.N.<part>.weight`.
    fn has_layer_tensor(&self, parts: &[&str]) -> bool {
        self.gguf.tensors.iter().any(|t| {
            t.name.strip_prefix("blk.").and_then(|rest| rest.split_once('.')).is_some_and(|(layer, tail)| {
                layer.bytes().all(|b| b.is_ascii_digit())
                    && parts.iter().any(|p| tail.strip_prefix(p).is_some_and(|s| s == ".weight"))
            })
        })
    }

    pub fn has_combined_qkv(&self) -> bool {
        self.has_layer_tensor(&["attn_qkv"])
    }

    pub fn has_ffn_gate(&self) -> bool {
        self.has_layer_tensor(&["ffn_gate", "ffn_gate_exps", "ffn_gate_inp"])
    }

    pub fn has_post_norm(&self) -> bool {
        self.has_layer_tensor(&["post_attention_norm", "post_ffw_norm", "attn_post_norm", "ffn_post_norm"])
    }

    /// State-space or RNN-style layers (Mamba, RWKV, ...): they carry `ssm.*`
    /// or `wkv.*` hyperparameters and tensors instead of an attention cache.
    pub fn is_recurrent(&self) -> bool {
        let Some(arch) = self.architecture() else {
            return false;
        };
        let ssm = format!("{arch}.ssm.");
        let wkv = format!("{arch}.wkv.");
        self.gguf.kv.iter().any(|(k, _)| k.starts_with(&ssm) || k.starts_with(&wkv))
            || self.has_layer_tensor(&["ssm_in", "ssm_conv1d", "time_mix_key", "time_mix_w1"])
    }

    pub fn n_params(&self) -> u64 {
        self.gguf.tensors.iter().map(TensorInfo::n_elements).sum()
    }

    pub fn size_bytes(&self) -> u64 {
        self.gguf.tensors.iter().map(|t| t.size).sum()
    }

    /// The quantisation as llama.cpp names it (`general.file_type`), e.g.
    /// "Q4_1", or the most common tensor type when the key is absent.
    pub fn file_type(&self) -> String {
        if let Some(id) = self.gguf.get_i64("general.file_type") {
            if let Some(name) = file_type_name(id) {
                return name.to_string();
            }
            return format!("unknown ({id})");
        }
        let mut counts = std::collections::BTreeMap::new();
        for t in &self.gguf.tensors {
            if t.shape.len() >= 2 {
                *counts.entry(t.ggml_type).or_insert(0u64) += t.size;
            }
        }
        counts
            .into_iter()
            .max_by_key(|&(_, n)| n)
            .and_then(|(ty, _)| sys::type_traits(ty))
            .map(|tt| tt.name.to_uppercase())
            .unwrap_or_else(|| "unknown".into())
    }

    /// The ggml type name of a tensor, e.g. "q4_1".
    pub fn tensor_type_name(&self, name: &str) -> Option<&'static str> {
        self.gguf.tensor(name).and_then(|t| sys::type_traits(t.ggml_type)).map(|tt| tt.name)
    }
}

/// What a well-known key must hold.
#[derive(Clone, Copy)]
enum Expect {
    /// An integer (or, for per-layer values, an array of integers) in range.
    Int(i64, i64),
    /// A finite number in range.
    Float(f64, f64),
    Str,
    Bool,
    StrArray,
    NumArray,
}

/// Keys under the architecture's prefix.
const ARCH_KEYS: &[(&str, Expect)] = &[
    ("block_count", Expect::Int(1, 1 << 16)),
    ("context_length", Expect::Int(1, 1 << 30)),
    ("embedding_length", Expect::Int(1, 1 << 24)),
    ("feed_forward_length", Expect::Int(0, 1 << 26)),
    ("attention.head_count", Expect::Int(0, 1 << 16)),
    ("attention.head_count_kv", Expect::Int(0, 1 << 16)),
    ("attention.key_length", Expect::Int(1, 1 << 16)),
    ("attention.value_length", Expect::Int(1, 1 << 16)),
    ("attention.sliding_window", Expect::Int(0, 1 << 30)),
    ("vocab_size", Expect::Int(1, 1 << 26)),
    ("rope.dimension_count", Expect::Int(0, 1 << 16)),
    ("rope.freq_base", Expect::Float(0.0, 1e12)),
    ("attention.layer_norm_rms_epsilon", Expect::Float(0.0, 1.0)),
    ("attention.layer_norm_epsilon", Expect::Float(0.0, 1.0)),
];

/// Keys with fixed names.
const GLOBAL_KEYS: &[(&str, Expect)] = &[
    ("general.file_type", Expect::Int(0, 1 << 16)),
    ("general.quantization_version", Expect::Int(0, 1 << 16)),
    ("tokenizer.ggml.model", Expect::Str),
    ("tokenizer.ggml.pre", Expect::Str),
    ("tokenizer.ggml.tokens", Expect::StrArray),
    ("tokenizer.ggml.merges", Expect::StrArray),
    ("tokenizer.ggml.scores", Expect::NumArray),
    ("tokenizer.ggml.token_type", Expect::NumArray),
    ("tokenizer.ggml.bos_token_id", Expect::Int(-1, 1 << 26)),
    ("tokenizer.ggml.eos_token_id", Expect::Int(-1, 1 << 26)),
    ("tokenizer.ggml.add_bos_token", Expect::Bool),
    ("tokenizer.ggml.add_eos_token", Expect::Bool),
    ("tokenizer.ggml.add_space_prefix", Expect::Bool),
];

/// Opens one file of a model: its header, and with `use_mmap` its mapping.
fn open_part(path: &Path, use_mmap: bool, prefetch: bool) -> Result<(Gguf, Part)> {
    let io_err = |e: std::io::Error| Error::Io { path: path.to_path_buf(), reason: e.to_string() };
    // Opening a FIFO blocks until a writer comes, and a device can be
    // endless: only a regular file (through any symlinks) is read.
    let kind = std::fs::metadata(path).map_err(io_err)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device)" };
        return Err(Error::Io { path: path.to_path_buf(), reason: format!("it is {what}") });
    }
    if !use_mmap {
        let gguf = Gguf::open(path)?;
        let part = Part { path: path.to_path_buf(), data_offset: gguf.data_offset, mmap: None };
        return Ok((gguf, part));
    }
    let file = File::open(path).map_err(io_err)?;
    if !file.metadata().map_err(io_err)?.is_file() {
        // replaced between the two looks
        return Err(Error::Io { path: path.to_path_buf(), reason: "it is not a regular file".into() });
    }
    // SAFETY: the mapping is read-only; like llama.cpp we assume the file
    // is not truncated by another process while the model is loaded.
    let mut options = MmapOptions::new();
    if prefetch {
        options.populate();
    }
    let mmap = unsafe { options.map(&file) }.map_err(io_err)?;
    #[cfg(unix)]
    if prefetch {
        // Advice only: a kernel that declines it changes nothing.
        let _ = mmap.advise(memmap2::Advice::WillNeed);
    }
    let gguf = Gguf::parse_bytes(path, &mmap)?;
    let part = Part { path: path.to_path_buf(), data_offset: gguf.data_offset, mmap: Some(mmap) };
    Ok((gguf, part))
}

/// The other files of a split model whose first part is `g` (none for a
/// model in one file), named as llama.cpp names them:
/// PREFIX-00001-of-0000N.gguf is followed by PREFIX-00002-of-0000N.gguf, ...
fn split_parts(g: &Gguf) -> Result<Vec<PathBuf>> {
    let count = match g.get("split.count") {
        None => return Ok(Vec::new()),
        Some(v) => match v.as_i64() {
            Some(0..=1) => return Ok(Vec::new()),
            Some(n @ 2..=99_999) => n,
            _ => {
                let what = format!("split.count is {v:?}, not a number of files (1 to 99999)");
                return Err(Error::Corrupt { path: g.path.clone(), what });
            }
        },
    };
    let no = g.get_i64("split.no").unwrap_or(0);
    if no != 0 {
        let what = format!(
            "it is part {} of a model split in {count} files (split.no = {no}): open the first part, \
             NAME-00001-of-{count:05}.gguf",
            no + 1
        );
        return Err(Error::Invalid { path: g.path.clone(), what });
    }
    let suffix = format!("-00001-of-{count:05}.gguf");
    let name = g.path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let Some(prefix) = name.strip_suffix(&suffix) else {
        let what = format!(
            "it is the first part of a model split in {count} files (split.count), but its name does not end in \
             {suffix}, so the other parts cannot be found"
        );
        return Err(Error::Invalid { path: g.path.clone(), what });
    };
    Ok((2..=count).map(|i| g.path.with_file_name(format!("{prefix}-{i:05}-of-{count:05}.gguf"))).collect())
}

/// Checks the metadata a model cannot do without, and the type and range of
/// well-known keys, so that damage shows up as an error at load time rather
/// than as wrong numbers later.
fn check_metadata(g: &Gguf) -> Result<()> {
    let corrupt = |what: String| Error::Corrupt { path: g.path.clone(), what };
    let arch = match g.get("general.architecture") {
        Some(Value::Str(a)) if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) => {
            a
        }
        Some(v) => return Err(corrupt(format!("general.architecture is {v:?}, not an architecture name"))),
        None => return Err(corrupt("general.architecture is missing".into())),
    };
    let arch_keys = ARCH_KEYS.iter().map(|&(suffix, e)| (format!("{arch}.{suffix}"), e));
    let global_keys = GLOBAL_KEYS.iter().map(|&(k, e)| (k.to_string(), e));
    for (key, expect) in arch_keys.chain(global_keys) {
        if let Some(v) = g.get(&key) {
            if !value_fits(v, expect) {
                return Err(corrupt(format!("{key} has an implausible value {}", short_debug(v))));
            }
        }
    }
    if let Some(tokens) = g.get_array("tokenizer.ggml.tokens") {
        for key in ["tokenizer.ggml.scores", "tokenizer.ggml.token_type"] {
            if let Some(a) = g.get_array(key) {
                if a.len() != tokens.len() {
                    return Err(corrupt(format!(
                        "{key} has {} entries but there are {} tokens",
                        a.len(),
                        tokens.len()
                    )));
                }
            }
        }
    }
    let n_layer = g.arch_value("block_count").and_then(Value::as_i64);
    for t in &g.tensors {
        if !t.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            return Err(corrupt(format!("tensor name {:?} has unexpected characters", t.name)));
        }
        let layer = t.name.strip_prefix("blk.").and_then(|r| r.split('.').next());
        if let (Some(layer), Some(n_layer)) = (layer, n_layer) {
            match layer.parse::<i64>() {
                Ok(il) if il < n_layer => {}
                _ => return Err(corrupt(format!("tensor '{}' names a layer outside 0..{n_layer}", t.name))),
            }
        }
    }
    Ok(())
}

fn value_fits(v: &Value, expect: Expect) -> bool {
    match (expect, v) {
        (Expect::Int(lo, hi), Value::Array(a)) => (0..a.len()).all(|i| a.int_at(i).is_some_and(|x| x >= lo && x <= hi)),
        (Expect::Int(lo, hi), v) => v.as_i64().is_some_and(|x| x >= lo && x <= hi),
        (Expect::Float(lo, hi), Value::F32(_) | Value::F64(_)) => {
            v.as_f64().is_some_and(|x| x.is_finite() && x > lo && x <= hi)
        }
        (Expect::Str, Value::Str(_)) | (Expect::Bool, Value::Bool(_)) => true,
        (Expect::StrArray, Value::Array(a)) => matches!(a, crate::engine::model::gguf::Array::Str(_)),
        (Expect::NumArray, Value::Array(a)) => a.to_f32_vec().is_some(),
        _ => false,
    }
}

fn short_debug(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("(array of {} {})", a.len(), a.element_type().name()),
        v => format!("{v:?}").chars().take(60).collect(),
    }
}

fn first_int(v: &Value) -> Option<i64> {
    // Some models store per-layer values as arrays (e.g. head_count_kv).
    v.as_array().and_then(|a| a.int_at(0))
}

/// llama.cpp's names for `general.file_type` (`llama_ftype`).
fn file_type_name(id: i64) -> Option<&'static str> {
    const NAMES: &[(i64, &str)] = &[
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (4, "Q4_1_SOME_F16"),
        (7, "Q8_0"),
        (8, "Q5_0"),
        (9, "Q5_1"),
        (10, "Q2_K"),
        (11, "Q3_K_S"),
        (12, "Q3_K_M"),
        (13, "Q3_K_L"),
        (14, "Q4_K_S"),
        (15, "Q4_K_M"),
        (16, "Q5_K_S"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (19, "IQ2_XXS"),
        (20, "IQ2_XS"),
        (21, "Q2_K_S"),
        (22, "IQ3_XS"),
        (23, "IQ3_XXS"),
        (24, "IQ1_S"),
        (25, "IQ4_NL"),
        (26, "IQ3_S"),
        (27, "IQ3_M"),
        (28, "IQ2_S"),
        (29, "IQ2_M"),
        (30, "IQ4_XS"),
        (31, "IQ1_M"),
        (32, "BF16"),
        (36, "TQ1_0"),
        (37, "TQ2_0"),
        (38, "MXFP4_MOE"),
        (39, "NVFP4"),
        (40, "Q1_0"),
        (41, "Q2_0"),
    ];
    NAMES.iter().find(|&&(i, _)| i == id).map(|&(_, n)| n)
}
