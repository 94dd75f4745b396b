//! A session's settings: what the caller asks for when making it
//! ([`InferenceOptions`]) and for one call ([`Overrides`]), and how the
//! devices and the flash-attention setting are chosen from them.
use crate::engine::forward::lora::AdapterUses;
use crate::engine::ggml::ops::{Ctx, GraphCtx, GGML_TYPE_F16, GGML_TYPE_F32};
use crate::engine::ggml::placement::{Placement, SplitRequest};
use crate::engine::ggml::runtime::Device;
use crate::engine::ggml::sys;
use crate::engine::model::arch::HParams;
use crate::engine::model::rope::RopeRequest;
use crate::engine::{Error, Result};

/// The most positions a session's context (and a batch) may hold.
pub const MAX_CTX: usize = 1 << 24;

/// Flash attention: `Auto` resolves as llama.cpp does (on for the CPU backend
/// when the model's head sizes allow it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashAttn {
    Auto,
    Enabled,
    Disabled,
}

/// Which logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Only the last position: one vector of n_vocab.
    Last,
    /// Every position of the new tokens.
    All,
}

/// Settings of a session, as given by the caller (None = the default).
#[derive(Clone, Debug, Default)]
pub struct InferenceOptions {
    /// A backend name from the registry; None or "auto" = the best available.
    pub backend: Option<String>,
    /// Default: the number of physical cores.
    pub n_threads: Option<usize>,
    /// Default: min(model's training context, 4096).
    pub n_ctx: Option<usize>,
    /// Default: Auto.
    pub flash_attn: Option<FlashAttn>,
    /// Default: 512 (prompt tokens per graph evaluation).
    pub n_batch: Option<usize>,
    /// RoPE scaling over the model's own (None: the model's).
    pub rope: Option<RopeRequest>,
    /// How the layers are shared out over the devices that take layers.
    pub split: SplitRequest,
    /// ggml RPC servers ("host:port") whose devices take layers.
    pub rpc: Vec<String>,
    /// Seconds an RPC server may take to answer before it counts as gone.
    pub rpc_timeout: Option<f64>,
    /// The types the KV cache stores keys and values in (None: f16).
    pub type_k: Option<KvType>,
    pub type_v: Option<KvType>,
}

/// A type the KV cache may store keys or values in: llama.cpp's
/// `--cache-type-k/-v` choices (common/arg.cpp's list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvType(i32);

impl KvType {
    /// The names, ggml's, in llama.cpp's order.
    pub const NAMES: &'static [&'static str] =
        &["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"];
    pub const F16: KvType = KvType(GGML_TYPE_F16);

    /// The type called `name` (ggml's name, any case), or an error listing them.
    pub fn parse(name: &str, what: &str) -> Result<KvType> {
        let lower = name.to_ascii_lowercase();
        Self::NAMES
            .iter()
            .find(|&&n| n == lower)
            .and_then(|n| (0..sys::GGML_TYPE_COUNT).find(|&t| sys::type_traits(t).is_some_and(|tt| tt.name == *n)))
            .map(|t| KvType(t as i32))
            .ok_or_else(|| Error::Argument(format!("{what} must be one of {}, got '{name}'", Self::NAMES.join(", "))))
    }

    pub fn ggml_type(self) -> i32 {
        self.0
    }

    pub fn name(self) -> &'static str {
        sys::type_traits(self.0 as u32).map_or("?", |t| t.name)
    }

    /// Values in blocks of more than one (the quantized types).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    pub fn block_size(self) -> usize {
        sys::type_traits(self.0 as u32).map_or(1, |t| t.block_size as usize)
    }
}

/// What one call changes of its session's settings: the RoPE settings and
/// the LoRA adapters (each at a scale).
#[derive(Clone, Default)]
pub struct Overrides {
    pub rope: Option<RopeRequest>,
    pub adapters: AdapterUses,
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let adapters: Vec<_> = self.adapters.iter().map(|(a, s)| (a.path.display().to_string(), *s)).collect();
        f.debug_struct("Overrides").field("rope", &self.rope).field("adapters", &adapters).finish()
    }
}

impl Overrides {
    /// The session's settings unchanged.
    pub const NONE: Overrides = Overrides { rope: None, adapters: Vec::new() };

    pub fn check(&self) -> Result<()> {
        self.rope.as_ref().map_or(Ok(()), RopeRequest::check)
    }
}

/// The session's backend name and devices: `backend` picks the local ones
/// (auto: every GPU and accelerator, as llama.cpp uses all it finds; a name:
/// that backend's devices), the RPC servers' devices come first in the
/// split, and the layers are shared out as `options.split` says.
pub(crate) fn choose_devices(
    options: &InferenceOptions,
    n_layer: usize,
    rpc: Option<&crate::engine::ggml::rpc::Servers>,
) -> Result<(String, Placement)> {
    let available = crate::engine::ggml::backend::available();
    let list = || available.iter().map(|b| b.name.clone()).collect::<Vec<_>>().join(", ");
    let backend_name = match options.backend.as_deref() {
        None | Some("auto") => crate::engine::ggml::backend::best()
            .map(|b| b.name)
            .ok_or_else(|| Error::Backend("no compute backend is available".into()))?,
        Some(name) => crate::engine::ggml::backend::find(name)
            .map(|b| b.name)
            .ok_or_else(|| Error::Backend(format!("backend '{name}' is not available (available: {})", list())))?,
    };
    let cpu = Device::by_backend_name("CPU").ok_or_else(|| Error::Backend("ggml's CPU backend is missing".into()))?;
    let auto = matches!(options.backend.as_deref(), None | Some("auto"));
    let local: Vec<Device> = Device::all()
        .into_iter()
        .filter(|d| !d.is_cpu() && (auto || d.backend_name().eq_ignore_ascii_case(&backend_name)))
        .collect();
    let mut devices: Vec<Device> = rpc.map(|r| r.devices().to_vec()).unwrap_or_default();
    devices.extend(local.iter().filter(|d| d.is_gpu()));
    let accels: Vec<Device> = local.into_iter().filter(|d| d.is_accel()).collect();
    let placement = if devices.is_empty() && accels.is_empty() {
        if let Some(main) = options.split.main_device {
            return Err(Error::Argument(format!(
                "main_device {main} is out of range: the session has no device that takes layers (backend '{backend_name}')"
            )));
        }
        if options.split.tensor_split.is_some() {
            return Err(Error::Argument(format!(
                "tensor_split needs devices that take layers (GPUs or RPC servers); backend '{backend_name}' has none"
            )));
        }
        Placement::cpu_only(cpu, n_layer, true)
    } else {
        Placement::split(cpu, devices, accels, n_layer, &options.split, true)?
    };
    Ok((backend_name, placement))
}

/// llama.cpp's flash-attention auto setting: on when the device runs the
/// flash-attention op for the model's head sizes with an f16 cache.
pub(crate) fn flash_attn_supported(device: Device, hp: &HParams, type_k: KvType, type_v: KvType) -> bool {
    let Some(ctx) = Ctx::new(4, 0) else {
        return false;
    };
    let n_kv = crate::engine::forward::kv_cache::KV_PAD as i64;
    let q = ctx.new_tensor(GGML_TYPE_F32, &[hp.head_dim_k as i64, 1, hp.n_head as i64, 1]);
    let k = ctx.new_tensor(type_k.ggml_type(), &[hp.head_dim_k as i64, n_kv, hp.n_head_kv as i64, 1]);
    let v = ctx.new_tensor(type_v.ggml_type(), &[hp.head_dim_v as i64, n_kv, hp.n_head_kv as i64, 1]);
    let mask = ctx.new_tensor(GGML_TYPE_F16, &[n_kv, 1, 1, 1]);
    let Some(g) = GraphCtx::new(2) else {
        return false;
    };
    let fa = g.flash_attn_ext(q, k, v, mask, 1.0, 0.0);
    device.supports_op(fa)
}
