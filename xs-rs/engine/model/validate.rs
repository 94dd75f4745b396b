//! Semantic checks between the GGUF reader and the graph builder. The reader
//! proves that a file is well-formed (sizes, offsets, counts); this module
//! proves that a well-formed file is one the graph can run: every weight has
//! a type its op accepts, and every hyperparameter is in the range the ops
//! assume. ggml asserts (abort) or calls through null kernels (segfault) on
//! what is refused here, so everything it would check is checked first, with
//! an error naming the file, the tensor or key, and the rule.
//!
//! Shapes are checked where the weights are wanted (weights.rs derives each
//! expected shape from the hyperparameters); this module says which types a
//! role allows and which hyperparameter values are usable.
use crate::engine::ggml::sys;
use crate::engine::model::arch::{ArchSpec, HParams, Rope};
use crate::engine::model::Model;
use crate::engine::{Error, Result};
use std::path::Path;

/// What a weight feeds, which decides the types it may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The left operand of a matrix multiplication (projections, output).
    MatMul,
    /// Rows looked up by token id (token_embd).
    GetRows,
    /// Multiplied elementwise after a norm.
    Norm,
    /// Added elementwise.
    Bias,
}

impl Role {
    fn describe(self) -> &'static str {
        match self {
            Role::MatMul => "a matrix-multiplication weight",
            Role::GetRows => "an embedding table",
            Role::Norm => "a norm weight",
            Role::Bias => "a bias",
        }
    }
}

/// The types ggml-cpu's get_rows converts to f32 (ops.cpp
/// `ggml_compute_forward_get_rows`), less I32 (copied as bits, not values)
/// and Q8_1 (it has no `to_float`: a null call).
const GET_ROWS_TYPES: &[u32] = &[
    0,  // f32
    1,  // f16
    30, // bf16
    2, 3, 6, 7, 8, // q4_0 q4_1 q5_0 q5_1 q8_0
    10, 11, 12, 13, 14, // q2_K .. q6_K
    16, 17, 18, 19, 20, 21, 22, 23, 29, // iq*
    34, 35, // tq1_0 tq2_0
    39, 40, 41, 42, // mxfp4 nvfp4 q1_0 q2_0
];

/// Whether a weight of `ggml_type` may play `role`.
pub fn type_allowed(role: Role, ggml_type: u32) -> bool {
    match role {
        Role::MatMul => sys::cpu_can_mul_mat(ggml_type),
        Role::GetRows => GET_ROWS_TYPES.contains(&ggml_type) && sys::type_traits(ggml_type).is_some(),
        Role::Norm | Role::Bias => ggml_type == sys::GGML_TYPE_F32 as u32,
    }
}

fn type_name(ggml_type: u32) -> String {
    sys::type_traits(ggml_type).map(|t| t.name.to_string()).unwrap_or_else(|| format!("unknown type {ggml_type}"))
}

/// The names of the types `role` allows, for error messages.
fn allowed_names(role: Role) -> String {
    let names: Vec<String> = (0..sys::GGML_TYPE_COUNT).filter(|&t| type_allowed(role, t)).map(type_name).collect();
    names.join(", ")
}

/// Refuses a weight whose type its role does not allow.
pub fn tensor_type(path: &Path, name: &str, role: Role, ggml_type: u32, arch: &str) -> Result<()> {
    if type_allowed(role, ggml_type) {
        return Ok(());
    }
    Err(Error::Invalid {
        path: path.to_path_buf(),
        what: format!(
            "tensor {name} has type {}, which {} cannot have (architecture {arch}; allowed: {})",
            type_name(ggml_type),
            role.describe(),
            allowed_names(role)
        ),
    })
}

/// llama.cpp's LLAMA_MAX_EXPERTS.
const MAX_EXPERTS: usize = 512;

/// The ranges the graph builder and ggml's ops assume of the hyperparameters.
pub fn hparams(path: &Path, spec: &ArchSpec, hp: &HParams) -> Result<()> {
    let arch = spec.name;
    let bad = |key: &str, rule: String| Error::Invalid {
        path: path.to_path_buf(),
        what: format!("{arch}.{key}: {rule} (architecture {arch})"),
    };
    if hp.n_head_kv > hp.n_head || hp.n_head % hp.n_head_kv != 0 {
        return Err(bad(
            "attention.head_count_kv",
            format!("{} KV heads must divide {} heads", hp.n_head_kv, hp.n_head),
        ));
    }
    if spec.rope != Rope::None && (hp.n_rot == 0 || hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim_k) {
        return Err(bad(
            "rope.dimension_count",
            format!("is {}, but RoPE needs an even count in 2..={} (the key head size)", hp.n_rot, hp.head_dim_k),
        ));
    }
    let has_swa = hp.swa_layers.iter().any(|&s| s);
    let swa_head = hp.per_layer.head_dim_k_swa;
    if spec.rope != Rope::None && has_swa && (hp.n_rot_swa == 0 || hp.n_rot_swa % 2 != 0 || hp.n_rot_swa > swa_head) {
        return Err(bad(
            "rope.dimension_count_swa",
            format!(
                "is {}, but RoPE needs an even count in 2..={swa_head} (the sliding layers' key head size)",
                hp.n_rot_swa
            ),
        ));
    }
    if hp.n_vocab > i32::MAX as usize {
        return Err(bad("vocab_size", format!("{} tokens do not fit a 32-bit token id", hp.n_vocab)));
    }
    if !(hp.norm_eps.is_finite() && hp.norm_eps > 0.0) {
        return Err(bad(
            "attention.layer_norm_rms_epsilon",
            format!("is {:e} as f32, but must be a finite number > 0", hp.norm_eps),
        ));
    }
    let rope_base = |key: &str, v: f32| {
        if v.is_finite() && v >= 1.0 {
            Ok(())
        } else {
            Err(bad(key, format!("is {v:e}, but a RoPE frequency base must be a finite number >= 1")))
        }
    };
    rope_base("rope.freq_base", hp.rope_freq_base)?;
    if !(hp.rope_freq_scale.is_finite() && hp.rope_freq_scale > 0.0) {
        return Err(bad(
            "rope.scaling.factor",
            format!("gives a RoPE frequency scale of {:e}, which must be a finite number > 0", hp.rope_freq_scale),
        ));
    }
    if !(hp.rope_attn_factor.is_finite() && hp.rope_attn_factor > 0.0) {
        return Err(bad(
            "rope.scaling.attn_factor",
            format!("is {}, but must be a finite number > 0", hp.rope_attn_factor),
        ));
    }
    if !(hp.attention_scale.is_finite() && hp.attention_scale > 0.0) {
        return Err(bad("attention.scale", format!("is {}, but must be a finite number > 0", hp.attention_scale)));
    }
    if !(hp.final_logit_softcap.is_finite() && hp.final_logit_softcap >= 0.0) {
        return Err(bad(
            "final_logit_softcapping",
            format!("is {}, but must be a finite number >= 0 (0 = none)", hp.final_logit_softcap),
        ));
    }
    if spec.attn_softcap && !(hp.attn_softcap.is_finite() && hp.attn_softcap > 0.0) {
        return Err(bad("attn_logit_softcapping", format!("is {}, but must be a finite number > 0", hp.attn_softcap)));
    }
    if !(hp.logit_scale.is_finite() && hp.logit_scale != 0.0) {
        return Err(bad("logit_scale", format!("is {}, but must be a finite number other than 0", hp.logit_scale)));
    }
    for (key, v) in [
        ("embedding_scale", hp.embedding_scale),
        ("residual_scale", hp.residual_scale),
        ("rope.scaling.yarn_beta_fast", hp.yarn_beta_fast),
        ("rope.scaling.yarn_beta_slow", hp.yarn_beta_slow),
        ("rope.scaling.yarn_log_multiplier", hp.rope_yarn_log_mul),
        ("attention.temperature_scale", hp.attn_temperature.map_or(0.0, |t| t.scale)),
    ] {
        if !v.is_finite() {
            return Err(bad(key, format!("is {v}, but must be a finite number")));
        }
    }
    if hp.n_expert > 0 {
        if hp.n_expert > MAX_EXPERTS {
            return Err(bad("expert_count", format!("is {}, more than the {MAX_EXPERTS} supported", hp.n_expert)));
        }
        if hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert {
            return Err(bad(
                "expert_used_count",
                format!("is {}, but must be in 1..={} (expert_count)", hp.n_expert_used, hp.n_expert),
            ));
        }
        if hp.n_ff_exp == 0 {
            return Err(bad("expert_feed_forward_length", "gives experts of width 0".into()));
        }
    }
    if hp.n_swa > 0 {
        rope_base("rope.freq_base_swa", hp.rope_freq_base_swa)?;
        // every layer may be local (a model shorter than its pattern), as
        // in llama.cpp; the list must cover the layers
        if hp.swa_layers.len() != hp.n_layer {
            return Err(bad(
                "attention.sliding_window_pattern",
                format!("covers {} layers, but block_count is {}", hp.swa_layers.len(), hp.n_layer),
            ));
        }
    }
    Ok(())
}

/// The tokenizer's token list, when the file has one, must cover exactly the
/// model's vocabulary: every id the model can produce must decode, and
/// every id the tokenizer makes must have an embedding row.
pub fn vocab_size(model: &Model, hp: &HParams) -> Result<()> {
    let Some(tokens) = model.gguf.get_array("tokenizer.ggml.tokens") else {
        return Ok(());
    };
    if tokens.len() == hp.n_vocab {
        return Ok(());
    }
    Err(Error::Invalid {
        path: model.path().clone(),
        what: format!(
            "tokenizer.ggml.tokens has {} tokens, but the model's vocabulary (vocab_size, token_embd rows) has {}",
            tokens.len(),
            hp.n_vocab
        ),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::model::arch::{spec_for, ExpertGating, Routing};

    /// Hyperparameters of a small llama-like model, for tests elsewhere.
    pub(crate) fn sample_hparams() -> HParams {
        tiny("llama")
    }

    fn tiny(arch: &str) -> HParams {
        let gemma = arch == "gemma3" || arch == "gemma4";
        HParams {
            n_vocab: 256,
            n_ctx_train: 128,
            n_embd: 64,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 128,
            head_dim_k: 16,
            head_dim_v: 16,
            n_rot: 16,
            n_rot_swa: 16,
            per_layer: crate::engine::model::arch::PerLayerDims::uniform(2, 16, 16),
            norm_eps: 1e-5,
            rope_freq_base: 10000.0,
            rope_scaling: crate::engine::model::rope::ScalingType::Linear,
            rope_freq_scale: 1.0,
            rope_attn_factor: 1.0,
            n_ctx_orig_yarn: 128,
            n_swa: if gemma { 8 } else { 0 },
            swa_layers: vec![gemma, false],
            rope_freq_base_swa: 10000.0,
            rope_freq_scale_swa: 1.0,
            attention_scale: 0.25,
            final_logit_softcap: 0.0,
            attn_softcap: if arch == "gemma2" { 50.0 } else { 0.0 },
            embedding_scale: 0.0,
            residual_scale: 0.0,
            logit_scale: 1.0,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_exp: 0,
            n_ff_shexp: 0,
            yarn_beta_fast: 32.0,
            yarn_beta_slow: 1.0,
            rope_yarn_log_mul: 0.0,
            attn_temperature: None,
            rope_sections: [0; 4],
            delta_net: None,
            recurrent_layers: vec![false; 2],
            short_conv_taps: 0,
            no_rope_every: None,
            swa_chunked: false,
            moe_every: None,
            qk_norm_after_rope: false,
            n_token_types: 0,
            n_cls_out: 1,
            non_causal: false,
            mla: None,
            routing: Routing {
                gating: ExpertGating::Softmax,
                normalize: true,
                scale: 0.0,
                n_groups: 0,
                n_groups_used: 0,
            },
            n_layer_dense_lead: 0,
            yarn_log_mul_both_sides: false,
        }
    }

    fn check(arch: &str, edit: impl FnOnce(&mut HParams)) -> Result<()> {
        let mut hp = tiny(arch);
        edit(&mut hp);
        hparams(Path::new("m.gguf"), spec_for(arch, Path::new("m.gguf")).unwrap(), &hp)
    }

    fn refused(arch: &str, edit: impl FnOnce(&mut HParams), needles: &[&str]) {
        let err = check(arch, edit).expect_err("refused").to_string();
        assert!(err.starts_with("'m.gguf' is not a usable model: "), "{err}");
        for n in needles {
            assert!(err.contains(n), "{err:?} lacks {n:?}");
        }
    }

    #[test]
    fn valid_hparams_pass() {
        for arch in crate::engine::model::arch::ARCHITECTURES.iter().map(|a| a.name) {
            check(arch, |_| {}).unwrap();
        }
    }

    #[test]
    fn rope_dimensions_must_be_even_and_fit_the_head() {
        refused("llama", |h| h.n_rot = 15, &["llama.rope.dimension_count", "is 15", "even"]);
        refused("llama", |h| h.n_rot = 18, &["rope.dimension_count", "2..=16"]);
        check("llama", |h| h.n_rot = 8).unwrap();
    }

    #[test]
    fn heads_must_divide() {
        refused("llama", |h| h.n_head_kv = 3, &["attention.head_count_kv", "3 KV heads must divide 4"]);
        refused("llama", |h| h.n_head_kv = 8, &["attention.head_count_kv"]);
        // with explicit head sizes n_head need not divide n_embd (Qwen3, Gemma)
        check("qwen3", |h| {
            h.n_head = 3;
            h.n_head_kv = 1;
        })
        .unwrap();
    }

    #[test]
    fn floats_must_be_finite_and_in_range() {
        refused("llama", |h| h.attention_scale = f32::NAN, &["llama.attention.scale", "NaN"]);
        refused("llama", |h| h.attention_scale = f32::INFINITY, &["attention.scale"]);
        refused("llama", |h| h.rope_freq_base = 1e-45, &["llama.rope.freq_base", ">= 1"]);
        refused("llama", |h| h.rope_freq_base = f32::INFINITY, &["rope.freq_base"]);
        refused("llama", |h| h.rope_freq_scale = 0.0, &["rope.scaling.factor"]);
        refused("llama", |h| h.norm_eps = 0.0, &["layer_norm_rms_epsilon", "> 0"]);
        refused("llama", |h| h.norm_eps = f32::NAN, &["layer_norm_rms_epsilon"]);
        refused("gemma3", |h| h.final_logit_softcap = -1.0, &["final_logit_softcapping"]);
        refused("gemma3", |h| h.rope_freq_base_swa = 0.5, &["gemma3.rope.freq_base_swa"]);
        refused("gemma2", |h| h.attn_softcap = 0.0, &["gemma2.attn_logit_softcapping", "> 0"]);
        refused("granite", |h| h.logit_scale = 0.0, &["granite.logit_scale"]);
        refused("granite", |h| h.residual_scale = f32::NAN, &["granite.residual_scale"]);
    }

    #[test]
    fn sliding_layers_rotate_within_their_heads() {
        refused("gemma4", |h| h.n_rot_swa = 18, &["gemma4.rope.dimension_count_swa", "2..=16"]);
        refused("gemma4", |h| h.n_rot_swa = 3, &["rope.dimension_count_swa"]);
        check("gemma4", |h| h.n_rot_swa = 8).unwrap();
    }

    #[test]
    fn a_sliding_window_pattern_covers_the_layers() {
        refused("gemma3", |h| h.swa_layers = vec![true], &["sliding_window_pattern", "covers 1 layers"]);
        // a model shorter than its pattern: every layer local
        check("gemma3", |h| h.swa_layers = vec![true, true]).unwrap();
        // without a window the pattern is not used
        check("gemma3", |h| {
            h.n_swa = 0;
            h.swa_layers = vec![false, false];
        })
        .unwrap();
    }

    #[test]
    fn matmul_types_are_those_with_a_cpu_kernel() {
        for (t, ok) in [(0, true), (1, true), (8, true), (12, true), (14, true), (30, true), (2, true)] {
            assert_eq!(type_allowed(Role::MatMul, t), ok, "type {t}");
        }
        // q8_1, q8_K, i8, i16, i32, i64, f64, removed and unknown ids
        for t in [9, 15, 24, 25, 26, 27, 28, 4, 31, 43, 1000] {
            assert!(!type_allowed(Role::MatMul, t), "type {t}");
        }
    }

    #[test]
    fn embedding_norm_and_bias_types() {
        for t in [0, 1, 8, 12, 30] {
            assert!(type_allowed(Role::GetRows, t), "type {t}");
        }
        for t in [9, 15, 24, 26, 28, 43] {
            assert!(!type_allowed(Role::GetRows, t), "type {t}");
        }
        for role in [Role::Norm, Role::Bias] {
            assert!(type_allowed(role, 0));
            for t in [1, 8, 28, 30] {
                assert!(!type_allowed(role, t), "type {t}");
            }
        }
    }

    #[test]
    fn a_refused_type_names_tensor_type_and_rule() {
        let err = tensor_type(Path::new("m.gguf"), "blk.0.attn_q.weight", Role::MatMul, 9, "llama").unwrap_err();
        let err = err.to_string();
        assert!(err.contains("blk.0.attn_q.weight has type q8_1"), "{err}");
        assert!(err.contains("matrix-multiplication weight") && err.contains("allowed: f32, f16"), "{err}");
        let err = tensor_type(Path::new("m.gguf"), "output_norm.weight", Role::Norm, 1, "llama").unwrap_err();
        assert!(err.to_string().contains("has type f16, which a norm weight cannot have"), "{err}");
        assert!(err.to_string().ends_with("allowed: f32)"), "{err}");
    }
}
