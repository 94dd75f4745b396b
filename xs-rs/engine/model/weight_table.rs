//! Every weight tensor an architecture may read, as rows of one table (as
//! llama.cpp's `LLM_TENSOR_INFOS`): its role, GGUF name, shape in
//! hyperparameters, whether the architecture's switches (ArchSpec) require
//! it, and the op that uses it. The loader (weights.rs) walks the rows in
//! order; the order is the order of loading and of the weights' memory.
use crate::engine::ggml::placement::Part;
use crate::engine::model::arch::{
    Activation, ArchSpec, Experts, HParams, Norm, OutputWeight, QkNorm, Recurrent, Rope, RopeFactors,
};
use crate::engine::model::rope::ScalingType;

/// The weight tensors by role; `name(il, suffix)` gives the GGUF name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    TokenEmbd,
    PosEmbd,
    OutputNorm,
    Output,
    AttnNorm,
    AttnNorm2,
    AttnQ,
    AttnK,
    AttnV,
    AttnQkv,
    AttnOut,
    AttnQNorm,
    AttnKNorm,
    AttnPostNorm,
    FfnNorm,
    FfnGate,
    FfnUp,
    FfnDown,
    FfnPostNorm,
    /// Gemma 4's MoE layers: the dense FFN's output norm, and the experts'
    /// input and output norms.
    FfnPostNorm1,
    FfnPreNorm2,
    FfnPostNorm2,
    FfnGateInp,
    FfnGateExps,
    FfnUpExps,
    /// Gate and up of every expert in one tensor, gate first (Qwen3.5-MoE).
    FfnGateUpExps,
    FfnDownExps,
    FfnGateInpShexp,
    FfnGateShexp,
    FfnUpShexp,
    FfnDownShexp,
    RopeFreqs,
    RopeFactorsLong,
    RopeFactorsShort,
    /// Gated delta-net layers: the fused Q/K/V input projection, the output
    /// gate z, the convolution kernel, the decay bias and rate, the
    /// projections of beta and alpha, the output norm and projection.
    DeltaQkv,
    DeltaGate,
    SsmConv1d,
    SsmDt,
    SsmA,
    SsmBeta,
    SsmAlpha,
    SsmNorm,
    SsmOut,
    /// LFM2's short convolution: its kernel, and the projections around it.
    ShortConvKernel,
    ShortConvIn,
    ShortConvOut,
    /// An encoder's embeddings norm; LFM2's final norm, under this name.
    TokenEmbdNorm,
    TokenTypes,
    AttnOutNorm,
    LayerOutNorm,
    Cls,
    ClsOut,
    /// gpt-oss's attention sinks.
    AttnSinks,
    /// Gemma 4's per-layer inputs: their token embedding (n_layer slices),
    /// the projection of the embeddings to them and its norm; in each layer
    /// the gate from the layer's output, the projection back and its norm.
    PerLayerTokenEmbd,
    PerLayerModelProj,
    PerLayerProjNorm,
    PerLayerInpGate,
    PerLayerProj,
    PerLayerPostNorm,
    /// Gemma 4: one factor on each layer's output.
    LayerOutScale,
    /// Latent attention (DeepSeek): Q's low-rank projection and its norm,
    /// the compressed K/V latent with the RoPE part and the latent's norm,
    /// and each head's K and V expansions of the latent.
    AttnQA,
    AttnQANorm,
    AttnQB,
    AttnKvAMqa,
    AttnKvANorm,
    AttnKB,
    AttnVB,
    /// The experts' selection bias (DeepSeek-V3).
    FfnExpProbsB,
}

/// The block of a layer a weight belongs to: a recurrent layer reads no
/// attention weight and an attending layer no recurrent one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Attention,
    Recurrent,
    Any,
}

impl TensorKind {
    fn stem(self) -> &'static str {
        use TensorKind::*;
        match self {
            TokenEmbd => "token_embd",
            PosEmbd => "position_embd",
            OutputNorm => "output_norm",
            Output => "output",
            AttnNorm => "attn_norm",
            AttnNorm2 => "attn_norm_2",
            AttnQ => "attn_q",
            AttnK => "attn_k",
            AttnV => "attn_v",
            AttnQkv => "attn_qkv",
            AttnOut => "attn_output",
            AttnQNorm => "attn_q_norm",
            AttnKNorm => "attn_k_norm",
            AttnPostNorm => "post_attention_norm",
            FfnNorm => "ffn_norm",
            FfnGate => "ffn_gate",
            FfnUp => "ffn_up",
            FfnDown => "ffn_down",
            FfnPostNorm => "post_ffw_norm",
            FfnPostNorm1 => "post_ffw_norm_1",
            FfnPreNorm2 => "pre_ffw_norm_2",
            FfnPostNorm2 => "post_ffw_norm_2",
            FfnGateInp => "ffn_gate_inp",
            FfnGateExps => "ffn_gate_exps",
            FfnUpExps => "ffn_up_exps",
            FfnGateUpExps => "ffn_gate_up_exps",
            FfnDownExps => "ffn_down_exps",
            FfnGateInpShexp => "ffn_gate_inp_shexp",
            FfnGateShexp => "ffn_gate_shexp",
            FfnUpShexp => "ffn_up_shexp",
            FfnDownShexp => "ffn_down_shexp",
            RopeFreqs => "rope_freqs",
            RopeFactorsLong => "rope_factors_long",
            RopeFactorsShort => "rope_factors_short",
            DeltaQkv => "attn_qkv",
            DeltaGate => "attn_gate",
            SsmConv1d => "ssm_conv1d",
            SsmDt => "ssm_dt",
            SsmA => "ssm_a",
            SsmBeta => "ssm_beta",
            SsmAlpha => "ssm_alpha",
            SsmNorm => "ssm_norm",
            SsmOut => "ssm_out",
            ShortConvKernel => "shortconv.conv",
            ShortConvIn => "shortconv.in_proj",
            ShortConvOut => "shortconv.out_proj",
            TokenEmbdNorm => "token_embd_norm",
            TokenTypes => "token_types",
            AttnOutNorm => "attn_output_norm",
            LayerOutNorm => "layer_output_norm",
            Cls => "cls",
            ClsOut => "cls.output",
            AttnSinks => "attn_sinks",
            PerLayerTokenEmbd => "per_layer_token_embd",
            PerLayerModelProj => "per_layer_model_proj",
            PerLayerProjNorm => "per_layer_proj_norm",
            PerLayerInpGate => "inp_gate",
            PerLayerProj => "proj",
            PerLayerPostNorm => "post_norm",
            LayerOutScale => "layer_output_scale",
            AttnQA => "attn_q_a",
            AttnQANorm => "attn_q_a_norm",
            AttnQB => "attn_q_b",
            AttnKvAMqa => "attn_kv_a_mqa",
            AttnKvANorm => "attn_kv_a_norm",
            AttnKB => "attn_k_b",
            AttnVB => "attn_v_b",
            FfnExpProbsB => "exp_probs_b",
        }
    }

    fn block(self) -> Block {
        use TensorKind::*;
        match self {
            AttnQkv | AttnQ | AttnK | AttnV | AttnOut | AttnNorm2 | AttnQNorm | AttnKNorm | AttnSinks | AttnQA
            | AttnQANorm | AttnQB | AttnKvAMqa | AttnKvANorm | AttnKB | AttnVB => Block::Attention,
            DeltaQkv | DeltaGate | SsmConv1d | SsmDt | SsmA | SsmBeta | SsmAlpha | SsmNorm | SsmOut
            | ShortConvKernel | ShortConvIn | ShortConvOut => Block::Recurrent,
            _ => Block::Any,
        }
    }

    /// The full GGUF name: `blk.N.stem.suffix` for layer tensors.
    pub fn name(self, il: Option<usize>, suffix: Suffix) -> String {
        let stem = match il {
            Some(il) => format!("blk.{il}.{}", self.stem()),
            None => self.stem().to_string(),
        };
        match suffix.as_str() {
            "" => stem,
            suffix => format!("{stem}.{suffix}"),
        }
    }
}

/// The last part of a weight's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suffix {
    Weight,
    Bias,
    /// No suffix (`blk.N.ssm_a`).
    Bare,
    /// A factor on a weight's input or product (`blk.N.ffn_gate_inp.scale`).
    Scale,
}

impl Suffix {
    fn as_str(self) -> &'static str {
        match self {
            Suffix::Weight => "weight",
            Suffix::Bias => "bias",
            Suffix::Bare => "",
            Suffix::Scale => "scale",
        }
    }
}

/// The op a weight feeds, which decides the buffer types it may live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightOp {
    GetRows,
    MulMat,
    /// Expert matrices, multiplied by the routed experts' ids.
    MulMatId,
    /// Biases, added.
    Add,
    /// Norm weights, multiplied elementwise.
    Mul,
    /// RoPE frequency factors.
    Rope,
}

/// Where a weight belongs: its name has a `blk.N.` prefix only in `Layer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Before the first layer (embeddings).
    Input,
    /// After the last layer (output norm and projection).
    Output,
    /// One tensor every layer reads; llama.cpp loads it with the first layer.
    AllLayers,
    /// One tensor per layer.
    Layer,
}

impl Scope {
    /// The part of the model a weight of this scope (of layer `il`) is placed with.
    pub fn part(self, il: Option<usize>) -> Part {
        match (self, il) {
            (Scope::Input, _) => Part::Input,
            (Scope::Output, _) => Part::Output,
            (Scope::AllLayers, _) => Part::Layer(0),
            (Scope::Layer, il) => Part::Layer(il.expect("a layer weight is loaded for a layer")),
        }
    }
}

/// A dimension of a weight's shape, in hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    Embd,
    Vocab,
    CtxTrain,
    Ff,
    /// The FFN's up projection: twice n_ff when it holds the gate too.
    FfUp,
    /// The Q, K, V projections' widths over all heads, and all three fused.
    QWidth,
    KWidth,
    VWidth,
    QkvWidth,
    /// The attention output's input width (n_head * head_dim_v).
    AttnOutWidth,
    HeadDimK,
    Heads,
    KvHeads,
    ExpertCount,
    FfExp,
    /// Gate and up of an expert side by side.
    FfExpTwice,
    FfShexp,
    /// One factor per rotated pair.
    RopePairs,
    /// Gated delta-net layers: the convolution's width and channels, the
    /// value heads, their total width, and one head's width.
    ConvKernel,
    ConvChannels,
    ValueHeads,
    ValueWidth,
    DeltaHead,
    /// LFM2's short convolution: its taps, and B, C and x side by side.
    ShortConvTaps,
    EmbdThrice,
    /// An encoder's token types and classifier outputs.
    TokenTypes,
    ClsOut,
    /// Latent attention: Q's rank, the K/V latent's, the latent with the
    /// RoPE part, a query head's part without RoPE, an output head.
    QRank,
    KvRank,
    KvRankRope,
    QkNope,
    HeadDimOut,
    /// Gemma 4: one layer's per-layer input width, and all layers' together.
    EmbdPerLayer,
    EmbdPerLayerAll,
    /// A single value.
    One,
}

impl Dim {
    /// The size in layer `il` (None: a weight outside the layers, sized as
    /// the full-attention layers).
    pub fn size(self, spec: &ArchSpec, hp: &HParams, il: Option<usize>) -> i64 {
        let (head_dim_k, head_dim_v, n_head_kv, n_ff) = match il {
            Some(il) => (hp.head_dim_k_of(il), hp.head_dim_v_of(il), hp.n_head_kv_of(il), hp.n_ff_of(il)),
            None => (hp.head_dim_k, hp.head_dim_v, hp.n_head_kv, hp.n_ff),
        };
        // a gated attention's Q projection holds a gate beside each head
        // (a latent attention's query and output heads are its own)
        let head_dim_q = hp.mla.map_or(head_dim_k, |m| m.head_dim_q);
        let head_dim_out = hp.mla.map_or(head_dim_v, |m| m.head_dim_out);
        let q = (hp.n_head * head_dim_q) as i64 * if spec.gated_attention { 2 } else { 1 };
        let k = (head_dim_k * n_head_kv) as i64;
        let v = (head_dim_v * n_head_kv) as i64;
        let delta = hp.delta_net.as_ref();
        match self {
            Dim::Embd => hp.n_embd as i64,
            Dim::Vocab => hp.n_vocab as i64,
            Dim::CtxTrain => hp.n_ctx_train as i64,
            Dim::Ff => n_ff as i64,
            Dim::FfUp if spec.fused_ffn_up => 2 * n_ff as i64,
            Dim::FfUp => n_ff as i64,
            Dim::QWidth => q,
            Dim::KWidth => k,
            Dim::VWidth => v,
            Dim::QkvWidth => q + k + v,
            Dim::AttnOutWidth => (hp.n_head * head_dim_out) as i64,
            Dim::HeadDimK => head_dim_k as i64,
            Dim::Heads => hp.n_head as i64,
            Dim::KvHeads => n_head_kv as i64,
            Dim::ExpertCount => hp.n_expert as i64,
            Dim::FfExp => hp.n_ff_exp as i64,
            Dim::FfExpTwice => 2 * hp.n_ff_exp as i64,
            Dim::FfShexp => hp.n_ff_shexp as i64,
            Dim::RopePairs => hp.n_rot as i64 / 2,
            Dim::ConvKernel => delta.map_or(0, |d| d.d_conv as i64),
            Dim::ConvChannels => delta.map_or(0, |d| d.conv_channels() as i64),
            Dim::ValueHeads => delta.map_or(0, |d| d.n_v_heads as i64),
            Dim::ValueWidth => delta.map_or(0, |d| d.value_dim() as i64),
            Dim::DeltaHead => delta.map_or(0, |d| d.head_dim as i64),
            Dim::ShortConvTaps => hp.short_conv_taps as i64,
            Dim::EmbdThrice => 3 * hp.n_embd as i64,
            Dim::TokenTypes => hp.n_token_types as i64,
            Dim::ClsOut => hp.n_cls_out as i64,
            Dim::QRank => hp.mla.map_or(0, |m| m.q_rank as i64),
            Dim::KvRank => hp.mla.map_or(0, |m| m.kv_rank as i64),
            Dim::KvRankRope => hp.mla.map_or(0, |m| (m.kv_rank + hp.n_rot) as i64),
            Dim::QkNope => hp.mla.map_or(0, |m| (m.head_dim_q - hp.n_rot) as i64),
            Dim::HeadDimOut => head_dim_out as i64,
            Dim::EmbdPerLayer => hp.per_layer.n_embd_per_layer as i64,
            Dim::EmbdPerLayerAll => (hp.per_layer.n_embd_per_layer * hp.n_layer) as i64,
            Dim::One => 1,
        }
    }
}

/// Whether the loader reads a row's weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Not read.
    Skip,
    /// Read if the file has it.
    Optional,
    /// Read; an error if the file lacks it.
    Required,
}

impl Need {
    /// `need` when `cond` holds, else Skip.
    fn when(cond: bool, need: Need) -> Need {
        if cond {
            need
        } else {
            Skip
        }
    }

    /// Optional when `optional`, else Required.
    fn optional_if(optional: bool) -> Need {
        if optional {
            Optional
        } else {
            Required
        }
    }
}

/// The weights read so far in one scope (the model's, or one layer's):
/// role and suffix to the loader's index of the weight.
#[derive(Default)]
pub struct Found(Vec<(TensorKind, Suffix, usize)>);

impl Found {
    pub fn get(&self, kind: TensorKind, suffix: Suffix) -> Option<usize> {
        self.0.iter().find(|&&(k, s, _)| k == kind && s == suffix).map(|&(_, _, i)| i)
    }

    pub fn insert(&mut self, kind: TensorKind, suffix: Suffix, idx: usize) {
        self.0.push((kind, suffix, idx));
    }

    fn has(&self, kind: TensorKind) -> bool {
        self.get(kind, Suffix::Weight).is_some()
    }
}

/// What a row's need is decided by: the architecture's switches, the
/// hyperparameters and the weights of the same scope read before it.
pub struct Conditions<'a> {
    pub spec: &'a ArchSpec,
    pub hp: &'a HParams,
    pub found: &'a Found,
    /// The layer read (None for the model's own weights).
    pub il: Option<usize>,
}

impl Conditions<'_> {
    fn encoder(&self) -> bool {
        self.spec.encoder
    }

    fn recurrent_layer(&self) -> bool {
        self.il.is_some_and(|il| self.hp.is_recurrent(il))
    }

    /// Experts in this layer (every layer, but Llama 4's interleaved ones).
    fn experts(&self) -> bool {
        match self.il {
            Some(il) => self.hp.is_moe_layer(il),
            None => self.hp.n_expert > 0,
        }
    }

    /// A dense FFN in this layer: where there are no experts, or beside them.
    fn dense_ffn(&self) -> bool {
        !self.experts() || self.spec.dense_beside_experts
    }

    fn layer_norm(&self) -> bool {
        self.spec.norm == Norm::Layer
    }

    /// The FFN's own input norm: a parallel block's FFN reads the attention's
    /// norm instead; StableLM's is optional, its weight and bias together.
    fn ffn_norm(&self) -> Need {
        Need::when(self.spec.pre_norms && !self.spec.parallel_block, Need::optional_if(self.spec.ffn_norm_optional))
    }

    fn qk_norm(&self, kind: QkNorm) -> Need {
        Need::when(self.spec.qk_norm == kind, Need::optional_if(kind == QkNorm::EachHeadOptional))
    }

    fn separate_qkv(&self, need: Need) -> Need {
        Need::when(!self.found.has(TensorKind::AttnQkv) && !self.spec.latent_attention, need)
    }

    /// A latent attention's weights; `low_rank_q`: those of Q's low-rank
    /// projection (Some(true)), of its one projection (Some(false)), or
    /// neither (None).
    fn latent(&self, low_rank_q: Option<bool>) -> Need {
        let q_rank = self.hp.mla.map_or(0, |m| m.q_rank);
        Need::when(self.spec.latent_attention && low_rank_q.is_none_or(|low| low == (q_rank > 0)), Required)
    }

    fn rope_freqs(&self) -> bool {
        self.spec.rope_factors == RopeFactors::Freqs && self.hp.rope_scaling != ScalingType::LongRope
    }

    /// Gemma 4's per-layer inputs, where the file gives their width.
    fn per_layer_inputs(&self) -> Need {
        Need::when(self.spec.gemma4_layers && self.hp.per_layer.n_embd_per_layer > 0, Required)
    }

    /// K and V of a layer that reads an earlier layer's cache (Gemma 4's
    /// shared-KV layers) are read if the file has them, never used.
    fn kv_need(&self, need: Need) -> Need {
        match self.il {
            Some(il) if il >= self.hp.per_layer.n_layer_kv && need == Required => Optional,
            _ => need,
        }
    }

    fn rope_long_short(&self) -> bool {
        self.spec.rope_factors == RopeFactors::LongShort
            || (self.spec.rope_factors == RopeFactors::Freqs && self.hp.rope_scaling == ScalingType::LongRope)
    }
}

/// One weight an architecture may read.
pub struct WeightRow {
    /// The role the graph uses it in.
    pub kind: TensorKind,
    /// Whose tensor in the file it is: the role's own, but for a tied output.
    pub file: TensorKind,
    pub suffix: Suffix,
    pub scope: Scope,
    pub shape: &'static [Dim],
    pub op: WeightOp,
    need: fn(&Conditions) -> Need,
}

impl WeightRow {
    /// The GGUF name of this row's tensor (of layer `il` for a layer weight).
    pub fn file_name(&self, il: Option<usize>) -> String {
        self.file.name(il, self.suffix)
    }

    /// Whether the loader reads it, and must find it, in the scope that
    /// `c` describes: the row's own rule, within the layer's kind of block.
    pub fn need(&self, c: &Conditions) -> Need {
        let in_block = match self.kind.block() {
            Block::Attention => !c.recurrent_layer(),
            Block::Recurrent => c.recurrent_layer(),
            Block::Any => true,
        };
        if in_block {
            (self.need)(c)
        } else {
            Skip
        }
    }

    /// The name of the role it is read for.
    pub fn role_name(&self, il: Option<usize>) -> String {
        self.kind.name(il, self.suffix)
    }
}

const fn row(
    kind: TensorKind,
    suffix: Suffix,
    scope: Scope,
    shape: &'static [Dim],
    op: WeightOp,
    need: fn(&Conditions) -> Need,
) -> WeightRow {
    WeightRow { kind, file: kind, suffix, scope, shape, op, need }
}

use Dim::*;
use Need::{Optional, Required, Skip};
use Scope::{AllLayers, Input, Layer};
use Suffix::{Bare, Bias, Scale, Weight};
use TensorKind as K;
use WeightOp::{Add, GetRows, Mul, MulMat, MulMatId};

/// Every weight, in the order llama.cpp's loader creates them: the model's
/// own, then each layer's.
pub const WEIGHTS: &[WeightRow] = &[
    row(K::TokenEmbd, Weight, Input, &[Embd, Vocab], GetRows, |_| Required),
    row(K::TokenTypes, Weight, Input, &[Embd, TokenTypes], GetRows, |c| Need::when(c.encoder(), Optional)),
    row(K::PosEmbd, Weight, Input, &[Embd, CtxTrain], GetRows, |c| Need::when(c.spec.rope == Rope::None, Required)),
    // an encoder's classification head (reranking), if it has one
    row(K::Cls, Weight, Scope::Output, &[Embd, Embd], MulMat, |c| Need::when(c.encoder(), Optional)),
    row(K::Cls, Bias, Scope::Output, &[Embd], Add, |c| Need::when(c.encoder(), Optional)),
    row(K::ClsOut, Weight, Scope::Output, &[Embd, ClsOut], MulMat, |c| Need::when(c.encoder(), Optional)),
    row(K::ClsOut, Bias, Scope::Output, &[ClsOut], Add, |c| Need::when(c.encoder(), Optional)),
    row(K::TokenEmbdNorm, Weight, Input, &[Embd], Mul, |c| Need::when(c.encoder(), Required)),
    row(K::TokenEmbdNorm, Bias, Input, &[Embd], Add, |c| Need::when(c.encoder(), Required)),
    row(K::OutputNorm, Weight, Scope::Output, &[Embd], Mul, |c| {
        Need::when(!c.encoder() && !c.spec.output_norm_is_token_embd_norm, Required)
    }),
    WeightRow {
        file: K::TokenEmbdNorm,
        ..row(K::OutputNorm, Weight, Scope::Output, &[Embd], Mul, |c| {
            Need::when(c.spec.output_norm_is_token_embd_norm, Required)
        })
    },
    row(K::OutputNorm, Bias, Scope::Output, &[Embd], Add, |c| Need::when(c.layer_norm() && !c.encoder(), Required)),
    row(K::Output, Weight, Scope::Output, &[Embd, Vocab], MulMat, |c| match c.spec.output {
        _ if c.encoder() => Skip,
        OutputWeight::Embd => Skip,
        OutputWeight::OwnOrEmbd => Optional,
        OutputWeight::Own => Required,
    }),
    // tied: the output projection reads the token embeddings
    WeightRow {
        file: K::TokenEmbd,
        ..row(K::Output, Weight, Scope::Output, &[Embd, Vocab], MulMat, |c| {
            Need::when(!c.found.has(K::Output) && !c.encoder(), Required)
        })
    },
    row(K::RopeFreqs, Weight, AllLayers, &[RopePairs], WeightOp::Rope, |c| match c.spec.rope_factors {
        RopeFactors::FullLayers => Required,
        _ => Need::when(c.rope_freqs(), Optional),
    }),
    row(K::PerLayerTokenEmbd, Weight, Input, &[EmbdPerLayerAll, Vocab], GetRows, |c| c.per_layer_inputs()),
    row(K::PerLayerModelProj, Weight, AllLayers, &[Embd, EmbdPerLayerAll], MulMat, |c| c.per_layer_inputs()),
    row(K::PerLayerProjNorm, Weight, AllLayers, &[EmbdPerLayer], Mul, |c| c.per_layer_inputs()),
    row(K::RopeFactorsLong, Weight, AllLayers, &[RopePairs], WeightOp::Rope, |c| {
        Need::when(c.rope_long_short(), Optional)
    }),
    row(K::RopeFactorsShort, Weight, AllLayers, &[RopePairs], WeightOp::Rope, |c| {
        Need::when(c.rope_long_short(), Optional)
    }),
    // llama.cpp's create_tensor_qkv: a fused attn_qkv if the file has one,
    // else the three projections; biases optional either way
    row(K::AttnQkv, Weight, Layer, &[Embd, QkvWidth], MulMat, |c| Need::when(!c.spec.latent_attention, Optional)),
    row(K::AttnQkv, Bias, Layer, &[QkvWidth], Add, |c| Need::when(c.found.has(K::AttnQkv), Optional)),
    // DeepSeek's latent attention: Q through a low-rank pair, or one attn_q
    row(K::AttnQANorm, Weight, Layer, &[QRank], Mul, |c| c.latent(Some(true))),
    row(K::AttnKvANorm, Weight, Layer, &[KvRank], Mul, |c| c.latent(None)),
    row(K::AttnQA, Weight, Layer, &[Embd, QRank], MulMat, |c| c.latent(Some(true))),
    row(K::AttnQB, Weight, Layer, &[QRank, QWidth], MulMat, |c| c.latent(Some(true))),
    row(K::AttnQ, Weight, Layer, &[Embd, QWidth], MulMat, |c| c.latent(Some(false))),
    row(K::AttnKvAMqa, Weight, Layer, &[Embd, KvRankRope], MulMat, |c| c.latent(None)),
    row(K::AttnKB, Weight, Layer, &[QkNope, KvRank, Heads], MulMat, |c| c.latent(None)),
    row(K::AttnVB, Weight, Layer, &[KvRank, HeadDimOut, Heads], MulMat, |c| c.latent(None)),
    row(K::AttnQ, Weight, Layer, &[Embd, QWidth], MulMat, |c| c.separate_qkv(Required)),
    row(K::AttnK, Weight, Layer, &[Embd, KWidth], MulMat, |c| c.separate_qkv(c.kv_need(Required))),
    // Gemma 4's V may be its K projection (no attn_v)
    row(K::AttnV, Weight, Layer, &[Embd, VWidth], MulMat, |c| {
        c.separate_qkv(c.kv_need(Need::optional_if(c.spec.gemma4_layers)))
    }),
    row(K::AttnQ, Bias, Layer, &[QWidth], Add, |c| c.separate_qkv(Optional)),
    row(K::AttnK, Bias, Layer, &[KWidth], Add, |c| c.separate_qkv(Optional)),
    row(K::AttnV, Bias, Layer, &[VWidth], Add, |c| c.separate_qkv(Optional)),
    // Llama 4's shared expert has no gate of its own
    row(K::FfnGateInpShexp, Weight, Layer, &[Embd], MulMat, |c| {
        Need::when(c.spec.shared_expert_gated, shared_expert(c))
    }),
    row(K::FfnGateShexp, Weight, Layer, &[Embd, FfShexp], MulMat, shared_expert),
    row(K::FfnUpShexp, Weight, Layer, &[Embd, FfShexp], MulMat, shared_expert),
    row(K::FfnDownShexp, Weight, Layer, &[FfShexp, Embd], MulMat, shared_expert),
    row(K::FfnGateInp, Weight, Layer, &[Embd, ExpertCount], MulMat, |c| Need::when(c.experts(), Required)),
    row(K::FfnExpProbsB, Bias, Layer, &[ExpertCount], Add, |c| {
        Need::when(c.experts() && c.spec.routing_keys, Optional)
    }),
    // Gemma 4: the router's input factor, and the norms around its dense FFN and experts
    row(K::FfnGateInp, Scale, Layer, &[Embd], Mul, |c| Need::when(c.experts() && c.spec.router_scaled_rms, Required)),
    row(K::FfnPreNorm2, Weight, Layer, &[Embd], Mul, dense_beside_experts),
    row(K::FfnPostNorm1, Weight, Layer, &[Embd], Mul, dense_beside_experts),
    row(K::FfnPostNorm2, Weight, Layer, &[Embd], Mul, dense_beside_experts),
    // llama.cpp's create_tensor_gate_up_exps: the fused pair if the file has it
    row(K::FfnGateUpExps, Weight, Layer, &[Embd, FfExpTwice, ExpertCount], MulMatId, |c| {
        Need::when(c.experts(), Optional)
    }),
    // llama's experts may lack a gate (then silu(up))
    row(K::FfnGateExps, Weight, Layer, &[Embd, FfExp, ExpertCount], MulMatId, |c| {
        Need::when(
            c.experts() && !c.found.has(K::FfnGateUpExps),
            Need::optional_if(c.spec.experts == Experts::WhenCounted),
        )
    }),
    row(K::FfnUpExps, Weight, Layer, &[Embd, FfExp, ExpertCount], MulMatId, |c| {
        Need::when(c.experts() && !c.found.has(K::FfnGateUpExps), Required)
    }),
    row(K::FfnDownExps, Weight, Layer, &[FfExp, Embd, ExpertCount], MulMatId, |c| Need::when(c.experts(), Required)),
    // a factor per expert on its output, where the file has one (Gemma 4's
    // per_expert_scale; llama.cpp reads it for every architecture)
    row(K::FfnDownExps, Scale, Layer, &[ExpertCount], Mul, |c| Need::when(c.experts(), Optional)),
    // gpt-oss: the router's and the experts' biases
    row(K::FfnGateInp, Bias, Layer, &[ExpertCount], Add, expert_bias),
    row(K::FfnGateExps, Bias, Layer, &[FfExp, ExpertCount], Add, expert_bias),
    row(K::FfnUpExps, Bias, Layer, &[FfExp, ExpertCount], Add, expert_bias),
    row(K::FfnDownExps, Bias, Layer, &[Embd, ExpertCount], Add, expert_bias),
    row(K::AttnSinks, Weight, Layer, &[Heads], Mul, |c| Need::when(c.spec.attn_sinks, Required)),
    row(K::FfnGate, Weight, Layer, &[Embd, Ff], MulMat, |c| {
        Need::when(c.dense_ffn() && c.spec.act != Activation::Gelu && !c.spec.fused_ffn_up, Required)
    }),
    row(K::FfnUp, Weight, Layer, &[Embd, FfUp], MulMat, |c| Need::when(c.dense_ffn(), Required)),
    row(K::FfnDown, Weight, Layer, &[Ff, Embd], MulMat, |c| Need::when(c.dense_ffn(), Required)),
    row(K::FfnUp, Bias, Layer, &[FfUp], Add, |c| Need::when(!c.experts(), dense_bias(c))),
    row(K::FfnDown, Bias, Layer, &[Embd], Add, |c| Need::when(!c.experts(), dense_bias(c))),
    row(K::AttnNorm, Bias, Layer, &[Embd], Add, |c| Need::when(c.layer_norm() && c.spec.pre_norms, Required)),
    row(K::FfnNorm, Bias, Layer, &[Embd], Add, |c| Need::when(c.layer_norm(), c.ffn_norm())),
    // OLMo 2 has no pre-norms
    row(K::AttnNorm, Weight, Layer, &[Embd], Mul, |c| Need::when(c.spec.pre_norms, Required)),
    row(K::AttnOut, Weight, Layer, &[AttnOutWidth, Embd], MulMat, |_| Required),
    row(K::AttnOut, Bias, Layer, &[Embd], Add, |c| {
        Need::when(c.spec.out_bias || c.spec.dense_biases, Need::optional_if(!c.spec.dense_biases))
    }),
    // read whenever the file has it; only a parallel block uses it (Falcon-40B)
    row(K::AttnNorm2, Weight, Layer, &[Embd], Mul, |_| Optional),
    row(K::AttnNorm2, Bias, Layer, &[Embd], Add, |c| {
        Need::when(c.spec.parallel_block && c.found.has(K::AttnNorm2), Required)
    }),
    row(K::AttnQNorm, Weight, Layer, &[HeadDimK], Mul, |c| c.qk_norm(QkNorm::PerHead)),
    row(K::AttnQNorm, Weight, Layer, &[QWidth], Mul, |c| c.qk_norm(QkNorm::Whole)),
    row(K::AttnQNorm, Weight, Layer, &[HeadDimK, Heads], Mul, |c| c.qk_norm(QkNorm::EachHeadOptional)),
    row(K::AttnKNorm, Weight, Layer, &[HeadDimK], Mul, |c| c.kv_need(c.qk_norm(QkNorm::PerHead))),
    row(K::AttnKNorm, Weight, Layer, &[KWidth], Mul, |c| c.qk_norm(QkNorm::Whole)),
    row(K::AttnKNorm, Weight, Layer, &[HeadDimK, KvHeads], Mul, |c| c.qk_norm(QkNorm::EachHeadOptional)),
    row(K::AttnPostNorm, Weight, Layer, &[Embd], Mul, |c| Need::when(c.spec.post_norms, Required)),
    row(K::FfnNorm, Weight, Layer, &[Embd], Mul, |c| Need::when(!c.spec.ffn_norm_is_post_attention, c.ffn_norm())),
    // Qwen3.5 keeps the FFN's input norm under the post-attention norm's name
    WeightRow {
        file: K::AttnPostNorm,
        ..row(K::FfnNorm, Weight, Layer, &[Embd], Mul, |c| Need::when(c.spec.ffn_norm_is_post_attention, Required))
    },
    row(K::DeltaQkv, Weight, Layer, &[Embd, ConvChannels], MulMat, delta_net),
    row(K::DeltaGate, Weight, Layer, &[Embd, ValueWidth], MulMat, delta_net),
    row(K::SsmConv1d, Weight, Layer, &[ConvKernel, ConvChannels], Mul, delta_net),
    row(K::SsmDt, Bias, Layer, &[ValueHeads], Add, delta_net),
    row(K::SsmA, Bare, Layer, &[ValueHeads], Mul, delta_net),
    row(K::SsmBeta, Weight, Layer, &[Embd, ValueHeads], MulMat, delta_net),
    row(K::SsmAlpha, Weight, Layer, &[Embd, ValueHeads], MulMat, delta_net),
    row(K::SsmNorm, Weight, Layer, &[DeltaHead], Mul, delta_net),
    row(K::SsmOut, Weight, Layer, &[ValueWidth, Embd], MulMat, delta_net),
    row(K::ShortConvKernel, Weight, Layer, &[ShortConvTaps, Embd], Mul, short_conv),
    row(K::ShortConvIn, Weight, Layer, &[Embd, EmbdThrice], MulMat, short_conv),
    row(K::ShortConvOut, Weight, Layer, &[Embd, Embd], MulMat, short_conv),
    row(K::AttnOutNorm, Weight, Layer, &[Embd], Mul, |c| Need::when(c.encoder(), Required)),
    row(K::AttnOutNorm, Bias, Layer, &[Embd], Add, |c| Need::when(c.encoder(), Required)),
    row(K::LayerOutNorm, Weight, Layer, &[Embd], Mul, |c| Need::when(c.encoder(), Required)),
    row(K::LayerOutNorm, Bias, Layer, &[Embd], Add, |c| Need::when(c.encoder(), Required)),
    row(K::FfnPostNorm, Weight, Layer, &[Embd], Mul, |c| Need::when(c.spec.post_norms, Required)),
    row(K::LayerOutScale, Weight, Layer, &[One], Mul, |c| Need::when(c.spec.gemma4_layers, Optional)),
    row(K::PerLayerInpGate, Weight, Layer, &[Embd, EmbdPerLayer], MulMat, |c| c.per_layer_inputs()),
    row(K::PerLayerProj, Weight, Layer, &[EmbdPerLayer, Embd], MulMat, |c| c.per_layer_inputs()),
    row(K::PerLayerPostNorm, Weight, Layer, &[Embd], Mul, |c| c.per_layer_inputs()),
];

/// The norms of Gemma 4's MoE layers, around its dense FFN and its experts.
fn dense_beside_experts(c: &Conditions) -> Need {
    Need::when(c.experts() && c.spec.dense_beside_experts, Required)
}

/// gpt-oss's biases of the router and the experts.
fn expert_bias(c: &Conditions) -> Need {
    Need::when(c.experts() && c.spec.expert_biases, Required)
}

/// The FFN's biases: required with dense biases (GPT-2), optional in an
/// encoder (BERT), else not read.
fn dense_bias(c: &Conditions) -> Need {
    if c.spec.dense_biases {
        Required
    } else {
        Need::when(c.encoder(), Optional)
    }
}

/// A gated delta-net layer's weights (in recurrent layers only: see WeightRow::need).
fn delta_net(c: &Conditions) -> Need {
    Need::when(c.spec.recurrent == Recurrent::GatedDeltaNet, Required)
}

/// A short-convolution layer's weights.
fn short_conv(c: &Conditions) -> Need {
    Need::when(c.spec.recurrent == Recurrent::ShortConv, Required)
}

/// Qwen2-MoE's shared expert, gated per token.
fn shared_expert(c: &Conditions) -> Need {
    Need::when(c.experts() && c.hp.n_ff_shexp > 0, Required)
}
