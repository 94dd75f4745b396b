//! Golden tests against llama.cpp b11434: its test vectors
//! (ggml-vocab-NAME.gguf.inp/.out) and the reference token files. They skip
//! (with a note on stderr) when the model files are absent.
use super::*;
use crate::engine::model::Model;
use std::path::PathBuf;

fn model_dir() -> PathBuf {
    match std::env::var_os("LUGH_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/lugh/models"),
    }
}

fn reference_dir() -> PathBuf {
    match std::env::var_os("LUGH_REFERENCE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/llamacpp-b11434"),
    }
}

fn load(file: &str) -> Option<Vocab> {
    let path = model_dir().join(file);
    if !path.exists() {
        eprintln!("skipping: {} not found", path.display());
        return None;
    }
    let model = Model::open(&path, true).unwrap();
    Some(Vocab::from_gguf(&model.gguf).unwrap())
}

/// The prompt and ids of one line `{"prompt":"...","tokens":[...]}`.
fn parse_jsonl_line(line: &str) -> (String, Vec<i32>) {
    let rest = line.split_once("\"prompt\":\"").expect("prompt").1;
    let mut prompt = String::new();
    let mut chars = rest.chars();
    let mut pending_high: Option<u32> = None;
    loop {
        let c = chars.next().expect("unterminated prompt");
        match c {
            '"' => break,
            '\\' => match chars.next().unwrap() {
                'n' => prompt.push('\n'),
                't' => prompt.push('\t'),
                'r' => prompt.push('\r'),
                'b' => prompt.push('\u{8}'),
                'f' => prompt.push('\u{c}'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let v = u32::from_str_radix(&hex, 16).unwrap();
                    if (0xD800..0xDC00).contains(&v) {
                        pending_high = Some(v);
                    } else if let (Some(h), true) = (pending_high.take(), (0xDC00..0xE000).contains(&v)) {
                        prompt.push(char::from_u32(0x10000 + ((h - 0xD800) << 10) + (v - 0xDC00)).unwrap());
                    } else {
                        prompt.push(char::from_u32(v).unwrap());
                    }
                }
                other => prompt.push(other),
            },
            c => prompt.push(c),
        }
    }
    let ids = line.split_once("\"tokens\":[").expect("tokens").1.split(']').next().unwrap();
    let ids = ids.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().unwrap()).collect();
    (prompt, ids)
}

/// Checks every line of tokens.NAME.{plain,special}.jsonl; returns (ok, total).
fn check_reference(vocab: &Vocab, name: &str) -> (usize, usize) {
    let (mut ok, mut total) = (0, 0);
    for (mode, parse_special) in [("plain", false), ("special", true)] {
        let path = reference_dir().join(format!("tokens.{name}.{mode}.jsonl"));
        let Ok(content) = std::fs::read_to_string(&path) else {
            eprintln!("skipping: {} not found", path.display());
            continue;
        };
        for line in content.lines().filter(|l| !l.trim().is_empty()) {
            let (prompt, want) = parse_jsonl_line(line);
            let got = vocab.encode(&prompt, false, parse_special);
            total += 1;
            if got == want {
                ok += 1;
            } else {
                eprintln!("{name} {mode} {prompt:?}\n  want {want:?}\n  got  {got:?}");
            }
        }
    }
    (ok, total)
}

/// Checks llama.cpp's own vectors: cases split by "\n__ggml_vocab_test__\n",
/// one line of ids per case, no BOS, no special-token parsing.
fn check_vectors(vocab: &Vocab, file: &str) -> (usize, usize) {
    let inp = std::fs::read(model_dir().join(format!("{file}.inp"))).unwrap();
    let out = std::fs::read_to_string(model_dir().join(format!("{file}.out"))).unwrap();
    let sep = b"\n__ggml_vocab_test__\n";
    let mut cases = vec![];
    let mut pos = 0;
    while pos < inp.len() {
        match memchr::memmem::find(&inp[pos..], sep) {
            Some(at) => {
                cases.push(&inp[pos..pos + at]);
                pos += at + sep.len();
            }
            None => {
                cases.push(&inp[pos..]);
                break;
            }
        }
    }
    let expected: Vec<Vec<i32>> =
        out.lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect()).collect();
    assert_eq!(cases.len(), expected.len(), "{file}: case count");
    let mut ok = 0;
    for (case, want) in cases.iter().zip(&expected) {
        let got = vocab.encode_bytes(case, EncodeOptions::default());
        if &got == want {
            ok += 1;
        } else {
            eprintln!("{file} {:?}\n  want {want:?}\n  got  {got:?}", String::from_utf8_lossy(case));
        }
    }
    (ok, cases.len())
}

#[test]
fn llama_cpp_test_vectors() {
    for name in ["llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3", "qwen35", "deepseek-llm", "gemma-4"] {
        let file = format!("ggml-vocab-{name}.gguf");
        let Some(vocab) = load(&file) else { continue };
        let (ok, total) = check_vectors(&vocab, &file);
        eprintln!("{file}: {ok}/{total} test vectors identical");
        assert_eq!(ok, total, "{file}");
    }
}

/// The vocabularies of the reference files: (name in the file names, model file).
const REFERENCE_VOCABS: &[(&str, &str)] = &[
    ("gpt-2", "ggml-vocab-gpt-2.gguf"),
    ("llama-bpe", "ggml-vocab-llama-bpe.gguf"),
    ("llama-spm", "ggml-vocab-llama-spm.gguf"),
    ("phi-3", "ggml-vocab-phi-3.gguf"),
    ("qwen2", "ggml-vocab-qwen2.gguf"),
    ("qwen35", "ggml-vocab-qwen35.gguf"),
    ("deepseek-llm", "ggml-vocab-deepseek-llm.gguf"),
    ("gemma-4", "ggml-vocab-gemma-4.gguf"),
    ("smollm2-135m-q4_1", "smollm2-135m-q4_1.gguf"),
    ("qwen2.5-coder-0.5b-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m.gguf"),
    ("gemma3-270m-q4_k_m", "gemma3-270m-q4_k_m.gguf"),
];

#[test]
fn reference_token_files() {
    for &(name, file) in REFERENCE_VOCABS {
        let Some(vocab) = load(file) else { continue };
        let (ok, total) = check_reference(&vocab, name);
        eprintln!("tokens.{name}: {ok}/{total} identical");
        assert_eq!(ok, total, "{name}");
    }
}

#[test]
fn decode_inverts_encode() {
    let texts = [
        "Hello world",
        " Hello  world  ",
        "tabs\tand\nnewlines\n\n",
        "emoji 🦙🚀 👩‍👩‍👧 done",
        "नमस्ते दुनिया ภาษาไทย مرحبا 日本語",
        "<|im_start|>user\nhi<|im_end|>",
        "\u{1}\u{7f} ctrl\r\n",
        "",
    ];
    for file in [
        "ggml-vocab-gpt-2.gguf",
        "ggml-vocab-qwen2.gguf",
        "ggml-vocab-llama-spm.gguf",
        "ggml-vocab-phi-3.gguf",
        "ggml-vocab-qwen35.gguf",
        "ggml-vocab-deepseek-llm.gguf",
        "ggml-vocab-gemma-4.gguf",
    ] {
        let Some(vocab) = load(file) else { continue };
        for text in texts {
            let ids = vocab.encode(text, vocab.add_bos_default(), false);
            assert_eq!(String::from_utf8(vocab.decode(&ids, false).unwrap()).unwrap(), text, "{file}");
        }
    }
}

#[test]
fn out_of_range_ids_are_errors() {
    let Some(vocab) = load("ggml-vocab-gpt-2.gguf") else {
        return;
    };
    let err = vocab.decode(&[1, 2, 50257], false).unwrap_err().to_string();
    assert_eq!(err, "token id 50257 at position 2 is out of range [0, 50257)");
    assert!(vocab.token_to_piece(-1, false).is_err());
    assert_eq!(vocab.token_to_piece(50256, false).unwrap(), b"");
    assert_eq!(vocab.token_to_piece(50256, true).unwrap(), b"<|endoftext|>");
    assert!(vocab.is_eog(50256));
}

/// The ids of `"key":[...]` in a line.
fn ids_field(line: &str, key: &str) -> Vec<i32> {
    let list = line.split_once(&format!("\"{key}\":[")).expect(key).1.split(']').next().unwrap();
    list.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

fn hex_field(line: &str) -> Vec<u8> {
    let hex = line.split_once("\"hex\":\"").expect("hex").1.split('"').next().unwrap();
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

/// t/data/tokenizer-golden: llama.cpp's ids for hard cases (scripts, emoji
/// sequences, whitespace, control characters, look-alikes, invalid UTF-8).
#[test]
fn golden_hard_cases() {
    for &(name, file) in REFERENCE_VOCABS {
        let Some(vocab) = load(file) else { continue };
        let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("t/data/tokenizer-golden/{name}.jsonl"));
        let content = std::fs::read_to_string(golden).unwrap();
        let (mut ok, mut total) = (0, 0);
        for line in content.lines() {
            let text = hex_field(line);
            for (key, parse_special) in [("plain", false), ("special", true)] {
                let want = ids_field(line, key);
                let got = vocab.encode_bytes(&text, EncodeOptions { parse_special, ..Default::default() });
                total += 1;
                if got == want {
                    ok += 1;
                } else {
                    eprintln!("{name} {key} {:?}\n  want {want:?}\n  got  {got:?}", String::from_utf8_lossy(&text));
                }
            }
        }
        eprintln!("golden {name}: {ok}/{total} identical");
        assert_eq!(ok, total, "{name}");
    }
}
