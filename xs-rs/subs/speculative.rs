//! XS subs of Lugh::Speculative. The options of new and generate are
//! declared here, once (tables of [`Opt`]); the sampling options are
//! Lugh::Inference's, less the penalties.
use super::grammar::grammar_arg;
use super::inference::CLASS as INFERENCE_CLASS;
use super::sampling_options::SAMPLING_OPTIONS;
use crate::engine::generate::grammar::Grammar;
use crate::engine::generate::inference::Inference;
use crate::engine::generate::ngram::NgramOptions;
use crate::engine::generate::speculative::{check_k, Draft, SpecOptions, Speculative, MAX_K};
use crate::engine::Error;
use crate::glue::{
    accessor_names, call_callback_truth, names, new_object, object_arc, read_accessor, set, Accessor, Args, Given, Opt,
    Perl, Ret, Sv, XsError,
};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Speculative";

fn this(args: &Args) -> Result<Arc<Speculative>, Error> {
    object_arc::<Speculative>(args.perl(), args.get(0), CLASS)
}

/// The settings and the statistics: one accessor method each.
const ACCESSORS: &[Accessor<Speculative>] = &[
    Accessor { name: "k", read: |s, perl| Ok(perl.int(s.options().k as i64)) },
    Accessor { name: "temperature", read: |s, perl| Ok(perl.float(f64::from(temperature(s.options())))) },
    Accessor { name: "top_p", read: |s, perl| Ok(perl.float(f64::from(s.options().sampler.top_p))) },
    Accessor { name: "top_k", read: |s, perl| Ok(perl.int(s.options().sampler.top_k as i64)) },
    Accessor { name: "min_p", read: |s, perl| Ok(perl.float(f64::from(s.options().sampler.min_p))) },
    Accessor { name: "n_vocab", read: |s, perl| Ok(perl.int(s.n_vocab() as i64)) },
    Accessor { name: "draft_type", read: |s, perl| Ok(perl.str(s.draft_kind())) },
    Accessor { name: "exact", read: |s, perl| Ok(perl.int(i64::from(s.options().exact))) },
    Accessor { name: "acceptance_rate", read: |s, perl| Ok(perl.float(s.stats().acceptance_rate())) },
    Accessor { name: "tokens_drafted", read: |s, perl| Ok(perl.uint(s.stats().drafted)) },
    Accessor { name: "tokens_accepted", read: |s, perl| Ok(perl.uint(s.stats().accepted)) },
    Accessor { name: "total_steps", read: |s, perl| Ok(perl.uint(s.stats().steps)) },
];

/// The temperature the distributions use: 0 when greedy.
fn temperature(o: &SpecOptions) -> f32 {
    if o.sampler.greedy {
        0.0
    } else {
        o.sampler.temperature
    }
}

/// The sampling options Lugh::Speculative takes (Lugh::Inference's
/// penalties and DRY would depend on each verified row's own history, XTC
/// is random and mirostat carries a state from token to token).
const SAMPLING: &[&str] =
    &["greedy", "temperature", "top_k", "top_p", "min_p", "typical_p", "top_n_sigma", "logit_bias", "samplers", "seed"];

/// What new() is given.
#[derive(Default)]
struct NewArgs {
    main: Option<Arc<Inference>>,
    draft: Option<Option<Arc<Inference>>>,
    k: Option<usize>,
    ngram_min: Option<usize>,
    ngram_max: Option<usize>,
    exact: Option<bool>,
}

/// A Lugh::Inference argument, or an error saying it must be one.
fn session_arg(perl: Perl, sv: Sv, what: &str, or: &str) -> Result<Arc<Inference>, Error> {
    object_arc::<Inference>(perl, sv, INFERENCE_CLASS).map_err(|e| match e {
        Error::Argument(_) => {
            Error::Argument(format!("{what} must be a {INFERENCE_CLASS} object{or} (got {})", perl.describe(sv)))
        }
        other => other,
    })
}

/// The options of Lugh::Speculative->new besides the sampling ones.
const NEW_OPTIONS: &[Opt<NewArgs>] = &[
    Opt::<NewArgs>::new("inference", |perl, sv, a| set(&mut a.main, session_arg(perl, sv, "inference", "").map(Some)))
        .with_aliases(&["main"]),
    Opt::<NewArgs>::new("draft", |perl, sv, a| {
        if perl.ref_kind(sv) == 0 && perl.string_arg(sv, "draft")? == "ngram" {
            a.draft = Some(None);
            return Ok(());
        }
        set(&mut a.draft, session_arg(perl, sv, "draft", " or 'ngram'").map(|s| Some(Some(s))))
    })
    .with_aliases(&["draft_inference"]),
    Opt::<NewArgs>::new("k", |perl, sv, a| set(&mut a.k, perl.int_arg(sv, "k").and_then(check_k).map(Some)))
        .with_aliases(&["depth"]),
    Opt::new("ngram_min", |perl, sv, a| {
        set(&mut a.ngram_min, perl.ranged_arg(sv, "ngram_min", 1, i32::MAX as i64).map(Some))
    }),
    Opt::new("ngram_max", |perl, sv, a| {
        set(&mut a.ngram_max, perl.ranged_arg(sv, "ngram_max", 1, i32::MAX as i64).map(Some))
    }),
    Opt::new("exact", |perl, sv, a| set(&mut a.exact, perl.bool_arg(sv, "exact").map(Some))),
    Opt::new("grammar", |_, _, _| {
        // step, draft_tokens and verify_tokens judge any context: a grammar
        // has a state only along one generation
        Err(Error::Argument(
            "grammar is an option of generate (Lugh::Speculative->generate(\\@prompt, grammar => ...)), not of new"
                .into(),
        ))
    }),
];

/// What generate() is given besides the prompt.
struct GenerateArgs {
    max_tokens: usize,
    seed: Option<u64>,
    callback: Option<Sv>,
    grammar: Option<Arc<Grammar>>,
}

/// The default max_tokens of generate (Lugh 0.12's).
const DEFAULT_MAX_TOKENS: usize = 256;

const GENERATE_OPTIONS: &[Opt<GenerateArgs>] = &[
    Opt::new("max_tokens", |perl, sv, a| set(&mut a.max_tokens, max_tokens_arg(perl, sv))),
    Opt::new("seed", |perl, sv, a| set(&mut a.seed, perl.ranged_arg(sv, "seed", 0, i64::MAX).map(|v| Some(v as u64)))),
    Opt::new("callback", |perl, sv, a| set(&mut a.callback, perl.code_arg(sv, "callback"))),
    Opt::new("grammar", |perl, sv, a| set(&mut a.grammar, grammar_arg(perl, sv).map(Some))),
];

fn max_tokens_arg(perl: Perl, sv: Sv) -> Result<usize, Error> {
    perl.ranged_arg(sv, "max_tokens", 0, i32::MAX as i64)
}

/// The valid names of new(): its own and the sampling ones it takes.
fn new_names() -> Vec<(&'static str, &'static [&'static str])> {
    names(NEW_OPTIONS).chain(names(SAMPLING_OPTIONS).filter(|(n, _)| SAMPLING.contains(n))).collect()
}

fn tokens_arg(perl: Perl, s: &Speculative, sv: Sv, what: &str) -> Result<Vec<i32>, Error> {
    perl.token_array_arg(sv, what, s.n_vocab())
}

fn ids(perl: Perl, tokens: &[i32]) -> Ret {
    Ret::One(perl.int_array_ref(&tokens.iter().map(|&t| t as i64).collect::<Vec<_>>()))
}

xs_subs! { "Lugh::Speculative";
    fn new(args) as "Lugh::Speculative->new" {
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let given = Given::read(perl, &args.rest(1), &new_names())?;
        let mut new = NewArgs::default();
        given.apply(perl, NEW_OPTIONS, &mut new)?;
        let mut options = SpecOptions::default();
        given.apply(perl, SAMPLING_OPTIONS, &mut options.sampler)?;
        let main = new
            .main
            .ok_or_else(|| Error::Argument("requires inference => $main (the Lugh::Inference to speed up)".into()))?;
        let draft = new.draft.ok_or_else(|| {
            Error::Argument(
                "requires draft => $draft (a Lugh::Inference of a smaller model with the same vocabulary, or \
                 'ngram' for prompt lookup)"
                    .into(),
            )
        })?;
        options.k = new.k.unwrap_or(options.k);
        options.exact = new.exact.unwrap_or(options.exact);
        let draft = match draft {
            Some(session) => {
                if new.ngram_min.is_some() || new.ngram_max.is_some() {
                    return Err(Error::Argument("ngram_min and ngram_max are for draft => 'ngram'".into()).into());
                }
                Draft::Model(session)
            }
            None => {
                let d = NgramOptions::default();
                let min = new.ngram_min.unwrap_or(d.min);
                // a minimum above the default maximum raises the maximum with it
                Draft::Ngram(NgramOptions { min, max: new.ngram_max.unwrap_or(d.max.max(min)) })
            }
        };
        let spec = Speculative::new(main, draft, options)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(spec))))
    }

    fn _accessor_names(args) {
        accessor_names(args, ACCESSORS)
    }

    fn _accessor(args) {
        read_accessor(args, CLASS, ACCESSORS)
    }

    fn generate(args) as "Lugh::Speculative->generate" {
        if args.len() < 2 {
            return Err(XsError::Message(
                "Usage: $speculative->generate(\\@prompt, $max_tokens) or ->generate(\\@prompt, name => value, ...)"
                    .into(),
            ));
        }
        let s = this(args)?;
        let perl = args.perl();
        let prompt = tokens_arg(perl, &s, args.get(1), "prompt")?;
        let mut call = GenerateArgs { max_tokens: DEFAULT_MAX_TOKENS, seed: None, callback: None, grammar: None };
        // ($prompt, $max_tokens) as in Lugh 0.12, or name => value pairs
        if args.len() == 3 {
            if perl.is_defined(args.get(2)) {
                call.max_tokens = max_tokens_arg(perl, args.get(2))?;
            }
        } else {
            let given = Given::read(perl, &args.rest(2), &names(GENERATE_OPTIONS).collect::<Vec<_>>())?;
            given.apply(perl, GENERATE_OPTIONS, &mut call)?;
        }
        let callback = call.callback;
        let on_token = |id: i32, count: usize| -> Result<bool, XsError> {
            // pending %SIG handlers run after every token
            perl.despatch_signals().map_err(XsError::Perl)?;
            match callback {
                Some(cb) => call_callback_truth(perl, cb, &[perl.int(id as i64), perl.int(count as i64)])
                    .map_err(XsError::Perl),
                None => Ok(false),
            }
        };
        let (tokens, _) = s.generate(&prompt, call.max_tokens, call.seed, call.grammar.as_ref(), on_token)?;
        Ok(ids(perl, &tokens))
    }

    fn step(args) as "Lugh::Speculative->step" {
        args.expect(2, 2, "self, \\@tokens")?;
        let s = this(args)?;
        let perl = args.perl();
        let context = tokens_arg(perl, &s, args.get(1), "tokens")?;
        Ok(ids(perl, &s.step(&context)?))
    }

    fn draft_tokens(args) as "Lugh::Speculative->draft_tokens" {
        args.expect(2, 3, "self, \\@tokens, $n_draft")?;
        let s = this(args)?;
        let perl = args.perl();
        let context = tokens_arg(perl, &s, args.get(1), "tokens")?;
        let n = match args.len() {
            3 if perl.is_defined(args.get(2)) => perl.ranged_arg(args.get(2), "n_draft", 0, MAX_K as i64)?,
            _ => s.options().k,
        };
        Ok(ids(perl, &s.draft_tokens(&context, n)?))
    }

    fn verify_tokens(args) as "Lugh::Speculative->verify_tokens" {
        args.expect(3, 3, "self, \\@tokens, \\@draft")?;
        let s = this(args)?;
        let perl = args.perl();
        let context = tokens_arg(perl, &s, args.get(1), "tokens")?;
        let proposal = tokens_arg(perl, &s, args.get(2), "draft")?;
        Ok(ids(perl, &s.verify_tokens(&context, &proposal)?))
    }

    fn init_caches(args) as "Lugh::Speculative->init_caches" {
        args.expect(1, 1, "self")?;
        this(args)?.init_caches()?;
        Ok(Ret::One(args.perl().int(1)))
    }

    fn reset(args) as "Lugh::Speculative->reset" {
        args.expect(1, 1, "self")?;
        this(args)?.reset()?;
        Ok(Ret::One(args.perl().int(1)))
    }

    fn reset_stats(args) as "Lugh::Speculative->reset_stats" {
        args.expect(1, 1, "self")?;
        this(args)?.reset_stats();
        Ok(Ret::One(args.perl().int(1)))
    }
}
