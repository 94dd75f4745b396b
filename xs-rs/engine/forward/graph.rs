//! The one graph builder: reads the architecture row and builds the forward
//! pass op for op as llama.cpp's `src/models/{llama,qwen2,gemma3}.cpp` with
//! `llm_graph_context::build_*` do (same ops, types, scales, masks and the
//! same place where the output rows are selected), naming intermediates as
//! llama.cpp does so traces can be diffed.
//!
//! A batch is a list of segments: runs of tokens that each extend their own
//! KV cache. Everything but attention runs over all tokens at once; each
//! segment attends over its own cache with its own mask.
use crate::engine::forward::inputs::{GraphInputs, SegmentInputs};
use crate::engine::forward::kv_cache::KvCache;
use crate::engine::forward::lora::LoraAdapter;
use crate::engine::ggml::ops::row_size;
use crate::engine::ggml::ops::{GraphCtx, RopeParams, Tensor, GGML_TYPE_F16, GGML_TYPE_F32};
use crate::engine::model::arch::Rope;
use crate::engine::model::arch::{Activation, ArchSpec, HParams};
use crate::engine::model::arch::{ExpertGating, Norm, QkNorm, RopeFactors, SwaRope};
use crate::engine::model::rope::RopeSettings;
use crate::engine::model::weights::{
    AttnWeights, DeltaNetWeights, DenseAndExperts, ExpertsUp, Ffn, FfnWeights, LatentQ, LatentWeights, LayerWeights,
    Mixer, ModelWeights, MoeWeights, QkvWeights, ShortConvWeights,
};
use crate::engine::{Error, Result};
use std::sync::Arc;

/// One sequence's share of a batch.
pub struct Segment<'a> {
    /// The cache the segment extends, or None for a training pass: the
    /// tokens attend over their own keys and values only, and nothing is
    /// stored.
    pub cache: Option<&'a KvCache>,
    /// Tokens of this segment (consecutive in the batch).
    pub n_tokens: usize,
    /// Whether every token of the segment gets logits (else only its last).
    pub all_outputs: bool,
}

/// What a graph computes at its output rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Head {
    /// Next-token logits: the output projection of the final hidden state.
    #[default]
    Logits,
    /// The final hidden state after the output norm (llama.cpp's `t_embd`,
    /// what its embedding mode pools), without the output projection.
    Hidden,
    /// An encoder's classification head on every output row (llama.cpp's
    /// rank pooling reads the first token's): tanh(cls · h + b), then
    /// `cls.output`; width n_cls_out.
    Rank,
}

/// A built graph and its inputs/outputs.
pub struct ForwardGraph {
    pub g: GraphCtx,
    pub inputs: GraphInputs,
    /// [width, n_outputs]: logits (width n_vocab) or hidden states (n_embd).
    pub output: Tensor,
    pub width: usize,
    pub n_outputs: usize,
}

/// The static part of a session that the builder needs.
pub struct Blueprint<'a> {
    pub spec: &'static ArchSpec,
    pub hp: &'a HParams,
    pub weights: &'a ModelWeights,
    pub flash_attn: bool,
    /// The RoPE frequency factors this session uses (see ModelWeights::rope_factors_for).
    pub rope_factors: Option<Tensor>,
    /// The RoPE settings of the non-sliding-window layers.
    pub rope: &'a RopeSettings,
    /// LoRA adapters and the scale each is used at.
    pub adapters: &'a [(Arc<LoraAdapter>, f32)],
    pub head: Head,
    /// Only ops ggml can differentiate (a training pass): tanh, GELU and
    /// layer norm are composed from such ops, and every row is an output.
    pub differentiable: bool,
}

/// Upper bound on graph nodes for a batch (llama.cpp sizes its graphs the
/// same way: generously, by layer count).
fn max_nodes(hp: &HParams, n_segments: usize) -> usize {
    2048 + hp.n_layer * (64 + 32 * n_segments + 2 * hp.n_expert_used)
}

struct Builder<'a, 'b> {
    bp: &'a Blueprint<'a>,
    g: &'b GraphCtx,
    n_tokens: i64,
    /// Each token's attention temperature (the input), if the model has one.
    attn_temp: Option<Tensor>,
    /// The Walsh-Hadamard matrices of a quantized cache's rotations, by size.
    rotation: Vec<(usize, Tensor)>,
}

impl Blueprint<'_> {
    /// Builds the graph for `segments` (each with n_tokens > 0 and room in its
    /// cache: the caller checked both). With `worst_case` every segment
    /// attends over its whole cache: the graph to reserve memory with.
    pub fn build(&self, segments: &[Segment], worst_case: bool) -> Result<ForwardGraph> {
        let g = GraphCtx::new(max_nodes(self.hp, segments.len()))
            .ok_or_else(|| Error::Ggml("cannot allocate the graph context".into()))?;
        self.build_into(g, segments, worst_case)
    }

    /// The nodes a graph of one segment takes (for sizing a training graph).
    pub fn max_nodes(&self) -> usize {
        max_nodes(self.hp, 1)
    }

    /// `build` in a graph context the caller made (one with room for a
    /// backward pass, for training).
    pub fn build_into(&self, g: GraphCtx, segments: &[Segment], worst_case: bool) -> Result<ForwardGraph> {
        let hp = self.hp;
        let n_tokens: usize = segments.iter().map(|s| s.n_tokens).sum();
        let n_outputs: usize = segments.iter().map(|s| if s.all_outputs { s.n_tokens } else { 1 }).sum();
        let inputs = GraphInputs::declare(&g, hp, segments, self.flash_attn, worst_case, n_outputs);
        let attn_temp = inputs.attn_temp.map(|(t, _)| t);
        let b = Builder {
            bp: self,
            g: &g,
            n_tokens: n_tokens as i64,
            attn_temp,
            rotation: inputs.hadamard.iter().map(|&(n, t, _)| (n, t)).collect(),
        };
        let (tokens, pos, out_ids, seg_inputs) = (inputs.tokens, inputs.pos, inputs.out_ids, &inputs.segments);

        let w = self.weights;
        let mut inp_l = g.get_rows(w.tok_embd, tokens);
        for (adapter, scale) in active(self.adapters) {
            // llama.cpp's build_inp_embd: B times A's rows of the tokens
            if let Some(p) = adapter.get("token_embd.weight") {
                let delta = g.mul_mat(p.b, g.get_rows(p.a, tokens));
                inp_l = g.add(inp_l, g.scale(delta, p.scale(*scale)));
            }
        }
        if self.spec.embed_scale_sqrt {
            inp_l = g.scale(inp_l, (hp.n_embd as f32).sqrt());
            name(inp_l, "inp_scaled", None);
        } else if hp.embedding_scale != 0.0 {
            inp_l = g.scale(inp_l, hp.embedding_scale);
        }
        if let Some(types) = w.encoder.as_ref().and_then(|e| e.token_types) {
            // every token is of type 0 ("sentence A"), as llama.cpp's bert graph
            inp_l = g.add(inp_l, g.view_2d(types, [hp.n_embd as i64, 1], types.nb()[1], 0));
        }
        if let Some(pos_embd) = w.pos_embd {
            inp_l = g.add(inp_l, g.get_rows(pos_embd, pos));
        }
        if let Some(enc) = &w.encoder {
            name(inp_l, "inp_embd", None);
            inp_l = b.norm_biased(inp_l, Some(enc.embd_norm.0), Some(enc.embd_norm.1), "inp_norm", Some(0));
        }
        g.expand(inp_l);

        if let (true, Some(what)) = (self.differentiable, self.spec.untrainable()) {
            return Err(Error::Argument(format!(
                "training is not supported for {}: ggml cannot differentiate {what}",
                self.spec.name
            )));
        }
        let per_layer_inputs = b.per_layer_inputs(inp_l, tokens);
        for (il, layer) in w.layers.iter().enumerate() {
            // a training pass keeps every row (no selection to differentiate)
            let last = il + 1 == w.layers.len() && !self.differentiable && !self.spec.outputs_after_norm;
            if self.spec.parallel_block {
                let rows = last.then_some(out_ids);
                inp_l = b.parallel_layer(inp_l, layer, segments, seg_inputs, pos, rows, il);
                continue;
            }
            if self.spec.encoder {
                let rows = last.then_some(out_ids);
                inp_l = b.encoder_layer(inp_l, layer, segments, seg_inputs, pos, rows, il);
                continue;
            }
            let mut attn_in = match layer.attn_norm {
                Some(w) => b.norm_biased(inp_l, Some(w), layer.attn_norm_b, "attn_norm", Some(il)),
                None => inp_l,
            };
            let mut cur = match &layer.mixer {
                Mixer::Attention(attn) => b.attention(attn_in, attn, segments, seg_inputs, pos, il),
                Mixer::DeltaNet(delta) => b.delta_net(attn_in, delta, segments, il)?,
                Mixer::ShortConv(conv) => b.short_conv(attn_in, conv, segments, il)?,
            };
            let mut residual = inp_l;
            if last {
                // only the output rows go on past attention (llama.cpp's inp_out_ids)
                cur = g.get_rows(cur, out_ids);
                residual = g.get_rows(residual, out_ids);
                if self.spec.ffn_norm_optional {
                    attn_in = g.get_rows(attn_in, out_ids);
                }
            }
            if let Some(post) = layer.attn_post_norm {
                cur = b.norm(cur, Some(post), "attn_post_norm", Some(il));
            }
            if hp.residual_scale != 0.0 {
                cur = g.scale(cur, hp.residual_scale);
            }
            let ffn_inp = g.add(cur, residual);
            name(ffn_inp, if self.spec.post_norms { "sa_out" } else { "ffn_inp" }, Some(il));
            let cur = match layer.ffn_norm {
                Some(w) => b.norm_biased(ffn_inp, Some(w), layer.ffn_norm_b, "ffn_norm", Some(il)),
                // StableLM 2's parallel residual: the FFN reads the attention's input
                None if self.spec.ffn_norm_optional => attn_in,
                None => ffn_inp,
            };
            let mut cur = b.ffn_block(&layer.ffn, cur, ffn_inp, il);
            name(cur, "ffn_out", Some(il));
            if let Some(post) = layer.ffn_post_norm {
                cur = b.norm(cur, Some(post), "ffn_post_norm", Some(il));
            }
            if hp.residual_scale != 0.0 {
                cur = g.scale(cur, hp.residual_scale);
            }
            let mut out = g.add(cur, ffn_inp);
            if let (Some((gate, proj, norm)), Some(inputs)) = (layer.per_layer, per_layer_inputs) {
                out = b.add_per_layer_input(out, inputs, (gate, proj, norm), il);
            }
            if let Some(scale) = layer.out_scale {
                out = g.mul(out, scale);
                name(out, "out_scaled", Some(il));
            }
            name(out, "l_out", Some(il));
            inp_l = out;
        }

        let mut cur = match w.output_norm {
            Some(norm) => b.norm_biased(inp_l, Some(norm), w.output_norm_b, "result_norm", None),
            // an encoder's last layer ends in its own norm
            None => inp_l,
        };
        if self.spec.outputs_after_norm && !self.differentiable {
            cur = g.get_rows(cur, out_ids);
        }
        if self.head == Head::Hidden {
            cur.set_output();
            g.expand(cur);
            return Ok(ForwardGraph { g, inputs, output: cur, width: hp.n_embd, n_outputs });
        }
        if self.head == Head::Rank {
            let scores = b.classify(cur)?;
            scores.set_output();
            g.expand(scores);
            return Ok(ForwardGraph { g, inputs, output: scores, width: hp.n_cls_out, n_outputs });
        }
        let Some(output) = w.output else {
            return Err(Error::Argument(format!(
                "a {} model is an encoder: it has no next-token logits (use embed or rerank)",
                self.spec.name
            )));
        };
        let mut logits = b.mm(output, cur);
        if hp.logit_scale != 1.0 {
            logits = g.scale(logits, 1.0 / hp.logit_scale);
        }
        if hp.final_logit_softcap != 0.0 {
            logits = b.softcap(logits, hp.final_logit_softcap);
        }
        name(logits, "result_output", None);
        logits.set_output();
        g.expand(logits);
        Ok(ForwardGraph { g, inputs, output: logits, width: hp.n_vocab, n_outputs })
    }
}

/// The adapters a graph applies, in llama.cpp's order: it keeps them in an
/// unordered map, which (libstdc++) gives them back newest first, and it
/// leaves out those at scale 0. The order matters in the last bits.
fn active(adapters: &[(Arc<LoraAdapter>, f32)]) -> impl Iterator<Item = &(Arc<LoraAdapter>, f32)> {
    adapters.iter().rev().filter(|(_, scale)| *scale != 0.0)
}

fn name(t: Tensor, label: &str, il: Option<usize>) {
    match il {
        Some(il) => t.set_name(&format!("{label}-{il}")),
        None => t.set_name(label),
    }
}

impl Builder<'_, '_> {
    /// The row's norm times the weight (llama.cpp's build_norm).
    fn norm(&self, x: Tensor, weight: Option<Tensor>, label: &str, il: Option<usize>) -> Tensor {
        self.norm_biased(x, weight, None, label, il)
    }

    /// cap·tanh(x/cap) (Gemma 2's softcapping). Training composes tanh from
    /// ops ggml can differentiate: tanh(z) = 2·σ(2z) − 1.
    fn softcap(&self, x: Tensor, cap: f32) -> Tensor {
        let g = self.g;
        if !self.bp.differentiable {
            return g.scale(g.tanh(g.scale(x, 1.0 / cap)), cap);
        }
        let sigmoid = self.sigmoid(g.scale(x, 2.0 / cap));
        g.scale_bias(sigmoid, 2.0 * cap, -cap)
    }

    /// In a training graph, `t` (contiguous) behind a reshape to its own
    /// shape: the reshape's gradient makes the gradient flowing back into
    /// `t` contiguous, which ggml's gradients of SCALE, CONT and VIEW need
    /// (a permute's gives a strided one). Elsewhere `t` itself.
    fn contiguous_grad(&self, t: Tensor) -> Tensor {
        if !self.bp.differentiable {
            return t;
        }
        let ne = t.ne();
        self.g.reshape_4d(t, ne)
    }

    /// σ(z) = exp(−softplus(−z)), which neither overflows nor divides.
    fn sigmoid(&self, z: Tensor) -> Tensor {
        let g = self.g;
        g.exp(g.scale(g.softplus(g.scale(z, -1.0)), -1.0))
    }

    /// GELU, tanh approximation, from differentiable ops (ggml has no
    /// gradient for GELU): x·σ(2u), u = √(2/π)·(x + 0.044715·x³).
    fn gelu(&self, x: Tensor) -> Tensor {
        let g = self.g;
        let cube = g.mul(g.sqr(x), x);
        let inner = g.add(x, g.scale(cube, 0.044715));
        let two_u = g.scale(inner, 2.0 * (2.0 / std::f32::consts::PI).sqrt());
        g.mul(x, self.sigmoid(two_u))
    }

    /// The row's norm times the weight, plus the bias.
    fn norm_biased(
        &self,
        x: Tensor,
        weight: Option<Tensor>,
        bias: Option<Tensor>,
        label: &str,
        il: Option<usize>,
    ) -> Tensor {
        let (g, eps) = (self.g, self.bp.hp.norm_eps);
        let mut cur = match self.bp.spec.norm {
            Norm::Rms => g.rms_norm(x, eps),
            // ggml has no gradient for NORM: the RMS norm of the centred row is the same
            // (the mean as a scaled row sum: ggml's MEAN gradient holds for one row only)
            Norm::Layer if self.bp.differentiable => {
                let mean = g.scale(g.sum_rows(x), 1.0 / x.ne()[0] as f32);
                g.rms_norm(g.sub(x, g.repeat(mean, x)), eps)
            }
            Norm::Layer => g.layer_norm(x, eps),
        };
        if let Some(w) = weight {
            name(cur, "norm", il);
            cur = g.mul(cur, w);
        }
        if let Some(b) = bias {
            cur = g.add(cur, b);
        }
        name(cur, label, il);
        cur
    }

    /// A weight times x, plus each adapter's B·(A·x) for that weight
    /// (llama.cpp's build_lora_mm).
    fn mm(&self, w: Tensor, x: Tensor) -> Tensor {
        let g = self.g;
        let mut res = g.mul_mat(w, x);
        if self.bp.adapters.is_empty() {
            return res;
        }
        let name = w.name();
        for (adapter, scale) in active(self.bp.adapters) {
            let Some(p) = adapter.get(&name) else { continue };
            // a token_embd pair (made for the lookup) at a tied output: not a projection's
            if p.a.ne()[0] != x.ne()[0] {
                continue;
            }
            let ab = g.mul_mat(p.b, g.mul_mat(p.a, x));
            res = g.add(res, g.scale(ab, p.scale(*scale)));
        }
        res
    }

    /// A projection plus its optional bias.
    fn linear(&self, w: Tensor, b: Option<Tensor>, x: Tensor) -> Tensor {
        let cur = self.mm(w, x);
        match b {
            Some(b) => self.g.add(cur, b),
            None => cur,
        }
    }

    /// Gemma 4's per-layer inputs [n_embd_per_layer, n_tokens, n_layer]
    /// (llama.cpp's build_inp_per_layer and project_per_layer_inputs): each
    /// token's rows of the per-layer embedding, scaled by
    /// sqrt(n_embd_per_layer), plus the RMS-normed projection of the scaled
    /// embeddings `inp` (scaled by 1/sqrt(n_embd)), the sum scaled by
    /// 1/sqrt(2). None for a model without them.
    fn per_layer_inputs(&self, inp: Tensor, tokens: Tensor) -> Option<Tensor> {
        let (g, hp) = (self.g, self.bp.hp);
        let w = self.bp.weights.per_layer_inputs.as_ref()?;
        let (n_pl, n_layer, n) = (hp.per_layer.n_embd_per_layer as i64, hp.n_layer as i64, self.n_tokens);
        let selected = g.reshape_3d(g.get_rows(w.tok_embd, tokens), n_pl, n_layer, n);
        let selected = g.scale(selected, (n_pl as f32).sqrt());
        name(selected, "inp_per_layer_selected", None);
        g.expand(selected);
        let proj = g.scale(g.mul_mat(w.model_proj, inp), 1.0 / (hp.n_embd as f32).sqrt());
        let proj = self.norm(g.reshape_3d(proj, n_pl, n_layer, n), Some(w.proj_norm), "per_layer_proj", None);
        let sum = g.scale(g.add(proj, selected), 1.0 / 2f32.sqrt());
        name(sum, "inp_per_layer", None);
        Some(g.cont(g.permute(sum, [0, 2, 1, 3])))
    }

    /// Gemma 4's per-layer input added to layer `il`'s output `x`:
    /// gelu(gate · x) times the layer's slice of `inputs`, projected back,
    /// RMS-normed.
    fn add_per_layer_input(&self, x: Tensor, inputs: Tensor, w: (Tensor, Tensor, Tensor), il: usize) -> Tensor {
        let g = self.g;
        let (gate, proj, norm) = w;
        let ne = inputs.ne();
        let slice = g.view_2d(inputs, [ne[0], ne[1]], inputs.nb()[1], il * inputs.nb()[2]);
        let cur = g.mul(g.gelu(self.mm(gate, x)), slice);
        let cur = self.norm(self.mm(proj, cur), Some(norm), "per_layer_embd_out", Some(il));
        g.add(x, cur)
    }

    /// RoPE of Q or K, or x unchanged for rows and layers without RoPE.
    fn rope(&self, x: Tensor, pos: Tensor, il: usize) -> Tensor {
        let hp = self.bp.hp;
        let Some(mode) = self.bp.spec.rope.ggml_mode().filter(|_| hp.uses_rope(il)) else {
            return x;
        };
        let r = self.bp.rope;
        // sliding-window layers keep their own base and scale (llama.cpp's
        // get_rope_freq_base/scale); OLMo 3's are plain RoPE
        let (freq_base, freq_scale, ext_factor, attn_factor) = match (hp.is_swa(il), self.bp.spec.swa_rope) {
            (false, _) => (r.freq_base, r.freq_scale, r.ext_factor, r.attn_factor),
            (true, SwaRope::GlobalBaseUnscaled) => (r.freq_base, 1.0, 0.0, 1.0),
            (true, _) => (hp.rope_freq_base_swa, hp.rope_freq_scale_swa, r.ext_factor, r.attn_factor),
        };
        let p = RopeParams {
            n_dims: hp.n_rot_of(il) as i32,
            mode,
            n_ctx_orig: r.n_ctx_orig.min(i32::MAX as usize) as i32,
            freq_base,
            freq_scale,
            ext_factor,
            attn_factor,
            beta_fast: r.beta_fast,
            beta_slow: r.beta_slow,
        };
        if self.bp.spec.rope == Rope::MultiInterleaved {
            return self.g.rope_multi(x, pos, hp.rope_sections, &p);
        }
        // Gemma 4's proportional RoPE factors are the full-attention layers' only
        let factors = match self.bp.spec.rope_factors {
            RopeFactors::FullLayers if hp.is_swa(il) => None,
            _ => self.bp.rope_factors,
        };
        self.g.rope_ext(x, pos, factors, &p)
    }

    /// Self-attention of one layer: Q/K/V projections, (Q/K norms,) RoPE,
    /// the store into each segment's cache, attention over the cache, and the
    /// output projection.
    fn attention(
        &self,
        x: Tensor,
        w: &AttnWeights,
        segments: &[Segment],
        inputs: &[SegmentInputs],
        pos: Tensor,
        il: usize,
    ) -> Tensor {
        let g = self.g;
        let (q, k, v, gate, kq_scale, v_mla) = match &w.qkv {
            QkvWeights::Latent(lw) => {
                let (q, k, v, kq_scale) = self.latent_qkv(x, lw, pos, il);
                (q, k, v, None, kq_scale, Some(lw.v_b))
            }
            _ => {
                let (q, k, v, gate, kq_scale) = self.qkv(x, w, pos, il);
                (q, k, v, gate, kq_scale, None)
            }
        };
        let kv_layer = self.bp.hp.kv_layer(il);
        let own_kv = kv_layer == il;
        // a quantized cache's Walsh-Hadamard rotations (llama.cpp's build_attn)
        let rotations = segments.iter().find_map(|s| s.cache).map(|c| c.layout().rotations(il)).unwrap_or_default();
        let rotation = |n: usize| self.rotation.iter().find(|&&(size, _)| size == n).map(|&(_, t)| t);
        let (mut q, mut k, mut v) = (q, k, v);
        if let Some(rot) = rotation(rotations.k) {
            q = g.hadamard(q, rot);
            if own_kv {
                k = g.hadamard(k, rot);
            }
        }
        let v_rotation = rotation(rotations.v);
        if let (Some(rot), true) = (v_rotation, own_kv) {
            v = g.hadamard(v, rot);
        }
        // added together so that they are not reordered (as llama.cpp's build_attn)
        g.expand(q);
        if own_kv {
            g.expand(v);
            g.expand(k);
        }

        let mut out: Option<Tensor> = None;
        let mut first = 0i64;
        for (seg, inp) in segments.iter().zip(inputs) {
            let ns = seg.n_tokens as i64;
            let (qs, ks, vs) = if segments.len() == 1 {
                (q, k, v)
            } else {
                (rows_3d(g, q, first, ns), rows_3d(g, k, first, ns), rows_3d(g, v, first, ns))
            };
            let (kc, vc, v_trans) = match seg.cache {
                // an encoder's tokens see their own sequence only, nothing is cached
                Some(_) if self.bp.spec.encoder => (ks, vs, false),
                Some(cache) => {
                    if own_kv {
                        g.expand(cache.store_k(g, ks, inp.k_idxs, il));
                        // (a latent attention's V is part of its K)
                        if let Some(v_idxs) = inp.v_idxs {
                            g.expand(cache.store_v(g, vs, v_idxs, il));
                        }
                    }
                    let (kc, vc) = (cache.view_k(g, kv_layer, inp.n_kv), cache.view_v(g, kv_layer, inp.n_kv));
                    (kc, vc, cache.layout().v_trans)
                }
                None => (ks, vs, false),
            };
            let mask = if self.bp.hp.is_swa(il) { inp.mask_swa } else { inp.mask };
            let mask = mask.expect("the masks are made for the kinds of layer there are");
            let heads = AttnHeads { sinks: w.sinks, v_mla };
            let cur = self.attn_mha(qs, kc, vc, mask, heads, kq_scale, v_trans);
            out = Some(match out {
                None => cur,
                Some(prev) => g.concat(prev, cur, 1),
            });
            first += ns;
        }
        let mut cur = out.expect("at least one segment");
        name(cur, "kqv_out", Some(il));
        if let Some(rot) = v_rotation {
            // rotated back (the rotation is its own inverse)
            cur = g.hadamard(cur, rot);
        }
        if let Some(gate) = gate {
            cur = g.mul(cur, g.sigmoid(gate));
            name(cur, "attn_gated", Some(il));
        }
        self.linear(w.wo, w.bo, cur)
    }

    /// Q, K and V of one layer's attention from its projections, (Q/K
    /// norms,) RoPE and temperature; a gated attention's gate; the kq scale.
    #[allow(clippy::type_complexity)]
    fn qkv(&self, x: Tensor, w: &AttnWeights, pos: Tensor, il: usize) -> (Tensor, Tensor, Tensor, Option<Tensor>, f32) {
        let (g, hp, spec) = (self.g, self.bp.hp, self.bp.spec);
        let n = self.n_tokens;
        let (hd_k, hd_v) = (hp.head_dim_k_of(il) as i64, hp.head_dim_v_of(il) as i64);
        let (n_head, n_head_kv) = (hp.n_head as i64, hp.n_head_kv_of(il) as i64);
        // a gated attention's Q projection holds each head's query, then its gate
        let hd_q = if spec.gated_attention { 2 * hd_k } else { hd_k };
        let (q_dim, k_dim, v_dim) = (hd_q * n_head, hd_k * n_head_kv, hd_v * n_head_kv);
        // a Gemma 4 shared-KV layer attends over an earlier layer's cache:
        // it projects Q only (K and V stand for it below, never stored or read)
        let kv_layer = hp.kv_layer(il);
        let own_kv = kv_layer == il;
        let (mut q, mut k, v) = if !own_kv {
            let q = match w.qkv {
                QkvWeights::Latent(_) => unreachable!("latent attention is built by latent_qkv"),
                QkvWeights::Separate { wq, bq, .. } => self.linear(wq, bq, x),
                QkvWeights::Fused { wqkv, bqkv } => {
                    let qkv = self.linear(wqkv, bqkv, x);
                    g.cont(g.view_2d(qkv, [q_dim, n], qkv.nb()[1], 0))
                }
            };
            let q = g.reshape_3d(q, hd_q, n_head, n);
            (q, q, q)
        } else if spec.qk_norm == QkNorm::Whole {
            // OLMo 2: Q and K normed over the whole projection, then split
            // into heads (llama.cpp's build_qkv without reshape)
            let (q2, k2, v2) = match w.qkv {
                QkvWeights::Latent(_) => unreachable!("latent attention is built by latent_qkv"),
                QkvWeights::Separate { wq, wk, wv, bq, bk, bv } => {
                    (self.linear(wq, bq, x), self.linear(wk, bk, x), self.linear(wv, bv, x))
                }
                QkvWeights::Fused { wqkv, bqkv } => {
                    let qkv = self.linear(wqkv, bqkv, x);
                    let (ty, nb1) = (qkv.type_id(), qkv.nb()[1]);
                    (
                        g.cont(g.view_2d(qkv, [q_dim, n], nb1, 0)),
                        g.cont(g.view_2d(qkv, [k_dim, n], nb1, row_size(ty, q_dim))),
                        g.cont(g.view_2d(qkv, [v_dim, n], nb1, row_size(ty, q_dim + k_dim))),
                    )
                }
            };
            let q2 = self.norm(q2, w.q_norm, "Qcur_normed", Some(il));
            let k2 = self.norm(k2, w.k_norm, "Kcur_normed", Some(il));
            (
                g.reshape_3d(q2, hd_k, n_head, n),
                g.reshape_3d(k2, hd_k, n_head_kv, n),
                g.reshape_3d(v2, hd_v, n_head_kv, n),
            )
        } else {
            match w.qkv {
                QkvWeights::Latent(_) => unreachable!("latent attention is built by latent_qkv"),
                QkvWeights::Separate { wq, wk, wv, bq, bk, bv } => {
                    let k_product = self.linear(wk, bk, x);
                    // V read through K's projection (Gemma 4's layers without
                    // attn_v): K's product serves both, as in llama.cpp
                    let v_product = if (wv, bv) == (wk, bk) { k_product } else { self.linear(wv, bv, x) };
                    (
                        g.reshape_3d(self.linear(wq, bq, x), hd_q, n_head, n),
                        g.reshape_3d(k_product, hd_k, n_head_kv, n),
                        g.reshape_3d(v_product, hd_v, n_head_kv, n),
                    )
                }
                QkvWeights::Fused { wqkv, bqkv } => {
                    // views of the one product, as llama.cpp's build_qkv (copied
                    // out for training: ggml's gradients of a view and of a copy
                    // want their incoming gradient contiguous, which a reshape's
                    // gradient makes it)
                    let qkv = self.linear(wqkv, bqkv, x);
                    let (ty, nb1) = (qkv.type_id(), qkv.nb()[1]);
                    let own = |t: Tensor| if self.bp.differentiable { self.contiguous_grad(g.cont(t)) } else { t };
                    (
                        own(g.view_3d(qkv, [hd_q, n_head, n], [row_size(ty, hd_q), nb1], 0)),
                        own(g.view_3d(qkv, [hd_k, n_head_kv, n], [row_size(ty, hd_k), nb1], row_size(ty, q_dim))),
                        own(g.view_3d(
                            qkv,
                            [hd_v, n_head_kv, n],
                            [row_size(ty, hd_v), nb1],
                            row_size(ty, q_dim + k_dim),
                        )),
                    )
                }
            }
        };
        // Qwen3.5: each head's gate beside its query (llama.cpp's views of Qcur_full)
        let gate = spec.gated_attention.then(|| {
            let ty = q.type_id();
            let nb = [q.nb()[1], q.nb()[2]];
            let gate = g.view_3d(q, [hd_k, n_head, n], nb, row_size(ty, hd_k));
            q = g.view_3d(q, [hd_k, n_head, n], nb, 0);
            g.cont_2d(gate, hd_k * n_head, n)
        });
        // per-head norms (required for PerHead rows, so present then)
        let per_head = matches!(spec.qk_norm, QkNorm::PerHead | QkNorm::EachHeadOptional);
        if let (true, Some(qn)) = (per_head, w.q_norm) {
            q = self.norm(q, Some(qn), "Qcur_normed", Some(il));
        }
        q = self.rope(q, pos, il);
        if let (true, Some(kn)) = (per_head && own_kv, w.k_norm) {
            k = self.norm(k, Some(kn), "Kcur_normed", Some(il));
        }
        k = self.rope(k, pos, il);
        let v = if spec.gemma4_layers { g.rms_norm(v, hp.norm_eps) } else { v };
        name(q, "Qcur", Some(il));
        name(k, "Kcur", Some(il));
        name(v, "Vcur", Some(il));
        let rotated = hp.uses_rope(il);
        q = self.temperature(q, il);
        if hp.qk_norm_after_rope && rotated {
            q = g.rms_norm(q, hp.norm_eps);
            k = g.rms_norm(k, hp.norm_eps);
            name(q, "Qcur_normed", Some(il));
            name(k, "Kcur_normed", Some(il));
        }
        let kq_scale = if spec.scale_q {
            q = self.contiguous_grad(g.scale(q, hp.attention_scale));
            1.0
        } else {
            hp.attention_scale
        };
        (q, k, v, gate, kq_scale)
    }

    /// Llama 4's temperature tuning of Q where this layer has it: every
    /// layer after RoPE (llama.cpp's Mistral 3 and DeepSeek-V2 graphs), or
    /// the layers without RoPE instead of it (Llama 4).
    fn temperature(&self, q: Tensor, il: usize) -> Tensor {
        let hp = self.bp.hp;
        let here = hp.attn_temperature.is_some_and(|t| !t.no_rope_layers_only || !hp.uses_rope(il));
        match (self.attn_temp, here) {
            (Some(temperature), true) => {
                let q = self.g.mul(q, temperature);
                name(q, "Qcur_attn_temp_scaled", Some(il));
                q
            }
            _ => q,
        }
    }

    /// Q, K and V of DeepSeek's latent attention (llama.cpp's deepseek2
    /// graph with MLA): each head's query without RoPE absorbed into the
    /// latent's space by `attn_k_b`, beside its RoPE part; K the normed
    /// latent beside the shared RoPE part; V the latent. One KV head: the
    /// heads' values are expanded by `attn_v_b` after the attention.
    fn latent_qkv(&self, x: Tensor, w: &LatentWeights, pos: Tensor, il: usize) -> (Tensor, Tensor, Tensor, f32) {
        let (g, hp) = (self.g, self.bp.hp);
        let mla = hp.mla.expect("a latent attention's sizes are read with its weights");
        let n = x.ne()[1];
        let n_head = hp.n_head as i64;
        let (head_q, n_rot, rank) = (mla.head_dim_q as i64, hp.n_rot as i64, mla.kv_rank as i64);
        let nope = head_q - n_rot;
        let q = match w.q {
            LatentQ::LowRank { a, a_norm, b } => {
                let q = self.norm(g.mul_mat(a, x), Some(a_norm), "q", Some(il));
                g.mul_mat(b, q)
            }
            LatentQ::Full(wq) => g.mul_mat(wq, x),
        };
        let q = g.reshape_3d(q, head_q, n_head, n);
        let kv_pe = g.mul_mat(w.kv_a, x); // [rank + n_rot, n]
        name(kv_pe, "kv_cmpr_pe", Some(il));
        let (ty, row) = (kv_pe.type_id(), kv_pe.nb()[1]);
        let latent = g.view_2d(kv_pe, [rank, n], row, 0);
        let k_pe = g.view_3d(kv_pe, [n_rot, 1, n], [row, row], row_size(ty, rank));
        let k_pe = self.rope(k_pe, pos, il);
        let latent = self.norm(latent, Some(w.kv_a_norm), "kv_cmpr", Some(il));
        let (qt, qnb) = (q.type_id(), [q.nb()[1], q.nb()[2]]);
        let q_nope = g.view_3d(q, [nope, n_head, n], qnb, 0);
        let q_pe = g.view_3d(q, [n_rot, n_head, n], qnb, row_size(qt, nope));
        let q_pe = self.rope(q_pe, pos, il);
        // [nope, n, n_head] through each head's K expansion: [rank, n, n_head]
        let absorbed = g.mul_mat(w.k_b, g.permute(q_nope, [0, 2, 1, 3]));
        let absorbed = g.permute(absorbed, [0, 2, 1, 3]);
        let q = g.concat(absorbed, q_pe, 0);
        name(q, "Qcur", Some(il));
        let latent = g.reshape_3d(latent, rank, 1, n);
        let k = g.concat(latent, k_pe, 0);
        name(k, "Kcur", Some(il));
        name(latent, "Vcur", Some(il));
        let q = self.temperature(q, il);
        // YaRN's magnitude correction taken into the scale (llama.cpp's
        // pre-scaled kq_scale for DeepSeek-V2)
        let r = self.bp.rope;
        let ln_factor = (1.0 / r.freq_scale).ln();
        let attn_factor_org = r.attn_factor * (1.0 + 0.1 * ln_factor);
        let mscale = attn_factor_org * (1.0 + 0.1 * hp.rope_yarn_log_mul * ln_factor);
        let kq_scale = mscale * mscale / (head_q as f32).sqrt();
        (q, k, latent, kq_scale)
    }

    /// An LFM2 short-convolution layer (llama.cpp's build_shortconv_block):
    /// B, C and x from one projection, B·x through a causal convolution
    /// that continues each segment's stored inputs, times C, projected out.
    /// Each segment's last inputs are written back into its cache.
    fn short_conv(&self, x: Tensor, w: &ShortConvWeights, segments: &[Segment], il: usize) -> Result<Tensor> {
        let (g, hp) = (self.g, self.bp.hp);
        let (n, n_embd) = (self.n_tokens, hp.n_embd as i64);
        let stored_len = hp.short_conv_taps as i64 - 1;
        let f32_size = row_size(crate::engine::ggml::ops::GGML_TYPE_F32, 1);
        let bcx = self.mm(w.in_proj, g.reshape_3d(x, n_embd, n, 1)); // [3 n_embd, n, 1]
        name(bcx, "conv.in_proj", Some(il));
        let chunk =
            |i: i64| g.view_3d(bcx, [n_embd, n, 1], [bcx.nb()[1], bcx.nb()[2]], f32_size * (i * n_embd) as usize);
        let (b, c, input) = (chunk(0), chunk(1), chunk(2));
        let bx = g.mul(b, input); // [n_embd, n, 1]

        let mut out: Option<Tensor> = None;
        let mut first = 0i64;
        for seg in segments {
            let ns = seg.n_tokens as i64;
            let Some(cache) = seg.cache else {
                return Err(Error::Argument("a recurrent layer needs a cache to keep its state in".into()));
            };
            let rows = |t: Tensor| {
                if segments.len() == 1 {
                    t
                } else {
                    g.view_3d(t, [n_embd, ns, 1], [t.nb()[1], t.nb()[1] * ns as usize], t.nb()[1] * first as usize)
                }
            };
            let state = cache.conv_state(il);
            let stored = g.reshape_3d(state, stored_len, n_embd, 1);
            let window = g.concat(stored, g.transpose(rows(bx)), 0); // [stored_len + ns, n_embd, 1]
            let last_inputs =
                g.view_3d(window, [stored_len, n_embd, 1], [window.nb()[1], window.nb()[2]], f32_size * ns as usize);
            g.expand(g.cpy(last_inputs, g.view_2d(state, [stored_len * n_embd, 1], state.nb()[1], 0)));
            let conv_out = g.ssm_conv(window, w.kernel); // [n_embd, ns, 1]
            name(conv_out, "conv.conv", Some(il));
            let y = g.mul(rows(c), conv_out);
            out = Some(match out {
                None => y,
                Some(prev) => g.concat(prev, y, 1),
            });
            first += ns;
        }
        let y = self.mm(w.out_proj, out.expect("at least one segment"));
        name(y, "conv.out_proj", Some(il));
        Ok(g.reshape_2d(y, n_embd, n))
    }

    /// A gated delta-net layer (llama.cpp's Qwen3.5 build_layer_attn_linear
    /// with the fused delta-rule op): the Q/K/V projection through a causal
    /// convolution that continues each segment's stored inputs, SiLU, L2-
    /// normed Q and K, the delta rule from each segment's state with decay
    /// softplus(alpha + dt) · a and rate sigmoid(beta), then the output
    /// RMS-normed per head and gated by silu(z). Each segment's new
    /// convolution inputs and state are written back into its cache.
    fn delta_net(&self, x: Tensor, w: &DeltaNetWeights, segments: &[Segment], il: usize) -> Result<Tensor> {
        let (g, hp) = (self.g, self.bp.hp);
        let d = hp.delta_net.expect("a delta-net layer has its sizes");
        let n = self.n_tokens;
        let (hd, n_k, n_v) = (d.head_dim as i64, d.n_k_heads as i64, d.n_v_heads as i64);
        let channels = d.conv_channels() as i64;
        let d_conv = d.d_conv as i64;
        let f32_size = row_size(crate::engine::ggml::ops::GGML_TYPE_F32, 1);

        let qkv_mixed = self.mm(w.qkv, x);
        name(qkv_mixed, "linear_attn_qkv_mixed", Some(il));
        let z = self.mm(w.gate, x);
        name(z, "z", Some(il));
        let beta = g.sigmoid(g.reshape_4d(self.mm(w.beta, x), [1, n_v, n, 1]));
        name(beta, "beta_sigmoid", Some(il));
        let alpha = g.reshape_3d(self.mm(w.alpha, x), n_v, n, 1);
        let decay = g.mul(g.softplus(g.add(alpha, w.dt_bias)), w.a);
        name(decay, "gate", Some(il));
        let decay = g.reshape_4d(decay, [1, n_v, n, 1]);

        let mut out: Option<Tensor> = None;
        let mut first = 0i64;
        for seg in segments {
            let ns = seg.n_tokens as i64;
            let Some(cache) = seg.cache else {
                return Err(Error::Argument("a recurrent layer needs a cache to keep its state in".into()));
            };
            let conv_state = cache.conv_state(il);
            let ssm_state = cache.ssm_state(il);
            // this segment's columns of the projections
            let qkv_s = g.view_3d(
                qkv_mixed,
                [channels, ns, 1],
                [qkv_mixed.nb()[1], qkv_mixed.nb()[1] * ns as usize],
                qkv_mixed.nb()[1] * first as usize,
            );
            let tokens_view = |t: Tensor| {
                g.view_4d(t, [1, n_v, ns, 1], [f32_size, f32_size * n_v as usize, f32_size * (n_v * ns) as usize], {
                    f32_size * (n_v * first) as usize
                })
            };
            let (beta_s, decay_s) =
                if segments.len() == 1 { (beta, decay) } else { (tokens_view(beta), tokens_view(decay)) };

            // the convolution over the stored inputs followed by the new ones
            let stored = g.reshape_3d(conv_state, d_conv - 1, channels, 1);
            let conv_input = g.concat(stored, g.transpose(qkv_s), 0);
            name(conv_input, "conv_input", Some(il));
            let last_inputs = g.view_3d(
                conv_input,
                [d_conv - 1, channels, 1],
                [conv_input.nb()[1], conv_input.nb()[2]],
                f32_size * ns as usize,
            );
            g.expand(g.cpy(last_inputs, g.view_2d(conv_state, [(d_conv - 1) * channels, 1], conv_state.nb()[1], 0)));
            let conv_out = g.silu(g.ssm_conv(conv_input, w.conv));
            name(conv_out, "conv_output_silu", Some(il));

            let row = conv_out.nb()[1];
            let head_view = |heads: i64, offset: i64| {
                g.view_4d(
                    conv_out,
                    [hd, heads, ns, 1],
                    [f32_size * hd as usize, row, row * ns as usize],
                    f32_size * offset as usize,
                )
            };
            let key_dim = d.key_dim() as i64;
            // llama.cpp's build_gdn_l2_norm: an RMS norm scaled to unit length
            let l2_norm = |t: Tensor| g.scale(g.rms_norm(t, hp.norm_eps / hd as f32), 1.0 / (hd as f32).sqrt());
            let q = l2_norm(head_view(n_k, 0));
            let k = l2_norm(head_view(n_k, key_dim));
            let v = head_view(n_v, 2 * key_dim);

            let state = g.reshape_4d(ssm_state, [hd, hd, n_v, 1]);
            let result = g.gated_delta_net(q, k, v, decay_s, beta_s, state, 1);
            let output = g.view_4d(
                result,
                [hd, n_v, ns, 1],
                [f32_size * hd as usize, f32_size * (hd * n_v) as usize, f32_size * (hd * n_v * ns) as usize],
                0,
            );
            name(output, "attn_output", Some(il));
            let new_state = g.view_4d(
                result,
                [hd, hd, n_v, 1],
                [f32_size * hd as usize, f32_size * (hd * hd) as usize, f32_size * (hd * hd * n_v) as usize],
                f32_size * (hd * n_v * ns) as usize,
            );
            let state_len = d.ssm_state_len() as i64;
            g.expand(g.cpy(new_state, g.view_2d(ssm_state, [state_len, 1], ssm_state.nb()[1], 0)));
            out = Some(match out {
                None => output,
                Some(prev) => g.concat(prev, output, 2),
            });
            first += ns;
        }
        let output = out.expect("at least one segment");
        // the per-head RMS norm, gated by silu(z)
        let z = g.reshape_4d(z, [hd, n_v, n, 1]);
        let normed = self.norm(output, Some(w.norm), "attn_norm_gated", Some(il));
        let gated = g.mul(normed, g.silu(z));
        let flat = g.reshape_3d(gated, hd * n_v, n, 1);
        name(flat, "final_output", Some(il));
        let cur = self.mm(w.out, flat);
        name(cur, "linear_attn_out", Some(il));
        Ok(g.reshape_2d(cur, hp.n_embd as i64, n))
    }

    /// Attention over the cache (llama.cpp's build_attn_mha, one stream).
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    fn attn_mha(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor,
        heads: AttnHeads,
        kq_scale: f32,
        v_trans: bool,
    ) -> Tensor {
        let AttnHeads { sinks, v_mla } = heads;
        let (g, hp) = (self.g, self.bp.hp);
        let q = g.permute(q, [0, 2, 1, 3]);
        let k = g.permute(k, [0, 2, 1, 3]);
        let v = g.permute(v, [0, 2, 1, 3]);
        if self.bp.flash_attn {
            let v = if v_trans { g.transpose(v) } else { v };
            // uncached keys and values are f32 (an encoder's): f16 for flash
            // attention, as llama.cpp casts them
            let f16 = |t: Tensor| {
                if t.type_id() == GGML_TYPE_F32 {
                    let ne = t.ne();
                    g.cpy(t, g.new_tensor(GGML_TYPE_F16, &ne))
                } else {
                    t
                }
            };
            let (k, v) = (f16(k), f16(v));
            let cur = g.flash_attn_ext(q, k, v, mask, kq_scale, hp.attn_softcap);
            if let Some(sinks) = sinks {
                g.add_sinks(cur, sinks, true);
            }
            g.flash_attn_set_n_kv_max(cur, 0);
            g.prec_f32(cur);
            let cur = match v_mla {
                // each head's values out of the latent, as one product per
                // head with the tokens in dimension 1 (llama.cpp's order)
                Some(v_b) => {
                    let expanded = g.mul_mat(v_b, g.permute(cur, [0, 2, 1, 3]));
                    g.cont(g.permute(expanded, [0, 2, 1, 3]))
                }
                None => cur,
            };
            let ne = cur.ne();
            return g.reshape_2d(cur, ne[0] * ne[1], ne[2] * ne[3]);
        }
        let mut kq = g.mul_mat(k, q);
        g.prec_f32(kq);
        if hp.attn_softcap != 0.0 {
            kq = self.softcap(kq, hp.attn_softcap);
        }
        let kq = g.soft_max_ext(kq, mask, kq_scale, 0.0);
        if let Some(sinks) = sinks {
            g.add_sinks(kq, sinks, false);
        }
        let v = if v_trans { v } else { g.cont(g.transpose(v)) };
        let mut kqv = g.mul_mat(v, kq);
        if let Some(v_b) = v_mla {
            // each head's values out of the latent
            kqv = g.mul_mat(v_b, kqv);
        }
        let cur = g.permute(kqv, [0, 2, 1, 3]);
        let ne = cur.ne();
        g.cont_2d(cur, ne[0] * ne[1], ne[2] * ne[3])
    }

    /// The gated feed-forward block (llama.cpp's build_ffn with LLM_FFN_PAR).
    fn ffn(&self, x: Tensor, w: &FfnWeights, il: usize) -> Tensor {
        let g = self.g;
        let up = self.linear(w.up, w.up_b, x);
        name(up, "ffn_up", Some(il));
        let cur = match w.gate {
            Some(gate) => {
                let gate = self.mm(gate, x);
                name(gate, "ffn_gate", Some(il));
                match self.bp.spec.act {
                    Activation::SwiGlu => g.swiglu_split(gate, up),
                    Activation::GeGlu | Activation::Gelu if self.bp.differentiable => g.mul(self.gelu(gate), up),
                    Activation::GeGlu | Activation::Gelu => g.geglu_split(gate, up),
                }
            }
            // gate and up in one product, gate first (Phi-3), or no gate
            None => match self.bp.spec.act {
                Activation::SwiGlu | Activation::GeGlu if self.bp.differentiable => {
                    // the halves as views: ggml differentiates only the two-operand GLU
                    let (half, n, nb1) = (up.ne()[0] / 2, up.ne()[1], up.nb()[1]);
                    let gate = g.cont(g.view_2d(up, [half, n], nb1, 0));
                    let rest = g.cont(g.view_2d(up, [half, n], nb1, row_size(up.type_id(), half)));
                    match self.bp.spec.act {
                        Activation::SwiGlu => g.swiglu_split(gate, rest),
                        _ => g.mul(self.gelu(gate), rest),
                    }
                }
                Activation::SwiGlu => g.swiglu(up),
                Activation::GeGlu => g.geglu(up),
                Activation::Gelu if self.bp.differentiable => self.gelu(up),
                Activation::Gelu => g.gelu(up),
            },
        };
        self.linear(w.down, w.down_b, cur)
    }
}

impl Builder<'_, '_> {
    /// A BERT layer (llama.cpp's bert graph): attention, its residual add
    /// and `attn_output_norm`; the FFN, its residual add and
    /// `layer_output_norm` (post-norms, LayerNorm with biases). `rows`: the
    /// output rows, in the last layer.
    #[allow(clippy::too_many_arguments)]
    fn encoder_layer(
        &self,
        inp_l: Tensor,
        layer: &LayerWeights,
        segments: &[Segment],
        inputs: &[SegmentInputs],
        pos: Tensor,
        rows: Option<Tensor>,
        il: usize,
    ) -> Tensor {
        let g = self.g;
        let mut cur = self.attention(inp_l, layer.mixer.attention(), segments, inputs, pos, il);
        let mut residual = inp_l;
        if let Some(rows) = rows {
            cur = g.get_rows(cur, rows);
            residual = g.get_rows(residual, rows);
        }
        let (w, b) = layer.attn_out_norm.expect("an encoder layer has its attention output norm");
        let ffn_inp = self.norm_biased(g.add(cur, residual), Some(w), Some(b), "ffn_inp", Some(il));
        let cur = self.ffn_block(&layer.ffn, ffn_inp, ffn_inp, il);
        name(cur, "ffn_out", Some(il));
        let (w, b) = layer.layer_out_norm.expect("an encoder layer has its output norm");
        self.norm_biased(g.add(cur, ffn_inp), Some(w), Some(b), "l_out", Some(il))
    }

    /// An encoder's classification head over the rows of `x` (llama.cpp's
    /// rank pooling after it picked the rows): tanh(cls · x + cls_b), then
    /// cls.output · · + its bias; either part only where the model has it.
    fn classify(&self, x: Tensor) -> Result<Tensor> {
        let g = self.g;
        let spec = self.bp.spec;
        let no_head = || {
            Error::Argument(format!(
                "this {} model has no classification head (cls / cls.output weights): it cannot rerank",
                spec.name
            ))
        };
        let enc = self.bp.weights.encoder.as_ref().ok_or_else(no_head)?;
        if enc.cls.is_none() && enc.cls_out.is_none() {
            return Err(no_head());
        }
        let mut cur = x;
        if let Some(cls) = enc.cls {
            cur = g.tanh(self.linear(cls, enc.cls_b, cur));
        }
        if let Some(out) = enc.cls_out {
            cur = self.linear(out, enc.cls_out_b, cur);
        }
        name(cur, "result_embd_pooled", None);
        Ok(cur)
    }

    /// A parallel block (llama.cpp's falcon graph): attention and the FFN
    /// both read the normed input (the attention Falcon-40B's second norm of
    /// it), and both outputs are added to the residual. `rows`: the output
    /// rows, in the last layer.
    #[allow(clippy::too_many_arguments)]
    fn parallel_layer(
        &self,
        inp_l: Tensor,
        layer: &LayerWeights,
        segments: &[Segment],
        inputs: &[SegmentInputs],
        pos: Tensor,
        rows: Option<Tensor>,
        il: usize,
    ) -> Tensor {
        let g = self.g;
        let mut attn_norm = self.norm_biased(inp_l, layer.attn_norm, layer.attn_norm_b, "attn_norm", Some(il));
        let attn_in = match layer.attn_norm_2 {
            Some((w, b)) => self.norm_biased(inp_l, Some(w), Some(b), "attn_norm_2", Some(il)),
            None => attn_norm,
        };
        let mut cur = self.attention(attn_in, layer.mixer.attention(), segments, inputs, pos, il);
        let mut residual = inp_l;
        if let Some(rows) = rows {
            cur = g.get_rows(cur, rows);
            residual = g.get_rows(residual, rows);
            attn_norm = g.get_rows(attn_norm, rows);
        }
        let attn_out = cur;
        let ffn_out = self.ffn_block(&layer.ffn, attn_norm, residual, il);
        name(ffn_out, "ffn_out", Some(il));
        let out = g.add(g.add(ffn_out, attn_out), residual);
        name(out, "l_out", Some(il));
        out
    }

    /// A layer's feed-forward block over `x`, its normed input; `block_in`
    /// is the residual stream it was normed from (Gemma 4's experts and
    /// router read it).
    fn ffn_block(&self, ffn: &Ffn, x: Tensor, block_in: Tensor, il: usize) -> Tensor {
        match ffn {
            Ffn::Dense(w) => self.ffn(x, w, il),
            Ffn::Moe(w) => self.moe_ffn(x, block_in, w, il),
            Ffn::DenseAndMoe(w) => self.dense_and_moe(x, block_in, w, il),
        }
    }

    /// Gemma 4's MoE block: the dense FFN over `x` and the experts over
    /// their own norm of `block_in`, each output normed, then added.
    fn dense_and_moe(&self, x: Tensor, block_in: Tensor, w: &DenseAndExperts, il: usize) -> Tensor {
        let dense = self.ffn(x, &w.dense, il);
        let dense = self.norm(dense, Some(w.dense_post_norm), "ffn_mlp", Some(il));
        let experts_in = self.norm(block_in, Some(w.experts_norm), "ffn_norm_2", Some(il));
        let experts = self.moe_ffn(experts_in, block_in, &w.experts, il);
        let experts = self.norm(experts, Some(w.experts_post_norm), "ffn_moe", Some(il));
        let out = self.g.add(dense, experts);
        name(out, "ffn_moe_combined", Some(il));
        out
    }

    /// The router's logits [n_expert, n] for the experts' input `x`; with
    /// router_scaled_rms, from `block_in` RMS-normed without a weight, times
    /// 1/sqrt(n_embd) and the router's own factor (Gemma 4).
    fn router_logits(&self, x: Tensor, block_in: Tensor, w: &MoeWeights) -> Tensor {
        let (g, hp) = (self.g, self.bp.hp);
        if !self.bp.spec.router_scaled_rms {
            return self.mm(w.gate_inp, x);
        }
        let normed = g.scale(g.rms_norm(block_in, hp.norm_eps), 1.0 / (hp.n_embd as f32).sqrt());
        let scale = w.router_scale.expect("the weight table requires the router's scale");
        self.mm(w.gate_inp, g.mul(normed, scale))
    }

    /// An expert product [m, n_used, n] times each chosen expert's factor
    /// from `scale` [n_expert] (llama.cpp's build_lora_mm_id with a scale).
    fn per_expert_scaled(&self, product: Tensor, scale: Tensor, selected: Tensor) -> Tensor {
        let g = self.g;
        let (n_expert, n) = (scale.ne()[0], product.ne()[2]);
        let every = g.new_tensor(scale.type_id(), &[1, n_expert, n]);
        let per_token = g.repeat(g.reshape_3d(scale, 1, n_expert, 1), every);
        g.mul(product, g.get_rows(per_token, selected)) // [1, n_used, n] broadcast
    }

    /// A mixture-of-experts block (llama.cpp's build_moe_ffn with softmax
    /// routing): each token's top n_expert_used experts by router
    /// probability, their outputs weighted by those probabilities
    /// (renormalised to sum 1 where the row says so) and summed, plus the
    /// sigmoid-gated shared expert if any. `block_in`: see ffn_block.
    fn moe_ffn(&self, x: Tensor, block_in: Tensor, w: &MoeWeights, il: usize) -> Tensor {
        if self.bp.differentiable {
            return self.moe_ffn_dense(x, block_in, w, il);
        }
        let (g, hp) = (self.g, self.bp.hp);
        // the rows of x: in the last layer only the output rows
        let n = x.ne()[1];
        let (n_expert, n_used) = (hp.n_expert as i64, hp.n_expert_used as i64);
        let mut logits = self.router_logits(x, block_in, w); // [n_expert, n]
        name(logits, "ffn_moe_logits", Some(il));
        if let Some(bias) = w.biases.as_ref().map(|b| b.gate_inp) {
            logits = g.add(logits, bias);
        }
        let spec = self.bp.spec;
        let routing = hp.routing;
        let probs = match routing.gating {
            ExpertGating::Softmax => g.soft_max(logits),
            ExpertGating::SoftmaxOfChosen => logits,
            ExpertGating::Sigmoid | ExpertGating::SigmoidBeforeExpert => g.sigmoid(logits),
        };
        let choose_by = match (routing.gating, w.selection_bias) {
            // Llama 4 chooses by the logits themselves
            (ExpertGating::SigmoidBeforeExpert, _) => logits,
            // DeepSeek-V3 biases the choice, not the weights
            (_, Some(bias)) => g.add(probs, bias),
            (_, None) => probs,
        };
        let choose_by = self.best_groups(choose_by, il);
        let selected = g.argsort_top_k(choose_by, n_used as i32); // [n_used, n]
        let mut weights = g.get_rows(g.reshape_3d(probs, 1, n_expert, n), selected); // [1, n_used, n]
        if routing.gating == ExpertGating::SoftmaxOfChosen {
            weights = g.reshape_3d(g.soft_max(g.reshape_2d(weights, n_used, n)), 1, n_used, n);
        }
        if routing.normalize {
            let flat = g.reshape_2d(weights, n_used, n);
            // the smallest normal f16, as llama.cpp, against a zero sum
            let sum = g.clamp(g.sum_rows(flat), 6.103_515_6e-5, f32::INFINITY);
            weights = g.reshape_3d(g.div(flat, sum), 1, n_used, n);
        }
        if routing.scale != 0.0 && routing.scale != 1.0 {
            weights = g.scale(weights, routing.scale);
        }
        g.expand(weights);

        let weight_before = routing.gating == ExpertGating::SigmoidBeforeExpert;
        let mut cur = g.reshape_3d(x, hp.n_embd as i64, 1, n);
        if weight_before {
            // each chosen expert's own copy of the row, weighted (llama.cpp's llama4 path)
            let copies = g.new_tensor(cur.type_id(), &[hp.n_embd as i64, n_used, n]);
            cur = g.mul(g.repeat(cur, copies), weights);
        }
        let (gate, up) = match w.up_exps {
            ExpertsUp::Up(up_exps) => {
                // each expert's bias after its product (gpt-oss), chosen by the same ids
                let biased = |t: Tensor, bias: Option<Tensor>| match bias {
                    Some(b) => g.add_id(t, b, selected),
                    None => t,
                };
                let up = biased(g.mul_mat_id(up_exps, cur, selected), w.biases.as_ref().map(|b| b.up_exps)); // [n_ff_exp, n_used, n]
                let gate = w
                    .gate_exps
                    .map(|gate| biased(g.mul_mat_id(gate, cur, selected), w.biases.as_ref().map(|b| b.gate_exps)));
                (gate, up)
            }
            ExpertsUp::GateUp(fused) => {
                // one product, then the gate and up halves as views (llama.cpp's merged path)
                let both = g.mul_mat_id(fused, cur, selected); // [2 * n_ff_exp, n_used, n]
                let ne = both.ne();
                let nb = [both.nb()[1], both.nb()[2]];
                let half = ne[0] / 2;
                let up = g.view_3d(both, [half, ne[1], ne[2]], nb, half as usize * both.nb()[0]);
                (Some(g.view_3d(both, [half, ne[1], ne[2]], nb, 0)), up)
            }
        };
        let act = match (gate, spec.clamped_swiglu, spec.act) {
            (Some(gate), Some((alpha, limit)), _) => g.swiglu_oai(gate, up, alpha, limit),
            (Some(gate), None, Activation::SwiGlu) => g.swiglu_split(gate, up),
            (Some(gate), None, Activation::GeGlu | Activation::Gelu) => g.geglu_split(gate, up),
            (None, _, _) => g.silu(up),
        };
        let mut down = g.mul_mat_id(w.down_exps, act, selected); // [n_embd, n_used, n]
        if let Some(scale) = w.down_exps_scale {
            down = self.per_expert_scaled(down, scale, selected);
        }
        if let Some(b) = &w.biases {
            down = g.add_id(down, b.down_exps, selected);
        }
        let experts = if weight_before { down } else { g.mul(down, weights) };
        g.expand(experts);
        let nb = experts.nb();
        let views: Vec<Tensor> = (0..n_used as usize)
            .map(|i| {
                let v = g.view_2d(experts, [hp.n_embd as i64, n], nb[2], i * nb[1]);
                g.expand(v);
                v
            })
            .collect();
        let mut out = views[0];
        for &v in &views[1..] {
            out = g.add(out, v);
            g.expand(out);
        }
        if views.len() == 1 {
            out = g.cont(out);
        }
        if let Some((gate_inp, shared)) = &w.shared {
            let mut shared_out = self.ffn(x, shared, il);
            if let Some(gate_inp) = gate_inp {
                let gate = self.shared_expert_gate(self.mm(*gate_inp, x)); // [1, n]
                shared_out = g.mul(shared_out, gate);
            }
            out = g.add(out, shared_out);
        }
        out
    }

    /// The experts' scores with every group but the best `n_groups_used`
    /// masked out (-inf), a group scored by the sum of its two best
    /// (DeepSeek-V3's group-limited routing); the scores as they are
    /// without groups.
    fn best_groups(&self, scores: Tensor, il: usize) -> Tensor {
        let (g, routing) = (self.g, self.bp.hp.routing);
        if routing.n_groups <= 1 {
            return scores;
        }
        let (n_expert, n) = (scores.ne()[0], scores.ne()[1]);
        let n_groups = routing.n_groups as i64;
        let per_group = n_expert / n_groups;
        let groups = g.reshape_3d(scores, per_group, n_groups, n); // [per_group, n_groups, n]
        let best_two = g.argsort_top_k(groups, 2); // [2, n_groups, n]
        let best_two = g.get_rows(g.reshape_4d(groups, [1, per_group, n_groups, n]), best_two); // [1, 2, n_groups, n]
        let group_scores = g.sum_rows(g.reshape_3d(best_two, 2, n_groups, n)); // [1, n_groups, n]
        let group_scores = g.reshape_2d(group_scores, n_groups, n);
        let chosen = g.argsort_top_k(group_scores, routing.n_groups_used as i32); // [n_groups_used, n]
        name(chosen, "ffn_moe_group_topk", Some(il));
        let kept = g.get_rows(groups, chosen); // [per_group, n_groups_used, n]
        let masked = g.set_rows(g.fill(groups, f32::NEG_INFINITY), kept, chosen);
        g.reshape_2d(masked, n_expert, n)
    }

    /// The shared expert's weight per token from its gate's logit: ggml's
    /// sigmoid (Qwen3.5-MoE), or silu(x) / x as llama.cpp's Qwen2-MoE graph
    /// computes it.
    fn shared_expert_gate(&self, logit: Tensor) -> Tensor {
        let g = self.g;
        if self.bp.spec.shared_gate_sigmoid {
            g.sigmoid(logit)
        } else {
            g.div(g.silu(logit), logit)
        }
    }
}

impl Builder<'_, '_> {
    /// The mixture of experts in a form ggml differentiates (MUL_MAT_ID
    /// and the weights' row lookup have no gradient there): every expert
    /// over every token, weighted by its routing weight where it is among
    /// the token's n_expert_used most probable and by 0 elsewhere. The same
    /// function as moe_ffn (but for ties at the cut), at n_expert/n_used
    /// times the work.
    fn moe_ffn_dense(&self, x: Tensor, block_in: Tensor, w: &MoeWeights, il: usize) -> Tensor {
        let (g, hp) = (self.g, self.bp.hp);
        let n = x.ne()[1];
        let (n_expert, n_used) = (hp.n_expert as i64, hp.n_expert_used as i64);
        let logits = self.router_logits(x, block_in, w); // [n_expert, n]
        let probs = g.soft_max(logits);
        // an expert is chosen where fewer than n_used others are more
        // probable: count them by comparing every pair (STEP has no
        // gradient, so the choice is a constant of the backward pass)
        let rows = g.reshape_3d(probs, n_expert, 1, n);
        let cols = g.reshape_3d(probs, 1, n_expert, n);
        let pairs = g.new_tensor(probs.type_id(), &[n_expert, n_expert, n]);
        let more_probable = g.step(g.sub(g.repeat(rows, pairs), g.repeat(cols, pairs))); // [j, e, n]: p_j > p_e
        let ahead = g.reshape_2d(g.sum_rows(more_probable), n_expert, n);
        let chosen = g.step(g.scale_bias(ahead, -1.0, n_used as f32 - 0.5));
        let mut weights = g.mul(probs, chosen);
        if self.bp.hp.routing.normalize {
            weights = g.div(weights, g.repeat(g.sum_rows(weights), weights));
        }
        let expert = |t: Tensor, e: i64| {
            let ne = t.ne();
            g.view_2d(t, [ne[0], ne[1]], t.nb()[1], e as usize * t.nb()[2])
        };
        let mut out: Option<Tensor> = None;
        for e in 0..n_expert {
            let (gate, up) = match w.up_exps {
                ExpertsUp::Up(up_exps) => {
                    (w.gate_exps.map(|gate| g.mul_mat(expert(gate, e), x)), g.mul_mat(expert(up_exps, e), x))
                }
                ExpertsUp::GateUp(fused) => {
                    let both = g.mul_mat(expert(fused, e), x); // [2 * n_ff_exp, n]
                    let (half, nb1) = (both.ne()[0] / 2, both.nb()[1]);
                    let gate = g.cont(g.view_2d(both, [half, n], nb1, 0));
                    (Some(gate), g.cont(g.view_2d(both, [half, n], nb1, half as usize * both.nb()[0])))
                }
            };
            let act = match (gate, self.bp.spec.act) {
                (Some(gate), Activation::SwiGlu) => g.swiglu_split(gate, up),
                (Some(gate), Activation::GeGlu | Activation::Gelu) => g.mul(self.gelu(gate), up),
                (None, _) => g.silu(up),
            };
            let mut y = g.mul_mat(expert(w.down_exps, e), act); // [n_embd, n]
            if let Some(scale) = w.down_exps_scale {
                y = g.mul(y, g.repeat(g.view_2d(scale, [1, 1], scale.nb()[1], e as usize * 4), y));
            }
            let weight = g.view_2d(weights, [1, n], weights.nb()[1], e as usize * 4);
            let y = g.mul(y, g.repeat(weight, y));
            out = Some(match out {
                None => y,
                Some(acc) => g.add(acc, y),
            });
        }
        let mut out = out.expect("at least one expert");
        if let Some((Some(gate_inp), shared)) = &w.shared {
            let gate = self.shared_expert_gate(self.mm(*gate_inp, x)); // [1, n]
            let shared_out = g.mul(self.ffn(x, shared, il), g.repeat(gate, out));
            out = g.add(out, shared_out);
        }
        name(out, "ffn_moe_out", Some(il));
        out
    }
}

/// Tokens `first..first+n` of a contiguous [a, b, n_tokens] tensor.
/// What attention adds to its heads: gpt-oss's sinks, and the expansion of
/// a latent attention's values into each head's (`attn_v_b`).
#[derive(Clone, Copy)]
struct AttnHeads {
    sinks: Option<Tensor>,
    v_mla: Option<Tensor>,
}

fn rows_3d(g: &GraphCtx, t: Tensor, first: i64, n: i64) -> Tensor {
    let ne = t.ne();
    let nb = t.nb();
    g.view_3d(t, [ne[0], ne[1], n], [nb[1], nb[2]], first as usize * nb[2])
}
