//! Lugh::Graph: computes the Lugh::Ops results a program asked for, on the
//! CPU backend (the tensors live in their contexts' host arenas).
//!
//! The ggml graph is built when it is computed, sized to what it holds, so
//! build_forward has no node limit. Row ids of get_rows are data, which
//! ggml checks only by aborting: the graph runs in segments that end before
//! each get_rows, whose ids are checked against the rows first.
use super::backend;
use super::ggml_ops::{GraphCtx, Tensor};
use super::ggml_runtime::{Backend, Device};
use super::inference::available_cpus;
use super::tensor::{i32_values, lock, mark_computed, TensorContext, TensorHandle};
use super::Error;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// The CPU backend the graphs run on, made on first use and kept (with its
/// worker threads) for the process.
static CPU: Mutex<Option<Backend>> = Mutex::new(None);

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
        for o in &outputs {
            graph.expand(o.raw());
        }
        let nodes = graph.nodes();
        let mut cpu = CPU.lock().unwrap_or_else(|p| p.into_inner());
        if cpu.is_none() {
            *cpu = Device::by_backend_name("cpu").and_then(|d| d.init_backend());
        }
        let cpu = cpu.as_mut().ok_or_else(|| Error::Backend("cannot start ggml's CPU backend".into()))?;
        cpu.set_n_threads(n_threads.clamp(1, available_cpus()));
        let row_lookups: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].op_desc() == "GET_ROWS").collect();
        if row_lookups.is_empty() {
            run(cpu, &graph)?;
        } else {
            let mut start = 0;
            for &i in &row_lookups {
                run_segment(cpu, &nodes[start..i])?;
                check_row_ids(nodes[i])?;
                start = i;
            }
            run_segment(cpu, &nodes[start..])?;
        }
        for &node in &nodes {
            mark_computed(&contexts, node);
        }
        Ok(())
    }
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
#[path = "tensor_tests.rs"]
mod tests;
