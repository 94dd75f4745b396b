//! LoRA adapters: low-rank A/B pairs added to a model's projections at run
//! time (`W·x + scale·B·(A·x)`, scale = adapter scale · alpha / rank), as
//! llama.cpp's `llama_adapter_lora` and `build_lora_mm` do. The base weights
//! are never touched, so sessions with and without an adapter share them.
//!
//! Two formats: llama.cpp's GGUF adapters (`general.type = adapter`,
//! `adapter.type = lora`, `adapter.lora.alpha`, `NAME.weight.lora_a/_b`), and
//! PEFT's `adapter_model.safetensors` with the `adapter_config.json` beside
//! it, whose Hugging Face module names are mapped to GGUF names the way
//! llama.cpp's convert_lora_to_gguf.py maps them.
use crate::engine::ggml::ops::{Ctx, Tensor, GGML_TYPE_F16, GGML_TYPE_F32};
use crate::engine::ggml::runtime::{self as rt, Buffer, BufferType, Device};
use crate::engine::model::arch::{spec_for, Rope};
use crate::engine::model::gguf::{Gguf, Value};
use crate::engine::model::safetensors::{Dtype, SafeTensors};
use crate::engine::model::weights::ModelWeights;
use crate::engine::model::Model;
use crate::engine::{Error, Result};
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

const GGML_TYPE_Q8_0: c_int = 8;
const GGML_TYPE_BF16: c_int = 30;

/// Where an adapter came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Gguf,
    SafeTensors,
    /// Made by `create`, to be trained.
    Trainable,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Gguf => "gguf",
            Format::SafeTensors => "safetensors",
            Format::Trainable => "trainable",
        }
    }
}

/// The low-rank pair of one base weight.
pub struct LoraPair {
    /// [n_in, rank] (for token_embd: [rank, n_vocab], as llama.cpp).
    pub a: Tensor,
    /// [rank, n_out] (for token_embd: [rank, n_embd]).
    pub b: Tensor,
    /// 0: the adapter scale alone.
    pub alpha: f32,
}

impl LoraPair {
    pub fn rank(&self) -> usize {
        self.b.ne()[0] as usize
    }
    /// The factor on B·(A·x) for an adapter used at `adapter_scale`.
    pub fn scale(&self, adapter_scale: f32) -> f32 {
        if self.alpha != 0.0 {
            adapter_scale * self.alpha / self.rank() as f32
        } else {
            adapter_scale
        }
    }
}

/// A loaded adapter, for one model.
pub struct LoraAdapter {
    id: u64,
    pub path: PathBuf,
    pub format: Format,
    /// The adapter's alpha (GGUF `adapter.lora.alpha`, PEFT `lora_alpha`).
    pub alpha: f32,
    /// The default scale of its use (get/set).
    scale: AtomicU32,
    /// Base weight name → pair.
    pairs: HashMap<String, LoraPair>,
    /// The identity of the model it was checked against.
    model_fingerprint: u64,
    model_path: PathBuf,
    storage: Storage,
    /// Its copies beside the weights of sessions over devices (see
    /// `beside`; None: none needed there), kept while those weights are.
    copies: Mutex<Vec<Beside>>,
}

/// For one placed weights: the adapter's copy beside them, or None when
/// its pairs are already there.
type Beside = (Weak<ModelWeights>, Option<Arc<LoraAdapter>>);

/// Where an adapter's tensors live.
enum Storage {
    /// Read from a file, or copied beside a session's weights: in these
    /// buffers (one per buffer type), described by their contexts.
    Buffers { _buffers: Vec<Buffer>, _contexts: Vec<Ctx> },
    /// Made to be trained (`train::lora`): the pairs are tensors of the
    /// training layer's variables, which `owner` holds (and keeps alive).
    Owned { owner: Box<dyn Any + Send + Sync>, architecture: String },
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One tensor of a pair, read and checked, before it has a place.
struct Staged {
    ty: c_int,
    ne: [i64; 2],
    data: Vec<u8>,
}

/// A pair before placing: A, B, and its alpha.
struct StagedPair {
    a: Staged,
    b: Staged,
    alpha: f32,
}

impl LoraAdapter {
    /// Loads the adapter at `path` for `model`: .gguf, or .safetensors with
    /// adapter_config.json beside it (other files: by their first bytes).
    /// Every mismatch with the model is an error naming the tensor.
    pub fn load(path: &Path, model: &Model) -> Result<LoraAdapter> {
        let format = detect_format(path)?;
        let (alpha, staged) = match format {
            Format::Gguf => read_gguf(path, model)?,
            Format::SafeTensors | Format::Trainable => read_safetensors(path, model)?,
        };
        if staged.is_empty() {
            return Err(invalid(path, "it has no LoRA tensor pairs".into()));
        }
        let device = Device::by_backend_name("CPU").ok_or_else(|| Error::Backend("no CPU device".into()))?;
        let PairBuffer { buffer, ctx, pairs } = allocate(device.buffer_type(), staged.into_iter().collect())?;
        Ok(LoraAdapter {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            format,
            alpha,
            scale: AtomicU32::new(1.0f32.to_bits()),
            pairs: pairs.into_iter().collect(),
            model_fingerprint: model.fingerprint()?,
            model_path: model.path().clone(),
            storage: Storage::Buffers { _buffers: vec![buffer], _contexts: vec![ctx] },
            copies: Mutex::default(),
        })
    }

    /// An adapter over `pairs` whose tensors `owner` holds: the training
    /// layer's variables (`train::lora`), which change under the optimizer.
    pub(crate) fn owned(
        model: &Model,
        alpha: f32,
        pairs: HashMap<String, LoraPair>,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<LoraAdapter> {
        Ok(LoraAdapter {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: PathBuf::new(),
            format: Format::Trainable,
            alpha,
            scale: AtomicU32::new(1.0f32.to_bits()),
            pairs,
            model_fingerprint: model.fingerprint()?,
            model_path: model.path().clone(),
            storage: Storage::Owned { owner, architecture: model.architecture().unwrap_or("").to_string() },
            copies: Mutex::default(),
        })
    }

    /// What holds the pairs of an adapter made by `owned`, and the
    /// architecture it was made for; None for a loaded one.
    pub(crate) fn owner(&self) -> Option<(&(dyn Any + Send + Sync), &str)> {
        match &self.storage {
            Storage::Owned { owner, architecture } => Some((owner.as_ref(), architecture)),
            Storage::Buffers { .. } => None,
        }
    }

    /// A number no other adapter of this process has.
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn scale(&self) -> f32 {
        f32::from_bits(self.scale.load(Ordering::Relaxed))
    }
    pub fn set_scale(&self, scale: f32) -> Result<()> {
        if !scale.is_finite() {
            return Err(Error::Argument(format!("a LoRA scale must be a finite number, got {scale}")));
        }
        self.scale.store(scale.to_bits(), Ordering::Relaxed);
        Ok(())
    }
    pub fn n_weights(&self) -> usize {
        self.pairs.len()
    }
    /// The base weights it adapts, sorted.
    pub fn weight_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.pairs.keys().cloned().collect();
        names.sort();
        names
    }
    /// The pair for the base weight named `name`.
    pub fn get(&self, name: &str) -> Option<&LoraPair> {
        self.pairs.get(name)
    }

    /// This adapter with each pair beside the base weight it adapts in
    /// `weights`, as llama.cpp places adapters: in the weight's buffer type
    /// (a device's memory, or its pinned host memory), or the CPU's plain
    /// one for a weight in a repacked layout. Itself when that is where
    /// every pair already is (the CPU), and for an adapter being trained,
    /// whose values change under the optimizer. What it gives for each
    /// placed weights is worked out (and copied) once and kept while both
    /// live: every call of a session asks again.
    pub fn beside(self: &Arc<Self>, weights: &Arc<ModelWeights>, cpu: Device) -> Result<Arc<LoraAdapter>> {
        if matches!(self.storage, Storage::Owned { .. }) {
            return Ok(Arc::clone(self));
        }
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        copies.retain(|(w, _)| w.strong_count() > 0);
        // a Weak keeps its allocation: no other weights can have that address
        if let Some((_, copy)) = copies.iter().find(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(weights))) {
            return Ok(copy.as_ref().map_or_else(|| Arc::clone(self), Arc::clone));
        }
        let plain = cpu.buffer_type();
        let repacked = cpu.extra_buffer_types();
        let buft_of = |name: &str| match weights.buffer_type_of(name) {
            Some(b) if !repacked.contains(&b) => b,
            _ => plain,
        };
        if self.pairs.keys().all(|name| buft_of(name) == plain) {
            copies.push((Arc::downgrade(weights), None));
            return Ok(Arc::clone(self));
        }
        let mut groups: Vec<(BufferType, Vec<(String, StagedPair)>)> = Vec::new();
        for (name, pair) in &self.pairs {
            let read = |t: Tensor| {
                let mut data = vec![0u8; t.nbytes()];
                rt::tensor_read(t, 0, &mut data);
                let ne = t.ne();
                Staged { ty: t.type_id(), ne: [ne[0], ne[1]], data }
            };
            let staged = StagedPair { a: read(pair.a), b: read(pair.b), alpha: pair.alpha };
            let buft = buft_of(name);
            match groups.iter_mut().find(|(b, _)| *b == buft) {
                Some((_, members)) => members.push((name.clone(), staged)),
                None => groups.push((buft, vec![(name.clone(), staged)])),
            }
        }
        let (mut buffers, mut contexts, mut pairs) = (Vec::new(), Vec::new(), HashMap::with_capacity(self.pairs.len()));
        for (buft, members) in groups {
            let placed = allocate(buft, members)?;
            buffers.push(placed.buffer);
            contexts.push(placed.ctx);
            pairs.extend(placed.pairs);
        }
        crate::debug_log!(
            "LoRA adapter '{}': {} pairs copied beside their weights ({})",
            self.path.display(),
            pairs.len(),
            buffers.iter().map(|b| format!("{} bytes", b.size())).collect::<Vec<_>>().join(", ")
        );
        let copy = Arc::new(LoraAdapter {
            id: self.id,
            path: self.path.clone(),
            format: self.format,
            alpha: self.alpha,
            scale: AtomicU32::new(self.scale.load(Ordering::Relaxed)),
            pairs,
            model_fingerprint: self.model_fingerprint,
            model_path: self.model_path.clone(),
            storage: Storage::Buffers { _buffers: buffers, _contexts: contexts },
            copies: Mutex::default(),
        });
        copies.push((Arc::downgrade(weights), Some(Arc::clone(&copy))));
        Ok(copy)
    }

    /// Refuses a session on another model than the adapter was made for.
    pub fn check_model(&self, model: &Model) -> Result<()> {
        if model.fingerprint()? != self.model_fingerprint {
            return Err(Error::Argument(format!(
                "the LoRA adapter '{}' was loaded for the model '{}', not '{}'",
                self.path.display(),
                self.model_path.display(),
                model.path().display()
            )));
        }
        Ok(())
    }
}

/// Pairs in a buffer of their own, with the context describing them.
struct PairBuffer {
    buffer: Buffer,
    ctx: Ctx,
    /// (base weight name, pair)
    pairs: Vec<(String, LoraPair)>,
}

/// New tensors for `staged` (named NAME.lora_a/_b), in one new buffer of
/// type `buft`, filled with their values.
fn allocate(buft: BufferType, staged: Vec<(String, StagedPair)>) -> Result<PairBuffer> {
    let ctx = Ctx::new(2 * staged.len(), 0)
        .ok_or_else(|| Error::Ggml("cannot create a context for the adapter's tensors".into()))?;
    let mut tensors = Vec::with_capacity(staged.len());
    for (name, pair) in &staged {
        let a = ctx.new_tensor(pair.a.ty, &pair.a.ne);
        a.set_name(&format!("{name}.lora_a"));
        let b = ctx.new_tensor(pair.b.ty, &pair.b.ne);
        b.set_name(&format!("{name}.lora_b"));
        tensors.push((a, b));
    }
    let buffer = Buffer::alloc_ctx_tensors(&ctx, buft)
        .ok_or_else(|| Error::Ggml(format!("cannot allocate a {} buffer for the adapter's tensors", buft.name())))?;
    let mut pairs = Vec::with_capacity(staged.len());
    for ((name, pair), (a, b)) in staged.into_iter().zip(tensors) {
        rt::tensor_set_bytes(a, &pair.a.data);
        rt::tensor_set_bytes(b, &pair.b.data);
        pairs.push((name, LoraPair { a, b, alpha: pair.alpha }));
    }
    Ok(PairBuffer { buffer, ctx, pairs })
}

fn invalid(path: &Path, what: String) -> Error {
    Error::Invalid { path: path.to_path_buf(), what }
}

fn detect_format(path: &Path) -> Result<Format> {
    let ext = path.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("gguf") => return Ok(Format::Gguf),
        Some("safetensors") => return Ok(Format::SafeTensors),
        _ => {}
    }
    let unrecognized =
        || invalid(path, "unrecognized adapter format (expected a .gguf or a .safetensors file)".to_string());
    let mut magic = [0u8; 4];
    let mut file = File::open(path).map_err(|_| unrecognized())?;
    if file.read_exact(&mut magic).is_ok() && &magic == b"GGUF" {
        return Ok(Format::Gguf);
    }
    Err(unrecognized())
}

/// The ggml types an adapter tensor may have (those llama.cpp's converter
/// writes, each with a CPU matmul kernel).
fn check_type(path: &Path, name: &str, ty: c_int) -> Result<()> {
    match ty {
        GGML_TYPE_F32 | GGML_TYPE_F16 | GGML_TYPE_BF16 | GGML_TYPE_Q8_0 => Ok(()),
        _ => Err(invalid(
            path,
            format!(
                "tensor '{name}' has type {} (supported: f32, f16, bf16, q8_0)",
                crate::engine::ggml::sys::type_traits(ty as u32).map_or_else(|| ty.to_string(), |t| t.name.to_string())
            ),
        )),
    }
}

/// Checks a pair's shapes against the base weight `name` of `model`, as
/// llama.cpp's loader does, naming the tensor.
fn check_pair(path: &Path, model: &Model, name: &str, a: &[i64; 2], b: &[i64; 2]) -> Result<()> {
    let base = model.gguf.tensor(name).ok_or_else(|| {
        invalid(path, format!("LoRA tensor '{name}' does not exist in the base model (is it the adapter's model?)"))
    })?;
    if base.shape.len() != 2 {
        return Err(invalid(
            path,
            format!("LoRA on '{name}' ({}-dimensional, e.g. experts) is not supported", base.shape.len()),
        ));
    }
    let (n_in, n_out) = (base.shape[0] as i64, base.shape[1] as i64);
    let shapes = format!("lora_a {a:?}, lora_b {b:?}, base weight [{n_in}, {n_out}]");
    if name == "token_embd.weight" {
        // A and B as llama.cpp's build_inp_embd uses them (A's rows are
        // looked up by token)
        if b[1] != n_in || a[1] != n_out || a[0] != b[0] {
            return Err(invalid(path, format!("tensor '{name}' has the wrong shape ({shapes})")));
        }
    } else if a[0] != n_in || b[1] != n_out {
        return Err(invalid(path, format!("tensor '{name}' has the wrong shape ({shapes})")));
    } else if a[1] != b[0] {
        return Err(invalid(path, format!("tensor '{name}': the ranks of lora_a and lora_b differ ({shapes})")));
    }
    if b[0] < 1 {
        return Err(invalid(path, format!("tensor '{name}' has rank 0")));
    }
    Ok(())
}

fn read_gguf(path: &Path, model: &Model) -> Result<(f32, BTreeMap<String, StagedPair>)> {
    let g = Gguf::open(path)?;
    let key_str = |k: &str| g.get_str(k).unwrap_or("");
    if key_str("general.type") != "adapter" {
        return Err(invalid(path, format!("general.type is '{}', not 'adapter'", key_str("general.type"))));
    }
    if key_str("adapter.type") != "lora" {
        return Err(invalid(path, format!("adapter.type is '{}', not 'lora'", key_str("adapter.type"))));
    }
    let arch = model.architecture().unwrap_or("");
    if key_str("general.architecture") != arch {
        return Err(invalid(
            path,
            format!("the adapter is for architecture '{}', the model is '{arch}'", key_str("general.architecture")),
        ));
    }
    let alpha = match g.get("adapter.lora.alpha") {
        None => 0.0,
        Some(v) => v
            .as_f64()
            .filter(|a| a.is_finite() && *a >= 0.0)
            .ok_or_else(|| invalid(path, format!("adapter.lora.alpha is {v:?}, not a number >= 0")))?
            as f32,
    };
    if matches!(g.get("adapter.alora.invocation_tokens"), Some(Value::Array(_))) {
        return Err(invalid(path, "activated LoRA (adapter.alora.invocation_tokens) is not supported".into()));
    }
    let mut halves: BTreeMap<String, (Option<Staged>, Option<Staged>)> = BTreeMap::new();
    let mut file = File::open(path).map_err(|e| Error::Io { path: path.to_path_buf(), reason: e.to_string() })?;
    for t in &g.tensors {
        let (base, is_a) = if let Some(base) = t.name.strip_suffix(".lora_a") {
            (base, true)
        } else if let Some(base) = t.name.strip_suffix(".lora_b") {
            (base, false)
        } else if t.name.ends_with("_norm.weight") {
            // llama.cpp skips these too (mergekit's norm vectors)
            continue;
        } else {
            return Err(invalid(path, format!("tensor '{}' is not a .lora_a or .lora_b tensor", t.name)));
        };
        check_type(path, &t.name, t.ggml_type as c_int)?;
        if t.shape.len() != 2 {
            return Err(invalid(path, format!("tensor '{}' has {} dimensions, not 2", t.name, t.shape.len())));
        }
        let mut data = vec![0u8; t.size as usize];
        file.seek(SeekFrom::Start(g.data_offset + t.offset))
            .and_then(|_| file.read_exact(&mut data))
            .map_err(|_| Error::Truncated { path: path.to_path_buf(), what: format!("the data of '{}'", t.name) })?;
        let staged = Staged { ty: t.ggml_type as c_int, ne: [t.shape[0] as i64, t.shape[1] as i64], data };
        let slot = halves.entry(base.to_string()).or_default();
        if is_a {
            slot.0 = Some(staged);
        } else {
            slot.1 = Some(staged);
        }
    }
    let mut pairs = BTreeMap::new();
    for (name, halves) in halves {
        let (Some(a), Some(b)) = halves else {
            return Err(invalid(path, format!("the LoRA pair for '{name}' lacks its lora_a or lora_b")));
        };
        check_pair(path, model, &name, &a.ne, &b.ne)?;
        pairs.insert(name, StagedPair { a, b, alpha });
    }
    Ok((alpha, pairs))
}

/// PEFT's adapter_config.json: what Lugh needs of it, and the settings it
/// cannot honour refused.
struct PeftConfig {
    alpha: f32,
    /// None without a config file: each pair's rank is its tensors'.
    rank: Option<usize>,
    rslora: bool,
    targets: Option<Vec<String>>,
    rank_pattern: Vec<(String, usize)>,
    alpha_pattern: Vec<(String, f32)>,
}

/// Lugh 0.12 loaded a bare .safetensors adapter with alpha 1 (its scale on
/// B·A·x is then scale / rank); without adapter_config.json so does Lugh.
const BARE_SAFETENSORS_ALPHA: f32 = 1.0;

fn read_peft_config(path: &Path, adapter: &Path) -> Result<PeftConfig> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(PeftConfig {
                alpha: BARE_SAFETENSORS_ALPHA,
                rank: None,
                rslora: false,
                targets: None,
                rank_pattern: Vec::new(),
                alpha_pattern: Vec::new(),
            })
        }
        Err(e) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                reason: format!("{e} (the adapter_config.json beside '{}')", adapter.display()),
            })
        }
    };
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| invalid(path, format!("it is not valid JSON ({e})")))?;
    let number = |key: &str| json.get(key).and_then(|v| v.as_f64());
    let alpha = number("lora_alpha")
        .filter(|a| a.is_finite() && *a > 0.0)
        .ok_or_else(|| invalid(path, "lora_alpha is missing or not a number > 0".into()))? as f32;
    let rank = json
        .get("r")
        .and_then(|v| v.as_u64())
        .filter(|&r| r > 0)
        .ok_or_else(|| invalid(path, "r (the rank) is missing or not an integer > 0".into()))? as usize;
    let flag = |key: &str| json.get(key).and_then(|v| v.as_bool()).unwrap_or(false);
    for (key, what) in [("use_dora", "DoRA (use_dora)"), ("fan_in_fan_out", "fan_in_fan_out (Conv1D weights)")] {
        if flag(key) {
            return Err(invalid(path, format!("{what} is not supported")));
        }
    }
    if let Some(bias) = json.get("bias").and_then(|v| v.as_str()).filter(|b| *b != "none") {
        return Err(invalid(path, format!("bias '{bias}' is not supported (only 'none')")));
    }
    if json.get("modules_to_save").and_then(|v| v.as_array()).is_some_and(|a| !a.is_empty()) {
        return Err(invalid(path, "modules_to_save (fully trained modules) is not supported".into()));
    }
    if let Some(t) = json.get("peft_type").and_then(|v| v.as_str()).filter(|t| *t != "LORA") {
        return Err(invalid(path, format!("peft_type '{t}' is not LORA")));
    }
    let targets = match json.get("target_modules") {
        Some(serde_json::Value::Array(list)) => {
            Some(list.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        }
        _ => None,
    };
    let pattern = |key: &str| -> Vec<(String, f64)> {
        json.get(key)
            .and_then(|v| v.as_object())
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
            .unwrap_or_default()
    };
    Ok(PeftConfig {
        alpha,
        rank: Some(rank),
        rslora: flag("use_rslora"),
        targets,
        rank_pattern: pattern("rank_pattern").into_iter().map(|(k, v)| (k, v as usize)).collect(),
        alpha_pattern: pattern("alpha_pattern").into_iter().map(|(k, v)| (k, v as f32)).collect(),
    })
}

/// PEFT's pattern keys name a module by its full name or a dotted suffix.
fn pattern_matches(key: &str, module: &str) -> bool {
    module == key || module.ends_with(&format!(".{key}"))
}

/// A Hugging Face module name (after `base_model.model.`) as the GGUF
/// weight it becomes, and the leaf name PEFT's target_modules uses.
fn gguf_name(module: &str) -> Option<(String, &str)> {
    let leaf = module.rsplit('.').next()?;
    if module == "model.embed_tokens" {
        return Some(("token_embd.weight".into(), leaf));
    }
    if module == "lm_head" {
        return Some(("output.weight".into(), leaf));
    }
    let rest = module.strip_prefix("model.layers.")?;
    let (layer, sub) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let gguf = match sub {
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.qkv_proj" => "attn_qkv",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate_up_proj" => "ffn_up",
        _ => return None,
    };
    Some((format!("blk.{layer}.{gguf}.weight"), leaf))
}

/// Converts one SafeTensors tensor's bytes to its ggml type.
fn ggml_type(dtype: Dtype) -> c_int {
    match dtype {
        Dtype::F32 => GGML_TYPE_F32,
        Dtype::F16 => GGML_TYPE_F16,
        Dtype::BF16 => GGML_TYPE_BF16,
    }
}

/// The rows of a [rows, cols] row-major matrix of `elem`-byte elements,
/// reordered: the new row i is the old row `from(i)`.
fn reorder_rows(data: &[u8], rows: usize, elem_row: usize, from: impl Fn(usize) -> usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    for i in 0..rows {
        let r = from(i);
        out.extend_from_slice(&data[r * elem_row..(r + 1) * elem_row]);
    }
    out
}

/// A [rows, cols] row-major matrix transposed.
fn transpose(data: &[u8], rows: usize, cols: usize, elem: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let src = (r * cols + c) * elem;
            let dst = (c * rows + r) * elem;
            out[dst..dst + elem].copy_from_slice(&data[src..src + elem]);
        }
    }
    out
}

fn read_safetensors(path: &Path, model: &Model) -> Result<(f32, BTreeMap<String, StagedPair>)> {
    let config_path = path.with_file_name("adapter_config.json");
    let config = read_peft_config(&config_path, path)?;
    let st = SafeTensors::open(path)?;
    let arch = model.architecture().unwrap_or("");
    let spec = spec_for(arch, model.path())?;
    let n_head = model.n_head().unwrap_or(0).max(0) as usize;
    let n_head_kv = model.n_head_kv().unwrap_or(n_head as i64).max(0) as usize;
    let mut halves: BTreeMap<String, (Option<Staged>, Option<Staged>, String)> = BTreeMap::new();
    for e in &st.entries {
        let name = e.name.strip_prefix("base_model.model.").unwrap_or(&e.name);
        let (module, is_a, embedding) = if let Some(m) = name.strip_suffix(".lora_A.weight") {
            (m, true, false)
        } else if let Some(m) = name.strip_suffix(".lora_B.weight") {
            (m, false, false)
        } else if let Some(m) = name.strip_suffix(".lora_embedding_A") {
            (m, true, true)
        } else if let Some(m) = name.strip_suffix(".lora_embedding_B") {
            (m, false, true)
        } else {
            return Err(invalid(path, format!("tensor '{}' is not a LoRA A or B tensor", e.name)));
        };
        let (gguf, leaf) = gguf_name(module).ok_or_else(|| {
            invalid(path, format!("tensor '{}': module '{module}' has no counterpart in a GGUF model", e.name))
        })?;
        if let Some(targets) = &config.targets {
            if !targets.iter().any(|t| pattern_matches(t, module) || t == leaf) {
                return Err(invalid(
                    path,
                    format!("tensor '{}': module '{module}' is not in adapter_config.json's target_modules", e.name),
                ));
            }
        }
        if e.shape.len() != 2 {
            return Err(invalid(path, format!("tensor '{}' has {} dimensions, not 2", e.name, e.shape.len())));
        }
        let (rows, cols) = (e.shape[0], e.shape[1]);
        let mut data = st.read(e)?;
        let elem = e.dtype.size();
        // ggml's ne is the row-major shape reversed
        let mut ne = [cols as i64, rows as i64];
        if embedding && is_a {
            // [rank, n_vocab] → ggml [rank, n_vocab] (rows looked up by token), as convert_lora_to_gguf
            data = transpose(&data, rows, cols, elem);
            ne = [rows as i64, cols as i64];
        }
        if !is_a && spec.rope == Rope::Norm && (leaf == "q_proj" || leaf == "k_proj") {
            // the base weights' rows were permuted from Hugging Face's
            // rotate-half order to ggml's interleaved pairs: B's rows must be too
            let heads = if leaf == "q_proj" { n_head } else { n_head_kv };
            if heads == 0 || rows % (2 * heads) != 0 {
                return Err(invalid(path, format!("tensor '{}': {rows} rows do not split into {heads} heads", e.name)));
            }
            let half = rows / heads / 2;
            data = reorder_rows(&data, rows, cols * elem, |i| {
                let (h, within) = (i / (2 * half), i % (2 * half));
                h * 2 * half + (within % 2) * half + within / 2
            });
        }
        let staged = Staged { ty: ggml_type(e.dtype), ne, data };
        let slot = halves.entry(gguf).or_insert_with(|| (None, None, module.to_string()));
        if is_a {
            slot.0 = Some(staged);
        } else {
            slot.1 = Some(staged);
        }
    }
    let mut pairs = BTreeMap::new();
    for (name, (a, b, module)) in halves {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(invalid(path, format!("the LoRA pair of module '{module}' lacks its A or B tensor")));
        };
        check_pair(path, model, &name, &a.ne, &b.ne)?;
        let configured = config.rank_pattern.iter().find(|(k, _)| pattern_matches(k, &module)).map(|p| p.1);
        let rank = configured.or(config.rank).unwrap_or(b.ne[0] as usize);
        if b.ne[0] as usize != rank {
            return Err(invalid(
                path,
                format!("module '{module}' has rank {}, but adapter_config.json says r = {rank}", b.ne[0]),
            ));
        }
        let alpha =
            config.alpha_pattern.iter().find(|(k, _)| pattern_matches(k, &module)).map_or(config.alpha, |p| p.1);
        // rsLoRA scales by alpha / sqrt(r): as an alpha over r, alpha·sqrt(r)
        let alpha = if config.rslora { alpha * (rank as f32).sqrt() } else { alpha };
        pairs.insert(name, StagedPair { a, b, alpha });
    }
    Ok((config.alpha, pairs))
}

/// The adapters of one call, each with the scale it is used at.
pub type AdapterUses = Vec<(Arc<LoraAdapter>, f32)>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_map_as_the_converter_maps_them() {
        assert_eq!(gguf_name("model.layers.3.self_attn.q_proj"), Some(("blk.3.attn_q.weight".into(), "q_proj")));
        assert_eq!(gguf_name("model.layers.12.mlp.down_proj"), Some(("blk.12.ffn_down.weight".into(), "down_proj")));
        assert_eq!(gguf_name("model.embed_tokens"), Some(("token_embd.weight".into(), "embed_tokens")));
        assert_eq!(gguf_name("lm_head"), Some(("output.weight".into(), "lm_head")));
        assert_eq!(gguf_name("model.layers.x.mlp.up_proj"), None);
        assert_eq!(gguf_name("model.layers.1.mlp.experts.0.up_proj"), None);
        assert!(pattern_matches("q_proj", "model.layers.0.self_attn.q_proj"));
        assert!(!pattern_matches("q_proj", "model.layers.0.self_attn.qq_proj"));
    }

    #[test]
    fn q_and_k_rows_go_from_rotate_half_to_interleaved() {
        // one head of 4 rows of 1 byte: HF (x0 x1 | y0 y1) → ggml (x0 y0 x1 y1)
        let rows = [0u8, 1, 2, 3];
        let half = 2;
        let out = reorder_rows(&rows, 4, 1, |i| {
            let (h, within) = (i / (2 * half), i % (2 * half));
            h * 2 * half + (within % 2) * half + within / 2
        });
        assert_eq!(out, [0, 2, 1, 3]);
        assert_eq!(transpose(&[1, 2, 3, 4, 5, 6], 2, 3, 1), [1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn pair_scale_is_alpha_over_rank() {
        let p = LoraPair { a: Tensor(std::ptr::null_mut()), b: Tensor(std::ptr::null_mut()), alpha: 0.0 };
        assert_eq!(p.scale(0.5), 0.5);
    }
}
