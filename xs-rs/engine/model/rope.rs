//! RoPE scaling: what a model was trained with (its GGUF keys), what a caller
//! asks for (Lugh::RoPE), and the settings a graph uses, resolved from both
//! the way llama.cpp's `llama_context` resolves its `cparams`.
use crate::engine::model::arch::HParams;
use crate::engine::{Error, Result};

/// How positions beyond the training context are reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScalingType {
    /// No scaling: the frequency scale is 1 whatever else says.
    None,
    /// Positions divided by the scale factor (linear interpolation).
    #[default]
    Linear,
    /// YaRN: interpolation by frequency band plus a magnitude correction.
    Yarn,
    /// LongRoPE: per-dimension long/short factor tensors (Phi-3).
    LongRope,
}

impl ScalingType {
    /// The names (GGUF's `rope.scaling.type`, llama.cpp's `--rope-scaling`),
    /// in the order of Lugh::RoPE's integer constants.
    pub const NAMES: [&'static str; 4] = ["none", "linear", "yarn", "longrope"];

    pub fn from_name(name: &str) -> Option<ScalingType> {
        Some(match name {
            "none" => ScalingType::None,
            "linear" => ScalingType::Linear,
            "yarn" => ScalingType::Yarn,
            "longrope" => ScalingType::LongRope,
            _ => return None,
        })
    }

    pub fn from_index(i: i64) -> Option<ScalingType> {
        usize::try_from(i).ok().and_then(|i| Self::NAMES.get(i)).and_then(|n| Self::from_name(n))
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self.index()]
    }

    pub fn index(self) -> usize {
        match self {
            ScalingType::None => 0,
            ScalingType::Linear => 1,
            ScalingType::Yarn => 2,
            ScalingType::LongRope => 3,
        }
    }
}

/// What a caller asks for; None leaves the model's value (llama.cpp's
/// "unset": 0 or -1 in its context parameters).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopeRequest {
    pub scaling_type: Option<ScalingType>,
    pub freq_base: Option<f32>,
    pub freq_scale: Option<f32>,
    /// The context the model was trained on, for YaRN's band limits.
    pub n_ctx_orig: Option<usize>,
    /// The context to reach: without freq_scale, the scale is
    /// n_ctx_orig / target_ctx.
    pub target_ctx: Option<usize>,
    /// YaRN's mix of extrapolation (None: 1 for YaRN, else 0).
    pub ext_factor: Option<f32>,
    /// A factor on RoPE's magnitude, on top of YaRN's own and the model's
    /// `rope.scaling.attn_factor`.
    pub attn_factor: Option<f32>,
    pub beta_fast: Option<f32>,
    pub beta_slow: Option<f32>,
}

impl RopeRequest {
    /// Refuses values no RoPE can use, naming the option.
    pub fn check(&self) -> Result<()> {
        let positive = |name: &str, v: Option<f32>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => {
                Err(Error::Argument(format!("rope {name} must be a finite number > 0, got {x}")))
            }
            _ => Ok(()),
        };
        positive("freq_base", self.freq_base)?;
        positive("freq_scale", self.freq_scale)?;
        positive("beta_fast", self.beta_fast)?;
        positive("beta_slow", self.beta_slow)?;
        positive("attn_factor", self.attn_factor)?;
        if let Some(x) = self.ext_factor.filter(|x| !(x.is_finite() && (0.0..=1.0).contains(x))) {
            return Err(Error::Argument(format!("rope ext_factor must be between 0 and 1, got {x}")));
        }
        for (name, v) in [("n_ctx_orig", self.n_ctx_orig), ("target_ctx", self.target_ctx)] {
            if v == Some(0) {
                return Err(Error::Argument(format!("rope {name} must be an integer >= 1, got 0")));
            }
        }
        Ok(())
    }
}

/// Lugh::RoPE's values as its user gave them, 0 (or a negative ext_factor)
/// meaning "the model's" or "computed".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    pub scaling_type: ScalingType,
    pub n_ctx_orig: usize,
    pub target_ctx: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

impl RopeConfig {
    /// Checks the values (the request they make must be valid) and fills in
    /// freq_scale from the contexts when both are known: n_ctx_orig /
    /// target_ctx, or 1 without scaling.
    pub fn new(mut c: RopeConfig) -> Result<RopeConfig> {
        let non_negative = |name: &str, v: f32| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(Error::Argument(format!("rope {name} must be a finite number >= 0 (0: the model's), got {v}")))
            }
        };
        non_negative("freq_base", c.freq_base)?;
        non_negative("freq_scale", c.freq_scale)?;
        if c.ext_factor.is_nan() {
            return Err(Error::Argument("rope ext_factor must be a number (-1: automatic), got NaN".into()));
        }
        if c.freq_scale == 0.0 {
            c.freq_scale = match c.scaling_type {
                ScalingType::None => 1.0,
                _ if c.n_ctx_orig > 0 && c.target_ctx > 0 => (c.n_ctx_orig as f64 / c.target_ctx as f64) as f32,
                _ => 0.0,
            };
        }
        c.request().check()?;
        Ok(c)
    }

    /// What these values ask of a session.
    pub fn request(&self) -> RopeRequest {
        let given = |v: f32| (v > 0.0).then_some(v);
        let count = |v: usize| (v > 0).then_some(v);
        RopeRequest {
            scaling_type: Some(self.scaling_type),
            freq_base: given(self.freq_base),
            freq_scale: given(self.freq_scale),
            n_ctx_orig: count(self.n_ctx_orig),
            target_ctx: count(self.target_ctx),
            ext_factor: (self.ext_factor >= 0.0).then_some(self.ext_factor),
            attn_factor: Some(self.attn_factor),
            beta_fast: Some(self.beta_fast),
            beta_slow: Some(self.beta_slow),
        }
    }

    /// A model's own settings, as values that ask for them again.
    pub fn of_model(hp: &HParams) -> RopeConfig {
        let scale = match hp.rope_scaling {
            ScalingType::None => 1.0,
            _ => hp.rope_freq_scale,
        };
        RopeConfig {
            scaling_type: hp.rope_scaling,
            n_ctx_orig: hp.n_ctx_orig_yarn,
            target_ctx: ((hp.n_ctx_orig_yarn as f64 / scale as f64) as usize).max(1),
            freq_base: hp.rope_freq_base,
            freq_scale: scale,
            ext_factor: -1.0,
            attn_factor: 1.0,
            beta_fast: hp.yarn_beta_fast,
            beta_slow: hp.yarn_beta_slow,
        }
    }
}

/// The RoPE parameters of a graph's non-sliding-window layers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeSettings {
    pub scaling_type: ScalingType,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub n_ctx_orig: usize,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

impl RopeSettings {
    /// The model's own settings with the request's overrides, as llama.cpp
    /// derives them: no scaling means a scale of 1; YaRN extrapolates fully
    /// unless told otherwise, and its magnitude correction is divided back
    /// out of the attention factor because ggml's rope applies it again.
    pub fn resolve(hp: &HParams, request: &RopeRequest) -> RopeSettings {
        let scaling_type = request.scaling_type.unwrap_or(hp.rope_scaling);
        let n_ctx_orig = request.n_ctx_orig.unwrap_or(hp.n_ctx_orig_yarn);
        let from_target = request.target_ctx.map(|target| (n_ctx_orig as f64 / target as f64) as f32);
        let freq_scale = match scaling_type {
            ScalingType::None => 1.0,
            _ => request.freq_scale.or(from_target).unwrap_or(hp.rope_freq_scale),
        };
        let ext_factor = request.ext_factor.unwrap_or(if scaling_type == ScalingType::Yarn { 1.0 } else { 0.0 });
        let mut attn_factor = request.attn_factor.unwrap_or(1.0);
        if ext_factor != 0.0 {
            let factor = 1.0 / freq_scale;
            let mscale = |m: f32| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
            if hp.rope_yarn_log_mul != 0.0 {
                // the magnitude correction relative to mscale_all_dim's, in
                // llama.cpp's order of operations (DeepSeek-V2's mscale is
                // mscale_all_dim itself)
                let log_mul = hp.rope_yarn_log_mul;
                let own = if hp.yarn_log_mul_both_sides && log_mul != 1.0 { log_mul } else { 1.0 };
                attn_factor *= mscale(own) / mscale(log_mul) * (1.0 / (1.0 + 0.1 * factor.ln()));
            } else {
                attn_factor *= mscale(1.0) / (1.0 + 0.1 * factor.ln());
            }
        }
        RopeSettings {
            scaling_type,
            freq_base: request.freq_base.unwrap_or(hp.rope_freq_base),
            freq_scale,
            n_ctx_orig,
            ext_factor,
            attn_factor: attn_factor * hp.rope_attn_factor,
            beta_fast: request.beta_fast.unwrap_or(hp.yarn_beta_fast),
            beta_slow: request.beta_slow.unwrap_or(hp.yarn_beta_slow),
        }
    }

    /// The context the model handles with these settings: its original
    /// context stretched by the scale (llama.cpp's YaRN adjustment of
    /// n_ctx_train), or the training context when unscaled.
    pub fn effective_ctx(&self, hp: &HParams) -> usize {
        if self.freq_scale < 1.0 {
            ((self.n_ctx_orig as f64 / self.freq_scale as f64) as usize).max(hp.n_ctx_train)
        } else {
            hp.n_ctx_train
        }
    }

    /// A fingerprint of the values, to tell graphs built with different
    /// settings apart.
    pub fn key(&self) -> [u32; 8] {
        [
            self.scaling_type.index() as u32,
            self.freq_base.to_bits(),
            self.freq_scale.to_bits(),
            self.n_ctx_orig.min(u32::MAX as usize) as u32,
            self.ext_factor.to_bits(),
            self.attn_factor.to_bits(),
            self.beta_fast.to_bits(),
            self.beta_slow.to_bits(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::validate::tests::sample_hparams;

    #[test]
    fn the_model_settings_resolve_to_themselves() {
        let hp = sample_hparams();
        let r = RopeSettings::resolve(&hp, &RopeRequest::default());
        assert_eq!(r.scaling_type, ScalingType::Linear);
        assert_eq!((r.freq_base, r.freq_scale, r.ext_factor, r.attn_factor), (10000.0, 1.0, 0.0, 1.0));
        assert_eq!(r.n_ctx_orig, hp.n_ctx_orig_yarn);
    }

    #[test]
    fn none_never_scales_and_yarn_extrapolates() {
        let hp = sample_hparams();
        let none = RopeRequest { scaling_type: Some(ScalingType::None), freq_scale: Some(0.25), ..Default::default() };
        assert_eq!(RopeSettings::resolve(&hp, &none).freq_scale, 1.0);
        let yarn = RopeRequest { scaling_type: Some(ScalingType::Yarn), freq_scale: Some(0.25), ..Default::default() };
        let r = RopeSettings::resolve(&hp, &yarn);
        assert_eq!(r.ext_factor, 1.0);
        // get_mscale(4) / (1 + 0.1 ln 4) = 1: ggml's kernel applies the mscale
        assert!((r.attn_factor - 1.0).abs() < 1e-6, "{}", r.attn_factor);
        // a scale above 1 (compression) keeps only the division
        let up = RopeRequest { scaling_type: Some(ScalingType::Yarn), freq_scale: Some(2.0), ..Default::default() };
        let r = RopeSettings::resolve(&hp, &up);
        assert!((r.attn_factor - 1.0 / (1.0 + 0.1 * 0.5f32.ln())).abs() < 1e-6);
    }

    #[test]
    fn a_target_context_gives_the_scale_and_the_model_asks_for_itself() {
        let hp = sample_hparams();
        let c = RopeConfig::new(RopeConfig {
            scaling_type: ScalingType::Linear,
            n_ctx_orig: 0,
            target_ctx: 512,
            ..RopeConfig::of_model(&hp)
        })
        .unwrap();
        let r = RopeSettings::resolve(&hp, &RopeRequest { freq_scale: None, ..c.request() });
        assert_eq!(r.freq_scale, 128.0 / 512.0);
        let own = RopeSettings::resolve(&hp, &RopeConfig::of_model(&hp).request());
        assert_eq!(own, RopeSettings::resolve(&hp, &RopeRequest::default()));
        let linear = RopeConfig { n_ctx_orig: 4096, target_ctx: 16384, freq_scale: 0.0, ..RopeConfig::of_model(&hp) };
        assert_eq!(RopeConfig::new(linear).unwrap().freq_scale, 0.25);
        let bad = RopeConfig { freq_scale: -1.0, ..RopeConfig::of_model(&hp) };
        assert!(RopeConfig::new(bad).unwrap_err().to_string().contains("freq_scale"));
    }

    #[test]
    fn bad_requests_name_the_option() {
        let bad = |r: RopeRequest, what: &str| {
            let e = r.check().unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        bad(RopeRequest { freq_scale: Some(-1.0), ..Default::default() }, "freq_scale");
        bad(RopeRequest { freq_base: Some(0.0), ..Default::default() }, "freq_base");
        bad(RopeRequest { ext_factor: Some(2.0), ..Default::default() }, "ext_factor");
        bad(RopeRequest { beta_fast: Some(f32::NAN), ..Default::default() }, "beta_fast");
        bad(RopeRequest { n_ctx_orig: Some(0), ..Default::default() }, "n_ctx_orig");
        assert!(RopeRequest::default().check().is_ok());
    }

    #[test]
    fn names_and_indices_round_trip() {
        for (i, name) in ScalingType::NAMES.iter().enumerate() {
            let t = ScalingType::from_name(name).unwrap();
            assert_eq!((t.name(), t.index()), (*name, i));
            assert_eq!(ScalingType::from_index(i as i64), Some(t));
        }
        assert_eq!(ScalingType::from_index(4), None);
        assert_eq!(ScalingType::from_index(-1), None);
        assert_eq!(ScalingType::from_name("dynamic"), None);
    }
}
