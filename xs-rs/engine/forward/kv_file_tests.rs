//! Tests of saved KV caches: the round trip of the bytes (V by position and
//! transposed), the refusals, and every truncation and flipped byte of a
//! small file, on caches filled by hand; then, where the test models are
//! present, that a session continuing from a loaded cache computes exactly
//! what it computes from the cache it saved.
use super::*;
use crate::engine::forward::kv_cache::LayerHeads;
use crate::engine::forward::runner::{FlashAttn, InferenceOptions, Output, Overrides};
use crate::engine::generate::inference::Inference;
use crate::engine::ggml::ops::GGML_TYPE_F16;
use crate::engine::ggml::runtime::Device;
use crate::engine::model::Model;
use std::sync::Arc;

/// A directory of its own under the system's temporary directory, removed
/// with everything in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("lugh-kv-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temporary directory");
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const N_CTX: usize = 20;
const N_VOCAB: usize = 100;

fn layout(v_trans: bool) -> CacheLayout {
    CacheLayout {
        n_layer: 2,
        n_embd_k_gqa: 8,
        n_embd_v_gqa: 6,
        head_dim_k: 4,
        head_dim_v: 3,
        n_head_kv: 2,
        kv_size: 256,
        v_trans,
        v_in_k: false,
        type_k: GGML_TYPE_F16,
        type_v: GGML_TYPE_F16,
        rotations: Vec::new(),
        recurrent: None,
        layer_heads: Vec::new(),
        n_layer_kv: 2,
    }
}

fn empty_cache(layout: CacheLayout) -> KvCache {
    let cpu = Device::by_backend_name("CPU").expect("the CPU backend");
    let bufts = vec![cpu.buffer_type(); layout.n_layer];
    KvCache::new(layout, N_CTX, &bufts).expect("a cache")
}

/// A cache whose first `n` cells hold bytes that differ from cell to cell,
/// channel to channel, layer to layer.
fn filled_cache(v_trans: bool, n: usize) -> KvCache {
    let mut cache = empty_cache(layout(v_trans));
    for il in 0..2 {
        for (p, part) in [Part::K, Part::V].into_iter().enumerate() {
            let len = cache.layout().cells_bytes(il, part, n);
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + il * 31 + p * 101 + 1) as u8).collect();
            cache.write_cells(il, part, n, &data);
        }
    }
    let tokens: Vec<i32> = (0..n as i32).map(|i| (i * 13 + 5) % N_VOCAB as i32).collect();
    cache.advance(&tokens, None);
    cache
}

fn model_id(fingerprint: u64) -> ModelId {
    ModelId { fingerprint, name: "Tiny Test Model".into(), architecture: "llama".into() }
}

fn target(v_trans: bool) -> Target {
    Target { model: model_id(0x1234), layout: layout(v_trans), n_ctx: N_CTX, n_vocab: N_VOCAB }
}

fn load_for(path: &Path, target: &Target) -> Result<KvCache> {
    load(path, target, || Ok(empty_cache(target.layout.clone())))
}

/// Every byte of every layer's K and V (all cells, filled or not).
fn contents(cache: &KvCache) -> Vec<u8> {
    let kv_size = cache.layout().kv_size;
    let mut all = Vec::new();
    for il in 0..cache.n_layer() {
        for part in [Part::K, Part::V] {
            let mut bytes = vec![0u8; cache.layout().cells_bytes(il, part, kv_size)];
            cache.read_cells(il, part, kv_size, &mut bytes);
            all.extend(bytes);
        }
    }
    all
}

#[test]
fn a_loaded_cache_holds_exactly_what_was_saved() {
    let dir = TempDir::new("round-trip");
    for v_trans in [false, true] {
        for n in [0, 1, 5, N_CTX] {
            let saved = filled_cache(v_trans, n);
            let path = dir.file(&format!("cache-{v_trans}-{n}.kv"));
            save(&path, &saved, &model_id(0x1234)).expect("saved");
            let l = layout(v_trans);
            let data: usize = [Part::K, Part::V].iter().map(|&p| l.cells_bytes(0, p, n)).sum::<usize>() * l.n_layer;
            let size = std::fs::metadata(&path).expect("written").len() as usize;
            assert_eq!(size, HEADER_LEN + 4 * n + data + 8, "only the filled cells are written");
            let loaded = load_for(&path, &target(v_trans)).expect("loaded");
            assert_eq!(loaded.tokens(), saved.tokens(), "tokens (v_trans {v_trans}, n {n})");
            assert_eq!(contents(&loaded), contents(&saved), "K/V bytes (v_trans {v_trans}, n {n})");
        }
    }
    let names: Vec<String> =
        std::fs::read_dir(&dir.0).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| n.ends_with(".kv")), "no temporary file is left: {names:?}");
}

/// Layer 0 attends, layer 1 is a delta-net layer (tiny sizes).
fn hybrid_layout() -> CacheLayout {
    CacheLayout {
        recurrent: Some(crate::engine::forward::kv_cache::RecurrentLayout {
            conv_len: 12,
            ssm_len: 8,
            layers: vec![false, true],
        }),
        ..layout(true)
    }
}

/// A hybrid cache holding `n` positions, its recurrent state filled with
/// bytes that depend on `seed`.
fn filled_hybrid(n: usize, seed: u8) -> KvCache {
    let mut cache = empty_cache(hybrid_layout());
    for part in [Part::K, Part::V] {
        let len = cache.layout().cells_bytes(0, part, n);
        cache.write_cells(0, part, n, &(0..len).map(|i| i as u8 ^ seed).collect::<Vec<u8>>());
    }
    let state: Vec<u8> = (0..cache.layer_state_bytes(1)).map(|i| (i as u8).wrapping_mul(3) ^ seed).collect();
    cache.write_layer_state(1, &state);
    cache.advance(&(0..n as i32).collect::<Vec<_>>(), None);
    cache
}

fn state_of(cache: &KvCache) -> Vec<u8> {
    let mut state = Vec::new();
    cache.read_states(&mut state);
    state
}

#[test]
fn a_hybrid_cache_saves_its_recurrent_state() {
    let dir = TempDir::new("hybrid");
    let saved = filled_hybrid(5, 0x5a);
    let path = dir.file("hybrid.kv");
    save(&path, &saved, &model_id(0x1234)).expect("saved");
    let target = Target { model: model_id(0x1234), layout: hybrid_layout(), n_ctx: N_CTX, n_vocab: N_VOCAB };
    let loaded = load_for(&path, &target).expect("loaded");
    assert_eq!(loaded.tokens(), saved.tokens());
    assert_eq!(state_of(&loaded), state_of(&saved), "the recurrent state comes back");
    let l = hybrid_layout();
    let expected = HEADER_LEN
        + 4 * 5
        + l.cells_bytes(0, Part::K, 5)
        + l.cells_bytes(0, Part::V, 5)
        + l.state_bytes(1)
        + CHECKSUM_LEN as usize;
    assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, expected, "K/V of layer 0, the state of layer 1");
    // cut inside the state: named
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 12]).unwrap();
    let err = load_for(&path, &target).err().expect("a cut file is refused").to_string();
    assert!(err.contains("the recurrent state of layer 1"), "{err}");
}

#[test]
fn a_recurrent_state_rolls_back_only_to_checkpoints() {
    let mut cache = filled_hybrid(4, 1);
    let at_4 = state_of(&cache);
    cache.checkpoint();
    let state: Vec<u8> = vec![9; cache.layer_state_bytes(1)];
    cache.write_layer_state(1, &state);
    cache.advance(&[7, 8, 9], None);
    assert_eq!(cache.restorable(7), 7, "its own position");
    assert_eq!(cache.restorable(6), 4, "back to the checkpoint");
    assert_eq!(cache.restorable(3), 0, "before every checkpoint: from the start");
    let err = cache.resize(5).unwrap_err().to_string();
    assert!(err.contains("recurrent") && err.contains("[0, 4, 7]"), "{err}");
    assert_eq!(cache.n_cached(), 7, "a refused rollback changes nothing");
    cache.resize(4).expect("to the checkpoint");
    assert_eq!(cache.n_cached(), 4);
    assert_eq!(state_of(&cache), at_4, "the checkpoint's state is back");
    cache.resize(0).expect("to the start");
    assert!(state_of(&cache).iter().all(|&b| b == 0), "an empty cache's state is zero");
    // an attention-only cache rolls back anywhere
    let mut plain = filled_cache(true, 6);
    assert_eq!(plain.restorable(3), 3);
    plain.resize(3).expect("any position");
}

#[test]
fn transposed_v_keeps_the_first_cells_of_each_channel() {
    // V transposed is [kv_size cells] x [n_embd_v_gqa channels]: element
    // (channel e, cell c) at e * kv_size + c.
    let l = layout(true);
    let mut cache = empty_cache(l.clone());
    let whole: Vec<u8> = (0..l.n_embd_v_gqa * l.kv_size)
        .flat_map(|i| {
            let (e, c) = (i / l.kv_size, i % l.kv_size);
            [e as u8, c as u8]
        })
        .collect();
    cache.write_cells(0, Part::V, l.kv_size, &whole);
    let n = 3;
    let mut first = vec![0u8; l.cells_bytes(0, Part::V, n)];
    cache.read_cells(0, Part::V, n, &mut first);
    let want: Vec<u8> = (0..l.n_embd_v_gqa).flat_map(|e| (0..n).flat_map(move |c| [e as u8, c as u8])).collect();
    assert_eq!(first, want);
}

fn message(r: Result<KvCache>) -> String {
    match r {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_cache_for_another_model_or_setting_is_refused_saying_what_differs() {
    let dir = TempDir::new("refusals");
    let path = dir.file("c.kv");
    save(&path, &filled_cache(true, 5), &model_id(0x1234)).expect("saved");

    let mut other = target(true);
    other.model = ModelId { fingerprint: 0x9999, name: "Other".into(), architecture: "qwen2".into() };
    let m = message(load_for(&path, &other));
    assert!(m.contains("saved for the model 'Tiny Test Model' (llama, fingerprint 0000000000001234)"), "{m}");
    assert!(m.contains("this session runs 'Other' (qwen2, fingerprint 0000000000009999)"), "{m}");
    assert!(m.contains(&path.display().to_string()), "names the file: {m}");

    let mut wider = target(true);
    wider.n_ctx = 40;
    let m = message(load_for(&path, &wider));
    assert!(m.contains("n_ctx 20, and this session has n_ctx 40"), "{m}");

    let m = message(load_for(&path, &target(false)));
    assert!(
        m.contains("saved with flash attention off (V stored transposed), and this session has flash_attn on"),
        "{m}"
    );

    let mut narrow_vocab = target(true);
    narrow_vocab.n_vocab = 10;
    let m = message(load_for(&path, &narrow_vocab));
    assert!(m.contains("outside the model's vocabulary [0, 10)"), "{m}");

    let mut made = false;
    let _ = load(&path, &other, || {
        made = true;
        Ok(empty_cache(layout(true)))
    });
    assert!(!made, "no cache is allocated for a file that does not fit");
}

#[test]
fn every_truncation_and_every_flipped_byte_is_an_error() {
    let dir = TempDir::new("damage");
    let path = dir.file("c.kv");
    save(&path, &filled_cache(false, 4), &model_id(0x1234)).expect("saved");
    let good = std::fs::read(&path).unwrap();
    let t = target(false);
    let damaged = dir.file("damaged.kv");
    for len in 0..good.len() {
        std::fs::write(&damaged, &good[..len]).unwrap();
        let m = message(load_for(&damaged, &t));
        assert!(m.contains("is truncated: the file ends inside"), "cut at {len}: {m}");
    }
    for at in 0..good.len() {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        std::fs::write(&damaged, &bytes).unwrap();
        let m = message(load_for(&damaged, &t));
        let expect = match at {
            0..8 => "not a saved Lugh KV cache (bad magic)",
            8..12 => "format version",
            12..HEADER_LEN => "the header's checksum does not match",
            _ => "the checksum does not match",
        };
        assert!(m.contains(expect), "byte {at} flipped: {m}");
    }
    let mut longer = good.clone();
    longer.push(0);
    std::fs::write(&damaged, &longer).unwrap();
    assert!(message(load_for(&damaged, &t)).contains("1 bytes follow the checksum"));
}

#[test]
fn other_files_and_paths_are_refused() {
    let dir = TempDir::new("paths");
    let t = target(false);
    let m = message(load_for(&dir.file("absent.kv"), &t));
    assert!(m.contains("cannot read") && m.contains("absent.kv") && m.contains("No such file"), "{m}");
    let m = message(load_for(&dir.0, &t));
    assert!(m.contains("it is a directory"), "{m}");
    let gguf = dir.file("model.gguf");
    std::fs::write(&gguf, b"GGUF\x03\0\0\0 and so on, long enough to hold a whole header ............").unwrap();
    assert!(message(load_for(&gguf, &t)).contains("not a saved Lugh KV cache (bad magic)"));
    std::fs::write(&gguf, b"GG").unwrap();
    assert!(message(load_for(&gguf, &t)).contains("bad magic"));

    let mut v3 = std::fs::read({
        let p = dir.file("c.kv");
        save(&p, &filled_cache(false, 2), &model_id(0x1234)).expect("saved");
        p
    })
    .unwrap();
    v3[8..12].copy_from_slice(&4u32.to_le_bytes());
    let newer = dir.file("newer.kv");
    std::fs::write(&newer, &v3).unwrap();
    let m = message(load_for(&newer, &t));
    assert!(m.contains("format version 4, which this Lugh does not read (it reads versions 1 to 3)"), "{m}");

    let cache = filled_cache(false, 2);
    let e = save(&dir.file("no-such-dir/c.kv"), &cache, &model_id(1)).expect_err("no directory");
    assert!(e.to_string().starts_with("cannot write '") && e.to_string().contains("No such file"), "{e}");
    let e = save(&dir.0, &cache, &model_id(1)).expect_err("a directory");
    assert!(e.to_string().contains("it is a directory"), "{e}");
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 3, "no temporary file is left");
}

#[test]
fn long_names_are_cut_at_a_character_boundary() {
    let dir = TempDir::new("names");
    let path = dir.file("c.kv");
    let model = ModelId { fingerprint: 7, name: "é".repeat(200), architecture: "llama".into() };
    save(&path, &filled_cache(false, 1), &model).expect("saved");
    let mut t = target(false);
    t.model.fingerprint = 8;
    let m = message(load_for(&path, &t));
    assert!(m.contains(&format!("'{}' (llama", "é".repeat(80))), "{m}");
}

// --- with a real model ---

fn model_file(name: &str) -> Option<PathBuf> {
    let dir = match std::env::var("LUGH_MODEL_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/lugh/models"),
    };
    let path = dir.join(format!("{name}.gguf"));
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipped: {} is absent", path.display());
        None
    }
}

fn inference(path: &Path, use_mmap: bool, flash: bool, n_ctx: usize) -> Arc<Inference> {
    let model = Arc::new(Model::open(path, use_mmap).expect("model"));
    let options = InferenceOptions {
        n_threads: Some(2),
        n_ctx: Some(n_ctx),
        flash_attn: Some(if flash { FlashAttn::Enabled } else { FlashAttn::Disabled }),
        ..Default::default()
    };
    Arc::new(Inference::new(model, options).expect("session"))
}

#[test]
fn a_session_continues_from_a_loaded_cache_as_from_the_saved_one() {
    let Some(path) = model_file("smollm2-135m-q4_1") else {
        return;
    };
    let dir = TempDir::new("smollm2");
    let prompt = [6403, 1980, 253, 655, 28, 260, 2240, 282];
    for flash in [false, true] {
        let first = inference(&path, true, flash, 256);
        let cache = first.new_cache().expect("cache");
        first.forward(&prompt, Some(&cache), None, Output::Last, &Overrides::NONE).expect("prefill");
        let file = dir.file(&format!("fa-{flash}.kv"));
        cache.save(&file).expect("saved");
        // another model object, read without mmap: the same file, the same fingerprint
        let second = inference(&path, false, flash, 256);
        let loaded = second.load_cache(&file).expect("loaded");
        assert_eq!(loaded.with(|kv| Ok(kv.tokens().to_vec())).unwrap(), prompt);
        for next in [[504], [3575]] {
            let a = first.forward(&next, Some(&cache), None, Output::Last, &Overrides::NONE).expect("continued");
            let b = second.forward(&next, Some(&loaded), None, Output::Last, &Overrides::NONE).expect("continued");
            assert!(a[0] == b[0], "flash {flash}: the same logits, bit for bit");
        }
        let other_ctx = inference(&path, true, flash, 512);
        assert!(matches!(other_ctx.load_cache(&file), Err(Error::CacheMismatch { .. })));
        let other_fa = inference(&path, true, !flash, 256);
        assert!(matches!(other_fa.load_cache(&file), Err(Error::CacheMismatch { .. })));
    }
}

#[test]
fn models_have_different_fingerprints() {
    let (Some(smollm2), Some(qwen)) = (model_file("smollm2-135m-q4_1"), model_file("qwen2.5-coder-0.5b-q4_k_m")) else {
        return;
    };
    let a = Model::open(&smollm2, true).unwrap().fingerprint().unwrap();
    assert_eq!(Model::open(&smollm2, false).unwrap().fingerprint().unwrap(), a, "mapped or read");
    assert_ne!(Model::open(&qwen, true).unwrap().fingerprint().unwrap(), a);
}

#[test]
fn a_shared_kv_layer_keeps_and_saves_nothing() {
    // layer 1 reads layer 0's cache (Gemma 4's shared-KV layers)
    let shared = CacheLayout { n_layer_kv: 1, ..layout(true) };
    let mut saved = empty_cache(shared.clone());
    let n = 3;
    for part in [Part::K, Part::V] {
        let len = shared.cells_bytes(0, part, n);
        saved.write_cells(0, part, n, &(0..len).map(|i| (i as u8).wrapping_mul(7)).collect::<Vec<u8>>());
    }
    saved.advance(&[4, 5, 6], None);
    assert!(saved.size_bytes() < empty_cache(layout(true)).size_bytes(), "no K/V for layer 1");
    let dir = TempDir::new("shared");
    let path = dir.file("shared.kv");
    save(&path, &saved, &model_id(0x77)).expect("saved");
    let expected = HEADER_LEN
        + 4 * n
        + shared.cells_bytes(0, Part::K, n)
        + shared.cells_bytes(0, Part::V, n)
        + CHECKSUM_LEN as usize;
    assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, expected, "K/V of layer 0 only");
    let target = Target { model: model_id(0x77), layout: shared.clone(), n_ctx: N_CTX, n_vocab: N_VOCAB };
    let loaded = load_for(&path, &target).expect("loaded");
    assert_eq!(loaded.tokens(), saved.tokens());
    for part in [Part::K, Part::V] {
        let len = shared.cells_bytes(0, part, n);
        let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
        saved.read_cells(0, part, n, &mut a);
        loaded.read_cells(0, part, n, &mut b);
        assert_eq!(a, b, "layer 0's cells come back");
    }
}

/// The file at `path` rewritten as an earlier writer of format `version`
/// would have written it (version 1: 0 where V's type is now), both
/// checksums made right again; the new file's path.
fn as_version(dir: &TempDir, path: &Path, version: u32) -> PathBuf {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    if version == 1 {
        bytes[52..56].copy_from_slice(&0u32.to_le_bytes());
    }
    let header_sum = crate::engine::xxhash::xxh64(&bytes[..HEADER_SUM_AT]);
    bytes[HEADER_SUM_AT..HEADER_LEN].copy_from_slice(&header_sum.to_le_bytes());
    let end = bytes.len() - CHECKSUM_LEN as usize;
    let sum = crate::engine::xxhash::xxh64(&bytes[..end]);
    bytes[end..].copy_from_slice(&sum.to_le_bytes());
    let older = dir.file(&format!("v{version}.kv"));
    std::fs::write(&older, &bytes).unwrap();
    older
}

#[test]
fn a_version_1_file_loads_as_f16_keys_and_values() {
    let dir = TempDir::new("v1");
    let saved = filled_cache(false, 5);
    let path = dir.file("v3.kv");
    save(&path, &saved, &model_id(0x1234)).expect("saved");
    for version in [1, 2] {
        let loaded = load_for(&as_version(&dir, &path, version), &target(false)).expect("an older file loads");
        assert_eq!(contents(&loaded), contents(&saved), "the same keys and values (version {version})");
    }
}

#[test]
fn layers_of_other_heads_keep_their_own_width() {
    // layer 1 has one KV head of 4 (Gemma 4's full layers beside its
    // sliding ones): its rows are 4 wide, and V transposed keeps 6 channels
    for v_trans in [false, true] {
        let heads = |n_head_kv| LayerHeads { head_dim_k: 4, head_dim_v: 3, n_head_kv };
        let narrow = CacheLayout { layer_heads: vec![heads(2), heads(1)], ..layout(v_trans) };
        assert_eq!((narrow.width(1, Part::K), narrow.width(1, Part::V)), (4, if v_trans { 6 } else { 3 }));
        assert!(narrow.has_narrow_layers() && !layout(v_trans).has_narrow_layers());
        let mut saved = empty_cache(narrow.clone());
        assert!(saved.size_bytes() < empty_cache(layout(v_trans)).size_bytes(), "less than the widest rows");
        let n = 3;
        for il in 0..2 {
            for part in [Part::K, Part::V] {
                let len = narrow.cells_bytes(il, part, n);
                saved.write_cells(il, part, n, &(0..len).map(|i| (i * 5 + il) as u8).collect::<Vec<u8>>());
            }
        }
        saved.advance(&[4, 5, 6], None);
        let dir = TempDir::new("narrow");
        let path = dir.file("narrow.kv");
        save(&path, &saved, &model_id(0x77)).expect("saved");
        let target = Target { model: model_id(0x77), layout: narrow.clone(), n_ctx: N_CTX, n_vocab: N_VOCAB };
        let loaded = load_for(&path, &target).expect("loaded");
        assert_eq!(contents(&loaded), contents(&saved));
        // before format 3 such layers were saved padded: refused, not misread
        let m = message(load_for(&as_version(&dir, &path, 2), &target));
        assert!(m.contains("format version 2 by an earlier Lugh") && m.contains("save the cache anew"), "{m}");
    }
}
