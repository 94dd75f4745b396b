//! XS subs of Lugh::Model. Option handling lives in Lugh/Model.pm.
use crate::engine::gguf::{Array, Value};
use crate::engine::model::Model;
use crate::engine::Error;
use crate::glue::{as_method, new_object, object_arc, Args, Item, Perl, Ret, Sv};
use crate::xs_subs;
use std::path::PathBuf;
use std::sync::Arc;

const CLASS: &str = "Lugh::Model";

fn this(args: &Args) -> Result<Arc<Model>, Error> {
    object_arc::<Model>(args.perl(), args.get(0), CLASS)
}

/// A path from a perl string: its bytes as they are (file names are bytes).
fn path_arg(perl: Perl, sv: Sv) -> Result<PathBuf, Error> {
    use std::os::unix::ffi::OsStrExt;
    if !perl.is_defined(sv) || perl.ref_kind(sv) != 0 {
        return Err(Error::Argument(format!("model path must be a file name, got {}", perl.describe(sv))));
    }
    let text = perl.text(sv);
    // Characters above 0xFF can only be meant as UTF-8; otherwise use the bytes.
    let bytes: Vec<u8> = if text.chars().all(|c| (c as u32) < 256) {
        text.chars().map(|c| c as u8).collect()
    } else {
        text.into_bytes()
    };
    perl.check("model path")?;
    if bytes.is_empty() {
        return Err(Error::Argument("model path is empty".into()));
    }
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

fn opt_int(perl: Perl, v: Option<i64>) -> Sv {
    v.map_or(perl.undef(), |v| perl.int(v))
}

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
        Array::Array(v) => v.iter().for_each(|inner| perl.push(av, Item::Sv(array_sv(perl, inner)))),
        ints => (0..ints.len()).for_each(|i| perl.push(av, Item::Int(ints.int_at(i).unwrap_or_default()))),
    }
    av
}

xs_subs! { "Lugh::Model";
    fn _open(args) as "Lugh::Model->new" {
        args.expect(4, 4, "class, path, use_mmap, prefetch")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let path = path_arg(perl, args.get(1))?;
        let use_mmap = perl.is_true(args.get(2));
        let prefetch = perl.is_true(args.get(3));
        perl.check("use_mmap or prefetch")?;
        let model = Model::open_with(&path, use_mmap, prefetch)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(model))))
    }

    fn mmap_size(args) {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.mapped_bytes() as u64)))
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

    fn _hparam(args) {
        args.expect(2, 2, "self, name")?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(1), "hyperparameter")?;
        as_method(&format!("{CLASS}->{name}"), || {
            let m = this(args)?;
            Ok(Ret::One(match name.as_str() {
                "n_layer" => opt_int(perl, m.n_layer()),
                "n_embd" => opt_int(perl, m.n_embd()),
                "n_head" => opt_int(perl, m.n_head()),
                "n_head_kv" => opt_int(perl, m.n_head_kv()),
                "n_ff" => opt_int(perl, m.n_ff()),
                "n_ctx_train" => opt_int(perl, m.n_ctx_train()),
                "n_vocab" => opt_int(perl, m.n_vocab()),
                "rope_freq_base" => m.rope_freq_base().map_or(perl.undef(), |v| perl.float(v)),
                "norm_eps" => m.norm_eps().map_or(perl.undef(), |v| perl.float(v)),
                "arch_has_combined_qkv" => perl.int(m.has_combined_qkv() as i64),
                "arch_has_ffn_gate" => perl.int(m.has_ffn_gate() as i64),
                "arch_has_post_norm" => perl.int(m.has_post_norm() as i64),
                "arch_is_recurrent" => perl.int(m.is_recurrent() as i64),
                other => return Err(Error::Argument(format!("unknown hyperparameter '{other}'"))),
            }))
        })
    }
}
