//! The SafeTensors format (Hugging Face's): an 8-byte little-endian header
//! length, a JSON header naming each tensor's dtype, shape and byte range,
//! then the data. The file is untrusted input: every size, offset and shape
//! is checked before a byte of data is used.
use crate::engine::{Error, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest header accepted (real ones are a few hundred kilobytes).
const MAX_HEADER: u64 = 100 << 20;

/// Element types Lugh reads (what LoRA adapters are saved in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    BF16,
}

impl Dtype {
    fn from_name(name: &str) -> Option<Dtype> {
        Some(match name {
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            _ => return None,
        })
    }
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }
}

/// One tensor's entry: its shape as the file gives it (row-major, the
/// last dimension contiguous) and its absolute byte range in the file.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub start: u64,
    pub len: u64,
}

/// A parsed header; the data is read on demand.
pub struct SafeTensors {
    pub path: PathBuf,
    pub entries: Vec<Entry>,
}

impl SafeTensors {
    pub fn open(path: &Path) -> Result<SafeTensors> {
        let io_err = |e: std::io::Error| Error::Io { path: path.to_path_buf(), reason: e.to_string() };
        let kind = std::fs::metadata(path).map_err(io_err)?.file_type();
        if !kind.is_file() {
            return Err(Error::Io { path: path.to_path_buf(), reason: "it is not a regular file".into() });
        }
        let mut file = File::open(path).map_err(io_err)?;
        let file_size = file.metadata().map_err(io_err)?.len();
        let mut len_bytes = [0u8; 8];
        file.read_exact(&mut len_bytes).map_err(|_| truncated(path, "the header length (8 bytes)"))?;
        let header_len = u64::from_le_bytes(len_bytes);
        if header_len > MAX_HEADER || header_len > file_size - 8 {
            return Err(corrupt(
                path,
                format!("the header length {header_len} is more than the file's {} bytes (or 100 MiB)", file_size - 8),
            ));
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header).map_err(|_| truncated(path, "the header"))?;
        Self::parse_header(path, &header, file_size)
    }

    /// Parses the JSON header of a file of `file_size` bytes.
    pub fn parse_header(path: &Path, header: &[u8], file_size: u64) -> Result<SafeTensors> {
        let data_start = 8 + header.len() as u64;
        let json: serde_json::Value =
            serde_json::from_slice(header).map_err(|e| corrupt(path, format!("the header is not valid JSON ({e})")))?;
        let object = json.as_object().ok_or_else(|| corrupt(path, "the header is not a JSON object".into()))?;
        let mut entries = Vec::new();
        for (name, value) in object {
            if name == "__metadata__" {
                // free-form strings, which Lugh does not need
                if !value.is_object() {
                    return Err(corrupt(path, "__metadata__ is not an object".into()));
                }
                continue;
            }
            entries.push(entry(path, name, value, data_start, file_size)?);
        }
        // The byte ranges must not overlap (a header that lies about them
        // would make two tensors share data).
        let mut ranges: Vec<(u64, u64, &str)> =
            entries.iter().map(|e| (e.start, e.start + e.len, e.name.as_str())).collect();
        ranges.sort();
        for pair in ranges.windows(2) {
            if pair[1].0 < pair[0].1 {
                return Err(corrupt(path, format!("the data of tensors '{}' and '{}' overlap", pair[0].2, pair[1].2)));
            }
        }
        Ok(SafeTensors { path: path.to_path_buf(), entries })
    }

    /// The bytes of one tensor.
    pub fn read(&self, e: &Entry) -> Result<Vec<u8>> {
        let io_err = |e: std::io::Error| Error::Io { path: self.path.clone(), reason: e.to_string() };
        let mut file = File::open(&self.path).map_err(io_err)?;
        file.seek(SeekFrom::Start(e.start)).map_err(io_err)?;
        let mut data = vec![0u8; e.len as usize];
        file.read_exact(&mut data).map_err(|_| truncated(&self.path, &format!("the data of tensor '{}'", e.name)))?;
        Ok(data)
    }
}

fn entry(path: &Path, name: &str, value: &serde_json::Value, data_start: u64, file_size: u64) -> Result<Entry> {
    let bad = |what: String| corrupt(path, format!("tensor '{name}': {what}"));
    let dtype_name = value.get("dtype").and_then(|v| v.as_str()).ok_or_else(|| bad("no dtype".into()))?;
    let dtype = Dtype::from_name(dtype_name)
        .ok_or_else(|| bad(format!("dtype {dtype_name} is not supported (supported: F32, F16, BF16)")))?;
    let shape = value
        .get("shape")
        .and_then(|v| v.as_array())
        .ok_or_else(|| bad("no shape".into()))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()).ok_or_else(|| bad(format!("shape entry {d}"))))
        .collect::<Result<Vec<usize>>>()?;
    if shape.len() > 4 {
        return Err(bad(format!("{} dimensions (at most 4)", shape.len())));
    }
    let n_elements = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
    let offsets = value.get("data_offsets").and_then(|v| v.as_array()).ok_or_else(|| bad("no data_offsets".into()))?;
    let [begin, end] = offsets.as_slice() else {
        return Err(bad("data_offsets must be [begin, end]".into()));
    };
    let (begin, end) = match (begin.as_u64(), end.as_u64()) {
        (Some(b), Some(e)) if b <= e => (b, e),
        _ => return Err(bad(format!("data_offsets {offsets:?} are not a range"))),
    };
    let expected = (n_elements as u64).checked_mul(dtype.size() as u64).ok_or_else(|| bad("size overflows".into()))?;
    if end - begin != expected {
        return Err(bad(format!(
            "data_offsets give {} bytes, but shape {shape:?} of {dtype_name} needs {expected}",
            end - begin
        )));
    }
    let start = data_start.checked_add(begin).ok_or_else(|| bad("offset overflows".into()))?;
    if start.checked_add(end - begin).is_none_or(|stop| stop > file_size) {
        return Err(bad(format!("its data (bytes {begin}..{end} of the data) runs past the end of the file")));
    }
    Ok(Entry { name: name.to_string(), dtype, shape, start, len: end - begin })
}

fn corrupt(path: &Path, what: String) -> Error {
    Error::Corrupt { path: path.to_path_buf(), what }
}

fn truncated(path: &Path, what: &str) -> Error {
    Error::Truncated { path: path.to_path_buf(), what: what.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(header: &str, data_len: u64) -> Result<SafeTensors> {
        SafeTensors::parse_header(Path::new("t.safetensors"), header.as_bytes(), 8 + header.len() as u64 + data_len)
    }

    #[test]
    fn a_good_header_parses() {
        let h = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}}"#;
        let st = parse(h, 32).unwrap();
        assert_eq!(st.entries.len(), 2);
        let a = st.entries.iter().find(|e| e.name == "a").unwrap();
        assert_eq!((a.shape.clone(), a.start, a.len), (vec![2, 3], 8 + h.len() as u64, 24));
    }

    #[test]
    fn headers_that_lie_are_refused_naming_the_tensor() {
        let refused = |h: &str, data: u64, what: &str| {
            let e = parse(h, data).err().unwrap_or_else(|| panic!("accepted {h}")).to_string();
            assert!(e.contains(what), "{e}");
        };
        refused(r#"{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}"#, 24, "needs 24");
        refused(r#"{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}"#, 23, "past the end");
        refused(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#, 24, "not a range");
        refused(r#"{"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}"#, 24, "I64 is not supported");
        refused(r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#, 4, "overflow");
        refused(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
            12,
            "overlap",
        );
        refused(r#"{"a":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}}"#, 4, "dimensions");
        refused(r#"[1,2]"#, 0, "not a JSON object");
        refused(r#"{"a":"#, 0, "not valid JSON");
        refused(r#"{"a":{"dtype":"F32","shape":[1]}}"#, 4, "no data_offsets");
    }
}
