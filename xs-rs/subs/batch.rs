//! XS subs of Lugh::Batch: many requests at once on one Lugh::Inference
//! (see [`crate::engine::generate::batch`]). The options of new and add are
//! declared here (tables of [`Opt`]); add takes generate's tuning and
//! sampling options. Lugh/Batch.pm calls the per-request callbacks.
use super::generate_options::{GenerateArgs, GENERATE_CALL_OPTIONS, GENERATE_OPTIONS};
use super::inference::{logprob_entry, CLASS as INFERENCE_CLASS};
use super::sampling_options::SAMPLING_OPTIONS;
use crate::engine::generate::batch::{Batch, BatchEvent, BatchOptions, BatchRequest, SeqId, MAX_SLOTS};
use crate::engine::generate::inference::Inference;
use crate::engine::Error;
use crate::glue::{names, new_object, object_arc, set, Args, Given, Opt, Perl, Ret, Sv, XsError};
use crate::xs_subs;
use std::sync::{Arc, Mutex, MutexGuard};

pub const CLASS: &str = "Lugh::Batch";

/// The Perl object: the scheduler (stepped by one call at a time) and its
/// session.
pub struct BatchHandle {
    batch: Mutex<Batch>,
    inference: Arc<Inference>,
}

impl BatchHandle {
    fn lock(&self) -> MutexGuard<'_, Batch> {
        // a panic in a step is reported as an error; the slots stay usable
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn this(args: &Args) -> Result<Arc<BatchHandle>, Error> {
    object_arc::<BatchHandle>(args.perl(), args.get(0), CLASS)
}

/// The most requests a batch queues by default.
const DEFAULT_MAX_QUEUED: usize = 1024;

/// The options of new (defaults: [`BatchOptions`], max_queued 1024).
const NEW_OPTIONS: &[Opt<BatchOptions>] = &[
    Opt::<BatchOptions>::new("slots", |perl, sv, o| {
        set(&mut o.n_slots, perl.ranged_arg(sv, "slots", 1, MAX_SLOTS as i64))
    })
    .with_aliases(&["n_slots", "parallel"]),
    Opt::new("max_queued", |perl, sv, o| set(&mut o.max_queued, perl.ranged_arg(sv, "max_queued", 0, i32::MAX as i64))),
    Opt::new("deterministic", |perl, sv, o| set(&mut o.deterministic, perl.bool_arg(sv, "deterministic"))),
];

/// add's own option besides generate's: whether the prompt may start from
/// cells a slot holds (llama-server's cache_prompt).
const ADD_OPTIONS: &[Opt<bool>] =
    &[Opt::new("cache_prompt", |perl, sv, cache| set(cache, perl.bool_arg(sv, "cache_prompt")))];

/// The names add takes: prompt, generate's tuning options but progress (a
/// batch evaluates prompts in its steps), the sampling options, its own.
fn add_names() -> Vec<(&'static str, &'static [&'static str])> {
    names(GENERATE_CALL_OPTIONS)
        .filter(|(n, _)| *n == "prompt")
        .chain(names(GENERATE_OPTIONS).filter(|(n, _)| *n != "progress"))
        .chain(names(SAMPLING_OPTIONS))
        .chain(names(ADD_OPTIONS))
        .collect()
}

/// One event as the .pm reads it: [token, id, token_id, text, logprob],
/// [done, id, reason, text, prompt_tokens, cached_tokens, completion_tokens]
/// or [error, id, message].
fn event(perl: Perl, e: &BatchEvent) -> Sv {
    let id = |seq: SeqId| perl.uint(seq);
    let row = match e {
        BatchEvent::Token { seq, id: token, text, logprob } => vec![
            perl.str("token"),
            id(*seq),
            perl.int(*token as i64),
            perl.str(text),
            logprob.as_ref().map_or_else(|| perl.undef(), |lp| logprob_entry(perl, lp)),
        ],
        BatchEvent::Done { seq, reason, text, usage } => vec![
            perl.str("done"),
            id(*seq),
            perl.str(reason.name()),
            perl.str(text),
            perl.int(usage.prompt_tokens as i64),
            perl.int(usage.cached_tokens as i64),
            perl.int(usage.completion_tokens as i64),
        ],
        BatchEvent::Failed { seq, error } => vec![perl.str("error"), id(*seq), perl.str(error)],
    };
    perl.array_ref(&row)
}

fn seq_arg(perl: Perl, sv: Sv) -> Result<SeqId, Error> {
    perl.ranged_arg(sv, "request id", 1, i64::MAX).map(|n| n as SeqId)
}

xs_subs! { "Lugh::Batch";
    fn new(args) as "Lugh::Batch->new" {
        if args.len() < 2 {
            return Err(XsError::Message("Usage: Lugh::Batch->new($inference, slots => N, ...)".into()));
        }
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let inference = object_arc::<Inference>(perl, args.get(1), INFERENCE_CLASS).map_err(|_| {
            Error::Argument(format!("the first argument must be a {INFERENCE_CLASS} object (got {})", perl.describe(args.get(1))))
        })?;
        let mut options = BatchOptions { max_queued: DEFAULT_MAX_QUEUED, ..BatchOptions::default() };
        Given::read_into(perl, &args.rest(2), NEW_OPTIONS, &mut options)?;
        let batch = Batch::new(inference.clone(), options)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(BatchHandle { batch: Mutex::new(batch), inference }))))
    }

    fn _add(args) as "Lugh::Batch->add" {
        let b = this(args)?;
        let perl = args.perl();
        let n_vocab = b.inference.runner.n_vocab();
        let mut call = GenerateArgs::new(n_vocab);
        let given = Given::read(perl, &args.rest(1), &add_names())?;
        given.apply(perl, GENERATE_CALL_OPTIONS, &mut call)?;
        given.apply(perl, GENERATE_OPTIONS, &mut call)?;
        given.apply(perl, SAMPLING_OPTIONS, &mut call.options.sampler)?;
        let mut cache_prompt = true;
        given.apply(perl, ADD_OPTIONS, &mut cache_prompt)?;
        let tokens = call.prompt.ok_or_else(|| Error::Argument("missing prompt (a text or an array of token ids)".into()))?;
        let seq = b.lock().add(BatchRequest { tokens, options: call.options, cache_prompt })?;
        Ok(Ret::One(perl.uint(seq)))
    }

    fn _step(args) as "Lugh::Batch->step" {
        args.expect(1, 1, "self")?;
        let b = this(args)?;
        let perl = args.perl();
        let events = b.lock().step()?;
        Ok(Ret::List(events.iter().map(|e| event(perl, e)).collect()))
    }

    fn _cancel(args) as "Lugh::Batch->cancel" {
        args.expect(2, 2, "self, id")?;
        let b = this(args)?;
        let perl = args.perl();
        let seq = seq_arg(perl, args.get(1))?;
        let done = b.lock().cancel(seq);
        Ok(Ret::One(done.map_or_else(|| perl.undef(), |e| event(perl, &e))))
    }

    fn active(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.lock().active() as i64)))
    }

    fn queued(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.lock().queued() as i64)))
    }

    fn is_idle(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(i64::from(this(args)?.lock().is_idle()))))
    }

    fn slots(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.lock().options().n_slots as i64)))
    }

    fn deterministic(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(i64::from(this(args)?.lock().options().deterministic))))
    }

    fn inference(args) {
        args.expect(1, 1, "self")?;
        let b = this(args)?;
        Ok(Ret::One(new_object(args.perl(), INFERENCE_CLASS, b.inference.clone())))
    }
}
