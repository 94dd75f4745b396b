//! The engine loop: the one place that runs the model for the server.
//!
//! HTTP handlers never touch the session: they [`Engine::submit`] a job and
//! read its events from a channel of their own. The loop runs on its own
//! thread, so the server keeps accepting and streaming while it computes.
//!
//! The loop drives the continuous-batching scheduler (`Batch`): the
//! running requests advance together, one graph a step, and new ones join
//! between steps (llama-server's slots, `-np`).
use super::error::ApiError;
use crate::engine::generate::batch::{Batch, BatchEvent, BatchOptions, BatchRequest, SeqId};
use crate::engine::generate::embedding::Pooling;
use crate::engine::generate::generation::{GenerateOptions, StopReason, TokenLogprob};
use crate::engine::generate::inference::Inference;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What a request asks the engine to do.
pub enum Work {
    /// Generate from prompt tokens.
    Generate { prompt: Vec<i32>, options: Box<GenerateOptions>, cache_prompt: bool },
    /// The embedding of each token sequence (None: the model's pooling,
    /// mean when it names none).
    Embed { inputs: Vec<Vec<i32>>, pooling: Option<Pooling> },
}

struct Job {
    work: Work,
    events: UnboundedSender<Event>,
    /// Past it the job is cancelled (`--timeout`).
    deadline: Instant,
}

/// Why a generation ended, as OpenAI's finish_reason says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// max_tokens, or the slot's context is full.
    Length,
}

impl Finish {
    pub fn name(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// The end of a generation.
pub struct Finished {
    pub finish: Finish,
    pub n_prompt: usize,
    /// Prompt tokens taken from a slot's cache, not evaluated.
    pub n_cached: usize,
    /// Tokens sampled, the end-of-generation token included (llama-server's
    /// n_decoded).
    pub n_completion: usize,
    pub logprobs: Vec<TokenLogprob>,
    pub prompt_ms: f64,
    pub predicted_ms: f64,
}

/// What a job sends back, in order: tokens, then one Finished (or one
/// Failed); an embedding job sends one Embeddings (or Failed).
pub enum Event {
    /// The text a generated token released (often empty while a
    /// character or a possible stop string is incomplete), and the token's
    /// log-probabilities when the request asked for them.
    Token(String, Option<TokenLogprob>),
    /// Text held back until the end.
    Tail(String),
    Finished(Finished),
    Embeddings(Vec<Vec<f32>>),
    Failed(ApiError),
}

/// The handle the HTTP side holds.
pub struct Engine {
    jobs: mpsc::Sender<Job>,
    /// Jobs submitted and not yet done (running or waiting).
    in_flight: Arc<AtomicUsize>,
    /// Set at shutdown: the running job is cancelled, waiting ones refused.
    stopping: Arc<AtomicBool>,
    capacity: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Starts the loop on its own thread; `n_parallel` slots and `max_queue`
    /// waiting requests are accepted at once, more are refused.
    pub fn start(session: Arc<Inference>, n_parallel: usize, max_queue: usize, deterministic: bool) -> Engine {
        let (jobs, queue) = mpsc::channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (in_flight, stopping) = (in_flight.clone(), stopping.clone());
            std::thread::Builder::new()
                .name("lugh-engine".into())
                .spawn(move || {
                    let options = BatchOptions { n_slots: n_parallel, max_queued: max_queue, deterministic };
                    run_loop(&session, &queue, &in_flight, &stopping, options)
                })
                .expect("a thread for the engine")
        };
        Engine { jobs, in_flight, stopping, capacity: n_parallel + max_queue, thread: Mutex::new(Some(thread)) }
    }

    /// Queues `work`; its events arrive on the receiver. Dropping the
    /// receiver (a client gone) cancels the job at its next token.
    pub fn submit(&self, work: Work, deadline: Instant) -> Result<UnboundedReceiver<Event>, ApiError> {
        if self.stopping.load(Ordering::Relaxed) {
            return Err(ApiError::busy(1));
        }
        let reserved =
            self.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.capacity).then_some(n + 1));
        if reserved.is_err() {
            return Err(ApiError::busy(1));
        }
        let (events, receiver) = unbounded_channel();
        if self.jobs.send(Job { work, events, deadline }).is_err() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::internal("the engine has stopped"));
        }
        Ok(receiver)
    }

    /// Cancels what runs and refuses what waits (shutdown).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Stops, and waits for the loop to end.
    pub fn join(&self) {
        self.stop();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// How often an idle loop looks whether the server is stopping.
const IDLE_CHECK: Duration = Duration::from_millis(100);

/// A generation in the batch, and where its events go.
struct Live {
    events: UnboundedSender<Event>,
    deadline: Instant,
    added: Instant,
    /// When its first token came (the prompt's end).
    first_token: Option<Instant>,
    logprobs: Vec<TokenLogprob>,
}

/// The loop: takes jobs as they come, adds generations to the batch (which
/// evaluates one token of every running request, and the prompts of new
/// ones, in one graph a step) and sends each step's tokens to their
/// requests. Embeddings run between steps.
fn run_loop(
    session: &Arc<Inference>,
    queue: &mpsc::Receiver<Job>,
    in_flight: &AtomicUsize,
    stopping: &AtomicBool,
    options: BatchOptions,
) {
    let mut batch = match Batch::new(session.clone(), options) {
        Ok(b) => b,
        Err(e) => return refuse_all(queue, in_flight, &ApiError::from(e)),
    };
    let mut live: HashMap<SeqId, Live> = HashMap::new();
    loop {
        // wait for work only when there is nothing to compute
        let first = if batch.is_idle() {
            match queue.recv_timeout(IDLE_CHECK) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) if !stopping.load(Ordering::Relaxed) => continue,
                Err(_) if live.is_empty() => return,
                Err(_) => None,
            }
        } else {
            None
        };
        for job in first.into_iter().chain(std::iter::from_fn(|| queue.try_recv().ok())) {
            take(session, &mut batch, &mut live, job, in_flight, stopping);
        }
        // requests whose client left, whose time ran out, or all at shutdown
        let now = Instant::now();
        let ending: Vec<(SeqId, Option<ApiError>)> = live
            .iter()
            .filter_map(|(&seq, l)| {
                if stopping.load(Ordering::Relaxed) {
                    Some((seq, Some(ApiError::shutting_down())))
                } else if l.events.is_closed() {
                    Some((seq, None))
                } else if now >= l.deadline {
                    Some((seq, Some(ApiError::timed_out("the request took longer than the server's --timeout"))))
                } else {
                    None
                }
            })
            .collect();
        for (seq, error) in ending {
            batch.cancel(seq);
            if let Some(l) = live.remove(&seq) {
                in_flight.fetch_sub(1, Ordering::AcqRel);
                if let Some(error) = error {
                    let _ = l.events.send(Event::Failed(error));
                }
            }
        }
        if batch.is_idle() {
            continue;
        }
        match batch.step() {
            Ok(events) => {
                for event in events {
                    deliver(&mut live, event, in_flight);
                }
            }
            Err(e) => {
                // the step's graph failed: every request in it ends with the error
                let error = ApiError::from(e);
                for (seq, l) in live.drain() {
                    batch.cancel(seq);
                    in_flight.fetch_sub(1, Ordering::AcqRel);
                    let _ = l.events.send(Event::Failed(error.clone()));
                }
            }
        }
    }
}

/// Answers every job still queued with `error` (the session could not
/// batch at all).
fn refuse_all(queue: &mpsc::Receiver<Job>, in_flight: &AtomicUsize, error: &ApiError) {
    while let Ok(job) = queue.recv() {
        in_flight.fetch_sub(1, Ordering::AcqRel);
        let _ = job.events.send(Event::Failed(error.clone()));
    }
}

/// A new job: a generation joins the batch; an embedding is computed now.
fn take(
    session: &Arc<Inference>,
    batch: &mut Batch,
    live: &mut HashMap<SeqId, Live>,
    job: Job,
    in_flight: &AtomicUsize,
    stopping: &AtomicBool,
) {
    let done = |event: Option<Event>| {
        // the slot is free before its client hears the end, so that the
        // client's next request finds it free
        in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(event) = event {
            let _ = job.events.send(event);
        }
    };
    if stopping.load(Ordering::Relaxed) {
        return done(Some(Event::Failed(ApiError::shutting_down())));
    }
    if job.events.is_closed() {
        return done(None);
    }
    match job.work {
        Work::Generate { prompt, options, cache_prompt } => {
            let request = BatchRequest { tokens: prompt, options: *options, cache_prompt };
            match batch.add(request) {
                Ok(seq) => {
                    let now = Instant::now();
                    live.insert(
                        seq,
                        Live {
                            events: job.events,
                            deadline: job.deadline,
                            added: now,
                            first_token: None,
                            logprobs: Vec::new(),
                        },
                    );
                }
                Err(e) => done(Some(Event::Failed(e.into()))),
            }
        }
        Work::Embed { inputs, pooling } => {
            let pooling = pooling.or_else(|| session.model_pooling()).unwrap_or(Pooling::Mean);
            done(Some(match session.embed(&inputs, pooling, true, &Default::default()) {
                Ok(rows) => Event::Embeddings(rows),
                Err(e) => Event::Failed(e.into()),
            }));
        }
    }
}

/// One event of a step, sent to its request.
fn deliver(live: &mut HashMap<SeqId, Live>, event: BatchEvent, in_flight: &AtomicUsize) {
    match event {
        BatchEvent::Token { seq, text, logprob, .. } => {
            if let Some(l) = live.get_mut(&seq) {
                l.first_token.get_or_insert_with(Instant::now);
                l.logprobs.extend(logprob.clone());
                let _ = l.events.send(Event::Token(text, logprob));
            }
        }
        BatchEvent::Done { seq, reason, text, usage } => {
            let Some(l) = live.remove(&seq) else { return };
            in_flight.fetch_sub(1, Ordering::AcqRel);
            if !text.is_empty() {
                let _ = l.events.send(Event::Tail(text));
            }
            // llama-server's n_decoded counts the end-of-generation token
            let (finish, n_completion) = match reason {
                StopReason::EndOfGeneration => (Finish::Stop, usage.completion_tokens + 1),
                StopReason::StopString => (Finish::Stop, usage.completion_tokens),
                _ => (Finish::Length, usage.completion_tokens),
            };
            let now = Instant::now();
            let first = l.first_token.unwrap_or(now);
            let _ = l.events.send(Event::Finished(Finished {
                finish,
                n_prompt: usage.prompt_tokens,
                n_cached: usage.cached_tokens,
                n_completion,
                logprobs: l.logprobs,
                prompt_ms: first.duration_since(l.added).as_secs_f64() * 1e3,
                predicted_ms: now.duration_since(first).as_secs_f64() * 1e3,
            }));
        }
        BatchEvent::Failed { seq, error } => {
            if let Some(l) = live.remove(&seq) {
                in_flight.fetch_sub(1, Ordering::AcqRel);
                let _ = l.events.send(Event::Failed(ApiError::internal(error)));
            }
        }
    }
}
