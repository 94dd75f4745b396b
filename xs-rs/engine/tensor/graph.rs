//! Lugh::Graph: computes the Lugh::Ops results a program asked for, on the
//! CPU backend (the tensors live in their contexts' host arenas).
//!
//! The ggml graph is built when it is computed, sized to what it holds, so
//! build_forward has no node limit. Row ids of get_rows are data, which
//! ggml checks only by aborting: the graph runs in segments that end before
//! each get_rows, whose ids are checked against the rows first.
use crate::engine::ggml::backend;
use crate::engine::ggml::cpu_budget::available_cpus;
use crate::engine::ggml::ops::{GraphCtx, Tensor};
use crate::engine::ggml::runtime::{Backend, Buffer, Device};
use crate::engine::tensor::{f32_values, holds_values, i32_values, lock, mark_computed, TensorContext, TensorHandle};
use crate::engine::Error;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// The CPU backends the graphs run on, one per thread count, each made on
/// first use and kept (with its worker threads: changing a backend's count
/// would restart them for every graph).
/// worker threads) for the process.
static CPU: Mutex<Vec<(usize, Backend)>> = Mutex::new(Vec::new());

/// Runs `f` with the kept CPU backend of `n_threads` threads (capped to the
/// CPUs the process may use).
pub(crate) fn with_cpu<T>(n_threads: usize, f: impl FnOnce(&mut Backend) -> Result<T, Error>) -> Result<T, Error> {
    let n = n_threads.clamp(1, available_cpus());
    let mut backends = CPU.lock().unwrap_or_else(|p| p.into_inner());
    if !backends.iter().any(|(k, _)| *k == n) {
        let mut backend = Device::by_backend_name("cpu")
            .and_then(|d| d.init_backend())
            .ok_or_else(|| Error::Backend("cannot start ggml's CPU backend".into()))?;
        backend.set_n_threads(n);
        backends.push((n, backend));
    }
    let (_, backend) = backends.iter_mut().find(|(k, _)| *k == n).expect("added above");
    f(backend)
}

/// Threads for a graph the program did not size: one for small work (a
/// second thread would cost more in barriers than it saves), else the cores.
fn threads_for(nodes: &[Tensor]) -> usize {
    let elements: i64 = nodes.iter().map(|n| n.ne().iter().product::<i64>()).sum();
    if elements < 1 << 16 {
        1
    } else {
        crate::engine::ggml::cpu_budget::physical_cores()
    }
}

/// The outputs a graph computes (Lugh::Graph).
#[derive(Default)]
pub struct TensorGraph {
    outputs: Mutex<Vec<Arc<TensorHandle>>>,
}

impl TensorGraph {
    pub fn new() -> TensorGraph {
        TensorGraph::default()
    }

    /// Adds `t` (and everything it is computed from) to what compute runs.
    pub fn build_forward(&self, t: Arc<TensorHandle>) {
        let mut outputs = self.outputs.lock().unwrap_or_else(|p| p.into_inner());
        if !outputs.iter().any(|o| o.raw() == t.raw()) {
            outputs.push(t);
        }
    }

    /// The number of ops the graph runs (0 before build_forward).
    pub fn n_nodes(&self) -> usize {
        let outputs = self.outputs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let _guard = lock();
        let mut seen = HashSet::new();
        outputs.iter().map(|o| count_ops(o.raw(), &mut seen)).sum()
    }

    /// Runs every op the outputs need, on `n_threads` CPU threads.
    pub fn compute(&self, n_threads: usize, backend_name: &str) -> Result<(), Error> {
        check_backend(backend_name)?;
        let outputs = self.outputs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if outputs.is_empty() {
            return Err(Error::Argument("the graph is empty (call build_forward first)".into()));
        }
        execute(&outputs, n_threads, false)
    }
}

/// Computes the ops `t` needs that hold no values yet (eager evaluation:
/// what was computed before keeps its values), on as many threads as the
/// work is worth.
pub fn compute_pending(t: &Arc<TensorHandle>) -> Result<(), Error> {
    execute(std::slice::from_ref(t), 0, true)
}

fn execute(outputs: &[Arc<TensorHandle>], n_threads: usize, only_pending: bool) -> Result<(), Error> {
    let mut contexts: Vec<Arc<TensorContext>> = Vec::new();
    for c in outputs.iter().flat_map(|o| o.contexts()) {
        if !contexts.iter().any(|k| Arc::ptr_eq(k, c)) {
            contexts.push(c.clone());
        }
    }
    let _guard = lock();
    let mut seen = HashSet::new();
    let size: usize = outputs.iter().map(|o| count_all(o.raw(), &mut seen)).sum::<usize>() + 1;
    let graph = GraphCtx::new(size).ok_or_else(|| Error::Ggml("cannot allocate a graph".into()))?;
    for o in outputs {
        graph.expand(o.raw());
    }
    let mut nodes = graph.nodes();
    if only_pending {
        nodes.retain(|&n| !holds_values(n, contexts.iter()));
    }
    let n_threads = if n_threads == 0 { threads_for(&nodes) } else { n_threads };
    with_cpu(n_threads, |cpu| {
        let row_lookups: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].op_desc() == "GET_ROWS").collect();
        if row_lookups.is_empty() && !only_pending {
            return run(cpu, &graph);
        }
        let mut start = 0;
        for &i in &row_lookups {
            run_segment(cpu, &nodes[start..i])?;
            check_row_ids(nodes[i])?;
            start = i;
        }
        run_segment(cpu, &nodes[start..])
    })?;
    for &node in &nodes {
        mark_computed(&contexts, node);
    }
    Ok(())
}

/// The ops whose backward pass ggml has (ggml_compute_backward, 0.26.0):
/// anything else on the way from a parameter to the loss would abort.
pub(crate) const DIFFERENTIABLE: &[&str] = &[
    "NONE",
    "ADD",
    "SUB",
    "MUL",
    "DIV",
    "SQR",
    "SQRT",
    "LOG",
    "SUM",
    "SUM_ROWS",
    "MEAN",
    "REPEAT",
    "RMS_NORM",
    "MUL_MAT",
    "SCALE",
    "CONT",
    "RESHAPE",
    "VIEW",
    "PERMUTE",
    "TRANSPOSE",
    "GET_ROWS",
    "DIAG_MASK_INF",
    "SOFT_MAX",
    "ROPE",
    "RELU",
    "SILU",
    "EXP",
    "SOFTPLUS",
    "NEG",
    "ABS",
    "SWIGLU",
    "CROSS_ENTROPY_LOSS",
];

/// The gradient of the scalar `loss` with respect to each of `params`
/// (leaf f32 tensors it is computed from), then to each of `others` (op
/// results on the way), by ggml's backward graph; a tensor the loss does not
/// depend on gets zeros.
pub fn gradients(
    loss: &TensorHandle,
    params: &[Arc<TensorHandle>],
    others: &[Arc<TensorHandle>],
) -> Result<Vec<Vec<f32>>, Error> {
    if loss.type_info().name != "f32" || loss.nelements() != 1 {
        return Err(Error::Argument(format!(
            "the loss must be one f32 value, got {} (reduce it with sum or mean first)",
            loss.describe()
        )));
    }
    if let Some(p) = params.iter().find(|p| p.raw().op() != 0 || p.type_info().name != "f32") {
        return Err(Error::Argument(format!("a parameter must be an f32 tensor made directly, got {}", p.describe())));
    }
    let _guard = lock();
    check_differentiable(loss.raw(), params)?;
    let touched: Vec<Tensor> = params.iter().map(|p| p.raw()).chain(std::iter::once(loss.raw())).collect();
    let saved: Vec<i32> = touched.iter().map(|t| t.flags()).collect();
    for p in params {
        p.raw().mark_param();
    }
    loss.raw().mark_loss();
    let wanted: Vec<&Arc<TensorHandle>> = params.iter().chain(others).collect();
    let result = run_backward(loss.raw(), &wanted);
    for (t, flags) in touched.iter().zip(saved) {
        t.restore_flags(flags);
    }
    result
}

fn run_backward(loss: Tensor, wanted: &[&Arc<TensorHandle>]) -> Result<Vec<Vec<f32>>, Error> {
    let mut seen = HashSet::new();
    let n = count_all(loss, &mut seen);
    // The backward pass adds a few nodes per forward node.
    let graph = GraphCtx::new_with_grads(8 * n + 64, 8 * n + 64)
        .ok_or_else(|| Error::Ggml("cannot allocate a graph with gradients".into()))?;
    graph.expand(loss);
    graph.build_backward();
    let buft = Device::by_backend_name("cpu")
        .ok_or_else(|| Error::Backend("ggml's CPU backend is missing".into()))?
        .buffer_type();
    // Every tensor the backward pass made gets its own memory (none is
    // reused), so the gradients can be read after the graph ran.
    let _buffer = Buffer::alloc_ctx_tensors(&graph.ctx, buft)
        .ok_or_else(|| Error::Ggml("cannot allocate the backward pass's tensors".into()))?;
    graph.reset_grads();
    let nodes = graph.nodes();
    for &node in nodes.iter().filter(|n| n.op_desc() == "GET_ROWS") {
        check_row_ids(node)?;
    }
    with_cpu(threads_for(&nodes), |cpu| run(cpu, &graph))?;
    Ok(wanted
        .iter()
        .map(|p| match graph.grad(p.raw()) {
            Some(g) => f32_values(g),
            None => vec![0.0; p.nelements() as usize],
        })
        .collect())
}

/// Every op between a parameter and the loss has a backward pass in ggml.
fn check_differentiable(loss: Tensor, params: &[Arc<TensorHandle>]) -> Result<(), Error> {
    let param_set: HashSet<usize> = params.iter().map(|p| p.raw().0 as usize).collect();
    // Whether t is computed from a parameter (memoised by address).
    fn depends(t: Tensor, params: &HashSet<usize>, memo: &mut HashMap<usize, (Tensor, bool)>) -> bool {
        if let Some(&(_, d)) = memo.get(&(t.0 as usize)) {
            return d;
        }
        let d = params.contains(&(t.0 as usize))
            | t.srcs().into_iter().fold(false, |any, s| depends(s, params, memo) | any);
        memo.insert(t.0 as usize, (t, d));
        d
    }
    let mut memo = HashMap::new();
    if !depends(loss, &param_set, &mut memo) {
        return Err(Error::Argument("the loss does not depend on any tensor that requires a gradient".into()));
    }
    if let Some((t, _)) = memo.values().find(|(t, d)| *d && !DIFFERENTIABLE.contains(&t.op_desc().as_str())) {
        return Err(Error::Argument(format!("ggml has no gradient for {} (on the way to the loss)", t.op_desc())));
    }
    Ok(())
}

fn check_backend(name: &str) -> Result<(), Error> {
    if name.eq_ignore_ascii_case("cpu") || name.eq_ignore_ascii_case("auto") {
        return Ok(());
    }
    let available: Vec<String> = backend::available().into_iter().map(|b| b.name).collect();
    if available.iter().any(|b| b.eq_ignore_ascii_case(name)) {
        return Err(Error::Backend(format!(
            "Lugh::Graph computes on the CPU (its tensors live in their contexts' host memory); \
             backend '{name}' runs models through Lugh::Inference"
        )));
    }
    Err(Error::Backend(format!("backend '{name}' is not available (available: cpu, auto)")))
}

fn run(cpu: &mut Backend, graph: &GraphCtx) -> Result<(), Error> {
    if cpu.compute(graph) {
        Ok(())
    } else {
        Err(Error::Ggml("the CPU backend failed to compute the graph".into()))
    }
}

fn run_segment(cpu: &mut Backend, nodes: &[Tensor]) -> Result<(), Error> {
    if nodes.is_empty() {
        return Ok(());
    }
    let graph = GraphCtx::new(nodes.len()).ok_or_else(|| Error::Ggml("cannot allocate a graph".into()))?;
    for &node in nodes {
        graph.add_node(node);
    }
    run(cpu, &graph)
}

/// get_rows reads row ids[i] of its source: each must be one of its rows.
fn check_row_ids(node: Tensor) -> Result<(), Error> {
    let srcs = node.srcs();
    let n_rows = srcs[0].ne()[1];
    if let Some((i, id)) = i32_values(srcs[1]).into_iter().enumerate().find(|&(_, id)| !(0..n_rows).contains(&id)) {
        return Err(Error::Argument(format!(
            "get_rows id {id} (element {i} of the ids) is not a row of its source, which has {n_rows} rows"
        )));
    }
    Ok(())
}

/// The tensors `t` depends on, itself included, not yet in `seen`.
fn count_all(t: Tensor, seen: &mut HashSet<usize>) -> usize {
    walk(t, seen, &mut |_| 1)
}

/// The ops among them (the graph's nodes).
fn count_ops(t: Tensor, seen: &mut HashSet<usize>) -> usize {
    walk(t, seen, &mut |t| usize::from(t.op() != 0))
}

fn walk(root: Tensor, seen: &mut HashSet<usize>, weight: &mut dyn FnMut(Tensor) -> usize) -> usize {
    let mut total = 0;
    let mut stack = vec![root];
    while let Some(t) = stack.pop() {
        if seen.insert(t.0 as usize) {
            total += weight(t);
            stack.extend(t.srcs());
        }
    }
    total
}

#[cfg(test)]
#[path = "graph_tests.rs"]
mod tests;
