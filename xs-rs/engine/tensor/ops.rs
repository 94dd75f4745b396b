//! Lugh::Ops: ggml ops on Lugh::Tensor values, each checked before ggml sees
//! it. ggml asserts on a bad shape or type by aborting the process, so every
//! condition its op constructor or its CPU kernel asserts is tested here and
//! reported with the shapes involved. Ops are lazy, as in ggml: they make the
//! result tensor; a Lugh::Graph computes it.
use crate::engine::ggml::ops::{Ctx, RopeParams, Tensor, GGML_ROPE_TYPE_NEOX, GGML_ROPE_TYPE_NORM};
use crate::engine::ggml::quant;
use crate::engine::ggml::sys;
use crate::engine::tensor::{check_dims, join, lock, TensorContext, TensorHandle};
use crate::engine::Error;
use std::sync::Arc;

const TYPE_F32: u32 = 0;
const TYPE_I32: u32 = 26;

/// Element-wise ops of two tensors.
#[derive(Clone, Copy, Debug)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
}

/// Element-wise ops of one tensor.
#[derive(Clone, Copy, Debug)]
pub enum Unary {
    Silu,
    Gelu,
    Relu,
    Tanh,
    Exp,
    Sqr,
    Sqrt,
}

/// The result an op will make: for the memory check before ggml allocates.
struct Planned<'a> {
    op: &'static str,
    ctx: &'a Arc<TensorContext>,
    /// Data bytes of every tensor the op constructor allocates (0 for a view).
    data_bytes: Vec<usize>,
}

impl Planned<'_> {
    /// Checks the arena, then builds the op under the lock.
    fn build(self, inputs: &[&TensorHandle], f: impl FnOnce(&Ctx) -> Tensor) -> Result<Arc<TensorHandle>, Error> {
        let _guard = lock();
        let total = self.data_bytes.iter().sum::<usize>() + (self.data_bytes.len() - 1) * (Ctx::tensor_overhead() + 16);
        self.ctx.reserve(&format!("Lugh::Ops::{}", self.op), total)?;
        let t = f(self.ctx.ctx());
        Ok(TensorHandle::from_op(self.ctx, t, inputs))
    }
}

fn plan<'a>(op: &'static str, ctx: &'a Arc<TensorContext>, results: &[(u32, [i64; 4])]) -> Result<Planned<'a>, Error> {
    let data_bytes = results
        .iter()
        .map(|&(type_id, ne)| {
            let t = quant::info(i64::from(type_id))?;
            quant::data_bytes(&t, ne[0] as u64, (ne[1] * ne[2] * ne[3]) as u64)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Planned { op, ctx, data_bytes })
}

fn view_plan<'a>(op: &'static str, ctx: &'a Arc<TensorContext>) -> Planned<'a> {
    Planned { op, ctx, data_bytes: vec![0] }
}

/// Errors of the ops read "Lugh::Ops::NAME: ..." (the XS sub adds its name).
fn err(message: String) -> Error {
    Error::Argument(message)
}

fn type_id(t: &TensorHandle) -> u32 {
    t.raw().type_id() as u32
}

/// The op's kernel reads `t` as packed f32.
fn require_f32(what: &str, t: &TensorHandle) -> Result<(), Error> {
    if type_id(t) != TYPE_F32 {
        return Err(err(format!("{what} must be an f32 tensor, got {} (dequantize it first)", t.describe())));
    }
    require_contiguous(what, t)
}

fn require_contiguous(what: &str, t: &TensorHandle) -> Result<(), Error> {
    if !t.is_contiguous() {
        return Err(err(format!("{what} ({}) is not contiguous; copy it with Lugh::Ops::cont first", t.describe())));
    }
    Ok(())
}

fn shape(ne: [i64; 4]) -> String {
    let n = ne.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
    format!("[{}]", join(&ne[..n]))
}

/// ggml_can_repeat: each extent of `small` divides the one of `big`.
fn can_repeat(small: [i64; 4], big: [i64; 4]) -> bool {
    small.iter().zip(big).all(|(&s, b)| s > 0 && b % s == 0)
}

/// a OP b, element by element; the smaller operand is tiled over the
/// larger (each of its extents must divide the other's).
pub fn binary(
    ctx: &Arc<TensorContext>,
    op: Binary,
    a: &TensorHandle,
    b: &TensorHandle,
) -> Result<Arc<TensorHandle>, Error> {
    let name = match op {
        Binary::Add => "add",
        Binary::Sub => "sub",
        Binary::Mul => "mul",
        Binary::Div => "div",
    };
    require_f32("the first operand", a)?;
    require_f32("the second operand", b)?;
    let (na, nb) = (a.ne(), b.ne());
    let apply = move |c: &Ctx, x: Tensor, y: Tensor| match op {
        Binary::Add => c.add(x, y),
        Binary::Sub => c.sub(x, y),
        Binary::Mul => c.mul(x, y),
        Binary::Div => c.div(x, y),
    };
    if na == nb || (can_repeat(nb, na) && matches!(op, Binary::Add | Binary::Mul)) {
        plan(name, ctx, &[(TYPE_F32, na)])?.build(&[a, b], |c| apply(c, a.raw(), b.raw()))
    } else if can_repeat(nb, na) {
        // ggml's backward pass of SUB and DIV does not sum a tiled second
        // operand's gradient back to its shape (ADD and MUL do): tile it
        // explicitly, so that REPEAT's backward does.
        plan(name, ctx, &[(TYPE_F32, na), (TYPE_F32, na)])?
            .build(&[a, b], |c| apply(c, a.raw(), c.repeat(b.raw(), a.raw())))
    } else if can_repeat(na, nb) {
        // ggml tiles only its second operand: tile the first one explicitly.
        plan(name, ctx, &[(TYPE_F32, nb), (TYPE_F32, nb)])?
            .build(&[a, b], |c| apply(c, c.repeat(a.raw(), b.raw()), b.raw()))
    } else {
        Err(err(format!(
            "shapes {} and {} do not broadcast (each extent of one must divide the other's)",
            shape(na),
            shape(nb)
        )))
    }
}

pub fn unary(ctx: &Arc<TensorContext>, op: Unary, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    let name = match op {
        Unary::Silu => "silu",
        Unary::Gelu => "gelu",
        Unary::Relu => "relu",
        Unary::Tanh => "tanh",
        Unary::Exp => "exp",
        Unary::Sqr => "sqr",
        Unary::Sqrt => "sqrt",
    };
    require_f32("the input", a)?;
    plan(name, ctx, &[(TYPE_F32, a.ne())])?.build(&[a], |c| match op {
        Unary::Silu => c.silu(a.raw()),
        Unary::Gelu => c.gelu(a.raw()),
        Unary::Relu => c.relu(a.raw()),
        Unary::Tanh => c.tanh(a.raw()),
        Unary::Exp => c.exp(a.raw()),
        Unary::Sqr => c.sqr(a.raw()),
        Unary::Sqrt => c.sqrt(a.raw()),
    })
}

pub fn scale(ctx: &Arc<TensorContext>, a: &TensorHandle, s: f64) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    plan("scale", ctx, &[(TYPE_F32, a.ne())])?.build(&[a], |c| c.scale(a.raw(), s as f32))
}

/// Softmax over each row (ne0).
pub fn soft_max(ctx: &Arc<TensorContext>, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    plan("soft_max", ctx, &[(TYPE_F32, a.ne())])?.build(&[a], |c| c.soft_max(a.raw()))
}

fn check_eps(eps: f64) -> Result<(), Error> {
    if !eps.is_finite() || eps < 0.0 {
        return Err(err(format!("eps must be a finite number >= 0, got {eps}")));
    }
    Ok(())
}

/// x / sqrt(mean(x²) + eps) over each row.
pub fn rms_norm(ctx: &Arc<TensorContext>, a: &TensorHandle, eps: f64) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    check_eps(eps)?;
    plan("rms_norm", ctx, &[(TYPE_F32, a.ne())])?.build(&[a], |c| c.rms_norm(a.raw(), eps as f32))
}

/// (x - mean) / sqrt(variance + eps) over each row.
pub fn norm(ctx: &Arc<TensorContext>, a: &TensorHandle, eps: f64) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    check_eps(eps)?;
    plan("norm", ctx, &[(TYPE_F32, a.ne())])?.build(&[a], |c| c.layer_norm(a.raw(), eps as f32))
}

/// The sum of every element: a one-element tensor.
pub fn sum(ctx: &Arc<TensorContext>, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    plan("sum", ctx, &[(TYPE_F32, [1, 1, 1, 1])])?.build(&[a], |c| c.sum(a.raw()))
}

/// The mean of each row: shape [1, ne1, ne2, ne3].
pub fn mean(ctx: &Arc<TensorContext>, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    let [_, n1, n2, n3] = a.ne();
    plan("mean", ctx, &[(TYPE_F32, [1, n1, n2, n3])])?.build(&[a], |c| c.mean(a.raw()))
}

/// The index of each row's largest value: i32 [ne1] (a must be a matrix).
pub fn argmax(ctx: &Arc<TensorContext>, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    let ne = a.ne();
    if ne[2] != 1 || ne[3] != 1 {
        return Err(err(format!("the input must be a vector or a matrix, got {}", shape(ne))));
    }
    plan("argmax", ctx, &[(TYPE_I32, [ne[1], 1, 1, 1])])?.build(&[a], |c| c.argmax(a.raw()))
}

/// a [K, N] times b [K, M] → [N, M] (each column of b by each row of a);
/// a may be quantized, b is f32; the outer extents of a tile over b's.
pub fn mul_mat(ctx: &Arc<TensorContext>, a: &TensorHandle, b: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    let (na, nb) = (a.ne(), b.ne());
    if !sys::cpu_can_mul_mat(type_id(a)) {
        return Err(err(format!("the CPU cannot multiply a matrix of type {}", a.type_info().name)));
    }
    if !a.rows_contiguous() || a.raw().nb()[0] > a.raw().nb()[1] {
        return Err(err(format!(
            "the first operand ({}) must have contiguous rows (not a transposed view; use cont)",
            a.describe()
        )));
    }
    if type_id(b) != TYPE_F32 || !b.rows_contiguous() {
        return Err(err(format!("the second operand must be f32 with contiguous rows, got {}", b.describe())));
    }
    if na[0] != nb[0] || nb[2] % na[2] != 0 || nb[3] % na[3] != 0 {
        return Err(err(format!(
            "shapes {} and {} do not multiply (ne0 must be equal, and a's ne2/ne3 must divide b's)",
            shape(na),
            shape(nb)
        )));
    }
    plan("mul_mat", ctx, &[(TYPE_F32, [na[1], nb[1], nb[2], nb[3]])])?.build(&[a, b], |c| c.mul_mat(a.raw(), b.raw()))
}

/// ne0 and ne1 swapped (a view).
pub fn transpose(ctx: &Arc<TensorContext>, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    view_plan("transpose", ctx).build(&[a], |c| c.transpose(a.raw()))
}

/// Moves axis i of `a` to position axes[i] (a view); missing axes stay.
pub fn permute(ctx: &Arc<TensorContext>, a: &TensorHandle, axes: &[i64]) -> Result<Arc<TensorHandle>, Error> {
    if axes.is_empty() || axes.len() > 4 {
        return Err(err(format!("give 1 to 4 axes, got {}", axes.len())));
    }
    let mut full = [0i32, 1, 2, 3];
    for (slot, &axis) in full.iter_mut().zip(axes) {
        if !(0..4).contains(&axis) {
            return Err(err(format!("axis {axis} is not in 0..3")));
        }
        *slot = axis as i32;
    }
    let mut seen = [false; 4];
    for &axis in &full {
        if std::mem::replace(&mut seen[axis as usize], true) {
            return Err(err(format!("axes ({}) are not a permutation of 0..3", join(&full.map(i64::from)))));
        }
    }
    view_plan("permute", ctx).build(&[a], |c| c.permute(a.raw(), full))
}

/// The same elements under other extents (a view; `a` must be contiguous).
pub fn reshape(ctx: &Arc<TensorContext>, a: &TensorHandle, dims: &[i64]) -> Result<Arc<TensorHandle>, Error> {
    check_dims(dims)?;
    require_contiguous("the input", a)?;
    let n: i64 = dims.iter().product();
    if n != a.nelements() {
        return Err(err(format!(
            "[{}] has {n} elements, the input {} has {}",
            join(dims),
            a.describe(),
            a.nelements()
        )));
    }
    let t = a.type_info();
    if dims[0] as u64 % t.block_size != 0 {
        return Err(err(format!("a {} tensor's ne0 must be a multiple of {}", t.name, t.block_size)));
    }
    let mut ne = [1i64; 4];
    ne[..dims.len()].copy_from_slice(dims);
    view_plan("reshape", ctx).build(&[a], |c| c.reshape_4d(a.raw(), ne))
}

/// A packed window of `dims` elements of `a` from element `offset` (a view).
pub fn view(ctx: &Arc<TensorContext>, a: &TensorHandle, offset: i64, dims: &[i64]) -> Result<Arc<TensorHandle>, Error> {
    check_dims(dims)?;
    require_contiguous("the input", a)?;
    let t = a.type_info();
    if t.block_size != 1 {
        return Err(err(format!("cannot view inside a {} tensor's blocks; dequantize it first", t.name)));
    }
    let n: i64 = dims.iter().product();
    if offset < 0 || offset.checked_add(n).is_none_or(|end| end > a.nelements()) {
        return Err(err(format!(
            "{n} elements from offset {offset} are outside the input {} ({} elements)",
            a.describe(),
            a.nelements()
        )));
    }
    let mut ne = [1i64; 4];
    ne[..dims.len()].copy_from_slice(dims);
    let size = t.type_size as usize;
    let nb1 = size * ne[0] as usize;
    let nb = [nb1, nb1 * ne[1] as usize, nb1 * (ne[1] * ne[2]) as usize];
    view_plan("view", ctx).build(&[a], |c| c.view_4d(a.raw(), ne, nb, offset as usize * size))
}

/// A packed copy (of a view, a transposed or permuted tensor).
pub fn cont(ctx: &Arc<TensorContext>, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    let t = a.type_info();
    if t.block_size != 1 {
        return Err(err(format!("cannot copy a {} tensor; dequantize it first", t.name)));
    }
    plan("cont", ctx, &[(t.id, a.ne())])?.build(&[a], |c| c.cont(a.raw()))
}

/// a and b joined along `dim` (0..3); the other extents must agree.
pub fn concat(
    ctx: &Arc<TensorContext>,
    a: &TensorHandle,
    b: &TensorHandle,
    dim: i64,
) -> Result<Arc<TensorHandle>, Error> {
    if !(0..4).contains(&dim) {
        return Err(err(format!("dim must be 0 to 3, got {dim}")));
    }
    let (ta, tb) = (a.type_info(), b.type_info());
    if ta.id != tb.id || !matches!(ta.name, "f32" | "f16" | "i32") {
        return Err(err(format!(
            "both tensors must be f32, f16 or i32 and of one type, got {} and {}",
            ta.name, tb.name
        )));
    }
    let (na, nb) = (a.ne(), b.ne());
    let d = dim as usize;
    if (0..4).any(|i| i != d && na[i] != nb[i]) {
        return Err(err(format!("shapes {} and {} differ outside dimension {dim}", shape(na), shape(nb))));
    }
    let mut ne = na;
    ne[d] += nb[d];
    plan("concat", ctx, &[(ta.id, ne)])?.build(&[a, b], |c| c.concat(a.raw(), b.raw(), dim as i32))
}

/// The rows of `a` that the i32 `ids` name: [a.ne0, ids.ne0, ids.ne1, ids.ne2].
/// The ids are checked against a's rows when the graph runs.
pub fn get_rows(ctx: &Arc<TensorContext>, a: &TensorHandle, ids: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    let (na, ni) = (a.ne(), ids.ne());
    if type_id(ids) != TYPE_I32 {
        return Err(err(format!("ids must be an i32 tensor, got {}", ids.describe())));
    }
    let t = a.type_info();
    if !(t.can_dequantize || t.name == "i32") || !a.rows_contiguous() {
        return Err(err(format!("cannot read rows of {}", a.describe())));
    }
    if na[2] != ni[1] || na[3] != ni[2] || ni[3] != 1 {
        return Err(err(format!(
            "ids {} do not fit the rows of {} (ids.ne1 must be a.ne2, ids.ne2 a.ne3)",
            shape(ni),
            shape(na)
        )));
    }
    let out_type = if t.name == "i32" { TYPE_I32 } else { TYPE_F32 };
    plan("get_rows", ctx, &[(out_type, [na[0], ni[0], ni[1], ni[2]])])?
        .build(&[a, ids], |c| c.get_rows(a.raw(), ids.raw()))
}

/// How Lugh::Ops::rope rotates a head's dimensions.
#[derive(Clone, Copy, Debug)]
pub struct RopeOptions {
    pub n_dims: i64,
    /// NeoX pairs (i, i + n_dims/2) instead of adjacent ones (i, i + 1).
    pub neox: bool,
    pub freq_base: f64,
    pub freq_scale: f64,
}

/// Rotary position embedding of a [head_dim, n_head, n_tokens] tensor at the
/// i32 positions `pos` [n_tokens].
pub fn rope(
    ctx: &Arc<TensorContext>,
    a: &TensorHandle,
    pos: &TensorHandle,
    o: RopeOptions,
) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    let (na, np) = (a.ne(), pos.ne());
    if type_id(pos) != TYPE_I32 || np[1] != 1 || np[2] != 1 || np[3] != 1 {
        return Err(err(format!("positions must be an i32 vector, got {}", pos.describe())));
    }
    if na[2] != np[0] {
        return Err(err(format!("the input {} has {} tokens (ne2) but {} positions", shape(na), na[2], np[0])));
    }
    if o.n_dims <= 0 || o.n_dims % 2 != 0 || o.n_dims > na[0] {
        return Err(err(format!("n_dims must be even and between 2 and ne0 ({}), got {}", na[0], o.n_dims)));
    }
    for (what, v) in [("freq_base", o.freq_base), ("freq_scale", o.freq_scale)] {
        if !v.is_finite() || v <= 0.0 {
            return Err(err(format!("{what} must be a positive number, got {v}")));
        }
    }
    let params = RopeParams {
        n_dims: o.n_dims as i32,
        mode: if o.neox { GGML_ROPE_TYPE_NEOX } else { GGML_ROPE_TYPE_NORM },
        n_ctx_orig: 0,
        freq_base: o.freq_base as f32,
        freq_scale: o.freq_scale as f32,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    plan("rope", ctx, &[(TYPE_F32, na)])?.build(&[a, pos], |c| c.rope_ext(a.raw(), pos.raw(), None, &params))
}

/// Sets element (i, j) of each matrix to -inf where i > n_past + j (a causal mask).
pub fn diag_mask_inf(ctx: &Arc<TensorContext>, a: &TensorHandle, n_past: i64) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    if !(0..=i64::from(i32::MAX)).contains(&n_past) {
        return Err(err(format!("n_past must be an integer from 0 to {}, got {n_past}", i32::MAX)));
    }
    plan("diag_mask_inf", ctx, &[(TYPE_F32, a.ne())])?.build(&[a], |c| c.diag_mask_inf(a.raw(), n_past as i32))
}

/// log(1 + exp(x)), element-wise (autograd builds its GELU from it: ggml
/// has no backward pass for GELU itself).
pub fn softplus(ctx: &Arc<TensorContext>, a: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the input", a)?;
    plan("softplus", ctx, &[(TYPE_F32, a.ne())])?.build(&[a], |c| c.softplus(a.raw()))
}

/// Copies `src` into `dst` when the graph runs (both f32, one shape).
pub fn copy_into(ctx: &Arc<TensorContext>, src: &TensorHandle, dst: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the source", src)?;
    require_f32("the destination", dst)?;
    if src.ne() != dst.ne() {
        return Err(err(format!("cannot copy {} into {}", src.describe(), dst.describe())));
    }
    view_plan("copy", ctx).build(&[src, dst], |c| c.cpy(src.raw(), dst.raw()))
}

/// One AdamW step of `param` in place, by ggml-opt's own op: `m` and `v`
/// are the moment estimates, `hyper` the 7 hyperparameters (see
/// Ctx::opt_step_adamw).
pub fn adamw_step(
    ctx: &Arc<TensorContext>,
    param: &TensorHandle,
    grad: &TensorHandle,
    m: &TensorHandle,
    v: &TensorHandle,
    hyper: &TensorHandle,
) -> Result<Arc<TensorHandle>, Error> {
    for (what, t) in [("the parameter", param), ("the gradient", grad), ("m", m), ("v", v)] {
        require_f32(what, t)?;
        if t.ne() != param.ne() {
            return Err(err(format!("{what} {} does not match the parameter {}", t.describe(), param.describe())));
        }
    }
    require_f32("the hyperparameters", hyper)?;
    if hyper.nelements() != 7 {
        return Err(err(format!("AdamW takes 7 hyperparameters, got {}", hyper.nelements())));
    }
    if param.raw().op() != 0 {
        return Err(err(format!("the parameter must be a tensor made directly, not {}", param.raw().op_desc())));
    }
    view_plan("adamw", ctx).build(&[param, grad, m, v, hyper], |c| {
        // ggml-opt's op updates only tensors marked as parameters.
        param.raw().mark_param();
        c.opt_step_adamw(param.raw(), grad.raw(), m.raw(), v.raw(), hyper.raw())
    })
}

/// The cross-entropy of `logits` [n_classes, rows...] against the target
/// probabilities `targets` (one shape): -mean over rows of Σ t·log_softmax.
pub fn cross_entropy_loss(
    ctx: &Arc<TensorContext>,
    logits: &TensorHandle,
    targets: &TensorHandle,
) -> Result<Arc<TensorHandle>, Error> {
    require_f32("the logits", logits)?;
    require_f32("the targets", targets)?;
    if logits.ne() != targets.ne() {
        return Err(err(format!("logits {} and targets {} differ in shape", logits.describe(), targets.describe())));
    }
    plan("cross_entropy_loss", ctx, &[(TYPE_F32, [1, 1, 1, 1])])?
        .build(&[logits, targets], |c| c.cross_entropy_loss(logits.raw(), targets.raw()))
}
