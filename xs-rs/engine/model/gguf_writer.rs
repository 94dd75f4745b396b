//! Writes GGUF files (version 3): the LoRA adapters Lugh trains and the
//! small random models Lugh::Model->create makes. The file is written
//! beside its path and renamed into place, so a failed write leaves no
//! half file.
use crate::engine::model::gguf::{Array, Value};
use crate::engine::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Data alignment (GGUF's default, `general.alignment` unset).
const ALIGNMENT: usize = 32;

struct TensorEntry {
    name: String,
    type_id: u32,
    ne: Vec<u64>,
    data: Vec<u8>,
}

/// The contents of a GGUF file, in the order they were added. Metadata
/// values are the reader's (so a model's keys copy over as they are).
#[derive(Default)]
pub struct GgufWriter {
    kvs: Vec<(String, Value)>,
    tensors: Vec<TensorEntry>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// GGUF's id of each value type.
fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::Str(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn array_type_id(a: &Array) -> u32 {
    match a {
        Array::U8(_) => 0,
        Array::I8(_) => 1,
        Array::U16(_) => 2,
        Array::I16(_) => 3,
        Array::U32(_) => 4,
        Array::I32(_) => 5,
        Array::F32(_) => 6,
        Array::Bool(_) => 7,
        Array::Str(_) => 8,
        Array::Nested(_) => 9,
        Array::U64(_) => 10,
        Array::I64(_) => 11,
        Array::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::Str(x) => put_str(out, x),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// An array's element type, length and elements.
fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&array_type_id(a).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    fn each<T>(out: &mut Vec<u8>, items: &[T], f: impl Fn(&T) -> Vec<u8>) {
        items.iter().for_each(|x| out.extend_from_slice(&f(x)));
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::U16(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::I16(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::U32(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::I32(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::F32(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::Bool(v) => each(out, v, |x| vec![u8::from(*x)]),
        Array::Str(v) => v.iter().for_each(|x| put_str(out, x)),
        Array::Nested(v) => v.iter().for_each(|x| put_array(out, x)),
        Array::U64(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::I64(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
        Array::F64(v) => each(out, v, |x| x.to_le_bytes().to_vec()),
    }
}

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
        self.tensor_raw(name, 0, ne, data);
    }

    /// A tensor of ggml type `type_id` whose encoded bytes are `data`.
    pub fn tensor_raw(&mut self, name: &str, type_id: u32, ne: &[u64], data: Vec<u8>) {
        self.tensors.push(TensorEntry { name: name.to_string(), type_id, ne: ne.to_vec(), data });
    }

    /// The header: metadata and tensor infos, padded to the data.
    fn header(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (key, value) in &self.kvs {
            put_str(&mut out, key);
            out.extend_from_slice(&type_id(value).to_le_bytes());
            put_value(&mut out, value);
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
        out
    }

    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(&self.header())?;
        let zeros = [0u8; ALIGNMENT];
        for t in &self.tensors {
            out.write_all(&t.data)?;
            out.write_all(&zeros[..t.data.len().next_multiple_of(ALIGNMENT) - t.data.len()])?;
        }
        Ok(())
    }

    /// Writes the file at `path` (through a temporary file beside it).
    pub fn write(&self, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| Error::Argument(format!("cannot write '{}': {e}", path.display()));
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp = Path::new(&tmp_name);
        let result = std::fs::File::create(tmp)
            .and_then(|f| {
                let mut out = std::io::BufWriter::new(f);
                self.write_to(&mut out)?;
                out.into_inner().map_err(|e| e.into_error())?.sync_all()
            })
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
    use crate::engine::model::gguf::Gguf;

    #[test]
    fn written_files_read_back() {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::Str("llama".into()));
        w.kv("llama.block_count", Value::U32(2));
        w.kv("adapter.lora.alpha", Value::F32(16.0));
        w.kv("tokenizer.ggml.tokens", Value::Array(Array::Str(vec!["a".into(), "b".into()])));
        w.kv("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0, -1.0])));
        w.kv("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1, 1])));
        w.kv("x.nested", Value::Array(Array::Nested(vec![Array::U8(vec![1, 2]), Array::I64(vec![-3])])));
        w.kv("x.flag", Value::Bool(true));
        w.kv("x.f64", Value::F64(0.5));
        w.tensor_f32("x", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        w.tensor_f32("y", &[1], &[7.0]);
        let dir = std::env::temp_dir().join(format!("lugh-gguf-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.gguf");
        w.write(&path).unwrap();
        let g = Gguf::open(&path).unwrap();
        // every value reads back as it was written
        for (key, value) in &w.kvs {
            assert_eq!(g.get(key), Some(value), "{key}");
        }
        assert_eq!(g.tensor("x").unwrap().shape, vec![3, 2]);
        assert_eq!(g.tensor("y").unwrap().shape, vec![1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
