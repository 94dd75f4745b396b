//! [`Inference`]: what one Lugh::Inference object holds (its [`Runner`] and
//! scratch caches), and the caches and pools made from
//! it. The perl objects are `Arc`s of these types: a [`CacheHandle`] or
//! [`PoolHandle`] holds an `Arc<Inference>`, and a session holds its model's
//! `Arc`, so parents outlive their children whatever order perl frees them in.
//!
//! No lock is held while perl code runs (the generate callback may call back
//! into the same session): scratch caches and the session's default pool are
//! taken out of their slots for the duration of a call and put back afterwards.
use crate::engine::forward::kv_cache::{CacheLayout, KV_PAD};
use crate::engine::forward::kv_file::{self, ModelId};
use crate::engine::forward::runner::{ComputePool, InferenceOptions, KvCache, Output, Overrides, Runner};
use crate::engine::generate::generation::{self, CachedRunner, GenerateOptions, Generation, Step, TokenText};
use crate::engine::ggml::ops::GGML_TYPE_F16;
use crate::engine::ggml::runtime::Device;
use crate::engine::model::Model;
use crate::engine::{Error, Result};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Scratch caches kept for later calls (each holds n_ctx positions of K/V).
const MAX_SCRATCH_CACHES: usize = 4;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while locked is already reported as an error; the state it
    // guards (a slot holding an Option) stays consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Perl Lugh::Inference: a runner, and scratch caches for the calls
/// that bring no cache of their own.
pub struct Inference {
    pub runner: Runner,
    scratch_caches: Mutex<Vec<KvCache>>,
    _live: crate::engine::live::Live,
}

/// A KV cache of one session (Lugh::KVCache). The slot is empty only while a
/// batched forward has moved the cache out, or after a panic in one. A
/// standalone cache (made from its shape, not by a session) belongs to the
/// first session that uses it.
pub struct CacheHandle {
    session: OnceLock<Arc<Inference>>,
    cache: Mutex<Option<KvCache>>,
}

/// The shape of a standalone cache (`Lugh::KVCache->new`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    pub n_layer: usize,
    pub n_ctx: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
}

/// Limits on a standalone cache's shape (beyond any model's).
const MAX_LAYERS: usize = 4096;
const MAX_HEADS: usize = 4096;
const MAX_HEAD_DIM: usize = 8192;

/// A compute pool of one session (Lugh::MemoryPool).
pub struct PoolHandle {
    session: Arc<Inference>,
    pool: Mutex<ComputePool>,
}

const LOST: &str = "this KV cache is in use by a generate call running on it (or was lost to an internal error)";
const BUSY: &str = "this KV cache is already in use by a generate call running on it";
const UNUSED: &str = "this KV cache has not been used by a session yet, so it belongs to no model and holds nothing \
                      to save (a cache from Lugh::KVCache->new belongs to the first session that uses it)";

impl CacheHandle {
    /// A cache of the given shape on the CPU, not yet tied to a session.
    pub fn standalone(shape: CacheShape) -> Result<CacheHandle> {
        for (what, v, max) in [
            ("n_layer", shape.n_layer, MAX_LAYERS),
            ("n_ctx", shape.n_ctx, crate::engine::forward::runner::MAX_CTX),
            ("n_head_kv", shape.n_head_kv, MAX_HEADS),
            ("head_dim", shape.head_dim, MAX_HEAD_DIM),
        ] {
            if v == 0 || v > max {
                return Err(Error::Argument(format!("{what} must be an integer in [1, {max}], got {v}")));
            }
        }
        let cpu = Device::by_backend_name("CPU").ok_or_else(|| Error::Backend("the CPU backend is missing".into()))?;
        let n_embd_gqa = shape.n_head_kv * shape.head_dim;
        let layout = CacheLayout {
            n_layer: shape.n_layer,
            n_embd_k_gqa: n_embd_gqa,
            n_embd_v_gqa: n_embd_gqa,
            head_dim_k: shape.head_dim,
            head_dim_v: shape.head_dim,
            n_head_kv: shape.n_head_kv,
            kv_size: shape.n_ctx.div_ceil(KV_PAD) * KV_PAD,
            v_trans: true,
            v_in_k: false,
            type_k: GGML_TYPE_F16,
            type_v: GGML_TYPE_F16,
            rotations: Vec::new(),
            recurrent: None,
            layer_heads: Vec::new(),
            n_layer_kv: shape.n_layer,
        };
        let cache = KvCache::new(layout, shape.n_ctx, &vec![cpu.buffer_type(); shape.n_layer])?;
        Ok(CacheHandle { session: OnceLock::new(), cache: Mutex::new(Some(cache)) })
    }

    /// Writes the cache to `path` (see [`kv_file`]), for
    /// [`Inference::load_cache`] to read back.
    pub fn save(&self, path: &Path) -> Result<()> {
        let session = self.session.get().ok_or_else(|| Error::Argument(UNUSED.into()))?;
        let model = session.model_id()?;
        self.with(|kv| kv_file::save(path, kv, &model))
    }

    /// Runs `f` on the cache.
    pub fn with<R>(&self, f: impl FnOnce(&mut KvCache) -> Result<R>) -> Result<R> {
        lock(&self.cache).as_mut().map_or_else(|| Err(Error::Argument(LOST.into())), f)
    }
}

impl PoolHandle {
    pub fn with<R>(&self, f: impl FnOnce(&mut ComputePool) -> R) -> R {
        f(&mut lock(&self.pool))
    }
}

impl Inference {
    pub fn new(model: Arc<Model>, options: InferenceOptions) -> Result<Inference> {
        let runner = Runner::new(model, options)?;
        crate::debug_log!(
            "session on {}: n_threads {}, n_ctx {}, n_batch {}, flash_attn {}",
            runner.backend_name(),
            runner.n_threads(),
            runner.n_ctx(),
            runner.n_batch(),
            if runner.flash_attn() { "on" } else { "off" }
        );
        Ok(Inference { runner, scratch_caches: Mutex::new(Vec::new()), _live: crate::engine::live::Live::new() })
    }

    pub fn new_cache(self: &Arc<Self>) -> Result<CacheHandle> {
        let session = OnceLock::from(self.clone());
        let cache = self.runner.new_cache()?;
        crate::debug_log!(
            "KV cache of {} positions: {:.1} MiB",
            cache.n_ctx(),
            crate::engine::debug::mib(cache.size_bytes())
        );
        Ok(CacheHandle { session, cache: Mutex::new(Some(cache)) })
    }

    /// A cache of this session holding what the saved cache at `path`
    /// holds; the file must have been saved from a session of the same
    /// model, n_ctx and flash-attention setting (see [`kv_file::load`]).
    pub fn load_cache(self: &Arc<Self>, path: &Path) -> Result<CacheHandle> {
        let target = kv_file::Target {
            model: self.model_id()?,
            layout: self.runner.cache_layout(),
            n_ctx: self.runner.n_ctx(),
            n_vocab: self.runner.n_vocab(),
        };
        let cache = kv_file::load(path, &target, || self.runner.new_cache())?;
        Ok(CacheHandle { session: OnceLock::from(self.clone()), cache: Mutex::new(Some(cache)) })
    }

    /// The model as a saved cache names it.
    fn model_id(&self) -> Result<ModelId> {
        let model = self.runner.model();
        Ok(ModelId {
            fingerprint: model.fingerprint()?,
            name: model.display_name(),
            architecture: self.runner.architecture().to_string(),
        })
    }

    pub fn new_pool(self: &Arc<Self>) -> Result<PoolHandle> {
        Ok(PoolHandle { session: self.clone(), pool: Mutex::new(self.runner.new_pool()?) })
    }

    fn check_owner(&self, owner: &Arc<Inference>, what: &str) -> Result<()> {
        if std::ptr::eq(Arc::as_ptr(owner), self) {
            Ok(())
        } else {
            Err(Error::Argument(format!("the {what} belongs to another Lugh::Inference object")))
        }
    }

    /// Checks that `cache` is this session's; a standalone cache of the
    /// model's shape becomes this session's (re-made with its layout).
    fn own_cache(self: &Arc<Self>, cache: &CacheHandle, what: &str) -> Result<()> {
        if let Some(owner) = cache.session.get() {
            return self.check_owner(owner, what);
        }
        let mut slot = lock(&cache.cache);
        // Another thread may have bound it while we waited.
        if let Some(owner) = cache.session.get() {
            return self.check_owner(owner, what);
        }
        let kv = slot.as_ref().ok_or_else(|| Error::Argument(LOST.into()))?;
        let mine = self.runner.new_cache()?;
        let (have, want) = (kv.layout(), mine.layout());
        let shape = |l: &CacheLayout, n_ctx: usize| {
            format!("n_layer {}, n_ctx {n_ctx}, n_head_kv {}, head_dim {}", l.n_layer, l.n_head_kv, l.head_dim_k)
        };
        if have.n_layer != want.n_layer
            || have.n_head_kv != want.n_head_kv
            || have.head_dim_k != want.head_dim_k
            || have.head_dim_v != want.head_dim_v
            || kv.n_ctx() != mine.n_ctx()
        {
            return Err(Error::Argument(format!(
                "the {what} has {}, but this session needs {}",
                shape(have, kv.n_ctx()),
                shape(want, mine.n_ctx())
            )));
        }
        *slot = Some(mine);
        let _ = cache.session.set(self.clone());
        Ok(())
    }

    /// `n` empty caches for one call, from the scratch stack or new.
    fn take_scratch(&self, n: usize) -> Result<Vec<KvCache>> {
        let mut caches: Vec<KvCache> = {
            let mut stack = lock(&self.scratch_caches);
            let keep = stack.len().saturating_sub(n);
            stack.drain(keep..).collect()
        };
        for c in caches.iter_mut() {
            c.clear();
        }
        while caches.len() < n {
            caches.push(self.runner.new_cache()?);
        }
        Ok(caches)
    }

    fn return_scratch(&self, caches: Vec<KvCache>) {
        let mut stack = lock(&self.scratch_caches);
        let room = MAX_SCRATCH_CACHES.saturating_sub(stack.len());
        stack.extend(caches.into_iter().take(room));
    }

    /// Runs `body` with the runner and an empty scratch cache (the caller's
    /// caches are not touched), which goes back to the stack afterwards.
    pub(crate) fn with_empty_cache<T>(&self, body: impl FnOnce(&Runner, &mut KvCache) -> Result<T>) -> Result<T> {
        let mut scratch = self.take_scratch(1)?;
        let result = body(&self.runner, &mut scratch[0]);
        self.return_scratch(scratch);
        result.map_err(without_cache)
    }

    /// The memory pool a call brings, locked, after checking it is this
    /// session's.
    fn lock_pool<'a>(&self, pool: Option<&'a PoolHandle>) -> Result<Option<MutexGuard<'a, ComputePool>>> {
        if let Some(p) = pool {
            self.check_owner(&p.session, "memory pool")?;
        }
        Ok(pool.map(|p| lock(&p.pool)))
    }

    /// A forward pass over `tokens`, appending to `cache` (or to a fresh
    /// scratch cache, so the call sees only these tokens).
    pub fn forward(
        self: &Arc<Self>,
        tokens: &[i32],
        cache: Option<&CacheHandle>,
        pool: Option<&PoolHandle>,
        output: Output,
        ov: &Overrides,
    ) -> Result<Vec<Vec<f32>>> {
        let mut pool_guard = self.lock_pool(pool)?;
        let pool_ref = pool_guard.as_deref_mut();
        let started = std::time::Instant::now();
        let result = match cache {
            Some(c) => {
                self.own_cache(c, "KV cache")?;
                c.with(|kv| self.runner.forward(kv, tokens, output, pool_ref, ov))
            }
            None => {
                let mut scratch = self.take_scratch(1)?;
                let result = self.runner.forward(&mut scratch[0], tokens, output, pool_ref, ov);
                self.return_scratch(scratch);
                result.map_err(without_cache)
            }
        };
        crate::debug_log!(
            "forward of {} tokens{} in {:.2} ms",
            tokens.len(),
            if cache.is_some() { " with a cache" } else { "" },
            started.elapsed().as_secs_f64() * 1e3
        );
        result
    }

    /// Several sequences in one graph per step; with `caches`, each sequence
    /// appends to its own cache (one per sequence, no cache twice).
    pub fn forward_batch(
        self: &Arc<Self>,
        sequences: &[Vec<i32>],
        caches: Option<&[Arc<CacheHandle>]>,
        pool: Option<&PoolHandle>,
        ov: &Overrides,
    ) -> Result<Vec<Vec<f32>>> {
        let mut pool_guard = self.lock_pool(pool)?;
        let pool_ref = pool_guard.as_deref_mut();
        let Some(handles) = caches else {
            let mut scratch = self.take_scratch(sequences.len())?;
            let result = self.runner.forward_batch(&mut scratch, sequences, pool_ref, ov);
            self.return_scratch(scratch);
            return result.map_err(without_cache);
        };
        for (i, h) in handles.iter().enumerate() {
            self.own_cache(h, &format!("KV cache {i}"))?;
            if let Some(j) = handles[..i].iter().position(|o| Arc::ptr_eq(o, h)) {
                return Err(Error::Argument(format!("caches {j} and {i} are the same KV cache")));
            }
        }
        // forward_batch wants the caches side by side: move them out of their
        // slots for the call, and back afterwards.
        let mut guards: Vec<_> = handles.iter().map(|h| lock(&h.cache)).collect();
        if guards.iter().any(|g| g.is_none()) {
            return Err(Error::Argument(LOST.into()));
        }
        let mut moved: Vec<KvCache> = guards.iter_mut().map(|g| g.take().expect("checked above")).collect();
        let result = self.runner.forward_batch(&mut moved, sequences, pool_ref, ov);
        for (g, c) in guards.iter_mut().zip(moved) {
            **g = Some(c);
        }
        result
    }

    /// Generates from `prompt`, on `cache` (keeping the prefix of the prompt
    /// it already holds, see [`generation::generate`]) or on a fresh scratch
    /// cache. The cache is out of its slot while the callbacks run, so a
    /// callback that uses it gets an error rather than a deadlock.
    pub fn generate<E: From<Error>>(
        self: &Arc<Self>,
        prompt: &[i32],
        cache: Option<&CacheHandle>,
        options: &GenerateOptions,
        on_progress: impl FnMut(usize, usize) -> std::result::Result<bool, E>,
        on_token: impl FnMut(&Step) -> std::result::Result<bool, E>,
        on_end: impl FnMut(&str) -> std::result::Result<(), E>,
    ) -> std::result::Result<Generation, E> {
        // The model's own end-of-generation tokens, stop strings and text
        // need the vocabulary; a user's eos_token alone does not, so a model
        // without a usable one can still generate ids.
        let vocab = match self.runner.model().vocab() {
            Ok(v) => Some(v),
            Err(_) if options.eos_token.is_some() && options.stop.is_empty() && !options.need_text => None,
            Err(e) => return Err(e.into()),
        };
        let mut kv = match cache {
            Some(c) => {
                self.own_cache(c, "KV cache")?;
                lock(&c.cache).take().ok_or_else(|| Error::Argument(BUSY.into()))?
            }
            None => self.take_scratch(1)?.pop().expect("one cache"),
        };
        let mut pool = self.runner.take_default_pool()?;
        let mut source =
            CachedRunner { runner: &self.runner, cache: &mut kv, pool: Some(&mut pool), overrides: &options.overrides };
        let text = vocab.as_deref().map(|v| v as &dyn TokenText);
        let result = generation::generate(&mut source, text, prompt, options, on_progress, on_token, on_end);
        if let Ok(g) = &result {
            crate::debug_log!(
                "generated {} tokens ({}): prompt {} tokens ({} reused) in {:.1} ms, generation {:.1} ms",
                g.tokens.len(),
                g.stop_reason.name(),
                g.n_prompt,
                g.n_reused,
                g.prompt_seconds * 1e3,
                g.generate_seconds * 1e3
            );
        }
        self.runner.put_default_pool(pool);
        match cache {
            Some(c) => *lock(&c.cache) = Some(kv),
            None => self.return_scratch(vec![kv]),
        }
        result
    }
}

/// A call without a cache runs in a scratch one the caller never saw: its
/// overflow is the session's context that is too small.
fn without_cache(e: Error) -> Error {
    match e {
        Error::KvOverflow { needed, capacity } => Error::Argument(format!(
            "{needed} tokens do not fit in the session's context of {capacity} positions (create the session with \
             a larger n_ctx)"
        )),
        other => other,
    }
}
