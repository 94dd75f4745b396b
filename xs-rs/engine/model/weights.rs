//! The model's weights on a backend, in their GGUF types: the tensor-name
//! table, the per-layer weight structs the graph builder reads, and the
//! loader that places each weight in the buffer type llama.cpp would pick
//! (the CPU's repacking "extra" types for matmul weights they support, else
//! the plain CPU buffer mapped over the file without a copy).
use crate::engine::ggml::ops::{Ctx, RopeParams, Tensor, GGML_TYPE_F32, GGML_TYPE_I32};
use crate::engine::ggml::placement::{Part, Placement};
use crate::engine::ggml::runtime::{self as rt, Buffer, BufferType};
use crate::engine::ggml::sys;
use crate::engine::model::arch::{
    Activation, ArchSpec, Experts, HParams, Norm, OutputWeight, QkNorm, Rope, RopeFactors,
};
use crate::engine::model::gguf::TensorInfo;
use crate::engine::model::rope::ScalingType;
use crate::engine::model::validate::{self, Role};
use crate::engine::model::Model;
use crate::engine::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// The weight tensors by role; `name(il)` gives the GGUF name without suffix.
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
    FfnGateInp,
    FfnGateExps,
    FfnUpExps,
    FfnDownExps,
    FfnGateInpShexp,
    FfnGateShexp,
    FfnUpShexp,
    FfnDownShexp,
    RopeFreqs,
    RopeFactorsLong,
    RopeFactorsShort,
}

/// The op a weight feeds, which decides the buffer types it may live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WeightOp {
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
            FfnGateInp => "ffn_gate_inp",
            FfnGateExps => "ffn_gate_exps",
            FfnUpExps => "ffn_up_exps",
            FfnDownExps => "ffn_down_exps",
            FfnGateInpShexp => "ffn_gate_inp_shexp",
            FfnGateShexp => "ffn_gate_shexp",
            FfnUpShexp => "ffn_up_shexp",
            FfnDownShexp => "ffn_down_shexp",
            RopeFreqs => "rope_freqs",
            RopeFactorsLong => "rope_factors_long",
            RopeFactorsShort => "rope_factors_short",
        }
    }

    /// The full GGUF name: `blk.N.stem.suffix` for layer tensors.
    pub fn name(self, il: Option<usize>, suffix: &str) -> String {
        match il {
            Some(il) => format!("blk.{il}.{}.{suffix}", self.stem()),
            None => format!("{}.{suffix}", self.stem()),
        }
    }

    fn op(self, suffix: &str) -> WeightOp {
        use TensorKind::*;
        match (self, suffix) {
            (_, "bias") => WeightOp::Add,
            (TokenEmbd | PosEmbd, _) => WeightOp::GetRows,
            (FfnGateExps | FfnUpExps | FfnDownExps, _) => WeightOp::MulMatId,
            (
                Output | AttnQ | AttnK | AttnV | AttnQkv | AttnOut | FfnGate | FfnUp | FfnDown | FfnGateInp
                | FfnGateInpShexp | FfnGateShexp | FfnUpShexp | FfnDownShexp,
                _,
            ) => WeightOp::MulMat,
            (RopeFreqs | RopeFactorsLong | RopeFactorsShort, _) => WeightOp::Rope,
            _ => WeightOp::Mul,
        }
    }
}

/// The Q/K/V projections of one layer: three matrices, or one fused
/// `attn_qkv` whose output rows are Q, then K, then V.
pub enum QkvWeights {
    Separate {
        wq: Tensor, // [n_embd, n_head * head_dim_k]
        wk: Tensor, // [n_embd, n_head_kv * head_dim_k]
        wv: Tensor, // [n_embd, n_head_kv * head_dim_v]
        bq: Option<Tensor>,
        bk: Option<Tensor>,
        bv: Option<Tensor>,
    },
    Fused {
        wqkv: Tensor, // [n_embd, q + k + v]
        bqkv: Option<Tensor>,
    },
}

/// Attention weights of one layer (ggml shapes: ne0 first).
pub struct AttnWeights {
    pub qkv: QkvWeights,
    pub wo: Tensor, // [n_head * head_dim_v, n_embd]
    pub bo: Option<Tensor>,
    pub q_norm: Option<Tensor>, // [head_dim_k]
    pub k_norm: Option<Tensor>, // [head_dim_k]
}

/// Gated feed-forward weights of one layer.
pub struct FfnWeights {
    /// [n_embd, n_ff]; None when ungated or when `up` holds gate and up (Phi-3).
    pub gate: Option<Tensor>,
    pub up: Tensor,   // [n_embd, n_ff], or [n_embd, 2 * n_ff] fused
    pub down: Tensor, // [n_ff, n_embd]
    pub up_b: Option<Tensor>,
    pub down_b: Option<Tensor>,
}

/// A mixture-of-experts block: the router and the stacked expert matrices.
pub struct MoeWeights {
    pub gate_inp: Tensor,          // [n_embd, n_expert]
    pub gate_exps: Option<Tensor>, // [n_embd, n_ff_exp, n_expert]
    pub up_exps: Tensor,           // [n_embd, n_ff_exp, n_expert]
    pub down_exps: Tensor,         // [n_ff_exp, n_embd, n_expert]
    /// A shared expert, gated per token by sigmoid(gate_inp · x) (Qwen2-MoE).
    pub shared: Option<(Tensor, FfnWeights)>, // ([n_embd], [n_embd, n_ff_shexp] ...)
}

/// The feed-forward block of a layer.
pub enum Ffn {
    Dense(FfnWeights),
    Moe(MoeWeights),
}

pub struct LayerWeights {
    pub attn_norm: Option<Tensor>, // [n_embd]; None without pre-norms (OLMo 2)
    pub attn_norm_b: Option<Tensor>,
    /// Falcon-40B: the attention's own input norm (weight, bias).
    pub attn_norm_2: Option<(Tensor, Tensor)>,
    pub attn: AttnWeights,
    pub attn_post_norm: Option<Tensor>, // [n_embd]
    pub ffn_norm: Option<Tensor>,       // [n_embd]
    pub ffn_norm_b: Option<Tensor>,
    pub ffn: Ffn,
    pub ffn_post_norm: Option<Tensor>, // [n_embd]
}

/// All weights of a model on one device. Immutable after load.
pub struct ModelWeights {
    pub tok_embd: Tensor, // [n_embd, n_vocab]
    /// Learned position embeddings [n_embd, n_ctx_train] (GPT-2).
    pub pos_embd: Option<Tensor>,
    pub output_norm: Tensor, // [n_embd]
    pub output_norm_b: Option<Tensor>,
    pub output: Tensor, // [n_embd, n_vocab] (a second tensor over token_embd when tied)
    /// RoPE frequency factors [n_rot / 2] shared by all layers: Llama 3's
    /// `rope_freqs`, or LongRoPE's long and short sets.
    pub rope_freqs: Option<Tensor>,
    pub rope_long: Option<Tensor>,
    pub rope_short: Option<Tensor>,
    pub layers: Vec<LayerWeights>,
    /// (buffer type name, bytes) per buffer, for diagnostics.
    pub placement: Vec<(String, usize)>,
    /// The buffer type of each weight, by GGUF name (a tied output: its
    /// token_embd's lookup copy), where a LoRA pair goes beside it.
    bufts_by_name: HashMap<String, BufferType>,
    // Drop order: buffers before the contexts that describe their tensors,
    // and both before the model whose mapping the CPU buffer points into.
    _buffers: Vec<Buffer>,
    _contexts: Vec<Ctx>,
    _model: Arc<Model>,
    /// For a copy with some tensors replaced: the weights it was made from.
    _base: Option<Arc<ModelWeights>>,
}

/// One weight to create: its file entry and where it goes.
struct Pending {
    info: TensorInfo,
    buft: usize,
    tensor: Option<Tensor>,
}

/// Chooses buffer types and collects the tensors to create.
struct Loader<'a> {
    model: &'a Model,
    spec: &'static ArchSpec,
    placement: &'a Placement,
    /// Every buffer type a weight went to, each once (Pending::buft indexes it).
    bufts: Vec<BufferType>,
    pending: Vec<Pending>,
    /// Experts a token uses (the matmul-by-id probe's shape).
    n_expert_used: usize,
}

impl<'a> Loader<'a> {
    /// Registers the tensor `kind` (of layer `il`), which the architecture
    /// needs, and returns its index in `pending`; an error when it is absent.
    fn require(&mut self, kind: TensorKind, il: Option<usize>, suffix: &str, ne: &[i64]) -> Result<usize> {
        self.require_as(kind, kind, il, suffix, ne)
    }

    /// As `require`, but reads the file tensor of `file_kind` for the role
    /// `role` (tied output: the role Output over the file's token_embd).
    fn require_as(
        &mut self,
        role: TensorKind,
        file_kind: TensorKind,
        il: Option<usize>,
        suffix: &str,
        ne: &[i64],
    ) -> Result<usize> {
        let found = self.want_as(role, file_kind, il, suffix, true, ne)?;
        Ok(found.expect("a required tensor is found or refused"))
    }

    /// Registers the tensor `kind` if the file has it (None when it does not).
    fn optional(&mut self, kind: TensorKind, il: Option<usize>, suffix: &str, ne: &[i64]) -> Result<Option<usize>> {
        self.want_as(kind, kind, il, suffix, false, ne)
    }

    /// `require` or `optional` as `required` says (for tensors an
    /// architecture's row makes optional).
    fn want(
        &mut self,
        kind: TensorKind,
        il: Option<usize>,
        suffix: &str,
        required: bool,
        ne: &[i64],
    ) -> Result<Option<usize>> {
        self.want_as(kind, kind, il, suffix, required, ne)
    }

    /// Registers a tensor: None for an absent optional one, an error for an
    /// absent required one or a wrong shape.
    fn want_as(
        &mut self,
        role: TensorKind,
        file_kind: TensorKind,
        il: Option<usize>,
        suffix: &str,
        required: bool,
        ne: &[i64],
    ) -> Result<Option<usize>> {
        let name = file_kind.name(il, suffix);
        let Some(info) = self.model.gguf.tensor(&name) else {
            if required {
                return Err(Error::MissingTensor { path: self.model.path().clone(), name, arch: self.spec.name });
            }
            return Ok(None);
        };
        let have = info.ne();
        let expect: Vec<i64> = ne.iter().copied().chain(std::iter::repeat(1)).take(4).collect();
        if have[..] != expect[..] || sys::type_traits(info.ggml_type).is_none() {
            return Err(Error::Corrupt {
                path: self.model.path().clone(),
                what: format!(
                    "tensor {name} has shape {:?}, expected {:?} (architecture {})",
                    &have, ne, self.spec.name
                ),
            });
        }
        let op = role.op(suffix);
        let check_as = match op {
            WeightOp::MulMat | WeightOp::MulMatId => Role::MatMul,
            WeightOp::GetRows => Role::GetRows,
            WeightOp::Add => Role::Bias,
            WeightOp::Mul | WeightOp::Rope => Role::Norm,
        };
        let what = if role == file_kind { name.clone() } else { format!("{name} (used as {})", role.name(il, suffix)) };
        validate::tensor_type(self.model.path(), &what, check_as, info.ggml_type, self.spec.name)?;
        let part = match (il, role) {
            (Some(il), _) => Part::Layer(il),
            (None, TensorKind::TokenEmbd | TensorKind::PosEmbd) => Part::Input,
            // llama.cpp loads the RoPE factors with the first layer
            (None, TensorKind::RopeFreqs | TensorKind::RopeFactorsLong | TensorKind::RopeFactorsShort) => {
                Part::Layer(0)
            }
            (None, _) => Part::Output,
        };
        let chosen = self.choose_buft(info, op, part)?;
        let buft = match self.bufts.iter().position(|&b| b == chosen) {
            Some(i) => i,
            None => {
                self.bufts.push(chosen);
                self.bufts.len() - 1
            }
        };
        self.pending.push(Pending { info: info.clone(), buft, tensor: None });
        Ok(Some(self.pending.len() - 1))
    }

    /// llama.cpp's `select_weight_buft`: the first candidate buffer type
    /// whose device supports the weight's op with the weight in it (a matmul
    /// probed with a 512-row f32 batch, a row lookup with 512 ids, a bias
    /// added to or a norm weight multiplied with f32 rows of its shape,
    /// RoPE factors used on 512 rows; the repacked layouts take matmuls only).
    /// An error when no candidate, the plain CPU included, supports it.
    fn choose_buft(&self, info: &TensorInfo, op: WeightOp, part: Part) -> Result<BufferType> {
        let candidates = self.placement.weight_bufts(part);
        let no_probe = || Error::Ggml(format!("cannot make the op that chooses where {} goes", info.name));
        let ctx = Ctx::new(3, 0).ok_or_else(no_probe)?;
        let ne = info.ne();
        let w = ctx.new_tensor(info.ggml_type as i32, &ne);
        let g = crate::engine::ggml::ops::GraphCtx::new(4).ok_or_else(no_probe)?;
        // one op, asked about with the weight placed in each candidate in turn
        let op_tensor = match op {
            WeightOp::MulMatId => {
                let n_used = self.n_expert_used.max(1) as i64;
                let b = ctx.new_tensor(GGML_TYPE_F32, &[ne[0], n_used, 512]);
                let ids = ctx.new_tensor(GGML_TYPE_I32, &[n_used, 512]);
                g.mul_mat_id(w, b, ids)
            }
            WeightOp::GetRows => g.get_rows(w, ctx.new_tensor(GGML_TYPE_I32, &[512])),
            WeightOp::Add => g.add(ctx.new_tensor(GGML_TYPE_F32, &ne), w),
            WeightOp::Mul => g.mul(ctx.new_tensor(GGML_TYPE_F32, &ne), w),
            WeightOp::Rope => {
                // one head of the rotated width (twice the factors) over 512 positions
                let rows = ctx.new_tensor(GGML_TYPE_F32, &[2 * ne[0], 1, 512]);
                let pos = ctx.new_tensor(GGML_TYPE_I32, &[512]);
                let p = RopeParams {
                    n_dims: 2 * ne[0] as i32,
                    mode: 0,
                    n_ctx_orig: 0,
                    freq_base: 10000.0,
                    freq_scale: 1.0,
                    ext_factor: 0.0,
                    attn_factor: 1.0,
                    beta_fast: 0.0,
                    beta_slow: 0.0,
                };
                g.rope_ext(rows, pos, Some(w), &p)
            }
            WeightOp::MulMat => {
                let b = ctx.new_tensor(GGML_TYPE_F32, &[ne[0], 512, ne[2], ne[3]]);
                g.mul_mat(w, b)
            }
        };
        for &(candidate_device, buft) in &candidates {
            let Some(probe) = Buffer::probe(buft) else {
                continue;
            };
            probe.mark_probe(w);
            if candidate_device.supports_op(op_tensor) {
                return Ok(buft);
            }
        }
        Err(Error::Invalid {
            path: self.model.path().clone(),
            what: format!(
                "the {} backend cannot {} tensor {} of type {} (architecture {})",
                self.placement.device_of(part).backend_name(),
                match op {
                    WeightOp::GetRows => "look up rows of",
                    WeightOp::MulMat | WeightOp::MulMatId => "multiply by",
                    WeightOp::Add => "add",
                    WeightOp::Mul | WeightOp::Rope => "apply",
                },
                info.name,
                sys::type_traits(info.ggml_type).map_or("unknown", |t| t.name),
                self.spec.name
            ),
        })
    }

    fn tensor(&self, idx: usize) -> Tensor {
        self.pending[idx].tensor.expect("weights created before use")
    }
}

impl ModelWeights {
    /// Loads every weight the architecture needs onto the devices of
    /// `placement`; with its `repack` the CPU's matmul weights go to its
    /// repacked layouts (faster, but ops other than matmul, such as a
    /// backward pass's, cannot read them).
    pub fn load(
        model: &Arc<Model>,
        spec: &'static ArchSpec,
        hp: &HParams,
        placement: &Placement,
    ) -> Result<ModelWeights> {
        let mut ld =
            Loader { model, spec, placement, bufts: Vec::new(), pending: Vec::new(), n_expert_used: hp.n_expert_used };
        let (n_embd, n_vocab, n_ff) = (hp.n_embd as i64, hp.n_vocab as i64, hp.n_ff as i64);
        let q_dim = (hp.n_head * hp.head_dim_k) as i64;
        let k_dim = hp.n_embd_k_gqa() as i64;
        let v_dim = hp.n_embd_v_gqa() as i64;
        let o_dim = (hp.n_head * hp.head_dim_v) as i64;
        use TensorKind::*;
        let tok_embd = ld.require(TokenEmbd, None, "weight", &[n_embd, n_vocab])?;
        let pos_embd = if spec.rope == Rope::None {
            Some(ld.require(PosEmbd, None, "weight", &[n_embd, hp.n_ctx_train as i64])?)
        } else {
            None
        };
        let output_norm = ld.require(OutputNorm, None, "weight", &[n_embd])?;
        let biases = spec.dense_biases;
        let layer_norm = spec.norm == Norm::Layer;
        let output_norm_b = if layer_norm { Some(ld.require(OutputNorm, None, "bias", &[n_embd])?) } else { None };
        let own_output = match spec.output {
            OutputWeight::Embd => None,
            OutputWeight::OwnOrEmbd => ld.optional(Output, None, "weight", &[n_embd, n_vocab])?,
            OutputWeight::Own => Some(ld.require(Output, None, "weight", &[n_embd, n_vocab])?),
        };
        let output = match own_output {
            Some(i) => i,
            None => ld.require_as(Output, TokenEmbd, None, "weight", &[n_embd, n_vocab])?,
        };
        let n_factors = [hp.n_rot as i64 / 2];
        let long_short = spec.rope_factors == RopeFactors::LongShort
            || (spec.rope_factors == RopeFactors::Freqs && (hp.rope_scaling == ScalingType::LongRope));
        let rope_freqs = if spec.rope_factors == RopeFactors::Freqs && !(hp.rope_scaling == ScalingType::LongRope) {
            ld.optional(RopeFreqs, None, "weight", &n_factors)?
        } else {
            None
        };
        let (rope_long, rope_short) = if long_short {
            (
                ld.optional(RopeFactorsLong, None, "weight", &n_factors)?,
                ld.optional(RopeFactorsShort, None, "weight", &n_factors)?,
            )
        } else {
            (None, None)
        };
        enum QkvIdx {
            Separate { q: usize, k: usize, v: usize, bias: [Option<usize>; 3] },
            Fused { qkv: usize, bias: Option<usize> },
        }
        enum FfnIdx {
            Dense { gate: Option<usize>, up: usize, down: usize, biases: [Option<usize>; 2] },
            Moe { router: usize, gate: Option<usize>, up: usize, down: usize, shared: Option<[usize; 4]> },
        }
        struct LayerIdx {
            attn_norm: Option<usize>,
            norm_biases: [Option<usize>; 2],
            attn_norm_2: Option<(usize, usize)>,
            qkv: QkvIdx,
            o: usize,
            bo: Option<usize>,
            q_norm: Option<usize>,
            k_norm: Option<usize>,
            attn_post_norm: Option<usize>,
            ffn_norm: Option<usize>,
            ffn: FfnIdx,
            ffn_post_norm: Option<usize>,
        }
        let mut layer_idx = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let l = Some(il);
            // llama.cpp's create_tensor_qkv: a fused attn_qkv if the file has
            // one, else the three projections; biases optional either way
            let qkv_dim = q_dim + k_dim + v_dim;
            let qkv = match ld.optional(AttnQkv, l, "weight", &[n_embd, qkv_dim])? {
                Some(qkv) => QkvIdx::Fused { qkv, bias: ld.optional(AttnQkv, l, "bias", &[qkv_dim])? },
                None => QkvIdx::Separate {
                    q: ld.require(AttnQ, l, "weight", &[n_embd, q_dim])?,
                    k: ld.require(AttnK, l, "weight", &[n_embd, k_dim])?,
                    v: ld.require(AttnV, l, "weight", &[n_embd, v_dim])?,
                    bias: [
                        ld.optional(AttnQ, l, "bias", &[q_dim])?,
                        ld.optional(AttnK, l, "bias", &[k_dim])?,
                        ld.optional(AttnV, l, "bias", &[v_dim])?,
                    ],
                },
            };
            let hd = hp.head_dim_k as i64;
            let ffn = if hp.n_expert > 0 {
                let (n_expert, n_ff_exp, n_ff_shexp) = (hp.n_expert as i64, hp.n_ff_exp as i64, hp.n_ff_shexp as i64);
                let shared = if hp.n_ff_shexp > 0 {
                    Some([
                        ld.require(FfnGateInpShexp, l, "weight", &[n_embd])?,
                        ld.require(FfnGateShexp, l, "weight", &[n_embd, n_ff_shexp])?,
                        ld.require(FfnUpShexp, l, "weight", &[n_embd, n_ff_shexp])?,
                        ld.require(FfnDownShexp, l, "weight", &[n_ff_shexp, n_embd])?,
                    ])
                } else {
                    None
                };
                FfnIdx::Moe {
                    router: ld.require(FfnGateInp, l, "weight", &[n_embd, n_expert])?,
                    // llama's experts may lack a gate (then silu(up))
                    gate: ld.want(
                        FfnGateExps,
                        l,
                        "weight",
                        spec.experts != Experts::WhenCounted,
                        &[n_embd, n_ff_exp, n_expert],
                    )?,
                    up: ld.require(FfnUpExps, l, "weight", &[n_embd, n_ff_exp, n_expert])?,
                    down: ld.require(FfnDownExps, l, "weight", &[n_ff_exp, n_embd, n_expert])?,
                    shared,
                }
            } else {
                let up_rows = if spec.fused_ffn_up { 2 * n_ff } else { n_ff };
                let gated = spec.act != Activation::Gelu && !spec.fused_ffn_up;
                FfnIdx::Dense {
                    gate: if gated { Some(ld.require(FfnGate, l, "weight", &[n_embd, n_ff])?) } else { None },
                    up: ld.require(FfnUp, l, "weight", &[n_embd, up_rows])?,
                    down: ld.require(FfnDown, l, "weight", &[n_ff, n_embd])?,
                    biases: if biases {
                        [
                            Some(ld.require(FfnUp, l, "bias", &[up_rows])?),
                            Some(ld.require(FfnDown, l, "bias", &[n_embd])?),
                        ]
                    } else {
                        [None; 2]
                    },
                }
            };
            // a parallel block's FFN reads the attention's norm: no ffn_norm
            let ffn_norm = spec.pre_norms && !spec.parallel_block;
            // StableLM: ffn_norm and its bias come together or not at all
            let ffn_norm_required = !spec.ffn_norm_optional;
            let norm_biases = if layer_norm && spec.pre_norms {
                [
                    Some(ld.require(AttnNorm, l, "bias", &[n_embd])?),
                    if ffn_norm { ld.want(FfnNorm, l, "bias", ffn_norm_required, &[n_embd])? } else { None },
                ]
            } else {
                [None; 2]
            };
            layer_idx.push(LayerIdx {
                attn_norm: if spec.pre_norms { Some(ld.require(AttnNorm, l, "weight", &[n_embd])?) } else { None },
                qkv,
                o: ld.require(AttnOut, l, "weight", &[o_dim, n_embd])?,
                bo: if spec.out_bias || biases { ld.want(AttnOut, l, "bias", biases, &[n_embd])? } else { None },
                norm_biases,
                attn_norm_2: match (spec.parallel_block, ld.optional(AttnNorm2, l, "weight", &[n_embd])?) {
                    (true, Some(w)) => Some((w, ld.require(AttnNorm2, l, "bias", &[n_embd])?)),
                    _ => None,
                },
                q_norm: match spec.qk_norm {
                    QkNorm::None => None,
                    QkNorm::PerHead => Some(ld.require(AttnQNorm, l, "weight", &[hd])?),
                    QkNorm::Whole => Some(ld.require(AttnQNorm, l, "weight", &[q_dim])?),
                    QkNorm::EachHeadOptional => ld.optional(AttnQNorm, l, "weight", &[hd, hp.n_head as i64])?,
                },
                k_norm: match spec.qk_norm {
                    QkNorm::None => None,
                    QkNorm::PerHead => Some(ld.require(AttnKNorm, l, "weight", &[hd])?),
                    QkNorm::Whole => Some(ld.require(AttnKNorm, l, "weight", &[k_dim])?),
                    QkNorm::EachHeadOptional => ld.optional(AttnKNorm, l, "weight", &[hd, hp.n_head_kv as i64])?,
                },
                attn_post_norm: if spec.post_norms {
                    Some(ld.require(AttnPostNorm, l, "weight", &[n_embd])?)
                } else {
                    None
                },
                ffn_norm: if ffn_norm { ld.want(FfnNorm, l, "weight", ffn_norm_required, &[n_embd])? } else { None },
                ffn,
                ffn_post_norm: if spec.post_norms {
                    Some(ld.require(FfnPostNorm, l, "weight", &[n_embd])?)
                } else {
                    None
                },
            });
        }

        let (contexts, buffers, placement) = place(&mut ld)?;
        let mut bufts_by_name = HashMap::with_capacity(ld.pending.len());
        for p in &ld.pending {
            bufts_by_name.entry(p.info.name.clone()).or_insert(ld.bufts[p.buft]);
        }
        let t = |i: usize| ld.tensor(i);
        let o = |i: Option<usize>| i.map(|i| ld.tensor(i));
        let layers = layer_idx
            .iter()
            .map(|x| LayerWeights {
                attn_norm: o(x.attn_norm),
                attn_norm_b: o(x.norm_biases[0]),
                attn_norm_2: x.attn_norm_2.map(|(w, b)| (t(w), t(b))),
                attn: AttnWeights {
                    qkv: match x.qkv {
                        QkvIdx::Separate { q, k, v, bias } => QkvWeights::Separate {
                            wq: t(q),
                            wk: t(k),
                            wv: t(v),
                            bq: o(bias[0]),
                            bk: o(bias[1]),
                            bv: o(bias[2]),
                        },
                        QkvIdx::Fused { qkv, bias } => QkvWeights::Fused { wqkv: t(qkv), bqkv: o(bias) },
                    },
                    wo: t(x.o),
                    bo: o(x.bo),
                    q_norm: o(x.q_norm),
                    k_norm: o(x.k_norm),
                },
                attn_post_norm: o(x.attn_post_norm),
                ffn_norm: o(x.ffn_norm),
                ffn_norm_b: o(x.norm_biases[1]),
                ffn: match x.ffn {
                    FfnIdx::Dense { gate, up, down, biases } => Ffn::Dense(FfnWeights {
                        gate: o(gate),
                        up: t(up),
                        down: t(down),
                        up_b: o(biases[0]),
                        down_b: o(biases[1]),
                    }),
                    FfnIdx::Moe { router, gate, up, down, shared } => Ffn::Moe(MoeWeights {
                        gate_inp: t(router),
                        gate_exps: o(gate),
                        up_exps: t(up),
                        down_exps: t(down),
                        shared: shared.map(|[gi, g, u, d]| {
                            (t(gi), FfnWeights { gate: Some(t(g)), up: t(u), down: t(d), up_b: None, down_b: None })
                        }),
                    }),
                },
                ffn_post_norm: o(x.ffn_post_norm),
            })
            .collect();
        Ok(ModelWeights {
            tok_embd: t(tok_embd),
            pos_embd: o(pos_embd),
            output_norm: t(output_norm),
            output_norm_b: o(output_norm_b),
            output: t(output),
            rope_freqs: o(rope_freqs),
            rope_long: o(rope_long),
            rope_short: o(rope_short),
            layers,
            placement,
            bufts_by_name,
            _buffers: buffers,
            _contexts: contexts,
            _model: Arc::clone(model),
            _base: None,
        })
    }
}

impl ModelWeights {
    /// These weights with each tensor whose name `replace` has swapped for
    /// its value there (trainable copies; same shapes), keeping these alive.
    pub fn with_replaced(self: &Arc<Self>, replace: &HashMap<String, Tensor>) -> ModelWeights {
        let t = |x: Tensor| replace.get(&x.name()).copied().unwrap_or(x);
        let o = |x: Option<Tensor>| x.map(t);
        let ffn = |f: &FfnWeights| FfnWeights {
            gate: o(f.gate),
            up: t(f.up),
            down: t(f.down),
            up_b: o(f.up_b),
            down_b: o(f.down_b),
        };
        let layers = self
            .layers
            .iter()
            .map(|l| LayerWeights {
                attn_norm: o(l.attn_norm),
                attn_norm_b: o(l.attn_norm_b),
                attn_norm_2: l.attn_norm_2.map(|(w, b)| (t(w), t(b))),
                attn: AttnWeights {
                    qkv: match &l.attn.qkv {
                        QkvWeights::Separate { wq, wk, wv, bq, bk, bv } => QkvWeights::Separate {
                            wq: t(*wq),
                            wk: t(*wk),
                            wv: t(*wv),
                            bq: o(*bq),
                            bk: o(*bk),
                            bv: o(*bv),
                        },
                        QkvWeights::Fused { wqkv, bqkv } => QkvWeights::Fused { wqkv: t(*wqkv), bqkv: o(*bqkv) },
                    },
                    wo: t(l.attn.wo),
                    bo: o(l.attn.bo),
                    q_norm: o(l.attn.q_norm),
                    k_norm: o(l.attn.k_norm),
                },
                attn_post_norm: o(l.attn_post_norm),
                ffn_norm: o(l.ffn_norm),
                ffn_norm_b: o(l.ffn_norm_b),
                ffn: match &l.ffn {
                    Ffn::Dense(f) => Ffn::Dense(ffn(f)),
                    Ffn::Moe(m) => Ffn::Moe(MoeWeights {
                        gate_inp: t(m.gate_inp),
                        gate_exps: o(m.gate_exps),
                        up_exps: t(m.up_exps),
                        down_exps: t(m.down_exps),
                        shared: m.shared.as_ref().map(|(g, f)| (t(*g), ffn(f))),
                    }),
                },
                ffn_post_norm: o(l.ffn_post_norm),
            })
            .collect();
        ModelWeights {
            tok_embd: t(self.tok_embd),
            pos_embd: o(self.pos_embd),
            output_norm: t(self.output_norm),
            output_norm_b: o(self.output_norm_b),
            output: t(self.output),
            rope_freqs: self.rope_freqs,
            rope_long: self.rope_long,
            rope_short: self.rope_short,
            layers,
            placement: Vec::new(),
            bufts_by_name: self.bufts_by_name.clone(),
            _buffers: Vec::new(),
            _contexts: Vec::new(),
            _model: self._model.clone(),
            _base: Some(self.clone()),
        }
    }

    /// The buffer type the weight called `name` (its GGUF name) is in.
    pub fn buffer_type_of(&self, name: &str) -> Option<BufferType> {
        self.bufts_by_name.get(name).copied()
    }

    /// The RoPE factors a session with an `n_ctx` context uses (llama.cpp's
    /// get_rope_factors): `rope_freqs` if any, else the long set past the
    /// original training context and the short one within it.
    pub fn rope_factors_for(&self, n_ctx: usize, hp: &HParams) -> Option<Tensor> {
        self.rope_freqs.or(if n_ctx > hp.n_ctx_orig_yarn { self.rope_long } else { self.rope_short })
    }
}

type Placed = (Vec<Ctx>, Vec<Buffer>, Vec<(String, usize)>);

/// Creates the tensors, one context per buffer type, and gives them memory:
/// weights for the device's own (host) buffer type are mapped in place when
/// the model is mapped; the others are allocated and filled (the CPU's extra
/// types repack while they are filled).
fn place(ld: &mut Loader) -> Result<Placed> {
    let ggml_err = |what: String| Error::Ggml(what);
    let cpu_plain = ld.placement.cpu.buffer_type();
    let mut contexts = Vec::new();
    let mut buffers = Vec::new();
    let mut placement = Vec::new();
    for b in 0..ld.bufts.len() {
        let members: Vec<usize> = (0..ld.pending.len()).filter(|&i| ld.pending[i].buft == b).collect();
        if members.is_empty() {
            continue;
        }
        let ctx = Ctx::new(members.len(), 0).ok_or_else(|| ggml_err("cannot create a weights context".into()))?;
        for &i in &members {
            let info = &ld.pending[i].info;
            let t = ctx.new_tensor(info.ggml_type as i32, &info.ne());
            t.set_name(&info.name);
            ld.pending[i].tensor = Some(t);
        }
        let mapping = ld.model.mapping().filter(|_| ld.bufts[b] == cpu_plain);
        let buffer = if let Some(map) = mapping {
            // SAFETY: the mapping belongs to the model, which ModelWeights keeps
            // alive (Arc) until after this buffer is freed.
            let buf = unsafe { Buffer::from_host(map.as_ptr(), map.len()) }
                .ok_or_else(|| ggml_err("cannot wrap the model's mapping in a CPU buffer".into()))?;
            for &i in &members {
                let p = &ld.pending[i];
                let data = ld.model.mapped_data(&p.info).expect("mapped model");
                if !buf.place(p.tensor.unwrap(), data.as_ptr()) {
                    return Err(ggml_err(format!("cannot place tensor {} in the mapping", p.info.name)));
                }
            }
            buf
        } else {
            let buf = Buffer::alloc_ctx_tensors(&ctx, ld.bufts[b])
                .ok_or_else(|| ggml_err(format!("cannot allocate a {} buffer for the weights", ld.bufts[b].name())))?;
            let mut scratch = Vec::new();
            for &i in &members {
                let p = &ld.pending[i];
                match ld.model.mapped_data(&p.info) {
                    Some(data) => rt::tensor_set_bytes(p.tensor.unwrap(), data),
                    None => {
                        scratch.resize(p.info.size as usize, 0u8);
                        ld.model.read_tensor_data(&p.info, &mut scratch)?;
                        rt::tensor_set_bytes(p.tensor.unwrap(), &scratch);
                    }
                }
            }
            buf
        };
        buffer.set_weights_usage();
        placement.push((ld.bufts[b].name(), buffer.size()));
        buffers.push(buffer);
        contexts.push(ctx);
    }
    Ok((contexts, buffers, placement))
}
