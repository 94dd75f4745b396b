//! Tests of the batch scheduler on SmolLM2 (skipped, with a note, when it is
//! absent): greedy results equal solo generate runs, prompt prefixes come
//! from the slots' caches, cancel and the queue limit.
use super::*;
use crate::engine::forward::runner::{InferenceOptions, Overrides};
use crate::engine::generate::sampler::SamplerOptions;
use crate::engine::model::tokenizer::EncodeOptions;
use crate::engine::model::Model;
use std::path::PathBuf;

fn session(n_ctx: usize) -> Option<Arc<Inference>> {
    let dir = match std::env::var("LUGH_MODEL_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/lugh/models"),
    };
    let path = dir.join("smollm2-135m-q4_1.gguf");
    if !path.exists() {
        eprintln!("skipped: {} is absent", path.display());
        return None;
    }
    let model = Arc::new(Model::open(&path, true).expect("model opens"));
    let options = InferenceOptions { backend: Some("CPU".into()), n_ctx: Some(n_ctx), ..Default::default() };
    Some(Arc::new(Inference::new(model, options).expect("session")))
}

fn encode(s: &Inference, text: &str) -> Vec<i32> {
    let vocab = s.runner.model().vocab().expect("vocab");
    vocab.encode_bytes(text.as_bytes(), EncodeOptions { add_bos: false, add_eos: false, parse_special: false })
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        need_text: true,
        sampler: SamplerOptions { greedy: true, ..SamplerOptions::default() },
        ..GenerateOptions::default()
    }
}

fn solo(s: &Arc<Inference>, prompt: &[i32], options: &GenerateOptions) -> Vec<i32> {
    s.generate::<Error>(prompt, None, options, |_, _| Ok(false), |_| Ok(false), |_| Ok(())).expect("solo").tokens
}

/// Each request's tokens, text and (once done) why it ended and its counts.
type Outcomes = std::collections::HashMap<SeqId, (Vec<i32>, String, Option<(StopReason, Usage)>)>;

/// Runs the batch until idle.
fn run(batch: &mut Batch) -> Outcomes {
    let mut out: Outcomes = Default::default();
    while !batch.is_idle() {
        for e in batch.step().expect("step") {
            match e {
                BatchEvent::Token { seq, id, text, .. } => {
                    let entry = out.entry(seq).or_default();
                    entry.0.push(id);
                    entry.1.push_str(&text);
                }
                BatchEvent::Done { seq, reason, text, usage } => {
                    let entry = out.entry(seq).or_default();
                    entry.1.push_str(&text);
                    entry.2 = Some((reason, usage));
                }
                BatchEvent::Failed { error, .. } => panic!("a request failed: {error}"),
            }
        }
    }
    out
}

const PROMPTS: &[&str] = &[
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "Water boils at",
    "The three primary colours are",
    "In 1492, Columbus",
];

#[test]
fn a_batch_is_send() {
    fn send<T: Send>() {}
    send::<Batch>();
}

#[test]
fn greedy_results_equal_solo_runs() {
    let Some(s) = session(256) else { return };
    let prompts: Vec<Vec<i32>> = PROMPTS.iter().map(|p| encode(&s, p)).collect();
    let want: Vec<Vec<i32>> = prompts.iter().map(|p| solo(&s, p, &greedy(12))).collect();
    for deterministic in [false, true] {
        let mut batch = Batch::new(s.clone(), BatchOptions { n_slots: 4, max_queued: 16, deterministic }).unwrap();
        let ids: Vec<SeqId> = prompts
            .iter()
            .map(|p| batch.add(BatchRequest { tokens: p.clone(), options: greedy(12), cache_prompt: true }).unwrap())
            .collect();
        assert_eq!((batch.queued(), batch.active()), (prompts.len(), 0));
        let out = run(&mut batch);
        for (i, id) in ids.iter().enumerate() {
            let (tokens, _, done) = &out[id];
            assert_eq!(tokens, &want[i], "prompt {i}, deterministic {deterministic}");
            let (_, usage) = done.expect("a Done event");
            assert_eq!((usage.prompt_tokens, usage.completion_tokens), (prompts[i].len(), tokens.len()));
        }
    }
}

#[test]
fn a_shared_prefix_is_copied_not_evaluated() {
    let Some(s) = session(256) else { return };
    let system = "You are a careful assistant. Answer briefly and precisely, in plain English. ";
    let a = encode(&s, &format!("{system}Question: what is two plus two? Answer:"));
    let b = encode(&s, &format!("{system}Question: name a colour. Answer:"));
    let shared = common_prefix(&a, &b);
    let mut batch = Batch::new(s.clone(), BatchOptions { n_slots: 2, ..BatchOptions::default() }).unwrap();
    let first = batch.add(BatchRequest { tokens: a.clone(), options: greedy(8), cache_prompt: true }).unwrap();
    batch.step().unwrap();
    // a's slot is busy: b's prefix is copied from it into the other slot
    let second = batch.add(BatchRequest { tokens: b.clone(), options: greedy(4), cache_prompt: true }).unwrap();
    let out = run(&mut batch);
    assert_ne!(first, second);
    let (_, usage) = out[&second].2.expect("done");
    assert_eq!(usage.cached_tokens, shared, "the shared prefix is taken from the other slot");
    let again = batch.add(BatchRequest { tokens: b.clone(), options: greedy(4), cache_prompt: false }).unwrap();
    let out = run(&mut batch);
    assert_eq!(out[&again].2.expect("done").1.cached_tokens, 0, "cache_prompt false evaluates it all");
}

#[test]
fn a_copied_prefix_continues_as_the_original() {
    let Some(s) = session(256) else { return };
    let runner = &s.runner;
    let prefix = encode(&s, "The history of the printing press begins with movable type in East Asia");
    let rest = encode(&s, " and continues with Gutenberg");
    let mut original = runner.new_cache().unwrap();
    let mut logits = Vec::new();
    runner.forward_last_into(&mut original, &prefix, None, &Overrides::NONE, &mut logits).unwrap();
    let mut copy = runner.new_cache().unwrap();
    copy.copy_prefix(&original, prefix.len()).unwrap();
    assert_eq!(copy.tokens(), &prefix[..]);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    runner.forward_last_into(&mut original, &rest, None, &Overrides::NONE, &mut a).unwrap();
    runner.forward_last_into(&mut copy, &rest, None, &Overrides::NONE, &mut b).unwrap();
    assert_eq!(a, b);
    assert!(copy.copy_prefix(&original, original.n_cached() + 1).is_err(), "more than it holds");
}

#[test]
fn cancel_and_the_queue_limit() {
    let Some(s) = session(128) else { return };
    let prompt = encode(&s, "The capital of France is");
    let mut batch = Batch::new(s.clone(), BatchOptions { n_slots: 1, max_queued: 1, deterministic: false }).unwrap();
    let request = || BatchRequest { tokens: prompt.clone(), options: greedy(20), cache_prompt: true };
    let running = batch.add(request()).unwrap();
    batch.step().unwrap();
    let waiting = batch.add(request()).unwrap();
    assert!(batch.is_full());
    assert!(batch.add(request()).unwrap_err().to_string().contains("the batch is full"));
    match batch.cancel(running) {
        Some(BatchEvent::Done { reason: StopReason::Cancelled, usage, .. }) => assert!(usage.completion_tokens >= 1),
        other => panic!("cancel gave {other:?}"),
    }
    assert!(batch.cancel(running).is_none(), "already ended");
    let out = run(&mut batch);
    assert_eq!(out[&waiting].0, solo(&s, &prompt, &greedy(20)), "the waiting request took the freed slot");
    let too_long = BatchRequest { tokens: vec![1; 120], options: greedy(20), cache_prompt: true };
    assert!(batch.add(too_long).is_err(), "a prompt that does not fit a slot");
    assert!(Batch::new(s.clone(), BatchOptions { n_slots: 0, ..BatchOptions::default() }).is_err());
}
