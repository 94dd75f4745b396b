//! The input tensors of a forward graph: declared here when the graph is
//! built, and filled here before each computation (tokens, positions, the
//! KV cache slots written, causal masks, the rows whose logits are read),
//! as llama.cpp's llm_graph_input_* classes do.
use crate::engine::forward::compute::StepScratch;
use crate::engine::forward::graph::Segment;
use crate::engine::forward::kv_cache::KvCache;
use crate::engine::ggml::ops::{GraphCtx, Tensor, GGML_TYPE_F16, GGML_TYPE_F32, GGML_TYPE_I32, GGML_TYPE_I64};
use crate::engine::ggml::runtime as rt;
use crate::engine::model::arch::{AttnTemperature, HParams, Window};

/// The input tensors of one segment.
pub struct SegmentInputs {
    pub k_idxs: Tensor,
    /// None where V is stored with K (a latent attention's cache).
    pub v_idxs: Option<Tensor>,
    /// Causal mask over the segment's cache [n_kv, n_tokens] (when some
    /// layer is global: a graph input no op reads would get no memory).
    pub mask: Option<Tensor>,
    /// The same with the sliding window, for SWA layers.
    pub mask_swa: Option<Tensor>,
    pub n_kv: usize,
}

/// All the inputs of one graph.
pub struct GraphInputs {
    /// Token ids [n_tokens].
    pub tokens: Tensor,
    /// Their positions [n_tokens].
    pub pos: Tensor,
    /// The batch rows whose logits are read [n_outputs].
    pub out_ids: Tensor,
    pub segments: Vec<SegmentInputs>,
    /// Each token's attention temperature [1, 1, n_tokens], for the models
    /// that have one (llama.cpp's build_inp_attn_scale).
    pub attn_temp: Option<(Tensor, AttnTemperature)>,
    /// 4 for multi-section RoPE (`pos` holds a run of positions per
    /// section: the token's position three times, then zeros), else 1.
    pub positions_per_token: usize,
    /// The Walsh-Hadamard matrices a quantized cache's rotations use, by
    /// size (llama.cpp's attn_inp_k_rot / attn_inp_v_rot), with their
    /// values (made once with the graph, set at every step).
    pub hadamard: Vec<(usize, Tensor, Vec<f32>)>,
}

fn input(g: &GraphCtx, ty: i32, ne: &[i64], label: &str) -> Tensor {
    let t = g.new_tensor(ty, ne);
    t.set_name(label);
    t.set_input();
    t
}

impl GraphInputs {
    /// The input tensors of a graph over `segments` (llama.cpp's
    /// build_inp_embd, build_inp_pos, build_attn_inp_kv, build_inp_out_ids).
    /// With `worst_case` each segment's masks cover its whole cache.
    pub fn declare(
        g: &GraphCtx,
        hp: &HParams,
        segments: &[Segment],
        flash_attn: bool,
        worst_case: bool,
        n_outputs: usize,
    ) -> GraphInputs {
        let n_tokens: usize = segments.iter().map(|s| s.n_tokens).sum();
        let tokens = input(g, GGML_TYPE_I32, &[n_tokens as i64], "inp_tokens");
        let pos = input(g, GGML_TYPE_I32, &[(n_tokens * hp.positions_per_token()) as i64], "inp_pos");
        let mask_type = if flash_attn { GGML_TYPE_F16 } else { GGML_TYPE_F32 };
        let has_swa = hp.swa_layers.iter().any(|&s| s);
        let has_global = hp.swa_layers.iter().any(|&s| !s) || hp.swa_layers.is_empty();
        let segments_in = segments;
        let segments = segments
            .iter()
            .map(|s| {
                let n = s.n_tokens as i64;
                // without a cache (training) the tokens see each other only; the
                // slot ids are then declared but no op reads them
                let (n_kv, v_trans) = match s.cache {
                    // an encoder attends over the segment's own keys and values
                    Some(_) if hp.non_causal => (s.n_tokens, false),
                    Some(c) => (if worst_case { c.layout().kv_size } else { c.n_kv(s.n_tokens) }, c.layout().v_trans),
                    None => (s.n_tokens, false),
                };
                // one index per channel of the cache's rows (the widest layer's)
                let v_len = match s.cache {
                    Some(c) if v_trans => n * c.layout().n_embd_v_gqa as i64,
                    _ => n,
                };
                SegmentInputs {
                    k_idxs: input(g, GGML_TYPE_I64, &[n], "attn_inp_k_idxs"),
                    v_idxs: match s.cache {
                        Some(c) if c.layout().v_in_k => None,
                        _ => Some(input(g, GGML_TYPE_I64, &[v_len], "attn_inp_v_idxs")),
                    },
                    mask: has_global.then(|| input(g, mask_type, &[n_kv as i64, n, 1, 1], "attn_inp_kq_mask")),
                    mask_swa: has_swa.then(|| input(g, mask_type, &[n_kv as i64, n, 1, 1], "attn_inp_kq_mask_swa")),
                    n_kv,
                }
            })
            .collect();
        let out_ids = input(g, GGML_TYPE_I32, &[n_outputs as i64], "out_ids");
        let attn_temp =
            hp.attn_temperature.map(|t| (input(g, GGML_TYPE_F32, &[1, 1, n_tokens as i64], "inp_attn_scale"), t));
        let mut sizes: Vec<usize> = segments_in
            .iter()
            .filter_map(|s| s.cache)
            .flat_map(|c| c.layout().rotations.iter().flat_map(|r| [r.k, r.v]))
            .filter(|&n| n > 0)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let hadamard = sizes
            .into_iter()
            .map(|n| {
                let t = input(g, GGML_TYPE_F32, &[n as i64, n as i64], "attn_inp_rot");
                (n, t, crate::engine::forward::kv_cache::hadamard(n))
            })
            .collect();
        GraphInputs {
            tokens,
            pos,
            out_ids,
            segments,
            attn_temp,
            positions_per_token: hp.positions_per_token(),
            hadamard,
        }
    }

    /// Fills the inputs for appending each segment's tokens to its cache
    /// (`all`: every token's logits, else each segment's last), assembling
    /// them in `scratch`'s buffers. `window`: the sliding-window layers'.
    pub(crate) fn fill(
        &self,
        segs: &[(&mut KvCache, &[i32])],
        all: bool,
        flash_attn: bool,
        window: Window,
        non_causal: bool,
        scratch: &mut StepScratch,
    ) {
        let StepScratch { tokens, pos, out_ids, idxs, mask_f32, mask_f16, .. } = scratch;
        tokens.clear();
        pos.clear();
        out_ids.clear();
        for ((cache, toks), inp) in segs.iter().zip(&self.segments) {
            let first = tokens.len() as i32;
            let start = cache.n_cached();
            tokens.extend_from_slice(toks);
            pos.extend((0..toks.len()).map(|i| (start + i) as i32));
            if all {
                out_ids.extend((0..toks.len() as i32).map(|i| first + i));
            } else {
                out_ids.push(first + toks.len() as i32 - 1);
            }
            // an encoder stores nothing: its slot ids are read by no op and have no memory
            if !non_causal {
                cache.k_idxs_into(toks.len(), idxs);
                rt::tensor_set(inp.k_idxs, idxs);
                if let Some(v_idxs) = inp.v_idxs {
                    cache.v_idxs_into(toks.len(), idxs);
                    rt::tensor_set(v_idxs, idxs);
                }
            }
            // the mask in its graph type: f16 with flash attention, else f32;
            // an encoder's sees the whole segment
            let mut fill = |mask, window: Window| {
                if non_causal {
                    if flash_attn {
                        mask_f16.clear();
                        mask_f16.resize(toks.len() * toks.len(), F16_ZERO);
                        rt::tensor_set(mask, mask_f16);
                    } else {
                        mask_f32.clear();
                        mask_f32.resize(toks.len() * toks.len(), 0.0);
                        rt::tensor_set(mask, mask_f32);
                    }
                } else if flash_attn {
                    causal_mask_into(mask_f16, inp.n_kv, start, toks.len(), window, F16_ZERO, F16_NEG_INF);
                    rt::tensor_set(mask, mask_f16);
                } else {
                    causal_mask_into(mask_f32, inp.n_kv, start, toks.len(), window, 0f32, f32::NEG_INFINITY);
                    rt::tensor_set(mask, mask_f32);
                }
            };
            if let Some(m) = inp.mask {
                fill(m, Window::Whole);
            }
            if let Some(m) = inp.mask_swa {
                fill(m, window);
            }
        }
        rt::tensor_set(self.tokens, tokens);
        if self.positions_per_token > 1 {
            // llama.cpp's text positions for M-RoPE: [p, p, p, 0], section-major
            let n = pos.len();
            for section in 1..self.positions_per_token {
                for i in 0..n {
                    let p = if section < 3 { pos[i] } else { 0 };
                    pos.push(p);
                }
            }
        }
        rt::tensor_set(self.pos, pos);
        rt::tensor_set(self.out_ids, out_ids);
        // the masks have been copied into the graph: their buffer is free
        let n_tokens = tokens.len();
        self.fill_attn_temp(&pos[..n_tokens], mask_f32);
        self.fill_hadamard();
    }

    fn fill_hadamard(&self) {
        for (_, t, values) in &self.hadamard {
            rt::tensor_set(*t, values);
        }
    }

    fn fill_attn_temp(&self, pos: &[i32], buf: &mut Vec<f32>) {
        if let Some((t, temperature)) = self.attn_temp {
            buf.clear();
            buf.extend(pos.iter().map(|&p| temperature.at(p)));
            rt::tensor_set(t, buf);
        }
    }
}

impl GraphInputs {
    /// Fills the inputs of a training pass over `tokens` (one segment with
    /// no cache, at positions 0..n).
    pub fn fill_training(&self, tokens: &[i32], window: Window) {
        let n = tokens.len();
        rt::tensor_set(self.tokens, tokens);
        let pos: Vec<i32> = (0..n as i32).collect();
        rt::tensor_set(self.pos, &pos);
        let mut mask = Vec::new();
        self.fill_attn_temp(&pos, &mut mask);
        let inp = &self.segments[0];
        if let Some(m) = inp.mask {
            causal_mask_into(&mut mask, n, 0, n, Window::Whole, 0f32, f32::NEG_INFINITY);
            rt::tensor_set(m, &mask);
        }
        if let Some(m) = inp.mask_swa {
            causal_mask_into(&mut mask, n, 0, n, window, 0f32, f32::NEG_INFINITY);
            rt::tensor_set(m, &mask);
        }
    }
}

/// Fills a causal mask [n_kv, n_tokens] for tokens at positions
/// `first_pos..first_pos+n_tokens` of one sequence whose cell i holds
/// position i; `window` masks more of the past (llama.cpp's SWA kinds). `keep` (0) and `drop` (-inf) are
/// given in the mask's element type: f32, or f16 bits for flash attention.
#[cfg(test)]
pub fn causal_mask<T: Copy>(
    n_kv: usize,
    first_pos: usize,
    n_tokens: usize,
    window: Window,
    keep: T,
    drop: T,
) -> Vec<T> {
    let mut m = Vec::new();
    causal_mask_into(&mut m, n_kv, first_pos, n_tokens, window, keep, drop);
    m
}

/// [`causal_mask`] into `m`, reusing its memory.
pub fn causal_mask_into<T: Copy>(
    m: &mut Vec<T>,
    n_kv: usize,
    first_pos: usize,
    n_tokens: usize,
    window: Window,
    keep: T,
    drop: T,
) {
    m.clear();
    m.resize(n_kv * n_tokens, drop);
    for i in 0..n_tokens {
        let p1 = first_pos + i;
        let row = &mut m[i * n_kv..(i + 1) * n_kv];
        for (p0, cell) in row.iter_mut().enumerate().take(p1 + 1) {
            if window.sees(p0, p1) {
                *cell = keep;
            }
        }
    }
}

/// The f16 bit patterns of a mask's 0 and -inf (flash attention's mask type).
pub const F16_ZERO: u16 = 0x0000;
pub const F16_NEG_INF: u16 = 0xFC00;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_mask_sees_the_past_only() {
        let inf = f32::NEG_INFINITY;
        let m = causal_mask(4, 1, 2, Window::Whole, 0.0, inf);
        assert_eq!(m, vec![0.0, 0.0, inf, inf, 0.0, 0.0, 0.0, inf]);
    }

    #[test]
    fn sliding_window_masks_old_positions() {
        let inf = f32::NEG_INFINITY;
        let m = causal_mask(4, 3, 1, Window::Sliding(2), 0.0, inf);
        assert_eq!(m, vec![inf, inf, 0.0, 0.0]);
    }

    #[test]
    fn chunked_window_sees_its_own_chunk() {
        let inf = f32::NEG_INFINITY;
        // chunks of 3: position 4 sees 3 and 4, position 6 sees only itself
        let m = causal_mask(8, 4, 3, Window::Chunked(3), 0.0, inf);
        let row = |i: usize| &m[i * 8..(i + 1) * 8];
        assert_eq!(row(0), [inf, inf, inf, 0.0, 0.0, inf, inf, inf]);
        assert_eq!(row(1), [inf, inf, inf, 0.0, 0.0, 0.0, inf, inf]);
        assert_eq!(row(2), [inf, inf, inf, inf, inf, inf, 0.0, inf]);
    }

    #[test]
    fn f16_mask_bits() {
        let m = causal_mask(2, 0, 1, Window::Whole, F16_ZERO, F16_NEG_INF);
        let bytes: Vec<u8> = m.iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(bytes, vec![0, 0, 0x00, 0xFC]);
    }
}
