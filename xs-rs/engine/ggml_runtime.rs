//! Running graphs on ggml 0.26.0: backends, buffers and the graph allocator
//! (declarations written by hand from ggml-backend.h, ggml-alloc.h and
//! ggml-cpu.h), each behind an owning type that frees it once.
#![allow(non_camel_case_types)]
use super::ggml_ops::{Ctx, GraphCtx, Tensor};
use super::ggml_sys::{
    self as sys, ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_dev_t, ggml_tensor,
};
use super::ggml_sys::{ggml_backend_reg_t, ggml_backend_t, ggml_cgraph, ggml_context, ggml_threadpool_params};
use std::ffi::{c_char, c_int, c_void};

type ggml_gallocr_t = *mut c_void;
type ggml_backend_dev_get_extra_bufts_t =
    unsafe extern "C" fn(dev: ggml_backend_dev_t) -> *mut ggml_backend_buffer_type_t;
type ggml_backend_set_n_threads_t = unsafe extern "C" fn(backend: ggml_backend_t, n_threads: c_int);

type ggml_threadpool_t = *mut c_void;

const GGML_BACKEND_BUFFER_USAGE_WEIGHTS: c_int = 1;
const GGML_STATUS_SUCCESS: c_int = 0;

extern "C" {
    fn ggml_backend_dev_backend_reg(dev: ggml_backend_dev_t) -> ggml_backend_reg_t;
    fn ggml_backend_reg_get_proc_address(reg: ggml_backend_reg_t, name: *const c_char) -> *mut c_void;
    fn ggml_backend_dev_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t;
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
        super::backend::init_logging();
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

    pub fn is_cpu(&self) -> bool {
        // SAFETY: the device is a live registry entry.
        unsafe { sys::ggml_backend_dev_type(self.0) == sys::GGML_BACKEND_DEVICE_TYPE_CPU }
    }

    /// The device's own (default) buffer type.
    pub fn buffer_type(&self) -> BufferType {
        // SAFETY: the device is live.
        BufferType(unsafe { ggml_backend_dev_buffer_type(self.0) })
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

    pub fn init_backend(&self) -> Option<Backend> {
        // SAFETY: the device is live; null on failure.
        let ptr = unsafe { sys::ggml_backend_dev_init(self.0, std::ptr::null()) };
        if ptr.is_null() {
            return None;
        }
        // SAFETY: as above.
        let reg = unsafe { ggml_backend_dev_backend_reg(self.0) };
        // SAFETY: the proc address, when present, has the documented type.
        let set_threads = unsafe {
            let f = ggml_backend_reg_get_proc_address(reg, c"ggml_backend_set_n_threads".as_ptr());
            (!f.is_null()).then(|| std::mem::transmute::<*mut c_void, ggml_backend_set_n_threads_t>(f))
        };
        // SAFETY: the backend is live.
        let is_cpu = unsafe { ggml_backend_is_cpu(ptr) };
        Some(Backend { ptr, set_threads, is_cpu, n_threads: 1, threadpool: None })
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
        self.ensure_threadpool();
        let _grant = if self.is_cpu {
            let grant = super::cpu_budget::acquire(self.n_threads);
            if let Some(f) = self.set_threads {
                // SAFETY: f is the backend's own setter, the backend is live;
                // the kept pool has at least grant.n workers.
                unsafe { f(self.ptr, grant.n as c_int) }
            }
            Some(grant)
        } else {
            None
        };
        // SAFETY: the graph's tensors are allocated (by a Gallocr) and live.
        unsafe { ggml_backend_graph_compute(self.ptr, graph.graph_ptr()) == GGML_STATUS_SUCCESS }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: freed once.
        unsafe { sys::ggml_backend_free(self.ptr) }
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
