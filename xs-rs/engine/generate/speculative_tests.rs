//! Speculative decoding against small fake models whose distributions are
//! known exactly: greedy output equals plain greedy decoding, and sampled
//! output follows the main model's distribution (chi-square over many
//! seeded runs; the seeds are fixed, so the tests are deterministic).
use super::*;
use crate::engine::generate::generation::{self as plain, GenerateOptions, Step};

/// A Markov model over a small vocabulary: the logits after token t are
/// `table[t]` whatever came before, and do not depend on how the tokens
/// are batched.
struct Markov {
    table: Vec<Vec<f32>>,
    seen: Vec<i32>,
    n_ctx: usize,
    /// Tokens per forward call.
    calls: Vec<usize>,
}

impl Markov {
    /// Logits of a vocabulary of `n` drawn from `seed`, spread by `scale`.
    fn new(n: usize, seed: u64, scale: f32) -> Markov {
        let mut rng = Rng::new(seed);
        let table =
            (0..n).map(|_| (0..n).map(|_| (rng.next_f64() as f32 - 0.5) * scale).collect::<Vec<f32>>()).collect();
        Markov { table, seen: Vec::new(), n_ctx: 256, calls: Vec::new() }
    }

    /// The main model's table, partly changed: a draft that often agrees.
    fn perturbed(main: &Markov, seed: u64, by: f32) -> Markov {
        let mut rng = Rng::new(seed);
        let table = main
            .table
            .iter()
            .map(|row| row.iter().map(|&l| l + (rng.next_f64() as f32 - 0.5) * by).collect())
            .collect();
        Markov { table, seen: Vec::new(), n_ctx: main.n_ctx, calls: Vec::new() }
    }
}

impl LogitsSource for Markov {
    fn context(&self) -> &[i32] {
        &self.seen
    }
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    fn n_batch(&self) -> usize {
        8
    }
    fn truncate(&mut self, n: usize) -> Result<()> {
        assert!(n <= self.seen.len(), "truncate only rolls back");
        self.seen.truncate(n);
        Ok(())
    }
    fn forward(&mut self, tokens: &[i32], logits: &mut Vec<f32>) -> Result<()> {
        self.forward_each(tokens, &mut |row| {
            logits.clear();
            logits.extend_from_slice(row);
            Ok(())
        })
    }
}

impl BatchSource for Markov {
    fn forward_each(&mut self, tokens: &[i32], each: &mut dyn FnMut(&[f32]) -> Result<()>) -> Result<()> {
        assert!(self.seen.len() + tokens.len() <= self.n_ctx, "the context overflows");
        self.calls.push(tokens.len());
        for &t in tokens {
            self.seen.push(t);
            each(&self.table[t as usize])?;
        }
        Ok(())
    }
}

/// Token 0 ends generation when `eog` is set.
struct Eog(bool);
impl TokenText for Eog {
    fn is_eog(&self, id: i32) -> bool {
        self.0 && id == 0
    }
    fn piece(&self, _: i32) -> Result<&[u8]> {
        Ok(b"x")
    }
}

fn greedy() -> SamplerOptions {
    SamplerOptions { greedy: true, seed: Some(1), ..SamplerOptions::default() }
}

fn spec(
    options: &SamplerOptions,
    main: &mut Markov,
    drafter: &mut Drafter,
    prompt: &[i32],
    max: usize,
    k: usize,
) -> (Vec<i32>, Stats) {
    spec_with(options, true, main, drafter, prompt, max, k)
}

fn spec_with(
    options: &SamplerOptions,
    exact: bool,
    main: &mut Markov,
    drafter: &mut Drafter,
    prompt: &[i32],
    max: usize,
    k: usize,
) -> (Vec<i32>, Stats) {
    let mut decoder = Decoder::new(options, None).unwrap();
    decoder.exact(exact, false);
    let mut stats = Stats::default();
    let (out, _) =
        generate::<Error>(&mut decoder, main, drafter, Some(&Eog(false)), prompt, max, k, &mut stats, &mut |_, _| {
            Ok(false)
        })
        .unwrap();
    (out, stats)
}

fn plain_greedy(main: &mut Markov, prompt: &[i32], max: usize) -> Vec<i32> {
    let options = GenerateOptions { max_tokens: max, sampler: greedy(), ..GenerateOptions::default() };
    plain::generate::<Error>(
        main,
        Some(&Eog(false)),
        prompt,
        &options,
        |_, _| Ok(false),
        |_: &Step| Ok(false),
        |_| Ok(()),
    )
    .unwrap()
    .tokens
}

#[test]
fn greedy_output_is_plain_greedy_output() {
    let prompt = [3, 1, 4, 1, 5, 9, 2, 6];
    let mut reference = Markov::new(12, 7, 6.0);
    let want = plain_greedy(&mut reference, &prompt, 40);
    for k in [1, 2, 4, 7, 16] {
        let mut main = Markov::new(12, 7, 6.0);
        let mut draft = Markov::perturbed(&main, 99, 4.0);
        let (out, stats) = spec(&greedy(), &mut main, &mut Drafter::Model(&mut draft), &prompt, 40, k);
        assert_eq!(out, want, "draft model, k {k}");
        assert!(stats.accepted > 0 && stats.accepted < stats.drafted, "k {k}: some accepted, some not: {stats:?}");
        let mut main = Markov::new(12, 7, 6.0);
        let (out, _) = spec(&greedy(), &mut main, &mut Drafter::Ngram(NgramOptions { min: 1, max: 3 }), &prompt, 40, k);
        assert_eq!(out, want, "prompt lookup, k {k}");
    }
}

#[test]
fn a_perfect_draft_is_accepted_whole_in_passes_the_kernels_allow() {
    let prompt = [1, 2, 3];
    // rows in passes of at most 3 (each as a decode step computes it),
    // greedy or sampled
    let sampled = SamplerOptions { temperature: 1.0, top_k: 0, top_p: 1.0, seed: Some(2), ..Default::default() };
    let exact = vec![3, 3, 1, 3, 2, 3, 2, 3, 2, 1];
    let one_pass_per_step = vec![3, 4, 5, 5, 5, 1];
    for (options, is_exact, passes) in [
        (greedy(), true, &exact),
        (sampled.clone(), true, &exact),
        (greedy(), false, &one_pass_per_step),
        (sampled, false, &one_pass_per_step),
    ] {
        let mut main = Markov::new(10, 3, 8.0);
        let mut draft = Markov::new(10, 3, 8.0);
        let (out, stats) = spec_with(&options, is_exact, &mut main, &mut Drafter::Model(&mut draft), &prompt, 21, 4);
        assert_eq!(out.len(), 21);
        // 4 drafted + 1 bonus per step; the last step drafts no token past 21
        assert_eq!((stats.steps, stats.drafted, stats.accepted), (5, 16, 16));
        assert_eq!(
            &main.calls, passes,
            "the whole prompt, as plain generation evaluates it, then the rows of each step"
        );
        // The caches hold the context: everything but the main model's own
        // last token, and the draft's last proposals were its input too.
        let all: Vec<i32> = prompt.iter().chain(&out).copied().collect();
        assert_eq!(main.seen, all[..all.len() - 1]);
    }
}

#[test]
fn caches_hold_only_accepted_tokens() {
    let prompt = [4, 4, 2];
    let mut main = Markov::new(9, 11, 5.0);
    let mut draft = Markov::perturbed(&main, 5, 6.0);
    let options = SamplerOptions { temperature: 1.0, top_k: 0, top_p: 1.0, seed: Some(4), ..Default::default() };
    let mut decoder = Decoder::new(&options, None).unwrap();
    let mut context = prompt.to_vec();
    for _ in 0..20 {
        let old = context.len();
        let step = decoder.step(&mut main, &mut Drafter::Model(&mut draft), &context, 3).unwrap();
        context.extend(&step.tokens);
        assert_eq!(main.seen, context[..context.len() - 1], "the main cache: the context but the newest token");
        assert_eq!(draft.seen[..old], context[..old], "the draft cache: the old context, then its proposals");
        assert_eq!(draft.seen.len(), old + 2, "the last proposal is never fed to the draft");
    }
}

/// Pearson's chi-square of `counts` against `expected` probabilities
/// (cells expected fewer than 5 times pooled); returns (statistic, dof).
fn chi_square(counts: &[u64], expected: &[f64]) -> (f64, usize) {
    let n: u64 = counts.iter().sum();
    let (mut stat, mut cells) = (0.0, 0);
    let (mut pooled_count, mut pooled_expected) = (0.0, 0.0);
    for (&c, &p) in counts.iter().zip(expected) {
        let e = p * n as f64;
        if e < 5.0 {
            assert!(p > 0.0 || c == 0, "a token of probability 0 was drawn");
            pooled_count += c as f64;
            pooled_expected += e;
            continue;
        }
        stat += (c as f64 - e).powi(2) / e;
        cells += 1;
    }
    if pooled_expected >= 5.0 {
        stat += (pooled_count - pooled_expected).powi(2) / pooled_expected;
        cells += 1;
    }
    (stat, cells - 1)
}

/// The chi-square statistic passes when under dof + 6·sqrt(2·dof): about six
/// standard deviations, far beyond chance, while a wrong procedure (a
/// residual without the max, a missing bonus token) is off by thousands.
fn assert_fits(counts: &[u64], expected: &[f64], what: &str) {
    let (stat, dof) = chi_square(counts, expected);
    let limit = dof as f64 + 6.0 * (2.0 * dof as f64).sqrt();
    assert!(stat < limit, "{what}: chi-square {stat:.1} with {dof} degrees of freedom (limit {limit:.1})");
}

/// The main model's distribution of the next token after `last`.
fn p_of(chain: &mut Sampler, model: &Markov, last: i32) -> Vec<f64> {
    let d = chain.distribution(&model.table[last as usize], &[]).unwrap();
    let mut dense = vec![0.0; model.table.len()];
    for (&id, &p) in d.ids.iter().zip(&d.probs) {
        dense[id as usize] = f64::from(p);
    }
    dense
}

/// Draws the first three generated tokens `n` times (seeds 0..n) and
/// checks their joint distribution against the main model's chain.
fn check_joint_distribution(options: &SamplerOptions, draft_kind: &str, n: u64) {
    let v = 5;
    let prompt = [1, 2, 1, 2, 1];
    let main_model = Markov::new(v, 21, 4.0);
    let draft_model = Markov::perturbed(&main_model, 8, 5.0);
    let mut counts = vec![0u64; v * v * v];
    let mut stats = Stats::default();
    for seed in 0..n {
        let options = SamplerOptions { seed: Some(seed), ..options.clone() };
        let mut main = Markov { seen: Vec::new(), calls: Vec::new(), table: main_model.table.clone(), ..main_model };
        let mut draft = Markov { seen: Vec::new(), calls: Vec::new(), table: draft_model.table.clone(), ..draft_model };
        let mut drafter = match draft_kind {
            "model" => Drafter::Model(&mut draft),
            _ => Drafter::Ngram(NgramOptions { min: 1, max: 2 }),
        };
        let (out, s) = spec(&options, &mut main, &mut drafter, &prompt, 3, 3);
        stats.drafted += s.drafted;
        stats.accepted += s.accepted;
        counts[(out[0] as usize * v + out[1] as usize) * v + out[2] as usize] += 1;
    }
    let mut chain = Sampler::with_vocab(SamplerOptions { seed: Some(0), ..options.clone() }, None).unwrap();
    let mut expected = vec![0.0; v * v * v];
    let p1 = p_of(&mut chain, &main_model, *prompt.last().unwrap());
    for a in 0..v {
        let p2 = p_of(&mut chain, &main_model, a as i32);
        for b in 0..v {
            let p3 = p_of(&mut chain, &main_model, b as i32);
            for c in 0..v {
                expected[(a * v + b) * v + c] = p1[a] * p2[b] * p3[c];
            }
        }
    }
    let rate = stats.acceptance_rate();
    assert!(rate > 0.1 && rate < 0.95, "{draft_kind}: both acceptance and rejection happen (rate {rate:.2})");
    assert_fits(&counts, &expected, &format!("{draft_kind} draft, {options:?}"));
}

#[test]
fn sampled_output_follows_the_main_model_with_a_draft_model() {
    let plain = SamplerOptions { temperature: 1.0, top_k: 0, top_p: 1.0, ..SamplerOptions::default() };
    check_joint_distribution(&plain, "model", 60_000);
    // the transform applies to both models: top-k, top-p, temperature
    let shaped = SamplerOptions { temperature: 0.7, top_k: 4, top_p: 0.9, ..SamplerOptions::default() };
    check_joint_distribution(&shaped, "model", 60_000);
}

#[test]
fn sampled_output_follows_the_main_model_with_prompt_lookup() {
    let plain = SamplerOptions { temperature: 1.0, top_k: 0, top_p: 1.0, ..SamplerOptions::default() };
    check_joint_distribution(&plain, "ngram", 60_000);
    let shaped = SamplerOptions { temperature: 1.3, top_k: 3, min_p: 0.05, ..SamplerOptions::default() };
    check_joint_distribution(&shaped, "ngram", 60_000);
}

#[test]
fn a_wrong_procedure_fails_the_test() {
    // The check must be able to fail: the draft model's own output (what
    // accepting every drafted token would give) is far from the main model's.
    let v = 5;
    let main_model = Markov::new(v, 21, 4.0);
    let draft_model = Markov::perturbed(&main_model, 8, 5.0);
    let options = SamplerOptions { temperature: 1.0, top_k: 0, top_p: 1.0, ..SamplerOptions::default() };
    let mut chain = Sampler::with_vocab(SamplerOptions { seed: Some(0), ..options.clone() }, None).unwrap();
    let mut rng = Rng::new(5);
    let mut counts = vec![0u64; v];
    for _ in 0..20_000 {
        let q = chain.distribution(&draft_model.table[1], &[]).unwrap();
        counts[draw(&q.ids, &q.probs, rng.next_f64() as f32) as usize] += 1;
    }
    let expected = p_of(&mut chain, &main_model, 1);
    let (stat, dof) = chi_square(&counts, &expected);
    assert!(stat > dof as f64 + 6.0 * (2.0 * dof as f64).sqrt(), "chi-square {stat}: the test has no power");
}

#[test]
fn residual_is_the_normalised_positive_part() {
    let options = SamplerOptions { temperature: 1.0, top_k: 0, top_p: 1.0, seed: Some(1), ..Default::default() };
    let mut chain = Sampler::with_vocab(options, None).unwrap();
    let p = chain.distribution(&[0.0, 1.0f32.ln() + 1.0, 0.5, -1.0], &[]).unwrap().clone();
    let q = Dist { ids: vec![1, 2], probs: vec![0.9, 0.1] };
    let (mut dense, mut out) = (Vec::new(), Dist::default());
    residual_of(&p, &q, 4, &mut dense, &mut out);
    assert!(dense.iter().all(|&d| d == 0.0), "the scratch is left zeroed");
    let mut want: Vec<(i32, f32)> = (0..4)
        .map(|id| (id, (p.probs[p.ids.iter().position(|&i| i == id).unwrap()] - q.prob(id)).max(0.0)))
        .filter(|&(_, r)| r > 0.0)
        .collect();
    let sum: f32 = want.iter().map(|w| w.1).sum();
    want.iter_mut().for_each(|w| w.1 /= sum);
    let mut got: Vec<(i32, f32)> = out.ids.iter().copied().zip(out.probs.iter().copied()).collect();
    got.sort_by_key(|g| g.0);
    want.sort_by_key(|w| w.0);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.0, w.0);
        assert!((g.1 - w.1).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    // p = q: nothing positive is left; p itself then
    let q = Dist { ids: p.ids.clone(), probs: p.probs.clone() };
    residual_of(&p, &q, 4, &mut dense, &mut out);
    assert_eq!(out.ids, p.ids);
}

#[test]
fn remembered_and_recomputed_draft_distributions_agree() {
    let main_model = Markov::new(7, 4, 3.0);
    let mut draft = Markov::perturbed(&main_model, 2, 2.0);
    let options = SamplerOptions { temperature: 0.9, top_k: 5, top_p: 0.95, seed: Some(3), ..Default::default() };
    let mut decoder = Decoder::new(&options, None).unwrap();
    let context = [1, 2, 3];
    let proposal = decoder.draft(&mut Drafter::Model(&mut draft), &context, 4).unwrap();
    let remembered = decoder.qs.clone();
    decoder.score_draft(&mut Drafter::Model(&mut draft), &context, &proposal).unwrap();
    assert_eq!(remembered.len(), 4);
    for (a, b) in remembered.iter().zip(&decoder.qs) {
        assert_eq!((&a.ids, &a.probs), (&b.ids, &b.probs));
    }
}

#[test]
fn end_of_generation_and_callbacks_stop() {
    let mut main = Markov::new(6, 17, 9.0);
    let prompt = [2, 3];
    let mut reference = Markov::new(6, 17, 9.0);
    let all = plain_greedy(&mut reference, &prompt, 30);
    let first_eog = all.iter().position(|&t| t == 0).expect("token 0 comes up in 30 greedy tokens");
    let mut decoder = Decoder::new(&greedy(), None).unwrap();
    let mut stats = Stats::default();
    let ngram = NgramOptions { min: 1, max: 2 };
    let (out, stop) = generate::<Error>(
        &mut decoder,
        &mut main,
        &mut Drafter::Ngram(ngram),
        Some(&Eog(true)),
        &prompt,
        30,
        4,
        &mut stats,
        &mut |_, _| Ok(false),
    )
    .unwrap();
    assert_eq!((out.as_slice(), stop), (&all[..first_eog], Stop::EndOfGeneration), "the EOG token is not returned");
    let mut seen = Vec::new();
    let (out, stop) = generate::<Error>(
        &mut decoder,
        &mut main,
        &mut Drafter::Ngram(ngram),
        None,
        &prompt,
        30,
        4,
        &mut stats,
        &mut |id, n| {
            seen.push((id, n));
            Ok(n == 3)
        },
    )
    .unwrap();
    assert_eq!((out.len(), stop), (3, Stop::Callback));
    assert_eq!(seen.iter().map(|s| s.1).collect::<Vec<_>>(), vec![1, 2, 3]);
}

#[test]
fn max_tokens_and_the_context_are_respected() {
    for max in [0, 1, 2, 5, 9] {
        let mut main = Markov::new(6, 1, 9.0);
        main.n_ctx = 12;
        let (out, _) =
            spec(&greedy(), &mut main, &mut Drafter::Ngram(NgramOptions { min: 1, max: 2 }), &[1, 1, 1, 1], max, 16);
        assert_eq!(out.len(), max);
    }
    let mut main = Markov::new(6, 1, 9.0);
    main.n_ctx = 12;
    let mut decoder = Decoder::new(&greedy(), None).unwrap();
    let err = generate::<Error>(
        &mut decoder,
        &mut main,
        &mut Drafter::Ngram(NgramOptions::default()),
        None,
        &[1; 4],
        10,
        4,
        &mut Stats::default(),
        &mut |_, _| Ok(false),
    )
    .unwrap_err();
    assert!(err.to_string().contains("needs 13 positions"), "{err}");
}

#[test]
fn prompt_lookup_pauses_while_it_keeps_failing() {
    // The model counts up (t → t + 1); the context says otherwise after
    // 10, 11 and 14, so those lookups are rejected at their first token.
    let mut main = Markov::new(64, 2, 0.0);
    for (t, row) in main.table.iter_mut().enumerate() {
        row[(t + 1) % 64] = 10.0;
    }
    let mut decoder = Decoder::new(&greedy(), None).unwrap();
    let mut context = vec![10, 3, 11, 5, 12, 6, 13, 7, 14, 8, 10];
    let mut drafted = Vec::new();
    for _ in 0..8 {
        let step = decoder.step(&mut main, &mut Drafter::Ngram(NgramOptions { min: 1, max: 1 }), &context, 4).unwrap();
        assert_eq!(step.accepted, 0);
        drafted.push(step.drafted);
        context.extend(&step.tokens);
    }
    assert_eq!(&context[11..], &[11, 12, 13, 14, 15, 16, 17, 18]);
    // two failures (after 10, 11): a pause of two steps (12, 13); another
    // failure (after 14): a pause of three
    assert_eq!(drafted, vec![4, 4, 0, 0, 4, 0, 0, 0]);
}
