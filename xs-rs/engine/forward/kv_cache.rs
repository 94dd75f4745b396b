//! The K/V cache of one sequence, laid out as llama.cpp's unified cache with
//! one stream: per layer an f16 K tensor [n_embd_k_gqa, kv_size] and an f16 V
//! tensor [n_embd_v_gqa, kv_size], V stored transposed (one row per channel)
//! when flash attention is off. Cells are filled in order, so cell i holds
//! position i. The graph code only calls `store_*`, `view_*` and `n_kv`.
//!
//! A recurrent layer (Qwen3.5's delta-net) keeps no K/V but one state of
//! the whole sequence: its convolution's last inputs and the delta rule's
//! matrices, both f32 as llama.cpp keeps them. A state cannot be cut back to
//! an earlier position, so the cache keeps a few host copies (checkpoints)
//! of the states at earlier positions, and rolls back only to those.
use crate::engine::ggml::ops::{row_size, Ctx, GraphCtx, Tensor, GGML_TYPE_F32};
use crate::engine::ggml::runtime::{self as rt, Buffer, BufferType};
use crate::engine::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Source of cache ids: a graph kept for reuse names the caches it was built
/// over by id, which (unlike an address) is never given to another cache.
static NEXT_CACHE_ID: AtomicU64 = AtomicU64::new(1);

/// What must match between a cache and the session that uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheLayout {
    pub n_layer: usize,
    pub n_embd_k_gqa: usize,
    pub n_embd_v_gqa: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_head_kv: usize,
    /// Cells allocated: n_ctx padded to 256 as llama.cpp pads its context.
    pub kv_size: usize,
    /// V is stored transposed (flash attention off).
    pub v_trans: bool,
    /// V is the start of each K row, stored with it, not apart (latent
    /// attention's cache: its K is the latent and the RoPE part, its V the
    /// latent); never transposed then.
    pub v_in_k: bool,
    /// The ggml types of the stored keys and values (f16 unless the session
    /// asks for another: `type_k`, `type_v`).
    pub type_k: i32,
    pub type_v: i32,
    /// Each layer's Walsh-Hadamard rotations of K and V (their sizes, 0 =
    /// none) where a quantized cache has them; empty when no layer has.
    pub rotations: Vec<Rotations>,
    /// The recurrent layers, if any: their state sizes and which they are.
    pub recurrent: Option<RecurrentLayout>,
    /// Layers from this one on keep no K/V (Gemma 4's shared-KV layers
    /// attend over an earlier layer's); n_layer when every layer keeps its own.
    pub n_layer_kv: usize,
    /// Each layer's heads where layers differ (Gemma 4's sliding and full
    /// layers; empty: every layer has the heads above). Each layer's K and
    /// V rows are as wide as its own heads, but for V stored transposed,
    /// whose rows are n_embd_v_gqa channels (the widest layer's) in every
    /// layer, as llama.cpp keeps it.
    pub layer_heads: Vec<LayerHeads>,
}

/// The Walsh-Hadamard rotations of one layer's keys and values (their
/// sizes, 0 = none): llama.cpp b11434 rotates Q and K, and V (and the
/// attention's output back), in blocks of that many channels before a
/// quantized cache stores them, so that an outlier channel spreads over the
/// block's values instead of widening one quantization block's scale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rotations {
    pub k: usize,
    pub v: usize,
}

impl Rotations {
    /// The rotations of a layer group (llama.cpp's per-cache rule: one for
    /// the sliding-window layers, one for the others) whose K heads are all
    /// `head_k` wide and V heads `head_v` (None: they differ): K by the
    /// largest power of two from 64 that divides the head, V by 64, each
    /// only for a quantized type and a head a multiple of 64.
    pub fn of_group(quantized_k: bool, quantized_v: bool, head_k: Option<usize>, head_v: Option<usize>) -> Rotations {
        let k = match head_k {
            Some(h) if quantized_k && h > 0 && h % 64 == 0 => {
                let mut n = 64;
                while h % (2 * n) == 0 {
                    n *= 2;
                }
                n
            }
            _ => 0,
        };
        let v = match head_v {
            Some(h) if quantized_v && h > 0 && h % 64 == 0 => 64,
            _ => 0,
        };
        Rotations { k, v }
    }
}

/// The n x n Walsh-Hadamard matrix scaled to be orthonormal (its own
/// inverse), row-major, built as llama.cpp's ggml_gen_hadamard builds it.
pub fn hadamard(n: usize) -> Vec<f32> {
    let mut m = vec![0f32; n * n];
    m[0] = (1.0 / f64::from((n as f32).sqrt())) as f32;
    let mut s = 1;
    while s < n {
        for i in 0..s {
            for j in 0..s {
                let v = m[i * n + j];
                m[(i + s) * n + j] = v;
                m[i * n + j + s] = v;
                m[(i + s) * n + j + s] = -v;
            }
        }
        s *= 2;
    }
    m
}

/// The heads one layer keeps in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerHeads {
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_head_kv: usize,
}

/// The recurrent layers of a cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecurrentLayout {
    /// f32 values of a layer's convolution state, and of its delta-rule
    /// state (0: none, as LFM2's short convolutions).
    pub conv_len: usize,
    pub ssm_len: usize,
    /// One flag per layer.
    pub layers: Vec<bool>,
}

/// The most checkpoints a cache keeps (the oldest go first).
pub const MAX_CHECKPOINTS: usize = 8;

/// The states of every recurrent layer at one position, on the host.
struct Checkpoint {
    pos: usize,
    /// Each recurrent layer's convolution state, then its delta-rule state.
    data: Vec<u8>,
}

/// A recurrent layer's states, each one row of f32.
#[derive(Clone, Copy)]
struct LayerState {
    conv: Tensor,
    ssm: Option<Tensor>,
}

impl LayerState {
    fn tensors(&self) -> impl Iterator<Item = Tensor> {
        std::iter::once(self.conv).chain(self.ssm)
    }

    fn nbytes(&self) -> usize {
        self.tensors().map(|t| t.nbytes()).sum()
    }
}

impl CacheLayout {
    /// The heads of layer `il`.
    pub fn heads(&self, il: usize) -> LayerHeads {
        self.layer_heads.get(il).copied().unwrap_or(LayerHeads {
            head_dim_k: self.head_dim_k,
            head_dim_v: self.head_dim_v,
            n_head_kv: self.n_head_kv,
        })
    }

    /// The values in one cell's row of layer `il`'s K or V (0: V lives in
    /// K's rows); with V transposed, the channels of every layer's V.
    pub fn width(&self, il: usize, part: Part) -> usize {
        let own = !self.layer_heads.is_empty();
        let h = self.heads(il);
        match part {
            Part::K if own => h.n_head_kv * h.head_dim_k,
            Part::K => self.n_embd_k_gqa,
            Part::V if self.v_in_k => 0,
            Part::V if own && !self.v_trans => h.n_head_kv * h.head_dim_v,
            Part::V => self.n_embd_v_gqa,
        }
    }

    /// Whether some layer's rows are narrower than the widest layer's
    /// (saved caches before format 3 stored them padded to it).
    pub fn has_narrow_layers(&self) -> bool {
        (0..self.n_layer).filter(|&il| self.holds_kv(il)).any(|il| {
            self.width(il, Part::K) != self.n_embd_k_gqa
                || (!self.v_in_k && self.width(il, Part::V) != self.n_embd_v_gqa)
        })
    }

    /// Layer `il`'s rotations (none for most caches).
    pub fn rotations(&self, il: usize) -> Rotations {
        self.rotations.get(il).copied().unwrap_or_default()
    }

    /// Whether layer `il` keeps K and V of its own.
    pub fn holds_kv(&self, il: usize) -> bool {
        il < self.n_layer_kv && !self.is_recurrent(il)
    }

    /// Whether layer `il` keeps a recurrent state instead of K/V.
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.recurrent.as_ref().is_some_and(|r| r.layers.get(il).copied().unwrap_or(false))
    }

    /// The byte ranges (offset, length) of layer `il`'s K or V that hold
    /// its first `n` cells: one range of `n` whole rows, or with V
    /// transposed the first `n` entries of each channel's row.
    fn cell_ranges(&self, il: usize, part: Part, n: usize) -> impl Iterator<Item = (usize, usize)> {
        // V within K has nothing of its own: it is stored (and saved) with K
        let width = self.width(il, part);
        let (by_channel, ty) = match part {
            Part::K => (false, self.type_k),
            Part::V => (self.v_trans && !self.v_in_k, self.type_v),
        };
        let (count, stride, len) = if by_channel {
            (width, row_size(ty, self.kv_size as i64), row_size(ty, n as i64))
        } else {
            (usize::from(width > 0), 0, row_size(ty, width as i64) * n)
        };
        (0..count).map(move |i| (i * stride, len))
    }

    /// The bytes of recurrent layer `il`'s state (0 for an attending layer).
    pub fn state_bytes(&self, il: usize) -> usize {
        match &self.recurrent {
            Some(r) if self.is_recurrent(il) => 4 * (r.conv_len + r.ssm_len),
            _ => 0,
        }
    }

    /// The bytes of the first `n` cells of layer `il`'s K or V.
    pub fn cells_bytes(&self, il: usize, part: Part, n: usize) -> usize {
        self.cell_ranges(il, part, n).map(|(_, len)| len).sum()
    }
}

/// llama.cpp pads n_kv (the cells a graph attends over) to a multiple of 256
/// so that graphs keep their shape across steps; the padding changes the
/// kernels' summation order, so it is part of matching its numerics.
pub const KV_PAD: usize = 256;

/// One of a layer's two tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    K,
    V,
}

pub struct KvCache {
    id: u64,
    layout: CacheLayout,
    n_ctx: usize,
    /// The token at each filled position, so a later prompt can reuse the
    /// longest prefix it shares with them.
    tokens: Vec<i32>,
    /// The settings (RoPE, adapters: the graph variant's key) its cells were
    /// computed with; None when not known (empty, or loaded from a file).
    filled_with: Option<u64>,
    /// K and V of the attending layers (None for recurrent ones).
    k: Vec<Option<Tensor>>,
    v: Vec<Option<Tensor>>,
    /// The states of the recurrent layers (None for attending ones).
    states: Vec<Option<LayerState>>,
    /// Host copies of the states at earlier positions, oldest first.
    checkpoints: Vec<Checkpoint>,
    // Drop order: the buffers before the contexts describing their tensors.
    // One of each per buffer type (each layer's cache lives on its layer's
    // device).
    buffers: Vec<Buffer>,
    _contexts: Vec<Ctx>,
}

impl KvCache {
    /// An empty cache whose layer `il` lives in a buffer of type `bufts[il]`.
    pub(crate) fn new(layout: CacheLayout, n_ctx: usize, bufts: &[BufferType]) -> Result<KvCache> {
        assert_eq!(bufts.len(), layout.n_layer, "one buffer type per layer");
        let mut k: Vec<Option<Tensor>> = vec![None; layout.n_layer];
        let mut v: Vec<Option<Tensor>> = vec![None; layout.n_layer];
        let mut states: Vec<Option<LayerState>> = vec![None; layout.n_layer];
        let mut distinct: Vec<BufferType> = Vec::new();
        for b in bufts {
            if !distinct.contains(b) {
                distinct.push(*b);
            }
        }
        let mut buffers = Vec::with_capacity(distinct.len());
        let mut contexts = Vec::with_capacity(distinct.len());
        for buft in distinct {
            let layers: Vec<usize> = (0..layout.n_layer).filter(|&il| bufts[il] == buft).collect();
            let ctx =
                Ctx::new(2 * layers.len(), 0).ok_or_else(|| Error::Ggml("cannot create a KV cache context".into()))?;
            for &il in &layers {
                if let (true, Some(r)) = (layout.is_recurrent(il), &layout.recurrent) {
                    let conv = ctx.new_tensor(GGML_TYPE_F32, &[r.conv_len as i64, 1]);
                    conv.set_name(&format!("cache_r_l{il}"));
                    let ssm = (r.ssm_len > 0).then(|| {
                        let ssm = ctx.new_tensor(GGML_TYPE_F32, &[r.ssm_len as i64, 1]);
                        ssm.set_name(&format!("cache_s_l{il}"));
                        ssm
                    });
                    states[il] = Some(LayerState { conv, ssm });
                    continue;
                }
                if !layout.holds_kv(il) {
                    continue;
                }
                let kt = ctx.new_tensor(layout.type_k, &[layout.width(il, Part::K) as i64, layout.kv_size as i64]);
                kt.set_name(&format!("cache_k_l{il}"));
                k[il] = Some(kt);
                if !layout.v_in_k {
                    let vt = ctx.new_tensor(layout.type_v, &[layout.width(il, Part::V) as i64, layout.kv_size as i64]);
                    vt.set_name(&format!("cache_v_l{il}"));
                    v[il] = Some(vt);
                }
            }
            let buffer = Buffer::alloc_ctx_tensors(&ctx, buft).ok_or_else(|| {
                Error::Ggml(format!("cannot allocate a KV cache of {} cells ({})", layout.kv_size, buft.name()))
            })?;
            // Never-written cells must hold finite values: masked positions are
            // multiplied by zero in the kernels and NaN * 0 is NaN.
            buffer.clear();
            buffers.push(buffer);
            contexts.push(ctx);
        }
        Ok(KvCache {
            id: NEXT_CACHE_ID.fetch_add(1, Ordering::Relaxed),
            layout,
            n_ctx,
            // 4 bytes a position next to kilobytes of K/V: reserved whole so
            // that decoding never reallocates it
            tokens: Vec::with_capacity(n_ctx),
            filled_with: None,
            k,
            v,
            states,
            checkpoints: Vec::new(),
            buffers,
            _contexts: contexts,
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn layout(&self) -> &CacheLayout {
        &self.layout
    }
    pub fn n_cached(&self) -> usize {
        self.tokens.len()
    }
    /// The tokens whose keys and values are stored, in position order.
    pub fn tokens(&self) -> &[i32] {
        &self.tokens
    }
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    pub fn n_layer(&self) -> usize {
        self.layout.n_layer
    }
    pub fn free_cells(&self) -> usize {
        self.n_ctx - self.n_cached()
    }
    pub fn size_bytes(&self) -> usize {
        self.buffers.iter().map(Buffer::size).sum()
    }

    pub fn clear(&mut self) {
        self.tokens.clear();
        self.filled_with = None;
        self.checkpoints.clear();
        self.zero_states();
    }

    /// Whether some layer keeps a recurrent state.
    pub fn has_recurrent(&self) -> bool {
        self.layout.recurrent.is_some()
    }

    /// A fresh sequence's recurrent states: zeros.
    fn zero_states(&mut self) {
        let mut zeros = Vec::new();
        for state in self.states.iter().flatten() {
            for t in state.tensors() {
                zeros.clear();
                zeros.resize(t.nbytes(), 0u8);
                rt::tensor_write(t, 0, &zeros);
            }
        }
    }

    /// The bytes of layer `il`'s recurrent state (its convolution state,
    /// then its delta-rule state).
    pub fn layer_state_bytes(&self, il: usize) -> usize {
        self.layout.state_bytes(il)
    }

    /// Copies layer `il`'s recurrent state into `out` (as long as
    /// [`KvCache::layer_state_bytes`]).
    pub fn read_layer_state(&self, il: usize, out: &mut [u8]) {
        let s = self.states[il].expect("a recurrent layer has a state");
        let mut at = 0;
        for t in s.tensors() {
            rt::tensor_read(t, 0, &mut out[at..at + t.nbytes()]);
            at += t.nbytes();
        }
    }

    /// Sets layer `il`'s recurrent state from `data`, laid out as
    /// [`KvCache::read_layer_state`] gives it.
    pub fn write_layer_state(&mut self, il: usize, data: &[u8]) {
        let s = self.states[il].expect("a recurrent layer has a state");
        assert_eq!(data.len(), s.nbytes(), "write_layer_state: size");
        let mut at = 0;
        for t in s.tensors() {
            rt::tensor_write(t, 0, &data[at..at + t.nbytes()]);
            at += t.nbytes();
        }
    }

    /// The bytes of all recurrent states (a checkpoint's size).
    pub fn state_bytes(&self) -> usize {
        (0..self.n_layer()).map(|il| self.layout.state_bytes(il)).sum()
    }

    /// Layer `il`'s convolution state ([conv_state_len, 1] f32).
    pub fn conv_state(&self, il: usize) -> Tensor {
        self.states[il].expect("a recurrent layer has a state").conv
    }

    /// Layer `il`'s delta-rule state ([ssm_state_len, 1] f32).
    pub fn ssm_state(&self, il: usize) -> Tensor {
        self.states[il].and_then(|s| s.ssm).expect("a delta-net layer has a delta-rule state")
    }

    /// Copies every recurrent state into `out`, layer by layer (each
    /// layer's convolution state, then its delta-rule state).
    pub fn read_states(&self, out: &mut Vec<u8>) {
        out.resize(self.state_bytes(), 0);
        let mut at = 0;
        for il in 0..self.n_layer() {
            let len = self.layer_state_bytes(il);
            if len > 0 {
                self.read_layer_state(il, &mut out[at..at + len]);
                at += len;
            }
        }
    }

    /// Sets every recurrent state from `data`, laid out as
    /// [`KvCache::read_states`] gives them.
    pub fn write_states(&mut self, data: &[u8]) {
        assert_eq!(data.len(), self.state_bytes(), "write_states: size");
        let mut at = 0;
        for il in 0..self.n_layer() {
            let len = self.layer_state_bytes(il);
            if len > 0 {
                self.write_layer_state(il, &data[at..at + len]);
                at += len;
            }
        }
    }

    /// Keeps a copy of the recurrent states at the current position, so
    /// that the cache can later roll back to it (nothing without recurrent
    /// layers, or when one is kept there already). The oldest goes when
    /// [`MAX_CHECKPOINTS`] are kept.
    pub fn checkpoint(&mut self) {
        let pos = self.n_cached();
        if !self.has_recurrent() || pos == 0 || self.checkpoints.iter().any(|c| c.pos == pos) {
            return;
        }
        if self.checkpoints.len() == MAX_CHECKPOINTS {
            self.checkpoints.remove(0);
        }
        let mut data = Vec::new();
        self.read_states(&mut data);
        self.checkpoints.push(Checkpoint { pos, data });
    }

    /// The longest prefix of at most `n` positions the cache can roll back
    /// to: `n` itself without recurrent layers; with them the current
    /// position, a checkpoint's, or 0.
    pub fn restorable(&self, n: usize) -> usize {
        let n = n.min(self.n_cached());
        if !self.has_recurrent() || n == self.n_cached() {
            return n;
        }
        self.checkpoints.iter().map(|c| c.pos).filter(|&pos| pos <= n).max().unwrap_or(0)
    }

    /// The positions a recurrent cache can roll back to, ascending.
    fn restorable_positions(&self) -> Vec<usize> {
        let mut positions: Vec<usize> = self.checkpoints.iter().map(|c| c.pos).collect();
        positions.push(0);
        positions.push(self.n_cached());
        positions.sort_unstable();
        positions.dedup();
        positions
    }

    /// The settings key of the computation that filled it (see the field).
    pub fn filled_with(&self) -> Option<u64> {
        self.filled_with
    }

    fn tensor(&self, il: usize, part: Part) -> Tensor {
        let t = match part {
            Part::K => self.k[il],
            Part::V => self.v[il],
        };
        t.expect("an attending layer has K and V")
    }

    /// Copies the first `n` cells of layer `il`'s K or V into `out` (which
    /// is [`CacheLayout::cells_bytes`] long), in the tensor's own order: cell
    /// after cell, or with V transposed channel after channel.
    pub fn read_cells(&self, il: usize, part: Part, n: usize, out: &mut [u8]) {
        assert_eq!(out.len(), self.layout.cells_bytes(il, part, n), "read_cells: size");
        let mut at = 0;
        for (offset, len) in self.layout.cell_ranges(il, part, n) {
            rt::tensor_read(self.tensor(il, part), offset, &mut out[at..at + len]);
            at += len;
        }
    }

    /// Writes the first `n` cells of layer `il`'s K or V from `data`, laid
    /// out as [`KvCache::read_cells`] gives them. The cells join the cache
    /// with [`KvCache::advance`].
    pub fn write_cells(&mut self, il: usize, part: Part, n: usize, data: &[u8]) {
        assert_eq!(data.len(), self.layout.cells_bytes(il, part, n), "write_cells: size");
        let mut at = 0;
        for (offset, len) in self.layout.cell_ranges(il, part, n) {
            rt::tensor_write(self.tensor(il, part), offset, &data[at..at + len]);
            at += len;
        }
    }

    /// Rolls back to the first `n` positions (n <= n_cached, else Error).
    pub fn resize(&mut self, n: usize) -> Result<()> {
        if n > self.n_cached() {
            return Err(Error::Argument(format!(
                "cannot resize the KV cache to {n} positions: it holds only {} (resize only rolls back)",
                self.n_cached()
            )));
        }
        if self.has_recurrent() && n != self.n_cached() {
            if n == 0 {
                self.clear();
                return Ok(());
            }
            let Some(at) = self.checkpoints.iter().position(|c| c.pos == n) else {
                return Err(Error::Argument(format!(
                    "cannot roll the cache back to {n} positions: this model's recurrent layers keep one state \
                     of the whole sequence, which can only go back to a kept checkpoint (positions {:?})",
                    self.restorable_positions()
                )));
            };
            let data = std::mem::take(&mut self.checkpoints[at].data);
            self.write_states(&data);
            self.checkpoints[at].data = data;
        }
        self.tokens.truncate(n);
        self.checkpoints.retain(|c| c.pos <= n);
        Ok(())
    }

    /// The longest prefix of at most `n` positions that [`KvCache::copy_prefix`]
    /// can take from this cache: `n` itself without recurrent layers; with
    /// them only where the states are known (the current position or a
    /// checkpoint's), else 0.
    pub fn copyable(&self, n: usize) -> usize {
        let n = n.min(self.n_cached());
        match self.has_recurrent() && n != self.n_cached() {
            true => self.checkpoints.iter().map(|c| c.pos).filter(|&pos| pos <= n).max().unwrap_or(0),
            false => n,
        }
    }

    /// Makes this cache hold the first `n` positions of `from` (a cache of
    /// the same layout): their cells, tokens and settings, and the recurrent
    /// states there, so that a prompt sharing them (a system prompt) is not
    /// evaluated again. `n` must be [`KvCache::copyable`] from `from`.
    pub fn copy_prefix(&mut self, from: &KvCache, n: usize) -> Result<()> {
        if from.layout != self.layout || n > self.n_ctx || from.copyable(n) != n {
            return Err(Error::Argument(format!(
                "cannot copy {n} positions between these KV caches (other layouts, or no state kept there)"
            )));
        }
        if n == 0 {
            self.clear();
            return Ok(());
        }
        let mut bytes = Vec::new();
        for il in 0..self.n_layer() {
            if !self.layout.holds_kv(il) {
                continue;
            }
            for part in [Part::K, Part::V] {
                bytes.resize(self.layout.cells_bytes(il, part, n), 0);
                from.read_cells(il, part, n, &mut bytes);
                self.write_cells(il, part, n, &bytes);
            }
        }
        self.checkpoints.clear();
        if self.has_recurrent() {
            match from.checkpoints.iter().find(|c| c.pos == n) {
                Some(c) => self.write_states(&c.data),
                None => {
                    from.read_states(&mut bytes);
                    self.write_states(&bytes);
                }
            }
        }
        self.tokens.clear();
        self.tokens.extend_from_slice(&from.tokens[..n]);
        self.filled_with = from.filled_with;
        // a later prompt that shares less than this one rolls back to here
        self.checkpoint();
        Ok(())
    }

    /// Makes `tokens` the history of cells and states just written from a
    /// saved cache (its states are those after the last token).
    pub(crate) fn tokens_loaded(&mut self, tokens: &[i32]) {
        self.tokens.clear();
        self.tokens.extend_from_slice(tokens);
        self.filled_with = None;
        self.checkpoints.clear();
    }

    /// Records `tokens` as the next filled positions (after a successful
    /// compute).
    pub(crate) fn advance(&mut self, tokens: &[i32], settings: Option<u64>) {
        debug_assert!(self.n_cached() + tokens.len() <= self.n_ctx);
        self.tokens.extend_from_slice(tokens);
        self.filled_with = settings;
    }

    /// The cells a graph over `n_new` more tokens attends to: llama.cpp's
    /// `get_n_kv`, all used cells padded to 256, at most the cache size.
    pub fn n_kv(&self, n_new: usize) -> usize {
        let used = self.n_cached() + n_new;
        self.layout.kv_size.min(KV_PAD.max(used.div_ceil(KV_PAD) * KV_PAD))
    }

    /// The cell indices the new tokens go to (llama.cpp's k_idxs), into `out`.
    pub fn k_idxs_into(&self, n_new: usize, out: &mut Vec<i64>) {
        out.clear();
        out.extend((self.n_cached()..self.n_cached() + n_new).map(|c| c as i64));
    }

    /// The element indices for the V rows, into `out`: one per token, or with
    /// V transposed one per token and channel (channel-major in the cache).
    pub fn v_idxs_into(&self, n_new: usize, out: &mut Vec<i64>) {
        if !self.layout.v_trans {
            return self.k_idxs_into(n_new, out);
        }
        out.clear();
        let (kv_size, n_embd) = (self.layout.kv_size as i64, self.layout.n_embd_v_gqa as i64);
        for cell in self.n_cached() as i64..(self.n_cached() + n_new) as i64 {
            out.extend((0..n_embd).map(|e| e * kv_size + cell));
        }
    }

    pub fn store_k(&self, g: &GraphCtx, k_cur: Tensor, k_idxs: Tensor, il: usize) -> Tensor {
        let ne = k_cur.ne();
        let rows = g.view_2d(k_cur, [ne[0] * ne[1], ne[2]], k_cur.nb()[2], 0);
        g.set_rows(self.tensor(il, Part::K), rows, k_idxs)
    }

    /// Writes V of the new tokens, as `store_k`; with V transposed every
    /// element is its own row (llama.cpp's cpy_v). Not where V is stored
    /// with K (there is no V to write).
    pub fn store_v(&self, g: &GraphCtx, v_cur: Tensor, v_idxs: Tensor, il: usize) -> Tensor {
        let ne = v_cur.ne();
        let n_embd = ne[0] * ne[1];
        if !self.layout.v_trans {
            let rows = g.view_2d(v_cur, [n_embd, ne[2]], v_cur.nb()[2], 0);
            return g.set_rows(self.tensor(il, Part::V), rows, v_idxs);
        }
        let flat = if row_size(v_cur.type_id(), n_embd) == v_cur.nb()[2] {
            g.reshape_2d(v_cur, n_embd, ne[2])
        } else {
            g.cont_2d(v_cur, n_embd, ne[2])
        };
        // every channel of the widest layer has its indices: a narrower
        // layer's rows are padded with zeros (never read)
        let pad = self.layout.n_embd_v_gqa as i64 - n_embd;
        let flat = if pad > 0 { g.pad(flat, [pad as i32, 0, 0, 0]) } else { flat };
        let n_embd = flat.ne()[0];
        let cache = self.tensor(il, Part::V);
        let n_cache = cache.ne()[0] * cache.ne()[1];
        let cache_elems = g.reshape_2d(cache, 1, n_cache);
        let elems = g.reshape_2d(flat, 1, n_embd * ne[2]);
        g.set_rows(cache_elems, elems, v_idxs)
    }

    /// K of the first `n_kv` cells as [head_dim, n_head_kv, n_kv, 1].
    pub fn view_k(&self, g: &GraphCtx, il: usize, n_kv: usize) -> Tensor {
        let l = &self.layout;
        let h = l.heads(il);
        let k = self.tensor(il, Part::K);
        let (t, width) = (k.type_id(), l.width(il, Part::K));
        g.view_4d(
            k,
            [h.head_dim_k as i64, h.n_head_kv as i64, n_kv as i64, 1],
            [row_size(t, h.head_dim_k as i64), row_size(t, width as i64), row_size(t, (width * l.kv_size) as i64)],
            0,
        )
    }

    /// V of the first `n_kv` cells: [head_dim, n_head_kv, n_kv, 1], or with V
    /// transposed [n_kv, n_head_kv, head_dim, 1].
    pub fn view_v(&self, g: &GraphCtx, il: usize, n_kv: usize) -> Tensor {
        let l = &self.layout;
        let h = l.heads(il);
        if l.v_in_k {
            // the start of each K row, with K's strides (llama.cpp's MLA view)
            let k = self.view_k(g, il, n_kv);
            let nb = k.nb();
            return g.view_4d(k, [h.head_dim_v as i64, h.n_head_kv as i64, n_kv as i64, 1], [nb[1], nb[2], nb[3]], 0);
        }
        let v = self.tensor(il, Part::V);
        let (t, width) = (v.type_id(), l.width(il, Part::V));
        if !l.v_trans {
            return g.view_4d(
                v,
                [h.head_dim_v as i64, h.n_head_kv as i64, n_kv as i64, 1],
                [row_size(t, h.head_dim_v as i64), row_size(t, width as i64), row_size(t, (width * l.kv_size) as i64)],
                0,
            );
        }
        g.view_4d(
            v,
            [n_kv as i64, h.n_head_kv as i64, h.head_dim_v as i64, 1],
            [
                row_size(t, (l.kv_size * h.head_dim_v) as i64),
                row_size(t, l.kv_size as i64),
                row_size(t, (l.kv_size * l.n_embd_v_gqa) as i64),
            ],
            0,
        )
    }
}
