//! ggml's RPC backend (built with the `rpc` feature): devices of other
//! machines, reached over TCP, that take layers of a session; and the server
//! that offers this machine's devices to others (`lugh rpc-server`, which
//! speaks the protocol of llama.cpp's rpc-server: the two interoperate).
//!
//! ggml's RPC protocol has no authentication and no encryption: whoever
//! reaches a server's port can run graphs and read and write its buffers.
//! The server binds to 127.0.0.1 unless told otherwise.
use crate::engine::ggml::runtime::Device;
use crate::engine::{Error, Result};

/// Splits "host:port" (a port in 1..=65535; the host a name or an IPv4
/// address, as ggml's RPC client resolves it).
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16)> {
    let bad = |why: &str| Error::Argument(format!("RPC server '{endpoint}' is not host:port ({why})"));
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(|| bad("no ':'"))?;
    if host.is_empty() || host.contains(':') || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("bad host"));
    }
    let port: u16 = port.parse().ok().filter(|&p| p > 0).ok_or_else(|| bad("the port must be 1..65535"))?;
    Ok((host.to_string(), port))
}

/// The devices `lugh rpc-server --backend NAME` offers: every device of
/// that backend ("auto": the GPUs if there are any, else the CPU).
pub fn server_devices(backend: &str) -> Result<Vec<Device>> {
    let all = Device::all();
    let chosen: Vec<Device> = if backend.eq_ignore_ascii_case("auto") {
        let gpus: Vec<Device> = all.iter().copied().filter(Device::is_gpu).collect();
        if gpus.is_empty() {
            all.iter().copied().filter(Device::is_cpu).collect()
        } else {
            gpus
        }
    } else {
        all.iter().copied().filter(|d| !d.is_accel() && d.backend_name().eq_ignore_ascii_case(backend)).collect()
    };
    if chosen.is_empty() {
        let mut names: Vec<String> = all.iter().filter(|d| !d.is_accel()).map(Device::backend_name).collect();
        names.dedup();
        return Err(Error::Backend(format!(
            "backend '{backend}' has no device an RPC server can offer (available: {})",
            names.join(", ")
        )));
    }
    Ok(chosen)
}

#[cfg(feature = "rpc")]
mod imp {
    use super::*;
    use crate::engine::ggml::runtime::Backend;
    use crate::engine::ggml::sys::{self as sys, ggml_backend_dev_t, ggml_backend_reg_t, ggml_backend_t};
    use std::ffi::{c_char, c_int, CString};

    /// The default for `rpc_timeout`: seconds a server may take to answer.
    pub const DEFAULT_TIMEOUT: f64 = 60.0;

    extern "C" {
        fn lugh_rpc_add_server(endpoint: *const c_char, err: *mut c_char, err_len: usize) -> ggml_backend_reg_t;
        fn lugh_rpc_backend_init(
            endpoint: *const c_char,
            device: u32,
            err: *mut c_char,
            err_len: usize,
        ) -> ggml_backend_t;
        fn lugh_rpc_failures(endpoint: *const c_char) -> u64;
        fn lugh_rpc_set_timeout_ms(timeout_ms: c_int);
        fn ggml_backend_rpc_start_server(
            endpoint: *const c_char,
            cache_dir: *const c_char,
            n_threads: usize,
            n_devices: usize,
            devices: *mut ggml_backend_dev_t,
        );
    }

    /// The servers a session uses, their devices, and a connection to each
    /// kept open for the session's life (ggml shares one per server).
    pub struct Servers {
        servers: Vec<Server>,
        devices: Vec<Device>,
    }

    struct Server {
        endpoint: String,
        c_endpoint: CString,
        /// The server's failures recorded when the session connected.
        failures_before: u64,
        // Holds the connection (ggml's dispatcher) while the session lives
        // (never used: the Mutex only makes it shareable).
        _keepalive: std::sync::Mutex<Backend>,
    }

    impl Servers {
        /// Connects to every server (an error naming the first that cannot
        /// be reached) and lists their devices in order.
        pub fn connect(endpoints: &[String], timeout: Option<f64>) -> Result<Servers> {
            crate::engine::ggml::backend::init_logging();
            let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT);
            if !(0.0..=86400.0).contains(&timeout) {
                return Err(Error::Argument(format!(
                    "rpc_timeout must be a number of seconds in 0..86400 (0: wait for ever), got {timeout}"
                )));
            }
            // SAFETY: sets a value under ggml's RPC glue's lock.
            unsafe { lugh_rpc_set_timeout_ms((timeout * 1000.0).round() as c_int) };
            let mut normal: Vec<String> = Vec::with_capacity(endpoints.len());
            for endpoint in endpoints {
                let (host, port) = parse_endpoint(endpoint)?;
                let endpoint = format!("{host}:{port}");
                if normal.contains(&endpoint) {
                    return Err(Error::Argument(format!("RPC server '{endpoint}' is listed twice")));
                }
                normal.push(endpoint);
            }
            let mut servers = Vec::with_capacity(endpoints.len());
            let mut devices = Vec::new();
            for (endpoint, normal) in endpoints.iter().zip(&normal) {
                let c_endpoint = CString::new(normal.as_str()).expect("checked: no NUL");
                let failures_before = unsafe { lugh_rpc_failures(c_endpoint.as_ptr()) };
                let mut err = [0 as c_char; 512];
                // SAFETY: the glue catches every abort inside and fills err.
                let reg = unsafe { lugh_rpc_add_server(c_endpoint.as_ptr(), err.as_mut_ptr(), err.len()) };
                if reg.is_null() {
                    return Err(unreachable(endpoint, &err));
                }
                // SAFETY: ggml keeps an RPC server's registry entry for the process.
                let server_devices = unsafe { Device::of_reg(reg) };
                // SAFETY: as above; the backend is owned (freed) by `Backend`.
                let keepalive = unsafe { lugh_rpc_backend_init(c_endpoint.as_ptr(), 0, err.as_mut_ptr(), err.len()) };
                if keepalive.is_null() {
                    return Err(unreachable(endpoint, &err));
                }
                // SAFETY: a live backend, owned from here on.
                let keepalive = unsafe { Backend::from_raw(keepalive) };
                devices.extend(server_devices);
                servers.push(Server {
                    endpoint: endpoint.clone(),
                    c_endpoint,
                    failures_before,
                    _keepalive: std::sync::Mutex::new(keepalive),
                });
            }
            Ok(Servers { servers, devices })
        }

        pub fn devices(&self) -> &[Device] {
            &self.devices
        }

        /// An error naming the servers that stopped answering since the
        /// session connected; `during` says what was under way.
        pub fn check(&self, during: &str) -> Result<()> {
            let gone: Vec<&str> = self
                .servers
                .iter()
                // SAFETY: reads a counter under the glue's lock.
                .filter(|s| unsafe { lugh_rpc_failures(s.c_endpoint.as_ptr()) } > s.failures_before)
                .map(|s| s.endpoint.as_str())
                .collect();
            if gone.is_empty() {
                return Ok(());
            }
            Err(Error::Backend(format!(
                "RPC server {} stopped answering during {during} (it exited, or did not answer within rpc_timeout): \
                 this Lugh::Inference cannot go on; make a new one",
                gone.join(", ")
            )))
        }
    }

    fn unreachable(endpoint: &str, err: &[c_char]) -> Error {
        // SAFETY: the glue wrote a NUL-terminated message (or left zeros).
        let why = unsafe { sys::c_str(err.as_ptr()) };
        Error::Backend(format!("cannot use RPC server '{endpoint}': {}", why.trim_end()))
    }

    /// Serves `devices` to RPC clients on `host:port` until the process
    /// ends; returns only when the server cannot start.
    pub fn serve(host: &str, port: u16, devices: &[Device], n_threads: usize, cache_dir: Option<&str>) -> Result<()> {
        // ggml says only "Failed to create server socket": try the address
        // first for an error that names the cause
        std::net::TcpListener::bind((host, port))
            .map_err(|e| Error::Backend(format!("cannot listen on {host}:{port}: {e}")))?;
        let endpoint = CString::new(format!("{host}:{port}")).expect("checked: no NUL");
        let cache =
            cache_dir.map(|d| CString::new(d).map_err(|_| Error::Argument("cache directory with a NUL".into())));
        let cache = cache.transpose()?;
        let mut raw: Vec<ggml_backend_dev_t> = devices.iter().map(|d| d.raw()).collect();
        // SAFETY: the devices are live registry entries; the strings outlive
        // the call, which blocks while the server runs.
        unsafe {
            ggml_backend_rpc_start_server(
                endpoint.as_ptr(),
                cache.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                n_threads,
                raw.len(),
                raw.as_mut_ptr(),
            )
        };
        Err(Error::Backend(format!("the RPC server on {host}:{port} stopped (see the messages above)")))
    }
}

#[cfg(not(feature = "rpc"))]
mod imp {
    use super::*;

    const NOT_BUILT: &str =
        "this Lugh was built without ggml's RPC backend: rebuild it with LUGH_BACKENDS=rpc perl Makefile.PL";

    /// Stands for the RPC servers of a session; never made in this build.
    pub struct Servers {
        never: std::convert::Infallible,
    }

    impl Servers {
        pub fn connect(_endpoints: &[String], _timeout: Option<f64>) -> Result<Servers> {
            Err(Error::Backend(NOT_BUILT.into()))
        }

        pub fn devices(&self) -> &[Device] {
            match self.never {}
        }

        pub fn check(&self, _during: &str) -> Result<()> {
            match self.never {}
        }
    }

    pub fn serve(_host: &str, _port: u16, _devices: &[Device], _n_threads: usize, _cache: Option<&str>) -> Result<()> {
        Err(Error::Backend(NOT_BUILT.into()))
    }
}

// the test build leaves out the XS subs, serve's only user
#[cfg_attr(test, allow(unused_imports))]
pub use imp::{serve, Servers};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_host_and_port() {
        assert_eq!(parse_endpoint("127.0.0.1:50052").unwrap(), ("127.0.0.1".into(), 50052));
        assert_eq!(parse_endpoint("gpu-box:1").unwrap(), ("gpu-box".into(), 1));
        for bad in ["", "host", ":50052", "host:", "host:0", "host:65536", "host:x", "a b:1", "::1:5"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }
}
