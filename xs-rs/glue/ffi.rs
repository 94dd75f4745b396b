//! Declarations of the C shim (shim.c). Every function takes the interpreter
//! pointer first; on an unthreaded perl it is null and ignored.
#![allow(dead_code)]
use std::ffi::{c_char, c_int, c_void};

/// The interpreter (`PerlInterpreter*`), opaque to Rust.
pub type Interp = *mut c_void;

#[repr(C)]
pub struct SvBody {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct CvBody {
    _opaque: [u8; 0],
}
/// A perl scalar (`SV*`). Only ever made by perl (stack slots, mortals), so
/// holding one means holding a live SV for the current statement.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sv(pub *mut SvBody);
/// A perl sub (`CV*`).
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Cv(pub *mut CvBody);

pub type RustXsub = unsafe extern "C" fn(Interp, Cv);
pub type FreeHook = unsafe extern "C" fn(*mut c_void);

extern "C" {
    pub fn lugh_boot_start(p: Interp, cv: Cv) -> i32;
    pub fn lugh_boot_end(p: Interp, ax: i32);
    pub fn lugh_set_free_hook(hook: FreeHook);
    pub fn lugh_newxs(p: Interp, name: *const c_char, f: RustXsub);

    pub fn lugh_xs_start(p: Interp, items: *mut i32) -> i32;
    pub fn lugh_st(p: Interp, ax: i32, i: i32) -> Sv;
    pub fn lugh_xs_return(p: Interp, ax: i32, values: *const Sv, n: i32, is_list: i32);
    pub fn lugh_xs_return_floats(p: Interp, ax: i32, values: *const f32, n: usize);

    pub fn lugh_take_error(p: Interp) -> Sv;
    pub fn lugh_restore_error(p: Interp, err: Sv);
    pub fn lugh_sv_ok(p: Interp, sv: Sv) -> c_int;
    pub fn lugh_sv_true(p: Interp, sv: Sv) -> c_int;
    pub fn lugh_sv_iv(p: Interp, sv: Sv) -> isize;
    pub fn lugh_sv_uv(p: Interp, sv: Sv) -> usize;
    pub fn lugh_sv_nv(p: Interp, sv: Sv) -> f64;
    pub fn lugh_sv_number_kind(p: Interp, sv: Sv) -> c_int;
    pub fn lugh_sv_pv(p: Interp, sv: Sv, len: *mut usize, is_utf8: *mut c_int) -> *const c_char;
    pub fn lugh_sv_ref_kind(p: Interp, sv: Sv) -> c_int;
    pub fn lugh_sv_blessed(p: Interp, sv: Sv) -> *const c_char;
    pub fn lugh_av_count(p: Interp, rv: Sv) -> isize;
    pub fn lugh_av_fetch(p: Interp, rv: Sv, i: isize) -> Sv;
    pub fn lugh_hv_pairs(p: Interp, rv: Sv) -> Sv;

    pub fn lugh_new_iv(p: Interp, v: isize) -> Sv;
    pub fn lugh_new_uv(p: Interp, v: usize) -> Sv;
    pub fn lugh_new_nv(p: Interp, v: f64) -> Sv;
    pub fn lugh_new_str(p: Interp, s: *const c_char, n: usize) -> Sv;
    pub fn lugh_new_bytes(p: Interp, s: *const c_char, n: usize) -> Sv;
    pub fn lugh_new_bool(p: Interp, b: c_int) -> Sv;
    pub fn lugh_undef(p: Interp) -> Sv;
    pub fn lugh_new_array_ref(p: Interp, values: *const Sv, n: isize) -> Sv;
    pub fn lugh_new_float_array_ref(p: Interp, values: *const f32, n: isize) -> Sv;
    pub fn lugh_new_int_array_ref(p: Interp, values: *const i64, n: isize) -> Sv;

    pub fn lugh_new_av_ref(p: Interp, reserve: isize) -> Sv;
    pub fn lugh_av_push_sv(p: Interp, rv: Sv, v: Sv);
    pub fn lugh_av_push_iv(p: Interp, rv: Sv, v: isize);
    pub fn lugh_av_push_uv(p: Interp, rv: Sv, v: usize);
    pub fn lugh_av_push_nv(p: Interp, rv: Sv, v: f64);
    pub fn lugh_av_push_str(p: Interp, rv: Sv, s: *const c_char, n: usize);

    pub fn lugh_new_object(p: Interp, class: *const c_char, payload: *mut c_void) -> Sv;
    pub fn lugh_object_payload(p: Interp, sv: Sv) -> *mut c_void;

    pub fn lugh_croak_msg(p: Interp, msg: Sv) -> !;
    pub fn lugh_croak_sv(p: Interp, err: Sv) -> !;

    pub fn lugh_signal_pending(p: Interp) -> c_int;
    pub fn lugh_call_sv(p: Interp, cb: Sv, args: *const Sv, n: c_int, err: *mut Sv) -> Sv;
    pub fn lugh_sv_refcnt_dec(p: Interp, sv: Sv);
    pub fn lugh_sv_mortal(p: Interp, sv: Sv) -> Sv;
}
