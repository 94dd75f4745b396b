//! Graph building on ggml 0.26.0: the raw declarations of the tensor ops
//! Lugh uses (written by hand from ggml.h), and a thin safe layer over them:
//! `GraphCtx` owns a no-alloc ggml context plus its graph, `Tensor` is a
//! handle to a tensor that lives as long as the context that made it.
//!
//! Callers validate shapes before calling (ggml aborts on a failed assert);
//! the graph builder only combines tensors whose shapes it derived itself.
#![allow(non_camel_case_types)]
use crate::engine::ggml::sys::{ggml_cgraph, ggml_context, ggml_init_params, ggml_tensor, GGML_MAX_NAME};
pub use crate::engine::ggml::sys::{GGML_TYPE_F16, GGML_TYPE_F32, GGML_TYPE_I32, GGML_TYPE_I64};
use std::ffi::{c_char, c_int};

pub const GGML_PREC_F32: c_int = 10;

pub const GGML_ROPE_TYPE_NORM: c_int = 0;
pub const GGML_ROPE_TYPE_NEOX: c_int = 2;
/// Interleaved multi-section RoPE (Qwen3-VL, Qwen3.5): NEOX pairs whose
/// frequencies cycle through the sections.
pub const GGML_ROPE_TYPE_IMROPE: c_int = 40;

extern "C" {
    fn ggml_init(params: ggml_init_params) -> *mut ggml_context;
    fn ggml_free(ctx: *mut ggml_context);
    fn ggml_tensor_overhead() -> usize;
    fn ggml_graph_overhead_custom(size: usize, grads: bool) -> usize;
    fn ggml_new_graph_custom(ctx: *mut ggml_context, size: usize, grads: bool) -> *mut ggml_cgraph;
    fn ggml_build_forward_expand(graph: *mut ggml_cgraph, t: *mut ggml_tensor);
    fn ggml_graph_n_nodes(graph: *mut ggml_cgraph) -> c_int;
    fn ggml_graph_node(graph: *mut ggml_cgraph, i: c_int) -> *mut ggml_tensor;
    fn ggml_op_desc(t: *const ggml_tensor) -> *const c_char;

    fn ggml_new_tensor_1d(ctx: *mut ggml_context, t: c_int, ne0: i64) -> *mut ggml_tensor;
    fn ggml_new_tensor_2d(ctx: *mut ggml_context, t: c_int, ne0: i64, ne1: i64) -> *mut ggml_tensor;
    fn ggml_new_tensor_3d(ctx: *mut ggml_context, t: c_int, ne0: i64, ne1: i64, ne2: i64) -> *mut ggml_tensor;
    fn ggml_new_tensor_4d(ctx: *mut ggml_context, t: c_int, ne0: i64, ne1: i64, ne2: i64, ne3: i64)
        -> *mut ggml_tensor;
    fn ggml_set_name(t: *mut ggml_tensor, name: *const c_char) -> *mut ggml_tensor;
    fn ggml_set_input(t: *mut ggml_tensor);
    fn ggml_set_output(t: *mut ggml_tensor);
    fn ggml_nbytes(t: *const ggml_tensor) -> usize;
    fn ggml_row_size(t: c_int, ne: i64) -> usize;

    fn ggml_get_rows(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_set_rows(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        b: *mut ggml_tensor,
        c: *mut ggml_tensor,
    ) -> *mut ggml_tensor;
    fn ggml_rms_norm(ctx: *mut ggml_context, a: *mut ggml_tensor, eps: f32) -> *mut ggml_tensor;
    fn ggml_mul(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_add(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_scale(ctx: *mut ggml_context, a: *mut ggml_tensor, s: f32) -> *mut ggml_tensor;
    fn ggml_scale_bias(ctx: *mut ggml_context, a: *mut ggml_tensor, s: f32, b: f32) -> *mut ggml_tensor;
    fn ggml_fill(ctx: *mut ggml_context, a: *mut ggml_tensor, c: f32) -> *mut ggml_tensor;
    fn ggml_tanh(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_silu(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_gelu(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_norm(ctx: *mut ggml_context, a: *mut ggml_tensor, eps: f32) -> *mut ggml_tensor;
    fn ggml_div(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_sum_rows(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_clamp(ctx: *mut ggml_context, a: *mut ggml_tensor, min: f32, max: f32) -> *mut ggml_tensor;
    fn ggml_soft_max(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_argsort_top_k(ctx: *mut ggml_context, a: *mut ggml_tensor, k: c_int) -> *mut ggml_tensor;
    fn ggml_mul_mat_id(
        ctx: *mut ggml_context,
        experts: *mut ggml_tensor,
        b: *mut ggml_tensor,
        ids: *mut ggml_tensor,
    ) -> *mut ggml_tensor;
    fn ggml_mul_mat(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_prec_set_acc(a: *mut ggml_tensor, prec: c_int) -> bool;
    fn ggml_swiglu_split(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_swiglu(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_geglu(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_geglu_split(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_cont(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_cont_2d(ctx: *mut ggml_context, a: *mut ggml_tensor, ne0: i64, ne1: i64) -> *mut ggml_tensor;
    fn ggml_reshape_2d(ctx: *mut ggml_context, a: *mut ggml_tensor, ne0: i64, ne1: i64) -> *mut ggml_tensor;
    fn ggml_reshape_3d(ctx: *mut ggml_context, a: *mut ggml_tensor, ne0: i64, ne1: i64, ne2: i64) -> *mut ggml_tensor;
    fn ggml_view_2d(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        ne0: i64,
        ne1: i64,
        nb1: usize,
        offset: usize,
    ) -> *mut ggml_tensor;
    #[allow(clippy::too_many_arguments)]
    fn ggml_view_3d(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> *mut ggml_tensor;
    #[allow(clippy::too_many_arguments)]
    fn ggml_view_4d(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        ne3: i64,
        nb1: usize,
        nb2: usize,
        nb3: usize,
        offset: usize,
    ) -> *mut ggml_tensor;
    fn ggml_permute(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        ax0: c_int,
        ax1: c_int,
        ax2: c_int,
        ax3: c_int,
    ) -> *mut ggml_tensor;
    fn ggml_transpose(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    #[allow(clippy::too_many_arguments)]
    fn ggml_rope_ext(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        pos: *mut ggml_tensor,
        freq_factors: *mut ggml_tensor,
        n_dims: c_int,
        mode: c_int,
        n_ctx_orig: c_int,
        freq_base: f32,
        freq_scale: f32,
        ext_factor: f32,
        attn_factor: f32,
        beta_fast: f32,
        beta_slow: f32,
    ) -> *mut ggml_tensor;
    fn ggml_soft_max_ext(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        mask: *mut ggml_tensor,
        scale: f32,
        max_bias: f32,
    ) -> *mut ggml_tensor;
    #[allow(clippy::too_many_arguments)]
    fn ggml_flash_attn_ext(
        ctx: *mut ggml_context,
        q: *mut ggml_tensor,
        k: *mut ggml_tensor,
        v: *mut ggml_tensor,
        mask: *mut ggml_tensor,
        scale: f32,
        max_bias: f32,
        logit_softcap: f32,
    ) -> *mut ggml_tensor;
    fn ggml_flash_attn_ext_set_n_kv_max(a: *mut ggml_tensor, n_kv_max: i32);
    fn ggml_mul_mat_set_hint(a: *mut ggml_tensor, hint: c_int);
    fn ggml_is_contiguous(a: *const ggml_tensor) -> bool;
    fn ggml_concat(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor, dim: c_int) -> *mut ggml_tensor;
    fn ggml_pad(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        p0: c_int,
        p1: c_int,
        p2: c_int,
        p3: c_int,
    ) -> *mut ggml_tensor;

    fn ggml_used_mem(ctx: *const ggml_context) -> usize;
    fn ggml_get_mem_size(ctx: *const ggml_context) -> usize;
    fn ggml_get_mem_buffer(ctx: *const ggml_context) -> *mut std::ffi::c_void;
    fn ggml_sub(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_relu(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_step(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_exp(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_sqr(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_sqrt(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_sum(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_mean(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_argmax(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_diag_mask_inf(ctx: *mut ggml_context, a: *mut ggml_tensor, n_past: c_int) -> *mut ggml_tensor;
    fn ggml_cross_entropy_loss(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_cpy(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_opt_step_adamw(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        grad: *mut ggml_tensor,
        m: *mut ggml_tensor,
        v: *mut ggml_tensor,
        params: *mut ggml_tensor,
    ) -> *mut ggml_tensor;
    fn ggml_softplus(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_sigmoid(ctx: *mut ggml_context, a: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_add_id(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        b: *mut ggml_tensor,
        ids: *mut ggml_tensor,
    ) -> *mut ggml_tensor;
    fn ggml_swiglu_oai(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        b: *mut ggml_tensor,
        alpha: f32,
        limit: f32,
    ) -> *mut ggml_tensor;
    fn ggml_soft_max_add_sinks(a: *mut ggml_tensor, sinks: *mut ggml_tensor);
    fn ggml_flash_attn_ext_add_sinks(a: *mut ggml_tensor, sinks: *mut ggml_tensor);
    fn ggml_ssm_conv(ctx: *mut ggml_context, sx: *mut ggml_tensor, c: *mut ggml_tensor) -> *mut ggml_tensor;
    #[allow(clippy::too_many_arguments)]
    fn ggml_gated_delta_net(
        ctx: *mut ggml_context,
        q: *mut ggml_tensor,
        k: *mut ggml_tensor,
        v: *mut ggml_tensor,
        g: *mut ggml_tensor,
        beta: *mut ggml_tensor,
        state: *mut ggml_tensor,
        n_snapshots: i64,
    ) -> *mut ggml_tensor;
    #[allow(clippy::too_many_arguments)]
    fn ggml_rope_multi(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        pos: *mut ggml_tensor,
        freq_factors: *mut ggml_tensor,
        n_dims: c_int,
        sections: *const c_int,
        mode: c_int,
        n_ctx_orig: c_int,
        freq_base: f32,
        freq_scale: f32,
        ext_factor: f32,
        attn_factor: f32,
        beta_fast: f32,
        beta_slow: f32,
    ) -> *mut ggml_tensor;
    fn ggml_set_param(t: *mut ggml_tensor);
    fn ggml_set_loss(t: *mut ggml_tensor);
    fn ggml_build_backward_expand(ctx: *mut ggml_context, graph: *mut ggml_cgraph, grad_accs: *mut *mut ggml_tensor);
    fn ggml_graph_get_grad(graph: *const ggml_cgraph, node: *const ggml_tensor) -> *mut ggml_tensor;
    fn ggml_graph_reset(graph: *mut ggml_cgraph);
    fn ggml_repeat(ctx: *mut ggml_context, a: *mut ggml_tensor, b: *mut ggml_tensor) -> *mut ggml_tensor;
    fn ggml_graph_add_node(graph: *mut ggml_cgraph, t: *mut ggml_tensor);
    fn ggml_graph_size(graph: *mut ggml_cgraph) -> c_int;
    fn ggml_reshape_4d(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        ne3: i64,
    ) -> *mut ggml_tensor;
}

/// A tensor of a `GraphCtx` (or of a weights/cache context). A plain handle:
/// valid while the context that made it lives, which the owners guarantee by
/// keeping contexts alive at least as long as any graph that uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor(pub(crate) *mut ggml_tensor);

// SAFETY: a handle is moved or shared only together with the owner of its
// context (weights, a cache); tensors are mutated only while their owner is
// borrowed mutably or locked.
unsafe impl Send for Tensor {}
// SAFETY: as above.
unsafe impl Sync for Tensor {}

impl Tensor {
    fn raw(&self) -> &ggml_tensor {
        // SAFETY: a Tensor always points at a live tensor (see the type's note).
        unsafe { &*self.0 }
    }
    pub fn ne(&self) -> [i64; 4] {
        self.raw().ne
    }
    pub fn nb(&self) -> [usize; 4] {
        self.raw().nb
    }
    pub fn type_id(&self) -> c_int {
        self.raw().type_
    }
    /// Whether its elements lie in memory in order, without gaps (ggml_is_contiguous).
    pub fn is_contiguous(&self) -> bool {
        // SAFETY: a Tensor always points at a live tensor (see the type's note).
        unsafe { ggml_is_contiguous(self.0) }
    }
    /// The tensor's data address (null while unallocated).
    pub fn data_ptr(&self) -> *mut u8 {
        self.raw().data.cast()
    }
    /// ggml's op id (0 = GGML_OP_NONE: a leaf).
    pub fn op(&self) -> c_int {
        self.raw().op
    }
    /// Copies `out.len()` bytes of the tensor's data, from byte `offset`.
    /// Panics (rather than read out of bounds) if the range is not inside
    /// the tensor's extent or it has no data.
    pub fn read_data(&self, offset: usize, out: &mut [u8]) {
        let data = self.data_ptr();
        assert!(!data.is_null() && offset.checked_add(out.len()).is_some_and(|end| end <= self.nbytes()));
        // SAFETY: the range lies inside the tensor's data (checked above).
        unsafe { std::ptr::copy_nonoverlapping(data.add(offset), out.as_mut_ptr(), out.len()) }
    }
    /// Copies `src` into the tensor's data at byte `offset` (bounds as read_data).
    pub fn write_data(&self, offset: usize, src: &[u8]) {
        let data = self.data_ptr();
        assert!(!data.is_null() && offset.checked_add(src.len()).is_some_and(|end| end <= self.nbytes()));
        // SAFETY: the range lies inside the tensor's data (checked above).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), data.add(offset), src.len()) }
    }
    /// ggml's flag bits (input, output, param, loss).
    pub fn flags(&self) -> i32 {
        self.raw().flags
    }
    /// Restores flag bits saved by `flags` (after a backward pass).
    pub fn restore_flags(&self, flags: i32) {
        // SAFETY: the tensor is live; the owner holds the tensor lock.
        unsafe { (*self.0).flags = flags }
    }
    /// Marks a leaf as a parameter whose gradient a backward pass computes.
    pub fn mark_param(&self) {
        assert_eq!(self.op(), 0, "only a leaf can be a parameter");
        // SAFETY: the tensor is live and a leaf (ggml asserts that).
        unsafe { ggml_set_param(self.0) }
    }
    /// Marks a scalar f32 tensor as the loss of a backward pass.
    pub fn mark_loss(&self) {
        assert!(self.type_id() == GGML_TYPE_F32 && self.ne() == [1, 1, 1, 1], "the loss is one f32");
        // SAFETY: the tensor is live, a scalar and f32 (ggml asserts that).
        unsafe { ggml_set_loss(self.0) }
    }
    /// The tensor this one is a view of, if it is one.
    pub fn view_src(&self) -> Option<Tensor> {
        let p = self.raw().view_src;
        (!p.is_null()).then_some(Tensor(p))
    }
    pub fn nbytes(&self) -> usize {
        // SAFETY: the tensor is live.
        unsafe { ggml_nbytes(self.0) }
    }
    pub fn name(&self) -> String {
        let name = &self.raw().name;
        let bytes: Vec<u8> = name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    /// The op that computes the tensor, as ggml names it ("MUL_MAT", or the
    /// unary/glu sub-op such as "SILU").
    pub fn op_desc(&self) -> String {
        // SAFETY: the tensor is live; ggml returns a static string.
        unsafe { crate::engine::ggml::sys::c_str(ggml_op_desc(self.0)) }
    }
    /// The tensor's sources (operands), in order.
    pub fn srcs(&self) -> Vec<Tensor> {
        self.raw().src.iter().filter(|p| !p.is_null()).map(|&p| Tensor(p)).collect()
    }
    /// The name of the tensor's type ("f32", "q8_0", ...).
    pub fn type_name(&self) -> String {
        crate::engine::ggml::sys::type_traits(self.type_id() as u32)
            .map_or_else(|| format!("type {}", self.type_id()), |t| t.name.to_string())
    }
    pub fn set_name(&self, name: &str) {
        let mut buf = [0 as c_char; GGML_MAX_NAME];
        for (dst, &b) in buf.iter_mut().zip(name.as_bytes().iter().take(GGML_MAX_NAME - 1)) {
            *dst = b as c_char;
        }
        // SAFETY: buf is NUL-terminated and shorter than GGML_MAX_NAME.
        unsafe { ggml_set_name(self.0, buf.as_ptr()) };
    }
    pub fn set_input(&self) {
        // SAFETY: the tensor is live.
        unsafe { ggml_set_input(self.0) }
    }
    pub fn set_output(&self) {
        // SAFETY: the tensor is live.
        unsafe { ggml_set_output(self.0) }
    }
}

/// Bytes of `n` elements of type `t` in one row.
pub fn row_size(t: c_int, n: i64) -> usize {
    // SAFETY: pure arithmetic over ggml's type table; t is a valid type id.
    unsafe { ggml_row_size(t, n) }
}

/// An owned ggml context whose tensors carry no data (no_alloc): metadata for
/// weights, caches, or one graph.
pub struct Ctx {
    ptr: *mut ggml_context,
    /// The arena of a data context: allocated here (ggml would abort the
    /// process where the allocation fails) and freed after the context.
    arena: Option<(std::ptr::NonNull<u8>, std::alloc::Layout)>,
}

// SAFETY: a context is only touched by the thread that currently holds the
// object owning it (&mut or a Mutex guard); ggml keeps no thread-local state in it.
unsafe impl Send for Ctx {}
// SAFETY: shared access only reads tensor metadata.
unsafe impl Sync for Ctx {}

impl Ctx {
    /// A metadata-only context for up to `n_tensors` tensors and, with
    /// `graph_nodes` > 0, one graph of that many nodes.
    pub fn new(n_tensors: usize, graph_nodes: usize) -> Option<Ctx> {
        // SAFETY: pure size arithmetic.
        let mut size = unsafe { ggml_tensor_overhead() } * n_tensors;
        if graph_nodes > 0 {
            // SAFETY: pure size arithmetic.
            size += unsafe { ggml_graph_overhead_custom(graph_nodes, false) };
        }
        let params = ggml_init_params { mem_size: size, mem_buffer: std::ptr::null_mut(), no_alloc: true };
        // SAFETY: ggml allocates the metadata pool itself; null on failure.
        let ptr = unsafe { ggml_init(params) };
        (!ptr.is_null()).then_some(Ctx { ptr, arena: None })
    }

    /// A metadata-only context for one graph of `graph_nodes` nodes with
    /// gradients, and the `n_tensors` tensors its backward pass makes.
    pub fn new_for_backward(n_tensors: usize, graph_nodes: usize) -> Option<Ctx> {
        // SAFETY: pure size arithmetic.
        let size = unsafe { ggml_tensor_overhead() * n_tensors + ggml_graph_overhead_custom(graph_nodes, true) };
        let params = ggml_init_params { mem_size: size, mem_buffer: std::ptr::null_mut(), no_alloc: true };
        // SAFETY: ggml allocates the metadata pool itself; null on failure.
        let ptr = unsafe { ggml_init(params) };
        (!ptr.is_null()).then_some(Ctx { ptr, arena: None })
    }

    pub(crate) fn as_ptr(&self) -> *mut ggml_context {
        self.ptr
    }

    /// A context that allocates its tensors' data in one zeroed arena of
    /// `mem_size` bytes (tensor metadata included). None if the memory
    /// cannot be had.
    pub fn new_arena(mem_size: usize) -> Option<Ctx> {
        // GGML_MEM_ALIGN is 16; a cache line is kinder to the kernels.
        let layout = std::alloc::Layout::from_size_align(mem_size.max(1), 64).ok()?;
        // SAFETY: the layout has a non-zero size.
        let arena = std::ptr::NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        let params = ggml_init_params { mem_size, mem_buffer: arena.as_ptr().cast(), no_alloc: false };
        // SAFETY: the buffer is aligned, mem_size bytes long, and outlives
        // the context (Drop frees the context first).
        let ptr = unsafe { ggml_init(params) };
        if ptr.is_null() {
            // SAFETY: allocated above with this layout, not used by ggml.
            unsafe { std::alloc::dealloc(arena.as_ptr(), layout) };
            return None;
        }
        Some(Ctx { ptr, arena: Some((arena, layout)) })
    }

    /// Bytes of the arena in use (metadata and data of every tensor).
    pub fn used_mem(&self) -> usize {
        // SAFETY: the context is live.
        unsafe { ggml_used_mem(self.ptr) }
    }

    /// The arena's size in bytes.
    pub fn mem_size(&self) -> usize {
        // SAFETY: the context is live.
        unsafe { ggml_get_mem_size(self.ptr) }
    }

    /// The arena's address range (tensors of this context lie inside it).
    pub fn arena_range(&self) -> std::ops::Range<usize> {
        // SAFETY: the context is live.
        let start = unsafe { ggml_get_mem_buffer(self.ptr) } as usize;
        start..start + self.mem_size()
    }

    /// Bytes the arena spends on one tensor besides its data.
    pub fn tensor_overhead() -> usize {
        // SAFETY: pure size arithmetic.
        unsafe { ggml_tensor_overhead() }
    }

    /// A new tensor of `ty` with the given extents (1 to 4 of them).
    pub fn new_tensor(&self, ty: c_int, ne: &[i64]) -> Tensor {
        // SAFETY: the context is live and has room (sized by the caller's count).
        Tensor(unsafe {
            match *ne {
                [a] => ggml_new_tensor_1d(self.ptr, ty, a),
                [a, b] => ggml_new_tensor_2d(self.ptr, ty, a, b),
                [a, b, c] => ggml_new_tensor_3d(self.ptr, ty, a, b, c),
                [a, b, c, d] => ggml_new_tensor_4d(self.ptr, ty, a, b, c, d),
                _ => panic!("new_tensor: 1 to 4 dimensions"),
            }
        })
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the context was made by ggml_init and is freed once; its
        // arena (when it is ours) only after it.
        unsafe {
            ggml_free(self.ptr);
            if let Some((arena, layout)) = self.arena {
                std::alloc::dealloc(arena.as_ptr(), layout);
            }
        }
    }
}

/// One graph under construction: its context and the graph itself.
pub struct GraphCtx {
    pub ctx: Ctx,
    graph: *mut ggml_cgraph,
}

// SAFETY: see Ctx; the graph lives inside the context.
unsafe impl Send for GraphCtx {}

/// Parameters of rotary position embedding, as ggml_rope_ext takes them.
#[derive(Clone, Copy, Debug)]
pub struct RopeParams {
    pub n_dims: i32,
    pub mode: c_int,
    pub n_ctx_orig: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

impl GraphCtx {
    pub fn new(max_nodes: usize) -> Option<GraphCtx> {
        let ctx = Ctx::new(max_nodes, max_nodes)?;
        // SAFETY: the context was sized for a graph of max_nodes nodes.
        let graph = unsafe { ggml_new_graph_custom(ctx.ptr, max_nodes, false) };
        Some(GraphCtx { ctx, graph })
    }

    /// A graph with room for gradients: `max_nodes` nodes, and `n_tensors`
    /// tensors for its backward pass (see `build_backward`).
    pub fn new_with_grads(max_nodes: usize, n_tensors: usize) -> Option<GraphCtx> {
        let ctx = Ctx::new_for_backward(n_tensors, max_nodes)?;
        // SAFETY: the context was sized for a graph of max_nodes nodes with grads.
        let graph = unsafe { ggml_new_graph_custom(ctx.ptr, max_nodes, true) };
        Some(GraphCtx { ctx, graph })
    }

    /// Adds the backward pass of the expanded graph: the gradient of the
    /// tensor marked as loss with respect to each one marked as parameter
    /// (the caller marked both, and sized the graph for it).
    pub fn build_backward(&self) {
        // SAFETY: a graph made by new_with_grads, with a loss and parameters.
        unsafe { ggml_build_backward_expand(self.ctx.ptr, self.graph, std::ptr::null_mut()) }
    }

    /// The gradient tensor of `t` in a graph with its backward pass, if any.
    pub fn grad(&self, t: Tensor) -> Option<Tensor> {
        // SAFETY: both live.
        let g = unsafe { ggml_graph_get_grad(self.graph, t.0) };
        (!g.is_null()).then_some(Tensor(g))
    }

    /// Sets the loss's gradient to 1 and every accumulator to 0 (the
    /// gradient tensors must be allocated).
    pub fn reset_grads(&self) {
        // SAFETY: a graph with grads whose accumulators are allocated.
        unsafe { ggml_graph_reset(self.graph) }
    }

    /// The most nodes the graph has room for.
    pub fn capacity(&self) -> usize {
        // SAFETY: the graph is live.
        unsafe { ggml_graph_size(self.graph) as usize }
    }

    pub(crate) fn graph_ptr(&self) -> *mut ggml_cgraph {
        self.graph
    }

    pub fn n_nodes(&self) -> usize {
        // SAFETY: the graph is live.
        unsafe { ggml_graph_n_nodes(self.graph) as usize }
    }

    /// The graph's nodes (the tensors it computes), in order.
    pub fn nodes(&self) -> Vec<Tensor> {
        // SAFETY: the graph is live and i is below its node count.
        (0..self.n_nodes()).map(|i| Tensor(unsafe { ggml_graph_node(self.graph, i as c_int) })).collect()
    }

    /// Appends one node to the graph as it is (its sources are not visited).
    pub fn add_node(&self, t: Tensor) {
        // SAFETY: both live; the size is checked first (ggml asserts on it).
        unsafe {
            assert!(ggml_graph_n_nodes(self.graph) < ggml_graph_size(self.graph), "graph full");
            ggml_graph_add_node(self.graph, t.0)
        }
    }

    pub fn expand(&self, t: Tensor) {
        // SAFETY: both live; the graph was sized for the model's node count.
        unsafe { ggml_build_forward_expand(self.graph, t.0) }
    }
}

impl std::ops::Deref for GraphCtx {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

/// Ops that are one ggml call on tensors of this context's graph:
/// `fn name(a, b) => ggml_fn;` makes `pub fn name(&self, a: Tensor, b:
/// Tensor) -> Tensor`.
macro_rules! one_call_ops {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident),+) => $ffi:ident; )*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, $($arg: Tensor),+) -> Tensor {
                // SAFETY: see the note above.
                Tensor(unsafe { $ffi(self.c(), $($arg.0),+) })
            }
        )*
    };
}

impl Ctx {
    fn c(&self) -> *mut ggml_context {
        self.ptr
    }

    // The ops below: each is the ggml op of the same name. SAFETY for all of
    // them: the context and the operand tensors are live, and the graph
    // builder passes only shapes that it derived to be compatible.

    one_call_ops! {
        fn get_rows(a, ids) => ggml_get_rows;
        fn set_rows(dst, src, ids) => ggml_set_rows;
        fn mul(a, b) => ggml_mul;
        fn add(a, b) => ggml_add;
        fn tanh(a) => ggml_tanh;
        fn gelu(a) => ggml_gelu;
        fn silu(a) => ggml_silu;
        fn div(a, b) => ggml_div;
        fn sum_rows(a) => ggml_sum_rows;
        /// Softmax of each row, without mask or scale.
        fn soft_max(a) => ggml_soft_max;
        /// experts [ne0, rows, n_expert] times b [ne0, n_used, n_tokens], each
        /// column by the expert `ids` [n_used, n_tokens] names.
        fn mul_mat_id(experts, b, ids) => ggml_mul_mat_id;
        fn mul_mat(a, b) => ggml_mul_mat;
        /// silu(first half of each row) * second half.
        fn swiglu(a) => ggml_swiglu;
        /// gelu(first half of each row) * second half.
        fn geglu(a) => ggml_geglu;
        fn swiglu_split(gate, up) => ggml_swiglu_split;
        fn geglu_split(gate, up) => ggml_geglu_split;
        fn cont(a) => ggml_cont;
        fn transpose(a) => ggml_transpose;
        fn sub(a, b) => ggml_sub;
        /// 1 where a > 0, else 0 (its gradient, 0, ggml leaves out).
        fn step(a) => ggml_step;
        fn relu(a) => ggml_relu;
        fn exp(a) => ggml_exp;
        fn sqr(a) => ggml_sqr;
        fn sqrt(a) => ggml_sqrt;
        /// The sum of every element, as a one-element tensor.
        fn sum(a) => ggml_sum;
        /// The mean of each row ([1, ne1, ne2, ne3]).
        fn mean(a) => ggml_mean;
        /// The index of each row's largest value (I32, one per row of a matrix).
        fn argmax(a) => ggml_argmax;
        /// -mean over rows of Σ b·log_softmax(a): `a` logits, `b` target
        /// probabilities of the same shape; one f32.
        fn cross_entropy_loss(a, b) => ggml_cross_entropy_loss;
        /// Copies `a` into `b` (same element count) when the graph runs.
        fn cpy(a, b) => ggml_cpy;
        /// One AdamW step of `param` in place (ggml-opt's op): `hyper` holds
        /// alpha, beta1, beta2, eps, weight decay, 1/(1-beta1^t), 1/(1-beta2^t).
        fn opt_step_adamw(param, grad, m, v, hyper) => ggml_opt_step_adamw;
        fn softplus(a) => ggml_softplus;
        /// 1 / (1 + exp(-a)), ggml's own kernel (not differentiable).
        fn sigmoid(a) => ggml_sigmoid;
        /// a [ne0, n_used, n] plus, for each (used, token), the row of b
        /// [ne0, n_expert] that `ids` [n_used, n] names (experts' biases).
        fn add_id(a, b, ids) => ggml_add_id;
        /// Mamba's depthwise causal convolution: `sx` [d_conv - 1 + n_tokens,
        /// channels, n_seqs] by the kernel `c` [d_conv, channels].
        fn ssm_conv(sx, c) => ggml_ssm_conv;
        /// `a` repeated to the shape of `b`.
        fn repeat(a, b) => ggml_repeat;
    }
    pub fn rms_norm(&self, a: Tensor, eps: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_rms_norm(self.c(), a.0, eps) })
    }
    pub fn scale(&self, a: Tensor, s: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_scale(self.c(), a.0, s) })
    }
    /// A tensor shaped as `a` with every element `c`.
    pub fn fill(&self, a: Tensor, c: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_fill(self.c(), a.0, c) })
    }
    /// a·s + b (its gradient is s times the output's, as ggml's backward has it).
    pub fn scale_bias(&self, a: Tensor, s: f32, b: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_scale_bias(self.c(), a.0, s, b) })
    }
    /// LayerNorm without weight: (x - mean) / sqrt(var + eps) over each row.
    pub fn layer_norm(&self, a: Tensor, eps: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_norm(self.c(), a.0, eps) })
    }
    pub fn clamp(&self, a: Tensor, min: f32, max: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_clamp(self.c(), a.0, min, max) })
    }
    /// The indices of the `k` largest values of each row, largest first (I32).
    pub fn argsort_top_k(&self, a: Tensor, k: i32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_argsort_top_k(self.c(), a.0, k) })
    }
    /// Asks for f32 accumulation in the op (matmul, flash attention).
    pub fn prec_f32(&self, a: Tensor) {
        // SAFETY: see the note above.
        unsafe { ggml_prec_set_acc(a.0, GGML_PREC_F32) };
    }
    pub fn cont_2d(&self, a: Tensor, ne0: i64, ne1: i64) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_cont_2d(self.c(), a.0, ne0, ne1) })
    }
    pub fn reshape_2d(&self, a: Tensor, ne0: i64, ne1: i64) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_reshape_2d(self.c(), a.0, ne0, ne1) })
    }
    pub fn reshape_3d(&self, a: Tensor, ne0: i64, ne1: i64, ne2: i64) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_reshape_3d(self.c(), a.0, ne0, ne1, ne2) })
    }
    pub fn view_2d(&self, a: Tensor, ne: [i64; 2], nb1: usize, offset: usize) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_view_2d(self.c(), a.0, ne[0], ne[1], nb1, offset) })
    }
    pub fn view_3d(&self, a: Tensor, ne: [i64; 3], nb: [usize; 2], offset: usize) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_view_3d(self.c(), a.0, ne[0], ne[1], ne[2], nb[0], nb[1], offset) })
    }
    pub fn view_4d(&self, a: Tensor, ne: [i64; 4], nb: [usize; 3], offset: usize) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_view_4d(self.c(), a.0, ne[0], ne[1], ne[2], ne[3], nb[0], nb[1], nb[2], offset) })
    }
    pub fn permute(&self, a: Tensor, axes: [c_int; 4]) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_permute(self.c(), a.0, axes[0], axes[1], axes[2], axes[3]) })
    }
    /// RoPE; `factors` divides each dimension pair's frequency (Llama 3).
    pub fn rope_ext(&self, a: Tensor, pos: Tensor, factors: Option<Tensor>, p: &RopeParams) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe {
            ggml_rope_ext(
                self.c(),
                a.0,
                pos.0,
                factors.map_or(std::ptr::null_mut(), |f| f.0),
                p.n_dims,
                p.mode,
                p.n_ctx_orig,
                p.freq_base,
                p.freq_scale,
                p.ext_factor,
                p.attn_factor,
                p.beta_fast,
                p.beta_slow,
            )
        })
    }
    /// Multi-section RoPE (`mode` MROPE or IMROPE): `pos` holds
    /// 4 · n_tokens positions, one run per section.
    pub fn rope_multi(&self, a: Tensor, pos: Tensor, sections: [c_int; 4], p: &RopeParams) -> Tensor {
        // SAFETY: see the note above; `sections` outlives the call, which copies it.
        Tensor(unsafe {
            ggml_rope_multi(
                self.c(),
                a.0,
                pos.0,
                std::ptr::null_mut(),
                p.n_dims,
                sections.as_ptr(),
                p.mode,
                p.n_ctx_orig,
                p.freq_base,
                p.freq_scale,
                p.ext_factor,
                p.attn_factor,
                p.beta_fast,
                p.beta_slow,
            )
        })
    }
    /// The gated delta rule over a run of tokens (Qwen3.5's linear
    /// attention): the output [S_v, H_v, n_tokens, n_seqs] followed by
    /// `n_snapshots` states [S_v, S_v, H_v, n_seqs], the newest first.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        gate: Tensor,
        beta: Tensor,
        state: Tensor,
        n_snapshots: i64,
    ) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_gated_delta_net(self.c(), q.0, k.0, v.0, gate.0, beta.0, state.0, n_snapshots) })
    }
    /// gpt-oss's clamped SwiGLU: gate clamped above at `limit`, up to
    /// [-limit, limit], gate · σ(alpha · gate) · (up + 1).
    pub fn swiglu_oai(&self, gate: Tensor, up: Tensor, alpha: f32, limit: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_swiglu_oai(self.c(), gate.0, up.0, alpha, limit) })
    }
    /// Attention sinks on a softmax or flash-attention node: a logit per
    /// head [n_head] that joins every row's normaliser.
    pub fn add_sinks(&self, attention: Tensor, sinks: Tensor, flash: bool) {
        // SAFETY: both are live tensors of this graph; the call records `sinks` as a source.
        unsafe {
            if flash {
                ggml_flash_attn_ext_add_sinks(attention.0, sinks.0)
            } else {
                ggml_soft_max_add_sinks(attention.0, sinks.0)
            }
        }
    }
    pub fn soft_max_ext(&self, a: Tensor, mask: Tensor, scale: f32, max_bias: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_soft_max_ext(self.c(), a.0, mask.0, scale, max_bias) })
    }
    pub fn flash_attn_ext(&self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: f32, softcap: f32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_flash_attn_ext(self.c(), q.0, k.0, v.0, mask.0, scale, 0.0, softcap) })
    }
    pub fn concat(&self, a: Tensor, b: Tensor, dim: c_int) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_concat(self.c(), a.0, b.0, dim) })
    }
    /// `a` with `pad[i]` zeros after the end of each dimension i.
    pub fn pad(&self, a: Tensor, pad: [c_int; 4]) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_pad(self.c(), a.0, pad[0], pad[1], pad[2], pad[3]) })
    }
    pub fn diag_mask_inf(&self, a: Tensor, n_past: i32) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_diag_mask_inf(self.c(), a.0, n_past) })
    }
    pub fn reshape_4d(&self, a: Tensor, ne: [i64; 4]) -> Tensor {
        // SAFETY: see the note above.
        Tensor(unsafe { ggml_reshape_4d(self.c(), a.0, ne[0], ne[1], ne[2], ne[3]) })
    }
    /// `rotation` · each run of n values of `x` (n: the rotation's size), as a
    /// product marked as a Walsh-Hadamard rotation, which the CPU backend
    /// computes as a fast transform (llama.cpp's llama_mul_mat_hadamard).
    pub fn hadamard(&self, x: Tensor, rotation: Tensor) -> Tensor {
        let n = rotation.ne()[0];
        let ne = x.ne();
        let elements: i64 = ne.iter().product();
        let runs =
            if x.is_contiguous() { self.reshape_2d(x, n, elements / n) } else { self.cont_2d(x, n, elements / n) };
        let product = self.mul_mat(rotation, runs);
        // SAFETY: product is a MUL_MAT node of this context; 1 is GGML_HINT_SRC0_IS_HADAMARD.
        unsafe { ggml_mul_mat_set_hint(product.0, 1) };
        self.reshape_4d(product, ne)
    }
    pub fn flash_attn_set_n_kv_max(&self, a: Tensor, n: i32) {
        // SAFETY: see the note above.
        unsafe { ggml_flash_attn_ext_set_n_kv_max(a.0, n) }
    }
}
