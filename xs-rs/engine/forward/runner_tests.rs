//! Tests of the forward pass: parity with llama.cpp's reference outputs,
//! cache and batch consistency, pool reuse, and the input checks. Tests that
//! need a model skip (with a note) when it is absent.
use super::*;
use std::path::PathBuf;

fn model_dir() -> PathBuf {
    match std::env::var("LUGH_MODEL_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/lugh/models"),
    }
}

/// llama.cpp's outputs for this build's CPU kernel variant
/// (t/data/reference/VARIANT, or $LUGH_REFERENCE_DIR/VARIANT): only those
/// are equal to the last digits; t/50_parity.t also compares across variants.
fn reference_root() -> PathBuf {
    match std::env::var("LUGH_REFERENCE_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("t/data/reference"),
    }
}

/// The reference outputs of this build's kernel variant.
fn reference_dir() -> PathBuf {
    reference_root().join(crate::engine::ggml::cpu::variant())
}

const MODELS: &[&str] = &["smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m-q4_k_m"];

fn open(name: &str) -> Option<Arc<Model>> {
    let path = model_dir().join(format!("{name}.gguf"));
    if !path.exists() {
        eprintln!("skipped: {} is absent", path.display());
        return None;
    }
    Some(Arc::new(Model::open(&path, true).expect("model opens")))
}

/// A CPU session (ggml's CPU kernels alone, whatever else the build has:
/// the reference outputs and kernel expectations here are the CPU's).
fn session(model: &Arc<Model>, flash: bool, n_ctx: usize) -> Runner {
    let opts = InferenceOptions {
        backend: Some("CPU".into()),
        n_threads: Some(std::env::var("LUGH_TEST_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(2)),
        n_ctx: Some(n_ctx),
        flash_attn: Some(if flash { FlashAttn::Enabled } else { FlashAttn::Disabled }),
        ..Default::default()
    };
    Runner::new(Arc::clone(model), opts).expect("session")
}

/// One reference case: prompt ids, top-20 (id, logit), greedy continuation.
struct Case {
    prompt: String,
    tokens: Vec<i32>,
    top: Vec<(i32, f32)>,
    greedy: Vec<i32>,
}

/// The numbers of the JSON array after `"key":` (flattened).
fn numbers_after(line: &str, key: &str) -> Vec<f64> {
    let Some(at) = line.find(&format!("\"{key}\":[")) else {
        return Vec::new();
    };
    let rest = &line[at + key.len() + 4..];
    let mut depth = 1;
    let mut end = 0;
    for (i, c) in rest.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            _ => {}
        }
    }
    rest[..end]
        .split([',', '[', ']'])
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<f64>().expect("a number"))
        .collect()
}

fn read_cases(model: &str, fa: &str) -> Vec<Case> {
    read_cases_in(&reference_dir(), model, fa)
}

fn read_cases_in(dir: &std::path::Path, model: &str, fa: &str) -> Vec<Case> {
    let path = dir.join(format!("parity.{model}.fa-{fa}.jsonl"));
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipped: {} is absent", path.display());
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let top = numbers_after(l, "top");
            let prompt_end = l.find("\",\"tokens\"").unwrap_or(11);
            Case {
                prompt: l[11.min(prompt_end)..prompt_end].to_string(),
                tokens: numbers_after(l, "tokens").into_iter().map(|x| x as i32).collect(),
                top: top.chunks(2).map(|p| (p[0] as i32, p[1] as f32)).collect(),
                greedy: numbers_after(l, "greedy").into_iter().map(|x| x as i32).collect(),
            }
        })
        .collect()
}

fn argmax(v: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as i32
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Every reference case of one model and flash-attention setting: top-20
/// logits within 0.05, greedy continuation identical.
fn parity(model_name: &str, flash: bool) {
    let Some(model) = open(model_name) else {
        return;
    };
    let fa = if flash { "on" } else { "off" };
    let cases = read_cases(model_name, fa);
    if cases.is_empty() {
        return;
    }
    let inf = session(&model, flash, 1024);
    let mut worst = 0f32;
    let mut greedy_ok = 0;
    let mut failures = Vec::new();
    for case in &cases {
        let mut cache = inf.new_cache().unwrap();
        let logits = inf.forward(&mut cache, &case.tokens, Output::Last, None, &Overrides::NONE).unwrap().remove(0);
        let diff = case.top.iter().map(|&(id, l)| (logits[id as usize] - l).abs()).fold(0.0, f32::max);
        worst = worst.max(diff);
        if diff > 0.05 {
            failures.push(format!("{:?}: top-20 max diff {diff:.4}", case.prompt));
        }
        let mut next = argmax(&logits);
        let mut got = Vec::new();
        for (i, &want) in case.greedy.iter().enumerate() {
            got.push(next);
            if next != want || i + 1 == case.greedy.len() {
                break;
            }
            let l = inf.forward(&mut cache, &[next], Output::Last, None, &Overrides::NONE).unwrap().remove(0);
            next = argmax(&l);
        }
        if got == case.greedy {
            greedy_ok += 1;
        } else {
            failures.push(format!("{:?}: greedy {:?} != reference {:?}", case.prompt, got, case.greedy));
        }
    }
    eprintln!(
        "parity {model_name} fa-{fa}: max |logit diff| over top-20 = {worst:.5}; greedy identical {greedy_ok}/{}",
        cases.len()
    );
    assert!(failures.is_empty(), "{model_name} fa-{fa}:\n{}", failures.join("\n"));
}

#[test]
fn parity_smollm2_fa_on() {
    parity(MODELS[0], true);
}
#[test]
fn parity_smollm2_fa_off() {
    parity(MODELS[0], false);
}
#[test]
fn parity_qwen2_fa_on() {
    parity(MODELS[1], true);
}
#[test]
fn parity_qwen2_fa_off() {
    parity(MODELS[1], false);
}
#[test]
fn parity_gemma3_fa_on() {
    parity(MODELS[2], true);
}
#[test]
fn parity_gemma3_fa_off() {
    parity(MODELS[2], false);
}

/// Whether ggml runs different kernels for one row than for several in the
/// model's layers: llamafile's tinyBLAS (Q4_0/Q5_0/Q8_0, and the f16 K·Q and
/// V·KQ products when flash attention is off) and the repacked GEMM for
/// K-quants take over from the vec_dot kernels at two or more rows. The sums
/// then differ in their last bits, and 24-30 layers of re-quantized
/// activations grow that to tenths. llama.cpp drifts exactly as much
/// (bench/llama-consistency prints both: 0.79 for SmolLM2 with flash
/// attention off, 0.51 for Qwen2.5, 0.96/1.20 for Gemma-3, the same to five
/// decimals). For such models the exact comparison is the argmax at every
/// position, with a loose bound that still catches a wrong mask or cache;
/// SmolLM2 (Q4_1 layers) with flash attention on uses one kernel for both
/// and must agree within 0.02.
fn batch_dependent_kernels(model: &Model, flash_attn: bool) -> bool {
    const ONE_KERNEL: &[u32] = &[0, 1, 3]; // F32, F16, Q4_1
    !flash_attn || model.gguf.tensors.iter().any(|t| t.name.starts_with("blk.") && !ONE_KERNEL.contains(&t.ggml_type))
}

/// Checks two logit vectors of the same position: within 0.02, or for
/// batch-dependent kernels within 1.5 with the argmax flipping only between
/// near-tied tokens.
fn check_same(name: &str, what: &str, strict: bool, a: &[f32], b: &[f32]) -> f32 {
    let d = max_diff(a, b);
    if strict {
        assert!(d <= 0.02, "{name}: {what}: max diff {d}");
    } else {
        assert!(d <= 1.5, "{name}: {what}: max diff {d}");
        // the argmax may flip only between near-tied tokens
        let (ia, ib) = (argmax(a) as usize, argmax(b) as usize);
        assert!(a[ia] - a[ib] <= 2.0 * d, "{name}: {what}: argmax {ia} vs {ib} is not a near-tie (max diff {d})");
    }
    d
}

/// Token sequences of real text for `model`: reference prompts followed by
/// llama.cpp's greedy continuation (so no position is a near-tie of junk),
/// from this kernel variant's files or, on a CPU without its own, another
/// variant's (the text is the same; only the last bits of logits differ), or
/// SmolLM2 ids when there are none.
fn natural_sequences(model: &str, n: usize) -> Vec<Vec<i32>> {
    let mut dirs = vec![reference_dir()];
    if let Ok(entries) = std::fs::read_dir(reference_root()) {
        let mut others: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.join("BUILD").exists()).collect();
        others.sort();
        dirs.extend(others);
    }
    let cases = dirs.iter().map(|d| read_cases_in(d, model, "on")).find(|c| c.len() >= n).unwrap_or_default();
    if cases.len() < n {
        return (0..n).map(|i| SENTENCE[i..SENTENCE.len() - i].to_vec()).collect();
    }
    cases
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, c)| {
            let mut t = c.tokens.clone();
            t.extend(c.greedy.iter().take(12 - 4 * i));
            t
        })
        .collect()
}

const SENTENCE: &[i32] = &[504, 3575, 282, 4649, 314, 7042, 30, 198, 198, 504, 1797, 1918, 553, 253];

/// Cache fed token by token gives the logits of one forward over everything.
#[test]
fn cache_token_by_token_equals_full_forward() {
    for name in MODELS {
        let Some(model) = open(name) else { continue };
        for flash in [true, false] {
            let inf = session(&model, flash, 256);
            let toks = natural_sequences(name, 1).remove(0);
            let mut full_cache = inf.new_cache().unwrap();
            let full = inf.forward(&mut full_cache, &toks, Output::All, None, &Overrides::NONE).unwrap();
            let strict = !batch_dependent_kernels(&model, flash);
            let mut cache = inf.new_cache().unwrap();
            let mut worst = 0f32;
            for (i, &t) in toks.iter().enumerate() {
                let l = inf.forward(&mut cache, &[t], Output::Last, None, &Overrides::NONE).unwrap().remove(0);
                worst = worst.max(check_same(name, &format!("position {i}"), strict, &l, &full[i]));
            }
            eprintln!(
                "{name} flash {flash}: cache token by token vs full forward: max diff {worst:.5} (strict {strict})"
            );
            assert_eq!(cache.n_cached(), toks.len());
        }
    }
}

/// forward_batch of several sequences equals separate forwards.
#[test]
fn batch_equals_separate_forwards() {
    for name in MODELS {
        let Some(model) = open(name) else { continue };
        for flash in [true, false] {
            let inf = session(&model, flash, 256);
            let seqs = natural_sequences(name, 3);
            let mut caches: Vec<KvCache> = seqs.iter().map(|_| inf.new_cache().unwrap()).collect();
            let batched = inf.forward_batch(&mut caches, &seqs, None, &Overrides::NONE).unwrap();
            let strict = !batch_dependent_kernels(&model, flash);
            let mut worst = 0f32;
            for (i, (s, b)) in seqs.iter().zip(&batched).enumerate() {
                let mut c = inf.new_cache().unwrap();
                let single = inf.forward(&mut c, s, Output::Last, None, &Overrides::NONE).unwrap().remove(0);
                worst = worst.max(check_same(name, &format!("sequence {i}"), strict, b, &single));
            }
            // a second step: one more token each, through the same caches
            let next: Vec<Vec<i32>> = seqs.iter().map(|s| vec![s[s.len() / 2]]).collect();
            let batched2 = inf.forward_batch(&mut caches, &next, None, &Overrides::NONE).unwrap();
            for (i, ((s, x), b)) in seqs.iter().zip(&next).zip(&batched2).enumerate() {
                let mut c = inf.new_cache().unwrap();
                let mut all = s.clone();
                all.extend(x);
                let single = inf.forward(&mut c, &all, Output::Last, None, &Overrides::NONE).unwrap().remove(0);
                worst = worst.max(check_same(name, &format!("sequence {i}, step 2"), strict, b, &single));
            }
            eprintln!("{name} flash {flash}: batch vs separate max diff {worst:.5} (strict {strict})");
        }
    }
}

/// After the first call, same-or-smaller inputs allocate no new buffer.
#[test]
fn pool_reuses_its_allocation() {
    let Some(model) = open(MODELS[0]) else { return };
    let inf = session(&model, true, 512);
    let mut pool = inf.new_pool().unwrap();
    assert_eq!(pool.n_allocations(), 0);
    let mut cache = inf.new_cache().unwrap();
    inf.forward(&mut cache, &SENTENCE[..8], Output::Last, Some(&mut pool), &Overrides::NONE).unwrap();
    let after_first = pool.n_allocations();
    assert!(after_first >= 1);
    for len in [8, 3, 1, 5, 8] {
        cache.clear();
        inf.forward(&mut cache, &SENTENCE[..len], Output::Last, Some(&mut pool), &Overrides::NONE).unwrap();
    }
    // the cache growing past 256 cells attends more cells: still no new buffer
    cache.clear();
    for _ in 0..40 {
        inf.forward(&mut cache, &SENTENCE[..8], Output::Last, Some(&mut pool), &Overrides::NONE).unwrap();
    }
    assert_eq!(pool.n_allocations(), after_first, "no new compute buffer for same-or-smaller inputs");
    pool.reset();
    cache.clear();
    inf.forward(&mut cache, &SENTENCE[..2], Output::Last, Some(&mut pool), &Overrides::NONE).unwrap();
    assert_eq!(pool.n_allocations(), after_first + 1);
    assert_eq!(pool.backend_name(), "CPU");
}

#[test]
fn overflow_is_refused_before_computing() {
    let Some(model) = open(MODELS[0]) else { return };
    let inf = session(&model, true, 8);
    let mut cache = inf.new_cache().unwrap();
    inf.forward(&mut cache, &SENTENCE[..6], Output::Last, None, &Overrides::NONE).unwrap();
    let err = inf.forward(&mut cache, &SENTENCE[..3], Output::Last, None, &Overrides::NONE).unwrap_err();
    assert!(matches!(err, Error::KvOverflow { needed: 9, capacity: 8 }), "{err}");
    assert_eq!(cache.n_cached(), 6, "nothing was appended");
    inf.forward(&mut cache, &SENTENCE[..2], Output::Last, None, &Overrides::NONE).unwrap();
    assert_eq!(cache.n_cached(), 8);
    cache.resize(4).unwrap();
    assert_eq!(cache.n_cached(), 4);
    assert!(cache.resize(5).is_err());
    cache.clear();
    assert_eq!(cache.n_cached(), 0);
}

#[test]
fn bad_tokens_are_refused() {
    let Some(model) = open(MODELS[0]) else { return };
    let inf = session(&model, true, 64);
    let mut cache = inf.new_cache().unwrap();
    let err = inf.forward(&mut cache, &[1, 2, 49152], Output::Last, None, &Overrides::NONE).unwrap_err();
    assert!(matches!(err, Error::TokenOutOfRange { pos: Some(2), id: 49152, n_vocab: 49152 }), "{err}");
    assert!(err.to_string().contains("[0, 49152)"));
    let err = inf.forward(&mut cache, &[-1], Output::Last, None, &Overrides::NONE).unwrap_err();
    assert!(matches!(err, Error::TokenOutOfRange { pos: Some(0), id: -1, .. }));
    assert!(inf.forward(&mut cache, &[], Output::Last, None, &Overrides::NONE).is_err());
    let err =
        inf.forward_batch(&mut [inf.new_cache().unwrap()], &[vec![5, 99999]], None, &Overrides::NONE).unwrap_err();
    assert!(matches!(err, Error::TokenOutOfRange { pos: Some(1), .. }));
    assert_eq!(cache.n_cached(), 0);
}

#[test]
fn options_and_backends() {
    let Some(model) = open(MODELS[0]) else { return };
    let err =
        Runner::new(Arc::clone(&model), InferenceOptions { backend: Some("NoSuchGPU".into()), ..Default::default() })
            .err()
            .unwrap();
    assert!(err.to_string().contains("NoSuchGPU") && err.to_string().contains("CPU"), "{err}");
    let inf = Runner::new(Arc::clone(&model), InferenceOptions::default()).unwrap();
    // the default is the best backend: the CPU unless a build adds another
    assert_eq!(inf.backend_name(), crate::engine::ggml::backend::best().unwrap().name);
    assert_eq!(inf.n_ctx(), 4096.min(model.n_ctx_train().unwrap() as usize));
    assert_eq!(inf.n_batch(), 512);
    assert!(inf.flash_attn(), "auto resolves to on for the CPU");
    assert_eq!(inf.n_threads(), physical_cores());
    assert_eq!(inf.n_vocab(), 49152);
    assert_eq!(inf.hparams().n_layer, 30);
}

#[test]
fn forward_all_has_one_row_per_token_and_chunks_agree() {
    let Some(model) = open(MODELS[0]) else { return };
    let opts = InferenceOptions {
        n_threads: Some(2),
        n_ctx: Some(64),
        n_batch: Some(4),
        flash_attn: Some(FlashAttn::Enabled),
        ..Default::default()
    };
    let small_batches = Runner::new(Arc::clone(&model), opts).unwrap();
    let inf = session(&model, true, 64);
    let mut c1 = small_batches.new_cache().unwrap();
    let a = small_batches.forward(&mut c1, SENTENCE, Output::All, None, &Overrides::NONE).unwrap();
    assert_eq!(a.len(), SENTENCE.len());
    let mut c2 = inf.new_cache().unwrap();
    let b = inf.forward(&mut c2, SENTENCE, Output::Last, None, &Overrides::NONE).unwrap();
    assert_eq!(b.len(), 1);
    assert!(max_diff(a.last().unwrap(), &b[0]) <= 0.02);
}

/// Speed of prompt processing (64 tokens on an empty cache) and generation
/// (32 single-token forwards), as llama-bench's pp64/tg32 measure them:
/// `cargo test --release -- --ignored --nocapture bench_pp64_tg32`
/// (LUGH_BENCH_MODEL picks the model file, LUGH_BENCH_THREADS the threads).
#[test]
#[ignore]
fn bench_pp64_tg32() {
    let name = std::env::var("LUGH_BENCH_MODEL").unwrap_or_else(|_| MODELS[0].to_string());
    let Some(model) = open(&name) else { return };
    let threads = std::env::var("LUGH_BENCH_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or_else(physical_cores);
    let opts = InferenceOptions { n_threads: Some(threads), n_ctx: Some(1024), ..Default::default() };
    let inf = Runner::new(Arc::clone(&model), opts).unwrap();
    let n = inf.n_vocab() as i32;
    let prompt: Vec<i32> = (0..64).map(|i| (i * 7919 + 13) % n).collect();
    let mut pool = inf.new_pool().unwrap();
    let (mut pp, mut tg) = (Vec::new(), Vec::new());
    for rep in 0..6 {
        // rep 0 warms up; the others are averaged, as llama-bench does
        let mut cache = inf.new_cache().unwrap();
        let t = std::time::Instant::now();
        inf.forward(&mut cache, &prompt, Output::Last, Some(&mut pool), &Overrides::NONE).unwrap();
        let pp_rate = 64.0 / t.elapsed().as_secs_f64();
        cache.clear();
        inf.forward(&mut cache, &prompt[..1], Output::Last, Some(&mut pool), &Overrides::NONE).unwrap();
        let t = std::time::Instant::now();
        for i in 1..33 {
            inf.forward(&mut cache, &prompt[i..i + 1], Output::Last, Some(&mut pool), &Overrides::NONE).unwrap();
        }
        if rep > 0 {
            pp.push(pp_rate);
            tg.push(32.0 / t.elapsed().as_secs_f64());
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!("lugh {name} threads {threads}: pp64 {:.2} t/s, tg32 {:.2} t/s", mean(&pp), mean(&tg));
}

/// A CPU session's weights are where an adapter's pairs already are:
/// `beside` gives the adapter itself and copies nothing. (Copies beside
/// device weights are checked by t/58 over RPC and t/59 on Vulkan.)
#[test]
fn adapters_need_no_copy_beside_cpu_weights() {
    let Some(model) = open("smollm2-135m-q4_1") else { return };
    let path = model_dir().join("lora/smollm2-135m-q4_1.gguf");
    if !path.exists() {
        eprintln!("skipped: {} is absent", path.display());
        return;
    }
    let adapter = Arc::new(LoraAdapter::load(&path, &model).expect("the adapter loads"));
    let inf = session(&model, false, 64);
    assert!(inf.weights.buffer_type_of("blk.0.attn_q.weight").is_some());
    assert!(inf.weights.buffer_type_of("no.such.weight").is_none());
    let beside = adapter.beside(&inf.weights, inf.placement.cpu).expect("beside");
    assert!(Arc::ptr_eq(&adapter, &beside));
}

/// Debug aid: the top logits for given token ids, to compare with llama.cpp's
/// ref-json on the same prompt: `LUGH_PROBE="model fa(on|off) id,id,..." cargo
/// test --release -- --ignored --nocapture probe_top_logits`.
#[test]
#[ignore]
fn probe_top_logits() {
    let Ok(spec) = std::env::var("LUGH_PROBE") else { return };
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let Some(model) = open(parts[0]) else { return };
    let inf = session(&model, parts[1] == "on", 1024);
    let tokens: Vec<i32> = parts[2].split(',').map(|t| t.parse().unwrap()).collect();
    let mut cache = inf.new_cache().unwrap();
    let logits = inf.forward(&mut cache, &tokens, Output::Last, None, &Overrides::NONE).unwrap().remove(0);
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let top: Vec<String> = ids[..8].iter().map(|&i| format!("[{i},{:.5}]", logits[i])).collect();
    println!("probe top: {}", top.join(","));
}
