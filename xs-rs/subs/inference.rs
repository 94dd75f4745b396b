//! XS subs of Lugh::Inference. The options of new, sample and generate are
//! declared here, once (tables of [`Opt`]); the spellings of forward live in
//! Lugh/Inference.pm.
use super::generate_options::{GenerateArgs, GENERATE_CALL_OPTIONS, GENERATE_OPTIONS};
use super::lora::lora_arg;
use super::rope::rope_arg;
use super::sampling_options::SAMPLING_OPTIONS;
use crate::engine::forward::runner::{FlashAttn, InferenceOptions, KvType, Output, Overrides, MAX_CTX};
use crate::engine::generate::embedding::Pooling;
use crate::engine::generate::generation::{Step, TokenLogprob};
use crate::engine::generate::inference::{CacheHandle, Inference, PoolHandle};
use crate::engine::generate::logits::Logits;
use crate::engine::generate::sampler::{Sampler, SamplerKind, SamplerOptions};
use crate::engine::ggml::cpu_budget::MAX_THREADS;
use crate::engine::model::tokenizer::EncodeOptions;
use crate::engine::model::Model;
use crate::engine::Error;
use crate::glue::{
    accessor_names, call_callback_truth, names, new_object, object_arc, read_accessor, set, Accessor, Args, Given, Opt,
    Perl, Ret, Sv, XsError, XsResult,
};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Inference";
pub const CACHE_CLASS: &str = "Lugh::KVCache";
pub const POOL_CLASS: &str = "Lugh::MemoryPool";
use super::logits::CLASS as LOGITS_CLASS;

fn this(args: &Args) -> Result<Arc<Inference>, Error> {
    object_arc::<Inference>(args.perl(), args.get(0), CLASS)
}

/// The session's settings and the model hyperparameters it runs with: each
/// row is an accessor method of Lugh::Inference.
const ACCESSORS: &[Accessor<Inference>] = &[
    Accessor { name: "backend", read: |s, perl| Ok(perl.str(s.runner.backend_name())) },
    Accessor { name: "n_threads", read: |s, perl| Ok(perl.int(s.runner.n_threads() as i64)) },
    Accessor { name: "n_ctx", read: |s, perl| Ok(perl.int(s.runner.n_ctx() as i64)) },
    Accessor { name: "n_batch", read: |s, perl| Ok(perl.int(s.runner.n_batch() as i64)) },
    Accessor { name: "flash_attn", read: |s, perl| Ok(perl.int(s.runner.flash_attn() as i64)) },
    Accessor { name: "type_k", read: |s, perl| Ok(perl.str(s.runner.kv_types().0.name())) },
    Accessor { name: "type_v", read: |s, perl| Ok(perl.str(s.runner.kv_types().1.name())) },
    Accessor { name: "n_vocab", read: |s, perl| Ok(perl.int(s.runner.hparams().n_vocab as i64)) },
    Accessor { name: "n_layer", read: |s, perl| Ok(perl.int(s.runner.hparams().n_layer as i64)) },
    Accessor { name: "n_embd", read: |s, perl| Ok(perl.int(s.runner.hparams().n_embd as i64)) },
    Accessor { name: "n_head", read: |s, perl| Ok(perl.int(s.runner.hparams().n_head as i64)) },
    Accessor { name: "n_head_kv", read: |s, perl| Ok(perl.int(s.runner.hparams().n_head_kv as i64)) },
    Accessor { name: "head_dim", read: |s, perl| Ok(perl.int(s.runner.hparams().head_dim_k as i64)) },
    Accessor { name: "n_ff", read: |s, perl| Ok(perl.int(s.runner.hparams().n_ff as i64)) },
    Accessor { name: "n_rot", read: |s, perl| Ok(perl.int(s.runner.hparams().n_rot as i64)) },
    Accessor { name: "n_ctx_train", read: |s, perl| Ok(perl.int(s.runner.hparams().n_ctx_train as i64)) },
    Accessor { name: "rope_freq_base", read: |s, perl| Ok(perl.float(f64::from(s.runner.hparams().rope_freq_base))) },
    Accessor { name: "norm_eps", read: |s, perl| Ok(perl.float(f64::from(s.runner.hparams().norm_eps))) },
    Accessor { name: "architecture", read: |s, perl| Ok(perl.str(s.runner.architecture())) },
];

/// What `new` is given: the model and the session's options.
#[derive(Default)]
struct NewArgs {
    model: Option<Arc<Model>>,
    options: InferenceOptions,
}

/// The options of Lugh::Inference->new (defaults: [`InferenceOptions`]).
const NEW_OPTIONS: &[Opt<NewArgs>] = &[
    Opt::new("model", |perl, sv, a| set(&mut a.model, object_arc::<Model>(perl, sv, "Lugh::Model").map(Some))),
    Opt::new("rope", |perl, sv, a| set(&mut a.options.rope, rope_arg(perl, sv).map(|c| Some(c.request())))),
    Opt::new("backend", |perl, sv, a| {
        let name = perl.string_arg(sv, "backend")?;
        a.options.backend = (!name.eq_ignore_ascii_case("auto")).then_some(name);
        Ok(())
    }),
    Opt::new("n_threads", |perl, sv, a| {
        set(&mut a.options.n_threads, perl.ranged_arg(sv, "n_threads", 1, MAX_THREADS as i64).map(Some))
    }),
    Opt::new("n_ctx", |perl, sv, a| {
        set(&mut a.options.n_ctx, perl.ranged_arg(sv, "n_ctx", 1, MAX_CTX as i64).map(Some))
    }),
    Opt::new("n_batch", |perl, sv, a| {
        set(&mut a.options.n_batch, perl.ranged_arg(sv, "n_batch", 1, MAX_CTX as i64).map(Some))
    }),
    Opt::new("n_gpu_layers", |perl, sv, a| {
        set(&mut a.options.split.n_gpu_layers, perl.ranged_arg(sv, "n_gpu_layers", 0, i64::MAX).map(Some))
    }),
    Opt::new("tensor_split", |perl, sv, a| {
        let values = perl.array_arg(sv, "tensor_split")?;
        let split = values.into_iter().map(|v| perl.number_arg(v, "a tensor_split value")).collect::<Result<_, _>>()?;
        a.options.split.tensor_split = Some(split);
        Ok(())
    }),
    Opt::new("main_device", |perl, sv, a| {
        set(&mut a.options.split.main_device, perl.ranged_arg(sv, "main_device", 0, i64::MAX).map(Some))
    }),
    Opt::new("rpc", |perl, sv, a| {
        // an array of "host:port", or one string of them separated by commas
        let servers: Vec<String> = if perl.ref_kind(sv) == b'A' {
            let items = perl.array_arg(sv, "rpc")?;
            items.into_iter().map(|v| perl.string_arg(v, "an rpc server")).collect::<Result<_, _>>()?
        } else {
            perl.string_arg(sv, "rpc")?.split(',').map(|e| e.trim().to_string()).collect()
        };
        for endpoint in &servers {
            crate::engine::ggml::rpc::parse_endpoint(endpoint)?;
        }
        if servers.is_empty() {
            return Err(Error::Argument("rpc needs at least one server (host:port)".into()));
        }
        a.options.rpc = servers;
        Ok(())
    }),
    Opt::new("rpc_timeout", |perl, sv, a| {
        set(&mut a.options.rpc_timeout, perl.number_arg(sv, "rpc_timeout").map(Some))
    }),
    Opt::new("type_k", |perl, sv, a| {
        a.options.type_k = Some(KvType::parse(&perl.string_arg(sv, "type_k")?, "type_k")?);
        Ok(())
    }),
    Opt::new("type_v", |perl, sv, a| {
        a.options.type_v = Some(KvType::parse(&perl.string_arg(sv, "type_v")?, "type_v")?);
        Ok(())
    }),
    Opt::new("flash_attn", |perl, sv, a| {
        let text = perl.string_arg(sv, "flash_attn")?;
        a.options.flash_attn = Some(match text.to_ascii_lowercase().as_str() {
            "auto" => FlashAttn::Auto,
            "0" => FlashAttn::Disabled,
            "1" => FlashAttn::Enabled,
            _ => return Err(Error::Argument(format!("flash_attn must be 0, 1 or 'auto', got '{text}'"))),
        });
        Ok(())
    }),
];

/// A forward call without tokens ("requires tokens": Lugh 0.12's words,
/// which its scripts match).
pub(crate) fn missing_tokens() -> Error {
    Error::Argument("missing tokens: it requires tokens => [...] (an array of token ids)".into())
}

/// What sample() is given besides the sampling options.
struct SampleArgs {
    n_vocab: usize,
    history: Option<Vec<i32>>,
}

const SAMPLE_OPTIONS: &[Opt<SampleArgs>] = &[Opt::new("history", |perl, sv, a| {
    a.history = Some(perl.token_array_arg(sv, "history", a.n_vocab)?);
    Ok(())
})];

/// What embed() and embed_batch() are given besides the texts.
struct EmbedArgs {
    pooling: Option<Pooling>,
    normalize: bool,
    parse_special: bool,
    overrides: Overrides,
}

const EMBED_OPTIONS: &[Opt<EmbedArgs>] = &[
    Opt::new("pooling", |perl, sv, a| {
        set(&mut a.pooling, perl.string_arg(sv, "pooling").and_then(|n| Pooling::from_name(&n)).map(Some))
    }),
    Opt::new("normalize", |perl, sv, a| set(&mut a.normalize, perl.bool_arg(sv, "normalize"))),
    Opt::new("parse_special", |perl, sv, a| set(&mut a.parse_special, perl.bool_arg(sv, "parse_special"))),
    Opt::new("rope", |perl, sv, a| set(&mut a.overrides.rope, rope_arg(perl, sv).map(|c| Some(c.request())))),
    Opt::new("lora", |perl, sv, a| set(&mut a.overrides.adapters, lora_arg(perl, sv))),
];

/// What rerank() is given.
#[derive(Default)]
struct RerankArgs {
    query: Option<Vec<u8>>,
    documents: Option<Vec<Vec<u8>>>,
    overrides: Overrides,
}

const RERANK_OPTIONS: &[Opt<RerankArgs>] = &[
    Opt::new("query", |perl, sv, a| set(&mut a.query, perl.utf8_text_arg(sv, "query").map(|t| Some(t.into_owned())))),
    Opt::new("documents", |perl, sv, a| {
        let docs = perl.array_arg(sv, "documents").and_then(|items| {
            items
                .iter()
                .enumerate()
                .map(|(i, &d)| perl.utf8_text_arg(d, &format!("document {i}")).map(|t| t.into_owned()))
                .collect::<Result<Vec<_>, Error>>()
        });
        set(&mut a.documents, docs.map(Some))
    }),
    Opt::new("lora", |perl, sv, a| set(&mut a.overrides.adapters, lora_arg(perl, sv))),
];

/// What logprobs() and perplexity() are given besides the text.
#[derive(Default)]
struct ScoreArgs {
    top: usize,
    n_ctx: Option<usize>,
    n_chunks: Option<usize>,
    parse_special: bool,
    overrides: Overrides,
}

const LOGPROBS_OPTIONS: &[Opt<ScoreArgs>] = &[
    Opt::new("top", |perl, sv, a| set(&mut a.top, perl.ranged_arg(sv, "top", 0, i64::MAX))),
    Opt::new("parse_special", |perl, sv, a| set(&mut a.parse_special, perl.bool_arg(sv, "parse_special"))),
    Opt::new("rope", |perl, sv, a| set(&mut a.overrides.rope, rope_arg(perl, sv).map(|c| Some(c.request())))),
    Opt::new("lora", |perl, sv, a| set(&mut a.overrides.adapters, lora_arg(perl, sv))),
];

const PERPLEXITY_OPTIONS: &[Opt<ScoreArgs>] = &[
    Opt::new("n_ctx", |perl, sv, a| set(&mut a.n_ctx, perl.ranged_arg(sv, "n_ctx", 2, MAX_CTX as i64).map(Some))),
    Opt::new("n_chunks", |perl, sv, a| {
        set(&mut a.n_chunks, perl.ranged_arg(sv, "n_chunks", 1, i32::MAX as i64).map(Some))
    }),
    Opt::new("parse_special", |perl, sv, a| set(&mut a.parse_special, perl.bool_arg(sv, "parse_special"))),
    Opt::new("rope", |perl, sv, a| set(&mut a.overrides.rope, rope_arg(perl, sv).map(|c| Some(c.request())))),
    Opt::new("lora", |perl, sv, a| set(&mut a.overrides.adapters, lora_arg(perl, sv))),
];

/// What forward() and forward_batch() are given (the spellings of forward
/// are sorted out in Lugh/Inference.pm).
#[derive(Default)]
struct ForwardArgs {
    n_vocab: usize,
    tokens: Option<Vec<i32>>,
    sequences: Option<Vec<Vec<i32>>>,
    cache: Option<Arc<CacheHandle>>,
    caches: Option<Vec<Arc<CacheHandle>>>,
    pool: Option<Arc<PoolHandle>>,
    /// Logits for every position, not only the last (forward_all).
    all: bool,
    as_object: bool,
    overrides: Overrides,
}

const FORWARD_POOL: Opt<ForwardArgs> = Opt::new("pool", |perl, sv, a| set(&mut a.pool, pool_arg(perl, sv)));
const FORWARD_AS_OBJECT: Opt<ForwardArgs> = Opt::new("as_object", |perl, sv, a| {
    a.as_object = perl.is_true(sv);
    Ok(())
});
const FORWARD_ROPE: Opt<ForwardArgs> =
    Opt::new("rope", |perl, sv, a| set(&mut a.overrides.rope, rope_arg(perl, sv).map(|c| Some(c.request()))));
const FORWARD_LORA: Opt<ForwardArgs> =
    Opt::new("lora", |perl, sv, a| set(&mut a.overrides.adapters, lora_arg(perl, sv)));

/// The options of forward(), in the order they are read.
const FORWARD_OPTIONS: &[Opt<ForwardArgs>] = &[
    Opt::new("tokens", |perl, sv, a| set(&mut a.tokens, perl.token_array_arg(sv, "tokens", a.n_vocab).map(Some))),
    Opt::new("cache", |perl, sv, a| set(&mut a.cache, cache_arg(perl, sv))),
    FORWARD_POOL,
    Opt::new("all", |perl, sv, a| {
        a.all = perl.is_true(sv);
        Ok(())
    }),
    FORWARD_AS_OBJECT,
    FORWARD_ROPE,
    FORWARD_LORA,
];

/// The options of forward_batch(), in the order they are read.
const FORWARD_BATCH_OPTIONS: &[Opt<ForwardArgs>] = &[
    Opt::new("sequences", |perl, sv, a| {
        let sequences = perl
            .array_arg(sv, "sequences")?
            .into_iter()
            .enumerate()
            .map(|(i, seq)| perl.token_array_arg(seq, &format!("sequence {i}"), a.n_vocab))
            .collect::<Result<Vec<_>, _>>()?;
        a.sequences = Some(sequences);
        Ok(())
    }),
    Opt::new("caches", |perl, sv, a| {
        let caches = perl
            .array_arg(sv, "caches")?
            .into_iter()
            .map(|c| object_arc::<CacheHandle>(perl, c, CACHE_CLASS))
            .collect::<Result<Vec<_>, _>>()?;
        a.caches = Some(caches);
        Ok(())
    }),
    FORWARD_POOL,
    FORWARD_ROPE,
    FORWARD_LORA,
    FORWARD_AS_OBJECT,
];

/// The session and the options of a forward call (self, then name => value pairs).
fn forward_args(args: &Args, table: &[Opt<ForwardArgs>]) -> Result<(Arc<Inference>, ForwardArgs), Error> {
    let s = this(args)?;
    let mut call = ForwardArgs { n_vocab: s.runner.n_vocab(), ..ForwardArgs::default() };
    Given::read_into(args.perl(), &args.rest(1), table, &mut call)?;
    Ok((s, call))
}

/// A text (tokenized as llama.cpp's tools do: the model's BOS/EOS added)
/// or an array reference of token ids.
fn text_or_tokens(perl: Perl, s: &Inference, sv: Sv, what: &str, parse_special: bool) -> Result<Vec<i32>, Error> {
    if perl.ref_kind(sv) == b'A' {
        return perl.token_array_arg(sv, what, s.runner.n_vocab());
    }
    if perl.ref_kind(sv) != 0 {
        perl.check(what)?;
        return Err(Error::Argument(format!("{what} must be a string of text or an array reference of token ids")));
    }
    let text = perl.utf8_text_arg(sv, what)?;
    let vocab = s.runner.model().vocab()?;
    let options = EncodeOptions { add_bos: vocab.add_bos_default(), add_eos: vocab.add_eos_default(), parse_special };
    Ok(vocab.encode_bytes(&text, options))
}

/// embed() and embed_batch(): reads the options, embeds `inputs` and
/// returns one embedding each (pooled: an array of numbers; pooling none:
/// an array of one such array per token).
fn embed_inputs(args: &Args, s: &Inference, inputs: &[Sv], first_option: usize) -> Result<Vec<Sv>, XsError> {
    let perl = args.perl();
    let given = Given::read(perl, &args.rest(first_option), &names(EMBED_OPTIONS).collect::<Vec<_>>())?;
    let mut opt = EmbedArgs { pooling: None, normalize: true, parse_special: true, overrides: Overrides::NONE };
    given.apply(perl, EMBED_OPTIONS, &mut opt)?;
    let pooling = opt.pooling.or_else(|| s.model_pooling()).unwrap_or(Pooling::Mean);
    let sequences = inputs
        .iter()
        .enumerate()
        .map(|(i, &sv)| {
            let what =
                if inputs.len() == 1 && first_option == 2 { "the input".to_string() } else { format!("input {i}") };
            let tokens = text_or_tokens(perl, s, sv, &what, opt.parse_special)?;
            if tokens.is_empty() {
                return Err(Error::Argument(format!("{what} is empty: at least one token is needed")));
            }
            Ok(tokens)
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let width = s.runner.hparams().n_embd;
    let vectors = s.embed(&sequences, pooling, opt.normalize, &opt.overrides)?;
    Ok(vectors
        .iter()
        .map(|v| match pooling {
            Pooling::None => {
                perl.array_ref(&v.chunks_exact(width).map(|row| perl.float_array_ref(row)).collect::<Vec<_>>())
            }
            _ => perl.float_array_ref(v),
        })
        .collect())
}

/// The valid names of several tables, for [`Given::read`].
fn valid_names(
    tables: &[Vec<(&'static str, &'static [&'static str])>],
) -> Vec<(&'static str, &'static [&'static str])> {
    tables.concat()
}

/// sample(), sample_top_p() and sample_top_k(): `only` limits the sampling
/// options accepted, `fixed` sets the ones the method's name implies, and
/// `positional` names the values of Lugh 0.12's positional form
/// (`sample_top_p(\@logits, 0.9, 1.0)`), taken when the first argument
/// after the logits is a number rather than an option name.
fn sample_with(
    args: &Args,
    only: Option<&[&str]>,
    positional: &[&'static str],
    fixed: fn(&mut SamplerOptions),
) -> XsResult {
    if args.len() < 2 {
        return Err(XsError::Message(format!("Usage: {}($logits, name => value, ...)", args.method())));
    }
    let s = this(args)?;
    let perl = args.perl();
    let n_vocab = s.runner.n_vocab();
    let mut valid: Vec<_> = names(SAMPLING_OPTIONS).filter(|(n, _)| only.is_none_or(|o| o.contains(n))).collect();
    if only.is_none() {
        valid.extend(names(SAMPLE_OPTIONS));
    }
    let rest = args.rest(2);
    let numeric_first = rest.first().is_some_and(|&sv| {
        perl.is_defined(sv)
            && perl.ref_kind(sv) == 0
            && perl.string_arg(sv, "").is_ok_and(|s| s.trim().parse::<f64>().is_ok())
    });
    let given = match numeric_first && !positional.is_empty() {
        true => Given::positional(&rest, positional)?,
        false => Given::read(perl, &rest, &valid)?,
    };
    let mut extra = SampleArgs { n_vocab, history: None };
    given.apply(perl, SAMPLE_OPTIONS, &mut extra)?;
    let mut options = SamplerOptions::default();
    given.apply(perl, SAMPLING_OPTIONS, &mut options)?;
    fixed(&mut options);
    // A Lugh::Logits object is read in place; an array is converted.
    let object = object_arc::<Logits>(perl, args.get(1), LOGITS_CLASS).ok();
    let list = match object {
        Some(_) => Vec::new(),
        None if perl.ref_kind(args.get(1)) == b'A' => perl.float_array_arg(args.get(1), "logits")?,
        None => {
            perl.check("logits")?;
            return Err(Error::Argument(
                "the first argument must be an array reference of logits or a Lugh::Logits".into(),
            )
            .into());
        }
    };
    let logits = object.as_deref().map_or(list.as_slice(), Logits::values);
    let vocab = s.runner.model().vocab().ok();
    let mut sampler = Sampler::with_vocab(options, vocab.as_deref())?;
    let id = sampler.sample(logits, extra.history.as_deref().unwrap_or(&[]))?;
    Ok(Ret::One(perl.int(id as i64)))
}

/// `f(sv)` for a defined argument, None for undef.
fn optional<T>(perl: Perl, sv: Sv, f: impl FnOnce(Sv) -> Result<T, Error>) -> Result<Option<T>, Error> {
    if perl.is_defined(sv) {
        f(sv).map(Some)
    } else {
        Ok(None)
    }
}

pub(crate) fn cache_arg(perl: Perl, sv: Sv) -> Result<Option<Arc<CacheHandle>>, Error> {
    optional(perl, sv, |sv| object_arc::<CacheHandle>(perl, sv, CACHE_CLASS))
}

fn pool_arg(perl: Perl, sv: Sv) -> Result<Option<Arc<PoolHandle>>, Error> {
    optional(perl, sv, |sv| object_arc::<PoolHandle>(perl, sv, POOL_CLASS))
}

/// Several rows of logits, as an array of arrays or of Lugh::Logits objects.
fn rows(perl: Perl, rows: Vec<Vec<f32>>, as_object: bool) -> Sv {
    let outer: Vec<Sv> =
        rows.into_iter().map(|r| if as_object { logits_object(perl, r) } else { perl.float_array_ref(&r) }).collect();
    perl.array_ref(&outer)
}

/// [id, logprob, [[id, logprob], ...]] for one generated token.
pub(crate) fn logprob_entry(perl: Perl, lp: &TokenLogprob) -> Sv {
    let pair = |id: i32, v: f32| perl.array_ref(&[perl.int(id as i64), perl.float(f64::from(v))]);
    let top: Vec<Sv> = lp.top.iter().map(|&(id, v)| pair(id, v)).collect();
    perl.array_ref(&[perl.int(lp.id as i64), perl.float(f64::from(lp.logprob)), perl.array_ref(&top)])
}

fn logits_object(perl: Perl, values: Vec<f32>) -> Sv {
    new_object(perl, LOGITS_CLASS, Arc::new(Logits::new(values)))
}

/// The option of profile: reset (start the counts again after reading).
const PROFILE_OPTIONS: &[Opt<bool>] = &[Opt::new("reset", |perl, sv, reset| set(reset, Ok(perl.is_true(sv))))];

xs_subs! { "Lugh::Inference";
    fn new(args) as "Lugh::Inference->new" {
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let given = Given::read(perl, &args.rest(1), &names(NEW_OPTIONS).collect::<Vec<_>>())?;
        let mut new = NewArgs::default();
        given.apply(perl, NEW_OPTIONS, &mut new)?;
        let model = new.model.ok_or_else(|| Error::Argument("missing model => $model (a Lugh::Model)".into()))?;
        let session = Inference::new(model, new.options)?;
        for warning in session.runner.warnings() {
            perl.warn(&format!("{CLASS}->new: {warning}")).map_err(XsError::Perl)?;
        }
        Ok(Ret::One(new_object(perl, &class, Arc::new(session))))
    }

    fn _accessor_names(args) {
        accessor_names(args, ACCESSORS)
    }

    fn _accessor(args) {
        read_accessor(args, CLASS, ACCESSORS)
    }

    fn _generate_options(args) {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        let all = names(GENERATE_CALL_OPTIONS).chain(names(GENERATE_OPTIONS)).chain(names(SAMPLING_OPTIONS));
        Ok(Ret::List(all.map(|(name, _)| perl.str(name)).collect()))
    }

    // The options a Lugh::Chat passes on to every generate of its turns.
    fn _generate_tuning_options(args) {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        let tuning = names(GENERATE_OPTIONS).chain(names(SAMPLING_OPTIONS));
        Ok(Ret::List(tuning.map(|(name, _)| perl.str(name)).collect()))
    }

    fn _weights_id(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.runner.weights_id() as u64)))
    }

    fn _devices(args) {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        let s = this(args)?;
        // [name, description, layers] each; Lugh/Inference.pm makes them hashes
        let rows = s.runner.placement().summary().into_iter().map(|(name, description, layers)| {
            perl.array_ref(&[perl.str(&name), perl.str(&description), perl.int(layers as i64)])
        });
        Ok(Ret::List(rows.collect()))
    }

    fn model(args) {
        args.expect(1, 1, "self")?;
        let s = this(args)?;
        Ok(Ret::One(new_object(args.perl(), "Lugh::Model", s.runner.model().clone())))
    }

    fn _forward(args) as "Lugh::Inference->forward" {
        let (s, call) = forward_args(args, FORWARD_OPTIONS)?;
        let perl = args.perl();
        let tokens = call.tokens.ok_or_else(missing_tokens)?;
        let output = if call.all { Output::All } else { Output::Last };
        let mut logits = s.forward(&tokens, call.cache.as_deref(), call.pool.as_deref(), output, &call.overrides)?;
        Ok(match (output, call.as_object) {
            (Output::Last, false) => Ret::Floats(logits.pop().unwrap_or_default()),
            (Output::Last, true) => Ret::One(logits_object(perl, logits.pop().unwrap_or_default())),
            (Output::All, _) => Ret::One(rows(perl, logits, call.as_object)),
        })
    }

    fn _forward_batch(args) as "Lugh::Inference->forward_batch" {
        let (s, call) = forward_args(args, FORWARD_BATCH_OPTIONS)?;
        let sequences =
            call.sequences.ok_or_else(|| Error::Argument("missing sequences (an array of token arrays)".into()))?;
        let logits = s.forward_batch(&sequences, call.caches.as_deref(), call.pool.as_deref(), &call.overrides)?;
        Ok(Ret::One(rows(args.perl(), logits, call.as_object)))
    }

    fn sample(args) as "Lugh::Inference->sample" {
        sample_with(args, None, &[], |_| {})
    }

    fn sample_top_p(args) as "Lugh::Inference->sample_top_p" {
        sample_with(args, Some(&["temperature", "top_p", "seed"]), &["top_p", "temperature"], |o| {
            o.samplers = vec![SamplerKind::TopP, SamplerKind::Temperature]
        })
    }

    fn sample_top_k(args) as "Lugh::Inference->sample_top_k" {
        sample_with(args, Some(&["temperature", "top_k", "seed"]), &["top_k", "temperature"], |o| {
            o.samplers = vec![SamplerKind::TopK, SamplerKind::Temperature]
        })
    }

    fn _generate(args) as "Lugh::Inference->generate" {
        if args.is_empty() {
            return Err(XsError::Message("Usage: Lugh::Inference->generate(\\@prompt, name => value, ...)".into()));
        }
        let s = this(args)?;
        let perl = args.perl();
        let n_vocab = s.runner.n_vocab();
        // The prompt comes first, or as prompt => [...].
        let positional = args.len() > 1 && perl.ref_kind(args.get(1)) == b'A';
        let mut call = GenerateArgs::new(n_vocab);
        let valid = valid_names(&[
            names(GENERATE_CALL_OPTIONS).collect(),
            names(GENERATE_OPTIONS).collect(),
            names(SAMPLING_OPTIONS).collect(),
        ]);
        let given = Given::read(perl, &args.rest(if positional { 2 } else { 1 }), &valid)?;
        given.apply(perl, GENERATE_CALL_OPTIONS, &mut call)?;
        given.apply(perl, GENERATE_OPTIONS, &mut call)?;
        given.apply(perl, SAMPLING_OPTIONS, &mut call.options.sampler)?;
        if positional {
            if call.prompt.is_some() {
                return Err(Error::Argument("give the prompt once".into()).into());
            }
            call.prompt = Some(perl.token_array_arg(args.get(1), "prompt", n_vocab)?);
        }
        let prompt = call.prompt.ok_or_else(|| Error::Argument("missing prompt (an array of token ids)".into()))?;
        // The text is reported in the statistics (last_stats, stats).
        call.options.need_text = true;
        let (callback, on_text, progress) = (call.callback, call.on_text, call.progress);
        let truth = |cb: Sv, args: &[Sv]| call_callback_truth(perl, cb, args).map_err(XsError::Perl);
        // Pending %SIG handlers run after every prompt batch and token.
        let on_progress = |done: usize, total: usize| -> Result<bool, XsError> {
            perl.despatch_signals().map_err(XsError::Perl)?;
            match progress {
                Some(cb) => truth(cb, &[perl.int(done as i64), perl.int(total as i64)]),
                None => Ok(false),
            }
        };
        let on_token = |step: &Step| -> Result<bool, XsError> {
            perl.despatch_signals().map_err(XsError::Perl)?;
            let mut stop = false;
            if let Some(cb) = callback {
                stop |= truth(cb, &[perl.int(step.id as i64), perl.int(step.count as i64)])?;
            }
            if let (Some(cb), false) = (on_text, step.text.is_empty()) {
                stop |= truth(cb, &[perl.str(step.text)])?;
            }
            Ok(stop)
        };
        let on_end = |rest: &str| -> Result<(), XsError> {
            if let Some(cb) = on_text {
                truth(cb, &[perl.str(rest)])?;
            }
            Ok(())
        };
        let g = s.generate(&prompt, call.cache.as_deref(), &call.options, on_progress, on_token, on_end)?;
        let ids: Vec<i64> = g.tokens.iter().map(|&id| id as i64).collect();
        // The ids, the hash to fill, then the statistics as name => value pairs.
        let mut ret = vec![
            perl.int_array_ref(&ids),
            call.stats.unwrap_or_else(|| perl.undef()),
            perl.str("stop_reason"),
            perl.str(g.stop_reason.name()),
            perl.str("text"),
            perl.str(&g.text),
            perl.str("n_prompt"),
            perl.int(g.n_prompt as i64),
            perl.str("n_reused"),
            perl.int(g.n_reused as i64),
            perl.str("n_evaluated"),
            perl.int(g.n_evaluated as i64),
            perl.str("prompt_seconds"),
            perl.float(g.prompt_seconds),
            perl.str("generate_seconds"),
            perl.float(g.generate_seconds),
        ];
        if call.options.logprobs.is_some() {
            ret.push(perl.str("logprobs"));
            ret.push(perl.array_ref(&g.logprobs.iter().map(|lp| logprob_entry(perl, lp)).collect::<Vec<_>>()));
        }
        Ok(Ret::List(ret))
    }

    fn embed(args) as "Lugh::Inference->embed" {
        if args.len() < 2 {
            return Err(XsError::Message("Usage: $inference->embed($text | \\@tokens, name => value, ...)".into()));
        }
        let s = this(args)?;
        let mut out = embed_inputs(args, &s, &[args.get(1)], 2)?;
        Ok(Ret::One(out.pop().expect("one input, one embedding")))
    }

    // self, then query => $text, documents => [$text, ...] (RERANK_OPTIONS)
    fn rerank(args) as "Lugh::Inference->rerank" {
        let s = this(args)?;
        let perl = args.perl();
        let mut given = RerankArgs::default();
        Given::read_into(perl, &args.rest(1), RERANK_OPTIONS, &mut given)?;
        let query = given.query.ok_or_else(|| Error::Argument("missing query => $text".into()))?;
        let documents =
            given.documents.ok_or_else(|| Error::Argument("missing documents => [$text, ...]".into()))?;
        let docs: Vec<&[u8]> = documents.iter().map(Vec::as_slice).collect();
        let scores = s.rerank(&query, &docs, &given.overrides)?;
        Ok(Ret::One(perl.float_array_ref(&scores)))
    }

    fn embed_batch(args) as "Lugh::Inference->embed_batch" {
        if args.len() < 2 {
            return Err(XsError::Message(
                "Usage: $inference->embed_batch([$text | \\@tokens, ...], name => value, ...)".into(),
            ));
        }
        let s = this(args)?;
        let inputs = args.perl().array_arg(args.get(1), "inputs")?;
        Ok(Ret::List(embed_inputs(args, &s, &inputs, 2)?))
    }

    fn _logprobs(args) as "Lugh::Inference->logprobs" {
        if args.len() < 2 {
            return Err(XsError::Message("Usage: $inference->logprobs($text | \\@tokens, name => value, ...)".into()));
        }
        let s = this(args)?;
        let perl = args.perl();
        let given = Given::read(perl, &args.rest(2), &names(LOGPROBS_OPTIONS).collect::<Vec<_>>())?;
        let mut opt = ScoreArgs::default();
        given.apply(perl, LOGPROBS_OPTIONS, &mut opt)?;
        let tokens = text_or_tokens(perl, &s, args.get(1), "the text", opt.parse_special)?;
        let scores = s.score(&tokens, opt.top, &opt.overrides)?;
        let ids: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
        let logprobs: Vec<Sv> = scores.logprobs.iter().map(|&v| perl.float(v)).collect();
        let mut out = vec![
            perl.str("tokens"),
            perl.int_array_ref(&ids),
            perl.str("logprobs"),
            perl.array_ref(&logprobs),
            perl.str("n_scored"),
            perl.int(scores.logprobs.len() as i64),
            perl.str("nll"),
            perl.float(-scores.logprobs.iter().sum::<f64>()),
            perl.str("perplexity"),
            perl.float(scores.perplexity()),
        ];
        if opt.top > 0 {
            let pair = |&(id, v): &(i32, f64)| perl.array_ref(&[perl.int(id as i64), perl.float(v)]);
            let rows: Vec<Sv> =
                scores.top.iter().map(|row| perl.array_ref(&row.iter().map(pair).collect::<Vec<_>>())).collect();
            out.extend([perl.str("top"), perl.array_ref(&rows)]);
        }
        Ok(Ret::List(out))
    }

    fn _perplexity(args) as "Lugh::Inference->perplexity" {
        if args.len() < 2 {
            return Err(XsError::Message(
                "Usage: $inference->perplexity($text | \\@tokens, n_ctx => N, ...)".into(),
            ));
        }
        let s = this(args)?;
        let perl = args.perl();
        let given = Given::read(perl, &args.rest(2), &names(PERPLEXITY_OPTIONS).collect::<Vec<_>>())?;
        let mut opt = ScoreArgs::default();
        given.apply(perl, PERPLEXITY_OPTIONS, &mut opt)?;
        let tokens = text_or_tokens(perl, &s, args.get(1), "the text", opt.parse_special)?;
        // llama-perplexity puts the BOS at the start of every window when
        // the model adds one.
        let bos = match s.runner.model().vocab() {
            Ok(v) if v.add_bos_default() => v.bos_id(),
            _ => None,
        };
        let n_ctx = opt.n_ctx.unwrap_or_else(|| s.runner.n_ctx());
        let p = s.perplexity(&tokens, n_ctx, opt.n_chunks, bos, &opt.overrides)?;
        let after: Vec<Sv> = p.after_chunk.iter().map(|&v| perl.float(v)).collect();
        Ok(Ret::List(vec![
            perl.str("perplexity"),
            perl.float(p.perplexity),
            perl.str("error"),
            p.error.map_or_else(|| perl.undef(), |e| perl.float(e)),
            perl.str("chunks"),
            perl.array_ref(&after),
            perl.str("n_chunks"),
            perl.int(p.n_chunks as i64),
            perl.str("n_ctx"),
            perl.int(n_ctx as i64),
            perl.str("n_scored"),
            perl.int(p.n_scored as i64),
            perl.str("n_tokens"),
            perl.int(tokens.len() as i64),
            perl.str("nll"),
            perl.float(p.mean_nll),
        ]))
    }

    // self, then name => value options: reset (start the counts again)
    fn _profile(args) as "Lugh::Inference->profile" {
        let s = this(args)?;
        let perl = args.perl();
        let mut reset = false;
        Given::read_into(perl, &args.rest(1), PROFILE_OPTIONS, &mut reset)?;
        let p = s.runner.profile(reset);
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
