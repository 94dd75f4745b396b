//! ggml's backend registry: which compute backends are compiled in and usable.
use crate::engine::ggml::sys;
use std::sync::Once;

/// One registered backend (CPU, CUDA, Vulkan, ...), as ggml describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendInfo {
    pub name: String,
    /// "CPU", "GPU", "IGPU" or "ACCEL": the type of its first device.
    pub kind: &'static str,
    pub is_gpu: bool,
    pub device_count: usize,
    pub description: String,
    /// Bytes free and in all over its devices, as the backend reports them.
    pub memory_free: usize,
    pub memory_total: usize,
    /// (name, description, free, total) of each device.
    pub devices: Vec<(String, String, usize, usize)>,
}

/// Installs ggml's log hook once (silent unless LUGH_DEBUG is set), and its
/// abort hook: a last-resort ggml abort prints one line naming ggml's check
/// instead of forking gdb to attach to the perl process. GGML_NO_BACKTRACE
/// is set (unless the environment has it) for the same reason on ggml's
/// other path there, an uncaught C++ exception.
pub fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let debug = crate::engine::debug::enabled();
        if std::env::var_os("GGML_NO_BACKTRACE").is_none() {
            std::env::set_var("GGML_NO_BACKTRACE", "1");
        }
        // SAFETY: the callbacks are valid for the life of the process.
        unsafe {
            sys::ggml_log_set(Some(if debug { log_to_stderr } else { log_discard }), std::ptr::null_mut());
            sys::ggml_set_abort_callback(Some(abort_message));
        }
    });
}

/// ggml calls abort() after this returns.
unsafe extern "C" fn abort_message(message: *const std::ffi::c_char) {
    use std::io::Write;
    let text = format!(
        "Lugh: ggml aborted the process: {} (a file or argument that Lugh should have refused; please report it)\n",
        sys::c_str(message)
    );
    let _ = std::io::stderr().write_all(text.as_bytes());
}

unsafe extern "C" fn log_discard(
    _level: std::ffi::c_int,
    _text: *const std::ffi::c_char,
    _user: *mut std::ffi::c_void,
) {
}

unsafe extern "C" fn log_to_stderr(
    _level: std::ffi::c_int,
    text: *const std::ffi::c_char,
    _user: *mut std::ffi::c_void,
) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(sys::c_str(text).as_bytes());
}

fn kind_name(t: std::ffi::c_int) -> &'static str {
    match t {
        sys::GGML_BACKEND_DEVICE_TYPE_CPU => "CPU",
        sys::GGML_BACKEND_DEVICE_TYPE_GPU => "GPU",
        sys::GGML_BACKEND_DEVICE_TYPE_IGPU => "IGPU",
        sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => "ACCEL",
        _ => "unknown",
    }
}

/// Every backend in ggml's registry that has at least one device.
pub fn available() -> Vec<BackendInfo> {
    init_logging();
    // SAFETY: the registry is initialised on first use and lives for the process.
    let count = unsafe { sys::ggml_backend_reg_count() };
    (0..count)
        .filter_map(|i| unsafe {
            let reg = sys::ggml_backend_reg_get(i);
            let device_count = sys::ggml_backend_reg_dev_count(reg);
            if device_count == 0 {
                return None;
            }
            let dev = sys::ggml_backend_reg_dev_get(reg, 0);
            let t = sys::ggml_backend_dev_type(dev);
            let devices: Vec<(String, String, usize, usize)> = (0..device_count)
                .map(|d| {
                    let dev = sys::ggml_backend_reg_dev_get(reg, d);
                    let (mut free, mut total) = (0usize, 0usize);
                    sys::ggml_backend_dev_memory(dev, &mut free, &mut total);
                    (
                        sys::c_str(sys::ggml_backend_dev_name(dev)),
                        sys::c_str(sys::ggml_backend_dev_description(dev)),
                        free,
                        total,
                    )
                })
                .collect();
            Some(BackendInfo {
                name: sys::c_str(sys::ggml_backend_reg_name(reg)),
                kind: kind_name(t),
                is_gpu: t == sys::GGML_BACKEND_DEVICE_TYPE_GPU || t == sys::GGML_BACKEND_DEVICE_TYPE_IGPU,
                device_count,
                description: sys::c_str(sys::ggml_backend_dev_description(dev)),
                memory_free: devices.iter().map(|d| d.2).sum(),
                memory_total: devices.iter().map(|d| d.3).sum(),
                devices,
            })
        })
        .collect()
}

/// The names of every backend compiled in, with or without a usable device.
pub fn registered() -> Vec<String> {
    init_logging();
    // SAFETY: as in available().
    let count = unsafe { sys::ggml_backend_reg_count() };
    (0..count).map(|i| unsafe { sys::c_str(sys::ggml_backend_reg_name(sys::ggml_backend_reg_get(i))) }).collect()
}

/// The backend called `name` (case-insensitive), if available.
pub fn find(name: &str) -> Option<BackendInfo> {
    available().into_iter().find(|b| b.name.eq_ignore_ascii_case(name))
}

/// The best available backend: a GPU if there is one, else the CPU.
pub fn best() -> Option<BackendInfo> {
    let all = available();
    all.iter().find(|b| b.is_gpu).or_else(|| all.iter().find(|b| b.kind == "ACCEL")).or(all.first()).cloned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_is_available() {
        let all = super::available();
        assert!(all.iter().any(|b| b.name == "CPU" && b.kind == "CPU" && !b.is_gpu));
        // a GPU first, else an accelerator (BLAS, when built), else the CPU
        let expected = all
            .iter()
            .find(|b| b.is_gpu)
            .or_else(|| all.iter().find(|b| b.kind == "ACCEL"))
            .map_or("CPU".to_string(), |b| b.name.clone());
        assert_eq!(super::best().map(|b| b.name), Some(expected));
    }
}
