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
static void lugh_guard_xsub(pTHX_ CV *cv);

/* ---------- loading and registering XSUBs ---------- */

/* ---------- signals ---------- */

/* With PERL_SIGNALS=unsafe, perl runs a signal handler the moment the signal
 * arrives, wherever the process is; a handler that dies would longjmp out of
 * Rust code (a cache's mutex left locked: the next call hangs). So while an
 * XSUB runs, asynchronous signals are blocked, and they arrive when it
 * returns or croaks (with the default, safe signals perl defers handlers to
 * its own safe points anyway, and nothing is blocked). Each XSUB's saved
 * mask lives in its trampoline's frame; the croak path restores the
 * innermost one before it longjmps. */
#ifndef _WIN32
#  include <signal.h>
#  include <pthread.h>
typedef struct lugh_sigframe {
    sigset_t saved;
    int blocked;
    struct lugh_sigframe *outer;
} lugh_sigframe;

static __thread lugh_sigframe *lugh_sig_innermost = NULL;

static void lugh_signals_enter(pTHX_ lugh_sigframe *frame) {
    frame->blocked = 0;
    frame->outer = lugh_sig_innermost;
    lugh_sig_innermost = frame;
    if (PL_signals & PERL_SIGNALS_UNSAFE_FLAG) {
        sigset_t all;
        sigfillset(&all);
        /* faults and aborts are not asynchronous: never block them */
        sigdelset(&all, SIGSEGV); sigdelset(&all, SIGBUS); sigdelset(&all, SIGFPE);
        sigdelset(&all, SIGILL); sigdelset(&all, SIGABRT); sigdelset(&all, SIGTRAP);
        frame->blocked = pthread_sigmask(SIG_BLOCK, &all, &frame->saved) == 0;
    }
}

/* Leaves the innermost frame (which is `frame` on the normal path). */
static void lugh_signals_leave(void) {
    lugh_sigframe *frame = lugh_sig_innermost;
    if (!frame) return;
    lugh_sig_innermost = frame->outer;
    if (frame->blocked) pthread_sigmask(SIG_SETMASK, &frame->saved, NULL);
}
#else
typedef int lugh_sigframe;
static void lugh_signals_enter(pTHX_ lugh_sigframe *frame) { PERL_UNUSED_CONTEXT; (void)frame; }
static void lugh_signals_leave(void) {}
#endif

/* Every XSUB goes through this trampoline; the Rust function to run is kept
 * in the CV itself, so Rust never needs perl's per-build XSUB signature. */
static void lugh_trampoline(pTHX_ CV *cv) {
    lugh_rust_xsub f = (lugh_rust_xsub)CvXSUBANY(cv).any_ptr;
    lugh_sigframe frame;
    lugh_signals_enter(aTHX_ &frame);
#ifdef MULTIPLICITY
    f((void *)my_perl, cv);
#else
    f(NULL, cv);
#endif
    /* a pending signal's handler runs here, outside Rust */
    lugh_signals_leave();
}

/* The handshake: checks API version and interpreter layout, pops the mark. */
I32 lugh_boot_start(void *my_perl_v, CV *cv) {
    LUGH_CTX;
    dXSBOOTARGSXSAPIVERCHK;
    PERL_UNUSED_VAR(items);
    return ax;
}

/* Runs the %SIG handlers of the signals perl has deferred (safe signals: a
 * handler runs between ops, and none run while native code computes). A C
 * XSUB, so that when it is called through lugh_call_sv a handler's die
 * unwinds to that G_EVAL over C frames only. */
static void lugh_despatch_xsub(pTHX_ CV *cv) {
    dXSARGS;
    PERL_UNUSED_VAR(cv);
    PERL_UNUSED_VAR(items);
    PERL_ASYNC_CHECK();
    XSRETURN_EMPTY;
}

/* Whether a signal waits for its handler: one load, cheap enough per token. */
int lugh_signal_pending(void *my_perl_v) {
    LUGH_CTX;
    return PL_sig_pending ? 1 : 0;
}

void lugh_boot_end(void *my_perl_v, I32 ax) {
    LUGH_CTX;
    (void)Perl_newXS_deffile(aTHX_ "Lugh::_read_guard", lugh_guard_xsub);
    (void)Perl_newXS_deffile(aTHX_ "Lugh::_despatch_signals", lugh_despatch_xsub);
    Perl_xs_boot_epilog(aTHX_ ax);
}

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

/* Puts n values on the stack as the XSUB's return. A list (is_list) called
 * in scalar context gives one array reference to it: Lugh's one rule for
 * list-returning methods, so that `my $ids = $tokenizer->encode(...)` is
 * never just the last element. */
void lugh_xs_return(void *my_perl_v, I32 ax, SV **values, I32 n, int is_list) {
    LUGH_CTX;
    SV **sp = PL_stack_base + ax - 1;
    I32 i;
    if (is_list && GIMME_V == G_SCALAR) {
        AV *av = av_make(n, values); /* copies the values */
        PL_stack_base[ax] = sv_2mortal(newRV_noinc((SV *)av));
        PL_stack_sp = PL_stack_base + ax;
        return;
    }
    EXTEND(sp, n);
    for (i = 0; i < n; i++) PL_stack_base[ax + i] = values[i];
    PL_stack_sp = PL_stack_base + ax + n - 1;
}

/* Same for a float vector, which can be long (a vocabulary of logits). */
void lugh_xs_return_floats(void *my_perl_v, I32 ax, const float *values, size_t n) {
    LUGH_CTX;
    SV **sp = PL_stack_base + ax - 1;
    size_t i;
    U8 gimme = GIMME_V;
    if (gimme == G_VOID) { /* forward() called to fill a cache: no list of logits to build and free */
        PL_stack_sp = PL_stack_base + ax - 1;
        return;
    }
    if (gimme == G_SCALAR) {
        AV *av = newAV();
        av_extend(av, (SSize_t)n - 1);
        for (i = 0; i < n; i++) av_store(av, (SSize_t)i, newSVnv((NV)values[i]));
        PL_stack_base[ax] = sv_2mortal(newRV_noinc((SV *)av));
        PL_stack_sp = PL_stack_base + ax;
        return;
    }
    EXTEND(sp, (SSize_t)n);
    for (i = 0; i < n; i++) PL_stack_base[ax + i] = sv_2mortal(newSVnv((NV)values[i]));
    PL_stack_sp = PL_stack_base + ax + n - 1;
}

/* ---------- reading values, guarded ---------- */

/* Reading a value can run perl code: a tied scalar's or array's FETCH, an
 * object's overloaded "", 0+ or bool. If that code dies, perl longjmps, and
 * a longjmp must never cross Rust frames (their destructors would not run:
 * sessions, threads and buffers leaked, locks held). So each read of a value
 * that has such magic runs inside call_sv(G_EVAL) of a tiny XSUB; a die is
 * caught there and kept as this thread's pending error, the read answers a
 * neutral value, and Rust turns the pending error into an Err
 * (lugh_take_error). Plain values are read directly, at no extra cost. */

#if defined(_MSC_VER)
#  define LUGH_THREAD_LOCAL __declspec(thread)
#else
#  define LUGH_THREAD_LOCAL __thread
#endif
/* One interpreter runs on one OS thread at a time, so per thread is per interpreter. */
static LUGH_THREAD_LOCAL SV *lugh_pending_error;

enum lugh_read_op { LUGH_OK, LUGH_TRUE, LUGH_IV, LUGH_NV, LUGH_NUMBER_KIND, LUGH_PV, LUGH_REF_KIND,
    LUGH_AV_COUNT, LUGH_AV_FETCH, LUGH_HV_PAIRS, LUGH_PAYLOAD };

typedef struct {
    int op;
    SV *sv;
    SSize_t index;
    IV iv;
    NV nv;
    SV *copy;       /* LUGH_PV, LUGH_AV_FETCH, LUGH_HV_PAIRS: a new SV owned by the caller */
    void *payload;  /* LUGH_PAYLOAD */
} lugh_read;

static MGVTBL lugh_object_vtbl;

/* Whether the last G_EVAL call died, without SvTRUE: $@ may be an object
 * whose bool overload dies, and nothing here may croak. call_sv clears $@
 * to "" on success. */
static int lugh_died(pTHX) {
    SV *e = ERRSV;
    STRLEN len;
    if (SvROK(e)) return 1;
    if (!SvOK(e)) return 0;
    (void)SvPV(e, len);
    return len > 0;
}

/* 0: not a number, 1: integer, 2: other number (perl's looks_like_number). */
static int lugh_number_kind_nomg(pTHX_ SV *sv) {
    int flags;
    if (SvIOK(sv) && !SvNOK(sv)) return 1;
    if (SvNOK(sv) && !SvPOK(sv)) return 2; /* a plain float: looks_like_number gives no NOT_INT flag */
    if (SvROK(sv) && !SvAMAGIC(sv)) return 0;
    flags = looks_like_number(sv);
    if (!flags) return 0;
    return (flags & IS_NUMBER_NOT_INT) ? 2 : 1;
}

static void lugh_read_run(pTHX_ lugh_read *r) {
    SV *sv = r->sv;
    switch (r->op) {
    case LUGH_OK: SvGETMAGIC(sv); r->iv = SvOK(sv) ? 1 : 0; break;
    case LUGH_TRUE: r->iv = SvTRUE(sv) ? 1 : 0; break;
    case LUGH_IV: r->iv = SvIV(sv); break;
    case LUGH_NV: r->nv = SvNV(sv); break;
    case LUGH_NUMBER_KIND: SvGETMAGIC(sv); r->iv = lugh_number_kind_nomg(aTHX_ sv); break;
    case LUGH_PV: {
        /* Copied: an overloaded "" returns a temporary freed with this scope. */
        STRLEN len;
        const char *pv = SvPV_const(sv, len);
        r->copy = newSVpvn_flags(pv, len, SvUTF8(sv) ? SVf_UTF8 : 0);
        break;
    }
    case LUGH_REF_KIND:
        SvGETMAGIC(sv);
        if (!SvROK(sv)) r->iv = 0;
        else switch (SvTYPE(SvRV(sv))) {
            case SVt_PVAV: r->iv = 'A'; break;
            case SVt_PVHV: r->iv = 'H'; break;
            case SVt_PVCV: r->iv = 'C'; break;
            default: r->iv = 'S';
        }
        break;
    case LUGH_AV_COUNT: r->iv = av_top_index((AV *)SvRV(sv)) + 1; break;
    case LUGH_AV_FETCH: {
        /* A tied array's element is a proxy whose FETCH runs on copying. */
        SV **slot = av_fetch((AV *)SvRV(sv), r->index, 0);
        r->copy = slot ? newSVsv(*slot) : newSV(0);
        break;
    }
    case LUGH_HV_PAIRS: {
        /* Copied into [key, value, ...]: a tied hash's FETCH runs here, guarded. */
        HV *hv = (HV *)SvRV(sv);
        AV *pairs = newAV();
        HE *he;
        r->copy = newRV_noinc((SV *)pairs);
        hv_iterinit(hv);
        while ((he = hv_iternext(hv))) {
            av_push(pairs, newSVsv(hv_iterkeysv(he)));
            av_push(pairs, newSVsv(hv_iterval(hv, he)));
        }
        break;
    }
    case LUGH_PAYLOAD: {
        MAGIC *mg;
        SvGETMAGIC(sv);
        if (!SvROK(sv) || SvTYPE(SvRV(sv)) != SVt_PVHV) break;
        mg = mg_findext(SvRV(sv), PERL_MAGIC_ext, &lugh_object_vtbl);
        if (mg) r->payload = (void *)mg->mg_ptr;
        break;
    }
    }
}

/* Whether reading sv may run perl code. */
static int lugh_read_may_die(pTHX_ lugh_read *r) {
    SV *sv = r->sv;
    if (SvGMAGICAL(sv) || SvAMAGIC(sv)) return 1;
    if ((r->op == LUGH_AV_COUNT || r->op == LUGH_AV_FETCH || r->op == LUGH_HV_PAIRS) && SvRMAGICAL(SvRV(sv)))
        return 1;
    return 0;
}

/* The XSUB the guard calls: its only argument is the address of a lugh_read. */
static void lugh_guard_xsub(pTHX_ CV *cv) {
    dXSARGS;
    PERL_UNUSED_VAR(cv);
    if (items == 1) lugh_read_run(aTHX_ INT2PTR(lugh_read *, SvIV(ST(0))));
    XSRETURN_EMPTY;
}

static void lugh_read_guarded(pTHX_ lugh_read *r) {
    CV *guard;
    r->iv = 0;
    r->nv = 0;
    r->copy = NULL;
    r->payload = NULL;
    if (!lugh_read_may_die(aTHX_ r)) {
        lugh_read_run(aTHX_ r);
        return;
    }
    /* After one read has died, run no more perl code in this call. */
    if (lugh_pending_error) return;
    guard = get_cv("Lugh::_read_guard", 0);
    if (!guard) return;
    {
        dSP;
        ENTER;
        SAVETMPS;
        save_scalar(PL_errgv); /* the caller's $@ is left as it was */
        PUSHMARK(SP);
        XPUSHs(sv_2mortal(newSViv(PTR2IV(r))));
        PUTBACK;
        call_sv((SV *)guard, G_DISCARD | G_EVAL);
        if (lugh_died(aTHX)) {
            lugh_pending_error = newSVsv(ERRSV);
            if (r->copy) SvREFCNT_dec(r->copy);
            r->copy = NULL;
            r->iv = 0;
            r->nv = 0;
            r->payload = NULL;
        }
        FREETMPS;
        LEAVE;
    }
}

static lugh_read lugh_read_of(pTHX_ int op, SV *sv) {
    lugh_read r;
    r.op = op;
    r.sv = sv;
    r.index = 0;
    lugh_read_guarded(aTHX_ &r);
    return r;
}

/* The error a guarded read (or anything since the last call) caught, as a
 * mortal, or NULL; the slot is emptied. */
SV *lugh_take_error(void *my_perl_v) {
    LUGH_CTX;
    SV *e = lugh_pending_error;
    lugh_pending_error = NULL;
    return e ? sv_2mortal(e) : NULL;
}

/* Puts back an error taken earlier (a nested call keeps its caller's). */
void lugh_restore_error(void *my_perl_v, SV *err) {
    LUGH_CTX;
    if (lugh_pending_error) SvREFCNT_dec(lugh_pending_error);
    lugh_pending_error = err ? SvREFCNT_inc_simple_NN(err) : NULL;
}

int lugh_sv_ok(void *my_perl_v, SV *sv) { LUGH_CTX; return (int)lugh_read_of(aTHX_ LUGH_OK, sv).iv; }
int lugh_sv_true(void *my_perl_v, SV *sv) { LUGH_CTX; return (int)lugh_read_of(aTHX_ LUGH_TRUE, sv).iv; }
IV lugh_sv_iv(void *my_perl_v, SV *sv) { LUGH_CTX; return lugh_read_of(aTHX_ LUGH_IV, sv).iv; }
NV lugh_sv_nv(void *my_perl_v, SV *sv) { LUGH_CTX; return lugh_read_of(aTHX_ LUGH_NV, sv).nv; }
int lugh_sv_number_kind(void *my_perl_v, SV *sv) { LUGH_CTX; return (int)lugh_read_of(aTHX_ LUGH_NUMBER_KIND, sv).iv; }
/* 0: not a reference, else 'A' array, 'H' hash, 'C' code, 'S' other. */
int lugh_sv_ref_kind(void *my_perl_v, SV *sv) { LUGH_CTX; return (int)lugh_read_of(aTHX_ LUGH_REF_KIND, sv).iv; }

/* The class a reference is blessed into, or NULL (call after lugh_sv_ref_kind,
 * which ran the value's get magic). */
const char *lugh_sv_blessed(void *my_perl_v, SV *sv) {
    LUGH_CTX;
    if (!SvROK(sv) || !SvOBJECT(SvRV(sv))) return NULL;
    return sv_reftype(SvRV(sv), 1);
}

/* The string's buffer; *is_utf8 says how to read it. For a value with magic
 * the buffer is a mortal copy, valid until the statement ends. */
const char *lugh_sv_pv(void *my_perl_v, SV *sv, STRLEN *len, int *is_utf8) {
    LUGH_CTX;
    lugh_read r;
    r.op = LUGH_PV;
    r.sv = sv;
    r.index = 0;
    if (!lugh_read_may_die(aTHX_ &r)) {
        const char *pv = SvPV_const(sv, *len);
        *is_utf8 = SvUTF8(sv) ? 1 : 0;
        return pv;
    }
    lugh_read_guarded(aTHX_ &r);
    if (!r.copy) {
        *len = 0;
        *is_utf8 = 0;
        return "";
    }
    sv_2mortal(r.copy);
    *is_utf8 = SvUTF8(r.copy) ? 1 : 0;
    return SvPV_const(r.copy, *len);
}

SSize_t lugh_av_count(void *my_perl_v, SV *rv) { LUGH_CTX; return (SSize_t)lugh_read_of(aTHX_ LUGH_AV_COUNT, rv).iv; }

/* A hash reference's keys and values as a mortal [key, value, ...] reference
 * (undef where reading it died). */
SV *lugh_hv_pairs(void *my_perl_v, SV *rv) {
    LUGH_CTX;
    lugh_read r = lugh_read_of(aTHX_ LUGH_HV_PAIRS, rv);
    return r.copy ? sv_2mortal(r.copy) : &PL_sv_undef;
}

SV *lugh_av_fetch(void *my_perl_v, SV *rv, SSize_t i) {
    LUGH_CTX;
    lugh_read r;
    r.op = LUGH_AV_FETCH;
    r.sv = rv;
    r.index = i;
    if (!lugh_read_may_die(aTHX_ &r)) {
        SV **slot = av_fetch((AV *)SvRV(rv), i, 0);
        return slot ? *slot : &PL_sv_undef;
    }
    lugh_read_guarded(aTHX_ &r);
    return r.copy ? sv_2mortal(r.copy) : &PL_sv_undef;
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
void *lugh_object_payload(void *my_perl_v, SV *sv) { LUGH_CTX; return lugh_read_of(aTHX_ LUGH_PAYLOAD, sv).payload; }

/* ---------- errors ---------- */

/* Dies with msg through Lugh::_croak, which appends the location of the
 * first caller outside Lugh's own packages. Never returns. */
void lugh_croak_msg(void *my_perl_v, SV *msg) {
    LUGH_CTX;
    dSP;
    lugh_signals_leave();
    ENTER;
    PUSHMARK(SP);
    XPUSHs(msg);
    PUTBACK;
    call_pv("Lugh::_croak", G_DISCARD);
    LEAVE;
    croak_sv(msg); /* not reached: Lugh::_croak dies */
}

/* Rethrows a value exactly as it was thrown (an exception object stays one). */
void lugh_croak_sv(void *my_perl_v, SV *err) { LUGH_CTX; lugh_signals_leave(); croak_sv(err); }

/* ---------- callbacks ---------- */

/* Calls cb in scalar context under G_EVAL. Returns a new (owned) copy of the
 * result, or NULL with *err set to an owned copy of $@ when cb died. */
SV *lugh_call_sv(void *my_perl_v, SV *cb, SV **args, int n, SV **err) {
    LUGH_CTX;
    dSP;
    SV *ret = NULL;
    int count, i;
#if PERL_REVISION == 5 && PERL_VERSION >= 24
    PERL_CONTEXT *fence;
#endif
    ENTER;
    SAVETMPS;
#if PERL_REVISION == 5 && PERL_VERSION >= 24
    /* A null block, as sort {} pushes: last/next/redo in the callback stop
     * here (perl dies "Can't \"last\" outside a loop block", caught by the
     * eval below) instead of unwinding through the Rust frames to a loop of
     * the caller. */
    fence = cx_pushblock(CXt_NULL, G_SCALAR, SP, PL_savestack_ix);
#endif
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
#if PERL_REVISION == 5 && PERL_VERSION >= 24
    cx_popblock(fence);
    CX_POP(fence);
#endif
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
