//! Running graphs on ggml 0.26.0: backends, buffers and the graph allocator
//! (declarations written by hand from ggml-backend.h, ggml-alloc.h and
//! ggml-cpu.h), each behind an owning type that frees it once.
#![allow(non_camel_case_types)]
use crate::engine::ggml::ops::{Ctx, GraphCtx, Tensor};
use crate::engine::ggml::sys::{
    self as sys, ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_dev_t, ggml_tensor,
};
use crate::engine::ggml::sys::{ggml_backend_reg_t, ggml_backend_t, ggml_cgraph, ggml_context, ggml_threadpool_params};
use std::ffi::{c_char, c_int, c_void};

type ggml_gallocr_t = *mut c_void;
type ggml_backend_sched_t = *mut c_void;
type ggml_backend_dev_get_extra_bufts_t =
    unsafe extern "C" fn(dev: ggml_backend_dev_t) -> *mut ggml_backend_buffer_type_t;
type ggml_backend_set_n_threads_t = unsafe extern "C" fn(backend: ggml_backend_t, n_threads: c_int);

type ggml_threadpool_t = *mut c_void;

const GGML_BACKEND_BUFFER_USAGE_WEIGHTS: c_int = 1;
const GGML_STATUS_SUCCESS: c_int = 0;

extern "C" {
    fn ggml_backend_dev_backend_reg(dev: ggml_backend_dev_t) -> ggml_backend_reg_t;
    fn ggml_backend_get_device(backend: ggml_backend_t) -> ggml_backend_dev_t;
    fn ggml_backend_reg_get_proc_address(reg: ggml_backend_reg_t, name: *const c_char) -> *mut c_void;
    fn ggml_backend_dev_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t;
    fn ggml_backend_dev_host_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t;
    fn ggml_backend_dev_supports_op(dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool;
    fn ggml_backend_buft_name(buft: ggml_backend_buffer_type_t) -> *const c_char;
    fn ggml_backend_buft_alloc_buffer(buft: ggml_backend_buffer_type_t, size: usize) -> ggml_backend_buffer_t;
    fn ggml_backend_buffer_free(buf: ggml_backend_buffer_t);
    fn ggml_backend_buffer_get_size(buf: ggml_backend_buffer_t) -> usize;
    fn ggml_backend_buffer_clear(buf: ggml_backend_buffer_t, value: u8);
    fn ggml_backend_buffer_set_usage(buf: ggml_backend_buffer_t, usage: c_int);
    fn ggml_backend_cpu_buffer_from_ptr(ptr: *mut c_void, size: usize) -> ggml_backend_buffer_t;
    fn ggml_backend_tensor_alloc(buf: ggml_backend_buffer_t, t: *mut ggml_tensor, addr: *mut c_void) -> c_int;
    fn ggml_backend_alloc_ctx_tensors_from_buft(
        ctx: *mut ggml_context,
        buft: ggml_backend_buffer_type_t,
    ) -> ggml_backend_buffer_t;
    fn ggml_backend_tensor_set(t: *mut ggml_tensor, data: *const c_void, offset: usize, size: usize);
    fn ggml_backend_tensor_get(t: *const ggml_tensor, data: *mut c_void, offset: usize, size: usize);
    fn ggml_backend_graph_compute(backend: ggml_backend_t, graph: *mut ggml_cgraph) -> c_int;
    fn ggml_backend_get_default_buffer_type(backend: ggml_backend_t) -> ggml_backend_buffer_type_t;

    fn ggml_threadpool_params_default(n_threads: c_int) -> ggml_threadpool_params;
    fn ggml_threadpool_new(params: *mut ggml_threadpool_params) -> ggml_threadpool_t;
    fn ggml_threadpool_free(threadpool: ggml_threadpool_t);
    fn ggml_backend_is_cpu(backend: ggml_backend_t) -> bool;
    fn ggml_backend_cpu_set_threadpool(backend: ggml_backend_t, threadpool: ggml_threadpool_t);

    fn ggml_backend_sched_new(
        backends: *mut ggml_backend_t,
        bufts: *mut ggml_backend_buffer_type_t,
        n_backends: c_int,
        graph_size: usize,
        parallel: bool,
        op_offload: bool,
    ) -> ggml_backend_sched_t;
    fn ggml_backend_sched_free(sched: ggml_backend_sched_t);
    fn ggml_backend_sched_reserve(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph) -> bool;
    fn ggml_backend_sched_alloc_graph(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph) -> bool;
    fn ggml_backend_sched_reset(sched: ggml_backend_sched_t);
    fn ggml_backend_sched_set_tensor_backend(
        sched: ggml_backend_sched_t,
        node: *mut ggml_tensor,
        backend: ggml_backend_t,
    );
    fn ggml_backend_sched_graph_compute(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph) -> c_int;
    fn ggml_backend_sched_get_buffer_size(sched: ggml_backend_sched_t, backend: ggml_backend_t) -> usize;

    fn ggml_gallocr_new(buft: ggml_backend_buffer_type_t) -> ggml_gallocr_t;
    fn ggml_gallocr_free(galloc: ggml_gallocr_t);
    fn ggml_gallocr_reserve(galloc: ggml_gallocr_t, graph: *mut ggml_cgraph) -> bool;
    fn ggml_gallocr_alloc_graph(galloc: ggml_gallocr_t, graph: *mut ggml_cgraph) -> bool;
    fn ggml_gallocr_get_buffer_size(galloc: ggml_gallocr_t, buffer_id: c_int) -> usize;
}

/// A compute device of the registry (not owned: devices live for the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device(ggml_backend_dev_t);

// SAFETY: devices are process-wide registry entries, immutable after init.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

/// A buffer type (not owned: buffer types are static in their backends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferType(ggml_backend_buffer_type_t);

// SAFETY: buffer types are static descriptors.
unsafe impl Send for BufferType {}
// SAFETY: as above.
unsafe impl Sync for BufferType {}

impl BufferType {
    pub fn name(&self) -> String {
        // SAFETY: ggml returns the buffer type's static name.
        unsafe { sys::c_str(ggml_backend_buft_name(self.0)) }
    }
}

impl Device {
    /// The first device of the registry entry called `name` (case-insensitive).
    pub fn by_backend_name(name: &str) -> Option<Device> {
        crate::engine::ggml::backend::init_logging();
        // SAFETY: registry queries; indices are below the counts ggml reports.
        unsafe {
            for i in 0..sys::ggml_backend_reg_count() {
                let reg = sys::ggml_backend_reg_get(i);
                if sys::c_str(sys::ggml_backend_reg_name(reg)).eq_ignore_ascii_case(name)
                    && sys::ggml_backend_reg_dev_count(reg) > 0
                {
                    return Some(Device(sys::ggml_backend_reg_dev_get(reg, 0)));
                }
            }
        }
        None
    }

    /// Every device of every backend in ggml's registry, in registry order.
    pub fn all() -> Vec<Device> {
        crate::engine::ggml::backend::init_logging();
        // SAFETY: registry queries; indices are below the counts ggml reports.
        unsafe {
            (0..sys::ggml_backend_reg_count())
                .flat_map(|i| {
                    let reg = sys::ggml_backend_reg_get(i);
                    (0..sys::ggml_backend_reg_dev_count(reg))
                        .map(move |d| Device(sys::ggml_backend_reg_dev_get(reg, d)))
                })
                .collect()
        }
    }

    /// The devices of a backend registry entry that is not in ggml's
    /// registry (an RPC server's).
    ///
    /// # Safety
    /// `reg` must be a live registry entry that outlives the devices.
    #[cfg(feature = "rpc")]
    pub unsafe fn of_reg(reg: ggml_backend_reg_t) -> Vec<Device> {
        // SAFETY: as the caller guarantees.
        unsafe {
            (0..sys::ggml_backend_reg_dev_count(reg)).map(|d| Device(sys::ggml_backend_reg_dev_get(reg, d))).collect()
        }
    }

    pub fn is_cpu(&self) -> bool {
        self.type_code() == sys::GGML_BACKEND_DEVICE_TYPE_CPU
    }

    /// A GPU (discrete or integrated), or a remote device (ggml's RPC
    /// devices say GPU): a device that takes whole layers.
    pub fn is_gpu(&self) -> bool {
        matches!(self.type_code(), sys::GGML_BACKEND_DEVICE_TYPE_GPU | sys::GGML_BACKEND_DEVICE_TYPE_IGPU)
    }

    /// An accelerator that takes some operations of the CPU's (BLAS).
    pub fn is_accel(&self) -> bool {
        self.type_code() == sys::GGML_BACKEND_DEVICE_TYPE_ACCEL
    }

    fn type_code(&self) -> c_int {
        // SAFETY: the device is a live registry entry.
        unsafe { sys::ggml_backend_dev_type(self.0) }
    }

    /// The device's name ("CPU", "RPC0", "Vulkan0" ...).
    pub fn name(&self) -> String {
        // SAFETY: the device is live; ggml returns its own string.
        unsafe { sys::c_str(sys::ggml_backend_dev_name(self.0)) }
    }

    pub fn description(&self) -> String {
        // SAFETY: as above.
        unsafe { sys::c_str(sys::ggml_backend_dev_description(self.0)) }
    }

    /// The name of the backend the device belongs to ("CPU", "BLAS", "RPC").
    pub fn backend_name(&self) -> String {
        // SAFETY: the device is live, and so is its registry entry.
        unsafe { sys::c_str(sys::ggml_backend_reg_name(ggml_backend_dev_backend_reg(self.0))) }
    }

    /// (free, total) bytes of the device's memory, as its backend reports them
    /// (an RPC device asks its server).
    pub fn memory(&self) -> (usize, usize) {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: the device is live; both pointers are valid.
        unsafe { sys::ggml_backend_dev_memory(self.0, &mut free, &mut total) };
        (free, total)
    }

    /// The device's own (default) buffer type.
    pub fn buffer_type(&self) -> BufferType {
        // SAFETY: the device is live.
        BufferType(unsafe { ggml_backend_dev_buffer_type(self.0) })
    }

    /// The device's host buffer type (memory the CPU uses directly and the
    /// device reads fast: pinned memory), where its backend has one.
    pub fn host_buffer_type(&self) -> Option<BufferType> {
        // SAFETY: the device is live; null when it has none.
        let buft = unsafe { ggml_backend_dev_host_buffer_type(self.0) };
        (!buft.is_null()).then_some(BufferType(buft))
    }

    /// The extra buffer types the device's backend offers for weights (the
    /// CPU's repacked layouts), in its order of preference; llama.cpp puts
    /// them first in a CPU weight's candidate list.
    pub fn extra_buffer_types(&self) -> Vec<BufferType> {
        let name = c"ggml_backend_dev_get_extra_bufts";
        // SAFETY: the registry entry is live; the proc address, when present,
        // has the documented type and returns a null-terminated array.
        unsafe {
            let reg = ggml_backend_dev_backend_reg(self.0);
            let f = ggml_backend_reg_get_proc_address(reg, name.as_ptr());
            if f.is_null() {
                return Vec::new();
            }
            let f: ggml_backend_dev_get_extra_bufts_t = std::mem::transmute(f);
            let mut list = f(self.0);
            let mut out = Vec::new();
            while !list.is_null() && !(*list).is_null() {
                out.push(BufferType(*list));
                list = list.add(1);
            }
            out
        }
    }

    /// Whether the device runs `op` (whose weight source sits in a buffer of
    /// the type being probed, see `Buffer::probe`).
    pub fn supports_op(&self, op: Tensor) -> bool {
        // SAFETY: both live.
        unsafe { ggml_backend_dev_supports_op(self.0, op.0) }
    }

    /// The raw handle, for ggml calls made outside this module.
    #[cfg(feature = "rpc")]
    pub fn raw(&self) -> ggml_backend_dev_t {
        self.0
    }

    pub fn init_backend(&self) -> Option<Backend> {
        // SAFETY: the device is live; null on failure.
        let ptr = unsafe { sys::ggml_backend_dev_init(self.0, std::ptr::null()) };
        // SAFETY: a live backend of this device, owned from here on.
        (!ptr.is_null()).then(|| unsafe { Backend::from_raw(ptr) })
    }
}

/// An initialised backend (one compute stream).
pub struct Backend {
    ptr: ggml_backend_t,
    set_threads: Option<ggml_backend_set_n_threads_t>,
    is_cpu: bool,
    n_threads: usize,
    // Dropped after the backend that uses it (Drop frees ptr first).
    threadpool: Option<Threadpool>,
}

/// A CPU backend's worker threads, kept between graphs (without one, ggml
/// starts and joins its threads for every graph). The workers poll for new
/// work a little before sleeping, as llama.cpp's default threadpool does.
struct Threadpool {
    ptr: ggml_threadpool_t,
    n_threads: usize,
    // The workers exist only in the process that started them: after a
    // fork the child needs its own pool.
    pid: u32,
}

impl Threadpool {
    fn new(n_threads: usize) -> Option<Threadpool> {
        // SAFETY: the params are initialised by ggml itself; null on failure.
        let ptr = unsafe {
            let mut params = ggml_threadpool_params_default(n_threads as c_int);
            ggml_threadpool_new(&mut params)
        };
        (!ptr.is_null()).then(|| Threadpool { ptr, n_threads, pid: std::process::id() })
    }

    fn serves(&self, n_threads: usize) -> bool {
        self.n_threads == n_threads && self.pid == std::process::id()
    }
}

impl Drop for Threadpool {
    fn drop(&mut self) {
        if self.pid == std::process::id() {
            // SAFETY: freed once, by the process whose threads it joins; a
            // forked child leaves its copy alone (the threads are not there).
            unsafe { ggml_threadpool_free(self.ptr) }
        }
    }
}

// SAFETY: a backend is used by one thread at a time (the owner keeps it behind a Mutex).
unsafe impl Send for Backend {}

impl Backend {
    /// Takes ownership of a backend ggml made.
    ///
    /// # Safety
    /// `ptr` must be a live backend that nothing else frees.
    pub unsafe fn from_raw(ptr: ggml_backend_t) -> Backend {
        // SAFETY: as the caller guarantees; the proc address, when present,
        // has the documented type.
        let (set_threads, is_cpu) = unsafe {
            let reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(ptr));
            let f = ggml_backend_reg_get_proc_address(reg, c"ggml_backend_set_n_threads".as_ptr());
            let set_threads =
                (!f.is_null()).then(|| std::mem::transmute::<*mut c_void, ggml_backend_set_n_threads_t>(f));
            (set_threads, ggml_backend_is_cpu(ptr))
        };
        Backend { ptr, set_threads, is_cpu, n_threads: 1, threadpool: None }
    }

    /// Runs `compute` with the CPU's threads granted (see cpu_budget) and
    /// set on this backend; other backends run it as it is.
    fn with_cpu_grant<R>(&mut self, compute: impl FnOnce() -> R) -> R {
        self.ensure_threadpool();
        let _grant = if self.is_cpu {
            let grant = crate::engine::ggml::cpu_budget::acquire(self.n_threads);
            if let Some(f) = self.set_threads {
                // SAFETY: f is the backend's own setter, the backend is live;
                // the kept pool has at least grant.n workers.
                unsafe { f(self.ptr, grant.n as c_int) }
            }
            Some(grant)
        } else {
            None
        };
        compute()
    }

    /// Sets the threads the graphs run on.
    pub fn set_n_threads(&mut self, n: usize) {
        self.n_threads = n;
        if let Some(f) = self.set_threads {
            // SAFETY: f is the backend's own setter, the backend is live.
            unsafe { f(self.ptr, n as c_int) }
        }
        self.ensure_threadpool();
    }

    /// On the CPU, (re)starts the kept worker threads when their number or
    /// the process (a fork) changed.
    fn ensure_threadpool(&mut self) {
        if !self.is_cpu || self.threadpool.as_ref().is_some_and(|tp| tp.serves(self.n_threads)) {
            return;
        }
        let threadpool = Threadpool::new(self.n_threads);
        let tp_ptr = threadpool.as_ref().map_or(std::ptr::null_mut(), |tp| tp.ptr);
        // SAFETY: the backend is live; the pool outlives its use (it is
        // replaced only here, after the backend was pointed at the new one).
        unsafe { ggml_backend_cpu_set_threadpool(self.ptr, tp_ptr) };
        self.threadpool = threadpool;
    }

    pub fn default_buffer_type(&self) -> BufferType {
        // SAFETY: the backend is live.
        BufferType(unsafe { ggml_backend_get_default_buffer_type(self.ptr) })
    }

    /// Runs an allocated graph; false when the backend reports a failure.
    /// On the CPU it runs on as many of its threads as the process has CPUs
    /// free (see cpu_budget), the kept pool's other workers idle.
    pub fn compute(&mut self, graph: &GraphCtx) -> bool {
        let ptr = self.ptr;
        // SAFETY: the graph's tensors are allocated (by a Gallocr) and live.
        self.with_cpu_grant(|| unsafe { ggml_backend_graph_compute(ptr, graph.graph_ptr()) == GGML_STATUS_SUCCESS })
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: freed once.
        unsafe { sys::ggml_backend_free(self.ptr) }
    }
}

/// The backends of a session that spans several devices, the CPU last
/// (ggml's scheduler gives an op to the first backend that holds its
/// weights and runs it, and the CPU runs everything).
pub struct Backends {
    pub list: Vec<Backend>,
}

/// The backends a scheduler is made over (not owned: their `Backends`
/// outlives every scheduler made from these).
#[derive(Clone)]
pub struct BackendHandles(Vec<ggml_backend_t>);

// SAFETY: plain handles; used only to make schedulers, under their owner's lock.
unsafe impl Send for BackendHandles {}
// SAFETY: as above.
unsafe impl Sync for BackendHandles {}

impl Backends {
    pub fn handles(&self) -> BackendHandles {
        BackendHandles(self.list.iter().map(|b| b.ptr).collect())
    }

    /// Runs `graph` on `sched` (allocated there), the CPU's threads granted.
    pub fn compute(&mut self, sched: &mut Sched, graph: &GraphCtx) -> bool {
        let sched_ptr = sched.ptr;
        let cpu = self.list.last_mut().expect("the CPU backend");
        // SAFETY: the graph is allocated by this scheduler, whose backends
        // are these (alive: the scheduler is dropped first by its owners).
        cpu.with_cpu_grant(|| unsafe { sys_sched_compute(sched_ptr, graph.graph_ptr()) })
    }
}

/// ggml's graph computation through its scheduler; false on a failure the
/// backends report (an RPC server that stopped answering is noticed by its
/// own check, see rpc.rs).
unsafe fn sys_sched_compute(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe { ggml_backend_sched_graph_compute(sched, graph) == GGML_STATUS_SUCCESS }
}

/// ggml's backend scheduler over a session's backends: splits a graph by
/// where its weights live, copies activations between devices, and keeps
/// one compute buffer per backend.
pub struct Sched {
    ptr: ggml_backend_sched_t,
    graph_size: usize,
    backends: Vec<ggml_backend_t>,
}

// SAFETY: used by one thread at a time (owned by a pool behind &mut or a Mutex).
unsafe impl Send for Sched {}

impl Sched {
    /// A scheduler for graphs of up to `graph_size` nodes over `backends`
    /// (which must outlive it).
    pub fn new(backends: &BackendHandles, graph_size: usize) -> Option<Sched> {
        let mut ptrs = backends.0.clone();
        // SAFETY: the backends are live; null buffer types = each backend's
        // default; not parallel (one copy of the inputs); ops whose weights
        // sit on the CPU may be offloaded to a device, as llama.cpp allows.
        let ptr = unsafe {
            ggml_backend_sched_new(
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
                ptrs.len() as c_int,
                graph_size,
                false,
                true,
            )
        };
        (!ptr.is_null()).then_some(Sched { ptr, graph_size, backends: ptrs })
    }

    pub fn graph_size(&self) -> usize {
        self.graph_size
    }

    /// Reserves every backend's compute buffer for `graph`, with `pins`
    /// (see alloc_graph).
    pub fn reserve(&mut self, graph: &GraphCtx, pins: &[(Tensor, Device)]) -> bool {
        self.reset_with(pins);
        // SAFETY: the graph is live and unallocated.
        unsafe { ggml_backend_sched_reserve(self.ptr, graph.graph_ptr()) }
    }

    /// Splits `graph` between the backends and allocates it; each node of
    /// `pins` runs on its device's backend where that supports it (else
    /// where ggml's scheduler puts it).
    pub fn alloc_graph(&mut self, graph: &GraphCtx, pins: &[(Tensor, Device)]) -> bool {
        self.reset_with(pins);
        // SAFETY: the scheduler and the graph are live.
        unsafe { ggml_backend_sched_alloc_graph(self.ptr, graph.graph_ptr()) }
    }

    /// Drops the previous graph's placement (as ggml requires before a new
    /// graph) and sets the pinned nodes' backends.
    fn reset_with(&mut self, pins: &[(Tensor, Device)]) {
        // SAFETY: the scheduler is live.
        unsafe { ggml_backend_sched_reset(self.ptr) };
        for &(node, device) in pins {
            // SAFETY: the backends are live; the node belongs to the graph
            // about to be allocated.
            let backend = self.backends.iter().copied().find(|&b| unsafe { ggml_backend_get_device(b) } == device.0);
            if let Some(backend) = backend.filter(|_| device.supports_op(node)) {
                // SAFETY: as above.
                unsafe { ggml_backend_sched_set_tensor_backend(self.ptr, node.0, backend) };
            }
        }
    }

    /// The bytes of the compute buffers, all backends together.
    pub fn buffer_size(&self) -> usize {
        // SAFETY: the scheduler and its backends are live.
        self.backends.iter().map(|&b| unsafe { ggml_backend_sched_get_buffer_size(self.ptr, b) }).sum()
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        // SAFETY: freed once, before the backends (see Sched::new).
        unsafe { ggml_backend_sched_free(self.ptr) }
    }
}

/// A backend buffer holding tensors (weights or a KV cache).
pub struct Buffer {
    ptr: ggml_backend_buffer_t,
}

// SAFETY: buffers are plain memory owned by one object; concurrent access is
// serialised by that owner.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Allocates every tensor of `ctx` in one new buffer of type `buft`.
    pub fn alloc_ctx_tensors(ctx: &Ctx, buft: BufferType) -> Option<Buffer> {
        // SAFETY: the context is live; null when allocation fails or the context is empty.
        let ptr = unsafe { ggml_backend_alloc_ctx_tensors_from_buft(ctx.as_ptr(), buft.0) };
        (!ptr.is_null()).then_some(Buffer { ptr })
    }

    /// An empty buffer of type `buft`, used only to ask a device whether an op
    /// on a tensor placed in such a buffer is supported (llama.cpp's probe).
    pub fn probe(buft: BufferType) -> Option<Buffer> {
        // SAFETY: a zero-size allocation is valid for every buffer type.
        let ptr = unsafe { ggml_backend_buft_alloc_buffer(buft.0, 0) };
        (!ptr.is_null()).then_some(Buffer { ptr })
    }

    /// Places `t` (metadata only) in this probe buffer without memory.
    pub fn mark_probe(&self, t: Tensor) {
        // SAFETY: only the buffer field is set; the tensor is never computed.
        unsafe { (*t.0).buffer = self.ptr }
    }

    /// A CPU buffer over host memory that the caller keeps alive and
    /// unchanged for the buffer's whole life (the model's mapping).
    ///
    /// # Safety
    /// `base..base+size` must stay valid and readable while the buffer lives.
    pub unsafe fn from_host(base: *const u8, size: usize) -> Option<Buffer> {
        // SAFETY: the caller guarantees the memory outlives the buffer; ggml
        // only reads weights.
        let ptr = unsafe { ggml_backend_cpu_buffer_from_ptr(base as *mut c_void, size) };
        (!ptr.is_null()).then_some(Buffer { ptr })
    }

    /// Gives `t` the address `addr` inside this (host) buffer.
    pub fn place(&self, t: Tensor, addr: *const u8) -> bool {
        // SAFETY: addr lies inside the buffer (checked by ggml, which reports failure).
        unsafe { ggml_backend_tensor_alloc(self.ptr, t.0, addr as *mut c_void) == GGML_STATUS_SUCCESS }
    }

    pub fn set_weights_usage(&self) {
        // SAFETY: the buffer is live.
        unsafe { ggml_backend_buffer_set_usage(self.ptr, GGML_BACKEND_BUFFER_USAGE_WEIGHTS) }
    }

    pub fn clear(&self) {
        // SAFETY: the buffer is live.
        unsafe { ggml_backend_buffer_clear(self.ptr, 0) }
    }

    pub fn size(&self) -> usize {
        // SAFETY: the buffer is live.
        unsafe { ggml_backend_buffer_get_size(self.ptr) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: freed once.
        unsafe { ggml_backend_buffer_free(self.ptr) }
    }
}

/// Copies `data` into an allocated tensor (whole tensor, sizes checked).
pub fn tensor_set<T: Copy>(t: Tensor, data: &[T]) {
    let bytes = std::mem::size_of_val(data);
    assert_eq!(bytes, t.nbytes(), "tensor_set: size of {}", t.name());
    // SAFETY: the tensor is allocated and exactly `bytes` long.
    unsafe { ggml_backend_tensor_set(t.0, data.as_ptr() as *const c_void, 0, bytes) }
}

/// Copies raw bytes into an allocated tensor (a weight from the file).
pub fn tensor_set_bytes(t: Tensor, data: &[u8]) {
    assert_eq!(data.len(), t.nbytes(), "tensor_set_bytes: size of {}", t.name());
    tensor_write(t, 0, data);
}

/// Copies `data` into an allocated tensor from byte `offset` on.
pub fn tensor_write(t: Tensor, offset: usize, data: &[u8]) {
    assert!(offset.checked_add(data.len()).is_some_and(|end| end <= t.nbytes()), "tensor_write: out of range");
    // SAFETY: the range lies inside the allocated tensor.
    unsafe { ggml_backend_tensor_set(t.0, data.as_ptr() as *const c_void, offset, data.len()) }
}

/// Fills `out` with an allocated tensor's bytes from byte `offset` on.
pub fn tensor_read(t: Tensor, offset: usize, out: &mut [u8]) {
    assert!(offset.checked_add(out.len()).is_some_and(|end| end <= t.nbytes()), "tensor_read: out of range");
    // SAFETY: the range lies inside the allocated tensor and `out` is as long.
    unsafe { ggml_backend_tensor_get(t.0, out.as_mut_ptr() as *mut c_void, offset, out.len()) }
}

/// `n` f32 values of `t` from element `offset` on, appended to `out` (its
/// spare capacity reused; not zeroed first: a row of logits is a vocabulary
/// long, read once per token).
pub fn tensor_get_f32_into(t: Tensor, offset: usize, n: usize, out: &mut Vec<f32>) {
    let bytes = n * std::mem::size_of::<f32>();
    let start = offset * std::mem::size_of::<f32>();
    assert!(start + bytes <= t.nbytes(), "tensor_get_f32: out of range");
    out.reserve(n);
    let len = out.len();
    // SAFETY: the range lies inside the allocated tensor and the vector has
    // room for n more values, all of which ggml writes before set_len.
    unsafe {
        ggml_backend_tensor_get(t.0, out.as_mut_ptr().add(len) as *mut c_void, start, bytes);
        out.set_len(len + n);
    }
}

/// ggml's graph allocator: one compute buffer, grown when a graph needs more.
pub struct Gallocr {
    ptr: ggml_gallocr_t,
}

// SAFETY: used by one thread at a time (owned by a pool behind &mut or a Mutex).
unsafe impl Send for Gallocr {}

impl Gallocr {
    pub fn new(buft: BufferType) -> Option<Gallocr> {
        // SAFETY: buft is a valid buffer type; null on failure.
        let ptr = unsafe { ggml_gallocr_new(buft.0) };
        (!ptr.is_null()).then_some(Gallocr { ptr })
    }

    /// Reserves room for `graph` (grows the buffer if needed).
    pub fn reserve(&mut self, graph: &GraphCtx) -> bool {
        // SAFETY: the graph is live and unallocated.
        unsafe { ggml_gallocr_reserve(self.ptr, graph.graph_ptr()) }
    }

    /// Allocates the graph's tensors in the buffer (growing it if needed).
    pub fn alloc_graph(&mut self, graph: &GraphCtx) -> bool {
        // SAFETY: the graph is live.
        unsafe { ggml_gallocr_alloc_graph(self.ptr, graph.graph_ptr()) }
    }

    pub fn buffer_size(&self) -> usize {
        // SAFETY: buffer 0 exists for a single-buffer-type allocator.
        unsafe { ggml_gallocr_get_buffer_size(self.ptr, 0) }
    }
}

impl Drop for Gallocr {
    fn drop(&mut self) {
        // SAFETY: freed once.
        unsafe { ggml_gallocr_free(self.ptr) }
    }
}
