//! XS subs of Lugh::Model.
use crate::engine::model::gguf::{Array, Value};
use crate::engine::model::Model;
use crate::engine::train::model_create::RandomModel;
use crate::engine::train::pass::{save_model, trainable_weights};
use crate::engine::Error;
use crate::glue::{
    accessor_names, names, new_object, object_arc, option_names, read_accessor, set, Accessor, Args, Given, Item, Opt,
    Perl, Ret, Sv,
};
use crate::xs_subs;
use std::path::PathBuf;
use std::sync::Arc;

const CLASS: &str = "Lugh::Model";

fn this(args: &Args) -> Result<Arc<Model>, Error> {
    object_arc::<Model>(args.perl(), args.get(0), CLASS)
}

/// The model file's path.
fn path_arg(perl: Perl, sv: Sv) -> Result<PathBuf, Error> {
    let path = perl.path_arg(sv, "model path")?;
    if path.as_os_str().is_empty() {
        return Err(Error::Argument("missing model => $path (the GGUF file to load): the path is empty".into()));
    }
    Ok(path)
}

fn opt_int(perl: Perl, v: Option<i64>) -> Sv {
    v.map_or(perl.undef(), |v| perl.int(v))
}

/// What Lugh::Model->new is given.
struct OpenArgs {
    path: Option<PathBuf>,
    use_mmap: bool,
    prefetch: bool,
    /// Whether a catalogue name not downloaded yet is pulled (default) or
    /// croaks: lib/Lugh/Model.pm resolves names before opening, and reads
    /// it from `_check_new`; it is declared here so that one table lists
    /// and checks all the options of new.
    download: bool,
}

/// The options of Lugh::Model->new (Lugh 0.12 called use_mmap "mmap").
const OPEN_OPTIONS: &[Opt<OpenArgs>] = &[
    Opt::new("model", |perl, sv, a: &mut OpenArgs| set(&mut a.path, path_arg(perl, sv).map(Some)))
        .with_aliases(&["file", "path"]),
    Opt::new("use_mmap", |perl, sv, a: &mut OpenArgs| set(&mut a.use_mmap, perl.bool_arg(sv, "use_mmap")))
        .with_aliases(&["mmap"]),
    Opt::new("prefetch", |perl, sv, a| set(&mut a.prefetch, perl.bool_arg(sv, "prefetch"))),
    Opt::new("download", |perl, sv, a| set(&mut a.download, perl.bool_arg(sv, "download"))),
];

/// Reads and checks the options of Lugh::Model->new (after the class):
/// the model's value as given (a path, or a catalogue name that
/// lib/Lugh/Model.pm resolves) and the rest.
fn open_args(args: &Args) -> Result<(Sv, OpenArgs), Error> {
    let perl = args.perl();
    perl.class_arg(args.get(0))?;
    let given = Given::read(perl, &args.rest(1), &names(OPEN_OPTIONS).collect::<Vec<_>>())?;
    let mut open = OpenArgs { path: None, use_mmap: true, prefetch: false, download: true };
    given.apply(perl, OPEN_OPTIONS, &mut open)?;
    let Some(model) = given.get(perl, "model").filter(|_| open.path.is_some()) else {
        return Err(Error::Argument("missing model => $path (the GGUF file to load)".into()));
    };
    if open.prefetch && !open.use_mmap {
        return Err(Error::Argument("prefetch reads the mapping in ahead, so it needs use_mmap => 1".into()));
    }
    Ok((model, open))
}

/// What Lugh::Model->create is given: the file to write, and the shape of
/// the random model (the defaults are `RandomModel`'s).
struct CreateArgs {
    path: Option<PathBuf>,
    spec: RandomModel,
}

/// A dimension of the model to create.
fn size_arg(perl: Perl, sv: Sv, what: &str) -> Result<usize, Error> {
    let v = perl.int_arg(sv, what)?;
    usize::try_from(v).map_err(|_| Error::Argument(format!("{what} must be between 1 and 1048576, got {v}")))
}

/// The options of Lugh::Model->create (the other spellings, vocab_size and
/// so on, are Perl sugar in lib/Lugh/Model.pm).
const CREATE_OPTIONS: &[Opt<CreateArgs>] = &[
    Opt::new("path", |perl, sv, a: &mut CreateArgs| set(&mut a.path, perl.path_arg(sv, "path").map(Some))),
    Opt::new("n_vocab", |perl, sv, a| set(&mut a.spec.n_vocab, size_arg(perl, sv, "n_vocab"))),
    Opt::new("n_embd", |perl, sv, a| set(&mut a.spec.n_embd, size_arg(perl, sv, "n_embd"))),
    Opt::new("n_layer", |perl, sv, a| set(&mut a.spec.n_layer, size_arg(perl, sv, "n_layer"))),
    Opt::new("n_head", |perl, sv, a| set(&mut a.spec.n_head, size_arg(perl, sv, "n_head"))),
    Opt::new("n_head_kv", |perl, sv, a| set(&mut a.spec.n_head_kv, size_arg(perl, sv, "n_head_kv"))),
    Opt::new("n_ff", |perl, sv, a| set(&mut a.spec.n_ff, size_arg(perl, sv, "n_ff"))),
    Opt::new("n_ctx", |perl, sv, a| set(&mut a.spec.n_ctx, size_arg(perl, sv, "n_ctx"))),
    Opt::new("rope_freq_base", |perl, sv, a| {
        set(&mut a.spec.rope_freq_base, perl.number_arg(sv, "rope_freq_base").map(|v| v as f32))
    }),
    Opt::new("norm_eps", |perl, sv, a| set(&mut a.spec.norm_eps, perl.number_arg(sv, "norm_eps").map(|v| v as f32))),
    Opt::new("seed", |perl, sv, a| set(&mut a.spec.seed, perl.int_arg(sv, "seed").map(|v| Some(v as u64)))),
];

/// The hyperparameters and architecture facts: one accessor method each.
const ACCESSORS: &[Accessor<Model>] = &[
    Accessor { name: "n_layer", read: |m, perl| Ok(opt_int(perl, m.n_layer())) },
    Accessor { name: "n_embd", read: |m, perl| Ok(opt_int(perl, m.n_embd())) },
    Accessor { name: "n_head", read: |m, perl| Ok(opt_int(perl, m.n_head())) },
    Accessor { name: "n_head_kv", read: |m, perl| Ok(opt_int(perl, m.n_head_kv())) },
    Accessor { name: "n_ff", read: |m, perl| Ok(opt_int(perl, m.n_ff())) },
    Accessor { name: "n_ctx_train", read: |m, perl| Ok(opt_int(perl, m.n_ctx_train())) },
    Accessor { name: "n_vocab", read: |m, perl| Ok(opt_int(perl, m.n_vocab())) },
    Accessor { name: "rope_freq_base", read: |m, perl| Ok(m.rope_freq_base().map_or(perl.undef(), |v| perl.float(v))) },
    Accessor { name: "norm_eps", read: |m, perl| Ok(m.norm_eps().map_or(perl.undef(), |v| perl.float(v))) },
    Accessor { name: "arch_has_combined_qkv", read: |m, perl| Ok(perl.int(m.has_combined_qkv() as i64)) },
    Accessor { name: "arch_has_ffn_gate", read: |m, perl| Ok(perl.int(m.has_ffn_gate() as i64)) },
    Accessor { name: "arch_has_post_norm", read: |m, perl| Ok(perl.int(m.has_post_norm() as i64)) },
    Accessor { name: "arch_is_recurrent", read: |m, perl| Ok(perl.int(m.is_recurrent() as i64)) },
    Accessor { name: "mmap_size", read: |m, perl| Ok(perl.uint(m.mapped_bytes() as u64)) },
];

/// A GGUF value as a perl value (arrays become array references).
fn value_sv(perl: Perl, v: &Value) -> Sv {
    match v {
        Value::Bool(b) => perl.bool(*b),
        Value::Str(s) => perl.str(s),
        Value::F32(x) => perl.float(*x as f64),
        Value::F64(x) => perl.float(*x),
        Value::U64(x) => perl.uint(*x),
        Value::Array(a) => array_sv(perl, a),
        other => perl.int(other.as_i64().unwrap_or_default()),
    }
}

fn array_sv(perl: Perl, a: &Array) -> Sv {
    let av = perl.new_array(a.len());
    match a {
        Array::Str(v) => v.iter().for_each(|s| perl.push(av, Item::Str(s))),
        Array::F32(v) => v.iter().for_each(|&x| perl.push(av, Item::Float(x as f64))),
        Array::F64(v) => v.iter().for_each(|&x| perl.push(av, Item::Float(x))),
        Array::U64(v) => v.iter().for_each(|&x| perl.push(av, Item::Uint(x))),
        Array::Bool(v) => v.iter().for_each(|&b| perl.push(av, Item::Sv(perl.bool(b)))),
        Array::Nested(v) => v.iter().for_each(|inner| perl.push(av, Item::Sv(array_sv(perl, inner)))),
        ints => (0..ints.len()).for_each(|i| perl.push(av, Item::Int(ints.int_at(i).unwrap_or_default()))),
    }
    av
}

/// The option of save: dequantize (write every tensor as f32).
const SAVE_OPTIONS: &[Opt<bool>] =
    &[Opt::new("dequantize", |perl, sv, dequantize| set(dequantize, Ok(perl.is_true(sv))))];

xs_subs! { "Lugh::Model";
    // Lugh::Model->new (lib/Lugh/Model.pm) checks its arguments with
    // _check_new, resolves a catalogue name to its file, then opens with _new.
    // Opens the file that _check_new's checked options name (resolved from
    // a catalogue name by lib/Lugh/Model.pm): class, path, use_mmap, prefetch.
    fn _open(args) as "Lugh::Model->new" {
        args.expect(4, 4, "class, path, use_mmap, prefetch")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let path = path_arg(perl, args.get(1))?;
        let model = Model::open_with(&path, perl.bool_arg(args.get(2), "use_mmap")?, perl.bool_arg(args.get(3), "prefetch")?)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(model))))
    }

    fn _create(args) as "Lugh::Model->create" {
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let mut create = CreateArgs { path: None, spec: RandomModel::default() };
        Given::read_into(perl, &args.rest(1), CREATE_OPTIONS, &mut create)?;
        let path = create.path.ok_or_else(|| Error::Argument("missing path (where the .gguf file is written)".into()))?;
        create.spec.write(&path)?;
        let model = Model::open_with(&path, true, false)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(model))))
    }

    fn _create_options(args) {
        option_names(args, CREATE_OPTIONS)
    }

    fn _trainable_weights(args) as "Lugh::Model->get_trainable_weights" {
        args.expect(1, 2, "self, [context]")?;
        let perl = args.perl();
        let model = object_arc::<Model>(perl, args.get(0), "Lugh::Model")?;
        let ctx = if args.len() == 2 && perl.is_defined(args.get(1)) {
            Some(crate::subs::tensor::context_arg(perl, args.get(1))?)
        } else {
            None
        };
        let weights = trainable_weights(&model, ctx.as_ref())?;
        Ok(Ret::List(
            weights.into_iter().flat_map(|(name, w)| [perl.str(&name), crate::subs::autograd::new_variable(perl, w)]).collect(),
        ))
    }

    // self, path, then name => value options: dequantize (every tensor as f32)
    fn _save(args) as "Lugh::Model->save" {
        let perl = args.perl();
        let model = object_arc::<Model>(perl, args.get(0), "Lugh::Model")?;
        let mut dequantize = false;
        Given::read_into(perl, &args.rest(2), SAVE_OPTIONS, &mut dequantize)?;
        let path = perl.path_arg(args.get(1), "path")?;
        save_model(&model, &path, dequantize)?;
        Ok(Ret::One(perl.bool(true)))
    }

    // The options of new, read and checked once: the model's value as given,
    // use_mmap, prefetch, download.
    fn _check_new(args) as "Lugh::Model->new" {
        let (model, open) = open_args(args)?;
        let perl = args.perl();
        Ok(Ret::List(vec![model, perl.bool(open.use_mmap), perl.bool(open.prefetch), perl.bool(open.download)]))
    }

    fn _accessor_names(args) {
        accessor_names(args, ACCESSORS)
    }

    fn _accessor(args) {
        read_accessor(args, CLASS, ACCESSORS)
    }

    fn filename(args) {
        args.expect(1, 1, "self")?;
        let m = this(args)?;
        Ok(Ret::One(args.perl().str(&m.path().to_string_lossy())))
    }

    fn architecture(args) {
        args.expect(1, 1, "self")?;
        let m = this(args)?;
        let perl = args.perl();
        Ok(Ret::One(m.architecture().map_or(perl.undef(), |a| perl.str(a))))
    }

    fn gguf_version(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.gguf.version as i64)))
    }

    fn n_tensors(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.gguf.tensors.len() as i64)))
    }

    fn n_kv(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.gguf.kv.len() as i64)))
    }

    fn tensor_names(args) {
        args.expect(1, 1, "self")?;
        let m = this(args)?;
        let perl = args.perl();
        Ok(Ret::List(m.gguf.tensors.iter().map(|t| perl.str(&t.name)).collect()))
    }

    fn kv_keys(args) {
        args.expect(1, 1, "self")?;
        let m = this(args)?;
        let perl = args.perl();
        Ok(Ret::List(m.gguf.kv.iter().map(|(k, _)| perl.str(k)).collect()))
    }

    fn get_kv(args) {
        args.expect(2, 2, "self, key")?;
        let m = this(args)?;
        let perl = args.perl();
        let key = perl.string_arg(args.get(1), "key")?;
        Ok(Ret::One(m.gguf.get(&key).map_or(perl.undef(), |v| value_sv(perl, v))))
    }

    fn get_kv_type(args) {
        args.expect(2, 2, "self, key")?;
        let m = this(args)?;
        let perl = args.perl();
        let key = perl.string_arg(args.get(1), "key")?;
        let Some(v) = m.gguf.get(&key) else { return Ok(Ret::One(perl.undef())) };
        let name = match v.as_array() {
            Some(a) => format!("array[{}]", a.element_type().name()),
            None => v.value_type().name().to_string(),
        };
        Ok(Ret::One(perl.str(&name)))
    }

    fn tensor_info(args) {
        args.expect(2, 2, "self, name")?;
        let m = this(args)?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(1), "tensor name")?;
        let Some(t) = m.gguf.tensor(&name) else { return Ok(Ret::Empty) };
        let mut out = vec![perl.int(t.ggml_type as i64), perl.int(t.shape.len() as i64)];
        out.extend(t.shape.iter().map(|&d| perl.uint(d)));
        Ok(Ret::List(out))
    }

    fn tensor_type_name(args) {
        args.expect(2, 2, "self, name")?;
        let m = this(args)?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(1), "tensor name")?;
        Ok(Ret::One(m.tensor_type_name(&name).map_or(perl.undef(), |n| perl.str(n))))
    }

    fn n_params(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.n_params())))
    }

    fn size_bytes(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.size_bytes())))
    }

    fn file_type(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().str(&this(args)?.file_type())))
    }

    fn use_mmap(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.uses_mmap() as i64)))
    }
}
