//! The sampling options of Lugh::Inference's sample() and generate(), of
//! Lugh::Chat and (the deterministic ones) of Lugh::Speculative: one table,
//! read by each of them.
use crate::engine::generate::sampler::{SamplerKind, SamplerOptions};
use crate::engine::Error;
use crate::glue::{set, Opt};

/// The sampling options of sample() and generate() (defaults:
/// [`SamplerOptions`]; the engine checks the ranges).
pub(crate) const SAMPLING_OPTIONS: &[Opt<SamplerOptions>] = &[
    Opt::new("greedy", |perl, sv, o| set(&mut o.greedy, perl.bool_arg(sv, "greedy"))),
    Opt::new("temperature", |perl, sv, o| {
        set(&mut o.temperature, perl.number_arg(sv, "temperature").map(|v| v as f32))
    }),
    Opt::new("top_k", |perl, sv, o| set(&mut o.top_k, perl.ranged_arg(sv, "top_k", 0, i64::MAX))),
    Opt::new("top_p", |perl, sv, o| set(&mut o.top_p, perl.number_arg(sv, "top_p").map(|v| v as f32))),
    Opt::new("min_p", |perl, sv, o| set(&mut o.min_p, perl.number_arg(sv, "min_p").map(|v| v as f32))),
    Opt::new("repeat_penalty", |perl, sv, o| {
        set(&mut o.repeat_penalty, perl.number_arg(sv, "repeat_penalty").map(|v| v as f32))
    }),
    Opt::new("presence_penalty", |perl, sv, o| {
        set(&mut o.presence_penalty, perl.number_arg(sv, "presence_penalty").map(|v| v as f32))
    }),
    Opt::new("frequency_penalty", |perl, sv, o| {
        set(&mut o.frequency_penalty, perl.number_arg(sv, "frequency_penalty").map(|v| v as f32))
    }),
    Opt::new("penalty_last_n", |perl, sv, o| {
        set(&mut o.penalty_last_n, perl.ranged_arg(sv, "penalty_last_n", 0, i64::MAX))
    }),
    Opt::new("seed", |perl, sv, o| set(&mut o.seed, perl.ranged_arg(sv, "seed", 0, i64::MAX).map(|v| Some(v as u64)))),
    Opt::new("typical_p", |perl, sv, o| set(&mut o.typical_p, perl.number_arg(sv, "typical_p").map(|v| v as f32))),
    Opt::new("top_n_sigma", |perl, sv, o| {
        set(&mut o.top_n_sigma, perl.number_arg(sv, "top_n_sigma").map(|v| v as f32))
    }),
    Opt::new("xtc_probability", |perl, sv, o| {
        set(&mut o.xtc_probability, perl.number_arg(sv, "xtc_probability").map(|v| v as f32))
    }),
    Opt::new("xtc_threshold", |perl, sv, o| {
        set(&mut o.xtc_threshold, perl.number_arg(sv, "xtc_threshold").map(|v| v as f32))
    }),
    Opt::new("dry_multiplier", |perl, sv, o| {
        set(&mut o.dry_multiplier, perl.number_arg(sv, "dry_multiplier").map(|v| v as f32))
    }),
    Opt::new("dry_base", |perl, sv, o| set(&mut o.dry_base, perl.number_arg(sv, "dry_base").map(|v| v as f32))),
    Opt::new("dry_allowed_length", |perl, sv, o| {
        set(&mut o.dry_allowed_length, perl.ranged_arg(sv, "dry_allowed_length", 0, i32::MAX as i64))
    }),
    Opt::new("dry_penalty_last_n", |perl, sv, o| {
        set(&mut o.dry_penalty_last_n, perl.ranged_arg(sv, "dry_penalty_last_n", 0, i32::MAX as i64))
    }),
    Opt::new("dry_sequence_breakers", |perl, sv, o| {
        let items = perl.array_arg(sv, "dry_sequence_breakers")?;
        o.dry_sequence_breakers = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| perl.string_arg(item, &format!("dry_sequence_breakers element {i}")))
            .collect::<Result<_, _>>()?;
        Ok(())
    }),
    Opt::new("mirostat_mode", |perl, sv, o: &mut SamplerOptions| {
        set(&mut o.mirostat_mode, perl.ranged_arg(sv, "mirostat_mode", 0, 2).map(|v| v as u8))
    })
    .with_aliases(&["mirostat"]),
    Opt::new("mirostat_tau", |perl, sv, o| {
        set(&mut o.mirostat_tau, perl.number_arg(sv, "mirostat_tau").map(|v| v as f32))
    }),
    Opt::new("mirostat_eta", |perl, sv, o| {
        set(&mut o.mirostat_eta, perl.number_arg(sv, "mirostat_eta").map(|v| v as f32))
    }),
    Opt::new("logit_bias", |perl, sv, o| {
        // {token_id => bias}; the ids are checked against the vocabulary when sampling
        let mut pairs = Vec::new();
        for (key, value) in perl.hash_arg(sv, "logit_bias")? {
            let id =
                key.trim().parse::<i32>().ok().filter(|&id| id >= 0).ok_or_else(|| {
                    Error::Argument(format!("logit_bias: '{key}' is not a token id (an integer >= 0)"))
                })?;
            let bias = perl.number_arg(value, &format!("logit_bias of token {id}"))? as f32;
            pairs.push((id, bias));
        }
        // one order whatever the hash's: the sums do not depend on it, error messages do
        pairs.sort_by_key(|&(id, _)| id);
        o.logit_bias = pairs;
        Ok(())
    }),
    Opt::new("samplers", |perl, sv, o| {
        // names in an array, or one string of them separated by ';' (llama.cpp's --samplers)
        let names: Vec<String> = if perl.ref_kind(sv) == b'A' {
            let items = perl.array_arg(sv, "samplers")?;
            items.into_iter().map(|v| perl.string_arg(v, "a sampler name")).collect::<Result<_, _>>()?
        } else {
            perl.string_arg(sv, "samplers")?.split(';').map(|n| n.trim().to_string()).collect()
        };
        o.samplers =
            names.iter().filter(|n| !n.is_empty()).map(|n| SamplerKind::from_name(n)).collect::<Result<_, _>>()?;
        Ok(())
    }),
];
