//! ggml's CUDA backend (src/ggml-cuda), built with the cc crate the way
//! ggml's own CMake builds it (src/ggml-cuda/CMakeLists.txt and
//! cmake/common.cmake, with ggml's default options): every .cu file with
//! nvcc, one at a time per job, archived and linked against the CUDA
//! runtime, cuBLAS and the driver library.
//!
//! Environment it reads (all optional):
//!   NVCC                     the nvcc to run (cc's own variable, a full path)
//!   CUDA_PATH, CUDA_HOME     the toolkit's root (bin/nvcc, include/, lib64/)
//!   LUGH_CUDA_ARCHITECTURES  what to compile for, in CMAKE_CUDA_ARCHITECTURES'
//!                            syntax: "86;89-real;90-virtual", "native", "all",
//!                            "all-major"; ',' may stand for ';'
//!   SOURCE_DATE_EPOCH        set: a reproducible build, so ggml's fixed
//!                            architecture list instead of this machine's GPUs
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The K-V type pairs whose FlashAttention vector kernels ggml compiles by
/// default (GGML_CUDA_FA_QUANTS; f16-f16 is always in). Each pair is one
/// template instance; the other 45 of the 49 are left out, and their
/// GGML_CUDA_FA_<K>_<V> is defined 0 so ggml falls back for them.
const CUDA_FA_QUANTS: &[&str] = &["q4_0-q4_0", "q8_0-q8_0", "f16-f16", "bf16-bf16"];
/// The K and V types of those kernels (FA_TYPES in cmake/common.cmake).
const CUDA_FA_TYPES: &[&str] = &["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "bf16", "f16"];

/// ggml's CUDA backend over cuBLAS, linked to the CUDA runtime, cuBLAS and
/// the CUDA driver library. `b` is a C++ build set up like ggml's own: its
/// include directories and defines are handed on to nvcc.
pub fn build_cuda(g: &Path, out: &Path, b: &mut cc::Build) {
    let toolkit = CudaToolkit::find();
    let sources = cuda_sources(g);
    compile_cuda(&toolkit, out, b, &sources);
    link_cuda(&toolkit);
}

/// What ggml's CMake compiles by default: every .cu file of src/ggml-cuda,
/// the fattn-tile, fattn-mma, mmq and mmf template instances, and the
/// fattn-vec instances of CUDA_FA_QUANTS (144 files for ggml 0.26). ggml-cuda
/// has no .cpp files.
fn cuda_sources(g: &Path) -> Vec<PathBuf> {
    let dir = g.join("src/ggml-cuda");
    let cu_files_in = |dir: &Path, prefixes: &[&str]| {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                let name = path.file_name().unwrap().to_string_lossy();
                name.ends_with(".cu") && (prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p)))
            })
            .collect();
        files.sort(); // read_dir's order is the file system's: keep the archive reproducible
        files
    };
    let instances = dir.join("template-instances");
    let mut sources = cu_files_in(&dir, &[]);
    sources.extend(cu_files_in(&instances, &["fattn-tile", "fattn-mma", "mmq", "mmf"]));
    for pair in CUDA_FA_QUANTS {
        let file = instances.join(format!("fattn-vec-instance-{pair}.cu"));
        assert!(file.exists(), "{} is missing: is this the ggml that Lugh pins?", file.display());
        sources.push(file);
    }
    sources
}

/// Compiles `sources` with nvcc into libggml_cuda.a and links it.
///
/// Each file is its own cc::Build, compiled on a pool of NUM_JOBS threads:
/// cc compiles the files of one CUDA build with --device-c (relocatable
/// device code) when there is more than one, and adds an nvcc --device-link
/// step over all the objects. ggml's CMake does neither: each file's device
/// code is whole-program code (nvcc's default), as ggml's kernels are built
/// and measured upstream, and there is no device-link step to pay for.
fn compile_cuda(toolkit: &CudaToolkit, out: &Path, b: &cc::Build, sources: &[PathBuf]) {
    let mut nvcc = cc::Build::new();
    nvcc.cuda(true)
        // the libraries are linked below, from the toolkit found, and as
        // shared libraries like ggml's default (GGML_STATIC=OFF) build
        .cudart("none")
        .opt_level(3)
        .debug(false)
        .warnings(false)
        .out_dir(out.join("ggml-cuda"));
    // nvcc adds the toolkit's include folder itself
    copy_includes_and_defines(b, &mut nvcc);

    // ggml's code is C++17. Given to nvcc, not with cc's std(), which hands
    // it to the host compiler only: nvcc before 12.0 defaults to C++14.
    nvcc.flag("-std=c++17");
    // ggml's CUDA_FLAGS
    nvcc.flag("-use_fast_math").flag("-extended-lambda");
    if toolkit.version >= (12, 8) {
        // GGML_CUDA_COMPRESSION_MODE's default: smaller fat binaries
        nvcc.flag("-compress-mode=size");
    }
    // CUDA_CXX_FLAGS: passed to the host compiler
    nvcc.flag("-Xcompiler=-Wno-pedantic");
    for flag in cuda_arch_flags(toolkit) {
        nvcc.flag(&flag);
    }

    // FlashAttention: which K-V pairs have vector kernels (cmake/common.cmake)
    nvcc.define("GGML_CUDA_FA_QUANTS", format!("\"{}\"", CUDA_FA_QUANTS.join(",")).as_str());
    for v in CUDA_FA_TYPES {
        for k in CUDA_FA_TYPES {
            let compiled = CUDA_FA_QUANTS.contains(&format!("{k}-{v}").as_str());
            let name = format!("GGML_CUDA_FA_{}_{}", k.to_uppercase(), v.to_uppercase());
            nvcc.define(&name, if compiled { "1" } else { "0" });
        }
    }
    // ggml's other CUDA options keep their defaults: GGML_CUDA_FA=ON (no
    // GGML_CUDA_NO_FA), GGML_CUDA_GRAPHS=OFF, GGML_CUDA_FORCE_MMQ=OFF,
    // GGML_CUDA_FORCE_CUBLAS=OFF, GGML_CUDA_NO_VMM=OFF (so libcuda is linked),
    // GGML_CUDA_NO_PEER_COPY=OFF; NCCL (multi-GPU) is not looked for.

    std::fs::create_dir_all(out.join("ggml-cuda")).unwrap();
    let objects = compile_each(&nvcc, sources);
    let mut archive = cc::Build::new();
    archive.cpp(true).out_dir(out.join("ggml-cuda"));
    let library = archive.create_archive("ggml_cuda", &objects);
    cc::emit_link_directives(&archive, &library);
}

/// Hands `from`'s -I and -D flags (ggml's include directories and defines,
/// as `setup` in build_ggml sets them) on to `to`.
fn copy_includes_and_defines(from: &cc::Build, to: &mut cc::Build) {
    let args: Vec<String> = from.get_compiler().args().iter().map(|arg| arg.to_string_lossy().into_owned()).collect();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if let Some(dir) = arg.strip_prefix("-I") {
            let dir = if dir.is_empty() { args.next().map(String::as_str).unwrap_or("") } else { dir };
            to.include(dir);
        } else if let Some(define) = arg.strip_prefix("-D") {
            match define.split_once('=') {
                Some((name, value)) => to.define(name, value),
                None => to.define(define, None),
            };
        }
    }
}

/// Compiles each file on its own (see compile_cuda), NUM_JOBS at a time, and
/// returns the objects in the order of `sources`.
fn compile_each(nvcc: &cc::Build, sources: &[PathBuf]) -> Vec<PathBuf> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let jobs = env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, sources.len().max(1));
    let next = AtomicUsize::new(0);
    let objects: Mutex<Vec<Option<PathBuf>>> = Mutex::new(vec![None; sources.len()]);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(source) = sources.get(i) else { break };
                if !failures.lock().unwrap().is_empty() {
                    break; // one failure fails the build: don't start more
                }
                match nvcc.clone().file(source).try_compile_intermediates() {
                    Ok(mut object) => objects.lock().unwrap()[i] = object.pop(),
                    Err(e) => failures.lock().unwrap().push(format!("{}: {}", source.display(), e)),
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "nvcc failed (its output is above):\n{}", failures.join("\n"));
    objects.into_inner().unwrap().into_iter().map(|object| object.expect("compiled")).collect()
}

/// The CUDA toolkit nvcc comes from, and its version.
struct CudaToolkit {
    /// Holds bin/nvcc, include/cuda_runtime.h, lib64/ (or lib/, or
    /// targets/<arch>-linux/lib/) with libcudart.
    root: PathBuf,
    /// (major, minor), from `nvcc --version`
    version: (u32, u32),
}

impl CudaToolkit {
    /// Looks where cc and CMake's FindCUDAToolkit look: $NVCC (what cc
    /// runs), $CUDA_PATH/bin, $CUDA_HOME/bin, nvcc on PATH, /usr/local/cuda/bin.
    /// The nvcc found is the one cc runs: NVCC is set to it when it is not.
    fn find() -> CudaToolkit {
        for var in ["NVCC", "CUDA_PATH", "CUDA_HOME", "LUGH_CUDA_ARCHITECTURES", "SOURCE_DATE_EPOCH"] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let from_env = |var: &str| env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        let on_path = || {
            env::split_paths(&env::var_os("PATH").unwrap_or_default())
                .map(|dir| dir.join("nvcc"))
                .find(|nvcc| nvcc.is_file())
        };
        let nvcc = from_env("NVCC")
            .or_else(|| from_env("CUDA_PATH").map(|root| root.join("bin/nvcc")).filter(|p| p.is_file()))
            .or_else(|| from_env("CUDA_HOME").map(|root| root.join("bin/nvcc")).filter(|p| p.is_file()))
            .or_else(on_path)
            .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/nvcc")).filter(|p| p.is_file()))
            .unwrap_or_else(|| {
                panic!(
                    "the cuda feature needs the CUDA toolkit's nvcc: set CUDA_PATH to the toolkit \
                     (the folder with bin/nvcc), or put nvcc on PATH"
                )
            });
        // /usr/bin/nvcc (Debian's nvidia-cuda-toolkit) is a link into the
        // toolkit; its root is what the link points into
        let real = std::fs::canonicalize(&nvcc).unwrap_or_else(|_| nvcc.clone());
        let root = real.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
        let root = if root.join("include/cuda_runtime.h").exists() {
            root
        } else if Path::new("/usr/include/cuda_runtime.h").exists() {
            PathBuf::from("/usr") // Debian and Ubuntu: headers in /usr/include, nvcc in /usr/lib/nvidia-cuda-toolkit
        } else {
            root
        };
        if env::var_os("NVCC").is_none() {
            // cc runs $NVCC, else `nvcc` from PATH; build.rs is single-threaded here
            env::set_var("NVCC", &nvcc);
        }
        let version = nvcc_version(&nvcc);
        println!("cargo:warning=CUDA {}.{} from {}", version.0, version.1, nvcc.display());
        CudaToolkit { root, version }
    }

    /// The folders that hold libcudart, libcublas and libcublasLt, then the
    /// stubs folder for libcuda (the driver library, which is installed
    /// with the driver, not the toolkit: linking against the stub lets a
    /// machine without a GPU build; the real libcuda.so.1 is loaded at run time).
    fn library_dirs(&self) -> Vec<PathBuf> {
        let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
        let target_dir = match arch.as_str() {
            "aarch64" if self.root.join("targets/sbsa-linux").is_dir() => "targets/sbsa-linux/lib".to_string(),
            _ => format!("targets/{arch}-linux/lib"),
        };
        let mut dirs: Vec<PathBuf> =
            ["lib64", "lib", target_dir.as_str(), "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"]
                .iter()
                .map(|dir| self.root.join(dir))
                .filter(|dir| dir.is_dir())
                .collect();
        let stubs: Vec<PathBuf> = dirs.iter().map(|dir| dir.join("stubs")).filter(|dir| dir.is_dir()).collect();
        dirs.extend(stubs);
        // lib64 is often a link to targets/<arch>-linux/lib: name each folder once
        let mut seen = Vec::new();
        dirs.retain(|dir| {
            let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            let new = !seen.contains(&real);
            seen.push(real);
            new
        });
        dirs
    }
}

/// (major, minor) from `nvcc --version`'s "Cuda compilation tools, release 12.4, V12.4.131".
fn nvcc_version(nvcc: &Path) -> (u32, u32) {
    let output = Command::new(nvcc).arg("--version").output().unwrap_or_else(|e| panic!("{}: {e}", nvcc.display()));
    let text = String::from_utf8_lossy(&output.stdout);
    text.split("release ")
        .nth(1)
        .and_then(|rest| {
            let version = rest.split(',').next()?;
            let (major, minor) = version.trim().split_once('.')?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .unwrap_or_else(|| panic!("can't read the CUDA version from `{} --version`:\n{text}", nvcc.display()))
}

/// nvcc's -gencode flags for LUGH_CUDA_ARCHITECTURES, else for ggml's
/// default: the GPUs of this machine ("native": GGML_NATIVE is on unless the
/// build is reproducible or cross-compiled), and where there are none (or
/// nvidia-smi can't tell), ggml's fixed list for the nvcc version.
fn cuda_arch_flags(toolkit: &CudaToolkit) -> Vec<String> {
    let requested = env::var("LUGH_CUDA_ARCHITECTURES").ok().filter(|s| !s.trim().is_empty());
    let native_default = env::var_os("SOURCE_DATE_EPOCH").is_none() && env::var("TARGET").ok() == env::var("HOST").ok();
    let archs: Vec<String> = match requested.as_deref().map(str::trim) {
        Some(keyword @ ("all" | "all-major")) => return vec![format!("-arch={keyword}")],
        // nvcc's own detection; with no GPU it warns and uses its default arch
        Some("native") => match gpu_architectures() {
            Some(archs) => archs,
            None => return vec!["-arch=native".into()],
        },
        Some(list) => list.split([';', ',']).map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect(),
        None => match gpu_architectures().filter(|_| native_default) {
            Some(archs) => archs,
            None => ggml_default_architectures(toolkit.version),
        },
    };
    let archs: Vec<String> = archs.iter().map(|a| architecture_specific(a)).collect();
    println!("cargo:warning=CUDA architectures: {}", archs.join(";"));
    archs.iter().map(|arch| gencode(arch)).collect()
}

/// The compute capabilities of this machine's GPUs, as "86-real" (what CMake's
/// "native" compiles: device code for them and no PTX), from nvidia-smi.
fn gpu_architectures() -> Option<Vec<String>> {
    let output = Command::new("nvidia-smi").args(["--query-gpu=compute_cap", "--format=csv,noheader"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let mut archs: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim().replace('.', ""))
        .filter(|cap| !cap.is_empty() && cap.chars().all(|c| c.is_ascii_digit()))
        .map(|cap| format!("{cap}-real"))
        .collect();
    archs.sort();
    archs.dedup();
    (!archs.is_empty()).then_some(archs)
}

/// ggml's CMAKE_CUDA_ARCHITECTURES when not native (src/ggml-cuda/CMakeLists.txt):
/// PTX for the levels its kernels use (JIT-compiled for the GPU on first
/// use), and device code for the most common GPUs.
fn ggml_default_architectures(version: (u32, u32)) -> Vec<String> {
    let mut archs = Vec::new();
    if version < (13, 0) {
        archs.extend(["50-virtual", "61-virtual", "70-virtual"]); // CUDA 13 dropped these
    }
    archs.extend(["75-virtual", "80-virtual", "86-real"]);
    if version >= (11, 8) {
        archs.extend(["89-real", "90-virtual"]);
    }
    if version >= (12, 8) {
        archs.push("120a-real"); // Blackwell (RTX 50x0), FP4 tensor cores
    }
    if version >= (12, 9) {
        archs.push("121a-real"); // DGX Spark
    }
    archs.into_iter().map(String::from).collect()
}

/// ggml replaces a plain 12X by 12Xa: Blackwell's FP4 tensor core
/// instructions are only in the architecture-specific variant.
fn architecture_specific(arch: &str) -> String {
    let (number, suffix) = arch.split_once('-').map_or((arch, ""), |(n, s)| (n, s));
    if number.len() == 3 && number.starts_with("12") && number.chars().all(|c| c.is_ascii_digit()) {
        if suffix.is_empty() {
            format!("{number}a")
        } else {
            format!("{number}a-{suffix}")
        }
    } else {
        arch.to_string()
    }
}

/// CMake's architecture syntax as nvcc's -gencode: "86" is device code and
/// PTX, "86-real" device code only, "86-virtual" PTX only.
fn gencode(arch: &str) -> String {
    let (number, kind) = arch.split_once('-').map_or((arch, ""), |(n, s)| (n, s));
    assert!(
        !number.is_empty() && number.chars().all(|c| c.is_ascii_alphanumeric()),
        "LUGH_CUDA_ARCHITECTURES: {arch:?} is not a CUDA architecture such as 86, 86-real, 90-virtual or 120a-real"
    );
    match kind {
        "" => format!("-gencode=arch=compute_{number},code=[compute_{number},sm_{number}]"),
        "real" => format!("-gencode=arch=compute_{number},code=sm_{number}"),
        "virtual" => format!("-gencode=arch=compute_{number},code=compute_{number}"),
        _ => panic!("LUGH_CUDA_ARCHITECTURES: {arch:?}: the suffix can be -real or -virtual"),
    }
}

/// Links what ggml-cuda uses, as shared libraries (ggml's default, GGML_STATIC
/// off): the CUDA runtime, cuBLAS with cuBLASLt, which cuBLAS needs, and
/// the driver library for the virtual memory management ggml's pool uses
/// (GGML_CUDA_NO_VMM off).
fn link_cuda(toolkit: &CudaToolkit) {
    let dirs = toolkit.library_dirs();
    for dir in &dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    // The toolkit's libraries are often not on the loader's path (NVIDIA's
    // runfile installs to /usr/local/cuda): find them where they were found
    // at build time, as CMake's build tree does. Not the stubs folder.
    if let Some(dir) = dirs
        .iter()
        .find(|dir| !dir.ends_with("stubs") && dir.join("libcudart.so").exists() && !dir.starts_with("/usr/lib"))
    {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    for lib in ["cudart", "cublas", "cublasLt", "cuda"] {
        println!("cargo:rustc-link-lib={lib}");
    }
}
