//! Writes GGUF files (version 3): the LoRA adapters Lugh trains and the
//! small random models Lugh::Model->create makes. The file is written
//! beside its path and renamed into place, so a failed write leaves no
//! half file.
use super::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Data alignment (GGUF's default, `general.alignment` unset).
const ALIGNMENT: usize = 32;

/// A metadata value.
pub enum Value {
    U32(u32),
    F32(f32),
    Str(String),
    Strs(Vec<String>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
}

struct TensorEntry {
    name: String,
    type_id: u32,
    ne: Vec<u64>,
    data: Vec<u8>,
}

/// The contents of a GGUF file, in the order they were added.
#[derive(Default)]
pub struct GgufWriter {
    kvs: Vec<(String, Value)>,
    tensors: Vec<TensorEntry>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

// GGUF value type ids
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_STR: u32 = 8;
const T_ARRAY: u32 = 9;

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    pub fn kv(&mut self, key: &str, value: Value) {
        self.kvs.push((key.to_string(), value));
    }

    /// An f32 tensor of extents `ne` (ne0 first).
    pub fn tensor_f32(&mut self, name: &str, ne: &[u64], values: &[f32]) {
        assert_eq!(ne.iter().product::<u64>() as usize, values.len(), "tensor '{name}': extents and values");
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensors.push(TensorEntry { name: name.to_string(), type_id: 0, ne: ne.to_vec(), data });
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (key, value) in &self.kvs {
            put_str(&mut out, key);
            match value {
                Value::U32(v) => {
                    out.extend_from_slice(&T_U32.to_le_bytes());
                    out.extend_from_slice(&v.to_le_bytes());
                }
                Value::F32(v) => {
                    out.extend_from_slice(&T_F32.to_le_bytes());
                    out.extend_from_slice(&v.to_le_bytes());
                }
                Value::Str(s) => {
                    out.extend_from_slice(&T_STR.to_le_bytes());
                    put_str(&mut out, s);
                }
                Value::Strs(items) => {
                    out.extend_from_slice(&T_ARRAY.to_le_bytes());
                    out.extend_from_slice(&T_STR.to_le_bytes());
                    out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                    items.iter().for_each(|s| put_str(&mut out, s));
                }
                Value::F32s(items) => {
                    out.extend_from_slice(&T_ARRAY.to_le_bytes());
                    out.extend_from_slice(&T_F32.to_le_bytes());
                    out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                    items.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
                }
                Value::I32s(items) => {
                    out.extend_from_slice(&T_ARRAY.to_le_bytes());
                    out.extend_from_slice(&T_I32.to_le_bytes());
                    out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                    items.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
                }
            }
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            t.ne.iter().for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
            out.extend_from_slice(&t.type_id.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += t.data.len().next_multiple_of(ALIGNMENT);
        }
        out.resize(out.len().next_multiple_of(ALIGNMENT), 0);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(out.len().next_multiple_of(ALIGNMENT), 0);
        }
        out
    }

    /// Writes the file at `path` (through a temporary file beside it).
    pub fn write(&self, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| Error::Argument(format!("cannot write '{}': {e}", path.display()));
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp = Path::new(&tmp_name);
        let result = std::fs::File::create(tmp)
            .and_then(|mut f| f.write_all(&self.to_bytes()).and_then(|_| f.sync_all()))
            .and_then(|_| std::fs::rename(tmp, path));
        if result.is_err() {
            let _ = std::fs::remove_file(tmp);
        }
        result.map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::gguf::Gguf;

    #[test]
    fn written_files_read_back() {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::Str("llama".into()));
        w.kv("llama.block_count", Value::U32(2));
        w.kv("adapter.lora.alpha", Value::F32(16.0));
        w.kv("tokenizer.ggml.tokens", Value::Strs(vec!["a".into(), "b".into()]));
        w.kv("tokenizer.ggml.scores", Value::F32s(vec![0.0, -1.0]));
        w.kv("tokenizer.ggml.token_type", Value::I32s(vec![1, 1]));
        w.tensor_f32("x", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        w.tensor_f32("y", &[1], &[7.0]);
        let dir = std::env::temp_dir().join(format!("lugh-gguf-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.gguf");
        w.write(&path).unwrap();
        let g = Gguf::open(&path).unwrap();
        assert_eq!(g.tensor("x").unwrap().shape, vec![3, 2]);
        assert_eq!(g.tensor("y").unwrap().shape, vec![1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
