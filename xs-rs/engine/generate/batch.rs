//! [`Batch`]: many conversations at once on one model (continuous batching,
//! as `llama-server -np N -cb`). N slots, each with its own KV cache of the
//! session's n_ctx positions (llama.cpp's seq_id cells: the total context
//! split between slots); requests queue while every slot is busy. Each
//! [`Batch::step`] evaluates, in one graph, one token of every decoding
//! sequence and the next prompt chunk of newly arrived ones, samples each
//! (its own [`Decoder`]: sampler chain, grammar, stop strings, logprobs) and
//! returns what happened as [`BatchEvent`]s.
//!
//! A new request's prompt starts from the longest prefix that a free slot's
//! cache holds (its previous conversation) or that any slot's cache holds (a
//! shared system prompt, copied cell by cell) unless the request says
//! `cache_prompt: false`.
//!
//! Rounding: a prompt chunk is evaluated with as many rows as its solo run
//! evaluates it with (whole chunks of n_batch). Rows beside other requests'
//! rows can still round differently from a row alone with some weight types
//! (SmolLM2 Q4_1: 8 of 8 prompts equal to their solo runs over 4 slots;
//! Qwen2.5-Coder Q4_K_M: 6 of 8), and a prompt that continues cells another
//! request evaluated rounds as that split does (attention over 64 query rows
//! or more rounds differently from fewer, as in llama.cpp).
//! [`BatchOptions::deterministic`] evaluates every sequence in a graph of
//! its own on a cleared cache, which is its solo, uncached run.
//!
//! Plain Rust, no Perl: a server thread can own a `Batch` (it is `Send`).
use crate::engine::forward::runner::{ComputePool, KvCache};
use crate::engine::generate::generation::TokenText;
use crate::engine::generate::generation::{common_prefix, Decoded, Decoder, GenerateOptions, StopReason, TokenLogprob};
use crate::engine::generate::inference::Inference;
use crate::engine::model::tokenizer::Vocab;
use crate::engine::{Error, Result};
use std::collections::VecDeque;
use std::sync::Arc;

/// Names a request for as long as the batch lives (never reused).
pub type SeqId = u64;

/// The most slots a batch has.
pub const MAX_SLOTS: usize = 256;

/// The settings of a [`Batch`].
#[derive(Clone, Copy, Debug)]
pub struct BatchOptions {
    /// Sequences evaluated together, each with a KV cache of the session's
    /// n_ctx positions.
    pub n_slots: usize,
    /// Requests waiting for a slot beyond which [`Batch::add`] refuses (a
    /// server answers 503).
    pub max_queued: usize,
    /// Every sequence's output equals its solo, uncached run: no prompt
    /// cache, and one graph per sequence (no batching).
    pub deterministic: bool,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions { n_slots: 4, max_queued: 64, deterministic: false }
    }
}

/// One request: its prompt's tokens and how to generate.
#[derive(Clone, Debug)]
pub struct BatchRequest {
    pub tokens: Vec<i32>,
    pub options: GenerateOptions,
    /// Start from cells a slot already holds (llama-server's cache_prompt).
    pub cache_prompt: bool,
}

/// A finished request's token counts (OpenAI's usage).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens taken from a cache instead of evaluated.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

/// What a step did to one request.
#[derive(Debug)]
pub enum BatchEvent {
    /// A generated token, with the text it released (whole characters,
    /// never part of a stop string; often empty while one is incomplete).
    Token { seq: SeqId, id: i32, text: String, logprob: Option<TokenLogprob> },
    /// The request ended: why, the text still held back (to append), and
    /// its counts. Its slot is free.
    Done { seq: SeqId, reason: StopReason, text: String, usage: Usage },
    /// The request failed (a grammar with no allowed token, a failed
    /// compute); its slot is free.
    Failed { seq: SeqId, error: String },
}

/// A request waiting for a slot.
struct Queued {
    seq: SeqId,
    request: BatchRequest,
    decoder: Decoder,
    settings: u64,
}

/// A request in a slot.
struct Running {
    seq: SeqId,
    request: BatchRequest,
    decoder: Decoder,
    /// The key of its RoPE settings and adapters: only requests with the
    /// same share a graph.
    settings: u64,
    /// Prompt tokens in the cache (reused or evaluated).
    done: usize,
    n_cached: usize,
}

impl Running {
    /// The tokens its next evaluation appends: the next prompt chunk, or
    /// the token generated last.
    fn pending(&self, n_batch: usize) -> &[i32] {
        let prompt = &self.request.tokens;
        if self.done < prompt.len() {
            return &prompt[self.done..prompt.len().min(self.done + n_batch)];
        }
        let generated = self.decoder.generated();
        &generated[generated.len() - 1..]
    }

    fn decoding(&self) -> bool {
        self.done == self.request.tokens.len()
    }
}

struct Slot {
    cache: KvCache,
    running: Option<Running>,
}

/// The scheduler (see the module's text).
pub struct Batch {
    inference: Arc<Inference>,
    vocab: Option<Arc<Vocab>>,
    options: BatchOptions,
    slots: Vec<Slot>,
    queue: VecDeque<Queued>,
    next_seq: SeqId,
    /// One compute pool, or with `deterministic` one a slot: a pool keeps
    /// the graph of its last step, which a slot evaluated alone reuses.
    pools: Vec<ComputePool>,
    logits: Vec<f32>,
}

impl Batch {
    /// A batch of `options.n_slots` slots over `inference` (each slot's
    /// cache is allocated now).
    pub fn new(inference: Arc<Inference>, options: BatchOptions) -> Result<Batch> {
        let runner = &inference.runner;
        if options.n_slots == 0 || options.n_slots > MAX_SLOTS.min(runner.n_batch()) {
            return Err(Error::Argument(format!(
                "slots must be an integer in [1, {}] (at most n_batch, {}), got {}",
                MAX_SLOTS.min(runner.n_batch()),
                runner.n_batch(),
                options.n_slots
            )));
        }
        let slots = (0..options.n_slots)
            .map(|_| Ok(Slot { cache: runner.new_cache()?, running: None }))
            .collect::<Result<Vec<_>>>()?;
        let n_pools = if options.deterministic { options.n_slots } else { 1 };
        let pools = (0..n_pools).map(|_| runner.new_pool()).collect::<Result<Vec<_>>>()?;
        let vocab = runner.model().vocab().ok();
        Ok(Batch { inference, vocab, options, slots, queue: VecDeque::new(), next_seq: 1, pools, logits: Vec::new() })
    }

    pub fn options(&self) -> BatchOptions {
        self.options
    }

    /// Requests in a slot.
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.running.is_some()).count()
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Nothing running and nothing waiting.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.active() == 0
    }

    /// Whether [`Batch::add`] would refuse for want of room: every slot
    /// taken (or promised to a waiting request) and max_queued waiting.
    pub fn is_full(&self) -> bool {
        self.queue.len() + self.active() >= self.options.n_slots + self.options.max_queued
    }

    fn text(&self) -> Option<&dyn TokenText> {
        self.vocab.as_deref().map(|v| v as &dyn TokenText)
    }

    /// Queues a request (checked now: its tokens, options and room in a
    /// slot's context) and returns its id; an error when the queue is full.
    pub fn add(&mut self, mut request: BatchRequest) -> Result<SeqId> {
        if self.is_full() {
            return Err(Error::Argument(format!(
                "the batch is full: {} requests running and {} waiting (max_queued {})",
                self.active(),
                self.queue.len(),
                self.options.max_queued
            )));
        }
        let runner = &self.inference.runner;
        let n_vocab = runner.n_vocab();
        if let Some((pos, &id)) = request.tokens.iter().enumerate().find(|&(_, &id)| id < 0 || id as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { pos: Some(pos), id: id as i64, n_vocab });
        }
        // events carry the text
        request.options.need_text = self.vocab.is_some();
        let decoder = Decoder::new(self.text(), &request.tokens, &request.options, runner.n_ctx())?;
        let settings = runner.settings_key(&request.options.overrides)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push_back(Queued { seq, request, decoder, settings });
        Ok(seq)
    }

    /// Ends a request now, running or waiting: its Done event (reason
    /// Cancelled) with what it generated, or None for an unknown id.
    pub fn cancel(&mut self, seq: SeqId) -> Option<BatchEvent> {
        if let Some(at) = self.queue.iter().position(|q| q.seq == seq) {
            let q = self.queue.remove(at)?;
            let usage = Usage { prompt_tokens: q.request.tokens.len(), ..Usage::default() };
            return Some(BatchEvent::Done { seq, reason: StopReason::Cancelled, text: String::new(), usage });
        }
        let slot = self.slots.iter_mut().find(|s| s.running.as_ref().is_some_and(|r| r.seq == seq))?;
        let mut running = slot.running.take()?;
        Some(finished(&mut running, StopReason::Cancelled))
    }

    /// Moves waiting requests into free slots, each starting from the
    /// longest prefix of its prompt that the caches hold.
    fn admit(&mut self, events: &mut Vec<BatchEvent>) {
        while let Some(free) = self.choose_slot() {
            let Some(q) = self.queue.pop_front() else { break };
            let Queued { seq, request, decoder, settings } = q;
            let mut running = Running { seq, request, decoder, settings, done: 0, n_cached: 0 };
            if running.request.options.max_tokens == 0 {
                events.push(finished(&mut running, StopReason::MaxTokens));
                continue;
            }
            match self.start_from_cache(free, &running) {
                Ok(n) => {
                    running.done = n;
                    running.n_cached = n;
                    self.slots[free].running = Some(running);
                }
                Err(e) => {
                    self.slots[free].cache.clear();
                    events.push(BatchEvent::Failed { seq, error: e.to_string() });
                }
            }
        }
    }

    /// The free slot for the next waiting request: the one whose cache
    /// shares most of its prompt, else the emptiest.
    fn choose_slot(&self) -> Option<usize> {
        let next = self.queue.front()?;
        let reuse = next.request.cache_prompt && !self.options.deterministic;
        let shared = |s: &Slot| {
            if reuse && s.cache.filled_with() == Some(next.settings) {
                common_prefix(s.cache.tokens(), &next.request.tokens)
            } else {
                0
            }
        };
        (0..self.slots.len())
            .filter(|&i| self.slots[i].running.is_none())
            .max_by_key(|&i| (shared(&self.slots[i]), std::cmp::Reverse(self.slots[i].cache.n_cached())))
    }

    /// Readies slot `at`'s cache for `running`'s prompt: keeps the prefix it
    /// shares, or copies a longer one from another slot; returns the prompt
    /// tokens it then holds (at most all but the last: its logits are
    /// needed).
    fn start_from_cache(&mut self, at: usize, running: &Running) -> Result<usize> {
        let prompt = &running.request.tokens;
        let most = prompt.len() - 1;
        if !running.request.cache_prompt || self.options.deterministic {
            self.slots[at].cache.clear();
            return Ok(0);
        }
        let shared = |cache: &KvCache| match cache.filled_with() == Some(running.settings) {
            true => common_prefix(cache.tokens(), prompt).min(most),
            false => 0,
        };
        let own = {
            let cache = &self.slots[at].cache;
            cache.restorable(shared(cache))
        };
        let donor = (0..self.slots.len())
            .filter(|&i| i != at)
            .map(|i| (i, self.slots[i].cache.copyable(shared(&self.slots[i].cache))))
            .max_by_key(|&(_, n)| n)
            .filter(|&(_, n)| n > own);
        match donor {
            Some((from, n)) => {
                let (to, from) = two_mut(&mut self.slots, at, from);
                to.cache.copy_prefix(&from.cache, n)?;
                Ok(n)
            }
            None => {
                self.slots[at].cache.resize(own)?;
                Ok(own)
            }
        }
    }

    /// One step: admits waiting requests, evaluates, samples, and returns
    /// what happened (nothing to do: no events). A failed evaluation fails
    /// the requests in its graph (Failed events), not the batch.
    pub fn step(&mut self) -> Result<Vec<BatchEvent>> {
        let mut events = Vec::new();
        self.admit(&mut events);
        if self.options.deterministic {
            let busy: Vec<usize> = (0..self.slots.len()).filter(|&i| self.slots[i].running.is_some()).collect();
            for i in busy {
                self.evaluate(vec![i], &mut events);
            }
        } else {
            for group in self.schedule() {
                self.evaluate(group, &mut events);
            }
        }
        Ok(events)
    }

    /// The slots a step evaluates, in groups of one graph each (requests
    /// with the same settings): every decoding sequence, then prompt chunks
    /// in order of arrival while they fit in n_batch tokens. A chunk is the
    /// one a solo run evaluates (n_batch tokens, or the rest), so that it
    /// rounds the same; the first always goes, so every prompt advances.
    fn schedule(&self) -> Vec<Vec<usize>> {
        let n_batch = self.inference.runner.n_batch();
        let mut order: Vec<usize> = (0..self.slots.len()).filter(|&i| self.slots[i].running.is_some()).collect();
        order.sort_by_key(|&i| self.slots[i].running.as_ref().map(|r| (!r.decoding(), r.seq)));
        let mut budget = n_batch;
        let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
        let mut first_prompt = true;
        for i in order {
            let r = self.slots[i].running.as_ref().expect("busy");
            if !r.decoding() {
                let n = r.pending(n_batch).len();
                if n > budget && !first_prompt {
                    continue;
                }
                first_prompt = false;
                budget = budget.saturating_sub(n);
            }
            match groups.iter_mut().find(|(key, _)| *key == r.settings) {
                Some((_, group)) => group.push(i),
                None => groups.push((r.settings, vec![i])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// Evaluates the slots `at` in one graph and samples those whose prompt
    /// is done.
    fn evaluate(&mut self, mut at: Vec<usize>, events: &mut Vec<BatchEvent>) {
        // the output rows come in the order of the slots
        at.sort_unstable();
        let n_batch = self.inference.runner.n_batch();
        let n_vocab = self.inference.runner.n_vocab();
        let Some(first) = self.slots[at[0]].running.as_ref() else { return };
        let overrides = first.request.options.overrides.clone();
        // a deterministic prompt goes whole, in n_batch chunks, as a solo run's
        let whole = self.options.deterministic;
        let computed = {
            let mut segs: Vec<(&mut KvCache, &[i32])> = Vec::with_capacity(at.len());
            for (i, slot) in self.slots.iter_mut().enumerate() {
                if let (true, Some(r)) = (at.contains(&i), &slot.running) {
                    let tokens = if whole && !r.decoding() { &r.request.tokens[r.done..] } else { r.pending(n_batch) };
                    segs.push((&mut slot.cache, tokens));
                }
            }
            let runner = &self.inference.runner;
            let pool = &mut self.pools[if whole { at[0] } else { 0 }];
            match (whole, &mut segs[..]) {
                (true, [(cache, tokens)]) => {
                    runner.forward_last_into(cache, tokens, Some(pool), &overrides, &mut self.logits)
                }
                _ => runner.forward_segments(&mut segs, Some(pool), &overrides, &mut self.logits),
            }
        };
        let text = self.vocab.as_deref().map(|v| v as &dyn TokenText);
        for (row, &i) in at.iter().enumerate() {
            let slot = &mut self.slots[i];
            let Some(r) = slot.running.as_mut() else { continue };
            if let Err(e) = &computed {
                events.push(BatchEvent::Failed { seq: r.seq, error: e.to_string() });
                slot.running = None;
                slot.cache.clear();
                continue;
            }
            if !r.decoding() {
                r.done = match whole {
                    true => r.request.tokens.len(),
                    false => (r.done + n_batch).min(r.request.tokens.len()),
                };
                if !r.decoding() {
                    continue;
                }
            }
            let logits = &self.logits[row * n_vocab..(row + 1) * n_vocab];
            let end = match r.decoder.next(logits, text, &r.request.options) {
                Err(e) => {
                    events.push(BatchEvent::Failed { seq: r.seq, error: e.to_string() });
                    slot.running = None;
                    continue;
                }
                Ok(Decoded::End) => Some(StopReason::EndOfGeneration),
                Ok(Decoded::Token { id, stopped, logprob }) => {
                    let text = r.decoder.released().to_string();
                    events.push(BatchEvent::Token { seq: r.seq, id, text, logprob });
                    if stopped {
                        Some(StopReason::StopString)
                    } else if r.decoder.generated().len() >= r.request.options.max_tokens {
                        Some(StopReason::MaxTokens)
                    } else {
                        None
                    }
                }
            };
            if let Some(reason) = end {
                events.push(finished(r, reason));
                slot.running = None;
            }
        }
    }
}

/// A request's Done event.
fn finished(r: &mut Running, reason: StopReason) -> BatchEvent {
    let usage = Usage {
        prompt_tokens: r.request.tokens.len(),
        cached_tokens: r.n_cached,
        completion_tokens: r.decoder.generated().len(),
    };
    BatchEvent::Done { seq: r.seq, reason, text: r.decoder.finish(), usage }
}

/// Two distinct elements of `v`, both mutable.
fn two_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b, "two_mut: the same element twice");
    if a < b {
        let (left, right) = v.split_at_mut(b);
        (&mut left[a], &mut right[0])
    } else {
        let (left, right) = v.split_at_mut(a);
        (&mut right[0], &mut left[b])
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
