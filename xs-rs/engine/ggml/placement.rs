//! Where a session's layers live: llama.cpp's layer split. The devices that
//! take whole layers (GPUs, RPC servers) get the last `n_gpu_layers` of the
//! model's n_layer + 1 (the output layer counts as one), shared out in the
//! proportions of `tensor_split` (default: each device's free memory); the
//! rest, and the token embeddings, stay on the CPU. Accelerators (BLAS) take
//! no layers: ggml's scheduler hands them the CPU's ops they run best.
use crate::engine::ggml::runtime::{BufferType, Device};
use crate::engine::{Error, Result};

/// What the caller asked for (see InferenceOptions).
#[derive(Clone, Debug, Default)]
pub struct SplitRequest {
    /// Layers (of n_layer + 1) on the devices; None: all of them.
    pub n_gpu_layers: Option<usize>,
    /// One proportion per device; None: by free memory.
    pub tensor_split: Option<Vec<f64>>,
    /// Every offloaded layer on this one device (llama.cpp's split mode
    /// "none" with main_gpu).
    pub main_device: Option<usize>,
}

/// The devices of a session and the device of each layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// Devices that take layers, in split order.
    pub devices: Vec<Device>,
    /// Accelerators that take some of the CPU's ops.
    pub accels: Vec<Device>,
    pub cpu: Device,
    /// Per layer: the index in `devices`, None for the CPU.
    pub layers: Vec<Option<usize>>,
    /// The output layer's device (output norm and projection).
    pub output: Option<usize>,
    /// CPU matmul weights in the CPU's repacked layouts.
    pub repack: bool,
}

/// Which part of the model a weight belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Token (and position) embeddings: always the CPU, as in llama.cpp.
    Input,
    Layer(usize),
    Output,
}

impl Placement {
    /// Everything on the CPU (the default build's only placement).
    pub fn cpu_only(cpu: Device, n_layer: usize, repack: bool) -> Placement {
        Placement { devices: Vec::new(), accels: Vec::new(), cpu, layers: vec![None; n_layer], output: None, repack }
    }

    /// Splits `n_layer` layers over `devices` as `request` says.
    pub fn split(
        cpu: Device,
        devices: Vec<Device>,
        accels: Vec<Device>,
        n_layer: usize,
        request: &SplitRequest,
        repack: bool,
    ) -> Result<Placement> {
        let mut devices = devices;
        if let Some(main) = request.main_device {
            if request.tensor_split.is_some() {
                return Err(Error::Argument("main_device and tensor_split exclude each other".into()));
            }
            if main >= devices.len() {
                return Err(Error::Argument(format!(
                    "main_device {main} is out of range: the session has {} device(s) that take layers{}",
                    devices.len(),
                    describe(&devices)
                )));
            }
            devices = vec![devices[main]];
        }
        let proportions = match &request.tensor_split {
            Some(split) if request.main_device.is_none() => {
                if split.len() != devices.len() {
                    return Err(Error::Argument(format!(
                        "tensor_split has {} value(s) but the session has {} device(s) that take layers{}",
                        split.len(),
                        devices.len(),
                        describe(&devices)
                    )));
                }
                if split.iter().any(|p| !p.is_finite() || *p < 0.0) || split.iter().sum::<f64>() <= 0.0 {
                    return Err(Error::Argument(format!(
                        "tensor_split must be numbers >= 0 with a positive sum, got [{}]",
                        split.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
                    )));
                }
                split.clone()
            }
            _ => devices.iter().map(|d| d.memory().0 as f64).collect(),
        };
        let (layers, output) = assign_layers(n_layer, &proportions, request.n_gpu_layers);
        Ok(Placement { devices, accels, cpu, layers, output, repack })
    }

    /// Whether ggml's scheduler is needed (more than the CPU takes part).
    pub fn is_cpu_only(&self) -> bool {
        self.devices.is_empty() && self.accels.is_empty()
    }

    /// The device of a part of the model.
    pub fn device_of(&self, part: Part) -> Device {
        let slot = match part {
            Part::Input => None,
            Part::Layer(il) => self.layers.get(il).copied().flatten(),
            Part::Output => self.output,
        };
        slot.map_or(self.cpu, |i| self.devices[i])
    }

    /// The buffer types a weight of `part` may go to, best first, each with
    /// the device that would run the weight's op (llama.cpp's buffer-type
    /// lists): a device part's own device first, then the CPU's list.
    pub fn weight_bufts(&self, part: Part) -> Vec<(Device, BufferType)> {
        let device = self.device_of(part);
        let mut list = Vec::new();
        if !device.is_cpu() {
            list.push((device, device.buffer_type()));
        }
        list.extend(self.cpu_bufts());
        list
    }

    /// llama.cpp's CPU list: the accelerators' own buffer types (where not
    /// the CPU's), the first device's host buffer type (pinned memory, from
    /// which ggml's scheduler may hand large batches to the device), the
    /// repacked layouts when asked for, and the plain CPU buffer type last.
    fn cpu_bufts(&self) -> Vec<(Device, BufferType)> {
        let plain = self.cpu.buffer_type();
        let mut list: Vec<(Device, BufferType)> =
            self.accels.iter().map(|a| (*a, a.buffer_type())).filter(|&(_, b)| b != plain).collect();
        if let Some(host) = self.devices.iter().find_map(|d| d.host_buffer_type().map(|b| (*d, b))) {
            list.push(host);
        }
        if self.repack {
            list.extend(self.cpu.extra_buffer_types().into_iter().map(|b| (self.cpu, b)));
        }
        list.push((self.cpu, plain));
        list
    }

    /// Every device taking part, the CPU last: the scheduler's order.
    pub fn all_devices(&self) -> Vec<Device> {
        self.devices.iter().chain(&self.accels).copied().chain(std::iter::once(self.cpu)).collect()
    }

    /// How many layers each device holds, for the caller: (device name,
    /// description, layers), the CPU included when it holds any.
    pub fn summary(&self) -> Vec<(String, String, usize)> {
        let mut out: Vec<(String, String, usize)> = Vec::new();
        let count = |slot: Option<usize>| self.layers.iter().filter(|&&l| l == slot).count();
        let cpu_layers = count(None);
        for (i, d) in self.devices.iter().enumerate() {
            out.push((d.name(), d.description(), count(Some(i))));
        }
        if cpu_layers > 0 || self.devices.is_empty() {
            out.push((self.cpu.name(), self.cpu.description(), cpu_layers));
        }
        out
    }
}

fn describe(devices: &[Device]) -> String {
    if devices.is_empty() {
        return String::new();
    }
    format!(" ({})", devices.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "))
}

/// llama.cpp's layer assignment: the last `n_gpu_layers` of n_layer + 1
/// (the output layer last) go to the devices, device i taking the layers
/// whose share of the offloaded ones falls below the cumulative proportion
/// of devices 0..=i. Returns each layer's device and the output's.
pub fn assign_layers(
    n_layer: usize,
    proportions: &[f64],
    n_gpu_layers: Option<usize>,
) -> (Vec<Option<usize>>, Option<usize>) {
    let n_devices = proportions.len();
    let offloaded = if n_devices == 0 { 0 } else { n_gpu_layers.unwrap_or(n_layer + 1).min(n_layer + 1) };
    let first = n_layer + 1 - offloaded;
    // cumulative shares; equal shares when no device reports memory
    let total: f64 = proportions.iter().sum();
    let mut bounds = Vec::with_capacity(n_devices);
    let mut sum = 0.0f32;
    for &p in proportions {
        sum += if total > 0.0 { p as f32 } else { 1.0 };
        bounds.push(sum);
    }
    for b in &mut bounds {
        *b /= sum;
    }
    let device_of = |il: usize| -> Option<usize> {
        if il < first {
            return None;
        }
        let share = (il - first) as f32 / offloaded as f32;
        // the first device whose cumulative bound exceeds the share
        Some(bounds.iter().position(|&b| b > share).unwrap_or(n_devices - 1))
    };
    ((0..n_layer).map(device_of).collect(), device_of(n_layer))
}

#[cfg(test)]
mod tests {
    use super::assign_layers;

    #[test]
    fn all_on_the_cpu_without_devices() {
        let (layers, output) = assign_layers(4, &[], Some(99));
        assert_eq!(layers, vec![None; 4]);
        assert_eq!(output, None);
    }

    #[test]
    fn last_layers_offloaded_in_proportion() {
        // 30 layers + output, 20 offloaded over two equal devices: layers
        // 11..=20 on the first, 21..=29 and the output on the second
        let (layers, output) = assign_layers(30, &[1.0, 1.0], Some(20));
        assert!(layers[..11].iter().all(Option::is_none));
        assert!(layers[11..21].iter().all(|&d| d == Some(0)));
        assert!(layers[21..].iter().all(|&d| d == Some(1)));
        assert_eq!(output, Some(1));
    }

    #[test]
    fn everything_offloaded_by_default() {
        let (layers, output) = assign_layers(3, &[3.0, 1.0], None);
        assert_eq!(layers, vec![Some(0), Some(0), Some(0)]);
        assert_eq!(output, Some(1));
    }

    #[test]
    fn zero_layers_keeps_the_cpu() {
        let (layers, output) = assign_layers(3, &[1.0], Some(0));
        assert_eq!(layers, vec![None; 3]);
        assert_eq!(output, None);
    }
}
