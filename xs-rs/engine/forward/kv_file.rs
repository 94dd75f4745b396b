//! Saved KV caches: the file a conversation's cache is written to and read
//! back from, so that a later session continues it without evaluating its
//! tokens again.
//!
//! Format version 3, all integers little-endian. Versions 1 and 2 are still
//! read: version 1 has 0 at 52..56 and f16 keys and values; both stored
//! every layer's rows as wide as the widest layer's, which version 3 does
//! only for V stored transposed, so they are read for models whose layers
//! all have one width (not Gemma 4's).
//!
//! | bytes    | what                                                         |
//! |----------|--------------------------------------------------------------|
//! | 0..8     | magic `LUGHKVC\0`                                            |
//! | 8..12    | format version (u32, 3)                                      |
//! | 12..16   | flags (u32): bit 0 set = V stored transposed (flash attn off) |
//! | 16..24   | model fingerprint (u64, [`Model::fingerprint`])              |
//! | 24..52   | n_layer, n_embd_k_gqa, n_embd_v_gqa, n_ctx, kv_size, ggml type of K (1 = f16), n_tokens (u32 each) |
//! | 52..56   | ggml type of V (u32)                                         |
//! | 56..88   | architecture name, UTF-8, NUL-padded                         |
//! | 88..248  | model name (`general.name`), UTF-8, NUL-padded               |
//! | 248..256 | XXH64 of bytes 0..248                                        |
//! | then     | the n_tokens token ids (i32)                                 |
//! | then     | per layer: the K of cells 0..n_tokens, then their V; for a recurrent layer its state |
//! | last 8   | XXH64 of everything before it                                |
//!
//! K of a layer is n_tokens rows of its own K width (n_embd_k_gqa unless
//! its heads differ from the widest layer's) in its type (position by
//! position, as the tensor holds them); V likewise, or, stored transposed,
//! n_embd_v_gqa rows (one per channel) of n_tokens values. Only the filled
//! cells are written. A recurrent layer (Qwen3.5's delta-net) has no cells
//! but one state of the sequence: its convolution state, then its
//! delta-rule state, f32 values of a size the model fixes. The header has its own checksum, so a damaged header
//! is reported as damage before any of its fields is believed.
//!
//! A file is loaded only into a session of the same model (fingerprint),
//! n_ctx and flash-attention setting: the keys and values are what that
//! model computed with that attention kernel, and only then does
//! continuing from them give the tokens that continuing without saving
//! would have given.
use crate::engine::forward::kv_cache::{CacheLayout, KvCache, Part};
use crate::engine::xxhash::Xxh64;
use crate::engine::{ggml::sys, Error, Result};
use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub const MAGIC: &[u8; 8] = b"LUGHKVC\0";
pub const FORMAT_VERSION: u32 = 3;
const HEADER_LEN: usize = 256;
const HEADER_SUM_AT: usize = HEADER_LEN - 8;
const ARCH_FIELD: std::ops::Range<usize> = 56..88;
const NAME_FIELD: std::ops::Range<usize> = 88..248;
const FLAG_V_TRANSPOSED: u32 = 1;
const CHECKSUM_LEN: u64 = 8;
/// Bytes read or written at a time.
const IO_BUFFER: usize = 1 << 20;

/// The model a cache was made with, as a saved cache records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelId {
    pub fingerprint: u64,
    pub name: String,
    pub architecture: String,
}

impl std::fmt::Display for ModelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "'{}' ({}, fingerprint {:016x})", self.name, self.architecture, self.fingerprint)
    }
}

/// What a session needs a loaded cache to be.
pub struct Target {
    pub model: ModelId,
    pub layout: CacheLayout,
    pub n_ctx: usize,
    pub n_vocab: usize,
}

/// The header fields of a saved cache.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    version: u32,
    model: ModelId,
    n_layer: u32,
    n_embd_k_gqa: u32,
    n_embd_v_gqa: u32,
    n_ctx: u32,
    kv_size: u32,
    v_trans: bool,
    type_k: u32,
    type_v: u32,
    n_tokens: u32,
}

/// A count as the header's u32 (the engine's limits keep them far below).
fn field(what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Argument(format!("the KV cache's {what} {v} does not fit in a saved cache")))
}

impl Header {
    fn of(cache: &KvCache, model: &ModelId) -> Result<Header> {
        let l = cache.layout();
        Ok(Header {
            version: FORMAT_VERSION,
            model: model.clone(),
            n_layer: field("n_layer", l.n_layer)?,
            n_embd_k_gqa: field("n_embd_k_gqa", l.n_embd_k_gqa)?,
            n_embd_v_gqa: field("n_embd_v_gqa", l.n_embd_v_gqa)?,
            n_ctx: field("n_ctx", cache.n_ctx())?,
            kv_size: field("kv_size", l.kv_size)?,
            v_trans: l.v_trans,
            type_k: l.type_k as u32,
            type_v: l.type_v as u32,
            n_tokens: field("n_cached", cache.n_cached())?,
        })
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        let flags = if self.v_trans { FLAG_V_TRANSPOSED } else { 0 };
        for (i, v) in [FORMAT_VERSION, flags].into_iter().enumerate() {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[16..24].copy_from_slice(&self.model.fingerprint.to_le_bytes());
        let counts = [
            self.n_layer,
            self.n_embd_k_gqa,
            self.n_embd_v_gqa,
            self.n_ctx,
            self.kv_size,
            self.type_k,
            self.n_tokens,
            self.type_v,
        ];
        for (i, v) in counts.into_iter().enumerate() {
            b[24 + 4 * i..28 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        put_text(&mut b[ARCH_FIELD], &self.model.architecture);
        put_text(&mut b[NAME_FIELD], &self.model.name);
        let sum = crate::engine::xxhash::xxh64(&b[..HEADER_SUM_AT]);
        b[HEADER_SUM_AT..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The fields of a header whose magic, version and checksum are right.
    fn decode(path: &Path, b: &[u8; HEADER_LEN]) -> Result<Header> {
        check_magic_and_version(path, b)?;
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let sum = u64::from_le_bytes(b[HEADER_SUM_AT..].try_into().expect("8 bytes"));
        if crate::engine::xxhash::xxh64(&b[..HEADER_SUM_AT]) != sum {
            return Err(corrupt(path, "the header's checksum does not match its content (the header is damaged)"));
        }
        let flags = u32_at(12);
        if flags & !FLAG_V_TRANSPOSED != 0 {
            return Err(corrupt(path, format!("unknown flags {flags:#x} in the header")));
        }
        // version 1 stored both as the one type at 44
        let type_v = if u32_at(8) == 1 { u32_at(44) } else { u32_at(52) };
        Ok(Header {
            version: u32_at(8),
            model: ModelId {
                fingerprint: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
                name: get_text(&b[NAME_FIELD]),
                architecture: get_text(&b[ARCH_FIELD]),
            },
            n_layer: u32_at(24),
            n_embd_k_gqa: u32_at(28),
            n_embd_v_gqa: u32_at(32),
            n_ctx: u32_at(36),
            kv_size: u32_at(40),
            v_trans: flags & FLAG_V_TRANSPOSED != 0,
            type_k: u32_at(44),
            type_v,
            n_tokens: u32_at(48),
        })
    }

    /// Refuses a cache that the target session cannot continue from.
    fn check_fits(&self, path: &Path, target: &Target) -> Result<()> {
        let refuse = |what: String| Err(Error::CacheMismatch { path: path.to_path_buf(), what });
        if self.model.fingerprint != target.model.fingerprint {
            return refuse(format!(
                "it was saved for the model {}, but this session runs {}",
                self.model, target.model
            ));
        }
        if self.n_ctx as usize != target.n_ctx {
            return refuse(format!(
                "it was saved from a session with n_ctx {}, and this session has n_ctx {} (load it into a session \
                 with n_ctx {})",
                self.n_ctx, target.n_ctx, self.n_ctx
            ));
        }
        if self.v_trans != target.layout.v_trans {
            let fa = |v_trans: bool| if v_trans { "off" } else { "on" };
            return refuse(format!(
                "it was saved with flash attention {} (V {}), and this session has flash_attn {} (the cached values \
                 depend on the attention kernel: load it into a session with flash_attn => {})",
                fa(self.v_trans),
                if self.v_trans { "stored transposed" } else { "stored by position" },
                fa(target.layout.v_trans),
                u8::from(!self.v_trans)
            ));
        }
        let l = &target.layout;
        let name = |t: u32| sys::type_traits(t).map_or_else(|| format!("type {t}"), |t| t.name.into());
        for (what, saved, own) in [("keys", self.type_k, l.type_k), ("values", self.type_v, l.type_v)] {
            if saved != own as u32 {
                let option = if what == "keys" { "type_k" } else { "type_v" };
                return refuse(format!(
                    "it stores its {what} as {}, and this session stores them as {} (load it into a session with \
                     {option} => '{}')",
                    name(saved),
                    name(own as u32),
                    name(saved)
                ));
            }
        }
        let l = &target.layout;
        let have = [self.n_layer, self.n_embd_k_gqa, self.n_embd_v_gqa, self.kv_size].map(|v| v as usize);
        if have != [l.n_layer, l.n_embd_k_gqa, l.n_embd_v_gqa, l.kv_size] {
            return Err(corrupt(
                path,
                format!(
                    "its header gives n_layer {}, n_embd_k_gqa {}, n_embd_v_gqa {}, kv_size {}, which its model \
                     (this session's: n_layer {}, n_embd_k_gqa {}, n_embd_v_gqa {}, kv_size {}) does not have",
                    have[0], have[1], have[2], have[3], l.n_layer, l.n_embd_k_gqa, l.n_embd_v_gqa, l.kv_size
                ),
            ));
        }
        if self.version < 3 && l.has_narrow_layers() {
            return refuse(format!(
                "it was saved in format version {} by an earlier Lugh, which stored this model's narrower layers \
                 padded to the widest layer's width; this Lugh keeps each layer at its own width (evaluate the \
                 prompt again and save the cache anew)",
                self.version
            ));
        }
        if self.n_tokens > self.n_ctx {
            return Err(corrupt(
                path,
                format!("it holds {} positions, more than its n_ctx {}", self.n_tokens, self.n_ctx),
            ));
        }
        Ok(())
    }

    /// The parts of the file after the header, in order: (what, bytes).
    fn sections(&self, layout: &CacheLayout) -> Vec<(String, u64)> {
        let n = self.n_tokens as usize;
        let mut parts = vec![("the token list".to_string(), 4 * n as u64)];
        for il in 0..layout.n_layer {
            if layout.is_recurrent(il) {
                parts.push((format!("the recurrent state of layer {il}"), layout.state_bytes(il) as u64));
                continue;
            }
            if !layout.holds_kv(il) {
                continue;
            }
            parts.push((format!("the keys of layer {il}"), layout.cells_bytes(il, Part::K, n) as u64));
            parts.push((format!("the values of layer {il}"), layout.cells_bytes(il, Part::V, n) as u64));
        }
        parts.push(("the checksum".to_string(), CHECKSUM_LEN));
        parts
    }
}

/// Checks the magic and the format version, as far as `start` (the file's
/// first bytes, perhaps fewer than a header) has them.
fn check_magic_and_version(path: &Path, start: &[u8]) -> Result<()> {
    let magic_part = start.len().min(MAGIC.len());
    if start[..magic_part] != MAGIC[..magic_part] {
        return Err(Error::NotSavedCache { path: path.to_path_buf() });
    }
    if let Some(v) = start.get(8..12) {
        let version = u32::from_le_bytes(v.try_into().expect("4 bytes"));
        if !(1..=FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedCacheVersion { path: path.to_path_buf(), version, readable: FORMAT_VERSION });
        }
    }
    Ok(())
}

/// `text` into a NUL-padded field, cut at a character boundary if longer.
fn put_text(field: &mut [u8], text: &str) {
    let mut end = text.len().min(field.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    field[..end].copy_from_slice(&text.as_bytes()[..end]);
}

fn get_text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn corrupt(path: &Path, what: impl Into<String>) -> Error {
    Error::Corrupt { path: path.to_path_buf(), what: what.into() }
}

/// The file keeps f16 values little-endian; the tensors hold them in the
/// machine's order.
fn f16_to_or_from_le(bytes: &mut [u8]) {
    if cfg!(target_endian = "big") {
        for pair in bytes.chunks_exact_mut(2) {
            pair.swap(0, 1);
        }
    }
}

/// The file keeps f32 values little-endian; the tensors hold them in the
/// machine's order.
fn f32_to_or_from_le(bytes: &mut [u8]) {
    if cfg!(target_endian = "big") {
        for word in bytes.chunks_exact_mut(4) {
            word.reverse();
        }
    }
}

/// Source of unique temporary names, for saves running at once.
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

/// Writes `cache` (its token history and the K/V of its filled cells) to
/// `path`: to a temporary file beside it, flushed to disk, then renamed
/// over `path`, so that `path` holds either the old or the new file
/// whatever happens.
pub fn save(path: &Path, cache: &KvCache, model: &ModelId) -> Result<()> {
    let write_err = |reason: String| Error::Write { path: path.to_path_buf(), reason };
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(write_err("it is a directory".into()));
    }
    let header = Header::of(cache, model)?;
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".tmp-{}-{}", std::process::id(), NEXT_TEMP.fetch_add(1, Ordering::Relaxed)));
    let temp = PathBuf::from(temp);
    let started = std::time::Instant::now();
    let written = write_file(&temp, &header, cache).map_err(|e| write_err(e.to_string())).and_then(|size| {
        std::fs::rename(&temp, path)
            .map_err(|e| write_err(format!("cannot rename the temporary file '{}' to it: {e}", temp.display())))?;
        Ok(size)
    });
    match written {
        Ok(size) => {
            crate::debug_log!(
                "saved a KV cache of {} positions to '{}': {:.1} MiB in {:.1} ms",
                cache.n_cached(),
                path.display(),
                crate::engine::debug::mib(size as usize),
                started.elapsed().as_secs_f64() * 1e3
            );
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// A writer that hashes what goes through it.
struct HashingWriter<W: Write> {
    inner: W,
    hash: Xxh64,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hash.update(bytes);
        self.written += bytes.len() as u64;
        self.inner.write_all(bytes)
    }
}

/// Writes the whole file at `path`; its size.
fn write_file(path: &Path, header: &Header, cache: &KvCache) -> std::io::Result<u64> {
    let file = File::create(path)?;
    let mut w = HashingWriter { inner: BufWriter::with_capacity(IO_BUFFER, file), hash: Xxh64::new(0), written: 0 };
    w.put(&header.encode())?;
    let tokens: Vec<u8> = cache.tokens().iter().flat_map(|t| t.to_le_bytes()).collect();
    w.put(&tokens)?;
    let n = cache.n_cached();
    let mut cells = Vec::new();
    for il in 0..cache.n_layer() {
        if cache.layout().is_recurrent(il) {
            cells.resize(cache.layer_state_bytes(il), 0);
            cache.read_layer_state(il, &mut cells);
            f32_to_or_from_le(&mut cells);
            w.put(&cells)?;
            continue;
        }
        if !cache.layout().holds_kv(il) {
            continue;
        }
        for part in [Part::K, Part::V] {
            cells.resize(cache.layout().cells_bytes(il, part, n), 0);
            cache.read_cells(il, part, n, &mut cells);
            f16_to_or_from_le(&mut cells);
            w.put(&cells)?;
        }
    }
    let sum = w.hash.digest();
    w.put(&sum.to_le_bytes())?;
    let file = w.inner.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(w.written)
}

/// A reader of a saved cache that hashes what it reads and names the part
/// of the file a read failed in.
struct SavedCacheReader<'a> {
    path: &'a Path,
    inner: BufReader<File>,
    hash: Xxh64,
}

impl SavedCacheReader<'_> {
    fn take(&mut self, out: &mut [u8], what: &str) -> Result<()> {
        self.inner.read_exact(out).map_err(|e| match e.kind() {
            ErrorKind::UnexpectedEof => Error::Truncated { path: self.path.to_path_buf(), what: what.to_string() },
            _ => Error::Io { path: self.path.to_path_buf(), reason: e.to_string() },
        })?;
        self.hash.update(out);
        Ok(())
    }
}

/// Reads the saved cache at `path` into a cache from `new_cache` (called
/// once the file is known to fit `target`), checking the magic, version and
/// header checksum, the model and settings it was saved with against
/// `target`, and the file's size against its header before reading on,
/// then the checksum of the whole and each token id before returning the
/// cache. Nothing the file says is used before it is checked, so a damaged
/// or hostile file gives an error naming the file and what is wrong, never
/// a crash or an allocation larger than the session's cache.
pub fn load(path: &Path, target: &Target, new_cache: impl FnOnce() -> Result<KvCache>) -> Result<KvCache> {
    let io_err = |e: std::io::Error| Error::Io { path: path.to_path_buf(), reason: e.to_string() };
    let started = std::time::Instant::now();
    // Opening a FIFO blocks until a writer comes, and a device can be endless.
    let kind = std::fs::metadata(path).map_err(io_err)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device)" };
        return Err(Error::Io { path: path.to_path_buf(), reason: format!("it is {what}") });
    }
    let file = File::open(path).map_err(io_err)?;
    let file_size = file.metadata().map_err(io_err)?.len();
    let mut r = SavedCacheReader { path, inner: BufReader::with_capacity(IO_BUFFER, file), hash: Xxh64::new(0) };

    let mut head = [0u8; HEADER_LEN];
    let have = file_size.min(HEADER_LEN as u64) as usize;
    r.take(&mut head[..have], "the header")?;
    if have < HEADER_LEN {
        // Too short for a header: another file, or a saved cache cut off.
        check_magic_and_version(path, &head[..have])?;
        return Err(Error::Truncated { path: path.to_path_buf(), what: "the header".into() });
    }
    let header = Header::decode(path, &head)?;
    header.check_fits(path, target)?;

    let sections = header.sections(&target.layout);
    let expected = sections.iter().fold(HEADER_LEN as u64, |at, (_, len)| at + len);
    if file_size < expected {
        let mut at = HEADER_LEN as u64;
        let (inside, _) = sections
            .iter()
            .find(|(_, len)| {
                at += len;
                at > file_size
            })
            .expect("the sections end beyond the file");
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            what: format!(
                "{inside} (its header announces {} positions in {expected} bytes; it has {file_size})",
                header.n_tokens
            ),
        });
    }
    if file_size > expected {
        return Err(corrupt(
            path,
            format!(
                "{} bytes follow the checksum (its header announces {} positions in {expected} bytes)",
                file_size - expected,
                header.n_tokens
            ),
        ));
    }

    let n = header.n_tokens as usize;
    let mut bytes = vec![0u8; 4 * n];
    r.take(&mut bytes, &sections[0].0)?;
    let tokens: Vec<i32> = bytes.chunks_exact(4).map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
    let mut cache = new_cache()?;
    let mut what = sections[1..].iter().map(|(w, _)| w);
    for il in 0..target.layout.n_layer {
        if target.layout.is_recurrent(il) {
            bytes.resize(target.layout.state_bytes(il), 0);
            r.take(&mut bytes, what.next().expect("one section per state"))?;
            f32_to_or_from_le(&mut bytes);
            cache.write_layer_state(il, &bytes);
            continue;
        }
        if !target.layout.holds_kv(il) {
            continue;
        }
        for part in [Part::K, Part::V] {
            bytes.resize(target.layout.cells_bytes(il, part, n), 0);
            r.take(&mut bytes, what.next().expect("one section per part"))?;
            f16_to_or_from_le(&mut bytes);
            cache.write_cells(il, part, n, &bytes);
        }
    }
    let computed = r.hash.digest();
    let mut sum = [0u8; CHECKSUM_LEN as usize];
    r.take(&mut sum, "the checksum")?;
    if u64::from_le_bytes(sum) != computed {
        return Err(corrupt(path, "the checksum does not match the content (the file is damaged)"));
    }
    if let Some((pos, id)) = tokens.iter().enumerate().find(|&(_, &id)| id < 0 || id as usize >= target.n_vocab) {
        return Err(corrupt(
            path,
            format!("token {pos} of its history is id {id}, outside the model's vocabulary [0, {})", target.n_vocab),
        ));
    }
    cache.tokens_loaded(&tokens);
    crate::debug_log!(
        "loaded a KV cache of {n} positions from '{}': {:.1} MiB in {:.1} ms",
        path.display(),
        crate::engine::debug::mib(file_size as usize),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(cache)
}

#[cfg(test)]
#[path = "kv_file_tests.rs"]
mod tests;
