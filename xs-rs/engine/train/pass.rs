//! A training pass: the model's forward graph (the inference graph builder
//! in its differentiable form) with ggml's backward graph behind it, so the
//! gradients of the trainable tensors (LoRA pairs, or weights) are exact.
//!
//! The forward half runs when the pass is made and gives the logits; the
//! caller's loss then yields dloss/dlogits, which seeds the backward half:
//! the graph's own loss is Σ logits·seed, whose gradient with respect to
//! each parameter is the chain rule's product. Both halves share one
//! allocation, so the activations the backward half reads are still there.
use crate::engine::forward::graph::{Blueprint, Segment};
use crate::engine::forward::lora::LoraAdapter;
use crate::engine::forward::runner::Runner;
use crate::engine::ggml::ops::{GraphCtx, Tensor, GGML_TYPE_F32, GGML_TYPE_I32};
use crate::engine::ggml::runtime::{self as rt, Device, Gallocr};
use crate::engine::model::arch::Window;
use crate::engine::model::gguf::TensorInfo;
use crate::engine::model::weights::ModelWeights;
use crate::engine::model::Model;
use crate::engine::tensor::graph::{with_cpu, DIFFERENTIABLE};
use crate::engine::tensor::{lock, TensorContext};
use crate::engine::train::autograd::Variable;
use crate::engine::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// The model's trainable weights: f32 copies of its f32 tensors (norms,
/// biases, and every matrix of an f32 model; not RoPE factors), made on
/// first use in `ctx` (or a context of their own) and the same tensors for
/// every later call. The file's mapping is read-only, so training changes
/// the copies, which training passes with `train_full` use.
pub fn trainable_weights(model: &Model, ctx: Option<&Arc<TensorContext>>) -> Result<Vec<(String, Arc<Variable>)>> {
    if let Some(w) = made_trainable_weights(model) {
        return Ok(w.clone());
    }
    let infos: Vec<&TensorInfo> = model
        .gguf
        .tensors
        .iter()
        .filter(|t| t.ggml_type == GGML_TYPE_F32 as u32 && !t.name.starts_with("rope_") && t.shape.len() <= 2)
        .collect();
    let ctx = match ctx {
        Some(c) => c.clone(),
        None => {
            let bytes: u64 = infos.iter().map(|t| t.size + 1024).sum();
            TensorContext::new(bytes + 4096)?
        }
    };
    let mut weights = Vec::with_capacity(infos.len());
    for info in infos {
        let dims: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
        let v = Variable::leaf(&ctx, 0, &dims, true)?;
        let mut bytes = vec![0u8; info.size as usize];
        model.read_tensor_data(info, &mut bytes)?;
        v.value().set_bytes(&bytes)?;
        v.value().raw().set_name(&info.name);
        weights.push((info.name.clone(), v));
    }
    let state = model.training_state.get_or_init(|| Box::new(weights));
    Ok(state.downcast_ref::<TrainableWeights>().expect("the model's training state is its trainable weights").clone())
}

/// A model's trainable copies of its f32 weights: (GGUF name, tensor).
type TrainableWeights = Vec<(String, Arc<Variable>)>;

/// The trainable weights `trainable_weights` made for `model`, if it has.
fn made_trainable_weights(model: &Model) -> Option<&TrainableWeights> {
    model.training_state.get().and_then(|state| state.downcast_ref::<TrainableWeights>())
}

/// One forward pass kept for its backward pass.
pub struct TrainingPass {
    // Drop order: the memory and graphs before the weights they read.
    _alloc: Gallocr,
    full: GraphCtx,
    forward: GraphCtx,
    backward: GraphCtx,
    inputs: crate::engine::forward::inputs::GraphInputs,
    tokens: Vec<i32>,
    window: Window,
    seed: Tensor,
    logits: Vec<f32>,
    params: Vec<Tensor>,
    /// Whether the forward half's activations are still in place (a
    /// backward pass may overwrite them: another one reruns the forward).
    fresh: bool,
    n_threads: usize,
    n_vocab: usize,
    _weights: Arc<ModelWeights>,
}

// SAFETY: the graphs and memory are owned and used under the caller's lock.
unsafe impl Send for TrainingPass {}

impl TrainingPass {
    /// A training pass of `runner`'s session over `tokens` with `adapters`,
    /// whose gradients are taken for `params` (see `new`); `replace` swaps
    /// weights (by name) for trainable copies. It runs on the CPU, on the
    /// weights in their plain layout: the repacked ones have no gradient
    /// kernels.
    pub fn for_session(
        runner: &Runner,
        tokens: &[i32],
        adapters: &[(Arc<LoraAdapter>, f32)],
        params: &[Tensor],
        replace: &HashMap<String, Tensor>,
    ) -> Result<TrainingPass> {
        if !runner.placement().is_cpu_only() {
            return Err(Error::Backend(format!(
                "training runs on the CPU; this session uses the '{}' backend",
                runner.backend_name()
            )));
        }
        if tokens.is_empty() {
            return Err(Error::Argument("a training pass needs at least one token".into()));
        }
        if tokens.len() > runner.n_ctx() {
            return Err(Error::Argument(format!(
                "{} tokens do not fit the session's context of {} (make the Lugh::Inference with a larger n_ctx)",
                tokens.len(),
                runner.n_ctx()
            )));
        }
        if let Some((i, t)) = tokens.iter().enumerate().find(|&(_, &t)| t < 0 || t as usize >= runner.n_vocab()) {
            return Err(Error::Argument(format!(
                "token {t} (index {i}) is out of range: the vocabulary has {} tokens",
                runner.n_vocab()
            )));
        }
        for (adapter, _) in adapters {
            adapter.check_model(runner.model())?;
        }
        let weights = runner.plain_cpu_weights()?;
        let weights = if replace.is_empty() { weights } else { Arc::new(weights.with_replaced(replace)) };
        let bp = runner.differentiable_blueprint(&weights, adapters);
        TrainingPass::new(&bp, weights.clone(), tokens, params, runner.n_threads())
    }

    /// Builds the pass over `tokens` for `bp` (whose weights are `weights`),
    /// taking gradients for `params` (leaf f32 tensors with data that the
    /// graph reads: LoRA matrices or weights), and runs its forward half.
    pub fn new(
        bp: &Blueprint,
        weights: Arc<ModelWeights>,
        tokens: &[i32],
        params: &[Tensor],
        n_threads: usize,
    ) -> Result<TrainingPass> {
        if params.is_empty() {
            return Err(Error::Argument("nothing to train: no trainable tensor was given".into()));
        }
        let n = tokens.len();
        // the backward half has a few nodes for each forward one
        let forward_nodes = bp.max_nodes() + 64 * n_adapters(bp);
        let size = 8 * forward_nodes;
        let g = GraphCtx::new_with_grads(size, size)
            .ok_or_else(|| Error::Ggml("cannot allocate a training graph".into()))?;
        let guard = lock();
        let saved: Vec<i32> = params.iter().map(|p| p.flags()).collect();
        // marked before the forward is built: ggml sorts parameters among the nodes
        params.iter().for_each(|p| p.mark_param());
        let built = bp.build_into(g, &[Segment { cache: None, n_tokens: n, all_outputs: true }], false);
        let built = match built {
            Ok(b) => b,
            Err(e) => {
                params.iter().zip(&saved).for_each(|(p, &f)| p.restore_flags(f));
                return Err(e);
            }
        };
        let full = built.g;
        let n_forward = full.n_nodes();
        let seed = full.new_tensor(GGML_TYPE_F32, &[bp.hp.n_vocab as i64, n as i64]);
        seed.set_name("logits_grad");
        seed.set_input();
        let surrogate = full.sum(full.mul(built.output, seed));
        surrogate.mark_loss();
        full.expand(surrogate);
        let reached = full.nodes().iter().take(n_forward).filter(|t| params.iter().any(|p| p.0 == t.0)).count();
        if reached == 0 {
            params.iter().zip(&saved).for_each(|(p, &f)| p.restore_flags(f));
            return Err(Error::Argument(
                "nothing to train: none of the trainable tensors takes part in the model's forward pass".into(),
            ));
        }
        if let Some(op) = undifferentiable(&full.nodes()[..n_forward], params) {
            params.iter().zip(&saved).for_each(|(p, &f)| p.restore_flags(f));
            return Err(Error::Argument(format!(
                "training a {} model is not supported: ggml has no gradient for its {op} op",
                bp.spec.name
            )));
        }
        full.build_backward();
        params.iter().zip(&saved).for_each(|(p, &f)| p.restore_flags(f));
        drop(guard);
        // the gradients are read after the graph ran: outputs keep their memory
        for p in params {
            if let Some(grad) = full.grad(*p) {
                grad.set_output();
            }
        }
        let nodes = full.nodes();
        let forward = node_graph(&nodes[..n_forward])?;
        let backward = node_graph(&nodes[n_forward..])?;
        let device =
            Device::by_backend_name("cpu").ok_or_else(|| Error::Backend("ggml's CPU backend is missing".into()))?;
        let mut alloc = Gallocr::new(device.buffer_type())
            .ok_or_else(|| Error::Ggml("cannot create a graph allocator for training".into()))?;
        if !alloc.alloc_graph(&full) {
            return Err(Error::Ggml(format!("cannot allocate the memory of a training pass over {n} tokens")));
        }
        let mut pass = TrainingPass {
            _alloc: alloc,
            full,
            forward,
            backward,
            inputs: built.inputs,
            tokens: tokens.to_vec(),
            window: bp.hp.window(),
            seed,
            logits: Vec::new(),
            params: params.to_vec(),
            fresh: false,
            n_threads,
            n_vocab: bp.hp.n_vocab,
            _weights: weights,
        };
        pass.run_forward()?;
        let output = built.output;
        rt::tensor_get_f32_into(output, 0, pass.n_vocab * n, &mut pass.logits);
        Ok(pass)
    }

    fn run_forward(&mut self) -> Result<()> {
        self.inputs.fill_training(&self.tokens, self.window);
        let forward = &self.forward;
        with_cpu(self.n_threads, |cpu| compute(cpu, forward))?;
        self.fresh = true;
        Ok(())
    }

    /// The logits [n_vocab, n_tokens], ne0 fastest.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// The gradient of each parameter (in the order given) for a loss whose
    /// gradient with respect to the logits is `dlogits`.
    pub fn backward(&mut self, dlogits: &[f32]) -> Result<Vec<Vec<f32>>> {
        assert_eq!(dlogits.len(), self.logits.len(), "one gradient per logit");
        if !self.fresh {
            self.run_forward()?;
        }
        rt::tensor_set(self.seed, dlogits);
        self.full.reset_grads();
        self.fresh = false;
        let backward = &self.backward;
        with_cpu(self.n_threads, |cpu| compute(cpu, backward))?;
        Ok(self
            .params
            .iter()
            .map(|&p| {
                let n = p.ne().iter().product::<i64>() as usize;
                match self.full.grad(p) {
                    Some(g) => {
                        let mut v = Vec::with_capacity(n);
                        rt::tensor_get_f32_into(g, 0, n, &mut v);
                        v
                    }
                    None => vec![0.0; n],
                }
            })
            .collect())
    }
}

/// The first op between a parameter and the logits that ggml cannot
/// differentiate (the nodes are in graph order, so sources come first).
fn undifferentiable(nodes: &[Tensor], params: &[Tensor]) -> Option<String> {
    let mut depends: std::collections::HashSet<usize> = params.iter().map(|p| p.0 as usize).collect();
    for node in nodes {
        let srcs = node.srcs();
        // ggml leaves out integer results and STEP's gradient (0): nothing
        // flows back through them
        if node.type_id() == GGML_TYPE_I32 || node.op_desc() == "STEP" {
            continue;
        }
        if srcs.iter().any(|s| depends.contains(&(s.0 as usize))) {
            let op = node.op_desc();
            if !DIFFERENTIABLE.contains(&op.as_str()) {
                return Some(op);
            }
            depends.insert(node.0 as usize);
        }
    }
    None
}

fn n_adapters(bp: &Blueprint) -> usize {
    bp.adapters.iter().map(|(a, _)| a.n_weights()).sum()
}

/// A graph that runs `nodes` as they are (their sources were computed
/// before, or are among them).
fn node_graph(nodes: &[Tensor]) -> Result<GraphCtx> {
    let g = GraphCtx::new(nodes.len().max(1)).ok_or_else(|| Error::Ggml("cannot allocate a graph".into()))?;
    nodes.iter().for_each(|&t| g.add_node(t));
    Ok(g)
}

fn compute(cpu: &mut crate::engine::ggml::runtime::Backend, g: &GraphCtx) -> std::result::Result<(), Error> {
    if g.n_nodes() == 0 || cpu.compute(g) {
        Ok(())
    } else {
        Err(Error::Ggml("the training graph failed to compute".into()))
    }
}

/// Writes `model` to `path` as GGUF: its metadata as it is and each tensor
/// as in the file, except that the trainable copies (when made) replace
/// theirs, so a fully trained model can be loaded for generation; with
/// `dequantize` every tensor is written as f32 (general.file_type 0).
pub fn save_model(model: &Model, path: &std::path::Path, dequantize: bool) -> Result<()> {
    let mut w = crate::engine::model::gguf_writer::GgufWriter::new();
    for (key, value) in &model.gguf.kv {
        let value = match key.as_str() {
            "general.file_type" if dequantize => crate::engine::model::gguf::Value::U32(0),
            _ => value.clone(),
        };
        w.kv(key, value);
    }
    let trained: std::collections::HashMap<&str, &Arc<Variable>> =
        made_trainable_weights(model).map(|t| t.iter().map(|(n, v)| (n.as_str(), v)).collect()).unwrap_or_default();
    for info in &model.gguf.tensors {
        let bytes = match trained.get(info.name.as_str()) {
            Some(v) => v.value().bytes()?,
            None => {
                let mut bytes = vec![0u8; info.size as usize];
                model.read_tensor_data(info, &mut bytes)?;
                bytes
            }
        };
        if dequantize && info.ggml_type != GGML_TYPE_F32 as u32 {
            let t = crate::engine::ggml::quant::info(i64::from(info.ggml_type))?;
            let values = crate::engine::ggml::quant::dequantize(&t, &bytes)?;
            w.tensor_f32(&info.name, &info.shape, &values);
        } else {
            w.tensor_raw(&info.name, info.ggml_type, &info.shape, bytes);
        }
    }
    w.write(path)
}
