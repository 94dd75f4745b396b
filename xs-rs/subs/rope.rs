//! XS subs of Lugh::RoPE: a RoPE scaling configuration (the constructors'
//! defaults and presets are in Lugh/RoPE.pm).
use crate::engine::model::arch::{spec_for, HParams};
use crate::engine::model::rope::{RopeConfig, ScalingType};
use crate::engine::model::Model;
use crate::engine::Error;
use crate::glue::{accessor_names, new_object, object_arc, read_accessor, Accessor, Perl, Ret, Sv};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::RoPE";

/// Each row is a read-only accessor method of Lugh::RoPE.
const ACCESSORS: &[Accessor<RopeConfig>] = &[
    Accessor { name: "scaling_type", read: |c, perl| Ok(perl.int(c.scaling_type.index() as i64)) },
    Accessor { name: "scaling_type_name", read: |c, perl| Ok(perl.str(c.scaling_type.name())) },
    Accessor { name: "n_ctx_orig", read: |c, perl| Ok(perl.int(c.n_ctx_orig as i64)) },
    Accessor { name: "target_ctx", read: |c, perl| Ok(perl.int(c.target_ctx as i64)) },
    Accessor { name: "freq_base", read: |c, perl| Ok(perl.float(f64::from(c.freq_base))) },
    Accessor { name: "freq_scale", read: |c, perl| Ok(perl.float(f64::from(c.freq_scale))) },
    Accessor { name: "ext_factor", read: |c, perl| Ok(perl.float(f64::from(c.ext_factor))) },
    Accessor { name: "attn_factor", read: |c, perl| Ok(perl.float(f64::from(c.attn_factor))) },
    Accessor { name: "beta_fast", read: |c, perl| Ok(perl.float(f64::from(c.beta_fast))) },
    Accessor { name: "beta_slow", read: |c, perl| Ok(perl.float(f64::from(c.beta_slow))) },
];

/// A scaling type given by name ('yarn') or by constant (2).
fn scaling_type_arg(perl: Perl, sv: Sv) -> Result<ScalingType, Error> {
    let valid = || format!("valid: {} or 0..3", ScalingType::NAMES.join(", "));
    let (bytes, _) = perl.raw_str(sv);
    let text = String::from_utf8_lossy(bytes).to_string();
    if let Ok(i) = text.trim().parse::<i64>() {
        return ScalingType::from_index(i)
            .ok_or_else(|| Error::Argument(format!("rope scaling_type {i} is not known ({})", valid())));
    }
    ScalingType::from_name(&text.to_ascii_lowercase())
        .ok_or_else(|| Error::Argument(format!("rope scaling_type '{text}' is not known ({})", valid())))
}

/// A Lugh::RoPE object's configuration (for the rope => options).
pub fn rope_arg(perl: Perl, sv: Sv) -> Result<Arc<RopeConfig>, Error> {
    if perl.ref_kind(sv) == 0 {
        perl.check("rope")?;
        return Err(Error::Argument(format!("rope must be a {CLASS} object, got {}", perl.describe(sv))));
    }
    object_arc::<RopeConfig>(perl, sv, CLASS)
}

xs_subs! { "Lugh::RoPE";
    fn _new(args) as "Lugh::RoPE->new" {
        args.expect(10, 10, "class, scaling_type, n_ctx_orig, target_ctx, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let count = |i: usize, what: &str| -> Result<usize, Error> {
            let v = perl.int_arg(args.get(i), what)?;
            usize::try_from(v).map_err(|_| Error::Argument(format!("rope {what} must be an integer >= 0, got {v}")))
        };
        let number = |i: usize, what: &str| perl.number_arg(args.get(i), what).map(|v| v as f32);
        let config = RopeConfig::new(RopeConfig {
            scaling_type: scaling_type_arg(perl, args.get(1))?,
            n_ctx_orig: count(2, "n_ctx_orig")?,
            target_ctx: count(3, "target_ctx")?,
            freq_base: number(4, "freq_base")?,
            freq_scale: number(5, "freq_scale")?,
            ext_factor: number(6, "ext_factor")?,
            attn_factor: number(7, "attn_factor")?,
            beta_fast: number(8, "beta_fast")?,
            beta_slow: number(9, "beta_slow")?,
        })?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(config))))
    }

    fn _from_model(args) as "Lugh::RoPE->from_model" {
        args.expect(2, 2, "class, model")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let model = object_arc::<Model>(perl, args.get(1), "Lugh::Model")?;
        let arch = model.architecture().unwrap_or("(none)").to_string();
        let hp = HParams::load(&model, spec_for(&arch, model.path())?)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(RopeConfig::of_model(&hp)))))
    }

    fn _accessor_names(args) {
        accessor_names(args, ACCESSORS)
    }

    fn _accessor(args) {
        read_accessor(args, CLASS, ACCESSORS)
    }
}
