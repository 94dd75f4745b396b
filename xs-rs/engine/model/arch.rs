//! The supported architectures as rows of building blocks, and the
//! hyperparameters read once from the GGUF header. One graph builder
//! (forward/graph.rs) reads the row; adding an architecture is one row here plus a
//! parity test.
use crate::engine::ggml::ops::{GGML_ROPE_TYPE_IMROPE, GGML_ROPE_TYPE_NEOX, GGML_ROPE_TYPE_NORM};
use crate::engine::model::gguf::Array;
use crate::engine::model::rope::ScalingType;
use crate::engine::model::Model;
use crate::engine::{Error, Result};
use std::ffi::c_int;
use std::path::Path;

/// How rotary embeddings pair the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rope {
    /// Adjacent pairs (LLaMA).
    Norm,
    /// First half with second half (GPT-NeoX, Qwen2, Gemma).
    Neox,
    /// No rotary embeddings: learned positions instead (GPT-2).
    None,
    /// Interleaved multi-section RoPE over `rope.dimension_sections`
    /// (Qwen3.5); a text token has the same position in the first three
    /// sections and 0 in the fourth.
    MultiInterleaved,
}

impl Rope {
    /// ggml's mode; None for no RoPE.
    pub fn ggml_mode(self) -> Option<c_int> {
        match self {
            Rope::Norm => Some(GGML_ROPE_TYPE_NORM),
            Rope::Neox => Some(GGML_ROPE_TYPE_NEOX),
            Rope::MultiInterleaved => Some(GGML_ROPE_TYPE_IMROPE),
            Rope::None => None,
        }
    }
}

/// The feed-forward activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// silu(gate) * up
    SwiGlu,
    /// gelu_tanh(gate) * up
    GeGlu,
    /// gelu_tanh(up), no gate (StarCoder2)
    Gelu,
}

/// The normalisation of the blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// RMSNorm (`attention.layer_norm_rms_epsilon`).
    Rms,
    /// LayerNorm with weight and (required) bias (`attention.layer_norm_epsilon`).
    Layer,
}

/// Tensors of RoPE frequency factors ([n_rot / 2], dividing each pair's frequency).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeFactors {
    None,
    /// `rope_freqs` (Llama 3); with rope scaling type `longrope`, LongShort.
    Freqs,
    /// `rope_factors_long` when the context exceeds the original training
    /// context (`rope.scaling.original_context_length`), else
    /// `rope_factors_short` (Phi-3's LongRoPE).
    LongShort,
    /// `rope_freqs`, required, in the full-attention layers only (Gemma 4's
    /// proportional RoPE: factors of 1e30 leave the dimensions past the
    /// rotated part still).
    FullLayers,
}

/// Mixture-of-experts feed-forward blocks (llama.cpp's build_moe_ffn with
/// softmax routing over `ffn_gate_inp`, top-k experts by `ggml_mul_mat_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experts {
    /// Dense feed-forward blocks only.
    None,
    /// Experts when the file's `expert_count` is above 0 (Mixtral in the
    /// llama row); each expert is n_ff wide.
    WhenCounted,
    /// Experts when the file's `expert_count` is above 0, each
    /// `expert_feed_forward_length` wide (required then), the chosen
    /// experts' weights divided by their sum (Gemma 4's MoE variant).
    WhenCountedOwnWidth,
    /// Always experts, `expert_feed_forward_length` wide (default n_ff /
    /// expert_used_count); `renormalize`: the chosen experts' weights are
    /// divided by their sum; `shared`: a shared expert gated by a sigmoid
    /// (Qwen2-MoE).
    Always { renormalize: bool, shared: bool },
}

impl Experts {
    /// Whether the chosen experts' weights are divided by their sum.
    pub fn renormalized(self) -> bool {
        match self {
            Experts::Always { renormalize, .. } => renormalize,
            Experts::None | Experts::WhenCounted | Experts::WhenCountedOwnWidth => true,
        }
    }
}

/// What mixes tokens in the layers that do not attend (the file says which
/// layers those are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recurrent {
    /// Every layer attends.
    None,
    /// Gated delta-net linear attention (Qwen3.5): a causal convolution
    /// with a state of d_conv - 1 tokens, then the delta rule with a state
    /// per value head; `ssm.*` keys, the layers from
    /// `attention.recurrent_layers` or `full_attention_interval`.
    GatedDeltaNet,
    /// LFM2's short convolution: B·x through a causal convolution of
    /// `shortconv.l_cache` taps (a state of l_cache - 1 inputs), times C;
    /// a layer whose `attention.head_count_kv` entry is 0 has one.
    ShortConv,
}

/// How a mixture of experts weighs the experts it chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertGating {
    /// The softmax over every expert's logit, read at the chosen ones.
    Softmax,
    /// Each expert's sigmoid(logit), read at the chosen ones (DeepSeek-V3).
    Sigmoid,
    /// The top-k logits, then the softmax over those (gpt-oss).
    SoftmaxOfChosen,
    /// The top-k logits, each chosen expert weighted by sigmoid(logit),
    /// the weight applied to its input rather than its output (Llama 4).
    SigmoidBeforeExpert,
}

/// RMSNorm of Q and K before RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// Over each head (`attn_q_norm` [head_dim]; Gemma 3, Qwen3).
    PerHead,
    /// Over the whole projection (`attn_q_norm` [n_head * head_dim]; OLMo 2).
    Whole,
    /// Over each head with each head's own weights (`attn_q_norm`
    /// [head_dim, n_head]), when the file has them (StableLM 2 12B).
    EachHeadOptional,
    /// Over each head without weights, after RoPE, in the layers that
    /// rotate (Llama 4 but its 128-expert model).
    WeightlessAfterRope,
}

/// The RoPE of sliding-window layers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SwaRope {
    /// Its own base (`rope.freq_base_swa`, default the value), unscaled (Gemma 3).
    Base(f32),
    /// The global base (unless `rope.freq_base_swa`) and scaling (Gemma 2).
    Global,
    /// The global base, without frequency scaling or magnitude factor (OLMo 3).
    GlobalBaseUnscaled,
}

/// Where the output projection comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputWeight {
    /// `output.weight`, else the token embeddings (tied).
    OwnOrEmbd,
    /// Always the token embeddings (Gemma).
    Embd,
    /// `output.weight`, required (OLMo 2).
    Own,
}

/// One supported architecture: the switches that distinguish it.
#[derive(Clone, Copy, Debug)]
pub struct ArchSpec {
    /// `general.architecture` in the GGUF file.
    pub name: &'static str,
    pub rope: Rope,
    /// The attention output projection may carry a bias (optional tensor;
    /// Q/K/V biases and a fused attn_qkv are optional for every row).
    pub out_bias: bool,
    pub norm: Norm,
    /// Biases on the attention output and the FFN's up and down projections,
    /// all required (StarCoder2, GPT-2).
    pub dense_biases: bool,
    /// A layer without `ffn_norm` feeds the FFN the attention's normed
    /// input (StableLM 2's parallel residual).
    pub ffn_norm_optional: bool,
    /// Attention and FFN side by side on the same normed input, both added
    /// to the residual (Falcon; Falcon-40B's attention has its own
    /// `attn_norm_2`).
    pub parallel_block: bool,
    /// RMSNorm of Q and K before RoPE.
    pub qk_norm: QkNorm,
    /// RMSNorm of each block's input (`attn_norm`, `ffn_norm`); OLMo 2 has none.
    pub pre_norms: bool,
    /// RMSNorm of the attention and FFN outputs before the residual add (Gemma 2/3, OLMo 2).
    pub post_norms: bool,
    pub act: Activation,
    pub experts: Experts,
    /// One `ffn_up` of 2 * n_ff rows holding gate and up, no `ffn_gate` (Phi-3).
    pub fused_ffn_up: bool,
    /// Token embeddings are multiplied by sqrt(n_embd) (Gemma).
    pub embed_scale_sqrt: bool,
    /// Q is scaled by 1/sqrt(head_dim) before attention (kq scale 1 then), as
    /// Gemma's graph does, instead of scaling inside the softmax.
    pub scale_q: bool,
    /// Sliding-window layers: every `swa_pattern`-th layer is global, the rest
    /// use the window, with the SWA rope base (Gemma 3's default pattern 6).
    pub swa_pattern: Option<u32>,
    /// The window when the file gives none (Gemma 2: 4096; 0 = no sliding
    /// window unless the file sets one).
    pub swa_default_window: u32,
    /// RoPE of the sliding-window layers.
    pub swa_rope: SwaRope,
    /// The block count at which Q is scaled by 1/sqrt(n_embd / n_head)
    /// instead of 1/sqrt(head_dim) (Gemma's 27B models, as llama.cpp).
    pub wide_query_scale_at: Option<usize>,
    /// Which optional tensors of per-dimension RoPE frequency factors the
    /// architecture reads.
    pub rope_factors: RopeFactors,
    /// Attention logits soft-capped before the softmax (Gemma 2): the key
    /// `attn_logit_softcapping`, default 50.
    pub attn_softcap: bool,
    /// The final logit soft-cap when the file gives none (0 = none; Gemma 2: 30).
    pub final_softcap_default: f32,
    /// Granite's multipliers: `embedding_scale` on the embeddings,
    /// `residual_scale` on each block's output before the residual add, and
    /// the logits divided by `logit_scale` (required).
    pub granite_scales: bool,
    /// Where the output projection comes from.
    pub output: OutputWeight,
    /// Every n-th layer (the n-th, the 2n-th, …) has no RoPE (SmolLM3: 4).
    pub no_rope_every: Option<usize>,
    /// Llama 4's attention temperature, where the file gives
    /// `attention.temperature_scale`: Q is multiplied by 1 + scale ·
    /// ln(⌊pos / floor⌋ + 1) after RoPE (Mistral 3, DeepSeek-V2's
    /// Mistral-Large-3); which positions a step of the logarithm spans.
    pub attn_temperature: TemperatureFloor,
    /// Which of YaRN's keys are read from the file.
    pub yarn_keys: YarnKeys,
    /// The token mixer of the layers that do not attend.
    pub recurrent: Recurrent,
    /// Q's projection holds, per head, the query and then a gate; the
    /// attention output is multiplied by sigmoid(gate) before `attn_output`
    /// (Qwen3.5).
    pub gated_attention: bool,
    /// The FFN's input norm is stored as `post_attention_norm` (Qwen3.5).
    pub ffn_norm_is_post_attention: bool,
    /// The final norm is stored as `token_embd_norm` (LFM2).
    pub output_norm_is_token_embd_norm: bool,
    /// The shared expert's gate is ggml's sigmoid (Qwen3.5-MoE) rather than
    /// silu(x) / x (Qwen2-MoE's graph).
    pub shared_gate_sigmoid: bool,
    /// How the experts are weighed, and whether the router and every
    /// expert projection carry biases (gpt-oss: `ffn_gate_inp.bias`, the
    /// experts' through ggml_add_id).
    pub expert_gating: ExpertGating,
    pub expert_biases: bool,
    /// The experts' activation is gpt-oss's clamped SwiGLU (alpha, limit)
    /// instead of `act`.
    pub clamped_swiglu: Option<(f32, f32)>,
    /// A learned logit per head (`attn_sinks`) joins each softmax's
    /// normaliser (gpt-oss's attention sinks).
    pub attn_sinks: bool,
    /// Llama 4: MoE layers every `interleave_moe_layer_step` layers (dense
    /// between), a shared expert without a gate of its own, the sliding
    /// layers' window in chunks of 8192 positions (unless the file's
    /// `attention.sliding_window` is 0: no window, and only the last layer
    /// without RoPE), and the layers without RoPE scaling Q by the
    /// attention temperature (0.1 per 8192 positions) instead.
    pub llama4: bool,
    /// A BERT encoder: every token sees every other of its sequence (no
    /// causal mask, no KV cache), token-type embeddings, a LayerNorm of the
    /// embeddings, post-norm layers (`attn_output_norm` after the attention's
    /// residual add, `layer_output_norm` after the FFN's), no output norm or
    /// projection: the last layer's output is the embedding.
    pub encoder: bool,
    /// The output rows are picked after the final norm rather than after
    /// the last layer's attention (Qwen3.5's graph; the same values, but
    /// the last FFN then runs over every row, as its kernels round).
    pub outputs_after_norm: bool,
    /// Gemma 4's layers: per-layer inputs when the file gives
    /// `embedding_length_per_layer_input` (a second token embedding of
    /// n_layer slices, plus a projection of the embeddings, added into each
    /// layer's output through a GELU gate), the last
    /// `attention.shared_kv_layers` layers reading the cache of the last
    /// earlier layer of their kind, V RMS-normed without a weight, an
    /// attention scale of 1, and `layer_output_scale` on each layer's output.
    pub gemma4_layers: bool,
    /// A MoE layer keeps its dense FFN (input norm `ffn_norm`, its output
    /// normed by `post_ffw_norm_1`) beside the experts (input norm
    /// `pre_ffw_norm_2`, output norm `post_ffw_norm_2`); the two outputs are
    /// added before `post_ffw_norm` (Gemma 4's MoE variant).
    pub dense_beside_experts: bool,
    /// The router reads the FFN block's input (the residual stream, not the
    /// experts' normed input) RMS-normed without a weight, times
    /// 1/sqrt(n_embd) and `ffn_gate_inp.scale` [n_embd] (Gemma 4).
    pub router_scaled_rms: bool,
    /// DeepSeek's multi-head latent attention: Q through a low-rank
    /// projection (`attn_q_a`, its norm, `attn_q_b`; or one `attn_q`), K
    /// and V compressed into one latent per token (`attn_kv_a_mqa`, its
    /// norm) plus a shared RoPE part; the cache holds only those, and each
    /// head's keys and values are absorbed into Q (`attn_k_b`) and the
    /// output (`attn_v_b`).
    pub latent_attention: bool,
    /// The shared expert's output is weighted by its own gate
    /// (`ffn_gate_inp_shexp`); Llama 4's and DeepSeek's are not.
    pub shared_expert_gated: bool,
    /// The routing is read from the file (DeepSeek): the gating function
    /// (`expert_gating_func`), whether and how the chosen weights are
    /// normalised and scaled (`expert_weights_norm`, `expert_weights_scale`),
    /// a selection bias (`exp_probs_b`), expert groups
    /// (`expert_group_count`, `expert_group_used_count`), dense leading
    /// layers (`leading_dense_block_count`) and the shared experts' count
    /// (`expert_shared_count`, each as wide as an expert).
    pub routing_keys: bool,
}

/// Which of YaRN's keys an architecture reads from the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YarnKeys {
    /// None: ramp ends 32 and 1, no log multiplier.
    None,
    /// `rope.scaling.yarn_beta_fast`, `yarn_beta_slow` and
    /// `yarn_log_multiplier` (Mistral 3).
    All,
    /// `yarn_log_multiplier` only, written by the converter as a tenth of
    /// mscale_all_dim (which it stands for: DeepSeek-V2's magnitude
    /// correction is then mscale_all_dim's on both sides, as llama.cpp's).
    LogMulTenths,
}

/// How many positions one step of the attention temperature's logarithm spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemperatureFloor {
    /// No temperature.
    None,
    /// The original context (Mistral 3).
    OriginalContext,
    /// `attention.temperature_length` (DeepSeek-V2's loader).
    LengthKey,
}

/// LLaMA and the base the other rows change.
const LLAMA: ArchSpec = ArchSpec {
    name: "llama",
    rope: Rope::Norm,
    out_bias: true,
    norm: Norm::Rms,
    dense_biases: false,
    ffn_norm_optional: false,
    parallel_block: false,
    qk_norm: QkNorm::None,
    pre_norms: true,
    post_norms: false,
    act: Activation::SwiGlu,
    experts: Experts::WhenCounted,
    fused_ffn_up: false,
    embed_scale_sqrt: false,
    scale_q: false,
    swa_pattern: None,
    swa_default_window: 0,
    swa_rope: SwaRope::Base(10000.0),
    wide_query_scale_at: None,
    rope_factors: RopeFactors::Freqs,
    attn_softcap: false,
    final_softcap_default: 0.0,
    granite_scales: false,
    output: OutputWeight::OwnOrEmbd,
    no_rope_every: None,
    attn_temperature: TemperatureFloor::None,
    yarn_keys: YarnKeys::None,
    recurrent: Recurrent::None,
    gated_attention: false,
    ffn_norm_is_post_attention: false,
    output_norm_is_token_embd_norm: false,
    shared_gate_sigmoid: false,
    encoder: false,
    expert_gating: ExpertGating::Softmax,
    expert_biases: false,
    clamped_swiglu: None,
    attn_sinks: false,
    llama4: false,
    outputs_after_norm: false,
    gemma4_layers: false,
    latent_attention: false,
    shared_expert_gated: true,
    routing_keys: false,
    dense_beside_experts: false,
    router_scaled_rms: false,
};

/// Gemma 3, which Gemma 2 changes.
const GEMMA3: ArchSpec = ArchSpec {
    name: "gemma3",
    rope: Rope::Neox,
    out_bias: false,
    qk_norm: QkNorm::PerHead,
    post_norms: true,
    experts: Experts::None,
    act: Activation::GeGlu,
    embed_scale_sqrt: true,
    scale_q: true,
    swa_pattern: Some(6),
    wide_query_scale_at: Some(62),
    rope_factors: RopeFactors::None,
    ..LLAMA
};

/// GPT-2, which StarCoder2 changes: LayerNorm, learned positions, biased
/// projections, an ungated GELU FFN.
const GPT2: ArchSpec = ArchSpec {
    name: "gpt2",
    rope: Rope::None,
    norm: Norm::Layer,
    dense_biases: true,
    act: Activation::Gelu,
    experts: Experts::None,
    rope_factors: RopeFactors::None,
    ..LLAMA
};

/// The table of supported architectures.
pub const ARCHITECTURES: &[ArchSpec] = &[
    LLAMA,
    ArchSpec {
        name: "qwen2",
        rope: Rope::Neox,
        out_bias: false,
        experts: Experts::None,
        rope_factors: RopeFactors::None,
        ..LLAMA
    },
    ArchSpec {
        name: "qwen2moe",
        rope: Rope::Neox,
        out_bias: false,
        experts: Experts::Always { renormalize: false, shared: true },
        rope_factors: RopeFactors::None,
        ..LLAMA
    },
    ArchSpec {
        name: "qwen3",
        rope: Rope::Neox,
        out_bias: false,
        qk_norm: QkNorm::PerHead,
        experts: Experts::None,
        rope_factors: RopeFactors::None,
        ..LLAMA
    },
    ArchSpec {
        name: "qwen3moe",
        rope: Rope::Neox,
        out_bias: false,
        qk_norm: QkNorm::PerHead,
        experts: Experts::Always { renormalize: true, shared: false },
        rope_factors: RopeFactors::None,
        ..LLAMA
    },
    ArchSpec {
        name: "phi3",
        rope: Rope::Neox,
        out_bias: false,
        experts: Experts::None,
        fused_ffn_up: true,
        scale_q: true,
        rope_factors: RopeFactors::LongShort,
        ..LLAMA
    },
    ArchSpec {
        name: "gemma2",
        qk_norm: QkNorm::None,
        swa_pattern: Some(2),
        swa_default_window: 4096,
        swa_rope: SwaRope::Global,
        wide_query_scale_at: Some(46),
        attn_softcap: true,
        final_softcap_default: 30.0,
        output: OutputWeight::Embd,
        ..GEMMA3
    },
    GEMMA3,
    ArchSpec {
        name: "gemma",
        qk_norm: QkNorm::None,
        post_norms: false,
        swa_pattern: None,
        wide_query_scale_at: None,
        output: OutputWeight::Embd,
        ..GEMMA3
    },
    ArchSpec { name: "granite", granite_scales: true, ..LLAMA },
    GPT2,
    ArchSpec {
        name: "falcon",
        rope: Rope::Neox,
        out_bias: false,
        norm: Norm::Layer,
        parallel_block: true,
        act: Activation::Gelu,
        experts: Experts::None,
        rope_factors: RopeFactors::None,
        ..LLAMA
    },
    ArchSpec {
        name: "stablelm",
        rope: Rope::Neox,
        out_bias: false,
        norm: Norm::Layer,
        qk_norm: QkNorm::EachHeadOptional,
        ffn_norm_optional: true,
        experts: Experts::None,
        rope_factors: RopeFactors::None,
        output: OutputWeight::Own,
        ..LLAMA
    },
    ArchSpec { name: "starcoder2", rope: Rope::Neox, ..GPT2 },
    ArchSpec {
        name: "olmo2",
        rope: Rope::Neox,
        out_bias: false,
        qk_norm: QkNorm::Whole,
        pre_norms: false,
        post_norms: true,
        experts: Experts::None,
        swa_pattern: Some(4),
        swa_rope: SwaRope::GlobalBaseUnscaled,
        rope_factors: RopeFactors::None,
        output: OutputWeight::Own,
        ..LLAMA
    },
    ArchSpec {
        name: "smollm3",
        out_bias: false,
        experts: Experts::None,
        rope_factors: RopeFactors::None,
        no_rope_every: Some(4),
        ..LLAMA
    },
    ArchSpec {
        name: "mistral3",
        attn_temperature: TemperatureFloor::OriginalContext,
        yarn_keys: YarnKeys::All,
        ..LLAMA
    },
    QWEN35,
    ArchSpec {
        name: "lfm2",
        rope: Rope::Neox,
        out_bias: false,
        qk_norm: QkNorm::PerHead,
        experts: Experts::None,
        rope_factors: RopeFactors::None,
        swa_rope: SwaRope::Global,
        recurrent: Recurrent::ShortConv,
        output_norm_is_token_embd_norm: true,
        ..LLAMA
    },
    ArchSpec {
        name: "qwen35moe",
        experts: Experts::Always { renormalize: true, shared: true },
        shared_gate_sigmoid: true,
        ..QWEN35
    },
    ArchSpec {
        name: "gpt-oss",
        rope: Rope::Neox,
        experts: Experts::Always { renormalize: false, shared: false },
        expert_gating: ExpertGating::SoftmaxOfChosen,
        expert_biases: true,
        clamped_swiglu: Some((1.702, 7.0)),
        attn_sinks: true,
        swa_pattern: Some(2),
        swa_rope: SwaRope::Global,
        rope_factors: RopeFactors::None,
        ffn_norm_is_post_attention: true,
        outputs_after_norm: true,
        output: OutputWeight::Own,
        ..LLAMA
    },
    ArchSpec {
        name: "llama4",
        out_bias: false,
        qk_norm: QkNorm::WeightlessAfterRope,
        experts: Experts::Always { renormalize: false, shared: true },
        expert_gating: ExpertGating::SigmoidBeforeExpert,
        swa_pattern: Some(4),
        swa_default_window: 8192,
        swa_rope: SwaRope::Global,
        no_rope_every: Some(4),
        llama4: true,
        shared_expert_gated: false,
        ..LLAMA
    },
    ArchSpec {
        name: "gemma4",
        qk_norm: QkNorm::PerHead,
        scale_q: false,
        swa_rope: SwaRope::Base(10000.0),
        wide_query_scale_at: None,
        rope_factors: RopeFactors::FullLayers,
        output: OutputWeight::OwnOrEmbd,
        outputs_after_norm: true,
        gemma4_layers: true,
        experts: Experts::WhenCountedOwnWidth,
        dense_beside_experts: true,
        router_scaled_rms: true,
        ..GEMMA3
    },
    ArchSpec {
        name: "deepseek2",
        out_bias: false,
        experts: Experts::Always { renormalize: false, shared: true },
        rope_factors: RopeFactors::None,
        yarn_keys: YarnKeys::LogMulTenths,
        attn_temperature: TemperatureFloor::LengthKey,
        latent_attention: true,
        shared_expert_gated: false,
        routing_keys: true,
        ..LLAMA
    },
    BERT,
    // fused QKV, NEOX RoPE instead of learned positions, SwiGLU (llama.cpp's bert graph)
    ArchSpec { name: "nomic-bert", rope: Rope::Neox, act: Activation::SwiGlu, ..BERT },
];

/// BERT: learned positions, an ungated GELU FFN, biases where the file has them.
const BERT: ArchSpec = ArchSpec {
    name: "bert",
    rope: Rope::None,
    norm: Norm::Layer,
    pre_norms: false,
    act: Activation::Gelu,
    experts: Experts::None,
    rope_factors: RopeFactors::None,
    encoder: true,
    ..LLAMA
};

/// Qwen3.5, which its MoE variant changes.
const QWEN35: ArchSpec = ArchSpec {
    name: "qwen35",
    rope: Rope::MultiInterleaved,
    out_bias: false,
    qk_norm: QkNorm::PerHead,
    experts: Experts::None,
    rope_factors: RopeFactors::None,
    recurrent: Recurrent::GatedDeltaNet,
    gated_attention: true,
    ffn_norm_is_post_attention: true,
    outputs_after_norm: true,
    ..LLAMA
};

impl ArchSpec {
    /// What ggml cannot differentiate in this architecture's forward pass
    /// (None: it can be trained).
    pub fn untrainable(&self) -> Option<&'static str> {
        if self.recurrent != Recurrent::None {
            Some("its recurrent layers")
        } else if self.clamped_swiglu.is_some() || self.attn_sinks {
            Some("its attention sinks and clamped SwiGLU experts")
        } else if self.llama4 {
            Some("its experts weighted before they run")
        } else if self.gemma4_layers {
            Some("its shared-KV layers, which read another layer's cache")
        } else if self.routing_keys {
            Some("its expert routing (selection bias, groups, sigmoid gating)")
        } else {
            None
        }
    }
}

/// The row for `name`, or an error naming the file (`path`), the
/// architecture and the supported ones.
pub fn spec_for(name: &str, path: &Path) -> Result<&'static ArchSpec> {
    ARCHITECTURES.iter().find(|a| a.name == name).ok_or_else(|| Error::UnsupportedArchitecture {
        path: path.to_path_buf(),
        name: name.to_string(),
        supported: ARCHITECTURES.iter().map(|a| a.name).collect(),
    })
}

/// Hyperparameters, read once from the header.
#[derive(Clone, Debug)]
pub struct HParams {
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_rot: usize,
    /// The rotated dimensions of the sliding-window layers
    /// (`rope.dimension_count_swa`, default n_rot).
    pub n_rot_swa: usize,
    /// Gemma 4's per-layer inputs and shared-KV layers, and the sizes that
    /// differ between its layers (n_head_kv, head_dim_k/v and n_ff above
    /// are then the first layer's, the full-attention layers' and the
    /// widest).
    pub per_layer: PerLayerDims,
    pub norm_eps: f32,
    pub rope_freq_base: f32,
    /// The scaling the model was trained with (`rope.scaling.type`, default
    /// linear) and its frequency scale (1 / `rope.scaling.factor`).
    pub rope_scaling: ScalingType,
    pub rope_freq_scale: f32,
    /// RoPE's magnitude factor (`rope.scaling.attn_factor`, default 1).
    pub rope_attn_factor: f32,
    /// The context the RoPE factors were trained for
    /// (`rope.scaling.original_context_length`, default n_ctx_train).
    pub n_ctx_orig_yarn: usize,
    /// Sliding window size (0 = none) and which layers use it.
    pub n_swa: u32,
    pub swa_layers: Vec<bool>,
    /// The sliding-window layers' base and scale (their own; a session's
    /// RoPE settings do not change them, as in llama.cpp).
    pub rope_freq_base_swa: f32,
    pub rope_freq_scale_swa: f32,
    /// Scale applied to Q (scale_q architectures) or inside the softmax.
    pub attention_scale: f32,
    /// Final logit softcapping (0 = none).
    pub final_logit_softcap: f32,
    /// Attention logit softcapping (0 = none).
    pub attn_softcap: f32,
    /// Multiplier of the token embeddings (0 = none).
    pub embedding_scale: f32,
    /// Multiplier of each block's output before its residual add (0 = none).
    pub residual_scale: f32,
    /// The logits are divided by this (1 = none).
    pub logit_scale: f32,
    /// Experts per MoE layer (0 = dense), how many each token uses, the
    /// width of each and of the shared expert (0 = none).
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
    pub n_ff_shexp: usize,
    /// YaRN's ramp ends (default 32 and 1) and the log multiplier of its
    /// magnitude correction (0 = none; `mscale_all_dim`).
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    pub rope_yarn_log_mul: f32,
    /// The attention temperature (see ArchSpec::attn_temperature).
    pub attn_temperature: Option<AttnTemperature>,
    /// How many of the rotated dimensions each section of multi-section
    /// RoPE takes (`rope.dimension_sections`; zeros otherwise).
    pub rope_sections: [i32; 4],
    /// The recurrent layers' sizes, when the architecture has them.
    pub delta_net: Option<DeltaNetDims>,
    /// Which layers are recurrent (all false without recurrent layers).
    pub recurrent_layers: Vec<bool>,
    /// The taps of LFM2's short convolution (0 without).
    pub short_conv_taps: usize,
    /// Every n-th layer has no RoPE (see ArchSpec::no_rope_every; Llama 4
    /// files without a window: only the last).
    pub no_rope_every: Option<usize>,
    /// The sliding window is cut in chunks of n_swa positions (Llama 4):
    /// a token sees the positions of its own chunk up to itself.
    pub swa_chunked: bool,
    /// MoE layers every n-th layer (Llama 4); None: every layer.
    pub moe_every: Option<usize>,
    /// Q and K normed without weights after RoPE (QkNorm::WeightlessAfterRope,
    /// except Llama 4's 128-expert model).
    pub qk_norm_after_rope: bool,
    /// Encoders: the rows of `token_types` (`tokenizer.ggml.token_type_count`)
    /// and the classifier's outputs (`classifier.output_labels`, default 1).
    pub n_token_types: usize,
    pub n_cls_out: usize,
    /// Every token attends over its whole sequence (an encoder).
    pub non_causal: bool,
    /// The sizes of DeepSeek's latent attention (None without it).
    pub mla: Option<LatentDims>,
    /// How a mixture of experts chooses and weighs its experts.
    pub routing: Routing,
    /// The first layers' FFN is dense (DeepSeek's `leading_dense_block_count`).
    pub n_layer_dense_lead: usize,
    /// YaRN's magnitude correction is mscale_all_dim's on both sides
    /// (DeepSeek-V2, see YarnKeys::LogMulTenths).
    pub yarn_log_mul_both_sides: bool,
}

/// The sizes of multi-head latent attention (llama.cpp's n_lora_q,
/// n_lora_kv, n_embd_head_k_mla and n_embd_head_v_mla). The cache's K head
/// is then the latent and the RoPE part (`attention.key_length`), its V the
/// latent (`attention.value_length`), one KV head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatentDims {
    /// The rank of Q's projection (0: one `attn_q`).
    pub q_rank: usize,
    /// The width of the compressed K/V latent.
    pub kv_rank: usize,
    /// A query head's width (without RoPE, then the RoPE part), and an
    /// output head's width.
    pub head_dim_q: usize,
    pub head_dim_out: usize,
}

/// How a mixture of experts chooses and weighs its experts (llama.cpp's
/// build_moe_ffn arguments).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Routing {
    pub gating: ExpertGating,
    /// The chosen experts' weights are divided by their sum.
    pub normalize: bool,
    /// The weights are multiplied by this (0 or 1: not scaled).
    pub scale: f32,
    /// Experts in groups: only the best `n_groups_used` groups (by the sum
    /// of each group's two best scores) are chosen from (0 or 1: no groups).
    pub n_groups: usize,
    pub n_groups_used: usize,
}

/// Sizes that may differ between layers (Gemma 4's sliding-window and
/// full-attention layers; llama.cpp's per-layer hparams arrays).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerLayerDims {
    /// The width of a layer's per-layer input (0 = none).
    pub n_embd_per_layer: usize,
    /// The layers that keep their own K and V: those before the shared-KV
    /// ones, which read the cache of an earlier layer (see `kv_layer`).
    pub n_layer_kv: usize,
    /// The heads of the sliding-window layers (`attention.key_length_swa`,
    /// `value_length_swa`; default the others').
    pub head_dim_k_swa: usize,
    pub head_dim_v_swa: usize,
    /// One KV head count, and one FFN width, per layer where the file gives
    /// a list (empty: the single value).
    pub n_head_kv: Vec<usize>,
    pub n_ff: Vec<usize>,
}

impl PerLayerDims {
    /// Every layer alike, with its own KV, no per-layer inputs.
    pub fn uniform(n_layer: usize, head_dim_k: usize, head_dim_v: usize) -> PerLayerDims {
        PerLayerDims {
            n_embd_per_layer: 0,
            n_layer_kv: n_layer,
            head_dim_k_swa: head_dim_k,
            head_dim_v_swa: head_dim_v,
            n_head_kv: Vec::new(),
            n_ff: Vec::new(),
        }
    }
}

/// The sizes of gated delta-net layers (llama.cpp's ssm_* hyperparameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaNetDims {
    /// Width of the causal convolution (`ssm.conv_kernel`).
    pub d_conv: usize,
    /// Key heads (`ssm.group_count`) and value heads (`ssm.time_step_rank`).
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    /// The width of a key head and of a value head (both `ssm.state_size`;
    /// `ssm.inner_size` / n_v_heads must agree).
    pub head_dim: usize,
}

impl DeltaNetDims {
    pub fn key_dim(&self) -> usize {
        self.head_dim * self.n_k_heads
    }
    pub fn value_dim(&self) -> usize {
        self.head_dim * self.n_v_heads
    }
    /// The channels the convolution mixes: Q, K and V side by side.
    pub fn conv_channels(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// f32 values of a sequence's convolution state: the last d_conv - 1
    /// inputs of every channel (llama.cpp's n_embd_r).
    pub fn conv_state_len(&self) -> usize {
        (self.d_conv - 1) * self.conv_channels()
    }
    /// f32 values of a sequence's delta-rule state: a head_dim × head_dim
    /// matrix per value head (llama.cpp's n_embd_s).
    pub fn ssm_state_len(&self) -> usize {
        self.head_dim * self.value_dim()
    }
}

/// Which earlier positions a sliding-window layer's token sees (besides
/// the causal rule), as llama.cpp's `is_masked_swa`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Every earlier position.
    Whole,
    /// The last n positions, itself included (standard SWA).
    Sliding(u32),
    /// The positions of its own chunk of n (Llama 4's chunked attention).
    Chunked(u32),
}

impl Window {
    /// Whether a token at `p1` sees position `p0` (p0 <= p1).
    pub fn sees(self, p0: usize, p1: usize) -> bool {
        match self {
            Window::Whole => true,
            Window::Sliding(n) => p1 - p0 < n as usize,
            Window::Chunked(n) => p0 >= p1 / n as usize * n as usize,
        }
    }
}

/// Llama 4's attention temperature: Q at position `pos` is multiplied by
/// 1 + scale · ln(⌊(pos + offset) / floor⌋ + 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnTemperature {
    pub scale: f32,
    /// Positions per step of the logarithm (the original context).
    pub floor: usize,
    pub offset: f32,
    /// Only the layers without RoPE are scaled, in place of RoPE (Llama 4);
    /// else every layer's Q after RoPE (Mistral 3).
    pub no_rope_layers_only: bool,
}

impl AttnTemperature {
    /// The factor at `pos`, computed as llama.cpp does: the quotient in f32,
    /// the logarithm in f64.
    pub fn at(&self, pos: i32) -> f32 {
        let steps = ((pos as f32 + self.offset) / self.floor as f32).floor() as f64;
        ((steps + 1.0).ln() * self.scale as f64 + 1.0) as f32
    }
}

impl HParams {
    pub fn is_swa(&self, il: usize) -> bool {
        self.swa_layers.get(il).copied().unwrap_or(false)
    }
    /// The positions a token gets: 4 with multi-section RoPE, else 1.
    pub fn positions_per_token(&self) -> usize {
        if self.rope_sections.iter().any(|&s| s > 0) {
            4
        } else {
            1
        }
    }
    /// Whether layer `il` is recurrent (keeps a state instead of K/V).
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.recurrent_layers.get(il).copied().unwrap_or(false)
    }
    /// Whether some layer is recurrent.
    pub fn has_recurrent(&self) -> bool {
        self.recurrent_layers.iter().any(|&r| r)
    }
    /// The f32 values of a recurrent layer's convolution state and of its
    /// delta-rule state (llama.cpp's n_embd_r and n_embd_s).
    pub fn recurrent_state_lens(&self) -> (usize, usize) {
        match self.delta_net {
            Some(d) => (d.conv_state_len(), d.ssm_state_len()),
            None => (self.short_conv_taps.saturating_sub(1) * self.n_embd, 0),
        }
    }

    pub fn load(model: &Model, spec: &ArchSpec) -> Result<HParams> {
        let keys = ArchKeys { model, arch: spec.name };
        let n_embd = keys.positive(model.n_embd(), "embedding_length")?;
        // llama.cpp loads multi-token-prediction blocks (`nextn_predict_layers`,
        // Qwen3.5's converter writes one) after the layers, and leaves them
        // out of the forward pass: so does Lugh
        let n_layer_all = keys.positive(model.n_layer(), "block_count")?;
        let n_layer = n_layer_all - keys.count("nextn_predict_layers").min(n_layer_all - 1);
        let n_head = keys.positive(model.n_head(), "attention.head_count")?;
        // LFM2 gives one KV head count per layer, 0 for its convolution layers
        let kv_heads_per_layer = keys.per_layer_counts("attention.head_count_kv", n_layer);
        let n_head_kv = match &kv_heads_per_layer {
            Some(counts) => keys.positive(counts.iter().copied().find(|&n| n > 0), "attention.head_count_kv")?,
            None => keys.positive(model.n_head_kv(), "attention.head_count_kv")?,
        };
        let ff_per_layer = keys.per_layer_counts("feed_forward_length", n_layer);
        if ff_per_layer.is_some() && !spec.gemma4_layers {
            return Err(Error::Invalid {
                path: model.path().clone(),
                what: format!(
                    "{}.feed_forward_length differs between layers, which Lugh does not support yet",
                    spec.name
                ),
            });
        }
        let n_ff = match &ff_per_layer {
            Some(list) => keys.positive(list.iter().copied().max(), "feed_forward_length")?,
            None => keys.positive(model.n_ff(), "feed_forward_length")?,
        };
        let n_vocab = keys.positive(model.n_vocab(), "vocab_size")?;
        let n_ctx_train = keys.positive(model.n_ctx_train(), "context_length")?;
        let (head_dim_k, head_dim_v) = keys.head_dims(n_embd, n_head, n_head_kv)?;
        // n_rot's range is validate.rs's (it names the rule)
        let n_rot = keys.int("rope.dimension_count").map(|v| v as usize).unwrap_or(head_dim_k);
        if head_dim_k == 0 || head_dim_v == 0 {
            return Err(keys.missing("attention.key_length"));
        }
        let eps_key = match spec.norm {
            Norm::Rms => "attention.layer_norm_rms_epsilon",
            Norm::Layer => "attention.layer_norm_epsilon",
        };
        let norm_eps = keys.float(eps_key).ok_or_else(|| keys.missing(eps_key))? as f32;
        let rope_freq_base = model.rope_freq_base().unwrap_or(10000.0) as f32;
        let (rope_scaling, rope_freq_scale) = keys.rope_scaling()?;
        let rope_attn_factor = keys.float("rope.scaling.attn_factor").unwrap_or(1.0) as f32;
        let n_ctx_orig_yarn = keys
            .int("rope.scaling.original_context_length")
            .filter(|&n| n > 0)
            .map_or(n_ctx_train, |n| n.min(u32::MAX as i64) as usize);
        let n_swa = match (spec.swa_pattern, spec.recurrent) {
            (Some(_), _) | (None, Recurrent::ShortConv) => match keys.int("attention.sliding_window") {
                Some(w) => w.clamp(0, u32::MAX as i64) as u32,
                None => spec.swa_default_window,
            },
            (None, _) => 0,
        };
        let swa_layers = swa_layers(model, spec, n_layer, n_swa);
        let swa_base = |default: f32| keys.float("rope.freq_base_swa").map_or(default, |v| v as f32);
        let (rope_freq_base_swa, rope_freq_scale_swa) = match spec.swa_rope {
            SwaRope::Base(base) => (swa_base(base), 1.0),
            SwaRope::Global => (swa_base(rope_freq_base), rope_freq_scale),
            // llama.cpp's OLMo 3 graph: the session's base, unscaled
            SwaRope::GlobalBaseUnscaled => (rope_freq_base, 1.0),
        };
        let n_rot_swa = keys.int("rope.dimension_count_swa").map_or(n_rot, |v| v.max(0) as usize);
        let per_layer = if spec.gemma4_layers {
            keys.gemma4_dims(n_layer, n_head, head_dim_k, head_dim_v)?
        } else {
            PerLayerDims::uniform(n_layer, head_dim_k, head_dim_v)
        };
        // Gemma 4 does not scale its attention (its Q and K are RMS-normed)
        let attention_scale =
            if spec.gemma4_layers { 1.0 } else { keys.attention_scale(spec, n_layer, n_embd / n_head, head_dim_k) };
        let final_logit_softcap =
            keys.float("final_logit_softcapping").unwrap_or(spec.final_softcap_default as f64) as f32;
        let attn_softcap =
            if spec.attn_softcap { keys.float("attn_logit_softcapping").unwrap_or(50.0) as f32 } else { 0.0 };
        let (embedding_scale, residual_scale, logit_scale) =
            if spec.granite_scales { keys.granite_scales()? } else { (0.0, 0.0, 1.0) };
        let (n_expert, n_expert_used, n_ff_exp, n_ff_shexp) = keys.experts(spec.experts, n_ff)?;
        let yarn_key = |key: &str, default: f32| {
            if spec.yarn_keys == YarnKeys::All {
                keys.float(key).map_or(default, |v| v as f32)
            } else {
                default
            }
        };
        let rope_yarn_log_mul = match spec.yarn_keys {
            YarnKeys::None => 0.0,
            YarnKeys::All => yarn_key("rope.scaling.yarn_log_multiplier", 0.0),
            // the converter's tenth taken back, in f32 as llama.cpp
            YarnKeys::LogMulTenths => keys.float("rope.scaling.yarn_log_multiplier").map_or(0.0, |v| v as f32 / 0.1),
        };
        let attn_temp_scale = match spec.attn_temperature {
            TemperatureFloor::None => 0.0,
            _ => keys.float("attention.temperature_scale").unwrap_or(0.0) as f32,
        };
        let temperature_floor = match spec.attn_temperature {
            TemperatureFloor::LengthKey if attn_temp_scale != 0.0 => {
                keys.positive(keys.int("attention.temperature_length"), "attention.temperature_length")?
            }
            _ => n_ctx_orig_yarn,
        };
        let mut attn_temperature = (attn_temp_scale != 0.0).then_some(AttnTemperature {
            scale: attn_temp_scale,
            floor: temperature_floor,
            offset: 0.0,
            no_rope_layers_only: false,
        });
        let n_token_types = model
            .gguf
            .get("tokenizer.ggml.token_type_count")
            .and_then(|v| v.as_i64())
            .map_or(0, |n| n.clamp(0, u32::MAX as i64) as usize);
        if spec.encoder && n_token_types == 0 {
            return Err(Error::Corrupt {
                path: model.path().clone(),
                what: format!(
                    "the key tokenizer.ggml.token_type_count is missing or 0: a {} model needs its token type count",
                    spec.name
                ),
            });
        }
        let n_cls_out =
            model.gguf.arch_value("classifier.output_labels").and_then(|v| v.as_array()).map_or(1, |a| a.len());
        let rope_sections = if spec.rope == Rope::MultiInterleaved { keys.rope_sections(n_rot)? } else { [0; 4] };
        let (delta_net, recurrent_layers, short_conv_taps) = match spec.recurrent {
            Recurrent::None => (None, vec![false; n_layer], 0),
            Recurrent::GatedDeltaNet => (Some(keys.delta_net_dims()?), keys.recurrent_layers(n_layer)?, 0),
            Recurrent::ShortConv => {
                let taps = keys.positive(keys.int("shortconv.l_cache"), "shortconv.l_cache")?;
                if !(2..=64).contains(&taps) {
                    return Err(Error::Corrupt {
                        path: model.path().clone(),
                        what: format!("{}.shortconv.l_cache is {taps}, not between 2 and 64", spec.name),
                    });
                }
                let layers = match &kv_heads_per_layer {
                    Some(counts) => counts.iter().map(|&n| n == 0).collect(),
                    None => vec![false; n_layer],
                };
                (None, layers, taps)
            }
        };
        // LFM2's attention layers use the window when the file sets one
        let (mut n_swa, mut swa_layers) = if spec.recurrent == Recurrent::ShortConv && n_swa > 0 {
            (n_swa, recurrent_layers.iter().map(|&r| !r).collect())
        } else {
            (n_swa, swa_layers)
        };
        let (mut no_rope_every, mut swa_chunked, mut moe_every, mut n_ff_shexp) =
            (spec.no_rope_every, false, None, n_ff_shexp);
        if spec.llama4 {
            // llama.cpp's Llama 4 loader
            if keys.int("attention.sliding_window") == Some(0) {
                (n_swa, swa_layers, no_rope_every) = (0, vec![false; n_layer], Some(n_layer));
            } else {
                // a window of 8192 in chunks, whatever the file says
                (n_swa, swa_chunked) = (8192, true);
                swa_layers = self::swa_layers(model, spec, n_layer, n_swa);
                attn_temperature =
                    Some(AttnTemperature { scale: 0.1, floor: 8192, offset: 1.0, no_rope_layers_only: true });
            }
            let step =
                keys.int("interleave_moe_layer_step").ok_or_else(|| keys.missing("interleave_moe_layer_step"))?;
            moe_every = Some(step.clamp(0, u32::MAX as i64) as usize);
            // its shared expert is as wide as each expert
            n_ff_shexp = n_ff_exp;
        }
        let qk_norm_after_rope = spec.qk_norm == QkNorm::WeightlessAfterRope && n_expert != 128;
        let mla = if spec.latent_attention {
            Some(keys.latent_dims(head_dim_k, head_dim_v, n_head_kv, n_rot)?)
        } else {
            None
        };
        let mut routing = Routing {
            gating: spec.expert_gating,
            normalize: spec.experts.renormalized(),
            scale: 0.0,
            n_groups: 0,
            n_groups_used: 0,
        };
        let mut n_layer_dense_lead = 0;
        if spec.routing_keys && n_expert > 0 {
            routing = keys.routing(n_expert, n_expert_used)?;
            n_layer_dense_lead = keys.count("leading_dense_block_count").min(n_layer);
            n_ff_shexp = n_ff_exp * keys.count("expert_shared_count");
        }
        Ok(HParams {
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            head_dim_k,
            head_dim_v,
            n_rot,
            n_rot_swa,
            per_layer,
            norm_eps,
            rope_freq_base,
            rope_scaling,
            rope_freq_scale,
            rope_attn_factor,
            n_ctx_orig_yarn,
            n_swa,
            swa_layers,
            rope_freq_base_swa,
            rope_freq_scale_swa,
            attention_scale,
            final_logit_softcap,
            attn_softcap,
            embedding_scale,
            residual_scale,
            logit_scale,
            n_expert,
            n_expert_used,
            n_ff_exp,
            n_ff_shexp,
            yarn_beta_fast: yarn_key("rope.scaling.yarn_beta_fast", 32.0),
            yarn_beta_slow: yarn_key("rope.scaling.yarn_beta_slow", 1.0),
            rope_yarn_log_mul,
            attn_temperature,
            rope_sections,
            delta_net,
            recurrent_layers,
            short_conv_taps,
            no_rope_every,
            swa_chunked,
            moe_every,
            qk_norm_after_rope,
            n_token_types,
            n_cls_out,
            non_causal: spec.encoder,
            mla,
            routing,
            n_layer_dense_lead,
            yarn_log_mul_both_sides: spec.yarn_keys == YarnKeys::LogMulTenths,
        })
    }

    /// The width of a K head, and of a V head, of layer `il`.
    pub fn head_dim_k_of(&self, il: usize) -> usize {
        if self.is_swa(il) {
            self.per_layer.head_dim_k_swa
        } else {
            self.head_dim_k
        }
    }
    pub fn head_dim_v_of(&self, il: usize) -> usize {
        if self.is_swa(il) {
            self.per_layer.head_dim_v_swa
        } else {
            self.head_dim_v
        }
    }
    /// The KV heads of layer `il`.
    pub fn n_head_kv_of(&self, il: usize) -> usize {
        self.per_layer.n_head_kv.get(il).copied().unwrap_or(self.n_head_kv)
    }
    /// The FFN width of layer `il`.
    pub fn n_ff_of(&self, il: usize) -> usize {
        self.per_layer.n_ff.get(il).copied().unwrap_or(self.n_ff)
    }
    /// The widest K and V rows of any layer (a cache's rows hold them all).
    pub fn max_n_embd_k_gqa(&self) -> usize {
        (0..self.n_layer).map(|il| self.head_dim_k_of(il) * self.n_head_kv_of(il)).max().unwrap_or(0)
    }
    pub fn max_n_embd_v_gqa(&self) -> usize {
        (0..self.n_layer).map(|il| self.head_dim_v_of(il) * self.n_head_kv_of(il)).max().unwrap_or(0)
    }

    /// The rotated dimensions of layer `il`.
    pub fn n_rot_of(&self, il: usize) -> usize {
        if self.is_swa(il) {
            self.n_rot_swa
        } else {
            self.n_rot
        }
    }

    /// The layer whose cached K and V layer `il` attends over: its own, or
    /// for Gemma 4's shared-KV layers the last layer before them of the
    /// same kind (llama.cpp's layer reuse: the full-attention layers read
    /// the last layer with its own KV, the sliding-window ones the one
    /// before it).
    pub fn kv_layer(&self, il: usize) -> usize {
        match il < self.per_layer.n_layer_kv {
            true => il,
            false if self.is_swa(il) => self.per_layer.n_layer_kv - 2,
            false => self.per_layer.n_layer_kv - 1,
        }
    }

    /// Whether layer `il` applies RoPE (its row may leave some layers out).
    pub fn uses_rope(&self, il: usize) -> bool {
        self.no_rope_every.is_none_or(|n| (il + 1) % n != 0)
    }

    /// The sliding-window layers' window.
    pub fn window(&self) -> Window {
        match (self.n_swa, self.swa_chunked) {
            (0, _) => Window::Whole,
            (n, false) => Window::Sliding(n),
            (n, true) => Window::Chunked(n),
        }
    }

    /// Whether layer `il`'s feed-forward block is a mixture of experts.
    pub fn is_moe_layer(&self, il: usize) -> bool {
        self.n_expert > 0 && il >= self.n_layer_dense_lead && self.moe_every.is_none_or(|n| n > 0 && (il + 1) % n == 0)
    }
}

/// The architecture-prefixed keys of a model's header (`llama.block_count`).
struct ArchKeys<'a> {
    model: &'a Model,
    arch: &'static str,
}

impl ArchKeys<'_> {
    fn missing(&self, key: &str) -> Error {
        let arch = self.arch;
        Error::Corrupt {
            path: self.model.path().clone(),
            what: format!("the key {arch}.{key} is missing or not a number (architecture {arch})"),
        }
    }

    fn positive(&self, v: Option<i64>, key: &str) -> Result<usize> {
        match v {
            Some(n) if n > 0 => Ok(n as usize),
            _ => Err(self.missing(key)),
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        self.model.gguf.arch_value(key).and_then(|v| v.as_i64())
    }

    fn float(&self, key: &str) -> Option<f64> {
        self.model.gguf.arch_value(key).and_then(|v| v.as_f64())
    }

    /// A count: 0 when absent or not above 0.
    fn count(&self, key: &str) -> usize {
        self.int(key).filter(|&n| n > 0).map_or(0, |n| n.min(u32::MAX as i64) as usize)
    }

    /// The widths of a K head and a V head.
    fn head_dims(&self, n_embd: usize, n_head: usize, n_head_kv: usize) -> Result<(usize, usize)> {
        let key_length = self.int("attention.key_length");
        let value_length = self.int("attention.value_length");
        // Without explicit head sizes a head is n_embd / n_head wide.
        if (n_embd % n_head != 0 && (key_length.is_none() || value_length.is_none())) || n_head % n_head_kv != 0 {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!("{n_head} heads / {n_head_kv} KV heads do not divide n_embd {n_embd}"),
            });
        }
        let head_dim_k = key_length.map(|v| v as usize).unwrap_or(n_embd / n_head);
        let head_dim_v = value_length.map(|v| v as usize).unwrap_or(n_embd / n_head);
        Ok((head_dim_k, head_dim_v))
    }

    /// The scaling type the model was trained with and its frequency scale.
    fn rope_scaling(&self) -> Result<(ScalingType, f32)> {
        // llama.cpp's default type is linear: a scaling factor without a type
        // scales.
        let scaling = self.model.gguf.arch_value("rope.scaling.type").and_then(|v| v.as_str()).unwrap_or("linear");
        let rope_scaling = ScalingType::from_name(scaling).ok_or_else(|| Error::Invalid {
            path: self.model.path().clone(),
            what: format!(
                "rope scaling type '{scaling}' is not known (architecture {}; known: {})",
                self.arch,
                ScalingType::NAMES.join(", ")
            ),
        })?;
        let factor =
            self.float("rope.scaling.factor").or_else(|| self.float("rope.scale_linear")).filter(|&f| f != 0.0);
        Ok((rope_scaling, factor.map_or(1.0, |f| (1.0 / f) as f32)))
    }

    /// llama.cpp: 1/sqrt(head_dim), except Gemma's 27B models which use
    /// 1/sqrt(n_embd / n_head) (query_pre_attn_scalar).
    fn attention_scale(&self, spec: &ArchSpec, n_layer: usize, embd_per_head: usize, head_dim_k: usize) -> f32 {
        if spec.scale_q && spec.wide_query_scale_at == Some(n_layer) {
            1.0 / (embd_per_head as f32).sqrt()
        } else if spec.scale_q {
            1.0 / (head_dim_k as f32).sqrt()
        } else {
            self.float("attention.scale")
                .map(|v| v as f32)
                .filter(|&s| s != 0.0)
                .unwrap_or(1.0 / (head_dim_k as f32).sqrt())
        }
    }

    /// A key holding one count per layer (an array), if it is one; a
    /// missing entry counts 0.
    fn per_layer_counts(&self, key: &str, n_layer: usize) -> Option<Vec<i64>> {
        let list = self.model.gguf.arch_value(key).and_then(|v| v.as_array())?;
        Some((0..n_layer).map(|i| list.int_at(i).unwrap_or(0).max(0)).collect())
    }

    /// `rope.dimension_sections`: four section widths (an array of up to
    /// four integers, the rest 0) that cover at most the rotated pairs.
    fn rope_sections(&self, n_rot: usize) -> Result<[i32; 4]> {
        let key = "rope.dimension_sections";
        let list = self.model.gguf.arch_value(key).and_then(|v| v.as_array()).ok_or_else(|| self.missing(key))?;
        let mut sections = [0i32; 4];
        for (i, s) in sections.iter_mut().enumerate() {
            *s = list.int_at(i).unwrap_or(0).clamp(0, i32::MAX as i64) as i32;
        }
        let total: i64 = sections.iter().map(|&s| s as i64).sum();
        if total == 0 || total > n_rot as i64 / 2 {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "{}.{key} {sections:?} must cover between 1 and n_rot / 2 = {} dimension pairs",
                    self.arch,
                    n_rot / 2
                ),
            });
        }
        Ok(sections)
    }

    /// The sizes of gated delta-net layers, checked as ggml's op needs them
    /// (it aborts on a mismatch rather than reporting it).
    fn delta_net_dims(&self) -> Result<DeltaNetDims> {
        let d_conv = self.positive(self.int("ssm.conv_kernel"), "ssm.conv_kernel")?;
        let d_inner = self.positive(self.int("ssm.inner_size"), "ssm.inner_size")?;
        let head_dim = self.positive(self.int("ssm.state_size"), "ssm.state_size")?;
        let n_v_heads = self.positive(self.int("ssm.time_step_rank"), "ssm.time_step_rank")?;
        let n_k_heads = self.positive(self.int("ssm.group_count"), "ssm.group_count")?;
        if d_inner != head_dim * n_v_heads || n_v_heads % n_k_heads != 0 || d_conv > 64 {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "delta-net sizes do not fit together: ssm.inner_size {d_inner} must be ssm.state_size {head_dim} × \
                     ssm.time_step_rank {n_v_heads}, the value heads a multiple of ssm.group_count {n_k_heads}, \
                     ssm.conv_kernel {d_conv} at most 64 (architecture {})",
                    self.arch
                ),
            });
        }
        Ok(DeltaNetDims { d_conv, n_k_heads, n_v_heads, head_dim })
    }

    /// Which layers are recurrent: `attention.recurrent_layers` (one flag
    /// per layer) wins over `full_attention_interval` (every n-th layer
    /// attends; default 4), as llama.cpp's Qwen3.5 loader reads them.
    fn recurrent_layers(&self, n_layer: usize) -> Result<Vec<bool>> {
        if let Some(list) = self.model.gguf.arch_value("attention.recurrent_layers").and_then(|v| v.as_array()) {
            return Ok((0..n_layer)
                .map(|i| match list {
                    Array::Bool(flags) => flags.get(i).copied().unwrap_or(false),
                    _ => list.int_at(i).unwrap_or(0) != 0,
                })
                .collect());
        }
        let interval = match self.int("full_attention_interval") {
            None => 4,
            Some(n) if n > 0 => n as usize,
            Some(n) => {
                return Err(Error::Corrupt {
                    path: self.model.path().clone(),
                    what: format!("{}.full_attention_interval is {n}, not a positive count", self.arch),
                })
            }
        };
        Ok((0..n_layer).map(|il| (il + 1) % interval != 0).collect())
    }

    /// Gemma 4's per-layer sizes (see `PerLayerDims`).
    fn gemma4_dims(&self, n_layer: usize, n_head: usize, head_dim_k: usize, head_dim_v: usize) -> Result<PerLayerDims> {
        let shared = self.count("attention.shared_kv_layers");
        if shared > 0 && shared + 2 > n_layer {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "{}.attention.shared_kv_layers is {shared}, but at least 2 of the {n_layer} layers must keep \
                     their own KV",
                    self.arch
                ),
            });
        }
        let counts = |key: &str| -> Result<Vec<usize>> {
            match self.per_layer_counts(key, n_layer) {
                Some(list) if list.contains(&0) => Err(self.missing(key)),
                Some(list) => Ok(list.into_iter().map(|n| n.min(u32::MAX as i64) as usize).collect()),
                None => Ok(Vec::new()),
            }
        };
        let dims = PerLayerDims {
            n_embd_per_layer: self.count("embedding_length_per_layer_input"),
            n_layer_kv: n_layer - shared,
            head_dim_k_swa: self.int("attention.key_length_swa").map_or(head_dim_k, |n| n.max(0) as usize),
            head_dim_v_swa: self.int("attention.value_length_swa").map_or(head_dim_v, |n| n.max(0) as usize),
            n_head_kv: counts("attention.head_count_kv")?,
            n_ff: counts("feed_forward_length")?,
        };
        if dims.head_dim_k_swa == 0 || dims.head_dim_v_swa == 0 {
            return Err(self.missing("attention.key_length_swa"));
        }
        if head_dim_k != head_dim_v || dims.head_dim_k_swa != dims.head_dim_v_swa {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "{} needs K and V heads of one size (key_length {head_dim_k}, value_length {head_dim_v}, \
                     key_length_swa {}, value_length_swa {})",
                    self.arch, dims.head_dim_k_swa, dims.head_dim_v_swa
                ),
            });
        }
        if let Some(&bad) = dims.n_head_kv.iter().find(|&&n| n > n_head || n_head % n != 0) {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "{}.attention.head_count_kv has {bad} KV heads in a layer, which does not divide {n_head} heads",
                    self.arch
                ),
            });
        }
        Ok(dims)
    }

    /// Granite's embedding, residual and logit multipliers.
    fn granite_scales(&self) -> Result<(f32, f32, f32)> {
        let embedding_scale = self.float("embedding_scale").unwrap_or(0.0) as f32;
        let residual_scale = self.float("residual_scale").unwrap_or(0.0) as f32;
        let logit_scale = self.float("logit_scale").ok_or_else(|| self.missing("logit_scale"))? as f32;
        // rope.scaling.finetuned = false turns RoPE off in llama.cpp's Granite
        if self.model.gguf.arch_value("rope.scaling.finetuned").and_then(|v| v.as_bool()) == Some(false) {
            return Err(Error::Invalid {
                path: self.model.path().clone(),
                what: format!("{}.rope.scaling.finetuned is false (no RoPE), which Lugh does not support", self.arch),
            });
        }
        Ok((embedding_scale, residual_scale, logit_scale))
    }

    /// The experts per layer, how many each token uses, the width of each
    /// and of the shared expert.
    fn experts(&self, experts: Experts, n_ff: usize) -> Result<(usize, usize, usize, usize)> {
        let (n_expert, n_expert_used) = match experts {
            Experts::None => (0, 0),
            _ => (self.count("expert_count"), self.count("expert_used_count")),
        };
        let (mut n_ff_exp, mut n_ff_shexp) = (0, 0);
        match experts {
            Experts::None => {}
            Experts::WhenCounted => n_ff_exp = n_ff,
            Experts::WhenCountedOwnWidth if n_expert > 0 => {
                n_ff_exp = self.count("expert_feed_forward_length");
                if n_ff_exp == 0 {
                    return Err(self.missing("expert_feed_forward_length"));
                }
            }
            Experts::WhenCountedOwnWidth => {}
            Experts::Always { shared, .. } => {
                if n_expert == 0 || n_expert_used == 0 {
                    return Err(self.missing(if n_expert == 0 { "expert_count" } else { "expert_used_count" }));
                }
                n_ff_exp = match self.count("expert_feed_forward_length") {
                    0 => n_ff / n_expert_used,
                    n => n,
                };
                if shared {
                    n_ff_shexp = match self.count("expert_shared_feed_forward_length") {
                        0 => n_ff,
                        n => n,
                    };
                }
            }
        }
        Ok((n_expert, n_expert_used, n_ff_exp, n_ff_shexp))
    }

    /// DeepSeek's latent attention sizes; the cache's heads (`key_length`,
    /// `value_length`, one KV head) must be the latent's.
    fn latent_dims(&self, head_dim_k: usize, head_dim_v: usize, n_head_kv: usize, n_rot: usize) -> Result<LatentDims> {
        let kv_rank = self.positive(self.int("attention.kv_lora_rank"), "attention.kv_lora_rank")?;
        let (Some(q), Some(out)) = (self.int("attention.key_length_mla"), self.int("attention.value_length_mla"))
        else {
            return Err(Error::Invalid {
                path: self.model.path().clone(),
                what: format!(
                    "this {} file has no {0}.attention.key_length_mla / value_length_mla: it predates the split \
                     attn_k_b / attn_v_b tensors of latent attention (convert it again with a current llama.cpp)",
                    self.arch
                ),
            });
        };
        let dims = LatentDims {
            q_rank: self.count("attention.q_lora_rank"),
            kv_rank,
            head_dim_q: self.positive(Some(q), "attention.key_length_mla")?,
            head_dim_out: self.positive(Some(out), "attention.value_length_mla")?,
        };
        if head_dim_k != kv_rank + n_rot || head_dim_v != kv_rank || n_head_kv != 1 || dims.head_dim_q <= n_rot {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "{} latent attention: key_length {head_dim_k} must be kv_lora_rank {kv_rank} + rope.dimension_count \
                     {n_rot}, value_length {head_dim_v} the rank, head_count_kv {n_head_kv} 1, and key_length_mla {} \
                     wider than the RoPE part",
                    self.arch, dims.head_dim_q
                ),
            });
        }
        Ok(dims)
    }

    /// DeepSeek's routing keys (llama.cpp's deepseek2 loader).
    fn routing(&self, n_expert: usize, n_expert_used: usize) -> Result<Routing> {
        let gating = match self.int("expert_gating_func").unwrap_or(0) {
            // older DeepSeek-V2 files have none: softmax
            0 | 1 => ExpertGating::Softmax,
            2 => ExpertGating::Sigmoid,
            3 => ExpertGating::SoftmaxOfChosen,
            other => {
                return Err(Error::Invalid {
                    path: self.model.path().clone(),
                    what: format!(
                    "{}.expert_gating_func {other} is not supported (1 softmax, 2 sigmoid, 3 softmax of the chosen)",
                    self.arch
                ),
                })
            }
        };
        let normalize = self.model.gguf.arch_value("expert_weights_norm").and_then(|v| v.as_bool()).unwrap_or(false);
        let scale = self.float("expert_weights_scale").unwrap_or(0.0) as f32;
        let (n_groups, n_groups_used) = (self.count("expert_group_count"), self.count("expert_group_used_count"));
        if n_groups > 1
            && (n_expert % n_groups != 0
                || n_groups_used == 0
                || n_groups_used >= n_groups
                || n_expert / n_groups < 2
                || n_groups_used * (n_expert / n_groups) < n_expert_used)
        {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "{0}.expert_group_count {n_groups} / expert_group_used_count {n_groups_used} do not fit \
                     {n_expert} experts of which {n_expert_used} are used",
                    self.arch
                ),
            });
        }
        Ok(Routing { gating, normalize, scale, n_groups, n_groups_used })
    }
}

/// Which layers use the sliding window: the file's per-layer list, else its
/// pattern number, else the architecture's default pattern (every n-th layer
/// global), as llama.cpp's `load_swa_pattern`.
fn swa_layers(model: &Model, spec: &ArchSpec, n_layer: usize, n_swa: u32) -> Vec<bool> {
    let Some(default_pattern) = spec.swa_pattern.filter(|_| n_swa > 0) else {
        return vec![false; n_layer];
    };
    let value = model.gguf.arch_value("attention.sliding_window_pattern");
    if let Some(list) = value.and_then(|v| v.as_array()) {
        return (0..n_layer)
            .map(|i| match list {
                Array::Bool(flags) => flags.get(i).copied().unwrap_or(false),
                _ => list.int_at(i).unwrap_or(0) != 0,
            })
            .collect();
    }
    let pattern = value.and_then(|v| v.as_i64()).map(|p| p as u32).unwrap_or(default_pattern);
    (0..n_layer).map(|il| pattern == 0 || (il as u32 % pattern) < pattern - 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_architecture_is_named() {
        let err = spec_for("mamba", Path::new("m.gguf")).unwrap_err().to_string();
        assert!(err.contains("mamba") && err.contains("llama") && err.contains("gemma3"), "{err}");
    }
}
