//! A reader for GGUF files (versions 2 and 3): metadata key/values and tensor
//! descriptors. It checks every length and offset against the file's size
//! before trusting it, so a truncated or corrupt file gives an error naming
//! what is wrong, never a crash or a huge allocation.
use crate::engine::ggml::sys;
pub use crate::engine::model::gguf_value::{Array, Value, ValueType};
use crate::engine::{Error, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// A sanity bound on names (keys, tensor names); llama.cpp's are < 100 bytes.
const MAX_NAME_LEN: u64 = 65536;
const MAX_DIMS: usize = 4;
/// The header's in-memory size (metadata and tensor descriptors, counted
/// with allocator overhead, see `Reader::charge`) may be at most this many
/// times the file's size, or `HEADER_MEM_FLOOR` for a small file: a file
/// of a million empty keys must not take fifteen times its size in RAM.
/// Real files stay below 4x (a vocabulary: 24-byte strings of ~7 bytes).
pub const HEADER_MEM_PER_FILE_BYTE: u64 = 8;
pub const HEADER_MEM_FLOOR: u64 = 1 << 20;
/// What one heap allocation of `n` bytes costs, malloc's overhead included.
fn alloc_cost(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        n.div_ceil(16) * 16 + 16
    }
}
/// One key/value: its Vec slot and its index entry (a hash table rounds its
/// slots up to a power of two above 8/7 of the count: up to twice as many
/// slots as entries, each with a control byte), before the key's bytes.
const KV_COST: u64 = (std::mem::size_of::<(String, Value)>() + 2 * (std::mem::size_of::<(String, usize)>() + 1)) as u64;
/// One tensor descriptor: its Vec slot and index entry, before the name and shape.
const TENSOR_COST: u64 = (std::mem::size_of::<TensorInfo>() + 2 * (std::mem::size_of::<(String, usize)>() + 1)) as u64;

/// One tensor's descriptor.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ggml type id (`ggml_type`).
    pub ggml_type: u32,
    /// Shape in ggml order (ne[0] is the contiguous dimension); length = n_dims.
    pub shape: Vec<u64>,
    /// Offset of the data from the start of the data section (of its part's
    /// file, for a model split in several files).
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: u64,
    /// Which file of a split model holds the data (0: the first, or the only).
    pub part: usize,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// The ggml shape padded to 4 dimensions with ones.
    pub fn ne(&self) -> [i64; 4] {
        let mut ne = [1i64; 4];
        for (d, &n) in self.shape.iter().enumerate() {
            ne[d] = n as i64;
        }
        ne
    }
}

/// The parsed header of a GGUF file (metadata and tensor descriptors, not the data).
#[derive(Debug)]
pub struct Gguf {
    pub path: PathBuf,
    pub version: u32,
    /// Key/values in file order.
    pub kv: Vec<(String, Value)>,
    kv_index: HashMap<String, usize>,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
    #[cfg(test)]
    pub file_size: u64,
    /// Estimated bytes of memory the parsed header takes (see `Reader::charge`).
    #[cfg(test)]
    pub header_mem: u64,
}

impl Gguf {
    /// Reads and checks the header of the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<Gguf> {
        let io_err = |e: std::io::Error| Error::Io { path: path.to_path_buf(), reason: e.to_string() };
        let kind = std::fs::metadata(path).map_err(io_err)?.file_type();
        if !kind.is_file() {
            // a FIFO would block the open, a device never end
            let what = if kind.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device)" };
            return Err(Error::Io { path: path.to_path_buf(), reason: format!("it is {what}") });
        }
        let file = File::open(path).map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(Error::Io { path: path.to_path_buf(), reason: "it is not a regular file".into() });
        }
        Self::parse(path, BufReader::with_capacity(1 << 20, file), meta.len())
    }

    /// Parses a header from bytes in memory (used by tests and for mapped files).
    pub fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<Gguf> {
        Self::parse(path, bytes, bytes.len() as u64)
    }

    fn parse<R: Read>(path: &Path, source: R, file_size: u64) -> Result<Gguf> {
        let mem_limit = file_size.saturating_mul(HEADER_MEM_PER_FILE_BYTE).max(HEADER_MEM_FLOOR);
        let mut r = Reader { source, pos: 0, file_size, path, mem: 0, mem_limit };
        let mut magic = [0u8; 4];
        r.bytes_into(&mut magic, "the magic number").map_err(|e| match e {
            Error::Truncated { .. } => Error::NotGguf { path: path.to_path_buf() },
            e => e,
        })?;
        if &magic != MAGIC {
            return Err(Error::NotGguf { path: path.to_path_buf() });
        }
        let version = r.u32("the version")?;
        if version != 2 && version != 3 {
            return Err(Error::UnsupportedVersion { path: path.to_path_buf(), version });
        }
        let n_tensors = r.u64("the tensor count")?;
        let n_kv = r.u64("the key/value count")?;
        // Each key/value takes at least 8+4+1 bytes, each tensor at least 8+4+8+4+8.
        r.check_room(n_kv, 13, "the key/value list")?;
        r.check_room(n_tensors, 32, "the tensor list")?;
        r.charge(n_kv.saturating_mul(KV_COST), "the key/value list")?;
        r.charge(n_tensors.saturating_mul(TENSOR_COST), "the tensor list")?;

        let (kv, kv_index) = r.key_values(n_kv)?;
        let alignment = match kv_index.get("general.alignment").map(|&i| &kv[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if *a > 0 && a.is_power_of_two() => *a as u64,
            Some(v) => return Err(r.corrupt(format!("general.alignment is {v:?}, not a power of two (uint32)"))),
        };
        let (tensors, tensor_index) = r.tensor_infos(n_tensors)?;

        let data_offset = r.pos.div_ceil(alignment) * alignment;
        if n_tensors > 0 && data_offset > file_size {
            return Err(r.truncated("the padding before the tensor data".into()));
        }
        let data_size = file_size.saturating_sub(data_offset);
        r.check_tensor_bounds(&tensors, data_size, alignment)?;
        r.check_tensor_layout(&tensors, data_size, alignment)?;
        Ok(Gguf {
            path: path.to_path_buf(),
            version,
            kv,
            kv_index,
            tensors,
            tensor_index,
            data_offset,
            #[cfg(test)]
            file_size,
            #[cfg(test)]
            header_mem: r.mem,
        })
    }

    /// Adds the tensors of `other`, part `part` of the split model whose
    /// first part this is (their offsets are into that part's data).
    pub fn add_part_tensors(&mut self, other: Gguf, part: usize) -> Result<()> {
        for mut t in other.tensors {
            if self.tensor_index.contains_key(&t.name) {
                let what = format!("tensor {} is also in an earlier part of the split model", t.name);
                return Err(Error::Corrupt { path: other.path.clone(), what });
            }
            t.part = part;
            self.tensor_index.insert(t.name.clone(), self.tensors.len());
            self.tensors.push(t);
        }
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kv_index.get(key).map(|&i| &self.kv[i].1)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    pub fn get_array(&self, key: &str) -> Option<&Array> {
        self.get(key)?.as_array()
    }

    /// The string array under `key` (e.g. tokenizer.ggml.tokens).
    pub fn get_str_array(&self, key: &str) -> Option<&[String]> {
        match self.get_array(key)? {
            Array::Str(v) => Some(v),
            _ => None,
        }
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// `general.architecture`, the prefix of the hyperparameter keys.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// An architecture-prefixed key, e.g. `arch_key("block_count")` →
    /// the value of `llama.block_count`.
    pub fn arch_value(&self, suffix: &str) -> Option<&Value> {
        self.get(&format!("{}.{suffix}", self.architecture()?))
    }
}

/// Entries in file order, and the position of each by its name.
type Indexed<T> = (Vec<T>, HashMap<String, usize>);

/// A position-tracking reader that knows how many bytes the file has left.
struct Reader<'a, R: Read> {
    source: R,
    pos: u64,
    file_size: u64,
    path: &'a Path,
    /// Estimated bytes of memory the header takes so far, and the bound.
    mem: u64,
    mem_limit: u64,
}

impl<R: Read> Reader<'_, R> {
    fn truncated(&self, what: String) -> Error {
        Error::Truncated { path: self.path.to_path_buf(), what }
    }

    fn corrupt(&self, what: String) -> Error {
        Error::Corrupt { path: self.path.to_path_buf(), what: format!("{what} (at byte {})", self.pos) }
    }

    fn remaining(&self) -> u64 {
        self.file_size.saturating_sub(self.pos)
    }

    /// Fails unless `count` items of at least `min_size` bytes can still fit.
    fn check_room(&self, count: u64, min_size: u64, what: &str) -> Result<()> {
        match count.checked_mul(min_size) {
            Some(need) if need <= self.remaining() => Ok(()),
            _ => {
                Err(self.truncated(format!("{what} ({count} entries announced, only {} bytes left)", self.remaining())))
            }
        }
    }

    /// Counts `bytes` of memory for `what` before they are allocated, and
    /// fails once the header would take more than its bound.
    fn charge(&mut self, bytes: u64, what: &str) -> Result<()> {
        self.mem = self.mem.saturating_add(bytes);
        if self.mem > self.mem_limit {
            return Err(self.corrupt(format!(
                "its metadata would take more than {} bytes of memory (at {what}; the limit is {HEADER_MEM_PER_FILE_BYTE} \
                 times the file size of {} bytes, at least {HEADER_MEM_FLOOR})",
                self.mem_limit, self.file_size
            )));
        }
        Ok(())
    }

    fn bytes_into(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        if (buf.len() as u64) > self.remaining() {
            return Err(self.truncated(what.to_string()));
        }
        self.source.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => self.truncated(what.to_string()),
            _ => Error::Io { path: self.path.to_path_buf(), reason: e.to_string() },
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn array_of<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.bytes_into(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array_of(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array_of(what)?))
    }

    fn string_bytes(&mut self, what: &str, max_len: u64) -> Result<Vec<u8>> {
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(self.truncated(format!("{what} ({len} bytes announced, {} left)", self.remaining())));
        }
        if len > max_len {
            return Err(self.corrupt(format!("{what} has an implausible length {len}")));
        }
        let mut buf = vec![0u8; len as usize];
        self.bytes_into(&mut buf, what)?;
        Ok(buf)
    }

    fn string(&mut self, what: &str, max_len: u64) -> Result<String> {
        let bytes = self.string_bytes(what, max_len)?;
        String::from_utf8(bytes).map_err(|_| self.corrupt(format!("{what} is not valid UTF-8")))
    }

    fn name(&mut self, what: &str) -> Result<String> {
        self.string(what, MAX_NAME_LEN)
    }

    fn value(&mut self, vtype: ValueType, key: &str, depth: u32) -> Result<Value> {
        let what = format!("the value of key '{key}'");
        Ok(match vtype {
            ValueType::U8 => Value::U8(self.array_of::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array_of::<1>(&what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array_of(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array_of(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array_of(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array_of(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array_of(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array_of(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array_of(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array_of(&what)?)),
            ValueType::Bool => Value::Bool(self.bool(&what, key)?),
            ValueType::Str => {
                let v = self.string(&what, u64::MAX)?;
                self.charge(alloc_cost(v.len() as u64), &what)?;
                Value::Str(v)
            }
            ValueType::Array => Value::Array(self.array(key, depth)?),
        })
    }

    fn bool(&mut self, what: &str, key: &str) -> Result<bool> {
        match self.array_of::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.corrupt(format!("key '{key}' holds the bool value {b}"))),
        }
    }

    fn array(&mut self, key: &str, depth: u32) -> Result<Array> {
        if depth > 8 {
            return Err(self.corrupt(format!("key '{key}' nests arrays more than 8 deep")));
        }
        let what = format!("the array of key '{key}'");
        let type_id = self.u32(&what)?;
        let etype = ValueType::from_id(type_id)
            .ok_or_else(|| self.corrupt(format!("key '{key}' is an array of unknown type {type_id}")))?;
        let n = self.u64(&what)?;
        self.check_room(n, etype.min_size(), &what)?;
        let slot = match etype {
            ValueType::Str => std::mem::size_of::<String>(),
            ValueType::Array => std::mem::size_of::<Array>(),
            _ => etype.min_size() as usize,
        } as u64;
        self.charge(alloc_cost(n.saturating_mul(slot)), &what)?;
        let n = n as usize;
        macro_rules! numbers {
            ($variant:ident, $t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let mut raw = vec![0u8; n * W];
                self.bytes_into(&mut raw, &what)?;
                Array::$variant(raw.chunks_exact(W).map(|c| <$t>::from_le_bytes(c.try_into().unwrap())).collect())
            }};
        }
        Ok(match etype {
            ValueType::U8 => numbers!(U8, u8),
            ValueType::I8 => numbers!(I8, i8),
            ValueType::U16 => numbers!(U16, u16),
            ValueType::I16 => numbers!(I16, i16),
            ValueType::U32 => numbers!(U32, u32),
            ValueType::I32 => numbers!(I32, i32),
            ValueType::F32 => numbers!(F32, f32),
            ValueType::U64 => numbers!(U64, u64),
            ValueType::I64 => numbers!(I64, i64),
            ValueType::F64 => numbers!(F64, f64),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.bool(&what, key)?);
                }
                Array::Bool(v)
            }
            ValueType::Str => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let e = self.string(&what, u64::MAX)?;
                    self.charge(alloc_cost(e.len() as u64), &what)?;
                    v.push(e);
                }
                Array::Str(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array(key, depth + 1)?);
                }
                Array::Nested(v)
            }
        })
    }

    /// The `n_kv` key/values, in file order and indexed by key.
    fn key_values(&mut self, n_kv: u64) -> Result<Indexed<(String, Value)>> {
        let mut kv = Vec::with_capacity(n_kv as usize);
        let mut kv_index = HashMap::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key = self.name(&format!("the name of key/value #{i}"))?;
            if key.is_empty() {
                return Err(self.corrupt(format!("key/value #{i} has an empty name")));
            }
            // the key is held twice: in the list and in the index
            self.charge(2 * alloc_cost(key.len() as u64), &format!("key '{key}'"))?;
            let type_id = self.u32(&format!("the type of key '{key}'"))?;
            let vtype = ValueType::from_id(type_id)
                .ok_or_else(|| self.corrupt(format!("key '{key}' has unknown value type {type_id}")))?;
            let value = self.value(vtype, &key, 0)?;
            if kv_index.insert(key.clone(), kv.len()).is_some() {
                return Err(self.corrupt(format!("key '{key}' appears twice")));
            }
            kv.push((key, value));
        }
        Ok((kv, kv_index))
    }

    /// The `n_tensors` tensor descriptors, in file order and indexed by name.
    fn tensor_infos(&mut self, n_tensors: u64) -> Result<Indexed<TensorInfo>> {
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let t = self.tensor_info(i)?;
            if tensor_index.insert(t.name.clone(), tensors.len()).is_some() {
                return Err(self.corrupt(format!("tensor '{}' appears twice", t.name)));
            }
            tensors.push(t);
        }
        Ok((tensors, tensor_index))
    }

    /// Fails unless each tensor's data is aligned and inside the data section
    /// of `data_size` bytes.
    fn check_tensor_bounds(&self, tensors: &[TensorInfo], data_size: u64, alignment: u64) -> Result<()> {
        for t in tensors {
            if t.offset % alignment != 0 {
                return Err(self.corrupt(format!(
                    "tensor '{}' has offset {} which is not a multiple of the alignment {alignment}",
                    t.name, t.offset
                )));
            }
            let end = t
                .offset
                .checked_add(t.size)
                .ok_or_else(|| self.corrupt(format!("tensor '{}' has offset {} out of range", t.name, t.offset)))?;
            if end > data_size {
                return Err(self.truncated(format!(
                    "the data of tensor '{}' (bytes {}..{} of the data section, which has {data_size})",
                    t.name, t.offset, end
                )));
            }
        }
        Ok(())
    }

    /// Writers lay tensors out back to back, each padded to the alignment,
    /// and end the file there. Checking that layout catches almost any
    /// damage to the tensor list (a changed count, shape, type or offset).
    fn check_tensor_layout(&self, tensors: &[TensorInfo], data_size: u64, alignment: u64) -> Result<()> {
        let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
        by_offset.sort_by_key(|t| t.offset);
        let mut expected = 0u64;
        for t in &by_offset {
            if t.offset < expected {
                return Err(self.corrupt(format!("the data of tensor '{}' overlaps the tensor before it", t.name)));
            }
            if t.offset - expected >= alignment {
                return Err(self.corrupt(format!(
                    "{} unexplained bytes before the data of tensor '{}'",
                    t.offset - expected,
                    t.name
                )));
            }
            expected = (t.offset + t.size).div_ceil(alignment) * alignment;
        }
        let end = by_offset.last().map_or(0, |t| t.offset + t.size);
        if data_size > end && data_size - end >= alignment {
            return Err(self.corrupt(format!(
                "{} unexplained bytes after the last tensor's data (the tensor list does not describe the file)",
                data_size - end
            )));
        }
        Ok(())
    }

    fn tensor_info(&mut self, i: u64) -> Result<TensorInfo> {
        let name = self.name(&format!("the name of tensor #{i}"))?;
        if name.is_empty() || name.len() >= sys::GGML_MAX_NAME {
            return Err(self.corrupt(format!("tensor #{i} has a name of {} bytes (1..63 allowed)", name.len())));
        }
        // the name twice (list and index), the shape
        self.charge(2 * alloc_cost(name.len() as u64) + alloc_cost(32), &format!("tensor '{name}'"))?;
        let what = format!("the descriptor of tensor '{name}'");
        let n_dims = self.u32(&what)? as usize;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(self.corrupt(format!("tensor '{name}' has {n_dims} dimensions (1..4 allowed)")));
        }
        let mut shape = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            shape.push(self.u64(&what)?);
        }
        let ggml_type = self.u32(&what)?;
        let offset = self.u64(&what)?;
        let traits = sys::type_traits(ggml_type)
            .ok_or_else(|| self.corrupt(format!("tensor '{name}' has unknown ggml type {ggml_type}")))?;
        let mut n_elements: u64 = 1;
        for &d in &shape {
            if d == 0 || d > i64::MAX as u64 {
                return Err(self.corrupt(format!("tensor '{name}' has a dimension of {d}")));
            }
            n_elements = n_elements
                .checked_mul(d)
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or_else(|| self.corrupt(format!("tensor '{name}' has too many elements ({shape:?})")))?;
        }
        if shape[0] % traits.block_size != 0 {
            return Err(self.corrupt(format!(
                "tensor '{name}' has a row of {} elements, not a multiple of the {} block size {}",
                shape[0], traits.name, traits.block_size
            )));
        }
        let size = (n_elements / traits.block_size)
            .checked_mul(traits.type_size)
            .ok_or_else(|| self.corrupt(format!("tensor '{name}' is too large")))?;
        Ok(TensorInfo { name, ggml_type, shape, offset, size, part: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a small GGUF file in memory.
    pub(crate) struct Writer(pub Vec<u8>);
    impl Writer {
        fn new(version: u32, n_tensors: u64, n_kv: u64) -> Self {
            let mut w = Writer(Vec::new());
            w.0.extend_from_slice(MAGIC);
            w.0.extend_from_slice(&version.to_le_bytes());
            w.0.extend_from_slice(&n_tensors.to_le_bytes());
            w.0.extend_from_slice(&n_kv.to_le_bytes());
            w
        }
        fn str(&mut self, s: &str) {
            self.0.extend_from_slice(&(s.len() as u64).to_le_bytes());
            self.0.extend_from_slice(s.as_bytes());
        }
        fn u32(&mut self, v: u32) {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        fn u64(&mut self, v: u64) {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(3, 1, 3);
        w.str("general.architecture");
        w.u32(8);
        w.str("llama");
        w.str("llama.block_count");
        w.u32(4);
        w.u32(30);
        w.str("tokenizer.ggml.tokens");
        w.u32(9);
        w.u32(8);
        w.u64(2);
        w.str("a");
        w.str("bc");
        // tensor: 8 f32 values
        w.str("t.weight");
        w.u32(1);
        w.u64(8);
        w.u32(0);
        w.u64(0);
        while w.0.len() % 32 != 0 {
            w.0.push(0);
        }
        w.0.extend_from_slice(&[0u8; 32]);
        w.0
    }

    #[test]
    fn reads_sample() {
        let g = Gguf::parse_bytes(Path::new("x.gguf"), &sample()).unwrap();
        assert_eq!(g.architecture(), Some("llama"));
        assert_eq!(g.arch_value("block_count").and_then(Value::as_i64), Some(30));
        assert_eq!(g.get_str_array("tokenizer.ggml.tokens").unwrap(), ["a", "bc"]);
        let t = g.tensor("t.weight").unwrap();
        assert_eq!((t.size, t.shape.clone()), (32, vec![8]));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample();
        for cut in 0..bytes.len() {
            assert!(Gguf::parse_bytes(Path::new("x.gguf"), &bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn byte_flips_never_panic() {
        let bytes = sample();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                let _ = Gguf::parse_bytes(Path::new("x.gguf"), &b);
            }
        }
    }

    #[test]
    fn rejects_bad_magic_and_version() {
        let mut b = sample();
        b[0] = b'X';
        assert!(matches!(Gguf::parse_bytes(Path::new("x"), &b), Err(Error::NotGguf { .. })));
        let mut b = sample();
        b[4] = 1;
        assert!(matches!(Gguf::parse_bytes(Path::new("x"), &b), Err(Error::UnsupportedVersion { version: 1, .. })));
    }

    #[test]
    fn metadata_memory_is_bounded_by_the_file_size() {
        // 200k keys with u8 values: ~20 bytes each in the file, several
        // times that in memory
        let n = 200_000u64;
        let mut w = Writer::new(3, 0, n);
        for i in 0..n {
            w.str(&format!("k{i:06}"));
            w.u32(ValueType::U8 as u32);
            w.0.push(0);
        }
        let err = match Gguf::parse_bytes(Path::new("keys.gguf"), &w.0) {
            Ok(g) => panic!("200k keys accepted: {} bytes of memory for a file of {}", g.header_mem, g.file_size),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("'keys.gguf' is corrupt: its metadata would take more than"), "{err}");
        assert!(err.contains("times the file size"), "{err}");

        // an array of 1M empty strings (8 bytes each in the file, a 24-byte String in memory)
        let mut w = Writer::new(3, 0, 1);
        w.str("a");
        w.u32(ValueType::Array as u32);
        w.u32(ValueType::Str as u32);
        w.u64(1 << 20);
        w.0.resize(w.0.len() + (8 << 20), 0);
        if let Err(e) = Gguf::parse_bytes(Path::new("a.gguf"), &w.0) {
            panic!("3x the file size is allowed: {e}");
        }
    }

    /// Real files stay well inside the bound (LUGH_MODEL_DIR or ~/.cache/lugh/models).
    #[test]
    fn real_files_are_inside_the_memory_bound() {
        let dir = std::env::var_os("LUGH_MODEL_DIR")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/lugh/models")));
        let Some(Ok(entries)) = dir.map(std::fs::read_dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "gguf") {
                let g = Gguf::open(&p).unwrap();
                let ratio = g.header_mem as f64 / g.file_size as f64;
                eprintln!("{}: header {} bytes in memory, {ratio:.2}x the file", p.display(), g.header_mem);
                assert!(ratio < (HEADER_MEM_PER_FILE_BYTE / 2) as f64, "{}: {ratio}", p.display());
            }
        }
    }
}
