//! ggml's Vulkan backend, built without CMake the way ggml's
//! src/ggml-vulkan/CMakeLists.txt does it:
//! 1. ask glslc which optional GLSL extensions it knows (one define each,
//!    given alike to the shader generator and to ggml-vulkan.cpp: the
//!    generated header declares the extra shaders only with them);
//! 2. build ggml's shader generator and run it over the 155 compute
//!    shaders: glslc compiles about 1100 SPIR-V variants, embedded in one
//!    C++ file per shader plus a header;
//! 3. compile those files and ggml-vulkan*.cpp, and link libvulkan.
//!
//! Step 2 takes a few minutes on a small machine and its output depends only
//! on the shader sources, glslc and the defines, so it is kept in a cache
//! (LUGH_VULKAN_SHADER_CACHE, else ~/.cache/lugh/vulkan-shaders) under a key
//! made of exactly those inputs.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// glslc feature tests: (test shader, define when glslc compiles it).
const GLSLC_FEATURES: &[(&str, &str)] = &[
    ("coopmat.comp", "GGML_VULKAN_COOPMAT_GLSLC_SUPPORT"),
    ("coopmat2.comp", "GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT"),
    ("coopmat2_decode_vector.comp", "GGML_VULKAN_COOPMAT2_DECODE_VECTOR_GLSLC_SUPPORT"),
    ("integer_dot.comp", "GGML_VULKAN_INTEGER_DOT_GLSLC_SUPPORT"),
    ("bfloat16.comp", "GGML_VULKAN_BFLOAT16_GLSLC_SUPPORT"),
    ("float_e2m1.comp", "GGML_VULKAN_FLOAT_E2M1_GLSLC_SUPPORT"),
    ("float_e4m3.comp", "GGML_VULKAN_FLOAT_E4M3_GLSLC_SUPPORT"),
];

/// The generated header's name, which the shader files and ggml-vulkan.cpp include.
const SHADER_HEADER: &str = "ggml-vulkan-shaders.hpp";

/// Compiles ggml's Vulkan backend with `b`, a C++ build set up like ggml's own.
pub fn build_vulkan(g: &Path, out: &Path, b: &mut cc::Build) {
    const COMPAT: &str = "vendor/ggml/ggml-vulkan-compat.h";
    println!("cargo:rerun-if-changed={COMPAT}");
    for var in ["GLSLC", "LUGH_VULKAN_SHADER_CACHE", "VULKAN_SDK"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let vk = g.join("src/ggml-vulkan");
    let glslc = glslc();
    let defines = glslc_features(&glslc, &vk.join("vulkan-shaders/feature-tests"));
    let generated = generated_shaders(&glslc, &vk.join("vulkan-shaders"), &defines, out);
    if let Ok(sdk) = env::var("VULKAN_SDK") {
        b.include(Path::new(&sdk).join("include"));
        println!("cargo:rustc-link-search=native={sdk}/lib");
    }
    b.include(&generated);
    for d in &defines {
        b.define(d, None);
    }
    let mut shaders = b.clone();
    let mut shader_files: Vec<PathBuf> = fs::read_dir(&generated)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", generated.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".comp.cpp"))
        .collect();
    shader_files.sort();
    shaders.files(&shader_files).compile("ggml_vulkan_shaders");

    // Vulkan headers before 1.3.272 (Debian 12 has 1.3.239) lack
    // VK_EXT_layer_settings, which ggml-vulkan.cpp names; the compat header
    // declares it there and nothing where the headers have it.
    let compat = env::current_dir().unwrap().join(COMPAT);
    b.flag("-include")
        .flag(compat.to_str().expect("a UTF-8 path"))
        .files(["ggml-vulkan.cpp", "ggml-vulkan-buffers.cpp", "ggml-vulkan-debug.cpp"].map(|f| vk.join(f)))
        .compile("ggml_vulkan");
    println!("cargo:rustc-link-lib=vulkan");
}

/// $GLSLC, else glslc from the Vulkan SDK or PATH (Makefile.PL has checked it runs).
fn glslc() -> String {
    if let Ok(glslc) = env::var("GLSLC") {
        return glslc;
    }
    match env::var("VULKAN_SDK") {
        Ok(sdk) if Path::new(&sdk).join("bin/glslc").exists() => format!("{sdk}/bin/glslc"),
        _ => "glslc".into(),
    }
}

/// The defines for the GLSL extensions this glslc compiles.
fn glslc_features(glslc: &str, tests: &Path) -> Vec<String> {
    GLSLC_FEATURES
        .iter()
        .filter(|(file, _)| {
            Command::new(glslc)
                .args(["-o", "/dev/null", "-fshader-stage=compute", "--target-env=vulkan1.3"])
                .arg(tests.join(file))
                .output()
                .unwrap_or_else(|e| panic!("cannot run {glslc}: {e} (set GLSLC, or install glslc)"))
                .status
                .success()
        })
        .map(|(_, define)| define.to_string())
        .collect()
}

/// The folder holding the generated header and shader files, from the cache
/// when its key matches, else generated into it (or into OUT_DIR when no
/// cache folder can be written).
fn generated_shaders(glslc: &str, shaders: &Path, defines: &[String], out: &Path) -> PathBuf {
    let glslc_version = Command::new(glslc).arg("--version").output().map(|o| o.stdout).unwrap_or_default();
    let mut key = StableHash::new();
    for file in files_under(shaders) {
        key.add(file.strip_prefix(shaders).unwrap().to_string_lossy().as_bytes());
        key.add(&fs::read(&file).unwrap());
    }
    key.add(&glslc_version);
    for d in defines {
        key.add(d.as_bytes());
    }
    let key = key.hex();
    let cache = env::var_os("LUGH_VULKAN_SHADER_CACHE")
        .map(PathBuf::from)
        .or_else(|| env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("lugh/vulkan-shaders")))
        .or_else(|| env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/lugh/vulkan-shaders")));
    let cache = cache.filter(|c| fs::create_dir_all(c).is_ok()).unwrap_or_else(|| out.join("vulkan-shaders"));
    let done = cache.join(&key);
    if done.join(SHADER_HEADER).exists() {
        return done;
    }
    // A complete folder appears only by rename, so a build that stops half
    // way leaves nothing a later one would take for finished.
    let work = cache.join(format!(".tmp-{key}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();
    run_generator(glslc, shaders, defines, &work);
    fs::write(
        work.join("inputs.txt"),
        format!(
            "shaders: {}\nglslc: {}defines: {}\n",
            shaders.display(),
            String::from_utf8_lossy(&glslc_version),
            defines.join(" ")
        ),
    )
    .unwrap();
    if fs::rename(&work, &done).is_err() {
        // another build finished first: its files are the same
        let _ = fs::remove_dir_all(&work);
    }
    done
}

/// Builds vulkan-shaders-gen and runs it: the header, then each shader.
fn run_generator(glslc: &str, shaders: &Path, defines: &[String], work: &Path) {
    let generator = work.join("vulkan-shaders-gen");
    let host_cxx = cc::Build::new().cpp(true).get_compiler();
    let mut build = host_cxx.to_command();
    build.args(["-std=c++17", "-O2"]).args(defines.iter().map(|d| format!("-D{d}")));
    build.arg(shaders.join("vulkan-shaders-gen.cpp")).arg("-o").arg(&generator).arg("-pthread");
    run(&mut build, "building vulkan-shaders-gen");
    let spv = work.join("spv");
    let header = work.join(SHADER_HEADER);
    let generate = || {
        let mut c = Command::new(&generator);
        c.arg("--output-dir").arg(&spv).arg("--target-hpp").arg(&header);
        c
    };
    run(&mut generate(), "generating the Vulkan shader header");
    let mut sources: Vec<PathBuf> = fs::read_dir(shaders)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "comp"))
        .collect();
    sources.sort();
    // one shader at a time: the generator itself runs glslc on all cores
    for source in &sources {
        let name = source.file_name().unwrap().to_string_lossy();
        let mut c = generate();
        c.arg("--glslc").arg(glslc).arg("--source").arg(source);
        c.arg("--target-cpp").arg(work.join(format!("{name}.cpp")));
        run(&mut c, &format!("compiling the Vulkan shader {name}"));
    }
    let _ = fs::remove_dir_all(&spv);
    let _ = fs::remove_file(&generator);
    for f in fs::read_dir(work).unwrap().map(|e| e.unwrap().path()) {
        if f.extension().is_some_and(|e| e == "d") {
            let _ = fs::remove_file(f);
        }
    }
}

fn run(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: cannot run {:?}: {e}", command.get_program()));
    if !output.status.success() {
        panic!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Every file under `dir`, sorted by path.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// 128-bit FNV-1a over length-prefixed parts: a cache key that stays the
/// same across Rust versions (std's hashers promise no such thing).
struct StableHash(u128);

impl StableHash {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;

    fn new() -> Self {
        StableHash(Self::OFFSET)
    }

    fn add(&mut self, part: &[u8]) {
        for &byte in (part.len() as u64).to_le_bytes().iter().chain(part) {
            self.0 = (self.0 ^ byte as u128).wrapping_mul(Self::PRIME);
        }
    }

    fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}
