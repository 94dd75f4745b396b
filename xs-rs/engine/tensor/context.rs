//! Lugh::Context and Lugh::Tensor: ggml contexts that own an arena, and the
//! tensors a program makes in them, fills, reads and converts.
//!
//! Safety by ownership: a tensor holds its context (and every context its
//! sources live in), so no order of freeing leaves a dangling pointer; every
//! ggml call on these contexts happens under one lock, since an op may join
//! tensors of several contexts and ggml contexts are not thread-safe.
use crate::engine::ggml::ops::{Ctx, Tensor};
use crate::engine::ggml::quant::{self, TypeInfo};
use crate::engine::Error;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub const MAX_DIMS: usize = 4;

static LOCK: Mutex<()> = Mutex::new(());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The lock every ggml call on a tensor context holds.
pub(crate) fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A ggml context with its own arena (Lugh::Context).
pub struct TensorContext {
    id: u64,
    ctx: Ctx,
    /// Addresses of the op results in this arena that hold computed values.
    computed: Mutex<HashSet<usize>>,
}

impl TensorContext {
    pub fn new(mem_size: u64) -> Result<Arc<TensorContext>, Error> {
        if mem_size == 0 {
            return Err(Error::Argument("mem_size must be positive (got 0)".into()));
        }
        let size = usize::try_from(mem_size)
            .ok()
            .filter(|&s| s <= isize::MAX as usize)
            .ok_or_else(|| Error::Argument(format!("mem_size {mem_size} is larger than this machine can address")))?;
        let ctx = Ctx::new_arena(size)
            .ok_or_else(|| Error::Ggml(format!("cannot allocate a context of {mem_size} bytes")))?;
        Ok(Arc::new(TensorContext {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ctx,
            computed: Mutex::new(HashSet::new()),
        }))
    }

    /// A number that tells this context from every other of the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn mem_size(&self) -> usize {
        let _guard = lock();
        self.ctx.mem_size()
    }

    /// Bytes of the arena in use (tensor metadata and data).
    pub fn used_mem(&self) -> usize {
        let _guard = lock();
        self.ctx.used_mem()
    }

    /// Checks that the arena has room for one more tensor with `data_bytes`
    /// of data (ggml would abort the process instead).
    pub(crate) fn reserve(&self, what: &str, data_bytes: usize) -> Result<(), Error> {
        // Metadata, the data, and at most one alignment pad (GGML_MEM_ALIGN).
        let need = Ctx::tensor_overhead().saturating_add(data_bytes).saturating_add(16);
        let left = self.ctx.mem_size().saturating_sub(self.ctx.used_mem());
        if need > left {
            return Err(Error::Argument(format!(
                "Lugh::Context {} is out of memory: {what} needs {need} bytes ({data_bytes} of data), \
                 and {left} of its {} bytes are left (make the context with a larger mem_size)",
                self.id,
                self.ctx.mem_size()
            )));
        }
        Ok(())
    }

    pub(crate) fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    fn owns(&self, t: Tensor) -> bool {
        self.ctx.arena_range().contains(&(t.0 as usize))
    }

    fn computed(&self) -> MutexGuard<'_, HashSet<usize>> {
        self.computed.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Marks `t` (a tensor of one of `contexts`) as holding computed values.
pub(crate) fn mark_computed(contexts: &[Arc<TensorContext>], t: Tensor) {
    if let Some(owner) = contexts.iter().find(|c| c.owns(t)) {
        owner.computed().insert(t.0 as usize);
    }
}

/// The values of a tensor, in the widest form its type has.
#[derive(Debug, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
    Int(Vec<i64>),
}

/// How the elements of a non-block type are stored.
#[derive(Clone, Copy, PartialEq)]
enum Scalar {
    F32,
    F64,
    Int {
        bytes: usize,
        min: i64,
        max: i64,
    },
    /// f16, bf16 and the block types: encoded and decoded by ggml, a row at a time.
    Codec,
}

fn scalar_kind(t: &TypeInfo) -> Scalar {
    match t.name {
        "f32" => Scalar::F32,
        "f64" => Scalar::F64,
        "i8" => Scalar::Int { bytes: 1, min: i8::MIN.into(), max: i8::MAX.into() },
        "i16" => Scalar::Int { bytes: 2, min: i16::MIN.into(), max: i16::MAX.into() },
        "i32" => Scalar::Int { bytes: 4, min: i32::MIN.into(), max: i32::MAX.into() },
        "i64" => Scalar::Int { bytes: 8, min: i64::MIN, max: i64::MAX },
        _ => Scalar::Codec,
    }
}

/// A tensor of a context (Lugh::Tensor).
pub struct TensorHandle {
    ctx: Arc<TensorContext>,
    tensor: Tensor,
    /// The other contexts its sources live in, kept alive as long as it is.
    deps: Vec<Arc<TensorContext>>,
}

impl TensorHandle {
    /// A new tensor of `type_id` with 1 to 4 extents (ne0 first), zero-filled.
    pub fn new(ctx: &Arc<TensorContext>, type_id: i64, dims: &[i64]) -> Result<Arc<TensorHandle>, Error> {
        let t = quant::info(type_id)?;
        check_dims(dims)?;
        if dims[0] as u64 % t.block_size != 0 {
            return Err(Error::Argument(format!(
                "a {} tensor's first dimension must be a multiple of {} (its block size), got {}",
                t.name, t.block_size, dims[0]
            )));
        }
        let n_rows = dims[1..].iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        let bytes = n_rows
            .ok_or_else(|| Error::Argument("the tensor is too large".into()))
            .and_then(|rows| quant::data_bytes(&t, dims[0] as u64, rows))?;
        let _guard = lock();
        ctx.reserve(&format!("a {} tensor of shape [{}]", t.name, join(dims)), bytes)?;
        // The arena is zeroed memory that ggml never hands out twice, so a
        // new tensor reads as zeros.
        let tensor = ctx.ctx.new_tensor(t.id as i32, dims);
        Ok(Arc::new(TensorHandle { ctx: ctx.clone(), tensor, deps: Vec::new() }))
    }

    /// Wraps the result of an op made in `ctx` from `inputs`.
    pub(crate) fn from_op(ctx: &Arc<TensorContext>, tensor: Tensor, inputs: &[&TensorHandle]) -> Arc<TensorHandle> {
        let mut deps: Vec<Arc<TensorContext>> = Vec::new();
        for c in inputs.iter().flat_map(|i| i.contexts()) {
            if !Arc::ptr_eq(c, ctx) && !deps.iter().any(|d| Arc::ptr_eq(d, c)) {
                deps.push(c.clone());
            }
        }
        Arc::new(TensorHandle { ctx: ctx.clone(), tensor, deps })
    }

    pub fn context(&self) -> &Arc<TensorContext> {
        &self.ctx
    }

    /// Its context and every context its sources live in.
    pub fn contexts(&self) -> impl Iterator<Item = &Arc<TensorContext>> {
        std::iter::once(&self.ctx).chain(self.deps.iter())
    }

    pub(crate) fn raw(&self) -> Tensor {
        self.tensor
    }

    pub fn type_info(&self) -> TypeInfo {
        quant::info(i64::from(self.tensor.type_id())).expect("tensors have known types")
    }

    /// The four extents, ne0 first.
    pub fn ne(&self) -> [i64; 4] {
        self.tensor.ne()
    }

    /// The extents up to the last one above 1 (at least one): ggml_n_dims.
    pub fn shape(&self) -> Vec<i64> {
        let ne = self.ne();
        let n = ne.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
        ne[..n].to_vec()
    }

    pub fn nelements(&self) -> i64 {
        self.ne().iter().product()
    }

    pub fn nbytes(&self) -> usize {
        self.tensor.nbytes()
    }

    /// "f32 [3, 4]": for error messages.
    pub fn describe(&self) -> String {
        format!("{} [{}]", self.type_info().name, join(&self.shape()))
    }

    /// Whether the elements lie packed in ggml order (ggml_is_contiguous).
    pub fn is_contiguous(&self) -> bool {
        is_contiguous(self.tensor)
    }

    /// Whether each row's elements are packed (ne0 contiguous).
    pub fn rows_contiguous(&self) -> bool {
        self.tensor.nb()[0] as u64 == self.type_info().type_size
    }

    /// Whether the tensor holds values: made by Lugh::Tensor (or written
    /// to), or the result of an op that a graph has computed.
    pub fn has_data(&self) -> bool {
        holds_values(self.tensor, self.contexts())
    }

    fn require_data(&self, what: &str) -> Result<(), Error> {
        if self.has_data() {
            return Ok(());
        }
        Err(Error::Argument(format!(
            "cannot {what}: this tensor is the result of {} and has not been computed yet \
             (build a Lugh::Graph with it and call compute first)",
            self.tensor.op_desc()
        )))
    }

    /// Every element, in ggml order (ne0 fastest), decoded.
    pub fn values(&self) -> Result<Values, Error> {
        let _guard = lock();
        self.require_data("read its values")?;
        let t = self.type_info();
        let kind = scalar_kind(&t);
        if kind == Scalar::Codec && !t.can_dequantize {
            return Err(Error::Argument(format!("cannot read {} values: ggml has no decoder for the type", t.name)));
        }
        if kind == Scalar::Codec && !self.rows_contiguous() && t.block_size > 1 {
            return Err(Error::Argument(format!(
                "cannot read a {} tensor whose rows are not contiguous (use Lugh::Ops::cont)",
                t.name
            )));
        }
        let bytes: Vec<u8> = read_rows(self.tensor, &t)?.concat();
        Ok(match kind {
            Scalar::F32 => {
                Values::F32(bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
            }
            Scalar::F64 => {
                Values::F64(bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect())
            }
            Scalar::Int { bytes: size, .. } => Values::Int(bytes.chunks_exact(size).map(int_from_le).collect()),
            Scalar::Codec => Values::F32(quant::dequantize(&t, &bytes)?),
        })
    }

    /// Sets every element (ggml order) from `values`, encoding them in the
    /// tensor's type; integer types take integral values in their range.
    pub fn set_values(&self, values: &[f64]) -> Result<(), Error> {
        let n = self.nelements();
        if values.len() as i64 != n {
            return Err(Error::Argument(format!("Expected {n} values, got {}", values.len())));
        }
        let t = self.type_info();
        let kind = scalar_kind(&t);
        if kind == Scalar::Codec && !self.rows_contiguous() && t.block_size > 1 {
            return Err(Error::Argument(format!("cannot write a {} tensor whose rows are not contiguous", t.name)));
        }
        let ne0 = self.ne()[0] as usize;
        let rows: Vec<Vec<u8>> = match kind {
            Scalar::F32 => {
                check_float_range(&t, values, f64::from(f32::MAX))?;
                values.chunks(ne0).map(|r| r.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()).collect()
            }
            Scalar::F64 => values.chunks(ne0).map(|r| r.iter().flat_map(|&v| v.to_le_bytes()).collect()).collect(),
            Scalar::Int { bytes, min, max } => {
                if let Some((i, v)) = values
                    .iter()
                    .enumerate()
                    .find(|&(_, &v)| v.fract() != 0.0 || !(min as f64..=max as f64).contains(&v))
                {
                    return Err(Error::Argument(format!(
                        "value {i} ({v}) is not an integer that fits a {} tensor",
                        t.name
                    )));
                }
                values
                    .chunks(ne0)
                    .map(|r| r.iter().flat_map(|&v| (v as i64).to_le_bytes()[..bytes].to_vec()).collect())
                    .collect()
            }
            Scalar::Codec => {
                // f16 holds up to 65504; the other codecs take f32 input.
                check_float_range(&t, values, if t.name == "f16" { 65504.0 } else { f64::from(f32::MAX) })?;
                let floats: Vec<f32> = values.iter().map(|&v| v as f32).collect();
                let encoded = quant::quantize(&t, &floats, ne0)?;
                encoded.chunks(quant::data_bytes(&t, ne0 as u64, 1)?).map(<[u8]>::to_vec).collect()
            }
        };
        let _guard = lock();
        write_rows(self.tensor, &t, &rows);
        self.mark_written();
        Ok(())
    }

    /// The data as stored (nbytes bytes); the tensor must be contiguous.
    pub fn bytes(&self) -> Result<Vec<u8>, Error> {
        let _guard = lock();
        self.require_data("read its bytes")?;
        self.require_contiguous()?;
        let mut out = vec![0u8; self.nbytes()];
        self.tensor.read_data(0, &mut out);
        Ok(out)
    }

    /// Replaces the data with `bytes` (exactly nbytes of them, as stored).
    pub fn set_bytes(&self, bytes: &[u8]) -> Result<(), Error> {
        let _guard = lock();
        self.require_contiguous()?;
        if bytes.len() != self.nbytes() {
            return Err(Error::Argument(format!(
                "a {} tensor holds {} bytes, got {}",
                self.describe(),
                self.nbytes(),
                bytes.len()
            )));
        }
        self.tensor.write_data(0, bytes);
        self.mark_written();
        Ok(())
    }

    fn require_contiguous(&self) -> Result<(), Error> {
        if self.is_contiguous() {
            return Ok(());
        }
        Err(Error::Argument(format!(
            "the {} tensor is a strided view, not contiguous (copy it with Lugh::Ops::cont first)",
            self.describe()
        )))
    }

    /// After a write, an op result holds values too.
    fn mark_written(&self) {
        let root = self.tensor.view_src().unwrap_or(self.tensor);
        if root.op() != 0 {
            let all: Vec<Arc<TensorContext>> = self.contexts().cloned().collect();
            mark_computed(&all, root);
        }
    }

    /// A new tensor of `type_id` in `ctx` with this one's values quantized
    /// (ggml's quantizers, as llama-quantize runs them).
    pub fn quantize(&self, ctx: &Arc<TensorContext>, type_id: i64) -> Result<Arc<TensorHandle>, Error> {
        let dst = quant::info(type_id).map_err(|_| Error::Argument(format!("Invalid destination type: {type_id}")))?;
        if !dst.is_quantized {
            return Err(Error::Argument(format!(
                "Destination type {} is not a quantized type (quantize makes one of Lugh::Quant::all_quantized_types)",
                dst.name
            )));
        }
        let src = self.type_info();
        if src.is_quantized {
            return Err(Error::Argument(format!(
                "Source tensor must be F32 (or F16/BF16), got {}: dequantize it first",
                src.name
            )));
        }
        let floats = self.float_values()?;
        let encoded = quant::quantize(&dst, &floats, self.ne()[0] as usize)?;
        self.with_data(ctx, &dst, &encoded)
    }

    /// A new f32 tensor in `ctx` with this one's values decoded.
    pub fn dequantize(&self, ctx: &Arc<TensorContext>) -> Result<Arc<TensorHandle>, Error> {
        let src = self.type_info();
        if !src.is_quantized && !matches!(src.name, "f16" | "bf16") {
            return Err(Error::Argument(format!(
                "Source tensor is not quantized (type: {}); dequantize reads quantized, f16 or bf16 tensors",
                src.name
            )));
        }
        let floats = self.float_values()?;
        let f32_type = quant::info(0)?;
        let bytes: Vec<u8> = floats.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.with_data(ctx, &f32_type, &bytes)
    }

    fn float_values(&self) -> Result<Vec<f32>, Error> {
        match self.values()? {
            Values::F32(v) => Ok(v),
            Values::F64(v) => Ok(v.into_iter().map(|x| x as f32).collect()),
            Values::Int(v) => Ok(v.into_iter().map(|x| x as f32).collect()),
        }
    }

    /// A tensor of this one's shape, type `t`, holding `bytes`.
    fn with_data(&self, ctx: &Arc<TensorContext>, t: &TypeInfo, bytes: &[u8]) -> Result<Arc<TensorHandle>, Error> {
        let out = TensorHandle::new(ctx, i64::from(t.id), &self.shape())?;
        out.set_bytes(bytes)?;
        Ok(out)
    }
}

/// The byte offset of each row (i1, i2, i3) of `t`, in order.
fn row_offsets(t: Tensor) -> Vec<usize> {
    let (ne, nb) = (t.ne(), t.nb());
    let mut offsets = Vec::with_capacity((ne[1] * ne[2] * ne[3]) as usize);
    for i3 in 0..ne[3] as usize {
        for i2 in 0..ne[2] as usize {
            for i1 in 0..ne[1] as usize {
                offsets.push(i1 * nb[1] + i2 * nb[2] + i3 * nb[3]);
            }
        }
    }
    offsets
}

/// The raw bytes of each row of `t` (of type `info`), in order; a strided
/// row's elements are gathered.
fn read_rows(t: Tensor, info: &TypeInfo) -> Result<Vec<Vec<u8>>, Error> {
    let (ne0, nb0) = (t.ne()[0] as u64, t.nb()[0]);
    let row_bytes = quant::data_bytes(info, ne0, 1)?;
    let packed = nb0 as u64 == info.type_size;
    Ok(row_offsets(t)
        .into_iter()
        .map(|offset| {
            let mut row = vec![0u8; row_bytes];
            if packed {
                t.read_data(offset, &mut row);
            } else {
                for (i0, chunk) in row.chunks_exact_mut(info.type_size as usize).enumerate() {
                    t.read_data(offset + i0 * nb0, chunk);
                }
            }
            row
        })
        .collect())
}

fn write_rows(t: Tensor, info: &TypeInfo, rows: &[Vec<u8>]) {
    let nb0 = t.nb()[0];
    let packed = nb0 as u64 == info.type_size;
    for (offset, row) in row_offsets(t).into_iter().zip(rows) {
        if packed {
            t.write_data(offset, row);
        } else {
            for (i0, chunk) in row.chunks_exact(info.type_size as usize).enumerate() {
                t.write_data(offset + i0 * nb0, chunk);
            }
        }
    }
}

/// Whether `t`, a tensor of one of `contexts`, holds values: a leaf, or an
/// op result (or a view of one) that a graph computed.
pub(crate) fn holds_values<'a>(t: Tensor, mut contexts: impl Iterator<Item = &'a Arc<TensorContext>>) -> bool {
    let root = t.view_src().unwrap_or(t);
    root.op() == 0 || contexts.any(|c| c.owns(root) && c.computed().contains(&(root.0 as usize)))
}

/// The values of an f32 tensor of a graph (a gradient).
pub(crate) fn f32_values(t: Tensor) -> Vec<f32> {
    let info = quant::info(i64::from(t.type_id())).expect("a known type");
    read_rows(t, &info)
        .map(|rows| rows.concat().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
        .unwrap_or_default()
}

/// The values of an i32 tensor of a graph (for checking row ids).
pub(crate) fn i32_values(t: Tensor) -> Vec<i64> {
    let info = quant::info(i64::from(t.type_id())).expect("a known type");
    read_rows(t, &info).map(|rows| rows.concat().chunks_exact(4).map(int_from_le).collect()).unwrap_or_default()
}

/// A finite value beyond what the type holds would be stored as infinity:
/// refuse it instead.
fn check_float_range(t: &TypeInfo, values: &[f64], max: f64) -> Result<(), Error> {
    match values.iter().position(|v| v.is_finite() && v.abs() > max) {
        Some(i) => Err(Error::Argument(format!(
            "value {i} ({}) is outside the range of a {} tensor (largest magnitude {max})",
            values[i], t.name
        ))),
        None => Ok(()),
    }
}

/// Validates 1 to 4 positive extents.
pub fn check_dims(dims: &[i64]) -> Result<(), Error> {
    if dims.is_empty() {
        return Err(Error::Argument("a tensor needs at least one dimension".into()));
    }
    if dims.len() > MAX_DIMS {
        return Err(Error::Argument(format!("Maximum {MAX_DIMS} dimensions supported, got {}", dims.len())));
    }
    if let Some((i, d)) = dims.iter().enumerate().find(|&(_, &d)| d <= 0) {
        return Err(Error::Argument(format!("Invalid dimension {d} at position {i}: dimensions must be positive")));
    }
    if dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)).is_none() {
        return Err(Error::Argument(format!("a tensor of shape [{}] has too many elements", join(dims))));
    }
    Ok(())
}

pub(crate) fn join(dims: &[i64]) -> String {
    dims.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
}

pub(crate) fn is_contiguous(t: Tensor) -> bool {
    let Some(info) = crate::engine::ggml::sys::type_traits(t.type_id() as u32) else {
        return false;
    };
    let (ne, nb) = (t.ne(), t.nb());
    let mut next = info.type_size as usize;
    if ne[0] != 1 && nb[0] != next {
        return false;
    }
    next *= (ne[0] as u64 / info.block_size) as usize;
    for i in 1..4 {
        if ne[i] != 1 {
            if nb[i] != next {
                return false;
            }
            next *= ne[i] as usize;
        }
    }
    true
}

fn int_from_le(bytes: &[u8]) -> i64 {
    match bytes.len() {
        1 => i64::from(bytes[0] as i8),
        2 => i64::from(i16::from_le_bytes(bytes.try_into().unwrap())),
        4 => i64::from(i32::from_le_bytes(bytes.try_into().unwrap())),
        _ => i64::from_le_bytes(bytes.try_into().unwrap()),
    }
}
