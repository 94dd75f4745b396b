//! Lugh::Autograd: tensors that remember how they were computed, and their
//! gradients from ggml's own backward graph (ggml_build_backward_expand).
//!
//! Ops run eagerly (a result holds its values at once) on the tensor API's
//! contexts; a result that requires a gradient keeps its inputs, which is
//! all `backward` needs to find the parameters. The gradient itself is
//! ggml's: one backward graph from the loss to every parameter.
use crate::engine::tensor::graph::{compute_pending, gradients};
use crate::engine::tensor::ops::{self as tensor_ops, Binary, Unary};
use crate::engine::tensor::{TensorContext, TensorHandle, Values};
use crate::engine::train::pass::TrainingPass;
use crate::engine::Error;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};

const F32: i64 = 0;

/// An autograd tensor (Lugh::Autograd::Tensor).
pub struct Variable {
    /// Unique in the process, never reused: see [`Variable::id`].
    id: u64,
    /// Whether it is in HANDLES (so that dropping the many variables that
    /// never gave a handle takes no lock).
    has_handle: AtomicBool,
    value: Arc<TensorHandle>,
    requires_grad: AtomicBool,
    /// What it was computed from (empty for a leaf, or when not recorded).
    inputs: Vec<Arc<Variable>>,
    /// The accumulated gradient, ne0 fastest.
    grad: Mutex<Option<Vec<f32>>>,
    /// For the logits of a training forward: the model's pass, which turns
    /// their gradient into the gradients of `inputs` (the trained tensors).
    pass: Option<Mutex<TrainingPass>>,
    /// Of the pass's trained tensors, those that get gradients (all when
    /// None): see `register`.
    registered: Mutex<Option<Vec<bool>>>,
}

/// The ops of Lugh::Autograd::Ops.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Matmul,
    Sum,
    Mean,
    Relu,
    Gelu,
    Silu,
    Softmax,
    Scale(f64),
    RmsNorm(f64),
    /// Cross-entropy of logits (first input) against target probabilities.
    CrossEntropy,
    /// Mean squared error of predictions against targets (same element count).
    Mse,
}

impl Variable {
    /// A leaf: a new zero-filled tensor of `type_id` (f32, f16 or i32).
    pub fn leaf(
        ctx: &Arc<TensorContext>,
        type_id: i64,
        dims: &[i64],
        requires_grad: bool,
    ) -> Result<Arc<Variable>, Error> {
        let v = Variable::node(TensorHandle::new(ctx, type_id, dims)?, false, Vec::new(), None);
        v.set_requires_grad(requires_grad)?;
        Ok(v)
    }

    /// The logits of a training pass [n_vocab, n_tokens], in `ctx`. With
    /// `record` they keep the pass, and backward carries their gradient on
    /// through the model to `params` (the tensors the pass was made for).
    pub fn from_pass(
        ctx: &Arc<TensorContext>,
        pass: TrainingPass,
        params: Vec<Arc<Variable>>,
        record: bool,
    ) -> Result<Arc<Variable>, Error> {
        let n_tokens = pass.n_tokens() as i64;
        let n_vocab = pass.logits().len() as i64 / n_tokens;
        let value = TensorHandle::new(ctx, F32, &[n_vocab, n_tokens])?;
        let bytes: Vec<u8> = pass.logits().iter().flat_map(|v| v.to_le_bytes()).collect();
        value.set_bytes(&bytes)?;
        let tracked = record && params.iter().any(|p| p.requires_grad());
        Ok(Variable::node(value, tracked, params, tracked.then_some(pass)))
    }

    /// A new variable; `inputs` are kept only when `tracked`.
    fn node(
        value: Arc<TensorHandle>,
        tracked: bool,
        inputs: Vec<Arc<Variable>>,
        pass: Option<TrainingPass>,
    ) -> Arc<Self> {
        Arc::new(Variable {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            has_handle: AtomicBool::new(false),
            value,
            requires_grad: AtomicBool::new(tracked),
            inputs: if tracked { inputs } else { Vec::new() },
            grad: Mutex::new(None),
            pass: pass.map(Mutex::new),
            registered: Mutex::new(None),
        })
    }

    /// A number that names this variable for its life and is never given to
    /// another one (Lugh 0.12's `id`).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A token for Lugh 0.12's `_raw_tensor_ptr`: not an address, but the
    /// id, which [`Variable::tensor_for_handle`] resolves while this
    /// variable lives. A forged or stale token can name no other tensor.
    pub fn raw_handle(self: &Arc<Self>) -> u64 {
        handles().insert(self.id, Arc::downgrade(self));
        self.has_handle.store(true, Ordering::Relaxed);
        self.id
    }

    /// The tensor of the variable whose [`Variable::raw_handle`] is `token`.
    pub fn tensor_for_handle(token: i64) -> Result<Arc<TensorHandle>, Error> {
        // the lock is released before `v` can be dropped (Drop takes it)
        let live = u64::try_from(token).ok().and_then(|id| handles().get(&id).and_then(Weak::upgrade));
        if let Some(v) = live {
            return Ok(v.value.clone());
        }
        Err(Error::Argument(if token > 0 && (token as u64) < NEXT_ID.load(Ordering::Relaxed) {
            format!("handle {token} is stale: its Lugh::Autograd::Tensor was freed, or gave no handle")
        } else {
            format!("{token} is not a handle from a Lugh::Autograd::Tensor's _raw_tensor_ptr")
        }))
    }

    /// Limits the tensors the backward pass of these training logits gives
    /// gradients to `weights` (each one the pass trains); an empty list
    /// gives them to all again.
    pub fn register(&self, weights: &[Arc<Variable>]) -> Result<(), Error> {
        if self.pass.is_none() {
            return Err(Error::Argument(
                "the logits are not from Lugh::Train->forward with gradients on (no_grad was in force, or they are \
                 another tensor)"
                    .into(),
            ));
        }
        let mut chosen = vec![weights.is_empty(); self.inputs.len()];
        for (i, w) in weights.iter().enumerate() {
            let at = self.inputs.iter().position(|p| Arc::ptr_eq(p, w)).ok_or_else(|| {
                Error::Argument(format!(
                    "weight {i} ({}) is not trained by this forward pass (give train_full => 1 for the model's \
                     weights, or lora => for an adapter's)",
                    w.value.describe()
                ))
            })?;
            chosen[at] = true;
        }
        *self.registered.lock().unwrap_or_else(|p| p.into_inner()) = Some(chosen);
        Ok(())
    }

    pub fn value(&self) -> &Arc<TensorHandle> {
        &self.value
    }

    pub fn requires_grad(&self) -> bool {
        self.requires_grad.load(Ordering::Relaxed)
    }

    /// Turns gradient tracking of a leaf on or off (an f32 tensor only).
    pub fn set_requires_grad(&self, on: bool) -> Result<(), Error> {
        if on && self.value.type_info().name != "f32" {
            return Err(Error::Argument(format!(
                "only an f32 tensor can require a gradient, not {}",
                self.value.describe()
            )));
        }
        if on && !self.is_leaf() {
            return Err(Error::Argument("requires_grad can only be set on a leaf tensor".into()));
        }
        self.requires_grad.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Made directly (not by an op that recorded its inputs).
    pub fn is_leaf(&self) -> bool {
        self.inputs.is_empty()
    }

    /// A tensor ggml sees as a parameter of the backward graph: a leaf, or
    /// the logits of a training pass (whose own backward comes after).
    fn is_ggml_leaf(&self) -> bool {
        self.is_leaf() || self.pass.is_some()
    }

    fn grad_slot(&self) -> MutexGuard<'_, Option<Vec<f32>>> {
        self.grad.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The gradient: zeros before any backward pass, None when the tensor
    /// does not require one.
    pub fn grad(&self) -> Option<Vec<f32>> {
        let slot = self.grad_slot();
        match &*slot {
            Some(g) => Some(g.clone()),
            None => self.requires_grad().then(|| vec![0.0; self.value.nelements() as usize]),
        }
    }

    pub fn set_grad(&self, grad: Vec<f32>) {
        *self.grad_slot() = Some(grad);
    }

    pub fn zero_grad(&self) {
        if let Some(g) = self.grad_slot().as_mut() {
            g.iter_mut().for_each(|x| *x = 0.0);
        }
    }

    /// Back-propagates from this tensor: with no seed, a one-element
    /// tensor's own gradient is 1 and a larger one's is all ones (the
    /// gradient of its sum); a seed gives the gradient of each element.
    /// Gradients add up over calls until zero_grad.
    pub fn backward(self: &Arc<Self>, seed: Option<&[f64]>) -> Result<(), Error> {
        if !self.requires_grad() {
            return Err(Error::Argument("backward() called on a tensor that does not require gradients".into()));
        }
        let n = self.value.nelements() as usize;
        if let Some(s) = seed {
            if s.len() != n {
                return Err(Error::Argument(format!("Expected {n} gradient values, got {}", s.len())));
            }
        }
        let loss = if n == 1 && seed.is_none_or(|s| s[0] == 1.0) {
            self.value.clone()
        } else {
            // d(sum(x * seed))/dx = seed
            let bytes = self.value.nbytes();
            let scratch = TensorContext::new((4 * bytes + 8192) as u64)?;
            let weights = TensorHandle::new(&scratch, F32, &self.value.shape())?;
            let ones = vec![1.0; n];
            weights.set_values(seed.unwrap_or(&ones))?;
            let weighted = tensor_ops::binary(&scratch, Binary::Mul, &self.value, &weights)?;
            let loss = tensor_ops::sum(&scratch, &weighted)?;
            compute_pending(&loss)?;
            loss
        };
        let (leaves, others) = self.tracked();
        let params: Vec<Arc<TensorHandle>> = leaves.iter().map(|v| v.value.clone()).collect();
        let between: Vec<Arc<TensorHandle>> = others.iter().map(|v| v.value.clone()).collect();
        let grads = gradients(&loss, &params, &between)?;
        // the model passes among the leaves take their logits' gradient on
        let mut through_models = Vec::new();
        for (v, g) in leaves.iter().zip(&grads) {
            if let Some(pass) = &v.pass {
                let mut pass = pass.lock().unwrap_or_else(|p| p.into_inner());
                through_models.push((v.clone(), pass.backward(g)?));
            }
        }
        for (v, g) in leaves.iter().chain(&others).zip(grads) {
            v.accumulate(g);
        }
        for (logits, grads) in through_models {
            let registered = logits.registered.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for (i, (param, g)) in logits.inputs.iter().zip(grads).enumerate() {
                if registered.as_ref().is_none_or(|r| r[i]) {
                    param.accumulate(g);
                }
            }
        }
        Ok(())
    }

    fn accumulate(&self, g: Vec<f32>) {
        let mut slot = self.grad_slot();
        match slot.as_mut() {
            Some(acc) => acc.iter_mut().zip(g).for_each(|(a, d)| *a += d),
            None => *slot = Some(g),
        }
    }

    /// The tensors this one was computed from that require a gradient:
    /// leaves (the parameters) and op results, each once.
    fn tracked(self: &Arc<Self>) -> (Vec<Arc<Variable>>, Vec<Arc<Variable>>) {
        let (mut leaves, mut others) = (Vec::new(), Vec::new());
        let mut seen = HashSet::new();
        let mut stack = vec![self.clone()];
        while let Some(v) = stack.pop() {
            if !v.requires_grad() || !seen.insert(Arc::as_ptr(&v) as usize) {
                continue;
            }
            stack.extend(v.inputs.iter().cloned());
            if v.is_ggml_leaf() {
                leaves.push(v);
            } else {
                others.push(v);
            }
        }
        (leaves, others)
    }

    /// The values, as f64 (for get_data).
    pub fn data(&self) -> Result<Vec<f64>, Error> {
        Ok(match self.value.values()? {
            Values::F32(v) => v.into_iter().map(f64::from).collect(),
            Values::F64(v) => v,
            Values::Int(v) => v.into_iter().map(|x| x as f64).collect(),
        })
    }
}

/// Applies `op` to `inputs` in `ctx`, computing the result now; it records
/// its inputs (and so takes part in backward) when `record` is on and an
/// input requires a gradient.
pub fn apply(ctx: &Arc<TensorContext>, op: Op, inputs: &[Arc<Variable>], record: bool) -> Result<Arc<Variable>, Error> {
    let want = if matches!(op, Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Matmul | Op::CrossEntropy | Op::Mse) {
        2
    } else {
        1
    };
    assert_eq!(inputs.len(), want, "apply: operand count");
    let a = &inputs[0].value;
    let value = match op {
        Op::Add => tensor_ops::binary(ctx, Binary::Add, a, &inputs[1].value)?,
        Op::Sub => tensor_ops::binary(ctx, Binary::Sub, a, &inputs[1].value)?,
        Op::Mul => tensor_ops::binary(ctx, Binary::Mul, a, &inputs[1].value)?,
        Op::Div => tensor_ops::binary(ctx, Binary::Div, a, &inputs[1].value)?,
        Op::Matmul => tensor_ops::mul_mat(ctx, a, &inputs[1].value)?,
        Op::Sum => tensor_ops::sum(ctx, a)?,
        Op::Mean => {
            let total = tensor_ops::sum(ctx, a)?;
            tensor_ops::scale(ctx, &total, 1.0 / a.nelements() as f64)?
        }
        Op::Relu => tensor_ops::unary(ctx, Unary::Relu, a)?,
        Op::Silu => tensor_ops::unary(ctx, Unary::Silu, a)?,
        Op::Gelu => gelu(ctx, a)?,
        Op::Softmax => tensor_ops::soft_max(ctx, a)?,
        Op::Scale(s) => tensor_ops::scale(ctx, a, s)?,
        Op::RmsNorm(eps) => tensor_ops::rms_norm(ctx, a, eps)?,
        Op::CrossEntropy => tensor_ops::cross_entropy_loss(ctx, a, &inputs[1].value)?,
        Op::Mse => mse(ctx, a, &inputs[1].value)?,
    };
    compute_pending(&value)?;
    let tracked = record && inputs.iter().any(|i| i.requires_grad());
    Ok(Variable::node(value, tracked, inputs.to_vec(), None))
}

/// Ids start at 1: Lugh 0.12's were positive.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The variables that gave a raw handle, by id; an entry leaves with its
/// variable (Drop), so the map holds only live ones.
static HANDLES: LazyLock<Mutex<HashMap<u64, Weak<Variable>>>> = LazyLock::new(Mutex::default);

fn handles() -> MutexGuard<'static, HashMap<u64, Weak<Variable>>> {
    HANDLES.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Variable {
    fn drop(&mut self) {
        if *self.has_handle.get_mut() {
            handles().remove(&self.id);
        }
    }
}

/// Σ(p - t)² / n, with t read in p's shape (the element counts must agree).
fn mse(ctx: &Arc<TensorContext>, p: &Arc<TensorHandle>, t: &Arc<TensorHandle>) -> Result<Arc<TensorHandle>, Error> {
    if p.nelements() != t.nelements() {
        return Err(Error::Argument(format!(
            "Predictions and targets must have same number of elements ({} and {})",
            p.describe(),
            t.describe()
        )));
    }
    let t = if t.ne() == p.ne() { t.clone() } else { tensor_ops::reshape(ctx, t, &p.shape())? };
    let diff = tensor_ops::binary(ctx, Binary::Sub, p, &t)?;
    let square = tensor_ops::unary(ctx, Unary::Sqr, &diff)?;
    let total = tensor_ops::sum(ctx, &square)?;
    tensor_ops::scale(ctx, &total, 1.0 / p.nelements() as f64)
}

/// Cross-entropy of `logits` [n_classes, rows] against one class id per row.
pub fn cross_entropy(
    ctx: &Arc<TensorContext>,
    logits: &Arc<Variable>,
    targets: &[i64],
    record: bool,
) -> Result<Arc<Variable>, Error> {
    let ne = logits.value.ne();
    let (n_classes, rows) = (ne[0], ne[1] * ne[2] * ne[3]);
    if targets.len() as i64 != rows {
        return Err(Error::Argument(format!("Number of targets ({}) must match batch size ({rows})", targets.len())));
    }
    if let Some((i, t)) = targets.iter().enumerate().find(|&(_, &t)| !(0..n_classes).contains(&t)) {
        return Err(Error::Argument(format!("Target ID {t} (index {i}) out of range [0, {n_classes})")));
    }
    let one_hot = Variable::leaf(ctx, F32, &logits.value.shape(), false)?;
    let mut probs = vec![0.0; (n_classes * rows) as usize];
    for (row, &t) in targets.iter().enumerate() {
        probs[row * n_classes as usize + t as usize] = 1.0;
    }
    one_hot.value.set_values(&probs)?;
    apply(ctx, Op::CrossEntropy, &[logits.clone(), one_hot], record)
}

/// GELU (tanh approximation) from ops ggml can differentiate:
/// 0.5·x·(1 + tanh(u)) = x·σ(2u), u = √(2/π)·(x + 0.044715·x³), and
/// σ(z) = exp(-softplus(-z)), which neither overflows nor divides.
fn gelu(ctx: &Arc<TensorContext>, x: &TensorHandle) -> Result<Arc<TensorHandle>, Error> {
    let square = tensor_ops::unary(ctx, Unary::Sqr, x)?;
    let cube = tensor_ops::binary(ctx, Binary::Mul, &square, x)?;
    let cube_term = tensor_ops::scale(ctx, &cube, 0.044715)?;
    let inner = tensor_ops::binary(ctx, Binary::Add, x, &cube_term)?;
    let minus_two_u = tensor_ops::scale(ctx, &inner, -2.0 * (2.0 / std::f64::consts::PI).sqrt())?;
    let softplus = tensor_ops::softplus(ctx, &minus_two_u)?;
    let minus_softplus = tensor_ops::scale(ctx, &softplus, -1.0)?;
    let sigmoid = tensor_ops::unary(ctx, Unary::Exp, &minus_softplus)?;
    tensor_ops::binary(ctx, Binary::Mul, x, &sigmoid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(ctx: &Arc<TensorContext>, values: &[f64], dims: &[i64]) -> Arc<Variable> {
        let v = Variable::leaf(ctx, F32, dims, true).unwrap();
        v.value().set_values(values).unwrap();
        v
    }

    /// Central differences of f at x (each element in turn).
    fn numeric(values: &[f64], f: &dyn Fn(&[f64]) -> f64) -> Vec<f64> {
        let h = 1e-2;
        (0..values.len())
            .map(|i| {
                let (mut up, mut down) = (values.to_vec(), values.to_vec());
                up[i] += h;
                down[i] -= h;
                (f(&up) - f(&down)) / (2.0 * h)
            })
            .collect()
    }

    #[test]
    fn every_op_matches_finite_differences() {
        let ctx = TensorContext::new(64 << 20).unwrap();
        let xs = [0.3, -1.2, 0.8, 2.0, -0.4, 1.1];
        let ws = [0.5, -0.7, 1.3, 0.2, -1.1, 0.9];
        let ops = [
            Op::Add,
            Op::Sub,
            Op::Mul,
            Op::Div,
            Op::Matmul,
            Op::Mean,
            Op::Relu,
            Op::Gelu,
            Op::Silu,
            Op::Softmax,
            Op::Scale(-1.5),
            Op::RmsNorm(1e-5),
        ];
        for op in ops {
            let loss_of = |x: &[f64]| -> (f64, Option<Vec<f32>>) {
                let a = leaf(&ctx, x, &[3, 2]);
                let w = leaf(&ctx, &ws, &[3, 2]);
                let inputs = if matches!(op, Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Matmul) {
                    vec![a.clone(), w]
                } else {
                    vec![a.clone()]
                };
                let y = apply(&ctx, op, &inputs, true).unwrap();
                // a weighted sum, so every output element matters differently
                let n = y.value().nelements() as usize;
                let weights: Vec<f64> = (0..n).map(|i| 1.0 + 0.25 * i as f64).collect();
                let c = Variable::leaf(&ctx, F32, &y.value().shape(), false).unwrap();
                c.value().set_values(&weights).unwrap();
                let loss = apply(&ctx, Op::Sum, &[apply(&ctx, Op::Mul, &[y, c], true).unwrap()], true).unwrap();
                let value = loss.data().unwrap()[0];
                loss.backward(None).unwrap();
                (value, a.grad())
            };
            let (_, analytic) = loss_of(&xs);
            let numeric = numeric(&xs, &|x| loss_of(x).0);
            for (i, (g, n)) in analytic.unwrap().iter().zip(&numeric).enumerate() {
                let err = (f64::from(*g) - n).abs() / n.abs().max(1e-1);
                assert!(err < 1e-2, "{op:?} element {i}: analytic {g}, numeric {n}");
            }
        }
    }
}
