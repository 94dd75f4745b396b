//! Building a `Vocab` from GGUF metadata, following llama.cpp's
//! `llama_vocab::impl::load`: token attributes from the token types, special
//! ids (file values over per-algorithm defaults), the end-of-generation set
//! and the tokens llama.cpp recognises by their text, the special-token
//! order, and the per-model strip attributes.
use super::pretokenize::{self, ByteMap, PreTokenizer};
use super::special::{SpecialToken, SpecialTokens};
use super::{attr, bpe, id_map, wpm, BpeModel, Kind, SpecialIds, Texts, Vocab};
use crate::engine::model::gguf::{Array, Gguf};
use crate::engine::{Error, Result};

/// Texts that mark a token as end-of-turn when the file names no EOT id,
/// in order of preference.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Texts of fill-in-the-middle tokens, per role, when the file names none.
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts of tokens that end generation (llama.cpp's list).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Token types in GGUF (`llama_token_type`) → attribute bits.
fn attr_of_type(t: i64) -> u16 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0,
    }
}

/// The longest token text accepted, in bytes (the longest in the vocabularies
/// of GPT-2, Llama 3 and Qwen 2 is 256: runs of spaces).
const MAX_TOKEN_BYTES: usize = 1024;

fn describe_value(v: &crate::engine::model::gguf::Value) -> String {
    match v.as_i64() {
        Some(i) => i.to_string(),
        None => format!("a {}", v.value_type().name()),
    }
}

fn corrupt(gguf: &Gguf, what: String) -> Error {
    Error::Corrupt { path: gguf.path.clone(), what }
}

/// The vocabulary of a GGUF file, as llama.cpp's llama_vocab::load builds it.
pub fn build(gguf: &Gguf) -> Result<Vocab> {
    let (model_name, is_spm, tokens) = algorithm(gguf)?;
    let is_wpm = model_name == "bert";
    let n = tokens.len();
    // A gemma4 tokenizer model is BPE with Gemma 4's pre-tokenizer, whatever
    // tokenizer.ggml.pre says.
    let pre_raw = if model_name == "gemma4" { Some("gemma4") } else { gguf.get_str("tokenizer.ggml.pre") };
    let pre_spec = if is_spm || is_wpm { None } else { Some(pretokenize::find_spec(pre_raw, &gguf.path)?) };
    let scores = scores(gguf, n)?;
    let mut attrs = token_types(gguf, n)?;
    let (texts, ids) = token_texts(gguf, tokens)?;
    let id_of = |text: &str| ids.get(text.as_bytes()).copied();

    let (mut sp, mut fim) = special_ids(gguf, n, &model_name)?;
    // WordPiece: adding special tokens always puts CLS (BOS) first and SEP
    // last, whatever the file's flags (llama.cpp's WPM tokenize)
    let add_bos =
        gguf.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(is_spm || pre_spec.is_some_and(|s| s.add_bos))
            || pre_spec.is_some_and(|s| s.always_add_bos)
            || is_wpm;
    let add_eos = gguf.get_bool("tokenizer.ggml.add_eos_token").unwrap_or(false) || is_wpm;
    let add_space_prefix = is_spm && gguf.get_bool("tokenizer.ggml.add_space_prefix").unwrap_or(true);
    detect_by_text(&mut sp, &mut fim, &mut attrs, &id_of);
    // Control tokens named "unused…" are unused.
    for (i, a) in attrs.iter_mut().enumerate() {
        if *a & attr::CONTROL != 0 && texts.get(i).windows(6).any(|w| w == b"unused") {
            *a |= attr::UNUSED;
        }
    }
    let eog = end_of_generation(&sp, &fim, &texts, &mut attrs, &id_of);
    let suppress = suppress_tokens(gguf, n)?;

    // Special tokens, longest first (ties by id, where llama.cpp's unstable
    // sort leaves the order unspecified).
    let mut special_ids: Vec<usize> =
        (0..n).filter(|&i| attrs[i] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0).collect();
    special_ids.sort_by_key(|&i| std::cmp::Reverse(texts.get(i).len()));
    let byte_map = ByteMap::new();
    let escaped_spaces = is_spm || is_wpm || pre_spec.is_some_and(|s| s.escape_spaces);
    let pieces = render_pieces(&texts, &attrs, escaped_spaces, &byte_map);
    strip_attributes(gguf, pre_raw.unwrap_or_default(), &special_ids, &mut attrs, &id_of);
    let special_tokens = SpecialTokens::new(
        special_ids
            .iter()
            .map(|&i| SpecialToken {
                id: i as i32,
                text: texts.get(i).into(),
                needs_parse_special: attrs[i] & (attr::CONTROL | attr::UNKNOWN) != 0,
                lstrip: attrs[i] & attr::LSTRIP != 0,
                rstrip: attrs[i] & attr::RSTRIP != 0,
            })
            .collect(),
    );

    let kind = if is_spm {
        let mut byte_tokens = Box::new([None; 256]);
        for b in 0..=255u8 {
            byte_tokens[b as usize] = id_of(&format!("<0x{b:02X}>")).or_else(|| ids.get(&[b][..]).copied());
        }
        Kind::Spm { add_space_prefix, byte_tokens, joined_before_space: joined_before_space(&texts) }
    } else if is_wpm {
        // BERT's normaliser: lower case unless the file says otherwise, and
        // accents stripped as lower case is, unless the file says otherwise
        let lowercase = gguf.get_bool("tokenizer.ggml.normalizer.lowercase").unwrap_or(true);
        let strip_accents = gguf.get_bool("tokenizer.ggml.normalizer.strip_accents").unwrap_or(lowercase);
        let max_token_len = (0..n).map(|i| texts.get(i).len()).max().unwrap_or(0);
        Kind::Wpm(Box::new(wpm::WordPiece::new(lowercase, strip_accents, max_token_len)))
    } else {
        let spec = pre_spec.expect("BPE has a pre-tokenizer");
        let merge_lines = gguf.get_str_array("tokenizer.ggml.merges").ok_or_else(|| {
            corrupt(gguf, "tokenizer.ggml.merges (a list of strings) is missing for a BPE vocabulary".into())
        })?;
        let merges = bpe::Merges::new(n, |t| ids.get(t).copied(), merge_lines, spec.byte_encode.then_some(&byte_map));
        let mut byte_tokens = Box::new([None; 256]);
        if !spec.byte_encode {
            for b in 0..=255u8 {
                byte_tokens[b as usize] = id_of(&format!("<0x{b:02X}>"));
            }
        }
        Kind::Bpe(Box::new(BpeModel {
            pre_name: pre_raw.unwrap_or("default").to_string(),
            pre: PreTokenizer::new(spec)?,
            merges,
            bytes: byte_map,
            ignore_merges: spec.ignore_merges,
            byte_encode: spec.byte_encode,
            escape_spaces: spec.escape_spaces,
            whole_newline_words: spec.whole_newline_words,
            byte_tokens,
        }))
    };

    Ok(Vocab {
        kind,
        model_name,
        texts,
        scores,
        attrs,
        ids,
        pieces,
        special_tokens,
        special_ids: sp,
        eog,
        add_bos,
        add_eos,
        suppress,
    })
}

/// `tokenizer.ggml.suppress_tokens`: ids the model must never produce (an
/// int32 array, as llama.cpp requires; ids outside the vocabulary dropped).
fn suppress_tokens(gguf: &Gguf, n: usize) -> Result<Vec<i32>> {
    match gguf.get_array("tokenizer.ggml.suppress_tokens") {
        None => Ok(Vec::new()),
        Some(Array::I32(ids)) => Ok(ids.iter().copied().filter(|&id| id >= 0 && (id as usize) < n).collect()),
        Some(a) => Err(corrupt(
            gguf,
            format!("tokenizer.ggml.suppress_tokens must be an array of int32, not of {}", a.element_type().name()),
        )),
    }
}

/// The tokenizer model's name, whether it is SentencePiece (else BPE or
/// WordPiece), and
/// the token texts.
fn algorithm(gguf: &Gguf) -> Result<(String, bool, &[String])> {
    let model_name = gguf.get_str("tokenizer.ggml.model").unwrap_or_default().to_string();
    let tokens = gguf.get_str_array("tokenizer.ggml.tokens");
    let (Some(tokens), false) = (tokens, matches!(model_name.as_str(), "" | "no_vocab" | "none")) else {
        return Err(Error::NoVocabulary { path: gguf.path.clone() });
    };
    let is_spm = match model_name.as_str() {
        "llama" => true,
        "gpt2" | "gemma4" | "bert" => false,
        other => {
            return Err(Error::UnsupportedTokenizer {
                path: gguf.path.clone(),
                what: format!(
                    "tokenizer model '{other}' (tokenizer.ggml.model) is not supported; supported: llama (SentencePiece), gpt2 (byte-level BPE), gemma4 (BPE over UTF-8), bert (WordPiece)"
                ),
            })
        }
    };
    let n = tokens.len();
    if n == 0 || n > i32::MAX as usize {
        return Err(corrupt(gguf, format!("tokenizer.ggml.tokens has {n} entries")));
    }
    Ok((model_name, is_spm, tokens))
}

/// One score per token (0 when the file has none).
fn scores(gguf: &Gguf, n: usize) -> Result<Vec<f32>> {
    match gguf.get_array("tokenizer.ggml.scores") {
        None => Ok(vec![0.0; n]),
        Some(a @ (Array::F32(_) | Array::I32(_))) if a.len() >= n => {
            let mut v = a.to_f32_vec().expect("numeric array");
            v.truncate(n);
            Ok(v)
        }
        Some(a) => Err(corrupt(
            gguf,
            format!("tokenizer.ggml.scores has {} entries of type {} for {n} tokens", a.len(), a.element_type().name()),
        )),
    }
}

/// Each token's attribute bits from its type (normal when the file has none).
fn token_types(gguf: &Gguf, n: usize) -> Result<Vec<u16>> {
    match gguf.get_array("tokenizer.ggml.token_type") {
        None => Ok(vec![attr::NORMAL; n]),
        Some(a @ Array::I32(_)) if a.len() >= n => Ok((0..n).map(|i| attr_of_type(a.int_at(i).unwrap_or(0))).collect()),
        Some(a) => Err(corrupt(
            gguf,
            format!(
                "tokenizer.ggml.token_type has {} entries of type {} for {n} tokens",
                a.len(),
                a.element_type().name()
            ),
        )),
    }
}

/// The token texts and the map from text to id.
fn token_texts(gguf: &Gguf, tokens: &[String]) -> Result<(Texts, super::IdMap)> {
    if let Some((i, t)) = tokens.iter().enumerate().find(|(_, t)| t.len() > MAX_TOKEN_BYTES) {
        return Err(corrupt(
            gguf,
            format!(
                "tokenizer.ggml.tokens: token {i} is {} bytes long (the limit is {MAX_TOKEN_BYTES}; real vocabularies stay under 300)",
                t.len()
            ),
        ));
    }
    let mut texts = Texts::default();
    let mut ids = id_map(tokens.len());
    for (i, token) in tokens.iter().enumerate() {
        let text: std::borrow::Cow<[u8]> =
            if token.is_empty() { format!("[EMPTY_{i}]").into_bytes().into() } else { token.as_bytes().into() };
        texts.push(&text);
        // A repeated text maps to its last id, as llama.cpp's map does.
        ids.insert(text.into_owned().into_boxed_slice(), i as i32);
    }
    Ok((texts, ids))
}

/// The fill-in-the-middle tokens (ends of generation when present).
#[derive(Default)]
struct Fim {
    pre: Option<i32>,
    suf: Option<i32>,
    mid: Option<i32>,
    pad: Option<i32>,
    rep: Option<i32>,
    sep: Option<i32>,
}

/// Special ids: per-tokenizer-model defaults, then the file's values.
fn special_ids(gguf: &Gguf, n: usize, model_name: &str) -> Result<(SpecialIds, Fim)> {
    let in_range = |id: i64| (0..n as i64).contains(&id).then_some(id as i32);
    let mut sp = match model_name {
        "llama" => SpecialIds { bos: in_range(1), eos: in_range(2), unk: in_range(0), ..Default::default() },
        "gpt2" => SpecialIds { bos: in_range(11), eos: in_range(11), ..Default::default() },
        "bert" => SpecialIds {
            bos: in_range(101),
            unk: in_range(100),
            sep: in_range(102),
            pad: in_range(0),
            mask: in_range(103),
            ..Default::default()
        },
        _ => SpecialIds::default(),
    };
    let mut fim = Fim::default();
    // A special id in the file is -1 (none; u32::MAX as some writers store
    // it) or a token of the vocabulary: anything else is refused, so that
    // no id the model could be fed or stop on lies outside it.
    let file_id = |key: &str| -> Result<Option<i32>> {
        let name = format!("tokenizer.ggml.{key}");
        match gguf.get(&name) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(-1 | 0xFFFF_FFFF) => Ok(None),
                Some(id) if (0..n as i64).contains(&id) => Ok(Some(id as i32)),
                _ => Err(corrupt(
                    gguf,
                    format!("{name} is {}, not a token id in [0, {n}) or -1 (none)", describe_value(v)),
                )),
            },
        }
    };
    // Each slot's keys in order; a later key wins (the older names of the
    // first three fill-in-the-middle ids come last, as in llama.cpp).
    let one = |key: &'static str| vec![key];
    for (keys, slot) in [
        (one("bos_token_id"), &mut sp.bos),
        (one("eos_token_id"), &mut sp.eos),
        (one("eot_token_id"), &mut sp.eot),
        (one("eom_token_id"), &mut sp.eom),
        (one("unknown_token_id"), &mut sp.unk),
        (one("seperator_token_id"), &mut sp.sep),
        (one("padding_token_id"), &mut sp.pad),
        (one("mask_token_id"), &mut sp.mask),
        (vec!["fim_pre_token_id", "prefix_token_id"], &mut fim.pre),
        (vec!["fim_suf_token_id", "suffix_token_id"], &mut fim.suf),
        (vec!["fim_mid_token_id", "middle_token_id"], &mut fim.mid),
        (one("fim_pad_token_id"), &mut fim.pad),
        (one("fim_rep_token_id"), &mut fim.rep),
        (one("fim_sep_token_id"), &mut fim.sep),
    ] {
        for key in keys {
            if let Some(id) = file_id(key)? {
                *slot = Some(id);
            }
        }
    }
    Ok((sp, fim))
}

/// Special tokens the file does not name, recognised by their text; they
/// become control tokens.
fn detect_by_text(sp: &mut SpecialIds, fim: &mut Fim, attrs: &mut [u16], id_of: &dyn Fn(&str) -> Option<i32>) {
    for (slot, candidates) in [
        (&mut sp.eot, EOT_TEXTS),
        (&mut sp.eom, &["<|eom_id|>"][..]),
        (&mut fim.pre, FIM_PRE_TEXTS),
        (&mut fim.suf, FIM_SUF_TEXTS),
        (&mut fim.mid, FIM_MID_TEXTS),
        (&mut fim.pad, FIM_PAD_TEXTS),
        (&mut fim.rep, FIM_REP_TEXTS),
        (&mut fim.sep, FIM_SEP_TEXTS),
    ] {
        if slot.is_none() {
            if let Some(id) = candidates.iter().find_map(|t| id_of(t)) {
                *slot = Some(id);
                attrs[id as usize] |= attr::CONTROL;
            }
        }
    }
}

/// The end-of-generation ids, sorted, with llama.cpp's per-model exceptions.
fn end_of_generation(
    sp: &SpecialIds,
    fim: &Fim,
    texts: &Texts,
    attrs: &mut [u16],
    id_of: &dyn Fn(&str) -> Option<i32>,
) -> Vec<i32> {
    let mut eog: Vec<i32> = [fim.pad, fim.rep, fim.sep].into_iter().flatten().collect();
    for text in EOG_TEXTS {
        if let Some(id) = id_of(text) {
            eog.push(id);
            attrs[id as usize] |= attr::CONTROL;
        }
    }
    // gpt-oss: these are always rendered.
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = id_of(text) {
            attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend([sp.eos, sp.eot, sp.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();
    let position = |eog: &[i32], text: &str| eog.iter().position(|&id| texts.get(id as usize) == text.as_bytes());
    let has = |eog: &[i32], text: &str| position(eog, text).is_some();
    // Harmony and Solar-Open end turns with <|end|> but do not stop on it.
    let has_call = has(&eog, "<|call|>") || has(&eog, "<|calls|>");
    if has(&eog, "<|end|>") && has_call && (has(&eog, "<|return|>") || has(&eog, "<|flush|>")) {
        let end = position(&eog, "<|end|>").expect("present");
        attrs[eog.remove(end) as usize] = attr::USER_DEFINED;
    }
    // Where </s> is an ordinary token (Gemma 4, PLaMo).
    if (has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>")) && has(&eog, "</s>") {
        let s = position(&eog, "</s>").expect("present");
        attrs[eog.remove(s) as usize] = attr::NORMAL;
    }
    eog
}

/// Per-model strip attributes (llama.cpp sets these by name).
fn strip_attributes(
    gguf: &Gguf,
    pre_text: &str,
    special_ids: &[usize],
    attrs: &mut [u16],
    id_of: &dyn Fn(&str) -> Option<i32>,
) {
    let name = gguf.get_str("general.name").unwrap_or_default().to_ascii_lowercase();
    let arch = gguf.get_str("general.architecture").unwrap_or_default();
    let set = |attrs: &mut [u16], text: &str, bit: u16, on: bool| {
        if let Some(id) = id_of(text) {
            let a = &mut attrs[id as usize];
            *a = if on { *a | bit } else { *a & !bit };
        }
    };
    if ["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"].iter().any(|p| pre_text.contains(p))
        || ["nomic-bert-moe", "jina-bert-v3"].iter().any(|a| arch.contains(a))
    {
        set(attrs, "<mask>", attr::LSTRIP, true);
    } else if name.contains("phi-3") || name.contains("phi3") {
        for &i in special_ids {
            attrs[i] |= attr::RSTRIP;
        }
        set(attrs, "</s>", attr::RSTRIP, true);
        for text in ["<unk>", "<s>", "<|endoftext|>"] {
            set(attrs, text, attr::RSTRIP, false);
        }
    } else if name.contains("modern-bert") {
        set(attrs, "[MASK]", attr::LSTRIP, true);
    }
}

/// What each token prints as, with control tokens rendered: llama.cpp's
/// token-to-piece cache. `escaped_spaces`: texts spell spaces as `▁`
/// (SentencePiece, Gemma 4), else they are GPT-2 byte characters.
fn render_pieces(texts: &Texts, attrs: &[u16], escaped_spaces: bool, bytes: &ByteMap) -> Texts {
    let mut pieces = Texts::default();
    let mut buf = Vec::new();
    for (i, &a) in attrs.iter().enumerate() {
        let text = texts.get(i);
        buf.clear();
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            buf.extend_from_slice(text);
        } else if a & attr::NORMAL != 0 {
            if escaped_spaces {
                unescape_spaces(text, &mut buf);
            } else {
                unmap_bytes(text, bytes, &mut buf);
            }
        } else if a & attr::BYTE != 0 {
            buf.push(byte_of_token(text));
        }
        pieces.push(&buf);
    }
    pieces
}

/// `▁` → space.
fn unescape_spaces(text: &[u8], out: &mut Vec<u8>) {
    let mut rest = text;
    while let Some(at) = rest.windows(3).position(|w| w == "▁".as_bytes()) {
        out.extend_from_slice(&rest[..at]);
        out.push(b' ');
        rest = &rest[at + 3..];
    }
    out.extend_from_slice(rest);
}

/// Byte-level BPE text → the bytes it stands for. A character outside the
/// mapping is written as llama.cpp does: `[UNK_BYTE_0x<hex>` + text + `]`.
fn unmap_bytes(text: &[u8], bytes: &ByteMap, out: &mut Vec<u8>) {
    let Ok(s) = std::str::from_utf8(text) else {
        out.extend_from_slice(text);
        return;
    };
    for c in s.chars() {
        match bytes.byte_of(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut utf8 = [0u8; 4];
                for b in c.encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
}

/// The byte of a `<0xAB>` token: llama.cpp reads two characters from offset
/// 3 with strtol (leading hex digits; none gives 0).
fn byte_of_token(text: &[u8]) -> u8 {
    let digits = text.get(3..5.min(text.len())).unwrap_or_default();
    let mut value = 0u32;
    for &d in digits {
        match (d as char).to_digit(16) {
            Some(v) => value = value * 16 + v,
            None => break,
        }
    }
    value as u8
}

/// The characters that some token has right before a `▁`, not counting a
/// leading run of `▁` (see `spm_fragment`); None if there are many.
fn joined_before_space(texts: &Texts) -> Option<Vec<Box<[u8]>>> {
    const MARK: &[u8] = "▁".as_bytes();
    let mut joined: Vec<Box<[u8]>> = Vec::new();
    for i in 0..texts.ends.len() {
        let mut rest = texts.get(i);
        while rest.starts_with(MARK) {
            rest = &rest[MARK.len()..];
        }
        let mut prev_start = None;
        let mut at = 0;
        while at < rest.len() {
            let len = super::utf8::seq_len(rest[at]).min(rest.len() - at);
            if &rest[at..at + len] == MARK {
                if let Some(p) = prev_start {
                    let prev = &rest[p..at];
                    if prev != MARK && !joined.iter().any(|j| **j == *prev) {
                        joined.push(prev.into());
                        if joined.len() > 64 {
                            return None;
                        }
                    }
                }
            }
            prev_start = Some(at);
            at += len;
        }
    }
    Some(joined)
}
