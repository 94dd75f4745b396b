//! The compute allocation kept between forward passes: ggml's graph
//! allocator over one buffer, reserved for the worst case of a batch shape
//! (the cache attended in full) so that later graphs of the same or smaller
//! shape fit without a new buffer. The last graph allocated there is kept:
//! a step of the same shape over the same caches (token generation, mostly)
//! reuses it, as llama.cpp reuses its graphs, instead of building anew.
use crate::engine::forward::graph::{ForwardGraph, Head};
use crate::engine::ggml::ops::{GraphCtx, Tensor};
use crate::engine::ggml::runtime::{Backend, BackendHandles, Backends, BufferType, Device, Gallocr, Sched};
use crate::engine::{Error, Result};

/// Asks the device whether it runs every node of `g` with the node's types,
/// and names the first it does not run: ggml's kernels assert, or call
/// through a null pointer, on an op they lack. Called once per built graph
/// (a reused graph was checked when it was built).
pub fn check_supported(device: Device, backend_name: &str, g: &GraphCtx) -> Result<()> {
    for node in g.nodes() {
        if !device.supports_op(node) {
            let srcs: Vec<String> = node.srcs().iter().map(|s| format!("'{}' {}", s.name(), s.type_name())).collect();
            return Err(Error::Ggml(format!(
                "backend '{backend_name}' does not support op {} for tensor '{}' of type {} (operands: {})",
                node.op_desc(),
                node.name(),
                node.type_name(),
                srcs.join(", ")
            )));
        }
    }
    Ok(())
}

/// The batch shape a pool has reserved for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchShape {
    pub n_tokens: usize,
    pub n_outputs: usize,
    pub n_segments: usize,
    pub kv_size: usize,
}

impl BatchShape {
    /// Whether a graph of shape `other` fits in what was reserved for self.
    pub fn covers(&self, other: &BatchShape) -> bool {
        other.n_tokens <= self.n_tokens
            && other.n_outputs <= self.n_outputs
            && other.n_segments == self.n_segments
            && other.kv_size <= self.kv_size
    }
}

pub struct ComputePool {
    allocator: Option<Allocator>,
    target: Target,
    backend_name: String,
    reserved: Option<BatchShape>,
    n_allocations: usize,
    buffer_size: usize,
    last_graph: Option<(GraphKey, ForwardGraph)>,
    /// Kept between steps so that a step allocates nothing once warm.
    pub(crate) scratch: StepScratch,
}

/// Where a pool's graphs run.
#[derive(Clone)]
pub enum Target {
    /// One backend: ggml's graph allocator over its buffer type.
    Single(BufferType),
    /// Several (devices, accelerators, the CPU): ggml's scheduler.
    Scheduled(BackendHandles),
}

enum Allocator {
    Graph(Gallocr),
    Sched(Sched),
}

/// What runs a session's graphs: its one backend, or its backends together.
pub enum Executor {
    Single(Backend),
    Scheduled(Backends),
}

impl Executor {
    /// The pool target for graphs run here.
    pub fn target(&self) -> Target {
        match self {
            Executor::Single(b) => Target::Single(b.default_buffer_type()),
            Executor::Scheduled(list) => Target::Scheduled(list.handles()),
        }
    }

    pub fn set_n_threads(&mut self, n: usize) {
        match self {
            Executor::Single(b) => b.set_n_threads(n),
            Executor::Scheduled(list) => list.list.iter_mut().for_each(|b| b.set_n_threads(n)),
        }
    }
}

/// The buffers a step's inputs are assembled in.
#[derive(Default)]
pub(crate) struct StepScratch {
    pub key: GraphKey,
    pub tokens: Vec<i32>,
    pub pos: Vec<i32>,
    pub out_ids: Vec<i32>,
    pub idxs: Vec<i64>,
    pub mask_f32: Vec<f32>,
    pub mask_f16: Vec<u16>,
}

/// What decides a graph's shape: what it computes at its outputs, and per
/// segment its cache, new tokens, cells attended and whether every token is
/// an output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphKey {
    pub head: Head,
    /// The call's settings (RoPE, adapters), hashed.
    pub variant: u64,
    pub segments: Vec<(u64, usize, usize, bool)>,
}

impl ComputePool {
    pub(crate) fn new(target: Target, backend_name: String) -> ComputePool {
        ComputePool {
            allocator: None,
            target,
            backend_name,
            reserved: None,
            n_allocations: 0,
            buffer_size: 0,
            last_graph: None,
            scratch: StepScratch::default(),
        }
    }

    /// Frees the allocation; the next forward makes a new one.
    pub fn reset(&mut self) {
        self.last_graph = None;
        self.allocator = None;
        self.reserved = None;
        self.buffer_size = 0;
    }

    pub fn backend_name(&self) -> &str {
        &self.backend_name
    }

    /// How many compute buffers this pool has allocated so far (tests use it
    /// to prove that reuse happens).
    pub fn n_allocations(&self) -> usize {
        self.n_allocations
    }

    /// Whether a graph of `shape` needs a worst-case reservation first.
    pub(crate) fn needs_reserve(&self, shape: &BatchShape) -> bool {
        !self.reserved.is_some_and(|r| r.covers(shape))
    }

    /// Reserves room for `worst` (a graph of `shape` over the whole cache);
    /// `pins` as for allocate.
    pub(crate) fn reserve(&mut self, worst: &GraphCtx, shape: BatchShape, pins: &[(Tensor, Device)]) -> Result<()> {
        // the buffer may move: the kept graph's placement would be stale
        self.last_graph = None;
        let reserved = match self.allocator_for(worst)? {
            Allocator::Graph(g) => g.reserve(worst),
            Allocator::Sched(s) => s.reserve(worst, pins),
        };
        if !reserved {
            return Err(Error::Ggml("cannot reserve the compute buffer (out of memory?)".into()));
        }
        self.note_size();
        let merged = match self.reserved {
            Some(r) if r.n_segments == shape.n_segments => BatchShape {
                n_tokens: r.n_tokens.max(shape.n_tokens),
                n_outputs: r.n_outputs.max(shape.n_outputs),
                n_segments: shape.n_segments,
                kv_size: r.kv_size.max(shape.kv_size),
            },
            _ => shape,
        };
        self.reserved = Some(merged);
        Ok(())
    }

    /// The kept graph, if it was built for `key` (its tensors still have
    /// their places: nothing else was allocated since).
    pub(crate) fn reusable(&self, key: &GraphKey) -> Option<&ForwardGraph> {
        self.last_graph.as_ref().filter(|(k, _)| k == key).map(|(_, g)| g)
    }

    /// Gives every tensor of `graph` its place in the compute buffer and
    /// keeps the graph for reuse under `key`. Over several devices, `pins`
    /// puts nodes on chosen devices (ggml's scheduler places the others).
    pub(crate) fn allocate(&mut self, key: GraphKey, graph: ForwardGraph, pins: &[(Tensor, Device)]) -> Result<()> {
        self.last_graph = None;
        let allocated = match self.allocator_for(&graph.g)? {
            Allocator::Graph(g) => g.alloc_graph(&graph.g),
            Allocator::Sched(s) => s.alloc_graph(&graph.g, pins),
        };
        if !allocated {
            return Err(Error::Ggml("cannot allocate the compute graph (out of memory?)".into()));
        }
        self.note_size();
        self.last_graph = Some((key, graph));
        Ok(())
    }

    /// Runs the graph allocated last on `exec` (the executor this pool's
    /// target was taken from); false when a backend reports a failure.
    pub(crate) fn compute(&mut self, exec: &mut Executor) -> bool {
        let Some((_, graph)) = &self.last_graph else {
            return false;
        };
        match (exec, &mut self.allocator) {
            (Executor::Single(backend), Some(Allocator::Graph(_))) => backend.compute(&graph.g),
            (Executor::Scheduled(backends), Some(Allocator::Sched(sched))) => backends.compute(sched, &graph.g),
            _ => false,
        }
    }

    /// The allocator, made on first use; a scheduler is made anew for a
    /// graph larger than it was sized for (the reservation goes with it).
    fn allocator_for(&mut self, graph: &GraphCtx) -> Result<&mut Allocator> {
        let stale = match (&self.allocator, &self.target) {
            (None, _) => true,
            (Some(Allocator::Sched(s)), _) => s.graph_size() < graph.capacity(),
            _ => false,
        };
        if stale {
            self.allocator = Some(match &self.target {
                Target::Single(buft) => Allocator::Graph(
                    Gallocr::new(*buft).ok_or_else(|| Error::Ggml("cannot create a graph allocator".into()))?,
                ),
                Target::Scheduled(handles) => Allocator::Sched(
                    Sched::new(handles, graph.capacity())
                        .ok_or_else(|| Error::Ggml("cannot create ggml's backend scheduler".into()))?,
                ),
            });
            if matches!(self.target, Target::Scheduled(_)) {
                self.reserved = None;
            }
        }
        Ok(self.allocator.as_mut().expect("made above"))
    }

    /// Counts a new compute buffer whenever the allocator's buffer grew.
    fn note_size(&mut self) {
        let size = match &self.allocator {
            Some(Allocator::Graph(g)) => g.buffer_size(),
            Some(Allocator::Sched(s)) => s.buffer_size(),
            None => 0,
        };
        if size > self.buffer_size {
            self.n_allocations += 1;
        }
        self.buffer_size = size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ggml::ops::{GGML_TYPE_F16, GGML_TYPE_F32};

    #[test]
    fn unsupported_op_is_an_error_naming_it() {
        let cpu = Device::by_backend_name("CPU").expect("the CPU backend");
        let g = GraphCtx::new(16).unwrap();
        let a = g.new_tensor(GGML_TYPE_F32, &[8, 4]);
        a.set_name("w");
        let x = g.new_tensor(GGML_TYPE_F32, &[8, 2]);
        x.set_name("x");
        let ok = g.mul_mat(a, x);
        g.expand(ok);
        check_supported(cpu, "CPU", &g).expect("f32 x f32 mul_mat runs on the CPU");

        // the CPU multiplies f32 weights only by f32 activations
        let g = GraphCtx::new(16).unwrap();
        let a = g.new_tensor(GGML_TYPE_F32, &[8, 4]);
        a.set_name("w");
        let x = g.new_tensor(GGML_TYPE_F16, &[8, 2]);
        x.set_name("x16");
        let bad = g.mul_mat(a, x);
        bad.set_name("out");
        g.expand(bad);
        let err = check_supported(cpu, "CPU", &g).unwrap_err().to_string();
        assert!(err.contains("MUL_MAT"), "{err}");
        assert!(err.contains("'out'") && err.contains("'w' f32") && err.contains("'x16' f16"), "{err}");
    }
}
