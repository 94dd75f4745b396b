/* The only C in Lugh: perl's API is a set of macros, so each one we need is
 * wrapped here in a plain function that Rust can call.  Every function takes
 * the interpreter as `void *my_perl_v` so that Rust has one signature whether
 * or not this perl is threaded (on an unthreaded perl the pointer is unused).
 * Compiled by build.rs against this perl's own headers and ccflags. */
#define PERL_NO_GET_CONTEXT
#include "EXTERN.h"
#include "perl.h"
#include "XSUB.h"

#ifdef MULTIPLICITY
#  define LUGH_CTX PerlInterpreter *my_perl = (PerlInterpreter *)my_perl_v
#else
#  define LUGH_CTX PERL_UNUSED_VAR(my_perl_v)
#endif

typedef void (*lugh_rust_xsub)(void *my_perl, CV *cv);
typedef void (*lugh_rust_free)(void *payload);

static lugh_rust_free lugh_free_hook = NULL;

/* ---------- loading and registering XSUBs ---------- */

/* Every XSUB goes through this trampoline; the Rust function to run is kept
 * in the CV itself, so Rust never needs perl's per-build XSUB signature. */
static void lugh_trampoline(pTHX_ CV *cv) {
    lugh_rust_xsub f = (lugh_rust_xsub)CvXSUBANY(cv).any_ptr;
#ifdef MULTIPLICITY
    f((void *)my_perl, cv);
#else
    f(NULL, cv);
#endif
}

/* The handshake: checks API version and interpreter layout, pops the mark. */
I32 lugh_boot_start(void *my_perl_v, CV *cv) {
    LUGH_CTX;
    dXSBOOTARGSXSAPIVERCHK;
    PERL_UNUSED_VAR(items);
    return ax;
}

void lugh_boot_end(void *my_perl_v, I32 ax) { LUGH_CTX; Perl_xs_boot_epilog(aTHX_ ax); }

void lugh_set_free_hook(lugh_rust_free hook) { lugh_free_hook = hook; }

void lugh_newxs(void *my_perl_v, const char *name, lugh_rust_xsub f) {
    LUGH_CTX;
    CV *cv = Perl_newXS_deffile(aTHX_ name, lugh_trampoline);
    CvXSUBANY(cv).any_ptr = (void *)f;
}

/* ---------- the argument stack ---------- */

I32 lugh_xs_start(void *my_perl_v, I32 *items_out) {
    LUGH_CTX;
    dSP; dAXMARK; dITEMS;
    PERL_UNUSED_VAR(sp);
    *items_out = items;
    return ax;
}

SV *lugh_st(void *my_perl_v, I32 ax, I32 i) { LUGH_CTX; return PL_stack_base[ax + i]; }

/* Puts n values on the stack as the XSUB's return list. */
void lugh_xs_return(void *my_perl_v, I32 ax, SV **values, I32 n) {
    LUGH_CTX;
    SV **sp = PL_stack_base + ax - 1;
    I32 i;
    EXTEND(sp, n);
    for (i = 0; i < n; i++) PL_stack_base[ax + i] = values[i];
    PL_stack_sp = PL_stack_base + ax + n - 1;
}

/* Same for a float vector, which can be long (a vocabulary of logits). */
void lugh_xs_return_floats(void *my_perl_v, I32 ax, const float *values, size_t n) {
    LUGH_CTX;
    SV **sp = PL_stack_base + ax - 1;
    size_t i;
    if (GIMME_V == G_VOID) { /* forward() called to fill a cache: no list of logits to build and free */
        PL_stack_sp = PL_stack_base + ax - 1;
        return;
    }
    EXTEND(sp, (SSize_t)n);
    for (i = 0; i < n; i++) PL_stack_base[ax + i] = sv_2mortal(newSVnv((NV)values[i]));
    PL_stack_sp = PL_stack_base + ax + n - 1;
}

/* ---------- reading values ---------- */

int lugh_sv_ok(void *my_perl_v, SV *sv) { LUGH_CTX; SvGETMAGIC(sv); return SvOK(sv) ? 1 : 0; }
int lugh_sv_true(void *my_perl_v, SV *sv) { LUGH_CTX; return SvTRUE(sv) ? 1 : 0; }
IV lugh_sv_iv(void *my_perl_v, SV *sv) { LUGH_CTX; return SvIV(sv); }
UV lugh_sv_uv(void *my_perl_v, SV *sv) { LUGH_CTX; return SvUV(sv); }
NV lugh_sv_nv(void *my_perl_v, SV *sv) { LUGH_CTX; return SvNV(sv); }

/* 0: not a number, 1: integer, 2: other number (perl's looks_like_number). */
int lugh_sv_number_kind(void *my_perl_v, SV *sv) {
    LUGH_CTX;
    int flags;
    SvGETMAGIC(sv);
    if (SvIOK(sv) && !SvNOK(sv)) return 1;
    if (SvNOK(sv) && !SvPOK(sv)) return 2; /* a plain float: looks_like_number gives no NOT_INT flag */
    flags = looks_like_number(sv);
    if (!flags) return 0;
    return (flags & IS_NUMBER_NOT_INT) ? 2 : 1;
}

/* The string's buffer without changing the SV; *is_utf8 says how to read it. */
const char *lugh_sv_pv(void *my_perl_v, SV *sv, STRLEN *len, int *is_utf8) {
    LUGH_CTX;
    const char *pv = SvPV_const(sv, *len);
    *is_utf8 = SvUTF8(sv) ? 1 : 0;
    return pv;
}

/* 0: not a reference, else 'A' array, 'H' hash, 'C' code, 'S' other. */
int lugh_sv_ref_kind(void *my_perl_v, SV *sv) {
    LUGH_CTX;
    SvGETMAGIC(sv);
    if (!SvROK(sv)) return 0;
    switch (SvTYPE(SvRV(sv))) {
    case SVt_PVAV: return 'A';
    case SVt_PVHV: return 'H';
    case SVt_PVCV: return 'C';
    default: return 'S';
    }
}

SSize_t lugh_av_count(void *my_perl_v, SV *rv) { LUGH_CTX; return av_top_index((AV *)SvRV(rv)) + 1; }

SV *lugh_av_fetch(void *my_perl_v, SV *rv, SSize_t i) {
    LUGH_CTX;
    SV **slot = av_fetch((AV *)SvRV(rv), i, 0);
    return slot ? *slot : &PL_sv_undef;
}

/* ---------- making values (all returned mortal) ---------- */

SV *lugh_new_iv(void *my_perl_v, IV v) { LUGH_CTX; return sv_2mortal(newSViv(v)); }
SV *lugh_new_uv(void *my_perl_v, UV v) { LUGH_CTX; return sv_2mortal(newSVuv(v)); }
SV *lugh_new_nv(void *my_perl_v, NV v) { LUGH_CTX; return sv_2mortal(newSVnv(v)); }
SV *lugh_new_str(void *my_perl_v, const char *s, STRLEN n) { LUGH_CTX; return sv_2mortal(newSVpvn_utf8(s, n, 1)); }
SV *lugh_new_bytes(void *my_perl_v, const char *s, STRLEN n) { LUGH_CTX; return sv_2mortal(newSVpvn(s, n)); }
SV *lugh_new_bool(void *my_perl_v, int b) { LUGH_CTX; return b ? &PL_sv_yes : &PL_sv_no; }
SV *lugh_undef(void *my_perl_v) { LUGH_CTX; return &PL_sv_undef; }

/* A reference to a new array holding copies of the given values. */
SV *lugh_new_array_ref(void *my_perl_v, SV **values, SSize_t n) {
    LUGH_CTX;
    AV *av = newAV();
    SSize_t i;
    if (n > 0) av_extend(av, n - 1);
    for (i = 0; i < n; i++) av_store(av, i, newSVsv(values[i]));
    return sv_2mortal(newRV_noinc((SV *)av));
}

SV *lugh_new_float_array_ref(void *my_perl_v, const float *values, SSize_t n) {
    LUGH_CTX;
    AV *av = newAV();
    SSize_t i;
    if (n > 0) av_extend(av, n - 1);
    for (i = 0; i < n; i++) av_store(av, i, newSVnv((NV)values[i]));
    return sv_2mortal(newRV_noinc((SV *)av));
}

SV *lugh_new_int_array_ref(void *my_perl_v, const int64_t *values, SSize_t n) {
    LUGH_CTX;
    AV *av = newAV();
    SSize_t i;
    if (n > 0) av_extend(av, n - 1);
    for (i = 0; i < n; i++) av_store(av, i, newSViv((IV)values[i]));
    return sv_2mortal(newRV_noinc((SV *)av));
}

/* ---------- objects: a blessed hash carrying the Rust payload as ext magic ---------- */

static int lugh_mg_free(pTHX_ SV *sv, MAGIC *mg) {
    PERL_UNUSED_VAR(sv);
    if (mg->mg_ptr && lugh_free_hook) lugh_free_hook(mg->mg_ptr);
    mg->mg_ptr = NULL;
    return 0;
}

static MGVTBL lugh_object_vtbl = { 0, 0, 0, 0, lugh_mg_free, 0, 0, 0 };

SV *lugh_new_object(void *my_perl_v, const char *klass, void *payload) {
    LUGH_CTX;
    HV *hv = newHV();
    SV *rv;
    sv_magicext((SV *)hv, NULL, PERL_MAGIC_ext, &lugh_object_vtbl, (const char *)payload, 0);
    rv = newRV_noinc((SV *)hv);
    sv_bless(rv, gv_stashpv(klass, GV_ADD));
    return sv_2mortal(rv);
}

/* The payload of a Lugh object, or NULL when sv is not one (a plain hash,
 * a copy made by dclone, anything else). */
void *lugh_object_payload(void *my_perl_v, SV *sv) {
    LUGH_CTX;
    MAGIC *mg;
    SvGETMAGIC(sv);
    if (!SvROK(sv) || SvTYPE(SvRV(sv)) != SVt_PVHV) return NULL;
    mg = mg_findext(SvRV(sv), PERL_MAGIC_ext, &lugh_object_vtbl);
    return mg ? (void *)mg->mg_ptr : NULL;
}

/* ---------- errors ---------- */

/* Dies with msg through Lugh::_croak, which appends the location of the
 * first caller outside Lugh's own packages. Never returns. */
void lugh_croak_msg(void *my_perl_v, SV *msg) {
    LUGH_CTX;
    dSP;
    ENTER;
    PUSHMARK(SP);
    XPUSHs(msg);
    PUTBACK;
    call_pv("Lugh::_croak", G_DISCARD);
    LEAVE;
    croak_sv(msg); /* not reached: Lugh::_croak dies */
}

/* Rethrows a value exactly as it was thrown (an exception object stays one). */
void lugh_croak_sv(void *my_perl_v, SV *err) { LUGH_CTX; croak_sv(err); }

void lugh_croak_usage(void *my_perl_v, CV *cv, const char *params) { LUGH_CTX; croak_xs_usage(cv, params); }

/* ---------- callbacks ---------- */

/* Whether the last G_EVAL call died, without SvTRUE: $@ may be an object
 * whose bool overload dies, and nothing here may croak (the caller's Rust
 * frames would be skipped). call_sv clears $@ to "" on success. */
static int lugh_died(pTHX) {
    SV *e = ERRSV;
    STRLEN len;
    if (SvROK(e)) return 1;
    if (!SvOK(e)) return 0;
    (void)SvPV(e, len);
    return len > 0;
}

/* Calls cb in scalar context under G_EVAL. Returns a new (owned) copy of the
 * result, or NULL with *err set to an owned copy of $@ when cb died. */
SV *lugh_call_sv(void *my_perl_v, SV *cb, SV **args, int n, SV **err) {
    LUGH_CTX;
    dSP;
    SV *ret = NULL;
    int count, i;
    ENTER;
    SAVETMPS;
    PUSHMARK(SP);
    EXTEND(SP, n);
    for (i = 0; i < n; i++) PUSHs(args[i]);
    PUTBACK;
    count = call_sv(cb, G_SCALAR | G_EVAL);
    SPAGAIN;
    if (count == 1) ret = newSVsv(POPs);
    PUTBACK;
    if (lugh_died(aTHX)) {
        *err = newSVsv(ERRSV);
        if (ret) SvREFCNT_dec(ret);
        ret = NULL;
    } else {
        *err = NULL;
    }
    FREETMPS;
    LEAVE;
    return ret;
}

void lugh_sv_refcnt_dec(void *my_perl_v, SV *sv) { LUGH_CTX; SvREFCNT_dec(sv); }
SV *lugh_sv_mortal(void *my_perl_v, SV *sv) { LUGH_CTX; return sv_2mortal(sv); }

/* ---------- building arrays element by element ---------- */

SV *lugh_new_av_ref(void *my_perl_v, SSize_t reserve) {
    LUGH_CTX;
    AV *av = newAV();
    if (reserve > 0) av_extend(av, reserve - 1);
    return sv_2mortal(newRV_noinc((SV *)av));
}

void lugh_av_push_sv(void *my_perl_v, SV *rv, SV *v) { LUGH_CTX; av_push((AV *)SvRV(rv), newSVsv(v)); }
void lugh_av_push_iv(void *my_perl_v, SV *rv, IV v) { LUGH_CTX; av_push((AV *)SvRV(rv), newSViv(v)); }
void lugh_av_push_uv(void *my_perl_v, SV *rv, UV v) { LUGH_CTX; av_push((AV *)SvRV(rv), newSVuv(v)); }
void lugh_av_push_nv(void *my_perl_v, SV *rv, NV v) { LUGH_CTX; av_push((AV *)SvRV(rv), newSVnv(v)); }
void lugh_av_push_str(void *my_perl_v, SV *rv, const char *s, STRLEN n) {
    LUGH_CTX;
    av_push((AV *)SvRV(rv), newSVpvn_utf8(s, n, 1));
}
