//! XS subs of Lugh::Inference. Option names, defaults and the many spellings
//! of forward live in Lugh/Inference.pm; these subs take typed positional
//! arguments (undef = not given).
use crate::engine::generate::{GenerateOptions, Step, TokenLogprob};
use crate::engine::inference::{FlashAttn, Inference, InferenceOptions, Output, MAX_CTX, MAX_THREADS};
use crate::engine::logits::Logits;
use crate::engine::model::Model;
use crate::engine::sampler::{Sampler, SamplerOptions};
use crate::engine::session::{CacheHandle, PoolHandle, Session};
use crate::engine::Error;
use crate::glue::{as_method, call_callback, new_object, object_arc, Args, Perl, Ret, Sv, XsError};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Inference";
pub const CACHE_CLASS: &str = "Lugh::KVCache";
pub const POOL_CLASS: &str = "Lugh::MemoryPool";
use super::logits::CLASS as LOGITS_CLASS;

fn this(args: &Args) -> Result<Arc<Session>, Error> {
    object_arc::<Session>(args.perl(), args.get(0), CLASS)
}

/// The session's settings and the model hyperparameters it runs with: each
/// becomes an accessor method of Lugh::Inference (the .pm makes one per name).
type Setting = (&'static str, fn(&Inference, Perl) -> Sv);
const SETTINGS: &[Setting] = &[
    ("backend", |e, perl| perl.str(e.backend_name())),
    ("n_threads", |e, perl| perl.int(e.n_threads() as i64)),
    ("n_ctx", |e, perl| perl.int(e.n_ctx() as i64)),
    ("n_batch", |e, perl| perl.int(e.n_batch() as i64)),
    ("flash_attn", |e, perl| perl.int(e.flash_attn() as i64)),
    ("n_vocab", |e, perl| perl.int(e.hparams().n_vocab as i64)),
    ("n_layer", |e, perl| perl.int(e.hparams().n_layer as i64)),
    ("n_embd", |e, perl| perl.int(e.hparams().n_embd as i64)),
    ("n_head", |e, perl| perl.int(e.hparams().n_head as i64)),
    ("n_head_kv", |e, perl| perl.int(e.hparams().n_head_kv as i64)),
    ("head_dim", |e, perl| perl.int(e.hparams().head_dim_k as i64)),
    ("n_ff", |e, perl| perl.int(e.hparams().n_ff as i64)),
    ("n_rot", |e, perl| perl.int(e.hparams().n_rot as i64)),
    ("n_ctx_train", |e, perl| perl.int(e.hparams().n_ctx_train as i64)),
    ("rope_freq_base", |e, perl| perl.float(f64::from(e.hparams().rope_freq_base))),
    ("norm_eps", |e, perl| perl.float(f64::from(e.hparams().norm_eps))),
    ("architecture", |e, perl| perl.str(e.architecture())),
];

/// `f(sv)` for a defined argument, None for undef.
fn optional<T>(perl: Perl, sv: Sv, f: impl FnOnce(Sv) -> Result<T, Error>) -> Result<Option<T>, Error> {
    if perl.is_defined(sv) {
        f(sv).map(Some)
    } else {
        Ok(None)
    }
}

fn count_arg(perl: Perl, sv: Sv, what: &str, min: i64) -> Result<usize, Error> {
    let v = perl.int_arg(sv, what)?;
    if v < min {
        return Err(Error::Argument(format!("{what} must be an integer >= {min}, got {v}")));
    }
    Ok(v as usize)
}

/// An integer in `min..=max`, checked before any cast.
fn ranged_arg(perl: Perl, sv: Sv, what: &str, min: i64, max: i64) -> Result<usize, Error> {
    let v = perl.int_arg(sv, what)?;
    if v < min {
        return Err(Error::Argument(format!("{what} must be an integer >= {min}, got {v}")));
    }
    if v > max {
        return Err(Error::Argument(format!("{what} must be an integer <= {max}, got {v}")));
    }
    Ok(v as usize)
}

fn cache_arg(perl: Perl, sv: Sv) -> Result<Option<Arc<CacheHandle>>, Error> {
    optional(perl, sv, |sv| object_arc::<CacheHandle>(perl, sv, CACHE_CLASS))
}

fn pool_arg(perl: Perl, sv: Sv) -> Result<Option<Arc<PoolHandle>>, Error> {
    optional(perl, sv, |sv| object_arc::<PoolHandle>(perl, sv, POOL_CLASS))
}

/// The ten sampler arguments starting at `first`: greedy, temperature, top_k,
/// top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty,
/// penalty_last_n, seed.
fn sampler_options(args: &Args, first: usize) -> Result<SamplerOptions, Error> {
    let perl = args.perl();
    let arg = |i: usize| args.get(first + i);
    let number = |i: usize, what: &str| perl.number_arg(arg(i), what).map(|v| v as f32);
    Ok(SamplerOptions {
        greedy: perl.is_true(arg(0)),
        temperature: number(1, "temperature")?,
        top_k: count_arg(perl, arg(2), "top_k", 0)?,
        top_p: number(3, "top_p")?,
        min_p: number(4, "min_p")?,
        repeat_penalty: number(5, "repeat_penalty")?,
        presence_penalty: number(6, "presence_penalty")?,
        frequency_penalty: number(7, "frequency_penalty")?,
        penalty_last_n: count_arg(perl, arg(8), "penalty_last_n", 0)?,
        seed: optional(perl, arg(9), |sv| count_arg(perl, sv, "seed", 0).map(|s| s as u64))?,
    })
}

/// Several rows of logits, as an array of arrays or of Lugh::Logits objects.
fn rows(perl: Perl, rows: Vec<Vec<f32>>, as_object: bool) -> Sv {
    let outer: Vec<Sv> =
        rows.into_iter().map(|r| if as_object { logits_object(perl, r) } else { perl.float_array_ref(&r) }).collect();
    perl.array_ref(&outer)
}

/// [id, logprob, [[id, logprob], ...]] for one generated token.
fn logprob_entry(perl: Perl, lp: &TokenLogprob) -> Sv {
    let pair = |id: i32, v: f32| perl.array_ref(&[perl.int(id as i64), perl.float(f64::from(v))]);
    let top: Vec<Sv> = lp.top.iter().map(|&(id, v)| pair(id, v)).collect();
    perl.array_ref(&[perl.int(lp.id as i64), perl.float(f64::from(lp.logprob)), perl.array_ref(&top)])
}

fn logits_object(perl: Perl, values: Vec<f32>) -> Sv {
    new_object(perl, LOGITS_CLASS, Arc::new(Logits::new(values)))
}

xs_subs! { "Lugh::Inference";
    fn _new(args) as "Lugh::Inference->new" {
        args.expect(7, 7, "class, model, backend, n_threads, n_ctx, flash_attn, n_batch")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        if !perl.is_defined(args.get(1)) {
            return Err(Error::Argument("missing model => $model (a Lugh::Model)".into()).into());
        }
        let model = object_arc::<Model>(perl, args.get(1), "Lugh::Model")?;
        let flash_attn = optional(perl, args.get(5), |sv| match perl.int_arg(sv, "flash_attn")? {
            -1 => Ok(FlashAttn::Auto),
            0 => Ok(FlashAttn::Disabled),
            1 => Ok(FlashAttn::Enabled),
            other => Err(Error::Argument(format!("flash_attn must be 0, 1 or 'auto', got {other}"))),
        })?;
        let options = InferenceOptions {
            backend: optional(perl, args.get(2), |sv| perl.string_arg(sv, "backend"))?,
            n_threads: optional(perl, args.get(3), |sv| ranged_arg(perl, sv, "n_threads", 1, MAX_THREADS as i64))?,
            n_ctx: optional(perl, args.get(4), |sv| ranged_arg(perl, sv, "n_ctx", 1, MAX_CTX as i64))?,
            flash_attn,
            n_batch: optional(perl, args.get(6), |sv| ranged_arg(perl, sv, "n_batch", 1, MAX_CTX as i64))?,
        };
        let session = Session::new(model, options)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(session))))
    }

    fn _setting_names(args) {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        Ok(Ret::List(SETTINGS.iter().map(|(name, _)| perl.str(name)).collect()))
    }

    fn _setting(args) {
        args.expect(2, 2, "self, name")?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(1), "setting")?;
        as_method(&format!("{CLASS}->{name}"), || {
            let s = this(args)?;
            let (_, read) = SETTINGS
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| Error::Argument(format!("unknown setting '{name}'")))?;
            Ok(Ret::One(read(&s.engine, perl)))
        })
    }

    fn _weights_id(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.engine.weights_id() as u64)))
    }

    fn model(args) {
        args.expect(1, 1, "self")?;
        let s = this(args)?;
        Ok(Ret::One(new_object(args.perl(), "Lugh::Model", s.engine.model().clone())))
    }

    fn _forward(args) as "Lugh::Inference->forward" {
        args.expect(6, 6, "self, tokens, cache, pool, all, as_object")?;
        let s = this(args)?;
        let perl = args.perl();
        let tokens = perl.token_array_arg(args.get(1), "tokens", s.engine.n_vocab())?;
        let cache = cache_arg(perl, args.get(2))?;
        let pool = pool_arg(perl, args.get(3))?;
        let output = if perl.is_true(args.get(4)) { Output::All } else { Output::Last };
        let as_object = perl.is_true(args.get(5));
        let mut logits = s.forward(&tokens, cache.as_deref(), pool.as_deref(), output)?;
        Ok(match (output, as_object) {
            (Output::Last, false) => Ret::Floats(logits.pop().unwrap_or_default()),
            (Output::Last, true) => Ret::One(logits_object(perl, logits.pop().unwrap_or_default())),
            (Output::All, _) => Ret::One(rows(perl, logits, as_object)),
        })
    }

    fn _forward_batch(args) as "Lugh::Inference->forward_batch" {
        args.expect(5, 5, "self, sequences, caches, pool, as_object")?;
        let s = this(args)?;
        let perl = args.perl();
        let n_vocab = s.engine.n_vocab();
        let sequences = perl
            .array_arg(args.get(1), "sequences")?
            .into_iter()
            .enumerate()
            .map(|(i, seq)| perl.token_array_arg(seq, &format!("sequence {i}"), n_vocab))
            .collect::<Result<Vec<_>, _>>()?;
        let caches = optional(perl, args.get(2), |sv| {
            perl.array_arg(sv, "caches")?
                .into_iter()
                .map(|c| object_arc::<CacheHandle>(perl, c, CACHE_CLASS))
                .collect::<Result<Vec<_>, _>>()
        })?;
        let pool = pool_arg(perl, args.get(3))?;
        let logits = s.forward_batch(&sequences, caches.as_deref(), pool.as_deref())?;
        Ok(Ret::One(rows(perl, logits, perl.is_true(args.get(4)))))
    }

    fn _sample(args) as "Lugh::Inference->sample" {
        args.expect(13, 13, "self, logits, history, greedy, temperature, top_k, top_p, min_p, repeat_penalty, \
            presence_penalty, frequency_penalty, penalty_last_n, seed")?;
        let s = this(args)?;
        let perl = args.perl();
        // A Lugh::Logits object is read in place; an array is converted.
        let object = object_arc::<Logits>(perl, args.get(1), LOGITS_CLASS).ok();
        let list = match object {
            Some(_) => Vec::new(),
            None => perl.float_array_arg(args.get(1), "logits")?,
        };
        let logits = object.as_deref().map_or(list.as_slice(), Logits::values);
        let history = optional(perl, args.get(2), |sv| perl.token_array_arg(sv, "history", s.engine.n_vocab()))?;
        let mut sampler = Sampler::new(sampler_options(args, 3)?)?;
        let id = sampler.sample(logits, history.as_deref().unwrap_or(&[]))?;
        Ok(Ret::One(perl.int(id as i64)))
    }

    fn _generate(args) as "Lugh::Inference->generate" {
        args.expect(20, 20, "self, prompt, cache, max_tokens, eos_token, stop, callback, on_text, want_text, \
            logprobs, greedy, temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty, \
            frequency_penalty, penalty_last_n, seed")?;
        let s = this(args)?;
        let perl = args.perl();
        let n_vocab = s.engine.n_vocab();
        let prompt = perl.token_array_arg(args.get(1), "prompt", n_vocab)?;
        let cache = cache_arg(perl, args.get(2))?;
        let eos_token = optional(perl, args.get(4), |sv| {
            let id = perl.int_arg(sv, "eos_token")?;
            if id < 0 || id as u64 >= n_vocab as u64 {
                return Err(Error::Argument(format!("eos_token {id} is out of range [0, {n_vocab})")));
            }
            Ok(id as i32)
        })?;
        let stop = perl
            .array_arg(args.get(5), "stop")?
            .into_iter()
            .enumerate()
            .map(|(i, sv)| perl.string_arg(sv, &format!("stop string {i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let callback = perl.code_arg(args.get(6), "callback")?;
        let on_text = perl.code_arg(args.get(7), "on_text")?;
        let options = GenerateOptions {
            max_tokens: ranged_arg(perl, args.get(3), "max_tokens", 0, i32::MAX as i64)?,
            sampler: sampler_options(args, 10)?,
            eos_token,
            stop,
            need_text: on_text.is_some() || perl.is_true(args.get(8)),
            logprobs: optional(perl, args.get(9), |sv| ranged_arg(perl, sv, "logprobs", 0, n_vocab as i64))?,
        };
        // Each callback's result is already 1 or 0 (the .pm tests its truth
        // inside the call, under the eval).
        let call = |cb: Sv, args: &[Sv]| -> Result<bool, XsError> {
            call_callback(perl, cb, args).map(|ret| perl.is_true(ret)).map_err(XsError::Perl)
        };
        let on_token = |step: &Step| -> Result<bool, XsError> {
            let mut stop = false;
            if let Some(cb) = callback {
                stop |= call(cb, &[perl.int(step.id as i64), perl.int(step.count as i64)])?;
            }
            if let (Some(cb), false) = (on_text, step.text.is_empty()) {
                stop |= call(cb, &[perl.str(step.text)])?;
            }
            Ok(stop)
        };
        let on_end = |rest: &str| -> Result<(), XsError> {
            if let Some(cb) = on_text {
                call(cb, &[perl.str(rest)])?;
            }
            Ok(())
        };
        let g = s.generate(&prompt, cache.as_deref(), &options, on_token, on_end)?;
        let ids: Vec<i64> = g.tokens.iter().map(|&id| id as i64).collect();
        Ok(Ret::List(vec![
            perl.int_array_ref(&ids),
            perl.str(g.stop_reason.name()),
            perl.str(&g.text),
            perl.int(g.n_prompt as i64),
            perl.int(g.n_reused as i64),
            perl.int(g.n_evaluated as i64),
            perl.float(g.prompt_seconds),
            perl.float(g.generate_seconds),
            perl.array_ref(&g.logprobs.iter().map(|lp| logprob_entry(perl, lp)).collect::<Vec<_>>()),
        ]))
    }

    fn _profile(args) as "Lugh::Inference->profile" {
        args.expect(2, 2, "self, reset")?;
        let s = this(args)?;
        let perl = args.perl();
        let p = s.engine.profile(perl.is_true(args.get(1)));
        let mut out = vec![perl.str("steps"), perl.int(p.steps as i64)];
        for (phase, time, count) in p.entries() {
            out.push(perl.str(phase.name()));
            out.push(perl.array_ref(&[perl.float(time.as_secs_f64()), perl.int(count as i64)]));
        }
        Ok(Ret::List(out))
    }

    fn _create_kv_cache(args) as "Lugh::Inference->create_kv_cache" {
        args.expect(1, 1, "self")?;
        let s = this(args)?;
        Ok(Ret::One(new_object(args.perl(), CACHE_CLASS, Arc::new(s.new_cache()?))))
    }

    fn _create_memory_pool(args) as "Lugh::Inference->create_memory_pool" {
        args.expect(1, 1, "self")?;
        let s = this(args)?;
        Ok(Ret::One(new_object(args.perl(), POOL_CLASS, Arc::new(s.new_pool()?))))
    }
}
