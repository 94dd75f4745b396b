//! XS subs of Lugh::LoRA: a LoRA adapter loaded for a model, and the
//! `lora =>` argument of the forward, generate and scoring calls.
use super::autograd::new_variable;
use crate::engine::forward::lora::{AdapterUses, LoraAdapter};
use crate::engine::model::Model;
use crate::engine::train::lora::{LoraSpec, TrainableAdapter, TrainablePair};
use crate::engine::Error;
use crate::glue::{
    accessor_names, new_object, object_arc, option_names, read_accessor, set, Accessor, Args, Given, Opt, Perl, Ret, Sv,
};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::LoRA";

fn this(args: &Args) -> Result<Arc<LoraAdapter>, Error> {
    object_arc::<LoraAdapter>(args.perl(), args.get(0), CLASS)
}

/// Each row is a read-only accessor method of Lugh::LoRA.
const ACCESSORS: &[Accessor<LoraAdapter>] = &[
    Accessor { name: "alpha", read: |a, perl| Ok(perl.float(f64::from(a.alpha))) },
    Accessor { name: "n_weights", read: |a, perl| Ok(perl.int(a.n_weights() as i64)) },
    Accessor { name: "format", read: |a, perl| Ok(perl.str(a.format.name())) },
    Accessor { name: "file", read: |a, perl| Ok(perl.str(&a.path.to_string_lossy())) },
    Accessor { name: "trainable", read: |a, perl| Ok(perl.bool(a.trainable().is_some())) },
];

/// The matrices of an adapter made by create (`what` names the method a
/// loaded adapter lacks).
fn trainable_pairs<'a>(a: &'a LoraAdapter, what: &str) -> Result<&'a [TrainablePair], Error> {
    a.trainable().ok_or_else(|| {
        Error::Argument(format!("{what} only available on trainable LoRA adapters (made by Lugh::LoRA->create)"))
    })
}

/// One adapter: a Lugh::LoRA object (at its own scale) or [$lora, $scale].
fn adapter_use(perl: Perl, sv: Sv, what: &str) -> Result<(Arc<LoraAdapter>, f32), Error> {
    if perl.ref_kind(sv) == b'A' {
        let pair = perl.array_arg(sv, what)?;
        let [adapter, scale] = pair.as_slice() else {
            return Err(Error::Argument(format!("{what} must be a {CLASS} object or [\\$lora, \\$scale]")));
        };
        let adapter = object_arc::<LoraAdapter>(perl, *adapter, CLASS)?;
        let scale = perl.number_arg(*scale, &format!("{what}'s scale"))? as f32;
        return Ok((adapter, scale));
    }
    if perl.ref_kind(sv) == 0 {
        perl.check(what)?;
        return Err(Error::Argument(format!("{what} must be a {CLASS} object, got {}", perl.describe(sv))));
    }
    let adapter = object_arc::<LoraAdapter>(perl, sv, CLASS)?;
    let scale = adapter.scale();
    Ok((adapter, scale))
}

/// A `lora =>` argument: one adapter, [$lora, $scale], or an array of
/// adapters and such pairs.
pub fn lora_arg(perl: Perl, sv: Sv) -> Result<AdapterUses, Error> {
    if perl.ref_kind(sv) == b'A' {
        let items = perl.array_arg(sv, "lora")?;
        // [$lora, $scale] alone is one adapter with a scale
        if items.len() == 2 && perl.ref_kind(items[1]) == 0 && perl.is_defined(items[1]) {
            return Ok(vec![adapter_use(perl, sv, "lora")?]);
        }
        return items
            .iter()
            .enumerate()
            .map(|(i, &item)| adapter_use(perl, item, &format!("lora adapter {i}")))
            .collect();
    }
    Ok(vec![adapter_use(perl, sv, "lora")?])
}

/// What Lugh::LoRA->create is given (its defaults are set in `_create`).
struct CreateArgs {
    model: Option<Arc<Model>>,
    rank: usize,
    alpha: f32,
    scale: f32,
    targets: Vec<String>,
    seed: Option<u64>,
}

/// The options of Lugh::LoRA->create.
const CREATE_OPTIONS: &[Opt<CreateArgs>] = &[
    Opt::new("model", |perl, sv, a: &mut CreateArgs| {
        let model = object_arc::<Model>(perl, sv, "Lugh::Model")
            .map_err(|_| Error::Argument(format!("model must be a Lugh::Model object, got {}", perl.describe(sv))));
        set(&mut a.model, model.map(Some))
    }),
    Opt::new("rank", |perl, sv, a| set(&mut a.rank, perl.int_arg(sv, "rank").map(|v| usize::try_from(v).unwrap_or(0)))),
    Opt::new("alpha", |perl, sv, a| set(&mut a.alpha, perl.number_arg(sv, "alpha").map(|v| v as f32))),
    Opt::new("scale", |perl, sv, a| set(&mut a.scale, perl.number_arg(sv, "scale").map(|v| v as f32))),
    Opt::new("targets", |perl, sv, a| {
        let targets = perl.array_arg(sv, "targets").and_then(|list| {
            list.into_iter().map(|t| perl.string_arg(t, "a LoRA target")).collect::<Result<Vec<_>, _>>()
        });
        set(&mut a.targets, targets)
    }),
    Opt::new("seed", |perl, sv, a| set(&mut a.seed, perl.int_arg(sv, "seed").map(|v| Some(v as u64)))),
];

xs_subs! { "Lugh::LoRA";
    fn _new(args) as "Lugh::LoRA->new" {
        args.expect(4, 4, "class, adapter, model, scale")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let path = perl.path_arg(args.get(1), "adapter")?;
        let model = object_arc::<Model>(perl, args.get(2), "Lugh::Model")?;
        let scale = perl.number_arg(args.get(3), "scale")? as f32;
        let adapter = LoraAdapter::load(&path, &model)?;
        adapter.set_scale(scale)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(adapter))))
    }

    fn _create(args) as "Lugh::LoRA->create" {
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let mut create = CreateArgs {
            model: None,
            rank: 16,
            alpha: 32.0,
            scale: 1.0,
            targets: vec!["attn_q".into(), "attn_v".into()],
            seed: None,
        };
        Given::read_into(perl, &args.rest(1), CREATE_OPTIONS, &mut create)?;
        let model = create.model.ok_or_else(|| Error::Argument("missing model (a Lugh::Model)".into()))?;
        let spec = LoraSpec {
            rank: create.rank,
            alpha: create.alpha,
            scale: create.scale,
            targets: &create.targets,
            seed: create.seed,
        };
        let adapter = LoraAdapter::create(&model, &spec)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(adapter))))
    }

    fn _create_options(args) {
        option_names(args, CREATE_OPTIONS)
    }

    fn get_weight_tensor(args) as "Lugh::LoRA->get_weight_tensor" {
        args.expect(3, 3, "self, name, 'a' or 'b'")?;
        let perl = args.perl();
        let a = this(args)?;
        let pairs = trainable_pairs(&a, "get_weight_tensor")?;
        let name = perl.string_arg(args.get(1), "name")?;
        let which = perl.string_arg(args.get(2), "type")?;
        let (_, ta, tb) = pairs
            .iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(|| Error::Argument(format!("LoRA weight '{name}' not found")))?;
        let t = match which.as_str() {
            "a" | "A" => ta,
            "b" | "B" => tb,
            _ => return Err(Error::Argument(format!("type must be 'a' or 'b', got '{which}'")).into()),
        };
        Ok(Ret::One(new_variable(perl, t.clone())))
    }

    fn trainable_parameters(args) as "Lugh::LoRA->trainable_parameters" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        let a = this(args)?;
        let pairs = trainable_pairs(&a, "trainable_parameters()")?;
        Ok(Ret::List(pairs.iter().flat_map(|(_, ta, tb)| [new_variable(perl, ta.clone()), new_variable(perl, tb.clone())]).collect()))
    }

    fn _save(args) as "Lugh::LoRA->save" {
        args.expect(2, 2, "self, path")?;
        let perl = args.perl();
        let a = this(args)?;
        let path = perl.path_arg(args.get(1), "path")?;
        a.save(&path)?;
        Ok(Ret::One(perl.bool(true)))
    }

    fn scale(args) as "Lugh::LoRA->scale" {
        args.expect(1, 2, "self, [scale]")?;
        let a = this(args)?;
        let perl = args.perl();
        if args.len() == 2 {
            a.set_scale(perl.number_arg(args.get(1), "scale")? as f32)?;
        }
        Ok(Ret::One(perl.float(f64::from(a.scale()))))
    }

    fn weight_names(args) {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::List(this(args)?.weight_names().iter().map(|n| perl.str(n)).collect()))
    }

    fn _accessor_names(args) {
        accessor_names(args, ACCESSORS)
    }

    fn _accessor(args) {
        read_accessor(args, CLASS, ACCESSORS)
    }
}
