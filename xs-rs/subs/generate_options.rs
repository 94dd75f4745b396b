//! The options of Lugh::Inference's generate(), besides the sampling ones
//! ([`super::sampling_options`]): one table each for a call's own options
//! and for those that tune generation (which Lugh::Chat passes on).
use super::grammar::{grammar_arg, json_schema_arg, response_format_arg};
use super::inference::cache_arg;
use super::lora::lora_arg;
use super::rope::rope_arg;
use crate::engine::generate::generation::GenerateOptions;
use crate::engine::generate::grammar::Grammar;
use crate::engine::generate::inference::CacheHandle;
use crate::engine::Error;
use crate::glue::{set, Opt, Sv};
use std::sync::Arc;

/// What generate() is given: the engine's options and the Perl-side ones.
pub(crate) struct GenerateArgs {
    pub(crate) n_vocab: usize,
    pub(crate) prompt: Option<Vec<i32>>,
    pub(crate) cache: Option<Arc<CacheHandle>>,
    /// The hash to fill with statistics (the .pm fills it).
    pub(crate) stats: Option<Sv>,
    pub(crate) callback: Option<Sv>,
    pub(crate) on_text: Option<Sv>,
    pub(crate) progress: Option<Sv>,
    pub(crate) options: GenerateOptions,
    /// The option that set `options.grammar` (grammar, json_schema or
    /// response_format: one at most).
    pub(crate) constraint: Option<&'static str>,
}

impl GenerateArgs {
    /// Nothing given yet, for a model of `n_vocab` tokens.
    pub(crate) fn new(n_vocab: usize) -> GenerateArgs {
        GenerateArgs {
            n_vocab,
            prompt: None,
            cache: None,
            stats: None,
            callback: None,
            on_text: None,
            progress: None,
            options: GenerateOptions::default(),
            constraint: None,
        }
    }
}

/// Sets the grammar that constrains generation (none: response_format
/// "text"), refusing a second one.
fn set_constraint(a: &mut GenerateArgs, option: &'static str, grammar: Option<Arc<Grammar>>) -> Result<(), Error> {
    let Some(grammar) = grammar else { return Ok(()) };
    if let Some(first) = a.constraint.filter(|&first| first != option) {
        return Err(Error::Argument(format!(
            "give one of grammar, json_schema and response_format, not both {first} and {option}"
        )));
    }
    a.constraint = Some(option);
    a.options.grammar = Some(grammar);
    Ok(())
}

/// The options of one call of generate(): its prompt, cache, callbacks and
/// the hash to fill (Lugh::Chat passes on all the others).
pub(crate) const GENERATE_CALL_OPTIONS: &[Opt<GenerateArgs>] = &[
    Opt::new("prompt", |perl, sv, a| set(&mut a.prompt, perl.token_array_arg(sv, "prompt", a.n_vocab).map(Some))),
    Opt::new("callback", |perl, sv, a| set(&mut a.callback, perl.code_arg(sv, "callback"))),
    Opt::new("on_text", |perl, sv, a| set(&mut a.on_text, perl.code_arg(sv, "on_text"))),
    Opt::new("cache", |perl, sv, a| set(&mut a.cache, cache_arg(perl, sv))),
    Opt::new("stats", |perl, sv, a| {
        if perl.ref_kind(sv) != b'H' {
            perl.check("stats")?;
            return Err(Error::Argument("stats must be a hash reference to fill, like stats => \\my %stats".into()));
        }
        a.stats = Some(sv);
        Ok(())
    }),
];

/// The options of generate() that tune it, besides [`SAMPLING_OPTIONS`]
/// (defaults: [`GenerateOptions`]).
pub(crate) const GENERATE_OPTIONS: &[Opt<GenerateArgs>] = &[
    Opt::new("rope", |perl, sv, a| set(&mut a.options.overrides.rope, rope_arg(perl, sv).map(|c| Some(c.request())))),
    Opt::new("lora", |perl, sv, a| set(&mut a.options.overrides.adapters, lora_arg(perl, sv))),
    Opt::new("max_tokens", |perl, sv, a| {
        set(&mut a.options.max_tokens, perl.ranged_arg(sv, "max_tokens", 0, i32::MAX as i64))
    }),
    Opt::new("eos_token", |perl, sv, a| {
        let id = perl.int_arg(sv, "eos_token")?;
        if id < 0 || id as u64 >= a.n_vocab as u64 {
            return Err(Error::Argument(format!("eos_token {id} is out of range [0, {})", a.n_vocab)));
        }
        a.options.eos_token = Some(id as i32);
        Ok(())
    }),
    Opt::new("stop", |perl, sv, a| {
        // One string, or an array of them.
        let strings = if perl.ref_kind(sv) == b'A' { perl.array_arg(sv, "stop")? } else { vec![sv] };
        a.options.stop = strings
            .into_iter()
            .enumerate()
            .map(|(i, sv)| perl.string_arg(sv, &format!("stop string {i}")))
            .collect::<Result<_, _>>()?;
        Ok(())
    }),
    Opt::new("progress", |perl, sv, a| set(&mut a.progress, perl.code_arg(sv, "progress"))),
    Opt::new("logprobs", |perl, sv, a| {
        set(&mut a.options.logprobs, perl.ranged_arg(sv, "logprobs", 0, a.n_vocab as i64).map(Some))
    }),
    Opt::new("grammar", |perl, sv, a| {
        let grammar = grammar_arg(perl, sv)?;
        set_constraint(a, "grammar", Some(grammar))
    }),
    // Lugh/Inference.pm gives a Perl structure as JSON text
    Opt::new("json_schema", |perl, sv, a| {
        let grammar = json_schema_arg(perl, sv)?;
        set_constraint(a, "json_schema", Some(grammar))
    }),
    Opt::new("grammar_trigger", |perl, sv, a| {
        set(&mut a.options.grammar_trigger, perl.string_arg(sv, "grammar_trigger").map(Some))
    }),
    Opt::new("response_format", |perl, sv, a| {
        let grammar = response_format_arg(perl, sv)?;
        set_constraint(a, "response_format", grammar)
    }),
];
