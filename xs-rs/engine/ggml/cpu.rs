//! Which CPU kernels this build of ggml was compiled with, and whether the
//! running processor can execute them. build.rs asks the C compiler which
//! instruction-set macros ggml saw (LUGH_CPU_FEATURES) and names the kernel
//! variant they make (LUGH_CPU_VARIANT): logits are equal between builds of
//! one variant, and differ in the last digits between variants.

/// The kernel variant, e.g. `x86_64-avx512`, `x86_64-avx2`, `aarch64-neon`.
pub fn variant() -> &'static str {
    env!("LUGH_CPU_VARIANT")
}

/// `native` (compiled for the machine that built it), `portable`, or the
/// processor named by LUGH_CPU_MARCH at build time.
pub fn build_kind() -> &'static str {
    env!("LUGH_CPU_BUILD")
}

/// The instruction-set extensions ggml was compiled for (`AVX2`, `FMA`,
/// `AVX512F`, `NEON`, `DOTPROD` ...), in a fixed order.
pub fn compiled_features() -> Vec<&'static str> {
    env!("LUGH_CPU_FEATURES").split_whitespace().collect()
}

/// The compiled-in extensions this processor (and its operating system) does
/// not support: running ggml's kernels here would stop on an illegal
/// instruction. Empty where the answer is not known (other architectures).
pub fn missing_features() -> Vec<&'static str> {
    compiled_features().into_iter().filter(|f| supported(f) == Some(false)).collect()
}

#[cfg(target_arch = "x86_64")]
fn supported(feature: &str) -> Option<bool> {
    use std::arch::is_x86_feature_detected as has;
    // The AVX-512 sub-extensions newer than Rust 1.80's detector, read from
    // CPUID leaf 7 (registers and bits as Intel's manual gives them); they
    // count only where AVX-512 itself is usable (the OS saves its state).
    let leaf7 = |sub: u32| {
        // SAFETY: cpuid exists on every x86-64 processor, and leaf 7 is within
        // range wherever AVX2 (checked first by every caller) is.
        #[allow(unused_unsafe)] // a safe fn from Rust 1.87 on, unsafe before
        unsafe {
            std::arch::x86_64::__cpuid_count(7, sub)
        }
    };
    let bit = |reg: u32, n: u32| reg >> n & 1 == 1;
    Some(match feature {
        "SSE3" => has!("sse3"),
        "SSSE3" => has!("ssse3"),
        "SSE4_1" => has!("sse4.1"),
        "SSE4_2" => has!("sse4.2"),
        "AVX" => has!("avx"),
        "AVX2" => has!("avx2"),
        "FMA" => has!("fma"),
        "F16C" => has!("f16c"),
        "BMI2" => has!("bmi2"),
        "AVX512F" => has!("avx512f"),
        "AVX512BW" => has!("avx512bw"),
        "AVX512DQ" => has!("avx512dq"),
        "AVX512VL" => has!("avx512vl"),
        "AVX512VBMI" => has!("avx512f") && bit(leaf7(0).ecx, 1),
        "AVX512VNNI" => has!("avx512f") && bit(leaf7(0).ecx, 11),
        "AVX512BF16" => has!("avx512f") && bit(leaf7(1).eax, 5),
        "AVX512FP16" => has!("avx512f") && bit(leaf7(0).edx, 23),
        "AVXVNNI" => has!("avx2") && bit(leaf7(1).eax, 4),
        _ => return None,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn supported(_feature: &str) -> Option<bool> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_matches_features() {
        let features = compiled_features();
        match variant() {
            "x86_64-avx512" => assert!(features.contains(&"AVX512F")),
            "x86_64-avx2" => assert!(features.contains(&"AVX2") && features.contains(&"FMA")),
            _ => {}
        }
        assert!(!build_kind().is_empty());
    }

    #[test]
    fn this_processor_runs_this_build() {
        // The tests run on the machine that built them.
        assert_eq!(missing_features(), Vec::<&str>::new());
    }
}
