//! The sampler's unit tests: each step's arithmetic against llama.cpp's own
//! test cases (tests/test-sampling.cpp of b11434, where the probabilities
//! after the step and a `dist` are checked to 1e-5), and the chain's draws.
use super::*;
use crate::engine::generate::sampler_steps::*;

fn opts() -> SamplerOptions {
    SamplerOptions { seed: Some(1), ..SamplerOptions::default() }
}

/// Candidates with logit ln(p) and the probabilities set, as llama.cpp's
/// `sampler_tester` builds them.
fn from_probs(probs: &[f32]) -> Candidates {
    let mut c = Candidates::default();
    c.set(probs.iter().enumerate().map(|(i, p)| (i as i32, p.ln())));
    c.probs.copy_from_slice(probs);
    c
}

/// The probabilities after `step` and a `dist` (seed 0), as llama.cpp's
/// tests check them.
fn after(probs: &[f32], step: impl FnOnce(&mut Candidates)) -> Vec<f32> {
    let mut c = from_probs(probs);
    step(&mut c);
    dist(&mut Mt19937::new(0), &mut c);
    c.probs
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }
}

#[test]
fn min_p_follows_llama_cpp() {
    let probs = [0.1, 0.2, 0.3, 0.4];
    assert_close(&after(&probs, |c| min_p(0.0, c)), &[0.1, 0.2, 0.3, 0.4]);
    assert_close(&after(&probs, |c| min_p(0.26, c)), &[0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]);
    assert_close(&after(&probs, |c| min_p(0.51, c)), &[0.3 / 0.7, 0.4 / 0.7]);
    assert_close(&after(&probs, |c| min_p(0.76, c)), &[1.0]);
    // it compares logits with max + ln p and keeps the unsorted order
    let mut c = Candidates::from_logits(&[0.0, 2.0, 1.9, -3.0]);
    min_p(0.5, &mut c);
    assert_eq!(c.ids, vec![1, 2]);
}

#[test]
fn top_k_and_top_p_follow_llama_cpp() {
    let probs = [0.1, 0.2, 0.3, 0.4];
    assert_close(&after(&probs, |c| top_k(1, c)), &[1.0]);
    assert_close(&after(&probs, |c| top_k(3, c)), &[0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9]);
    assert_close(&after(&probs, |c| top_k(0, c)), &[0.1, 0.2, 0.3, 0.4]);
    assert_close(&after(&probs, |c| top_p(0.0, c)), &[1.0]);
    assert_close(&after(&probs, |c| top_p(0.7, c)), &[0.4 / 0.7, 0.3 / 0.7]);
    assert_close(&after(&probs, |c| top_p(0.8, c)), &[0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9]);
    assert_close(&after(&probs, |c| top_p(1.0, c)), &[0.1, 0.2, 0.3, 0.4]);
    // a large vocabulary takes the partial sort's path: the same tokens
    let logits: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 5000) as f32 / 300.0).collect();
    let mut c = Candidates::from_logits(&logits);
    top_p(0.5, &mut c);
    let mut sorted = Candidates::from_logits(&logits);
    sorted.sort();
    top_p(0.5, &mut sorted);
    assert_eq!(c.ids, sorted.ids);
}

#[test]
fn xtc_and_typical_follow_llama_cpp() {
    let probs = [0.4, 0.3, 0.2, 0.1];
    let xtc_with = |t: f32| {
        let mut c = from_probs(&probs);
        xtc(0.99, t, &mut Mt19937::new(0), &mut c);
        c.probs
    };
    assert_close(&xtc_with(0.09), &[0.1]);
    assert_close(&xtc_with(0.19), &[0.2, 0.1]);
    assert_close(&xtc_with(0.29), &[0.3, 0.2, 0.1]);
    assert_close(&xtc_with(0.39), &[0.4, 0.3, 0.2, 0.1]);
    let typical = |probs: &[f32], p: f32| {
        let mut c = from_probs(probs);
        typical_p(p, &mut c);
        c.probs
    };
    assert_close(&typical(&[0.97, 0.01, 0.01, 0.01], 0.5), &[0.97]);
    assert_close(&typical(&[0.4, 0.2, 0.2, 0.2], 0.5), &[0.2, 0.2, 0.2]);
}

#[test]
fn penalties_follow_llama_cpp() {
    let probs = [0.2; 5];
    let with = |history: &[i32], repeat: f32, frequency: f32, presence: f32| {
        let o = SamplerOptions {
            repeat_penalty: repeat,
            frequency_penalty: frequency,
            presence_penalty: presence,
            penalty_last_n: history.len(),
            ..opts()
        };
        after(&probs, |c| Penalties::default().apply(&o, history, c))
    };
    assert_close(&with(&[0], 50.0, 0.0, 0.0), &[0.0, 0.25, 0.25, 0.25, 0.25]);
    assert_close(&with(&[0, 1, 2], 50.0, 0.0, 0.0), &[0.0, 0.0, 0.0, 0.5, 0.5]);
    assert_close(&with(&[0, 1, 2, 0, 0], 50.0, 0.0, 0.0), &[0.0, 0.0, 0.0, 0.5, 0.5]);
    assert_close(&with(&[0], 1.0, 5.0, 5.0), &[0.000011, 0.249997, 0.249997, 0.249997, 0.249997]);
    assert_close(&with(&[0, 1, 2], 1.0, 5.0, 5.0), &[0.000023, 0.000023, 0.000023, 0.499966, 0.499966]);
    assert_close(&with(&[0, 1, 2, 0, 0], 1.0, 5.0, 5.0), &[0.0, 0.000023, 0.000023, 0.499977, 0.499977]);
    // the multiplication for logits <= 0, the division above, and the last n only
    let o = SamplerOptions { repeat_penalty: 2.0, presence_penalty: 0.5, frequency_penalty: 0.25, ..opts() };
    let mut c = Candidates::from_logits(&[2.0, -2.0, 1.0]);
    Penalties::default().apply(&o, &[0, 1, 1, 9], &mut c);
    assert_eq!(c.logits, vec![2.0 / 2.0 - 0.25 - 0.5, -2.0 * 2.0 - 0.5 - 0.5, 1.0]);
    let o = SamplerOptions { repeat_penalty: 2.0, penalty_last_n: 1, ..opts() };
    let mut c = Candidates::from_logits(&[2.0, 2.0]);
    Penalties::default().apply(&o, &[0, 1], &mut c);
    assert_eq!(c.logits, vec![2.0, 1.0]);
}

#[test]
fn dry_follows_llama_cpp() {
    let with = |probs: &[f32], history: &[i32], m: f32, base: f32, allowed: usize, last_n: usize, br: &[&[i32]]| {
        let o = SamplerOptions {
            dry_multiplier: m,
            dry_base: base,
            dry_allowed_length: allowed,
            dry_penalty_last_n: last_n,
            ..opts()
        };
        let mut dry = Dry::new(DryBreakers::from_sequences(br));
        after(probs, |c| dry.apply(&o, history, c))
    };
    let quarter = [0.25; 4];
    let fifth = [0.2; 5];
    assert_close(&with(&quarter, &[0, 1], 1.0, 1.1, 2, 4, &[]), &quarter);
    assert_close(&with(&quarter, &[0, 1, 2, 0, 1], 1.0, 1.1, 2, 5, &[]), &[0.296923, 0.296923, 0.109232, 0.296923]);
    assert_close(&with(&fifth, &[0, 1, 3, 4, 0, 1], 1.0, 1.1, 2, 6, &[&[3]]), &fifth);
    assert_close(
        &with(&fifth, &[0, 1, 2, 0, 1], 2.0, 1.1, 2, 5, &[]),
        &[0.241818, 0.241818, 0.032727, 0.241818, 0.241818],
    );
    assert_close(&with(&fifth, &[0, 1, 2, 3, 4, 0, 1], 1.0, 1.1, 4, 7, &[]), &fifth);
    // a two-token breaker (3 then 4) limits the repetition, but 3 alone is no breaker: penalized
    let got = with(&fifth, &[0, 1, 3, 4, 0, 1], 1.0, 1.1, 2, 6, &[&[3, 4]]);
    assert!(got[3] < got[0] && got[0] == got[4], "{got:?}");
}

#[test]
fn top_n_sigma_follows_llama_cpp() {
    let probs = [0.1, 0.2, 0.3, 0.4];
    assert_close(&after(&probs, |c| top_n_sigma(1.0, c)), &[0.0, 0.0, 0.428571, 0.571429]);
    assert_close(&after(&probs, |c| top_n_sigma(0.0, c)), &probs);
    assert_close(&after(&probs, |c| top_n_sigma(3.0, c)), &probs);
}

#[test]
fn dist_draws_once_per_token_and_walks_the_array_order() {
    // one candidate still consumes a draw (llama.cpp's test_dist_singleton_rng)
    let mut single = Mt19937::new(4242);
    let mut control = Mt19937::new(4242);
    dist(&mut single, &mut Candidates::from_logits(&[0.0]));
    dist(&mut control, &mut Candidates::from_logits(&[0.0, 0.0]));
    for _ in 0..4 {
        let a = dist(&mut single, &mut Candidates::from_logits(&[0.0; 256]));
        assert_eq!(a, dist(&mut control, &mut Candidates::from_logits(&[0.0; 256])));
    }
    // the first candidate whose running (double) sum reaches sum × draw
    let draw = Mt19937::new(7).next_f64();
    let logits = [0.5f32, -1.0, 2.0, 0.0];
    let weights: Vec<f64> = logits.iter().map(|&l| f64::from((l - 2.0f32).exp())).collect();
    let target = weights.iter().sum::<f64>() * draw;
    let mut running = 0.0;
    let want = weights.iter().position(|w| {
        running += w;
        running >= target
    });
    assert_eq!(Some(dist(&mut Mt19937::new(7), &mut Candidates::from_logits(&logits))), want);
}

#[test]
fn discrete_distribution_follows_libstdcxx() {
    // one weight: no draw
    let mut a = Mt19937::new(3);
    assert_eq!(discrete(&mut a, &[1.0]), 0);
    assert_eq!(a.next_u32(), Mt19937::new(3).next_u32());
    // cumulative normalized weights, the first reaching the draw
    let draw = Mt19937::new(3).next_f64();
    let w = [0.25f32, 0.5, 0.25];
    let want = if draw <= 0.25 {
        0
    } else if draw <= 0.75 {
        1
    } else {
        2
    };
    assert_eq!(discrete(&mut Mt19937::new(3), &w), want);
}

#[test]
fn mirostat_keeps_its_target_across_tokens() {
    let logits: Vec<f32> = (0..200).map(|i| -(i as f32) * 0.05).collect();
    for mode in [1, 2] {
        let o = SamplerOptions { mirostat_mode: mode, temperature: 1.0, seed: Some(9), ..opts() };
        let mut s = Sampler::with_vocab(o.clone(), None).unwrap();
        let first: Vec<i32> = (0..20).map(|_| s.sample(&logits, &[]).unwrap()).collect();
        assert!((s.mirostat.mu - 10.0).abs() > 1e-6, "mu moved from 2 tau");
        let mut again = Sampler::with_vocab(o, None).unwrap();
        assert_eq!(first, (0..20).map(|_| again.sample(&logits, &[]).unwrap()).collect::<Vec<_>>());
    }
    assert_eq!(truncate_to_int(f32::NAN), i32::MIN);
    assert_eq!(truncate_to_int(f32::INFINITY), i32::MIN);
    assert_eq!(truncate_to_int(3.9), 3);
}

#[test]
fn sampler_names_and_order() {
    assert_eq!(SamplerKind::from_name("top-k").unwrap(), SamplerKind::TopK);
    assert_eq!(SamplerKind::from_name("TOPK").unwrap(), SamplerKind::TopK);
    assert_eq!(SamplerKind::from_name("typ_p").unwrap(), SamplerKind::TypicalP);
    assert_eq!(SamplerKind::from_name("nucleus").unwrap(), SamplerKind::TopP);
    assert_eq!(SamplerKind::from_name("temp").unwrap(), SamplerKind::Temperature);
    assert!(SamplerKind::from_name("warp").unwrap_err().to_string().contains("'warp'"));
    // top_k alone leaves the candidates sorted; temperature alone leaves token order
    let logits = [0.0, 3.0, 1.0, 2.0];
    let mut s =
        Sampler::with_vocab(SamplerOptions { samplers: vec![SamplerKind::TopK], top_k: 3, ..opts() }, None).unwrap();
    s.sample(&logits, &[]).unwrap();
    assert_eq!(s.cands.ids, vec![1, 3, 2]);
    let mut s =
        Sampler::with_vocab(SamplerOptions { samplers: vec![SamplerKind::Temperature], ..opts() }, None).unwrap();
    s.sample(&logits, &[]).unwrap();
    assert_eq!(s.cands.ids, vec![0, 1, 2, 3]);
}

#[test]
fn logit_bias_adds_and_bans() {
    let o = SamplerOptions { greedy: true, logit_bias: vec![(1, f32::NEG_INFINITY), (2, 5.0)], ..opts() };
    let mut s = Sampler::with_vocab(o, None).unwrap();
    assert_eq!(s.sample(&[0.0, 9.0, 1.0], &[]).unwrap(), 2);
    let o = SamplerOptions { logit_bias: vec![(0, f32::NEG_INFINITY), (1, f32::NEG_INFINITY)], ..opts() };
    let mut s = Sampler::with_vocab(o, None).unwrap();
    assert!(s.sample(&[0.0, 9.0], &[]).is_err());
    let o = SamplerOptions { logit_bias: vec![(5, 1.0)], ..opts() };
    assert!(Sampler::with_vocab(o, None)
        .unwrap()
        .sample(&[0.0, 1.0], &[])
        .unwrap_err()
        .to_string()
        .contains("token 5"));
}

#[test]
fn infinite_logits_win_and_all_minus_infinity_is_an_error() {
    let inf = f32::INFINITY;
    for seed in 0..20 {
        let mut s =
            Sampler::with_vocab(SamplerOptions { seed: Some(seed), ..SamplerOptions::default() }, None).unwrap();
        assert_eq!(s.sample(&[1.0, inf, 3.0], &[]).unwrap(), 1);
        let id = s.sample(&[inf, 0.0, inf], &[]).unwrap();
        assert!(id == 0 || id == 2);
    }
    let mut s = Sampler::with_vocab(SamplerOptions { greedy: true, ..opts() }, None).unwrap();
    assert_eq!(s.sample(&[1.0, 2.0, inf], &[1, 2]).unwrap(), 2);
    assert!(s.sample(&[-inf, -inf], &[]).is_err());
    assert_eq!(s.sample(&[-inf, 0.5], &[]).unwrap(), 1);
}

#[test]
fn greedy_and_zero_temperature_take_the_argmax() {
    let logits = [0.1, 3.0, 2.9, -1.0];
    let mut s = Sampler::with_vocab(SamplerOptions { greedy: true, ..opts() }, None).unwrap();
    assert_eq!(s.sample(&logits, &[]).unwrap(), 1);
    let mut s = Sampler::with_vocab(SamplerOptions { temperature: 0.0, ..opts() }, None).unwrap();
    assert_eq!(s.sample(&logits, &[]).unwrap(), 1);
    // Ties: the lower id.
    assert_eq!(s.sample(&[1.0, 5.0, 5.0], &[]).unwrap(), 1);
}

#[test]
fn top_k_one_is_deterministic() {
    let mut s = Sampler::with_vocab(SamplerOptions { top_k: 1, temperature: 5.0, ..opts() }, None).unwrap();
    for _ in 0..20 {
        assert_eq!(s.sample(&[0.0, 1.0, 0.5], &[]).unwrap(), 1);
    }
}

#[test]
fn repeat_penalty_changes_greedy_choice() {
    let mut s = Sampler::with_vocab(SamplerOptions { greedy: true, repeat_penalty: 2.0, ..opts() }, None).unwrap();
    assert_eq!(s.sample(&[3.0, 2.0], &[0]).unwrap(), 1);
}

#[test]
fn seeded_draws_repeat_and_follow_the_distribution() {
    let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let free = |seed| SamplerOptions { seed: Some(seed), top_k: 0, top_p: 1.0, min_p: 0.0, ..opts() };
    let run = |seed| {
        let mut s = Sampler::with_vocab(free(seed), None).unwrap();
        (0..30).map(|_| s.sample(&logits, &[]).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
    // Two tokens, logits ln(3) and 0 at temperature 1: about 3:1.
    let mut s = Sampler::with_vocab(SamplerOptions { temperature: 1.0, ..free(1) }, None).unwrap();
    let firsts = (0..20_000).filter(|_| s.sample(&[3f32.ln(), 0.0], &[]).unwrap() == 0).count();
    assert!((firsts as f64 / 20_000.0 - 0.75).abs() < 0.02, "{firsts}");
}

#[test]
fn the_filter_seam_runs_the_chain_over_what_it_allows() {
    let mut s = Sampler::with_vocab(SamplerOptions { greedy: true, ..opts() }, None).unwrap();
    let id = s.sample_filtered(&[0.0, 9.0, 1.0], &[], &mut |c| c.ban(1)).unwrap();
    assert_eq!(id, 2);
}

#[test]
fn bad_values_are_rejected() {
    for (o, name) in [
        (SamplerOptions { temperature: -1.0, ..opts() }, "temperature"),
        (SamplerOptions { top_p: 0.0, ..opts() }, "top_p"),
        (SamplerOptions { top_p: 1.5, ..opts() }, "top_p"),
        (SamplerOptions { min_p: 2.0, ..opts() }, "min_p"),
        (SamplerOptions { repeat_penalty: 0.0, ..opts() }, "repeat_penalty"),
        (SamplerOptions { temperature: f32::NAN, ..opts() }, "temperature"),
        (SamplerOptions { typical_p: 1.5, ..opts() }, "typical_p"),
        (SamplerOptions { xtc_probability: -0.1, ..opts() }, "xtc_probability"),
        (SamplerOptions { dry_multiplier: -1.0, ..opts() }, "dry_multiplier"),
        (SamplerOptions { mirostat_mode: 3, ..opts() }, "mirostat_mode"),
        (SamplerOptions { mirostat_tau: f32::INFINITY, ..opts() }, "mirostat_tau"),
        (SamplerOptions { top_n_sigma: f32::NAN, ..opts() }, "top_n_sigma"),
        (SamplerOptions { logit_bias: vec![(1, f32::NAN)], ..opts() }, "logit_bias"),
    ] {
        let err = Sampler::with_vocab(o, None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(name), "{name}: {err}");
    }
    let dry = SamplerOptions { dry_multiplier: 0.8, ..opts() };
    assert!(Sampler::with_vocab(dry.clone(), None).err().unwrap().to_string().contains("dry_sequence_breakers"));
    assert!(Sampler::with_vocab(SamplerOptions { dry_sequence_breakers: vec![], ..dry }, None).is_ok());
    let mut s = Sampler::with_vocab(opts(), None).unwrap();
    assert!(s.sample(&[], &[]).is_err());
    assert!(s.sample(&[1.0, f32::NAN], &[]).err().unwrap().to_string().contains("logit 1"));
}
