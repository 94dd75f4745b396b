//! XS subs of Lugh::LoRA: a LoRA adapter loaded for a model, and the
//! `lora =>` argument of the forward, generate and scoring calls.
use crate::engine::lora::{AdapterUses, LoraAdapter};
use crate::engine::model::Model;
use crate::engine::Error;
use crate::glue::{accessor_names, new_object, object_arc, read_accessor, Accessor, Args, Perl, Ret, Sv};
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
    // adapters made for training are issue #17's; a loaded one is not trainable
    Accessor { name: "trainable", read: |_, perl| Ok(perl.bool(false)) },
];

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
