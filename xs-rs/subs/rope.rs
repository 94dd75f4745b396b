//! XS subs of Lugh::RoPE: a RoPE scaling configuration (the presets are in
//! Lugh/RoPE.pm).
use crate::engine::model::arch::{spec_for, HParams};
use crate::engine::model::rope::{RopeConfig, ScalingType};
use crate::engine::model::Model;
use crate::engine::Error;
use crate::glue::{
    accessor_names, new_object, object_arc, option_names, read_accessor, set, Accessor, Given, Opt, Perl, Ret, Sv,
};
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
            .ok_or_else(|| Error::Argument(format!("Unknown scaling_type {i} ({})", valid())));
    }
    ScalingType::from_name(&text.to_ascii_lowercase())
        .ok_or_else(|| Error::Argument(format!("Unknown scaling_type '{text}' ({})", valid())))
}

/// What new() makes when given nothing: 0 means "the model's" and an
/// ext_factor of -1 "computed".
const REQUESTED_DEFAULT: RopeConfig = RopeConfig {
    scaling_type: ScalingType::None,
    n_ctx_orig: 0,
    target_ctx: 0,
    freq_base: 0.0,
    freq_scale: 0.0,
    ext_factor: -1.0,
    attn_factor: 1.0,
    beta_fast: 32.0,
    beta_slow: 1.0,
};

/// A context length of new() (0: the model's).
fn context_arg(perl: Perl, sv: Sv, what: &str) -> Result<usize, Error> {
    let v = perl.int_arg(sv, what)?;
    usize::try_from(v).map_err(|_| Error::Argument(format!("rope {what} must be an integer >= 0, got {v}")))
}

/// A factor of new(), as the engine keeps it.
fn factor_arg(perl: Perl, sv: Sv, what: &str) -> Result<f32, Error> {
    perl.number_arg(sv, what).map(|v| v as f32)
}

/// The options of new(), in the order its messages list them.
const NEW_OPTIONS: &[Opt<RopeConfig>] = &[
    Opt::new("scaling_type", |perl, sv, c: &mut RopeConfig| set(&mut c.scaling_type, scaling_type_arg(perl, sv))),
    Opt::new("n_ctx_orig", |perl, sv, c| set(&mut c.n_ctx_orig, context_arg(perl, sv, "n_ctx_orig"))),
    Opt::new("target_ctx", |perl, sv, c| set(&mut c.target_ctx, context_arg(perl, sv, "target_ctx"))),
    Opt::new("freq_base", |perl, sv, c| set(&mut c.freq_base, factor_arg(perl, sv, "freq_base"))),
    Opt::new("freq_scale", |perl, sv, c| set(&mut c.freq_scale, factor_arg(perl, sv, "freq_scale"))),
    Opt::new("ext_factor", |perl, sv, c| set(&mut c.ext_factor, factor_arg(perl, sv, "ext_factor"))),
    Opt::new("attn_factor", |perl, sv, c| set(&mut c.attn_factor, factor_arg(perl, sv, "attn_factor"))),
    Opt::new("beta_fast", |perl, sv, c| set(&mut c.beta_fast, factor_arg(perl, sv, "beta_fast"))),
    Opt::new("beta_slow", |perl, sv, c| set(&mut c.beta_slow, factor_arg(perl, sv, "beta_slow"))),
];

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
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let mut requested = REQUESTED_DEFAULT;
        Given::read_into(perl, &args.rest(1), NEW_OPTIONS, &mut requested)?;
        let config = RopeConfig::new(requested)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(config))))
    }

    fn _new_options(args) {
        option_names(args, NEW_OPTIONS)
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
