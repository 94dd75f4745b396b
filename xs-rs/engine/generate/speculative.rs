//! Speculative decoding (Leviathan et al. 2023, "Fast Inference from
//! Transformers via Speculative Decoding"; Chen et al. 2023, "Accelerating
//! Large Language Model Decoding with Speculative Sampling").
//!
//! A cheap draft proposes the next few tokens; the main model evaluates them
//! in batched forward passes, which cost less than a pass per token (a pass
//! reads every weight once whatever the number of rows), and keeps the
//! longest prefix it agrees with plus one token of its own.
//!
//! Agreement is decided so that the output is distributed exactly as the
//! main model's own sampling: a drafted token x, drawn from the draft's
//! distribution q, is accepted with probability min(1, p(x)/q(x)), where p
//! is the main model's distribution at that position (both after the same
//! temperature, top-k, top-p and min-p transform, [`Sampler::distribution`]);
//! on rejection the token is drawn from the normalised max(0, p − q) and the
//! rest of the draft is dropped; when every drafted token is accepted, one
//! more is drawn from the main model's distribution after the last of them.
//! A draft that proposes tokens without a distribution (prompt lookup,
//! [`crate::engine::generate::ngram`]) is a point mass: x is accepted with probability p(x).
//! Greedy decoding is the limit where p and q are point masses: a token is
//! accepted iff it is the main model's argmax, and the correction is the
//! argmax.
//!
//! The KV caches hold exactly the accepted context: before a step each
//! model's cache is brought to the context by keeping the prefix it shares
//! with it (the rejected draft tokens are rolled back; cells past the kept
//! positions are overwritten later) and evaluating what is missing, so the
//! caches never see a token that was not accepted.
//!
//! With a grammar (generate only), p is the main model's distribution over
//! the tokens the grammar allows after the accepted ones: drafted tokens it
//! rejects have p(x) = 0 and are never accepted, and the correction is
//! drawn from what it allows, so the output follows the grammar and greedy
//! output is plain constrained greedy output.
//!
//! The loop is written against [`BatchSource`], so the tests drive it with
//! small fake models whose distributions are known exactly.
use crate::engine::forward::graph::Head;
use crate::engine::forward::runner::{ComputePool, KvCache, Overrides};
use crate::engine::generate::generation::{common_prefix, CachedRunner, LogitsSource, TokenText};
use crate::engine::generate::grammar::{Grammar, GrammarState};
use crate::engine::generate::inference::Inference;
use crate::engine::generate::ngram::{self, NgramOptions};
use crate::engine::generate::sampler::{draw, Candidates, Sampler, SamplerOptions};
use crate::engine::model::tokenizer::Vocab;
use crate::engine::rng::{rng_for_call, Rng};
use crate::engine::{Error, Result};
use std::sync::{Arc, Mutex, MutexGuard};

/// The most tokens drafted per step (Lugh 0.12's limit).
pub const MAX_K: usize = 16;

/// `k` as a caller gave it: 1..=MAX_K, else an error naming the range.
pub fn check_k(k: i64) -> Result<usize> {
    if (1..=MAX_K as i64).contains(&k) {
        Ok(k as usize)
    } else {
        Err(Error::Argument(format!("k must be between 1 and {MAX_K}, got {k}")))
    }
}

/// Speculative decoding runs both models with their sessions' own settings
/// (no per-call RoPE or adapters).
static NO_OVERRIDES: Overrides = Overrides::NONE;

/// A model that can also give the logits of every token it evaluates.
pub trait BatchSource: LogitsSource {
    /// Appends `tokens` to the context and passes each token's logits (the
    /// distribution of the token after it) to `each`, in order.
    fn forward_each(&mut self, tokens: &[i32], each: &mut dyn FnMut(&[f32]) -> Result<()>) -> Result<()>;
    /// Marks the current context as one to come back to after a rejection
    /// (a recurrent model's checkpoint; nothing otherwise).
    fn checkpoint(&mut self) {}
}

impl BatchSource for CachedRunner<'_> {
    fn forward_each(&mut self, tokens: &[i32], each: &mut dyn FnMut(&[f32]) -> Result<()>) -> Result<()> {
        self.runner.forward_rows(self.cache, tokens, Head::Logits, self.pool.as_deref_mut(), self.overrides, each)
    }
    fn checkpoint(&mut self) {
        self.cache.checkpoint();
    }
}

/// A probability distribution over a few token ids (the rest have 0).
#[derive(Clone, Debug, Default)]
pub struct Dist {
    pub ids: Vec<i32>,
    pub probs: Vec<f32>,
}

impl Dist {
    fn copy_from(&mut self, c: &Candidates) {
        self.ids.clone_from(&c.ids);
        self.probs.clone_from(&c.probs);
    }

    fn point(&mut self, id: i32) {
        self.ids.clear();
        self.ids.push(id);
        self.probs.clear();
        self.probs.push(1.0);
    }

    fn prob(&self, id: i32) -> f32 {
        prob_of(&self.ids, &self.probs, id)
    }
}

/// The probability of `id` in a distribution given as ids and probabilities.
fn prob_of(ids: &[i32], probs: &[f32], id: i32) -> f32 {
    ids.iter().position(|&i| i == id).map_or(0.0, |at| probs[at])
}

/// How a step's proposals are made.
pub enum Drafter<'a> {
    /// A smaller model with the same vocabulary, sampled like the main one.
    Model(&'a mut dyn BatchSource),
    /// Prompt lookup: no model, point-mass proposals.
    Ngram(NgramOptions),
}

/// What one step did: the new tokens (the accepted draft tokens and the
/// main model's own token after them), how many were drafted and accepted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepResult {
    pub tokens: Vec<i32>,
    pub drafted: usize,
    pub accepted: usize,
}

/// Running totals (Lugh::Speculative's statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub drafted: u64,
    pub accepted: u64,
    pub steps: u64,
}

impl Stats {
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    fn add(&mut self, step: &StepResult) {
        self.drafted += step.drafted as u64;
        self.accepted += step.accepted as u64;
        self.steps += 1;
    }
}

/// Drafting with prompt lookup is stopped for a while when its proposals
/// keep failing: every rejected proposal costs the rows of a larger verify
/// batch. After this many steps in a row whose first drafted token was
/// rejected, lookups pause for as many steps as there were failures (up to
/// [`NGRAM_MAX_PAUSE`]); an accepted proposal ends the pause rule.
const NGRAM_PATIENCE: usize = 2;
const NGRAM_MAX_PAUSE: usize = 16;

/// The most rows ggml's CPU matmul sends through its one-row kernels. With
/// weights in the CPU's repacked layouts (Q4_0, Q4_K, IQ4_NL ...) it
/// multiplies 4 rows or more with a multi-row kernel whose sums are rounded
/// in another order than the one-row kernel's a decode step uses; the logits
/// differ by a few hundredths, enough to change a near tie. Up to 3 rows,
/// each goes through the one-row kernel, bit-identical to a decode step.
const ONE_ROW_KERNEL_ROWS: usize = 3;

/// The working state of one call: the two distributions' samplers (their
/// transform only; the draws come from `rng`), the draws, and scratch.
pub struct Decoder {
    greedy: bool,
    /// The grammar the output follows, in its state after the context.
    constraint: Option<Constraint>,
    /// The most rows one verifying pass evaluates.
    rows_per_pass: usize,
    main_chain: Sampler,
    draft_chain: Sampler,
    rng: Rng,
    /// The draft's distribution of each drafted token.
    qs: Vec<Dist>,
    logits: Vec<f32>,
    /// The main model's logits after a context it evaluated in full.
    main_logits: Vec<f32>,
    /// Dense q for the residual max(0, p − q), all zeros between uses.
    dense: Vec<f32>,
    residual: Dist,
    /// Prompt lookup's recent failures and the steps left to pause.
    ngram_failures: usize,
    ngram_pause: usize,
}

impl Decoder {
    /// `options.seed` seeds the draws; without one they come from the
    /// default generator (`Lugh::srand`). The vocabulary's suppress_tokens
    /// are never drawn.
    pub fn new(options: &SamplerOptions, vocab: Option<&Vocab>) -> Result<Decoder> {
        // The chains only transform logits: their own generators are never
        // drawn from, so they get a fixed seed rather than a value of the
        // default generator.
        let chain = SamplerOptions { seed: Some(0), dry_sequence_breakers: Vec::new(), ..options.clone() };
        Ok(Decoder {
            greedy: options.greedy || options.temperature <= 0.0,
            constraint: None,
            rows_per_pass: ONE_ROW_KERNEL_ROWS,
            main_chain: Sampler::with_vocab(chain.clone(), vocab)?,
            draft_chain: Sampler::with_vocab(chain, vocab)?,
            rng: rng_for_call(options.seed),
            qs: Vec::new(),
            logits: Vec::new(),
            main_logits: Vec::new(),
            dense: Vec::new(),
            residual: Dist::default(),
            ngram_failures: 0,
            ngram_pause: 0,
        })
    }

    /// Exact verification (the default): passes of at most
    /// [`ONE_ROW_KERNEL_ROWS`] rows; otherwise all the rows of a step in one.
    /// Makes the output follow `grammar` from here on (the context so far
    /// is not read by it), with `vocab`'s token texts.
    pub fn constrain(&mut self, grammar: &Arc<Grammar>, vocab: Arc<Vocab>) -> Result<()> {
        let bound = grammar.bind(|text| vocab.tokenize_special(text))?;
        self.constraint = Some(Constraint { state: GrammarState::new(bound)?, vocab, masked: Vec::new() });
        Ok(())
    }

    /// A main model with recurrent layers (`recurrent`) is verified one row
    /// per pass when exact: its recurrent layers' small projections round
    /// a few rows otherwise than one, so only single rows give the decode
    /// steps' numbers.
    pub fn exact(&mut self, exact: bool, recurrent: bool) {
        self.rows_per_pass = match (exact, recurrent) {
            (false, _) => MAX_K + 1,
            (true, false) => ONE_ROW_KERNEL_ROWS,
            (true, true) => 1,
        };
    }

    /// Up to `n` tokens drafted after `context` (which is not empty); their
    /// distributions are kept for [`Decoder::verify`].
    pub fn draft(&mut self, drafter: &mut Drafter, context: &[i32], n: usize) -> Result<Vec<i32>> {
        match drafter {
            Drafter::Model(source) => self.draft_model(&mut **source, context, n),
            Drafter::Ngram(options) => {
                let proposal = ngram::lookup(context, *options, n).to_vec();
                self.point_masses(&proposal);
                Ok(proposal)
            }
        }
    }

    fn draft_model(&mut self, source: &mut dyn BatchSource, context: &[i32], n: usize) -> Result<Vec<i32>> {
        self.qs.resize_with(n, Dist::default);
        let mut drafted = Vec::with_capacity(n);
        if n == 0 {
            return Ok(drafted);
        }
        catch_up(source, context, &mut self.logits)?;
        for i in 0..n {
            if i > 0 {
                source.forward(&drafted[i - 1..i], &mut self.logits)?;
            }
            let q = self.draft_chain.distribution(&self.logits, &[])?;
            let id = if self.greedy { q.ids[0] } else { draw(&q.ids, &q.probs, self.rng.next_f64() as f32) };
            self.qs[i].copy_from(q);
            drafted.push(id);
        }
        Ok(drafted)
    }

    /// Tokens proposed without a distribution: q is a point mass on each.
    fn point_masses(&mut self, proposal: &[i32]) {
        self.qs.resize_with(proposal.len(), Dist::default);
        for (q, &id) in self.qs.iter_mut().zip(proposal) {
            q.point(id);
        }
    }

    /// The draft's distributions of `proposal` after `context`, computed
    /// rather than remembered (a draft the caller made): the draft model's,
    /// or point masses.
    pub fn score_draft(&mut self, drafter: &mut Drafter, context: &[i32], proposal: &[i32]) -> Result<()> {
        let Drafter::Model(source) = drafter else {
            self.point_masses(proposal);
            return Ok(());
        };
        self.qs.resize_with(proposal.len(), Dist::default);
        let Some((_, fed)) = proposal.split_last() else {
            return Ok(());
        };
        catch_up(&mut **source, context, &mut self.logits)?;
        self.qs[0].copy_from(self.draft_chain.distribution(&self.logits, &[])?);
        if fed.is_empty() {
            return Ok(());
        }
        let (chain, qs) = (&mut self.draft_chain, &mut self.qs);
        let mut at = 1;
        source.forward_each(fed, &mut |row| {
            qs[at].copy_from(chain.distribution(row, &[])?);
            at += 1;
            Ok(())
        })
    }

    /// Verifies `proposal` (drafted after `context`, its distributions in
    /// the decoder) with the main model's rows for the last context token
    /// and the proposal; returns the accepted tokens and the main model's
    /// own token after them. The main model's cache is left holding the
    /// context and the accepted tokens.
    ///
    /// The context is evaluated as plain generation evaluates it: when the
    /// cache lacks more than its last token (a prompt), all that is missing
    /// goes through in batches of n_batch first, and the proposal after it.
    /// Exact (the default), the rows are passed in groups of at most
    /// [`ONE_ROW_KERNEL_ROWS`], so that every logit equals the one a decode
    /// step computes (greedy output is plain greedy generation's, token for
    /// token); a rejection ends the step before the next group, which also
    /// saves the rows a single pass would have spent after it. Otherwise
    /// all in one pass, which ggml's multi-row kernels may make cheaper.
    pub fn verify(&mut self, main: &mut dyn BatchSource, context: &[i32], proposal: &[i32]) -> Result<StepResult> {
        let Some((&last, before)) = context.split_last() else {
            return Err(Error::Argument("the context is empty (give at least one token)".into()));
        };
        debug_assert_eq!(self.qs.len(), proposal.len());
        let mut accepted = 0;
        let mut next = None;
        let mut batch = Vec::with_capacity(proposal.len() + 1);
        // the grammar's state as the tokens are judged (kept once they are)
        let mut constraint = self.constraint.take();
        let mut judge = |this: &mut Self, row: &[f32], accepted: &mut usize| match constraint.as_mut() {
            Some(c) => this.judge_constrained(c, row, proposal, accepted),
            None => this.judge(row, proposal, accepted),
        };
        if common_prefix(main.context(), context) + 1 < context.len() {
            let mut row = std::mem::take(&mut self.main_logits);
            let judged = catch_up(main, context, &mut row).and_then(|()| judge(self, &row, &mut accepted));
            self.main_logits = row;
            next = judged?;
        } else {
            sync(main, before, &mut self.logits)?;
            batch.push(last);
        }
        batch.extend_from_slice(proposal);
        // where rejected drafts roll back to
        main.checkpoint();
        for group in batch.chunks(self.rows_per_pass) {
            if next.is_some() {
                break;
            }
            main.forward_each(group, &mut |row| {
                // the rows after a rejection are not needed
                if next.is_none() {
                    next = judge(self, row, &mut accepted)?;
                }
                Ok(())
            })?;
        }
        self.constraint = constraint;
        // keep the context and the accepted tokens: the main model's own
        // token is the last of the new context, evaluated with the next step
        main.truncate(context.len() + accepted)?;
        let mut tokens = proposal[..accepted].to_vec();
        tokens.push(next.expect("the forward pass gives a row per token"));
        Ok(StepResult { tokens, drafted: proposal.len(), accepted })
    }

    /// The main model's `row` (its distribution after the context and the
    /// `accepted` tokens of `proposal`) judges the next drafted token:
    /// accepted (counted, None), or the main model's own token (a
    /// correction, or the bonus token when the whole proposal is accepted).
    fn judge(&mut self, row: &[f32], proposal: &[i32], accepted: &mut usize) -> Result<Option<i32>> {
        let greedy = self.greedy;
        let p = self.main_chain.distribution(row, &[])?;
        let Some(&x) = proposal.get(*accepted) else {
            // all accepted: the bonus token, from the last row
            return Ok(Some(if greedy { p.ids[0] } else { draw(&p.ids, &p.probs, self.rng.next_f64() as f32) }));
        };
        let q = &self.qs[*accepted];
        // accept with probability min(1, p(x) / q(x)): u·q(x) < p(x)
        // (greedy: p(x) is 1 for the argmax, else 0)
        let u = if greedy { 0.0 } else { self.rng.next_f64() as f32 };
        if u * q.prob(x) < prob_of(&p.ids, &p.probs, x) {
            *accepted += 1;
            return Ok(None);
        }
        Ok(Some(if greedy {
            p.ids[0]
        } else {
            residual_of(p, q, row.len(), &mut self.dense, &mut self.residual);
            draw(&self.residual.ids, &self.residual.probs, self.rng.next_f64() as f32)
        }))
    }

    /// [`Decoder::judge`] with the main model's row limited to the tokens
    /// the grammar allows; the state advances past each accepted token and
    /// the main model's own one.
    fn judge_constrained(
        &mut self,
        c: &mut Constraint,
        row: &[f32],
        proposal: &[i32],
        accepted: &mut usize,
    ) -> Result<Option<i32>> {
        c.masked.clear();
        c.masked.extend_from_slice(row);
        c.state.apply(&mut c.masked, &*c.vocab)?;
        if c.masked.iter().all(|&l| l == f32::NEG_INFINITY) {
            return Err(Error::Argument(
                "the grammar allows no token of this vocabulary here (no token's text can continue it)".into(),
            ));
        }
        let before = *accepted;
        let next = self.judge(&c.masked, proposal, accepted)?;
        let token = match next {
            Some(own) => own,
            None => proposal[before],
        };
        c.state.accept(token, &*c.vocab)?;
        Ok(next)
    }

    /// One step: draft up to `k` tokens after `context`, verify them.
    /// Prompt lookup pauses while its proposals keep failing.
    pub fn step(
        &mut self,
        main: &mut dyn BatchSource,
        drafter: &mut Drafter,
        context: &[i32],
        k: usize,
    ) -> Result<StepResult> {
        let lookup = matches!(drafter, Drafter::Ngram(_));
        let paused = lookup && self.ngram_pause > 0;
        let n = if paused { 0 } else { k };
        self.ngram_pause = self.ngram_pause.saturating_sub(1);
        let proposal = self.draft(drafter, context, n)?;
        let result = self.verify(main, context, &proposal)?;
        if lookup && !proposal.is_empty() {
            if result.accepted == 0 {
                self.ngram_failures += 1;
                if self.ngram_failures >= NGRAM_PATIENCE {
                    self.ngram_pause = self.ngram_failures.min(NGRAM_MAX_PAUSE);
                }
            } else {
                self.ngram_failures = 0;
            }
        }
        Ok(result)
    }
}

/// The grammar a generation follows: its state, the vocabulary that reads
/// tokens for it, and a row of logits with what it rejects at -inf.
struct Constraint {
    state: GrammarState,
    vocab: Arc<Vocab>,
    masked: Vec<f32>,
}

/// The normalised max(0, p − q) into `out` (p itself when that is all
/// zeros, which only rounding can cause: p ≤ q everywhere means p = q, and
/// then nothing is ever rejected). `dense` is n_vocab zeros, and is left so.
fn residual_of(p: &Candidates, q: &Dist, n_vocab: usize, dense: &mut Vec<f32>, out: &mut Dist) {
    dense.resize(n_vocab, 0.0);
    for (&id, &prob) in q.ids.iter().zip(&q.probs) {
        dense[id as usize] = prob;
    }
    out.ids.clear();
    out.probs.clear();
    for (&id, &prob) in p.ids.iter().zip(&p.probs) {
        let r = prob - dense[id as usize];
        if r > 0.0 {
            out.ids.push(id);
            out.probs.push(r);
        }
    }
    for &id in &q.ids {
        dense[id as usize] = 0.0;
    }
    let sum: f32 = out.probs.iter().sum();
    if sum <= 0.0 {
        out.copy_from(p);
        return;
    }
    out.probs.iter_mut().for_each(|r| *r /= sum);
}

/// Brings `source`'s context to `context`, keeping the prefix they share and
/// evaluating the rest (`scratch` receives logits nobody needs).
fn sync(source: &mut dyn BatchSource, context: &[i32], scratch: &mut Vec<f32>) -> Result<()> {
    let keep = common_prefix(source.context(), context);
    source.truncate(keep)?;
    for chunk in context[keep..].chunks(source.n_batch().max(1)) {
        source.forward(chunk, scratch)?;
    }
    Ok(())
}

/// [`sync`] that always evaluates the last token of `context` (not empty),
/// whose logits it writes into `logits`.
fn catch_up(source: &mut dyn BatchSource, context: &[i32], logits: &mut Vec<f32>) -> Result<()> {
    let keep = common_prefix(source.context(), context).min(context.len() - 1);
    source.truncate(keep)?;
    for chunk in context[keep..].chunks(source.n_batch().max(1)) {
        source.forward(chunk, logits)?;
    }
    Ok(())
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    EndOfGeneration,
    MaxTokens,
    /// The per-token callback asked to stop.
    Callback,
}

/// Generates up to `max_tokens` after `prompt` by speculative steps of up
/// to `k` drafted tokens, stopping at an end-of-generation token (not
/// returned). `on_token(id, count)` sees each token; Ok(true) stops after
/// it. `stats` counts the steps.
#[allow(clippy::too_many_arguments)]
pub fn generate<E: From<Error>>(
    decoder: &mut Decoder,
    main: &mut dyn BatchSource,
    drafter: &mut Drafter,
    tokens: Option<&dyn TokenText>,
    prompt: &[i32],
    max_tokens: usize,
    k: usize,
    stats: &mut Stats,
    on_token: &mut dyn FnMut(i32, usize) -> std::result::Result<bool, E>,
) -> std::result::Result<(Vec<i32>, Stop), E> {
    if prompt.is_empty() {
        return Err(Error::Argument("the prompt is empty (give at least one token)".into()).into());
    }
    let mut room = main.n_ctx();
    if let Drafter::Model(draft) = drafter {
        room = room.min(draft.n_ctx());
    }
    // Every generated token but the last is fed back.
    let needed = prompt.len() + max_tokens.saturating_sub(1);
    if needed > room {
        return Err(Error::Argument(format!(
            "the prompt ({} tokens) plus max_tokens ({max_tokens}) needs {needed} positions, but the context has \
             {room} (raise n_ctx or lower max_tokens)",
            prompt.len()
        ))
        .into());
    }
    let mut context = Vec::with_capacity(prompt.len() + max_tokens + MAX_K);
    context.extend_from_slice(prompt);
    let mut out = Vec::with_capacity(max_tokens);
    while out.len() < max_tokens {
        // no token drafted past max_tokens: the step adds one of its own
        let n = k.min(max_tokens - out.len() - 1);
        let step = decoder.step(main, drafter, &context, n)?;
        stats.add(&step);
        for id in step.tokens {
            if tokens.is_some_and(|t| t.is_eog(id)) {
                return Ok((out, Stop::EndOfGeneration));
            }
            out.push(id);
            context.push(id);
            if on_token(id, out.len())? {
                return Ok((out, Stop::Callback));
            }
        }
    }
    Ok((out, Stop::MaxTokens))
}

/// The draft of a Lugh::Speculative.
pub enum Draft {
    Model(Arc<Inference>),
    Ngram(NgramOptions),
}

/// The settings of a Lugh::Speculative.
#[derive(Clone, Debug)]
pub struct SpecOptions {
    /// Tokens drafted per step, 1..=MAX_K.
    pub k: usize,
    /// The sampling both models' distributions go through (penalties are
    /// not supported: they would depend on each row's own history).
    pub sampler: SamplerOptions,
    /// Verify in passes of at most [`ONE_ROW_KERNEL_ROWS`] rows, computed as
    /// decode steps compute them (greedy output is plain greedy output);
    /// false: every row of a step in one pass.
    pub exact: bool,
}

impl Default for SpecOptions {
    /// k 4, exact, and Lugh's sampling defaults (temperature 0.8, top_k 40, top_p 0.95).
    fn default() -> Self {
        SpecOptions { k: 4, sampler: SamplerOptions::default(), exact: true }
    }
}

/// The caches and pools of a Lugh::Speculative, made on first use.
#[derive(Default)]
struct State {
    main_cache: Option<KvCache>,
    main_pool: Option<ComputePool>,
    draft_cache: Option<KvCache>,
    draft_pool: Option<ComputePool>,
    last_draft: Option<LastDraft>,
}

/// The last draft_tokens call: its context, proposal and distributions, for
/// a verify_tokens of the same proposal.
struct LastDraft {
    context: Vec<i32>,
    proposal: Vec<i32>,
    qs: Vec<Dist>,
}

/// What a call runs with: the main model, the drafter, the last draft.
type Body<'a, T, E> = &'a mut dyn FnMut(&mut dyn BatchSource, &mut Drafter, &mut Option<LastDraft>) -> Result<T, E>;

/// A Lugh::Speculative: a main session, a draft, settings, statistics.
pub struct Speculative {
    main: Arc<Inference>,
    draft: Draft,
    options: SpecOptions,
    /// Empty while a call runs (its callback may call back into this object:
    /// it gets an error, not a deadlock).
    state: Mutex<Option<State>>,
    stats: Mutex<Stats>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const BUSY: &str = "this Lugh::Speculative is in use by a call running on it (a callback cannot call it again)";

impl Speculative {
    /// Checks k, the sampling options and that the draft model shares the
    /// main model's vocabulary.
    pub fn new(main: Arc<Inference>, draft: Draft, options: SpecOptions) -> Result<Speculative> {
        check_k(i64::try_from(options.k).unwrap_or(i64::MAX))?;
        options.sampler.validate()?;
        let s = &options.sampler;
        if s.repeat_penalty != 1.0 || s.presence_penalty != 0.0 || s.frequency_penalty != 0.0 {
            return Err(Error::Argument("speculative decoding does not support repetition penalties".into()));
        }
        match &draft {
            Draft::Model(d) if d.runner.n_vocab() != main.runner.n_vocab() => {
                return Err(Error::Argument(format!(
                    "the draft model's vocabulary has {} tokens but the main model's has {}: they must share one",
                    d.runner.n_vocab(),
                    main.runner.n_vocab()
                )))
            }
            Draft::Ngram(o) => o.validate()?,
            Draft::Model(_) => {}
        }
        Ok(Speculative { main, draft, options, state: Mutex::new(Some(State::default())), stats: Mutex::default() })
    }

    pub fn options(&self) -> &SpecOptions {
        &self.options
    }
    pub fn n_vocab(&self) -> usize {
        self.main.runner.n_vocab()
    }
    pub fn stats(&self) -> Stats {
        *lock(&self.stats)
    }
    pub fn reset_stats(&self) {
        *lock(&self.stats) = Stats::default();
    }
    /// "model" or "ngram".
    pub fn draft_kind(&self) -> &'static str {
        match self.draft {
            Draft::Model(_) => "model",
            Draft::Ngram(_) => "ngram",
        }
    }

    /// Makes the caches (and compute pools) now rather than at first use.
    pub fn init_caches(&self) -> Result<()> {
        self.with_state(&mut |_, _, _| Ok::<_, Error>(()))
    }

    /// Empties the caches and forgets the last draft (statistics stay).
    pub fn reset(&self) -> Result<()> {
        let mut slot = lock(&self.state);
        let state = slot.as_mut().ok_or_else(|| Error::Argument(BUSY.into()))?;
        for cache in [&mut state.main_cache, &mut state.draft_cache].into_iter().flatten() {
            cache.clear();
        }
        state.last_draft = None;
        Ok(())
    }

    /// Runs `body` with the main model, the drafter and the state (out of
    /// its slot, put back afterwards), the caches made if need be.
    fn with_state<T, E: From<Error>>(&self, body: Body<T, E>) -> Result<T, E> {
        let mut state = lock(&self.state).take().ok_or_else(|| Error::Argument(BUSY.into()))?;
        let result = self.run_in(&mut state, body);
        *lock(&self.state) = Some(state);
        result
    }

    fn run_in<T, E: From<Error>>(&self, state: &mut State, body: Body<T, E>) -> Result<T, E> {
        let runner = &self.main.runner;
        let main_cache = take_or_make(&mut state.main_cache, || runner.new_cache())?;
        let main_pool = take_or_make(&mut state.main_pool, || runner.new_pool())?;
        let mut main = CachedRunner { runner, cache: main_cache, pool: Some(main_pool), overrides: &NO_OVERRIDES };
        match &self.draft {
            Draft::Ngram(options) => body(&mut main, &mut Drafter::Ngram(*options), &mut state.last_draft),
            Draft::Model(d) => {
                let runner = &d.runner;
                let cache = take_or_make(&mut state.draft_cache, || runner.new_cache())?;
                let pool = take_or_make(&mut state.draft_pool, || runner.new_pool())?;
                let mut draft = CachedRunner { runner, cache, pool: Some(pool), overrides: &NO_OVERRIDES };
                body(&mut main, &mut Drafter::Model(&mut draft), &mut state.last_draft)
            }
        }
    }

    /// The sampling options of a call: the object's, with `seed` if given.
    fn decoder(&self, seed: Option<u64>) -> Result<Decoder> {
        let options = SamplerOptions { seed: seed.or(self.options.sampler.seed), ..self.options.sampler.clone() };
        let vocab = self.main.runner.model().vocab().ok();
        let mut decoder = Decoder::new(&options, vocab.as_deref())?;
        decoder.exact(self.options.exact, self.main.runner.hparams().has_recurrent());
        Ok(decoder)
    }

    /// Checks token ids against the vocabulary (`what` names the list).
    fn check_tokens(&self, tokens: &[i32], what: &str, allow_empty: bool) -> Result<()> {
        if tokens.is_empty() && !allow_empty {
            return Err(Error::Argument(format!("{what} is empty (give at least one token)")));
        }
        let n_vocab = self.n_vocab();
        if let Some((pos, &id)) = tokens.iter().enumerate().find(|&(_, &id)| id < 0 || id as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { pos: Some(pos), id: id as i64, n_vocab });
        }
        Ok(())
    }

    /// Checks that `n` positions fit in both models' contexts.
    fn check_room(&self, n: usize) -> Result<()> {
        let mut room = self.main.runner.n_ctx();
        if let Draft::Model(d) = &self.draft {
            room = room.min(d.runner.n_ctx());
        }
        if n > room {
            return Err(Error::Argument(format!(
                "{n} positions are needed but the context has {room} (create the sessions with a larger n_ctx)"
            )));
        }
        Ok(())
    }

    /// Generates up to `max_tokens` after `prompt` (see [`generate`]).
    pub fn generate<E: From<Error>>(
        &self,
        prompt: &[i32],
        max_tokens: usize,
        seed: Option<u64>,
        grammar: Option<&Arc<Grammar>>,
        on_token: impl FnMut(i32, usize) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(Vec<i32>, Stop), E> {
        self.check_tokens(prompt, "the prompt", false)?;
        let mut decoder = self.decoder(seed)?;
        let vocab = self.main.runner.model().vocab().ok();
        if let Some(grammar) = grammar {
            let vocab = vocab.clone().ok_or_else(|| {
                Error::Argument("a grammar needs the model's vocabulary, and this model has none".into())
            })?;
            decoder.constrain(grammar, vocab)?;
        }
        let text = vocab.as_deref().map(|v| v as &dyn TokenText);
        let k = self.options.k;
        let mut stats = Stats::default();
        let mut on_token = on_token;
        let result = self.with_state(&mut |main, drafter, last| {
            *last = None;
            generate(&mut decoder, main, drafter, text, prompt, max_tokens, k, &mut stats, &mut on_token)
        });
        let mut total = lock(&self.stats);
        total.drafted += stats.drafted;
        total.accepted += stats.accepted;
        total.steps += stats.steps;
        result
    }

    /// One step after `context`: k drafted tokens verified.
    pub fn step(&self, context: &[i32]) -> Result<Vec<i32>> {
        self.check_tokens(context, "the context", false)?;
        self.check_room(context.len() + self.options.k)?;
        let mut decoder = self.decoder(None)?;
        let step = self.with_state(&mut |main, drafter, last| {
            *last = None;
            decoder.step(main, drafter, context, self.options.k)
        })?;
        lock(&self.stats).add(&step);
        Ok(step.tokens)
    }

    /// Up to `n` tokens drafted after `context`, remembered for a
    /// verify_tokens of them.
    pub fn draft_tokens(&self, context: &[i32], n: usize) -> Result<Vec<i32>> {
        self.check_tokens(context, "the context", false)?;
        if n > MAX_K {
            return Err(Error::Argument(format!("n_draft must be between 0 and {MAX_K}, got {n}")));
        }
        self.check_room(context.len() + n)?;
        let mut decoder = self.decoder(None)?;
        let drafted = self.with_state(&mut |_, drafter, last| {
            let drafted = decoder.draft(drafter, context, n)?;
            let qs = std::mem::take(&mut decoder.qs);
            *last = Some(LastDraft { context: context.to_vec(), proposal: drafted.clone(), qs });
            Ok::<_, Error>(drafted)
        })?;
        lock(&self.stats).drafted += drafted.len() as u64;
        Ok(drafted)
    }

    /// Verifies `proposal` after `context`: the accepted tokens and the
    /// main model's own after them. The draft's distributions are those of
    /// the last draft_tokens call when it drafted this proposal after this
    /// context, else computed.
    pub fn verify_tokens(&self, context: &[i32], proposal: &[i32]) -> Result<Vec<i32>> {
        self.check_tokens(context, "the context", false)?;
        self.check_tokens(proposal, "the draft", true)?;
        if proposal.len() > MAX_K {
            return Err(Error::Argument(format!("the draft has {} tokens; at most {MAX_K}", proposal.len())));
        }
        self.check_room(context.len() + proposal.len())?;
        let mut decoder = self.decoder(None)?;
        let mut counted = false;
        let step = self.with_state(&mut |main, drafter, last| {
            match last.take() {
                Some(d) if d.context == context && d.proposal == proposal => {
                    decoder.qs = d.qs;
                    counted = true;
                }
                _ => decoder.score_draft(drafter, context, proposal)?,
            }
            decoder.verify(main, context, proposal)
        })?;
        let mut stats = lock(&self.stats);
        // a proposal of draft_tokens was counted there
        stats.drafted += if counted { 0 } else { step.drafted as u64 };
        stats.accepted += step.accepted as u64;
        stats.steps += 1;
        Ok(step.tokens)
    }
}

/// The value in `slot`, made first if there is none; it stays in the slot.
fn take_or_make<T>(slot: &mut Option<T>, make: impl FnOnce() -> Result<T>) -> Result<&mut T> {
    if slot.is_none() {
        *slot = Some(make()?);
    }
    Ok(slot.as_mut().expect("just made"))
}

#[cfg(test)]
#[path = "speculative_tests.rs"]
mod tests;
