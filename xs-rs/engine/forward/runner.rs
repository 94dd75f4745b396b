//! The [`Runner`]: a model's forward pass on one ggml backend with fixed
//! settings (graph, weights, KV cache layout). The Rust side of a
//! Lugh::Inference (`generate::inference::Inference`) owns one.
//!
//! A runner holds what lives as long as it does (hyperparameters, weights on
//! the device, the backend); the mutable state of a conversation lives in a
//! `KvCache`, and the compute allocation in a `ComputePool`.
use crate::engine::forward::compute::{BatchShape, Executor, StepScratch, Target};
use crate::engine::forward::graph::{Blueprint, Head, Segment};
use crate::engine::forward::kv_cache::{CacheLayout, LayerHeads, RecurrentLayout, Rotations};
use crate::engine::forward::lora::LoraAdapter;
use crate::engine::forward::profile::{timed, Phase, Profile};
use crate::engine::ggml::cpu_budget::{available_cpus, physical_cores, MAX_THREADS};
use crate::engine::ggml::ops::{GraphCtx, Tensor};
use crate::engine::ggml::placement::{Part, Placement};
use crate::engine::ggml::runtime::{self as rt, Backends, BufferType, Device};
use crate::engine::model::arch::{self, ArchSpec, HParams};
use crate::engine::model::rope::RopeSettings;
use crate::engine::model::weights::ModelWeights;
use crate::engine::model::Model;
use crate::engine::xxhash::Xxh64;
use crate::engine::{Error, Result};
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::engine::forward::compute::ComputePool;
pub use crate::engine::forward::kv_cache::KvCache;
use crate::engine::forward::settings::{choose_devices, flash_attn_supported};
pub use crate::engine::forward::settings::{FlashAttn, InferenceOptions, KvType, Output, Overrides, MAX_CTX};

/// A call's resolved settings, and their fingerprint for the graph cache.
struct Variant<'a> {
    rope: RopeSettings,
    /// The call's adapters, over devices their copies beside the weights.
    adapters: std::borrow::Cow<'a, [(Arc<LoraAdapter>, f32)]>,
    key: u64,
}

/// A model's forward pass on one backend. Shareable between threads of Rust
/// (`Send + Sync`); mutable state lives in KvCache/ComputePool.
pub struct Runner {
    /// The layout of this session's caches, made once: comparing a cache
    /// with it each step allocates nothing.
    layout: std::sync::OnceLock<CacheLayout>,
    // Drop order: pools and weights before the backend, all before the model.
    // Empty while a call has the pool out (a generate callback may run
    // another forward on this session: it gets a pool of its own).
    default_pool: Mutex<Option<ComputePool>>,
    profile: Mutex<Profile>,
    target: Target,
    weights: Arc<ModelWeights>,
    executor: Mutex<Executor>,
    placement: Placement,
    backend_name: String,
    /// The RPC servers whose devices take part (their failures end the session).
    rpc: Option<crate::engine::ggml::rpc::Servers>,
    spec: &'static ArchSpec,
    hp: HParams,
    n_threads: usize,
    n_ctx: usize,
    n_batch: usize,
    flash_attn: bool,
    /// The KV cache's types.
    type_k: KvType,
    type_v: KvType,
    /// The session's RoPE settings (the model's, with the session's request).
    rope: RopeSettings,
    /// The weights in their plain layout, for training (see `plain_cpu_weights`).
    training_weights: OnceLock<Arc<ModelWeights>>,
    /// Things the caller should hear about the settings (not errors).
    warnings: Vec<String>,
    model: Arc<Model>,
}

/// What one step computes: every token's output rows (`all`) or each
/// segment's last, from which head, with which variant of the settings.
#[derive(Clone, Copy)]
struct StepKind<'a> {
    all: bool,
    head: Head,
    variant: &'a Variant<'a>,
}

impl Runner {
    /// Checks the architecture (unsupported → Error naming it), resolves the
    /// options and the backend (unknown/unavailable → Error listing those
    /// available), and uploads or maps the weights.
    pub fn new(model: Arc<Model>, options: InferenceOptions) -> Result<Runner> {
        let arch_name = model.architecture().unwrap_or("(none: general.architecture is missing)").to_string();
        let spec = arch::spec_for(&arch_name, model.path())?;
        let hp = HParams::load(&model, spec)?;
        crate::engine::model::validate::hparams(model.path(), spec, &hp)?;
        crate::engine::model::validate::vocab_size(&model, &hp)?;

        let rpc = match options.rpc.is_empty() {
            true => None,
            false => Some(crate::engine::ggml::rpc::Servers::connect(&options.rpc, options.rpc_timeout)?),
        };
        let (backend_name, placement) = choose_devices(&options, hp.n_layer, rpc.as_ref())?;
        let in_range = |what: &str, v: usize, max: usize| match v {
            0 => Err(Error::Argument(format!("{what} must be an integer >= 1, got 0"))),
            _ if v > max => Err(Error::Argument(format!("{what} must be an integer <= {max}, got {v}"))),
            _ => Ok(v),
        };
        // More CPU threads than the process may run at once collapse:
        // ggml's workers meet at a spinning barrier after every op, and a
        // descheduled worker holds the others spinning for a whole time
        // slice (SmolLM2 on 2 cores: 7 ms a token with 2 threads, 3 s with
        // 3). So a larger request is capped to the CPUs available.
        let n_threads = match options.n_threads {
            Some(n) => in_range("n_threads", n, MAX_THREADS)?.min(available_cpus()),
            None => physical_cores().clamp(1, MAX_THREADS),
        };
        let n_ctx = match options.n_ctx {
            Some(n) => in_range("n_ctx", n, MAX_CTX)?,
            None => hp.n_ctx_train.min(4096),
        };
        if spec.rope == arch::Rope::None && n_ctx > hp.n_ctx_train {
            return Err(Error::Argument(format!(
                "n_ctx {n_ctx} is more than the {} positions that '{}' learned (architecture {}, context_length)",
                hp.n_ctx_train,
                model.path().display(),
                spec.name
            )));
        }
        let rope_request = options.rope.unwrap_or_default();
        rope_request.check()?;
        let rope = RopeSettings::resolve(&hp, &rope_request);
        let mut warnings = Vec::new();
        let n_ctx_reach = rope.effective_ctx(&hp);
        if n_ctx > n_ctx_reach {
            // llama.cpp warns too: positions beyond the trained ones work,
            // but the model has not learned them.
            warnings.push(format!(
                "n_ctx {n_ctx} is more than the {n_ctx_reach} positions '{}' was trained on{}: output may degrade beyond them (RoPE scaling reaches further)",
                model.path().display(),
                if n_ctx_reach > hp.n_ctx_train { " with this RoPE scaling" } else { "" }
            ));
        }
        let n_batch = match options.n_batch {
            Some(n) => in_range("n_batch", n, MAX_CTX)?,
            None => 512,
        };
        let (type_k, type_v) = (options.type_k.unwrap_or(KvType::F16), options.type_v.unwrap_or(KvType::F16));
        let flash_attn = match options.flash_attn.unwrap_or(FlashAttn::Auto) {
            FlashAttn::Enabled => true,
            FlashAttn::Disabled => false,
            // on every device that holds layers (an accelerator runs no attention)
            FlashAttn::Auto => {
                placement.devices.iter().chain([&placement.cpu]).all(|&d| flash_attn_supported(d, &hp, type_k, type_v))
            }
        };
        check_kv_types(&hp, type_k, type_v, flash_attn)?;

        let init = |device: Device| {
            device.init_backend().ok_or_else(|| {
                Error::Backend(format!("cannot initialise the {} device {}", device.backend_name(), device.name()))
            })
        };
        let mut executor = if placement.is_cpu_only() {
            Executor::Single(init(placement.cpu)?)
        } else {
            Executor::Scheduled(Backends {
                list: placement.all_devices().into_iter().map(init).collect::<Result<_>>()?,
            })
        };
        executor.set_n_threads(n_threads);
        let weights = model.weights_on(&placement, || ModelWeights::load(&model, spec, &hp, &placement))?;
        if let Some(servers) = &rpc {
            servers.check("loading the weights")?;
        }
        let target = executor.target();
        Ok(Runner {
            layout: std::sync::OnceLock::new(),
            default_pool: Mutex::new(None),
            profile: Mutex::new(Profile::default()),
            target,
            weights,
            executor: Mutex::new(executor),
            placement,
            backend_name,
            rpc,
            spec,
            hp,
            n_threads,
            n_ctx,
            n_batch,
            flash_attn,
            type_k,
            type_v,
            rope,
            training_weights: OnceLock::new(),
            warnings,
            model,
        })
    }

    /// The weights in their plain layout on the CPU (loaded on first use),
    /// for graphs whose other ops than matmul read them: a backward pass
    /// cannot read the repacked layouts.
    pub fn plain_cpu_weights(&self) -> Result<Arc<ModelWeights>> {
        if let Some(w) = self.training_weights.get() {
            return Ok(w.clone());
        }
        let plain = Placement::cpu_only(self.placement.cpu, self.hp.n_layer, false);
        let w = Arc::new(ModelWeights::load(&self.model, self.spec, &self.hp, &plain)?);
        Ok(self.training_weights.get_or_init(|| w).clone())
    }

    /// This session's graph over `weights` with `adapters`, in the
    /// differentiable form (no cache; see `Blueprint::differentiable`).
    pub fn differentiable_blueprint<'a>(
        &'a self,
        weights: &'a Arc<ModelWeights>,
        adapters: &'a [(Arc<LoraAdapter>, f32)],
    ) -> Blueprint<'a> {
        Blueprint {
            spec: self.spec,
            hp: &self.hp,
            weights,
            flash_attn: false,
            rope_factors: weights.rope_factors_for(self.n_ctx, &self.hp),
            rope: &self.rope,
            adapters,
            head: Head::Logits,
            differentiable: true,
        }
    }

    /// Warnings about the settings, for the caller to show.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
    pub fn backend_name(&self) -> &str {
        &self.backend_name
    }
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    pub fn n_batch(&self) -> usize {
        self.n_batch
    }
    /// The resolved flash-attention setting.
    pub fn flash_attn(&self) -> bool {
        self.flash_attn
    }
    /// The types the KV cache stores keys and values in.
    pub fn kv_types(&self) -> (KvType, KvType) {
        (self.type_k, self.type_v)
    }
    pub fn n_vocab(&self) -> usize {
        self.hp.n_vocab
    }
    pub fn architecture(&self) -> &'static str {
        self.spec.name
    }
    pub fn hparams(&self) -> &HParams {
        &self.hp
    }
    /// Which placed copy of the model's weights this session uses (the same
    /// for every session of a model on one device).
    pub fn weights_id(&self) -> usize {
        Arc::as_ptr(&self.weights) as usize
    }
    pub(crate) fn cache_layout(&self) -> CacheLayout {
        self.cache_layout_for(self.n_ctx)
    }

    /// The layout of a cache of `n_ctx` positions for this session.
    fn cache_layout_for(&self, n_ctx: usize) -> CacheLayout {
        let hp = &self.hp;
        CacheLayout {
            n_layer: hp.n_layer,
            n_embd_k_gqa: hp.max_n_embd_k_gqa(),
            n_embd_v_gqa: hp.max_n_embd_v_gqa(),
            head_dim_k: hp.head_dim_k,
            head_dim_v: hp.head_dim_v,
            n_head_kv: hp.n_head_kv,
            kv_size: n_ctx.div_ceil(crate::engine::forward::kv_cache::KV_PAD)
                * crate::engine::forward::kv_cache::KV_PAD,
            // a latent attention's V is read from K's rows, by position
            v_trans: !self.flash_attn && hp.mla.is_none(),
            v_in_k: hp.mla.is_some(),
            type_k: self.type_k.ggml_type(),
            type_v: self.type_v.ggml_type(),
            rotations: self.rotations(),
            recurrent: hp.has_recurrent().then(|| {
                let (conv_len, ssm_len) = hp.recurrent_state_lens();
                RecurrentLayout { conv_len, ssm_len, layers: hp.recurrent_layers.clone() }
            }),
            layer_heads: self.layer_heads(),
            n_layer_kv: hp.per_layer.n_layer_kv,
        }
    }

    /// Each layer's Walsh-Hadamard rotations in a quantized cache, as
    /// llama.cpp b11434 decides them per cache: the sliding-window layers
    /// and the others are two caches where the model has both; a latent
    /// attention's one-row cache is not rotated (its K-only attention
    /// input has no rotation). Empty when no layer is rotated.
    fn rotations(&self) -> Vec<Rotations> {
        let hp = &self.hp;
        if hp.mla.is_some() || !(self.type_k.is_quantized() || self.type_v.is_quantized()) {
            return Vec::new();
        }
        let iswa = hp.swa_layers.iter().any(|&s| s);
        let group_of = |il: usize| iswa && hp.is_swa(il);
        // the layers that keep K/V in each group (shared-KV and recurrent ones keep none)
        let common = |group: bool, width: &dyn Fn(usize) -> usize| {
            let mut widths =
                (0..hp.per_layer.n_layer_kv).filter(|&il| !hp.is_recurrent(il) && group_of(il) == group).map(width);
            let first = widths.next()?;
            widths.all(|w| w == first).then_some(first)
        };
        let (qk, qv) = (self.type_k.is_quantized(), self.type_v.is_quantized());
        let groups = [false, true].map(|group| {
            Rotations::of_group(
                qk,
                qv,
                common(group, &|il| hp.head_dim_k_of(il)),
                common(group, &|il| hp.head_dim_v_of(il)),
            )
        });
        let rotations: Vec<Rotations> = (0..hp.n_layer).map(|il| groups[usize::from(group_of(il))]).collect();
        if rotations.iter().all(|r| *r == Rotations::default()) {
            Vec::new()
        } else {
            rotations
        }
    }

    /// Each layer's heads in the cache where they differ between layers
    /// (else none: every layer has the model's).
    fn layer_heads(&self) -> Vec<LayerHeads> {
        let hp = &self.hp;
        let heads: Vec<LayerHeads> = (0..hp.n_layer)
            .map(|il| LayerHeads {
                head_dim_k: hp.head_dim_k_of(il),
                head_dim_v: hp.head_dim_v_of(il),
                n_head_kv: hp.n_head_kv_of(il),
            })
            .collect();
        let model = LayerHeads { head_dim_k: hp.head_dim_k, head_dim_v: hp.head_dim_v, n_head_kv: hp.n_head_kv };
        if heads.iter().all(|h| *h == model) {
            Vec::new()
        } else {
            heads
        }
    }

    /// An empty KV cache of n_ctx positions (f16 K/V, like llama.cpp).
    pub fn new_cache(&self) -> Result<KvCache> {
        KvCache::new(self.cache_layout(), self.n_ctx, &self.cache_bufts())
    }

    /// Each layer's KV cache buffer type: its layer's device's.
    fn cache_bufts(&self) -> Vec<BufferType> {
        (0..self.hp.n_layer).map(|il| self.placement.device_of(Part::Layer(il)).buffer_type()).collect()
    }

    /// A reusable compute allocation for forward passes.
    pub fn new_pool(&self) -> Result<ComputePool> {
        self.check_servers()?;
        Ok(ComputePool::new(self.target.clone(), self.backend_name.clone()))
    }

    /// An error once an RPC server of the session has stopped answering.
    fn check_servers(&self) -> Result<()> {
        self.rpc.as_ref().map_or(Ok(()), |servers| servers.check("an earlier step"))
    }

    /// The devices taking part and the layers each holds.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The session's own pool, for a call without one (a new one if another
    /// call has it); give it back with `put_default_pool`.
    pub(crate) fn take_default_pool(&self) -> Result<ComputePool> {
        let taken = self.default_pool.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.map_or_else(|| self.new_pool(), Ok)
    }

    pub(crate) fn put_default_pool(&self, pool: ComputePool) {
        *self.default_pool.lock().unwrap_or_else(|e| e.into_inner()) = Some(pool);
    }

    fn check_tokens(&self, tokens: &[i32], what: &str) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::Argument(format!("{what} is empty: at least one token is needed")));
        }
        let n_vocab = self.hp.n_vocab;
        if let Some((pos, &id)) = tokens.iter().enumerate().find(|&(_, &id)| id < 0 || id as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { pos: Some(pos), id: id as i64, n_vocab });
        }
        Ok(())
    }

    fn check_cache(&self, cache: &KvCache, n_new: usize) -> Result<()> {
        if cache.layout() != self.layout.get_or_init(|| self.cache_layout()) || cache.n_ctx() != self.n_ctx {
            return Err(Error::Argument(
                "the KV cache was made by a session with another model or other settings".into(),
            ));
        }
        if n_new > cache.free_cells() {
            return Err(Error::KvOverflow { needed: cache.n_cached() + n_new, capacity: cache.n_ctx() });
        }
        Ok(())
    }

    /// Appends `tokens` to `cache` and returns the logits (Output::Last: one
    /// vector; Output::All: one per token). Validates token ids (Error with
    /// position, id and range) and capacity (Error before computing) first;
    /// an empty token list is an error. Processes the tokens in chunks of
    /// n_batch. With a pool, its allocation is reused.
    pub fn forward(
        &self,
        cache: &mut KvCache,
        tokens: &[i32],
        output: Output,
        pool: Option<&mut ComputePool>,
        ov: &Overrides,
    ) -> Result<Vec<Vec<f32>>> {
        if output == Output::Last {
            let mut last = Vec::new();
            self.forward_last_into(cache, tokens, pool, ov, &mut last)?;
            return Ok(vec![last]);
        }
        let mut rows = Vec::with_capacity(tokens.len());
        self.forward_rows(cache, tokens, Head::Logits, pool, ov, |row| {
            rows.push(row.to_vec());
            Ok(())
        })?;
        Ok(rows)
    }

    /// Appends `tokens` to `cache` and passes `each` the output row of every
    /// token in order: its logits, or with Head::Hidden its final hidden
    /// state. The rows of one n_batch chunk at a time are held, so scoring a
    /// long text over a large vocabulary never holds them all.
    pub fn forward_rows(
        &self,
        cache: &mut KvCache,
        tokens: &[i32],
        head: Head,
        pool: Option<&mut ComputePool>,
        ov: &Overrides,
        mut each: impl FnMut(&[f32]) -> Result<()>,
    ) -> Result<()> {
        self.check_tokens(tokens, "the token list")?;
        self.check_cache(cache, tokens.len())?;
        let width = self.output_width(head);
        let variant = self.variant(ov)?;
        self.with_pool(pool, |pool| {
            let checkpoints = Checkpoints::around(cache, tokens.len());
            let mut flat = Vec::new();
            for chunk in tokens.chunks(self.n_batch) {
                self.run_step(
                    &mut [(&mut *cache, chunk)],
                    StepKind { all: true, head, variant: &variant },
                    pool,
                    &mut flat,
                )?;
                flat.chunks_exact(width).try_for_each(&mut each)?;
            }
            checkpoints.after(cache);
            Ok(())
        })
    }

    /// The length of an output row.
    pub fn output_width(&self, head: Head) -> usize {
        match head {
            Head::Logits => self.hp.n_vocab,
            Head::Hidden => self.hp.n_embd,
            Head::Rank => self.hp.n_cls_out,
        }
    }

    /// The final hidden state of every token of each sequence (flat,
    /// n_embd a token), each sequence seeing only itself, as llama.cpp's
    /// embedding mode computes them. Short sequences share a graph (as many
    /// as fit in n_batch tokens); each gets a cache just large enough for
    /// it, which is attended over the same padded cell count as llama.cpp's.
    pub fn hidden_states(
        &self,
        sequences: &[Vec<i32>],
        pool: Option<&mut ComputePool>,
        ov: &Overrides,
    ) -> Result<Vec<Vec<f32>>> {
        self.rows_of_sequences(sequences, Head::Hidden, pool, ov)
    }

    /// As `hidden_states`, with `head` on every token's row (Head::Rank:
    /// an encoder's classifier outputs, n_cls_out a token).
    pub fn rows_of_sequences(
        &self,
        sequences: &[Vec<i32>],
        head: Head,
        pool: Option<&mut ComputePool>,
        ov: &Overrides,
    ) -> Result<Vec<Vec<f32>>> {
        let variant = self.variant(ov)?;
        for (i, seq) in sequences.iter().enumerate() {
            self.check_tokens(seq, &format!("sequence {i}"))?;
            if seq.len() > self.n_ctx {
                return Err(Error::KvOverflow { needed: seq.len(), capacity: self.n_ctx });
            }
            // an encoder sees a sequence whole: it cannot go in chunks
            if self.hp.non_causal && seq.len() > self.n_batch {
                return Err(Error::Argument(format!(
                    "sequence {i} has {} tokens, more than the batch of {} that an encoder ({}) must see at once (raise n_batch)",
                    seq.len(),
                    self.n_batch,
                    self.spec.name
                )));
            }
        }
        let width = self.output_width(head);
        let mut result: Vec<Vec<f32>> = sequences.iter().map(|s| Vec::with_capacity(s.len() * width)).collect();
        self.with_pool(pool, |pool| {
            let mut flat = Vec::new();
            let mut first = 0;
            while first < sequences.len() {
                // A group: consecutive sequences that fit in n_batch tokens
                // together (a longer one goes alone, in chunks).
                let mut end = first + 1;
                let mut n_tokens = sequences[first].len();
                while end < sequences.len() && n_tokens + sequences[end].len() <= self.n_batch {
                    n_tokens += sequences[end].len();
                    end += 1;
                }
                let group = &sequences[first..end];
                let mut caches = group
                    .iter()
                    .map(|s| KvCache::new(self.cache_layout_for(s.len()), s.len(), &self.cache_bufts()))
                    .collect::<Result<Vec<_>>>()?;
                if let [seq] = group {
                    for chunk in seq.chunks(self.n_batch) {
                        self.run_step(
                            &mut [(&mut caches[0], chunk)],
                            StepKind { all: true, head, variant: &variant },
                            pool,
                            &mut flat,
                        )?;
                        result[first].extend_from_slice(&flat);
                    }
                } else {
                    let mut segs: Vec<(&mut KvCache, &[i32])> =
                        caches.iter_mut().zip(group).map(|(c, s)| (c, s.as_slice())).collect();
                    self.run_step(&mut segs, StepKind { all: true, head, variant: &variant }, pool, &mut flat)?;
                    let mut rows = flat.as_slice();
                    for (i, seq) in group.iter().enumerate() {
                        let (mine, rest) = rows.split_at(seq.len() * width);
                        result[first + i].extend_from_slice(mine);
                        rows = rest;
                    }
                }
                first = end;
            }
            Ok(result)
        })
    }

    /// [`Runner::forward`] with Output::Last, the logits written into
    /// `out` (its memory reused: a decode step allocates nothing).
    pub fn forward_last_into(
        &self,
        cache: &mut KvCache,
        tokens: &[i32],
        pool: Option<&mut ComputePool>,
        ov: &Overrides,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        self.check_tokens(tokens, "the token list")?;
        self.check_cache(cache, tokens.len())?;
        let variant = self.variant(ov)?;
        self.with_pool(pool, |pool| {
            let checkpoints = Checkpoints::around(cache, tokens.len());
            for chunk in tokens.chunks(self.n_batch) {
                self.run_step(
                    &mut [(&mut *cache, chunk)],
                    StepKind { all: false, head: Head::Logits, variant: &variant },
                    pool,
                    out,
                )?;
            }
            checkpoints.after(cache);
            Ok(())
        })
    }

    /// Runs `body` with the caller's pool, or else the session's own.
    fn with_pool<T>(
        &self,
        pool: Option<&mut ComputePool>,
        body: impl FnOnce(&mut ComputePool) -> Result<T>,
    ) -> Result<T> {
        match pool {
            Some(pool) => body(pool),
            None => {
                let mut pool = self.take_default_pool()?;
                let result = body(&mut pool);
                self.put_default_pool(pool);
                result
            }
        }
    }

    /// Evaluates several sequences together in one graph per step, each masked
    /// to its own tokens, each appended to its own cache; returns the
    /// last-position logits of each sequence.
    pub fn forward_batch(
        &self,
        caches: &mut [KvCache],
        sequences: &[Vec<i32>],
        pool: Option<&mut ComputePool>,
        ov: &Overrides,
    ) -> Result<Vec<Vec<f32>>> {
        let variant = self.variant(ov)?;
        if sequences.is_empty() {
            return Err(Error::Argument("no sequences given (the list is empty)".into()));
        }
        if caches.len() != sequences.len() {
            return Err(Error::Argument(format!(
                "cache count mismatch: {} sequences but {} caches (give one cache per sequence)",
                sequences.len(),
                caches.len()
            )));
        }
        for (i, (seq, cache)) in sequences.iter().zip(caches.iter()).enumerate() {
            self.check_tokens(seq, &format!("sequence {i}"))?;
            self.check_cache(cache, seq.len())?;
        }
        self.with_pool(pool, |pool| {
            let checkpoints: Vec<Checkpoints> =
                caches.iter_mut().zip(sequences).map(|(c, s)| Checkpoints::around(c, s.len())).collect();
            // Each step takes the next share of every unfinished sequence, so a
            // step has at most about n_batch tokens.
            let share = (self.n_batch / sequences.len()).max(1);
            let mut done = vec![0usize; sequences.len()];
            let mut result = vec![Vec::new(); sequences.len()];
            let mut flat = Vec::new();
            loop {
                let mut step: Vec<(usize, &mut KvCache, &[i32])> = Vec::new();
                for (i, cache) in caches.iter_mut().enumerate() {
                    let rest = &sequences[i][done[i]..];
                    if !rest.is_empty() {
                        step.push((i, cache, &rest[..rest.len().min(share)]));
                    }
                }
                if step.is_empty() {
                    break;
                }
                let ids: Vec<(usize, usize)> = step.iter().map(|(i, _, t)| (*i, t.len())).collect();
                let mut segs: Vec<(&mut KvCache, &[i32])> = step.into_iter().map(|(_, c, t)| (c, t)).collect();
                self.run_step(
                    &mut segs,
                    StepKind { all: false, head: Head::Logits, variant: &variant },
                    pool,
                    &mut flat,
                )?;
                for ((i, n), l) in ids.into_iter().zip(flat.chunks_exact(self.hp.n_vocab)) {
                    done[i] += n;
                    result[i] = l.to_vec();
                }
            }
            for (cache, checkpoints) in caches.iter_mut().zip(checkpoints) {
                checkpoints.after(cache);
            }
            Ok(result)
        })
    }

    /// One graph over segments, each appending its tokens to its own cache
    /// (no cache twice): the continuous-batching step. Writes each
    /// segment's last-position logits into `out`, one row of n_vocab after
    /// another. The caller keeps the step to about n_batch tokens.
    pub fn forward_segments(
        &self,
        segs: &mut [(&mut KvCache, &[i32])],
        pool: Option<&mut ComputePool>,
        ov: &Overrides,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        if segs.is_empty() {
            return Err(Error::Argument("no sequences given (the list is empty)".into()));
        }
        for (i, (cache, tokens)) in segs.iter().enumerate() {
            self.check_tokens(tokens, &format!("sequence {i}"))?;
            self.check_cache(cache, tokens.len())?;
            if segs[..i].iter().any(|(other, _)| other.id() == cache.id()) {
                return Err(Error::Argument(format!("sequence {i} extends a KV cache another sequence extends")));
            }
        }
        let variant = self.variant(ov)?;
        self.with_pool(pool, |pool| {
            let checkpoints: Vec<Checkpoints> =
                segs.iter_mut().map(|(cache, tokens)| Checkpoints::around(cache, tokens.len())).collect();
            self.run_step(segs, StepKind { all: false, head: Head::Logits, variant: &variant }, pool, out)?;
            for ((cache, _), checkpoints) in segs.iter_mut().zip(checkpoints) {
                checkpoints.after(cache);
            }
            Ok(())
        })
    }

    /// The settings a call's graphs are built with: the session's, with the
    /// call's overrides.
    fn variant<'a>(&self, ov: &'a Overrides) -> Result<Variant<'a>> {
        ov.check()?;
        for (adapter, scale) in &ov.adapters {
            adapter.check_model(&self.model)?;
            if !scale.is_finite() {
                return Err(Error::Argument(format!("a LoRA scale must be a finite number, got {scale}")));
            }
        }
        let rope = match &ov.rope {
            Some(request) => RopeSettings::resolve(&self.hp, request),
            None => self.rope,
        };
        let mut key = Xxh64::new(0);
        for v in rope.key() {
            key.update(&v.to_le_bytes());
        }
        for (adapter, scale) in &ov.adapters {
            key.update(&adapter.id().to_le_bytes());
            key.update(&scale.to_bits().to_le_bytes());
        }
        let adapters = if self.placement.is_cpu_only() || ov.adapters.is_empty() {
            std::borrow::Cow::Borrowed(&ov.adapters[..])
        } else {
            let beside = |(adapter, scale): &(Arc<LoraAdapter>, f32)| {
                Ok((adapter.beside(&self.weights, self.placement.cpu)?, *scale))
            };
            // copies to an RPC server that is gone fail as the server, not as memory
            self.check_servers()?;
            let placed = ov.adapters.iter().map(beside).collect::<Result<Vec<_>>>();
            if let Some(servers) = &self.rpc {
                servers.check("copying the LoRA adapters")?;
            }
            std::borrow::Cow::Owned(placed?)
        };
        Ok(Variant { key: key.digest(), rope, adapters })
    }

    /// The key of the settings a call with `ov` computes with (what a cache
    /// filled by it records).
    pub fn settings_key(&self, ov: &Overrides) -> Result<u64> {
        self.variant(ov).map(|v| v.key)
    }

    /// llama.cpp's placement of each layer's norm (the normalised row
    /// before its weight, named norm-IL): on the layer's device for steps of
    /// fewer than 32 tokens or when everything is offloaded, rather than
    /// where ggml's scheduler would put it (often the previous layer's
    /// device). Nothing for a CPU-only session.
    fn norm_pins(&self, g: &GraphCtx, n_tokens: usize) -> Vec<(Tensor, Device)> {
        let full_offload = self.placement.output.is_some() && self.placement.layers.iter().all(Option::is_some);
        if self.placement.is_cpu_only() || !(n_tokens < 32 || full_offload) {
            return Vec::new();
        }
        g.nodes()
            .into_iter()
            .filter_map(|node| {
                let il: usize = node.name().strip_prefix("norm-")?.parse().ok()?;
                Some((node, self.placement.device_of(Part::Layer(il))))
            })
            .collect()
    }

    /// One graph evaluation over segments (cache, new tokens): builds the
    /// graph (unless the pool keeps one of this shape), allocates it in the
    /// pool, fills the inputs, computes, advances the caches and writes the
    /// output rows (each segment's last token, or every token with
    /// `kind.all`) into `out`, one after another.
    fn run_step(
        &self,
        segs: &mut [(&mut KvCache, &[i32])],
        kind: StepKind,
        pool: &mut ComputePool,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        self.check_servers()?;
        // lent out of the pool, which the step borrows as a whole
        let mut scratch = std::mem::take(&mut pool.scratch);
        let result = self
            .prepare_graph(segs, kind, pool, &mut scratch)
            .and_then(|()| self.compute_step(segs, kind, pool, &mut scratch, out));
        pool.scratch = scratch;
        result
    }

    /// Makes the pool hold an allocated graph for this step (built now
    /// unless it keeps one of the same shape), keyed in `scratch.key`.
    fn prepare_graph(
        &self,
        segs: &[(&mut KvCache, &[i32])],
        StepKind { all, head, variant }: StepKind,
        pool: &mut ComputePool,
        scratch: &mut StepScratch,
    ) -> Result<()> {
        let bp = Blueprint {
            spec: self.spec,
            hp: &self.hp,
            weights: &self.weights,
            flash_attn: self.flash_attn,
            rope_factors: self.weights.rope_factors_for(self.n_ctx, &self.hp),
            rope: &variant.rope,
            adapters: &variant.adapters,
            head,
            differentiable: false,
        };
        let shape = BatchShape {
            n_tokens: segs.iter().map(|(_, t)| t.len()).sum(),
            n_outputs: if all { segs.iter().map(|(_, t)| t.len()).sum() } else { segs.len() },
            n_segments: segs.len(),
            kv_size: segs.iter().map(|(c, _)| c.layout().kv_size).max().unwrap_or(0),
        };
        scratch.key.head = head;
        scratch.key.variant = variant.key;
        scratch.key.segments.clear();
        scratch.key.segments.extend(segs.iter().map(|(c, t)| (c.id(), t.len(), c.n_kv(t.len()), all)));
        if pool.reusable(&scratch.key).is_none() {
            let segments: Vec<Segment> =
                segs.iter().map(|(c, t)| Segment { cache: Some(c), n_tokens: t.len(), all_outputs: all }).collect();
            if pool.needs_reserve(&shape) {
                // Over several devices, room for the largest step at once, as
                // llama.cpp reserves: compute buffers that grow step by step
                // are freed while the device may still hold on to them
                // (Mesa's lavapipe reads freed buffers then).
                let (largest, shape) = if self.placement.is_cpu_only() {
                    (None, shape)
                } else {
                    let largest: Vec<Segment> = segments
                        .iter()
                        .map(|s| Segment { cache: s.cache, n_tokens: s.n_tokens.max(self.n_batch), all_outputs: true })
                        .collect();
                    let n_tokens = largest.iter().map(|s| s.n_tokens).sum();
                    (Some(largest), BatchShape { n_tokens, n_outputs: n_tokens, ..shape })
                };
                let reserve_for = largest.as_ref().unwrap_or(&segments);
                let worst = timed(&self.profile, Phase::Build, || bp.build(reserve_for, true))?;
                let pins = self.norm_pins(&worst.g, shape.n_tokens);
                timed(&self.profile, Phase::Allocate, || pool.reserve(&worst.g, shape, &pins))?;
            }
            let graph = timed(&self.profile, Phase::Build, || bp.build(&segments, false))?;
            if self.placement.is_cpu_only() {
                crate::engine::forward::compute::check_supported(self.placement.cpu, &self.backend_name, &graph.g)?;
            }
            let pins = self.norm_pins(&graph.g, shape.n_tokens);
            timed(&self.profile, Phase::Allocate, || pool.allocate(scratch.key.clone(), graph, &pins))?;
        }
        Ok(())
    }

    /// Fills the inputs of the graph `prepare_graph` readied, computes it,
    /// advances the caches and reads the output rows into `out`.
    fn compute_step(
        &self,
        segs: &mut [(&mut KvCache, &[i32])],
        StepKind { all, variant, .. }: StepKind,
        pool: &mut ComputePool,
        scratch: &mut StepScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let graph = pool.reusable(&scratch.key).expect("the graph was just allocated for this key");
        timed(&self.profile, Phase::Inputs, || {
            graph.inputs.fill(segs, all, self.flash_attn, self.hp.window(), self.hp.non_causal, scratch)
        });
        let computed = timed(&self.profile, Phase::Compute, || {
            pool.compute(&mut self.executor.lock().unwrap_or_else(|e| e.into_inner()))
        });
        if !computed {
            return Err(Error::Ggml("the backend failed to compute the graph".into()));
        }
        let graph = pool.reusable(&scratch.key).expect("the graph was just computed");
        for (cache, tokens) in segs.iter_mut() {
            cache.advance(tokens, Some(variant.key));
        }
        self.profile.lock().unwrap_or_else(|e| e.into_inner()).steps += 1;
        // the output rows lie one after another: one read
        timed(&self.profile, Phase::Read, || {
            out.clear();
            rt::tensor_get_f32_into(graph.output, 0, graph.n_outputs * graph.width, out);
        });
        // after the read: a server lost at any point of the step (ggml's RPC
        // client queues its requests) leaves logits that must not be used
        if let Some(servers) = &self.rpc {
            servers.check("a forward pass")?;
        }
        Ok(())
    }

    /// The time spent so far in each phase of the forward passes (and of
    /// generate's sampling and callbacks); `reset` starts the counts again.
    pub fn profile(&self, reset: bool) -> Profile {
        let mut p = self.profile.lock().unwrap_or_else(|e| e.into_inner());
        if reset {
            std::mem::take(&mut *p)
        } else {
            p.clone()
        }
    }

    /// Adds time spent outside the forward pass (generate's phases).
    pub fn record(&self, phase: Phase, elapsed: std::time::Duration) {
        self.profile.lock().unwrap_or_else(|e| e.into_inner()).add(phase, elapsed);
    }
}

/// When a call evaluates several tokens at once, a recurrent cache keeps its
/// states from before them (so that the call can be undone, as speculative
/// decoding undoes rejected drafts) and after them (a prompt's end, which a
/// later prompt sharing it continues from). One token at a time (decoding)
/// keeps none: its state is the next step's start.
struct Checkpoints {
    keep: bool,
}

impl Checkpoints {
    fn around(cache: &mut KvCache, n_tokens: usize) -> Checkpoints {
        let keep = n_tokens > 1 && cache.has_recurrent();
        if keep {
            cache.checkpoint();
        }
        Checkpoints { keep }
    }

    fn after(self, cache: &mut KvCache) {
        if self.keep {
            cache.checkpoint();
        }
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;

/// Refuses KV cache types this model and attention cannot store in (as
/// llama.cpp refuses them): quantized values need flash attention (the
/// values are read row by row only there), and quantized rows whole blocks
/// per head.
fn check_kv_types(hp: &HParams, type_k: KvType, type_v: KvType, flash_attn: bool) -> Result<()> {
    if type_v.is_quantized() && !flash_attn {
        return Err(Error::Argument(format!(
            "type_v {} (a quantized V cache) needs flash attention: give flash_attn => 1, or type_v => 'f16'",
            type_v.name()
        )));
    }
    // a latent attention's V is read from its K rows
    let type_v = if hp.mla.is_some() { type_k } else { type_v };
    for (what, ty, widths) in [
        ("type_k", type_k, (0..hp.n_layer).map(|il| hp.head_dim_k_of(il)).collect::<Vec<_>>()),
        ("type_v", type_v, (0..hp.n_layer).map(|il| hp.head_dim_v_of(il)).collect()),
    ] {
        if let Some(w) = widths.iter().find(|&&w| w % ty.block_size() != 0) {
            return Err(Error::Argument(format!(
                "{what} {} stores blocks of {} values, and this model's heads are {w} wide: use a type whose \
                 blocks divide the head (f16, bf16 or f32)",
                ty.name(),
                ty.block_size()
            )));
        }
    }
    Ok(())
}
