//! Builds the two native parts of Lugh.so:
//! - ggml 0.26.0's base library and CPU backend, from the crates.io package
//!   `llama-cpp-sys-2` pinned in vendor/ggml (fetched and checksum-verified by
//!   cargo; nothing of ggml is copied into this repository);
//!   three of its x86 dot products, its x86 Q4_1, Q8_0 and Q5_0 matrix
//!   products and its repacked Q4_K matrix products are Lugh's own,
//!   bit-identical and faster (xs-rs/kernels/);
//! - the small C shim over perl's API macros (xs-rs/glue/shim.c), compiled
//!   against the headers and ccflags of the perl in $PERL (default `perl`).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/cuda.rs"]
mod cuda;
#[path = "build/vulkan.rs"]
mod vulkan;

const GGML_VERSION: &str = "0.26.0";
const PIN_PACKAGE: &str = "llama-cpp-sys-2";

fn main() {
    println!("cargo:rerun-if-changed=vendor/ggml/Cargo.toml");
    println!("cargo:rerun-if-changed=vendor/ggml/Cargo.lock");
    println!("cargo:rerun-if-changed=xs-rs/glue/shim.c");
    println!("cargo:rerun-if-env-changed=PERL");
    println!("cargo:rerun-if-env-changed=LUGH_GGML_DIR");
    println!("cargo:rerun-if-env-changed=LUGH_CPU_PORTABLE");
    println!("cargo:rerun-if-env-changed=LUGH_CPU_AMX");
    println!("cargo:rerun-if-env-changed=LUGH_CPU_MARCH");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let ggml = ggml_source_dir();
    build_ggml(&ggml, &out);
    check_ggml_layouts(&ggml, &out);
    build_perl_shim();
}

/// vendor/ggml/layout.txt, checked on both sides: a C file of
/// `_Static_assert`s compiled against ggml's headers, and a Rust file of
/// const asserts that xs-rs/engine/ggml/sys.rs includes (64-bit targets; elsewhere the
/// Rust file is empty).
fn check_ggml_layouts(ggml: &Path, out: &Path) {
    println!("cargo:rerun-if-changed=vendor/ggml/layout.txt");
    let list = std::fs::read_to_string("vendor/ggml/layout.txt").expect("vendor/ggml/layout.txt");
    let wide = env::var("CARGO_CFG_TARGET_POINTER_WIDTH").as_deref() == Ok("64");
    let mut c = String::from("#include <stddef.h>\n#include \"ggml.h\"\n#include \"ggml-cpu.h\"\n");
    let mut rust = String::new();
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let [name, field, value] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("vendor/ggml/layout.txt: bad line '{line}'");
        };
        let (c_expr, rust_expr) = if field == "size" {
            (format!("sizeof(struct {name})"), format!("std::mem::size_of::<{name}>()"))
        } else {
            // `type` is a Rust keyword: the Rust field is `type_`.
            let rust_field = if field == "type" { "type_" } else { field };
            (format!("offsetof(struct {name}, {field})"), format!("std::mem::offset_of!({name}, {rust_field})"))
        };
        c += &format!("_Static_assert({c_expr} == {value}, \"ggml changed: {name} {field} is not {value}\");\n");
        rust += &format!("const _: () = assert!({rust_expr} == {value}, \"{name} {field} is not {value}\");\n");
    }
    std::fs::write(out.join("ggml_layout.rs"), if wide { rust.as_str() } else { "" }).unwrap();
    if wide {
        let file = out.join("ggml_layout.c");
        std::fs::write(&file, c).unwrap();
        cc::Build::new().file(&file).include(ggml.join("include")).warnings(false).compile("lugh_ggml_layout");
    }
}

/// Where the pinned ggml tree is: `$LUGH_GGML_DIR` if set (for offline
/// builds from an already unpacked copy), else cargo's registry copy of the pin.
fn ggml_source_dir() -> PathBuf {
    if let Ok(dir) = env::var("LUGH_GGML_DIR") {
        return PathBuf::from(dir);
    }
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap()).join("vendor/ggml/Cargo.toml");
    // `cargo metadata` resolves the pin for every platform, so it downloads
    // whatever of the lock file the cache lacks (an empty, partial or warm
    // cache all work) and honours CARGO_NET_OFFLINE; --locked keeps the
    // checksums of vendor/ggml/Cargo.lock. (A `cargo fetch --target HOST`
    // first would fetch only the host's packages, and an --offline metadata
    // call after it fails on an empty cache.)
    let meta = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--manifest-path"])
        .arg(&manifest)
        .output()
        .expect("cannot run cargo metadata for the ggml pin");
    assert!(
        meta.status.success(),
        "cargo metadata of the ggml pin ({}) failed: {}",
        manifest.display(),
        String::from_utf8_lossy(&meta.stderr)
    );
    let json = String::from_utf8(meta.stdout).unwrap();
    let crate_dir = pinned_manifest_dir(&json).expect("llama-cpp-sys-2 not found in cargo metadata of the ggml pin");
    let dir = crate_dir.join("llama.cpp/ggml");
    assert!(dir.join("include/ggml.h").exists(), "no ggml tree at {}", dir.display());
    dir
}

/// Finds `"manifest_path":".../llama-cpp-sys-2-<ver>/Cargo.toml"` in cargo's
/// metadata JSON without a JSON parser (paths there are plain strings).
fn pinned_manifest_dir(json: &str) -> Option<PathBuf> {
    let needle = "\"manifest_path\":\"";
    json.match_indices(needle).find_map(|(at, _)| {
        let rest = &json[at + needle.len()..];
        let path = &rest[..rest.find('"')?];
        let dir = Path::new(path).parent()?;
        let name = dir.file_name()?.to_str()?;
        name.strip_prefix(PIN_PACKAGE)
            .filter(|v| v.starts_with('-') && v[1..].starts_with(|c: char| c.is_ascii_digit()))
            .map(|_| dir.to_path_buf())
    })
}

fn build_ggml(g: &Path, out: &Path) {
    // ggml.c includes this header, which ggml's CMake would generate.
    std::fs::write(
        out.join("ggml-version.h"),
        format!(
            "#pragma once\n#define GGML_VERSION \"{GGML_VERSION}\"\n#define GGML_COMMIT \"{PIN_PACKAGE}-0.1.161\"\n"
        ),
    )
    .unwrap();
    println!("cargo:rustc-env=LUGH_GGML_VERSION={GGML_VERSION}");
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let src = |p: &str| g.join("src").join(p);
    let cpu = cpu_kernels(&arch);
    report_cpu_features(&cpu, &arch);
    let setup = |cpp: bool, with_cpu: bool| {
        let mut b = cc::Build::new();
        b.include(g.join("include"))
            .include(g.join("src"))
            .include(out)
            .define("GGML_SCHED_MAX_COPIES", "4")
            .define("_GNU_SOURCE", None)
            .define("_XOPEN_SOURCE", "600")
            .define("NDEBUG", None)
            .define("GGML_VERSION", format!("\"{GGML_VERSION}\"").as_str())
            .define("GGML_COMMIT", "\"llama-cpp-sys-2-0.1.161\"")
            .opt_level(3)
            .debug(false)
            .warnings(false);
        if cpp {
            b.cpp(true).std("gnu++17");
        } else {
            b.std("gnu11");
        }
        if with_cpu {
            b.include(g.join("src/ggml-cpu")).define("GGML_USE_CPU_REPACK", None).define("GGML_USE_LLAMAFILE", None);
            for d in &cpu.defines {
                b.define(d, None);
            }
            for f in &cpu.flags {
                b.flag(f);
            }
        }
        b
    };
    let mut base_c = setup(false, false);
    base_c.files(["ggml.c", "ggml-alloc.c", "ggml-quants.c"].map(src)).compile("ggml_base_c");

    let mut cpu_c = setup(false, true);
    cpu_c.files(["ggml-cpu/ggml-cpu.c", "ggml-cpu/quants.c"].map(src));
    for f in arch_files(&arch, "c") {
        cpu_c.file(src(f));
    }
    let x86 = (arch == "x86_64").then(|| x86_kernels(g, out));
    if let Some((c_files, _)) = &x86 {
        cpu_c.files(c_files);
    }
    cpu_c.compile("ggml_cpu_c");

    let mut base_cxx = setup(true, false);
    base_cxx
        .files(
            ["ggml.cpp", "ggml-backend.cpp", "ggml-backend-meta.cpp", "ggml-opt.cpp", "ggml-threading.cpp", "gguf.cpp"]
                .map(src),
        )
        .define("GGML_USE_CPU", None)
        .files(["ggml-backend-reg.cpp", "ggml-backend-dl.cpp"].map(src));
    // the registry lists the optional backends compiled in
    for backend in OPTIONAL_BACKENDS.iter().filter(|b| b.enabled()) {
        base_cxx.define(backend.define, None);
    }
    base_cxx.compile("ggml_base_cxx");
    for backend in OPTIONAL_BACKENDS.iter().filter(|b| b.enabled()) {
        (backend.build)(g, out, &mut setup(true, false));
    }

    let mut cpu_cxx = setup(true, true);
    cpu_cxx.files(
        [
            "ggml-cpu/ggml-cpu.cpp",
            "ggml-cpu/repack.cpp",
            "ggml-cpu/hbm.cpp",
            "ggml-cpu/traits.cpp",
            "ggml-cpu/amx/amx.cpp",
            "ggml-cpu/amx/mmq.cpp",
            "ggml-cpu/tiled/tiled.cpp",
            "ggml-cpu/tiled/tiled-kernel.cpp",
            "ggml-cpu/binary-ops.cpp",
            "ggml-cpu/unary-ops.cpp",
            "ggml-cpu/vec.cpp",
            "ggml-cpu/ops.cpp",
        ]
        .map(src),
    );
    match &x86 {
        Some((_, cxx_wrappers)) => {
            cpu_cxx.files(cxx_wrappers);
        }
        None => {
            cpu_cxx.file(src("ggml-cpu/llamafile/sgemm.cpp"));
        }
    }
    for f in arch_files(&arch, "cpp") {
        cpu_cxx.file(src(f));
    }
    cpu_cxx.compile("ggml_cpu_cxx");
    for lib in ["pthread", "m", "dl"] {
        println!("cargo:rustc-link-lib={lib}");
    }
}

/// A ggml backend chosen at build time by a cargo feature (Makefile.PL
/// turns LUGH_BACKENDS=vulkan,rpc into `--features vulkan,rpc`).
struct OptionalBackend {
    feature: &'static str,
    /// What ggml-backend-reg.cpp needs defined to register it.
    define: &'static str,
    /// Compiles it (from the ggml tree, into OUT_DIR) with a C++ build set
    /// up like ggml's own.
    build: fn(&Path, &Path, &mut cc::Build),
}

impl OptionalBackend {
    fn enabled(&self) -> bool {
        env::var_os(format!("CARGO_FEATURE_{}", self.feature.to_uppercase())).is_some()
    }
}

const OPTIONAL_BACKENDS: &[OptionalBackend] = &[
    OptionalBackend { feature: "blas", define: "GGML_USE_BLAS", build: build_blas },
    OptionalBackend { feature: "rpc", define: "GGML_USE_RPC", build: build_rpc },
    OptionalBackend { feature: "vulkan", define: "GGML_USE_VULKAN", build: vulkan::build_vulkan },
    OptionalBackend { feature: "cuda", define: "GGML_USE_CUDA", build: cuda::build_cuda },
];

/// ggml's BLAS backend over OpenBLAS (found with pkg-config, else
/// -lopenblas on the default paths).
fn build_blas(g: &Path, _out: &Path, b: &mut cc::Build) {
    let pkg = |arg: &str| {
        Command::new("pkg-config")
            .args([arg, "openblas"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(String::from).collect::<Vec<_>>())
    };
    for flag in pkg("--cflags").unwrap_or_default() {
        b.flag(&flag);
    }
    b.define("GGML_BLAS_USE_OPENBLAS", None).file(g.join("src/ggml-blas/ggml-blas.cpp")).compile("ggml_blas");
    match pkg("--libs") {
        Some(libs) => {
            for lib in libs {
                if let Some(dir) = lib.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                } else if let Some(name) = lib.strip_prefix("-l") {
                    println!("cargo:rustc-link-lib={name}");
                }
            }
        }
        None => println!("cargo:rustc-link-lib=openblas"),
    }
}

/// ggml's RPC backend (client and server), through Lugh's glue: a server
/// that goes away is an error for the session, not an abort (see
/// vendor/ggml/rpc-client.cpp).
fn build_rpc(g: &Path, _out: &Path, b: &mut cc::Build) {
    for file in ["rpc-client.cpp", "rpc-transport.cpp"] {
        println!("cargo:rerun-if-changed=vendor/ggml/{file}");
    }
    b.include(g.join("src/ggml-rpc"))
        .files(["vendor/ggml/rpc-client.cpp", "vendor/ggml/rpc-transport.cpp"])
        .compile("ggml_rpc");
}

/// Lugh's x86 kernels take the place of some of ggml's: its Q4_1, Q8_0 and
/// Q5_0 dot products (xs-rs/kernels/x86_vec_dot.c) in ggml's type-traits
/// table, its matrix products for the same types and its one-column Q6_K
/// products (x86_gemm.c) in front of ggml's llamafile_sgemm, and its
/// repacked Q4_K matrix products (x86_kquants.c). ggml's x86 quants.c, repack.cpp
/// and llamafile/sgemm.cpp are compiled through wrappers that rename those
/// functions, which Lugh's call where the processor lacks what its own need
/// or the request is not theirs. Returns the C files and the C++ wrappers,
/// to compile with the CPU backend's flags.
fn x86_kernels(g: &Path, out: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    for file in ["x86_kernels.h", "x86_vec_dot.c", "x86_gemm.c", "x86_kquants.c"] {
        println!("cargo:rerun-if-changed=xs-rs/kernels/{file}");
    }
    let renamed = |wrapper: &str, names: &[&str], source: &str| {
        let mut text = String::new();
        for name in names {
            text.push_str(&format!("#define {name} lugh_{name}\n"));
        }
        text.push_str(&format!("#include \"{}\"\n", g.join("src/ggml-cpu").join(source).display()));
        let path = out.join(wrapper);
        std::fs::write(&path, text).unwrap();
        path
    };
    let quants = renamed(
        "ggml-x86-quants-renamed.c",
        &["ggml_vec_dot_q4_1_q8_1", "ggml_vec_dot_q8_0_q8_0", "ggml_vec_dot_q5_0_q8_0"],
        "arch/x86/quants.c",
    );
    let sgemm = renamed("ggml-sgemm-renamed.cpp", &["llamafile_sgemm"], "llamafile/sgemm.cpp");
    let repack = renamed(
        "ggml-x86-repack-renamed.cpp",
        &["ggml_gemv_q4_K_8x8_q8_K", "ggml_gemm_q4_K_8x8_q8_K"],
        "arch/x86/repack.cpp",
    );
    let c_files = vec![
        quants,
        "xs-rs/kernels/x86_vec_dot.c".into(),
        "xs-rs/kernels/x86_gemm.c".into(),
        "xs-rs/kernels/x86_kquants.c".into(),
    ];
    (c_files, vec![sgemm, repack])
}

/// The compiler switches that choose ggml's CPU kernels.
struct CpuKernels {
    defines: Vec<&'static str>,
    flags: Vec<String>,
}

fn cpu_kernels(arch: &str) -> CpuKernels {
    match arch {
        // llama.cpp's default build (GGML_NATIVE=ON): the kernels of the
        // machine it is built on (AVX-512 ...), so that Lugh computes what a
        // llama.cpp built there computes. Without AMX: GCC 12 drops the
        // tile-config stores in ggml's AMX kernels (they fault), and llama.cpp's
        // reference outputs are those of the AVX-512 kernels. LUGH_CPU_AMX=1
        // keeps AMX.
        "x86_64" if !env_flag("LUGH_CPU_PORTABLE") => {
            let mut flags = vec![march()];
            if !env_flag("LUGH_CPU_AMX") {
                flags.extend(["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"].map(String::from));
            }
            CpuKernels { defines: vec![], flags }
        }
        // LUGH_CPU_PORTABLE=1: ggml's portable x86-64 build (GGML_NATIVE=OFF
        // with AVX2): the flags its CMake sets for that variant.
        "x86_64" => CpuKernels {
            defines: vec!["GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_F16C", "GGML_FMA", "GGML_SSE42"],
            flags: ["-msse4.2", "-mf16c", "-mfma", "-mbmi2", "-mavx", "-mavx2"].map(String::from).to_vec(),
        },
        // armv8.2-a with dotprod and fp16 is what ggml's CMake picks for a
        // generic aarch64 Linux build.
        "aarch64" if env::var("LUGH_CPU_MARCH").is_ok() => CpuKernels { defines: vec![], flags: vec![march()] },
        "aarch64" => CpuKernels { defines: vec![], flags: vec!["-march=armv8.2-a+dotprod+fp16".into()] },
        _ => CpuKernels { defines: vec![], flags: vec![] },
    }
}

/// `-march=native`, or `-march=$LUGH_CPU_MARCH` to build for another
/// processor than this one (`znver3`, `haswell`, `armv8.6-a+sve` ...).
fn march() -> String {
    match env::var("LUGH_CPU_MARCH") {
        Ok(name) if !name.is_empty() => format!("-march={name}"),
        _ => "-march=native".into(),
    }
}

/// What LUGH_CPU_FEATURES' build names: `native`, `portable`, or the
/// LUGH_CPU_MARCH processor.
fn build_kind(arch: &str) -> String {
    match env::var("LUGH_CPU_MARCH") {
        Ok(name) if !name.is_empty() && matches!(arch, "x86_64" | "aarch64") && !env_flag("LUGH_CPU_PORTABLE") => name,
        _ if arch == "x86_64" && !env_flag("LUGH_CPU_PORTABLE") => "native".into(),
        _ => "portable".into(),
    }
}

/// The instruction-set macros ggml's CPU code branches on, as the compiler
/// defines them under `cpu`'s flags, and the kernel variant they make
/// (`x86_64-avx512`, `x86_64-avx2`, `aarch64-neon` ...): the variant names
/// the vector width and fused multiply-add, which fix the order and rounding
/// of float sums, so two builds of one variant compute the same logits.
/// Exported to the crate as LUGH_CPU_FEATURES and LUGH_CPU_VARIANT.
fn report_cpu_features(cpu: &CpuKernels, arch: &str) {
    const MACROS: &[&str] = &[
        "__SSE3__",
        "__SSSE3__",
        "__SSE4_1__",
        "__SSE4_2__",
        "__AVX__",
        "__AVX2__",
        "__FMA__",
        "__F16C__",
        "__BMI2__",
        "__AVXVNNI__",
        "__AVX512F__",
        "__AVX512BW__",
        "__AVX512DQ__",
        "__AVX512VL__",
        "__AVX512VNNI__",
        "__AVX512BF16__",
        "__AVX512VBMI__",
        "__AVX512FP16__",
        "__AMX_TILE__",
        "__AMX_INT8__",
        "__AMX_BF16__",
        "__ARM_NEON",
        "__ARM_FEATURE_FMA",
        "__ARM_FEATURE_DOTPROD",
        "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC",
        "__ARM_FEATURE_MATMUL_INT8",
        "__ARM_FEATURE_SVE",
        "__ARM_FEATURE_SME",
    ];
    let compiler = cc::Build::new().get_compiler();
    let mut probe = compiler.to_command();
    probe.args(&cpu.flags).args(["-dM", "-E", "-x", "c", "-"]).stdin(std::process::Stdio::null());
    let defined = probe.output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let has = |m: &str| defined.lines().any(|l| l.split_whitespace().nth(1) == Some(m));
    let features: Vec<String> = MACROS
        .iter()
        .filter(|m| has(m))
        .map(|m| {
            m.trim_matches('_')
                .trim_start_matches("ARM_FEATURE_")
                .trim_start_matches("ARM_")
                .replace("FP16_VECTOR_ARITHMETIC", "FP16")
        })
        .collect();
    let variant = match arch {
        "x86_64" if has("__AMX_INT8__") => "x86_64-amx",
        // Native f16 arithmetic (Sapphire Rapids on): ggml's f16 vector ops,
        // flash attention's among them, round differently.
        "x86_64" if has("__AVX512FP16__") => "x86_64-avx512fp16",
        "x86_64" if has("__AVX512F__") => "x86_64-avx512",
        "x86_64" if has("__AVX2__") && has("__FMA__") => "x86_64-avx2",
        "x86_64" if has("__AVX__") => "x86_64-avx",
        "x86_64" => "x86_64-sse",
        "aarch64" if has("__ARM_FEATURE_SVE") => "aarch64-sve",
        "aarch64" => "aarch64-neon",
        other => other,
    };
    println!("cargo:rustc-env=LUGH_CPU_FEATURES={}", features.join(" "));
    println!("cargo:rustc-env=LUGH_CPU_VARIANT={variant}");
    println!("cargo:rustc-env=LUGH_CPU_BUILD={}", build_kind(arch));
}

/// Whether the environment variable is set to something other than "" or "0".
fn env_flag(name: &str) -> bool {
    env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The architecture-specific kernels of the CPU backend.
fn arch_files(arch: &str, ext: &str) -> Vec<&'static str> {
    match (arch, ext) {
        // quants.c is compiled through x86_kernels' renaming wrapper
        ("x86_64", "c") => vec![],
        // repack.cpp too: x86_kernels' wrapper
        ("x86_64", "cpp") => vec![],
        ("aarch64", "c") => vec!["ggml-cpu/arch/arm/quants.c"],
        ("aarch64", "cpp") => vec!["ggml-cpu/arch/arm/repack.cpp"],
        _ => vec![],
    }
}

fn perl_config(perl: &str, key: &str) -> String {
    let out = Command::new(perl)
        .args(["-MConfig", "-e", &format!("print $Config{{{key}}} // ''")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {perl}: {e}"));
    String::from_utf8(out.stdout).unwrap()
}

fn build_perl_shim() {
    let perl = env::var("PERL").unwrap_or_else(|_| "perl".into());
    // $(FULLPERLRUN) may carry arguments; the first word is the interpreter.
    let perl = perl.split_whitespace().next().unwrap_or("perl").to_string();
    let core = format!("{}/CORE", perl_config(&perl, "archlibexp"));
    let mut b = cc::Build::new();
    b.file("xs-rs/glue/shim.c").include(&core).define("XS_VERSION", "\"0.20\"").warnings(false);
    for f in perl_config(&perl, "ccflags").split_whitespace() {
        b.flag(f);
    }
    b.flag("-Werror=implicit-function-declaration").compile("lugh_perl_shim");
    if perl_config(&perl, "usemultiplicity") == "define" {
        println!("cargo:rustc-cfg=perl_multiplicity");
    }
}
