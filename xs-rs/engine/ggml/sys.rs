//! Raw declarations of the ggml 0.26.0 C API that Lugh uses, written by hand
//! from ggml.h / ggml-backend.h (no bindgen, so no libclang): the structs,
//! type ids and base calls shared by the other FFI modules. ggml_ops (graph
//! ops) and ggml_runtime (backends, buffers, allocator, threadpool) declare
//! the functions they wrap. Only these modules use `unsafe` on ggml.
#![allow(non_camel_case_types, dead_code)]
use std::ffi::{c_char, c_int, c_void, CStr};

pub const GGML_MAX_DIMS: usize = 4;
pub const GGML_MAX_NAME: usize = 64;
pub const GGML_MAX_SRC: usize = 10;
pub const GGML_MAX_OP_PARAMS: usize = 64;
pub const GGML_TYPE_COUNT: u32 = 43;

pub const GGML_TYPE_F32: c_int = 0;
pub const GGML_TYPE_F16: c_int = 1;
pub const GGML_TYPE_I32: c_int = 26;
pub const GGML_TYPE_I64: c_int = 27;

/// `struct ggml_tensor`, field for field (ggml.h, 0.26.0).
#[repr(C)]
pub struct ggml_tensor {
    pub type_: c_int,
    pub buffer: *mut c_void,
    pub ne: [i64; GGML_MAX_DIMS],
    pub nb: [usize; GGML_MAX_DIMS],
    pub op: c_int,
    pub op_params: [i32; GGML_MAX_OP_PARAMS / 4],
    pub flags: i32,
    pub src: [*mut ggml_tensor; GGML_MAX_SRC],
    pub view_src: *mut ggml_tensor,
    pub view_offs: usize,
    pub data: *mut c_void,
    pub name: [c_char; GGML_MAX_NAME],
    pub extra: *mut c_void,
    pub padding: [c_char; 8],
}

#[repr(C)]
pub struct ggml_init_params {
    pub mem_size: usize,
    pub mem_buffer: *mut c_void,
    pub no_alloc: bool,
}

#[repr(C)]
pub struct ggml_context {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ggml_cgraph {
    _opaque: [u8; 0],
}

pub type ggml_backend_t = *mut c_void;
pub type ggml_backend_reg_t = *mut c_void;
pub type ggml_backend_dev_t = *mut c_void;
pub type ggml_backend_buffer_t = *mut c_void;
pub type ggml_backend_buffer_type_t = *mut c_void;
pub type ggml_abort_callback_t = unsafe extern "C" fn(message: *const c_char);

/// ggml.h's struct ggml_threadpool_params (GGML_MAX_N_THREADS is 512).
#[repr(C)]
pub struct ggml_threadpool_params {
    pub cpumask: [bool; 512],
    pub n_threads: c_int,
    pub prio: c_int,
    pub poll: u32,
    pub strict_cpu: bool,
    pub paused: bool,
}

// The layouts above, checked against ggml's headers (see build.rs).
include!(concat!(env!("OUT_DIR"), "/ggml_layout.rs"));

/// `struct ggml_type_traits` (ggml.h, 0.26.0).
#[repr(C)]
pub struct ggml_type_traits {
    pub type_name: *const c_char,
    pub blck_size: i64,
    pub blck_size_interleave: i64,
    pub type_size: usize,
    pub is_quantized: bool,
    pub to_float: Option<unsafe extern "C" fn(x: *const c_void, y: *mut f32, k: i64)>,
    pub from_float_ref: Option<unsafe extern "C" fn(x: *const f32, y: *mut c_void, k: i64)>,
}

/// `struct ggml_type_traits_cpu` (ggml-cpu.h, 0.26.0).
#[repr(C)]
pub struct ggml_type_traits_cpu {
    pub from_float: *const c_void,
    pub vec_dot: *const c_void,
    pub vec_dot_type: c_int,
    pub nrows: i64,
}

pub type ggml_log_callback = unsafe extern "C" fn(level: c_int, text: *const c_char, user_data: *mut c_void);

pub const GGML_BACKEND_DEVICE_TYPE_CPU: c_int = 0;
pub const GGML_BACKEND_DEVICE_TYPE_GPU: c_int = 1;
pub const GGML_BACKEND_DEVICE_TYPE_IGPU: c_int = 2;
pub const GGML_BACKEND_DEVICE_TYPE_ACCEL: c_int = 3;

extern "C" {
    pub fn ggml_log_set(cb: Option<ggml_log_callback>, user_data: *mut c_void);
    pub fn ggml_type_name(t: c_int) -> *const c_char;
    pub fn ggml_blck_size(t: c_int) -> i64;
    pub fn ggml_type_size(t: c_int) -> usize;
    pub fn ggml_is_quantized(t: c_int) -> bool;
    pub fn ggml_get_type_traits_cpu(t: c_int) -> *const ggml_type_traits_cpu;
    pub fn ggml_set_abort_callback(cb: Option<ggml_abort_callback_t>) -> Option<ggml_abort_callback_t>;
    fn ggml_type_sizef(t: c_int) -> f64;
    fn ggml_row_size(t: c_int, ne: i64) -> usize;
    fn ggml_quantize_requires_imatrix(t: c_int) -> bool;
    fn ggml_quantize_chunk(
        t: c_int,
        src: *const f32,
        dst: *mut c_void,
        start: i64,
        nrows: i64,
        n_per_row: i64,
        imatrix: *const f32,
    ) -> usize;
    fn ggml_get_type_traits(t: c_int) -> *const ggml_type_traits;

    pub fn ggml_backend_reg_count() -> usize;
    pub fn ggml_backend_reg_get(i: usize) -> ggml_backend_reg_t;
    pub fn ggml_backend_reg_name(reg: ggml_backend_reg_t) -> *const c_char;
    pub fn ggml_backend_reg_dev_count(reg: ggml_backend_reg_t) -> usize;
    pub fn ggml_backend_reg_dev_get(reg: ggml_backend_reg_t, i: usize) -> ggml_backend_dev_t;
    pub fn ggml_backend_dev_name(dev: ggml_backend_dev_t) -> *const c_char;
    pub fn ggml_backend_dev_description(dev: ggml_backend_dev_t) -> *const c_char;
    pub fn ggml_backend_dev_type(dev: ggml_backend_dev_t) -> c_int;
    pub fn ggml_backend_dev_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize);
    pub fn ggml_backend_dev_init(dev: ggml_backend_dev_t, params: *const c_char) -> ggml_backend_t;
    pub fn ggml_backend_free(backend: ggml_backend_t);
    pub fn ggml_backend_name(backend: ggml_backend_t) -> *const c_char;
}

/// A C string from ggml as a Rust string ("" for null).
///
/// # Safety
/// `ptr` is null or a NUL-terminated string that outlives the call.
pub unsafe fn c_str(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: ggml returns NUL-terminated static or long-lived strings.
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

/// Block layout of one ggml type.
#[derive(Clone, Copy, Debug)]
pub struct TypeTraits {
    pub name: &'static str,
    /// Elements per block.
    pub block_size: u64,
    /// Bytes per block.
    pub type_size: u64,
}

/// The traits of a ggml type id, or None for an unknown or removed type.
pub fn type_traits(type_id: u32) -> Option<TypeTraits> {
    if type_id >= GGML_TYPE_COUNT {
        return None;
    }
    let t = type_id as c_int;
    // SAFETY: t is below GGML_TYPE_COUNT, so ggml's trait table has an entry.
    let (block, size, name) = unsafe { (ggml_blck_size(t), ggml_type_size(t), ggml_type_name(t)) };
    if block <= 0 || size == 0 || name.is_null() {
        return None; // a removed type (Q4_2, Q4_0_4_4, ...)
    }
    // SAFETY: names are static strings in ggml's trait table.
    let name = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    Some(TypeTraits { name, block_size: block as u64, type_size: size as u64 })
}

/// Whether the CPU backend can multiply a matrix of this type by f32
/// activations: it has a `vec_dot` kernel for the type and a `from_float`
/// for the type the activations are converted to (Q8_1, Q8_K, I8..I64 and
/// F64 have no such kernel; ggml would call through a null pointer).
pub fn cpu_can_mul_mat(type_id: u32) -> bool {
    if type_traits(type_id).is_none() {
        return false;
    }
    // SAFETY: type_id is a known type below GGML_TYPE_COUNT, so the CPU
    // backend's static trait table has an entry for it.
    let traits = unsafe { &*ggml_get_type_traits_cpu(type_id as c_int) };
    if traits.vec_dot.is_null() || traits.vec_dot_type < 0 || traits.vec_dot_type as u32 >= GGML_TYPE_COUNT {
        return false;
    }
    // SAFETY: as above, for the (checked) vec_dot type.
    let dot = unsafe { &*ggml_get_type_traits_cpu(traits.vec_dot_type) };
    !dot.from_float.is_null()
}

/// Bytes per element of a known type (type_size / block_size).
pub fn type_sizef(type_id: u32) -> f64 {
    assert!(type_traits(type_id).is_some(), "type_sizef: unknown type {type_id}");
    // SAFETY: a known type id below GGML_TYPE_COUNT.
    unsafe { ggml_type_sizef(type_id as c_int) }
}

/// Bytes of one row of `n` elements of a known type (n a multiple of its block size).
pub fn row_bytes(type_id: u32, n: u64) -> usize {
    assert!(type_traits(type_id).is_some_and(|t| n % t.block_size == 0), "row_bytes: bad row");
    // SAFETY: a known type id; pure arithmetic.
    unsafe { ggml_row_size(type_id as c_int, n as i64) }
}

/// Whether ggml's quantizer for this type needs an importance matrix.
pub fn requires_imatrix(type_id: u32) -> bool {
    assert!(type_id < GGML_TYPE_COUNT, "requires_imatrix: type {type_id} out of range");
    // SAFETY: a type id below GGML_TYPE_COUNT.
    unsafe { ggml_quantize_requires_imatrix(type_id as c_int) }
}

/// Whether ggml has a row decoder (to f32) for this type.
pub fn has_to_float(type_id: u32) -> bool {
    if type_traits(type_id).is_none() {
        return false;
    }
    // SAFETY: a known type id: ggml's trait table has a static entry for it.
    unsafe { (*ggml_get_type_traits(type_id as c_int)).to_float.is_some() }
}

/// Quantizes `src` (rows of `n_per_row` values) into `dst` with ggml's own
/// quantizer, without an importance matrix. The caller has checked that
/// ggml_quantize_chunk handles the type (quant::can_quantize); lengths are
/// checked here, so a mistake panics instead of overrunning.
pub fn quantize_rows(type_id: u32, src: &[f32], n_per_row: usize, dst: &mut [u8]) {
    assert!(n_per_row > 0 && src.len() % n_per_row == 0, "quantize_rows: partial row");
    assert!(!requires_imatrix(type_id), "quantize_rows: type needs an imatrix");
    let n_rows = src.len() / n_per_row;
    assert_eq!(dst.len(), n_rows * row_bytes(type_id, n_per_row as u64), "quantize_rows: dst size");
    // SAFETY: src holds n_rows * n_per_row floats and dst exactly the bytes
    // those rows take (checked above); ggml reads and writes nothing else.
    let written = unsafe {
        ggml_quantize_chunk(
            type_id as c_int,
            src.as_ptr(),
            dst.as_mut_ptr().cast(),
            0,
            n_rows as i64,
            n_per_row as i64,
            std::ptr::null(),
        )
    };
    assert_eq!(written, dst.len(), "quantize_rows: ggml wrote another size");
}

/// Decodes `dst.len()` values of a type with a row decoder from `src`.
pub fn dequantize_row(type_id: u32, src: &[u8], dst: &mut [f32]) {
    assert!(has_to_float(type_id), "dequantize_row: type {type_id} has no decoder");
    assert_eq!(src.len(), row_bytes(type_id, dst.len() as u64), "dequantize_row: src size");
    // SAFETY: a known type with a decoder; src holds exactly the bytes of
    // dst.len() values (checked above).
    unsafe {
        let f = (*ggml_get_type_traits(type_id as c_int)).to_float.expect("checked");
        f(src.as_ptr().cast(), dst.as_mut_ptr(), dst.len() as i64)
    }
}

/// Whether ggml counts a known type as quantized (a block encoding).
pub fn is_quantized(type_id: u32) -> bool {
    // SAFETY: a known type id below GGML_TYPE_COUNT.
    type_traits(type_id).is_some() && unsafe { ggml_is_quantized(type_id as c_int) }
}

/// Lugh's x86 Q4_1, Q8_0 and Q5_0 dot-product kernels (xs-rs/kernels/x86_vec_dot.c,
/// reached through ggml's type-traits table) against ggml's own, which build.rs
/// keeps under the names `lugh_ggml_vec_dot_*`: every row length remainder,
/// unaligned rows, quantized random rows and raw random blocks with extreme
/// values must give the same bits, and no kernel reads past a row's end.
#[cfg(all(test, target_arch = "x86_64"))]
mod x86_kernel_tests {
    use super::*;
    use crate::engine::rng::Rng;

    type VecDot = unsafe extern "C" fn(c_int, *mut f32, usize, *const c_void, usize, *const c_void, usize, c_int);
    type FromFloat = unsafe extern "C" fn(*const f32, *mut c_void, i64);

    extern "C" {
        fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
        fn ggml_cpu_init();
    }

    /// ggml's kernels, under the names build.rs gives them.
    macro_rules! ggml_kernels {
        ($($name:ident),*) => {
            extern "C" {
                $(fn $name(n: c_int, s: *mut f32, bs: usize, x: *const c_void, bx: usize, y: *const c_void, by: usize, nrc: c_int);)*
            }
        };
    }
    ggml_kernels!(lugh_ggml_vec_dot_q4_1_q8_1, lugh_ggml_vec_dot_q5_0_q8_0, lugh_ggml_vec_dot_q8_0_q8_0);

    const GGML_TYPE_Q4_1: u32 = 3;
    const GGML_TYPE_Q5_0: u32 = 6;
    const GGML_TYPE_Q8_0: u32 = 8;
    const GGML_TYPE_Q8_1: u32 = 9;

    /// Random blocks of `type_id`: quantized from random floats, or (raw)
    /// random bytes with every fp16 scale replaced by a finite random one.
    fn random_row(rng: &mut Rng, type_id: u32, n: usize, raw: bool) -> Vec<u8> {
        let traits = type_traits(type_id).unwrap();
        let bytes = row_bytes(type_id, n as u64);
        if !raw {
            let values: Vec<f32> = (0..n).map(|_| (rng.next_f64() * 8.0 - 4.0) as f32).collect();
            let mut row = vec![0u8; bytes];
            quantize_rows(type_id, &values, n, &mut row);
            return row;
        }
        let mut row: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
        // d and m (Q4_1) or d and s (Q8_1); the others have d alone
        let scale_words = if matches!(type_id, GGML_TYPE_Q4_1 | GGML_TYPE_Q8_1) { 2 } else { 1 };
        for block in row.chunks_mut(traits.type_size as usize) {
            for word in 0..scale_words {
                // exponent 1..29: finite, normal, up to about 2^14
                let half = (rng.next_u64() as u16 & 0x83ff) | (((rng.next_u64() % 29) as u16 + 1) << 10);
                block[2 * word..2 * word + 2].copy_from_slice(&half.to_le_bytes());
            }
        }
        row
    }

    /// The activations side: quantized by the type's own from_float.
    fn activations(rng: &mut Rng, dot_type: c_int, n: usize, raw: bool) -> Vec<u8> {
        if raw {
            return random_row(rng, dot_type as u32, n, true);
        }
        let values: Vec<f32> = (0..n).map(|_| (rng.next_f64() * 2.0 - 1.0) as f32).collect();
        let mut row = vec![0u8; row_bytes(dot_type as u32, n as u64)];
        // SAFETY: the CPU traits of a known type; from_float writes the n values' blocks into row.
        unsafe {
            let from_float: FromFloat = std::mem::transmute((*ggml_get_type_traits_cpu(dot_type)).from_float);
            from_float(values.as_ptr(), row.as_mut_ptr().cast(), n as i64);
        }
        row
    }

    const PAGE: usize = 4096;

    /// `bytes` placed so that they end where an inaccessible page begins: a
    /// kernel that reads past the row's end faults.
    fn at_page_end(bytes: &[u8]) -> (memmap2::MmapMut, usize) {
        let end = bytes.len().div_ceil(PAGE).max(1) * PAGE;
        let mut map = memmap2::MmapMut::map_anon(end + PAGE).unwrap();
        let start = end - bytes.len();
        map[start..end].copy_from_slice(bytes);
        // SAFETY: the last page of a mapping this function owns; nothing refers to it.
        assert_eq!(unsafe { mprotect(map.as_mut_ptr().add(end).cast(), PAGE, 0) }, 0, "mprotect");
        (map, start)
    }

    /// Both kernels over the n values at x and y: the same bits, or a panic naming `case`.
    ///
    /// # Safety
    /// x and y hold n values of the kernel's weight and activation types.
    unsafe fn compare(lugh_kernel: VecDot, ggml_kernel: VecDot, n: usize, x: *const u8, y: *const u8, case: &str) {
        let (mut ours, mut theirs) = (f32::NAN, f32::NAN);
        // SAFETY: as the caller promises.
        unsafe {
            lugh_kernel(n as c_int, &mut ours, 0, x.cast(), 0, y.cast(), 0, 1);
            ggml_kernel(n as c_int, &mut theirs, 0, x.cast(), 0, y.cast(), 0, 1);
        }
        assert_eq!(ours.to_bits(), theirs.to_bits(), "{case}: {ours} vs ggml's {theirs}");
    }

    fn check(type_id: u32, ggml_kernel: VecDot) {
        // SAFETY: initialises ggml's fp16 tables, which ggml's kernels read.
        unsafe { ggml_cpu_init() };
        // SAFETY: the CPU traits of a known type.
        let traits = unsafe { &*ggml_get_type_traits_cpu(type_id as c_int) };
        // SAFETY: vec_dot is the kernel ggml's table holds for this type (Lugh's).
        let lugh_kernel: VecDot = unsafe { std::mem::transmute(traits.vec_dot) };
        let mut rng = Rng::new(20261126 + type_id as u64);
        let mut compared = 0;
        for blocks in (1..=23).chain([36, 48, 96]) {
            let n = blocks * 32;
            for raw in [false, true] {
                for offset in [0usize, 1, 7] {
                    let row = random_row(&mut rng, type_id, n, raw);
                    let act = activations(&mut rng, traits.vec_dot_type, n, raw);
                    let mut x = vec![0u8; offset];
                    x.extend_from_slice(&row);
                    let mut y = vec![0u8; offset];
                    y.extend_from_slice(&act);
                    let case = format!("type {type_id}, {blocks} blocks, raw {raw}, offset {offset}");
                    // SAFETY: x and y hold n values of the kernel's two types, from `offset`.
                    unsafe {
                        compare(lugh_kernel, ggml_kernel, n, x.as_ptr().add(offset), y.as_ptr().add(offset), &case)
                    };
                    compared += 1;
                }
                let row = random_row(&mut rng, type_id, n, raw);
                let act = activations(&mut rng, traits.vec_dot_type, n, raw);
                let ((x, x_start), (y, y_start)) = (at_page_end(&row), at_page_end(&act));
                let case = format!("type {type_id}, {blocks} blocks, raw {raw}, at a page's end");
                // SAFETY: each row holds n values and ends at its map's guard page.
                unsafe {
                    compare(lugh_kernel, ggml_kernel, n, x.as_ptr().add(x_start), y.as_ptr().add(y_start), &case)
                };
            }
        }
        assert_eq!(compared, 26 * 6);
    }

    /// ggml's `struct ggml_compute_params` (ggml-cpu-impl.h).
    #[repr(C)]
    struct ComputeParams {
        ith: c_int,
        nth: c_int,
        wsize: usize,
        wdata: *mut c_void,
        threadpool: *mut c_void,
        use_ref: bool,
    }

    /// The matrix product ggml's mul_mat calls (Lugh's, x86_gemm.c) and
    /// ggml's own (tinyBLAS), under the name build.rs gives it.
    macro_rules! sgemm_functions {
        ($($name:ident),*) => {
            extern "C" {
                $(fn $name(
                    params: *const ComputeParams,
                    m: i64,
                    n: i64,
                    k: i64,
                    a: *const c_void,
                    lda: i64,
                    b: *const c_void,
                    ldb: i64,
                    c: *mut f32,
                    ldc: i64,
                    a_type: c_int,
                    b_type: c_int,
                    c_type: c_int,
                ) -> bool;)*
            }
        };
    }
    sgemm_functions!(llamafile_sgemm, lugh_llamafile_sgemm);

    extern "C" {
        /// Whether x86_gemm.c was compiled with its kernels (AVX-512 VNNI).
        fn lugh_x86_gemm_built() -> bool;
    }

    /// C = A^T B in llamafile_sgemm's layout through `sgemm` (each of nth
    /// threads its share), or None where it declines.
    fn sgemm_product(
        sgemm: Sgemm,
        (m, n, blocks): (usize, usize, usize),
        a: &[u8],
        b: &[u8],
        (lda, ldb, ldc): (usize, usize, usize),
        (a_type, b_type): (u32, u32),
        nth: c_int,
    ) -> Option<Vec<f32>> {
        let mut c = vec![f32::NAN; ldc * n];
        for ith in 0..nth {
            let params = ComputeParams {
                ith,
                nth,
                wsize: 0,
                wdata: std::ptr::null_mut(),
                threadpool: std::ptr::null_mut(),
                use_ref: false,
            };
            // SAFETY: a holds m rows of lda blocks, b n columns of ldb, c n columns of ldc floats.
            let taken = unsafe {
                sgemm(
                    &params,
                    m as i64,
                    n as i64,
                    blocks as i64,
                    a.as_ptr().cast(),
                    lda as i64,
                    b.as_ptr().cast(),
                    ldb as i64,
                    c.as_mut_ptr(),
                    ldc as i64,
                    a_type as c_int,
                    b_type as c_int,
                    0,
                )
            };
            if !taken {
                return None;
            }
        }
        Some(c)
    }

    type Sgemm = unsafe extern "C" fn(
        *const ComputeParams,
        i64,
        i64,
        i64,
        *const c_void,
        i64,
        *const c_void,
        i64,
        *mut f32,
        i64,
        c_int,
        c_int,
        c_int,
    ) -> bool;

    /// Lugh's matrix product for `type_id` weights, reached as ggml's matrix
    /// product reaches it (llamafile_sgemm, each of nth threads its share),
    /// against ggml's vec_dot of every row and column and, where ggml's
    /// tinyBLAS takes the pair, against tinyBLAS: the same bits.
    fn check_gemm(type_id: u32, ggml_kernel: VecDot) {
        // SAFETY: initialises ggml's fp16 tables, which ggml's kernels read.
        unsafe { ggml_cpu_init() };
        // SAFETY: the CPU traits of a known type.
        let dot_type = unsafe { (*ggml_get_type_traits_cpu(type_id as c_int)).vec_dot_type } as u32;
        let (a_block, b_block) = (row_bytes(type_id, 32), row_bytes(dot_type, 32));
        let mut rng = Rng::new(20261126 + type_id as u64);
        let mut cases = 0;
        // Lugh's product takes one column (a decode step) or 8 and more; in
        // between ggml's decides
        let shapes = [
            (1, 8, 1),
            (2, 8, 2),
            (3, 9, 3),
            (5, 15, 18),
            (8, 16, 48),
            (17, 13, 5),
            (6, 33, 7),
            (4, 4, 36),
            (33, 1, 5),
            (2, 1, 48),
        ];
        for (m, n, blocks) in shapes {
            for raw in [false, true] {
                // rows and columns a few blocks longer than k, as a view's would be
                let (lda, ldb, ldc) = (blocks + 1, blocks + 2, m + 3);
                let a: Vec<u8> = (0..m).flat_map(|_| random_row(&mut rng, type_id, lda * 32, raw)).collect();
                let mut b: Vec<u8> =
                    (0..n).flat_map(|_| activations(&mut rng, dot_type as c_int, ldb * 32, raw)).collect();
                // ggml's quantized activations are never -128, where its sign trick wraps
                for block in b.chunks_mut(b_block) {
                    let scale_bytes = b_block - 32;
                    block[scale_bytes..].iter_mut().filter(|v| **v == 0x80).for_each(|v| *v = 0x7f);
                }
                let sizes = (m, n, blocks);
                let strides = (lda, ldb, ldc);
                let tiny_blas = sgemm_product(lugh_llamafile_sgemm, sizes, &a, &b, strides, (type_id, dot_type), 1);
                for nth in 1..=3 {
                    let case = format!("type {type_id}, {m}x{n}x{blocks} blocks, raw {raw}, {nth} threads");
                    let Some(c) = sgemm_product(llamafile_sgemm, sizes, &a, &b, strides, (type_id, dot_type), nth)
                    else {
                        // SAFETY: reads a constant.
                        let built = unsafe { lugh_x86_gemm_built() };
                        assert!(n > 1 && (n < 8 || !built) && tiny_blas.is_none(), "{case}: llamafile_sgemm declined");
                        continue;
                    };
                    for i in 0..m {
                        for j in 0..n {
                            let mut expected = f32::NAN;
                            // SAFETY: row i of a and column j of b hold `blocks` blocks.
                            unsafe {
                                ggml_kernel(
                                    (blocks * 32) as c_int,
                                    &mut expected,
                                    0,
                                    a.as_ptr().add(i * lda * a_block).cast(),
                                    0,
                                    b.as_ptr().add(j * ldb * b_block).cast(),
                                    0,
                                    1,
                                )
                            };
                            let ours = c[j * ldc + i];
                            assert_eq!(
                                ours.to_bits(),
                                expected.to_bits(),
                                "{case} ({i}, {j}): {ours} vs ggml's {expected}"
                            );
                            if let Some(tiny) = &tiny_blas {
                                let theirs = tiny[j * ldc + i];
                                assert_eq!(
                                    ours.to_bits(),
                                    theirs.to_bits(),
                                    "{case} ({i}, {j}): {ours} vs tinyBLAS's {theirs}"
                                );
                            }
                        }
                    }
                    // the padding between columns is left alone
                    assert!(c.chunks(ldc).all(|column| column[m..].iter().all(|v| v.is_nan())), "{case}: padding");
                    cases += 1;
                }
                // tinyBLAS takes Q8_0 and Q5_0 from two columns on, not Q4_1
                assert_eq!(tiny_blas.is_some(), type_id != GGML_TYPE_Q4_1 && n > 1, "tinyBLAS for type {type_id}");
            }
        }
        // SAFETY: reads a constant.
        if unsafe { lugh_x86_gemm_built() } {
            let declined = if type_id == GGML_TYPE_Q4_1 { 2 * 3 } else { 0 };
            assert_eq!(cases, shapes.len() * 2 * 3 - declined);
        }
    }

    // the K-quant kernels' tests, which use the helpers above
    include!("kquant_kernel_tests.rs");

    #[test]
    fn q4_1_gemm_is_ggmls_bit_for_bit() {
        check_gemm(GGML_TYPE_Q4_1, lugh_ggml_vec_dot_q4_1_q8_1);
    }

    #[test]
    fn q5_0_gemm_is_ggmls_bit_for_bit() {
        check_gemm(GGML_TYPE_Q5_0, lugh_ggml_vec_dot_q5_0_q8_0);
    }

    #[test]
    fn q8_0_gemm_is_ggmls_bit_for_bit() {
        check_gemm(GGML_TYPE_Q8_0, lugh_ggml_vec_dot_q8_0_q8_0);
    }

    #[test]
    fn q4_1_kernel_is_ggmls_bit_for_bit() {
        check(GGML_TYPE_Q4_1, lugh_ggml_vec_dot_q4_1_q8_1);
    }

    #[test]
    fn q5_0_kernel_is_ggmls_bit_for_bit() {
        check(GGML_TYPE_Q5_0, lugh_ggml_vec_dot_q5_0_q8_0);
    }

    #[test]
    fn q8_0_kernel_is_ggmls_bit_for_bit() {
        check(GGML_TYPE_Q8_0, lugh_ggml_vec_dot_q8_0_q8_0);
    }
}
