//! The model's weights on a backend, in their GGUF types: the per-layer
//! weight structs the graph builder reads, and the loader that walks the
//! weight table (weight_table.rs) and places each weight in the buffer type
//! llama.cpp would pick (the CPU's repacking "extra" types for matmul
//! weights they support, else the plain CPU buffer mapped over the file
//! without a copy).
use crate::engine::ggml::ops::{Ctx, RopeParams, Tensor, GGML_TYPE_F32, GGML_TYPE_I32};
use crate::engine::ggml::placement::{Part, Placement};
use crate::engine::ggml::runtime::{self as rt, Buffer, BufferType};
use crate::engine::ggml::sys;
use crate::engine::model::arch::{ArchSpec, HParams};
use crate::engine::model::gguf::TensorInfo;
use crate::engine::model::validate::{self, Role};
use crate::engine::model::weight_table::{
    Conditions, Found, Need, Scope, Suffix, TensorKind, WeightOp, WeightRow, WEIGHTS,
};
use crate::engine::model::Model;
use crate::engine::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
    /// DeepSeek's latent attention.
    Latent(LatentWeights),
}

/// The projections of multi-head latent attention (shapes in llama.cpp's
/// names: q_rank, kv_rank, the query head without and with RoPE).
#[derive(Clone, Copy)]
pub struct LatentWeights {
    pub q: LatentQ,
    pub kv_a: Tensor,      // [n_embd, kv_rank + n_rot]: the latent, then the RoPE part
    pub kv_a_norm: Tensor, // [kv_rank]
    pub k_b: Tensor,       // [qk_nope, kv_rank, n_head]
    pub v_b: Tensor,       // [kv_rank, head_dim_out, n_head]
}

/// A latent attention's query projection.
#[derive(Clone, Copy)]
pub enum LatentQ {
    /// attn_q_a [n_embd, q_rank], its norm, attn_q_b [q_rank, n_head * head_dim_q].
    LowRank { a: Tensor, a_norm: Tensor, b: Tensor },
    /// attn_q [n_embd, n_head * head_dim_q] (DeepSeek-V2-Lite).
    Full(Tensor),
}

/// Attention weights of one layer (ggml shapes: ne0 first).
pub struct AttnWeights {
    pub qkv: QkvWeights,
    pub wo: Tensor, // [n_head * head_dim_v, n_embd]
    pub bo: Option<Tensor>,
    pub q_norm: Option<Tensor>, // [head_dim_k]
    pub k_norm: Option<Tensor>, // [head_dim_k]
    /// gpt-oss's attention sinks: a logit per head [n_head].
    pub sinks: Option<Tensor>,
}

/// A gated delta-net layer's weights (Qwen3.5's linear attention).
pub struct DeltaNetWeights {
    pub qkv: Tensor,     // [n_embd, conv_channels]
    pub gate: Tensor,    // [n_embd, value_dim]: z, the output gate
    pub conv: Tensor,    // [d_conv, conv_channels]
    pub dt_bias: Tensor, // [n_v_heads]
    pub a: Tensor,       // [n_v_heads]: -exp(A_log)
    pub beta: Tensor,    // [n_embd, n_v_heads]
    pub alpha: Tensor,   // [n_embd, n_v_heads]
    pub norm: Tensor,    // [head_dim]
    pub out: Tensor,     // [value_dim, n_embd]
}

/// An LFM2 short-convolution layer's weights.
pub struct ShortConvWeights {
    pub kernel: Tensor,   // [taps, n_embd]
    pub in_proj: Tensor,  // [n_embd, 3 * n_embd]: B, C, x
    pub out_proj: Tensor, // [n_embd, n_embd]
}

/// What mixes the tokens in a layer.
pub enum Mixer {
    Attention(AttnWeights),
    DeltaNet(DeltaNetWeights),
    ShortConv(ShortConvWeights),
}

impl Mixer {
    /// The attention weights of a layer whose row always attends (parallel
    /// blocks, encoders: no such row has recurrent layers).
    pub fn attention(&self) -> &AttnWeights {
        match self {
            Mixer::Attention(attn) => attn,
            _ => unreachable!("this architecture's layers all attend"),
        }
    }
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
    /// [n_embd, n_ff_exp, n_expert], or gate and up fused [n_embd, 2 * n_ff_exp, n_expert]
    pub up_exps: ExpertsUp,
    pub down_exps: Tensor, // [n_ff_exp, n_embd, n_expert]
    /// A shared expert, gated per token by sigmoid(gate_inp · x) (Qwen2-MoE)
    /// or not gated (Llama 4).
    pub shared: Option<(Option<Tensor>, FfnWeights)>, // ([n_embd], [n_embd, n_ff_shexp] ...)
    /// The router's and every expert's biases (gpt-oss).
    pub biases: Option<ExpertBiases>,
    /// A bias of each expert's score when choosing them, not when
    /// weighing them (DeepSeek-V3's `exp_probs_b`) [n_expert].
    pub selection_bias: Option<Tensor>,
    /// The factor [n_embd] on the router's normed input (Gemma 4's
    /// `ffn_gate_inp.scale`).
    pub router_scale: Option<Tensor>,
    /// A factor per expert [n_expert] on its output (`ffn_down_exps.scale`).
    pub down_exps_scale: Option<Tensor>,
}

/// Gemma 4's MoE layer: its dense FFN and the experts side by side, each
/// with its own norms (the FFN's input norm is the layer's `ffn_norm`).
pub struct DenseAndExperts {
    pub dense: FfnWeights,
    pub dense_post_norm: Tensor, // [n_embd] post_ffw_norm_1
    pub experts: MoeWeights,
    pub experts_norm: Tensor,      // [n_embd] pre_ffw_norm_2
    pub experts_post_norm: Tensor, // [n_embd] post_ffw_norm_2
}

/// gpt-oss's biases of a mixture of experts.
#[derive(Clone, Copy)]
pub struct ExpertBiases {
    pub gate_inp: Tensor,  // [n_expert]
    pub gate_exps: Tensor, // [n_ff_exp, n_expert]
    pub up_exps: Tensor,   // [n_ff_exp, n_expert]
    pub down_exps: Tensor, // [n_embd, n_expert]
}

/// The experts' up projection, alone or fused with their gate.
#[derive(Clone, Copy)]
pub enum ExpertsUp {
    Up(Tensor),
    /// Each expert's gate rows, then its up rows (Qwen3.5-MoE's
    /// ffn_gate_up_exps); then MoeWeights::gate_exps is None.
    GateUp(Tensor),
}

/// The feed-forward block of a layer.
pub enum Ffn {
    Dense(FfnWeights),
    Moe(MoeWeights),
    DenseAndMoe(Box<DenseAndExperts>),
}

pub struct LayerWeights {
    pub attn_norm: Option<Tensor>, // [n_embd]; None without pre-norms (OLMo 2)
    pub attn_norm_b: Option<Tensor>,
    /// Falcon-40B: the attention's own input norm (weight, bias).
    pub attn_norm_2: Option<(Tensor, Tensor)>,
    pub mixer: Mixer,
    pub attn_post_norm: Option<Tensor>, // [n_embd]
    pub ffn_norm: Option<Tensor>,       // [n_embd]
    pub ffn_norm_b: Option<Tensor>,
    pub ffn: Ffn,
    pub ffn_post_norm: Option<Tensor>, // [n_embd]
    /// An encoder's post-norms (weight, bias): after the attention's
    /// residual add, and after the FFN's.
    pub attn_out_norm: Option<(Tensor, Tensor)>,
    pub layer_out_norm: Option<(Tensor, Tensor)>,
    /// Gemma 4: the per-layer input's gate [n_embd, n_embd_per_layer],
    /// projection [n_embd_per_layer, n_embd] and norm [n_embd].
    pub per_layer: Option<(Tensor, Tensor, Tensor)>,
    /// Gemma 4: the factor [1] on the layer's output.
    pub out_scale: Option<Tensor>,
}

/// Gemma 4's per-layer inputs: their token embedding [n_embd_per_layer ·
/// n_layer, n_vocab], the projection of the embeddings to them [n_embd,
/// n_embd_per_layer · n_layer] and its norm [n_embd_per_layer].
pub struct PerLayerInputs {
    pub tok_embd: Tensor,
    pub model_proj: Tensor,
    pub proj_norm: Tensor,
}

/// An encoder's extra weights: token types, the embeddings' norm, and the
/// classification head if any.
pub struct EncoderWeights {
    /// [n_embd, n_token_types]; its first row is added to every token.
    pub token_types: Option<Tensor>,
    /// LayerNorm of the embeddings (weight, bias).
    pub embd_norm: (Tensor, Tensor),
    /// [n_embd, n_embd] and its bias, then tanh (llama.cpp's `cls`).
    pub cls: Option<Tensor>,
    pub cls_b: Option<Tensor>,
    /// [n_embd, n_cls_out] and its bias (`cls.output`).
    pub cls_out: Option<Tensor>,
    pub cls_out_b: Option<Tensor>,
}

/// All weights of a model on one device. Immutable after load.
pub struct ModelWeights {
    pub tok_embd: Tensor, // [n_embd, n_vocab]
    /// Learned position embeddings [n_embd, n_ctx_train] (GPT-2).
    pub pos_embd: Option<Tensor>,
    /// [n_embd]; None in an encoder.
    pub output_norm: Option<Tensor>,
    pub output_norm_b: Option<Tensor>,
    /// [n_embd, n_vocab] (a second tensor over token_embd when tied); None
    /// in an encoder, which has no next-token logits.
    pub output: Option<Tensor>,
    pub encoder: Option<EncoderWeights>,
    /// RoPE frequency factors [n_rot / 2] shared by all layers: Llama 3's
    /// `rope_freqs`, or LongRoPE's long and short sets.
    pub rope_freqs: Option<Tensor>,
    pub rope_long: Option<Tensor>,
    pub rope_short: Option<Tensor>,
    pub per_layer_inputs: Option<PerLayerInputs>,
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
    hp: &'a HParams,
    placement: &'a Placement,
    /// Every buffer type a weight went to, each once (Pending::buft indexes it).
    bufts: Vec<BufferType>,
    pending: Vec<Pending>,
}

impl<'a> Loader<'a> {
    /// Reads the table's rows of the model's own weights (`il` None) or of
    /// layer `il`, those the architecture needs, and says what it found.
    fn read_rows(&mut self, il: Option<usize>) -> Result<Found> {
        let mut found = Found::default();
        for row in WEIGHTS.iter().filter(|row| (row.scope == Scope::Layer) == il.is_some()) {
            let need = row.need(&Conditions { spec: self.spec, hp: self.hp, found: &found, il });
            if need == Need::Skip {
                continue;
            }
            if let Some(idx) = self.read(row, il, need == Need::Required)? {
                found.insert(row.kind, row.suffix, idx);
            }
        }
        Ok(found)
    }

    /// Registers the tensor of `row` (of layer `il`) and returns its index
    /// in `pending`: None for an absent optional one, an error for an absent
    /// required one or a wrong shape.
    fn read(&mut self, row: &WeightRow, il: Option<usize>, required: bool) -> Result<Option<usize>> {
        let name = row.file_name(il);
        let Some(info) = self.model.gguf.tensor(&name) else {
            if required {
                return Err(Error::MissingTensor { path: self.model.path().clone(), name, arch: self.spec.name });
            }
            return Ok(None);
        };
        let ne: Vec<i64> = row.shape.iter().map(|dim| dim.size(self.spec, self.hp, il)).collect();
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
        let check_as = match row.op {
            WeightOp::MulMat | WeightOp::MulMatId => Role::MatMul,
            WeightOp::GetRows => Role::GetRows,
            WeightOp::Add => Role::Bias,
            WeightOp::Mul | WeightOp::Rope => Role::Norm,
        };
        let what = if row.kind == row.file { name.clone() } else { format!("{name} (used as {})", row.role_name(il)) };
        validate::tensor_type(self.model.path(), &what, check_as, info.ggml_type, self.spec.name)?;
        let chosen = self.choose_buft(info, row.op, row.scope.part(il))?;
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
                let n_used = self.hp.n_expert_used.max(1) as i64;
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
        let mut ld = Loader { model, spec, hp, placement, bufts: Vec::new(), pending: Vec::new() };
        let model_found = ld.read_rows(None)?;
        let layers_found = (0..hp.n_layer).map(|il| ld.read_rows(Some(il))).collect::<Result<Vec<_>>>()?;

        let (contexts, buffers, placement) = place(&mut ld)?;
        let mut bufts_by_name = HashMap::with_capacity(ld.pending.len());
        for p in &ld.pending {
            bufts_by_name.entry(p.info.name.clone()).or_insert(ld.bufts[p.buft]);
        }
        let read = |found| ReadWeights { pending: &ld.pending, found };
        let own = read(&model_found);
        use TensorKind::*;
        Ok(ModelWeights {
            tok_embd: own.required(TokenEmbd),
            pos_embd: own.weight(PosEmbd),
            output_norm: own.weight(OutputNorm),
            output_norm_b: own.bias(OutputNorm),
            output: own.weight(Output),
            encoder: own.weight(TokenEmbdNorm).map(|norm| EncoderWeights {
                token_types: own.weight(TokenTypes),
                embd_norm: (norm, own.bias(TokenEmbdNorm).expect("required with its weight")),
                cls: own.weight(Cls),
                cls_b: own.bias(Cls),
                cls_out: own.weight(ClsOut),
                cls_out_b: own.bias(ClsOut),
            }),
            rope_freqs: own.weight(RopeFreqs),
            rope_long: own.weight(RopeFactorsLong),
            rope_short: own.weight(RopeFactorsShort),
            per_layer_inputs: own.weight(PerLayerTokenEmbd).map(|tok_embd| PerLayerInputs {
                tok_embd,
                model_proj: own.required(PerLayerModelProj),
                proj_norm: own.required(PerLayerProjNorm),
            }),
            layers: layers_found.iter().map(|found| read(found).layer()).collect(),
            placement,
            bufts_by_name,
            _buffers: buffers,
            _contexts: contexts,
            _model: Arc::clone(model),
            _base: None,
        })
    }
}

/// The created tensors of the weights one scope (the model's own, or a
/// layer's) read, by role.
struct ReadWeights<'a> {
    pending: &'a [Pending],
    found: &'a Found,
}

impl ReadWeights<'_> {
    fn get(&self, kind: TensorKind, suffix: Suffix) -> Option<Tensor> {
        self.found.get(kind, suffix).map(|idx| self.pending[idx].tensor.expect("weights created before use"))
    }

    fn weight(&self, kind: TensorKind) -> Option<Tensor> {
        self.get(kind, Suffix::Weight)
    }

    fn bias(&self, kind: TensorKind) -> Option<Tensor> {
        self.get(kind, Suffix::Bias)
    }

    /// A weight the table requires wherever its block is read.
    fn required(&self, kind: TensorKind) -> Tensor {
        self.weight(kind).expect("a required tensor is found or refused")
    }

    fn layer(&self) -> LayerWeights {
        use TensorKind::*;
        let mixer = match self.weight(DeltaQkv) {
            Some(qkv) => Mixer::DeltaNet(DeltaNetWeights {
                qkv,
                gate: self.required(DeltaGate),
                conv: self.required(SsmConv1d),
                dt_bias: self.bias(SsmDt).expect("a required tensor is found or refused"),
                a: self.get(SsmA, Suffix::Bare).expect("a required tensor is found or refused"),
                beta: self.required(SsmBeta),
                alpha: self.required(SsmAlpha),
                norm: self.required(SsmNorm),
                out: self.required(SsmOut),
            }),
            None => match self.weight(ShortConvKernel) {
                Some(kernel) => Mixer::ShortConv(ShortConvWeights {
                    kernel,
                    in_proj: self.required(ShortConvIn),
                    out_proj: self.required(ShortConvOut),
                }),
                None => Mixer::Attention(self.attention()),
            },
        };
        LayerWeights {
            attn_norm: self.weight(AttnNorm),
            attn_norm_b: self.bias(AttnNorm),
            attn_norm_2: self.weight(AttnNorm2).zip(self.bias(AttnNorm2)),
            mixer,
            attn_post_norm: self.weight(AttnPostNorm),
            ffn_norm: self.weight(FfnNorm),
            ffn_norm_b: self.bias(FfnNorm),
            ffn: self.ffn(),
            ffn_post_norm: self.weight(FfnPostNorm),
            attn_out_norm: self.weight(AttnOutNorm).zip(self.bias(AttnOutNorm)),
            layer_out_norm: self.weight(LayerOutNorm).zip(self.bias(LayerOutNorm)),
            per_layer: self
                .weight(PerLayerInpGate)
                .map(|gate| (gate, self.required(PerLayerProj), self.required(PerLayerPostNorm))),
            out_scale: self.weight(LayerOutScale),
        }
    }

    fn attention(&self) -> AttnWeights {
        use TensorKind::*;
        let latent = self.weight(AttnKvAMqa).map(|kv_a| {
            QkvWeights::Latent(LatentWeights {
                q: match self.weight(AttnQA) {
                    Some(a) => LatentQ::LowRank { a, a_norm: self.required(AttnQANorm), b: self.required(AttnQB) },
                    None => LatentQ::Full(self.required(AttnQ)),
                },
                kv_a,
                kv_a_norm: self.required(AttnKvANorm),
                k_b: self.required(AttnKB),
                v_b: self.required(AttnVB),
            })
        });
        let qkv = match self.weight(AttnQkv) {
            _ if latent.is_some() => latent.expect("matched"),
            Some(wqkv) => QkvWeights::Fused { wqkv, bqkv: self.bias(AttnQkv) },
            None => QkvWeights::Separate {
                wq: self.required(AttnQ),
                // a Gemma 4 layer reading an earlier layer's cache may have no
                // K or V (the graph projects Q only there); its V may be its K
                wk: self.weight(AttnK).unwrap_or_else(|| self.required(AttnQ)),
                wv: self.weight(AttnV).or(self.weight(AttnK)).unwrap_or_else(|| self.required(AttnQ)),
                bq: self.bias(AttnQ),
                bk: self.bias(AttnK),
                bv: self.bias(AttnV),
            },
        };
        AttnWeights {
            qkv,
            wo: self.required(AttnOut),
            bo: self.bias(AttnOut),
            q_norm: self.weight(AttnQNorm),
            k_norm: self.weight(AttnKNorm),
            sinks: self.weight(AttnSinks),
        }
    }

    fn ffn(&self) -> Ffn {
        use TensorKind::*;
        let Some(experts) = self.experts() else {
            return Ffn::Dense(self.dense_ffn());
        };
        match self.weight(FfnPreNorm2) {
            Some(experts_norm) => Ffn::DenseAndMoe(Box::new(DenseAndExperts {
                dense: self.dense_ffn(),
                dense_post_norm: self.required(FfnPostNorm1),
                experts,
                experts_norm,
                experts_post_norm: self.required(FfnPostNorm2),
            })),
            None => Ffn::Moe(experts),
        }
    }

    fn dense_ffn(&self) -> FfnWeights {
        use TensorKind::*;
        FfnWeights {
            gate: self.weight(FfnGate),
            up: self.required(FfnUp),
            down: self.required(FfnDown),
            up_b: self.bias(FfnUp),
            down_b: self.bias(FfnDown),
        }
    }

    /// The layer's experts, if it has a router.
    fn experts(&self) -> Option<MoeWeights> {
        use TensorKind::*;
        let gate_inp = self.weight(FfnGateInp)?;
        Some(MoeWeights {
            gate_inp,
            gate_exps: self.weight(FfnGateExps),
            up_exps: match self.weight(FfnGateUpExps) {
                Some(fused) => ExpertsUp::GateUp(fused),
                None => ExpertsUp::Up(self.required(FfnUpExps)),
            },
            down_exps: self.required(FfnDownExps),
            shared: self.weight(FfnUpShexp).map(|up| {
                let shexp = FfnWeights {
                    gate: Some(self.required(FfnGateShexp)),
                    up,
                    down: self.required(FfnDownShexp),
                    up_b: None,
                    down_b: None,
                };
                (self.weight(FfnGateInpShexp), shexp)
            }),
            biases: self.bias(FfnGateInp).map(|gate_inp| ExpertBiases {
                gate_inp,
                gate_exps: self.bias(FfnGateExps).expect("required with the router's bias"),
                up_exps: self.bias(FfnUpExps).expect("required with the router's bias"),
                down_exps: self.bias(FfnDownExps).expect("required with the router's bias"),
            }),
            router_scale: self.get(FfnGateInp, Suffix::Scale),
            down_exps_scale: self.get(FfnDownExps, Suffix::Scale),
            selection_bias: self.bias(FfnExpProbsB),
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
        let moe = |m: &MoeWeights| MoeWeights {
            gate_inp: t(m.gate_inp),
            gate_exps: o(m.gate_exps),
            up_exps: match m.up_exps {
                ExpertsUp::Up(up) => ExpertsUp::Up(t(up)),
                ExpertsUp::GateUp(fused) => ExpertsUp::GateUp(t(fused)),
            },
            down_exps: t(m.down_exps),
            shared: m.shared.as_ref().map(|(g, f)| (o(*g), ffn(f))),
            biases: m.biases.map(|b| ExpertBiases {
                gate_inp: t(b.gate_inp),
                gate_exps: t(b.gate_exps),
                up_exps: t(b.up_exps),
                down_exps: t(b.down_exps),
            }),
            router_scale: o(m.router_scale),
            down_exps_scale: o(m.down_exps_scale),
            selection_bias: o(m.selection_bias),
        };
        let layers = self
            .layers
            .iter()
            .map(|l| LayerWeights {
                attn_norm: o(l.attn_norm),
                attn_norm_b: o(l.attn_norm_b),
                attn_norm_2: l.attn_norm_2.map(|(w, b)| (t(w), t(b))),
                mixer: match &l.mixer {
                    Mixer::Attention(a) => Mixer::Attention(AttnWeights {
                        qkv: match &a.qkv {
                            QkvWeights::Separate { wq, wk, wv, bq, bk, bv } => QkvWeights::Separate {
                                wq: t(*wq),
                                wk: t(*wk),
                                wv: t(*wv),
                                bq: o(*bq),
                                bk: o(*bk),
                                bv: o(*bv),
                            },
                            QkvWeights::Fused { wqkv, bqkv } => QkvWeights::Fused { wqkv: t(*wqkv), bqkv: o(*bqkv) },
                            QkvWeights::Latent(l) => QkvWeights::Latent(LatentWeights {
                                q: match l.q {
                                    LatentQ::LowRank { a, a_norm, b } => {
                                        LatentQ::LowRank { a: t(a), a_norm: t(a_norm), b: t(b) }
                                    }
                                    LatentQ::Full(q) => LatentQ::Full(t(q)),
                                },
                                kv_a: t(l.kv_a),
                                kv_a_norm: t(l.kv_a_norm),
                                k_b: t(l.k_b),
                                v_b: t(l.v_b),
                            }),
                        },
                        wo: t(a.wo),
                        bo: o(a.bo),
                        q_norm: o(a.q_norm),
                        k_norm: o(a.k_norm),
                        sinks: o(a.sinks),
                    }),
                    Mixer::ShortConv(c) => Mixer::ShortConv(ShortConvWeights {
                        kernel: t(c.kernel),
                        in_proj: t(c.in_proj),
                        out_proj: t(c.out_proj),
                    }),
                    Mixer::DeltaNet(d) => Mixer::DeltaNet(DeltaNetWeights {
                        qkv: t(d.qkv),
                        gate: t(d.gate),
                        conv: t(d.conv),
                        dt_bias: t(d.dt_bias),
                        a: t(d.a),
                        beta: t(d.beta),
                        alpha: t(d.alpha),
                        norm: t(d.norm),
                        out: t(d.out),
                    }),
                },
                attn_post_norm: o(l.attn_post_norm),
                ffn_norm: o(l.ffn_norm),
                ffn_norm_b: o(l.ffn_norm_b),
                ffn: match &l.ffn {
                    Ffn::Dense(f) => Ffn::Dense(ffn(f)),
                    Ffn::Moe(m) => Ffn::Moe(moe(m)),
                    Ffn::DenseAndMoe(b) => Ffn::DenseAndMoe(Box::new(DenseAndExperts {
                        dense: ffn(&b.dense),
                        dense_post_norm: t(b.dense_post_norm),
                        experts: moe(&b.experts),
                        experts_norm: t(b.experts_norm),
                        experts_post_norm: t(b.experts_post_norm),
                    })),
                },
                ffn_post_norm: o(l.ffn_post_norm),
                attn_out_norm: l.attn_out_norm.map(|(w, b)| (t(w), t(b))),
                layer_out_norm: l.layer_out_norm.map(|(w, b)| (t(w), t(b))),
                per_layer: l.per_layer.map(|(g, p, n)| (t(g), t(p), t(n))),
                out_scale: o(l.out_scale),
            })
            .collect();
        ModelWeights {
            tok_embd: t(self.tok_embd),
            pos_embd: o(self.pos_embd),
            output_norm: o(self.output_norm),
            output_norm_b: o(self.output_norm_b),
            output: o(self.output),
            encoder: self.encoder.as_ref().map(|e| EncoderWeights {
                token_types: o(e.token_types),
                embd_norm: (t(e.embd_norm.0), t(e.embd_norm.1)),
                cls: o(e.cls),
                cls_b: o(e.cls_b),
                cls_out: o(e.cls_out),
                cls_out_b: o(e.cls_out_b),
            }),
            rope_freqs: self.rope_freqs,
            rope_long: self.rope_long,
            rope_short: self.rope_short,
            per_layer_inputs: self.per_layer_inputs.as_ref().map(|p| PerLayerInputs {
                tok_embd: t(p.tok_embd),
                model_proj: t(p.model_proj),
                proj_norm: t(p.proj_norm),
            }),
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
/// types repack while they are filled), and the mapped pages they were
/// copied from are let go, so that only the copy stays resident.
fn place(ld: &mut Loader) -> Result<Placed> {
    let ggml_err = |what: String| Error::Ggml(what);
    let cpu_plain = ld.placement.cpu.buffer_type();
    // The file's tensors used in place (one can be both, e.g. a tied
    // embedding read by row there and repacked for the output product):
    // their pages stay.
    // A tensor is known by its file (a split model's part) and offset there.
    let used_in_place: HashSet<(usize, u64)> = match ld.model.uses_mmap() {
        true => {
            ld.pending.iter().filter(|p| ld.bufts[p.buft] == cpu_plain).map(|p| (p.info.part, p.info.offset)).collect()
        }
        false => Default::default(),
    };
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
        if ld.model.uses_mmap() && ld.bufts[b] == cpu_plain {
            // a buffer over each file's mapping (a split model has several)
            for part in 0..ld.model.n_parts() {
                let in_part: Vec<usize> =
                    members.iter().copied().filter(|&i| ld.pending[i].info.part == part).collect();
                let Some(map) = ld.model.mapping(part).filter(|_| !in_part.is_empty()) else { continue };
                // SAFETY: the mapping belongs to the model, which ModelWeights keeps
                // alive (Arc) until after this buffer is freed.
                let buffer = unsafe { Buffer::from_host(map.as_ptr(), map.len()) }
                    .ok_or_else(|| ggml_err("cannot wrap the model's mapping in a CPU buffer".into()))?;
                for &i in &in_part {
                    let p = &ld.pending[i];
                    let data = ld.model.mapped_data(&p.info).expect("mapped model");
                    if !buffer.place(p.tensor.unwrap(), data.as_ptr()) {
                        return Err(ggml_err(format!("cannot place tensor {} in the mapping", p.info.name)));
                    }
                }
                buffer.set_weights_usage();
                placement.push((ld.bufts[b].name(), buffer.size()));
                buffers.push(buffer);
            }
        } else {
            let buffer = Buffer::alloc_ctx_tensors(&ctx, ld.bufts[b])
                .ok_or_else(|| ggml_err(format!("cannot allocate a {} buffer for the weights", ld.bufts[b].name())))?;
            let mut scratch = Vec::new();
            for &i in &members {
                let p = &ld.pending[i];
                match ld.model.mapped_data(&p.info) {
                    Some(data) => {
                        rt::tensor_set_bytes(p.tensor.unwrap(), data);
                        if !used_in_place.contains(&(p.info.part, p.info.offset)) {
                            ld.model.release_mapped(&p.info);
                        }
                    }
                    None => {
                        scratch.resize(p.info.size as usize, 0u8);
                        ld.model.read_tensor_data(&p.info, &mut scratch)?;
                        rt::tensor_set_bytes(p.tensor.unwrap(), &scratch);
                    }
                }
            }
            buffer.set_weights_usage();
            placement.push((ld.bufts[b].name(), buffer.size()));
            buffers.push(buffer);
        }
        contexts.push(ctx);
    }
    Ok((contexts, buffers, placement))
}
