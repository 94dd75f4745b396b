//! The engine loop: the one place that runs the model for the server.
//!
//! HTTP handlers never touch the session: they [`Engine::submit`] a job and
//! read its events from a channel of their own. The loop runs on its own
//! thread, so the server keeps accepting and streaming while it computes.
//!
//! For now the loop runs one job at a time with the single-sequence
//! `Inference::generate`; the continuous-batching scheduler replaces only
//! [`run_loop`] and [`generate`] (its `step()` events map onto [`Event`]).
use super::error::ApiError;
use crate::engine::generate::embedding::Pooling;
use crate::engine::generate::generation::{GenerateOptions, StopReason, TokenLogprob};
use crate::engine::generate::inference::Inference;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What a request asks the engine to do.
pub enum Work {
    /// Generate from prompt tokens.
    Generate { prompt: Vec<i32>, options: Box<GenerateOptions> },
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
    /// character or a possible stop string is incomplete).
    Token(String),
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
    pub fn start(session: Arc<Inference>, n_parallel: usize, max_queue: usize) -> Engine {
        let (jobs, queue) = mpsc::channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (in_flight, stopping) = (in_flight.clone(), stopping.clone());
            std::thread::Builder::new()
                .name("lugh-engine".into())
                .spawn(move || run_loop(&session, &queue, &in_flight, &stopping))
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

fn run_loop(session: &Arc<Inference>, queue: &mpsc::Receiver<Job>, in_flight: &AtomicUsize, stopping: &AtomicBool) {
    loop {
        let job = match queue.recv_timeout(IDLE_CHECK) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) if !stopping.load(Ordering::Relaxed) => continue,
            Err(_) => return,
        };
        let last = if stopping.load(Ordering::Relaxed) {
            Some(Event::Failed(ApiError::shutting_down()))
        } else if job.events.is_closed() {
            None
        } else {
            Some(match job.work {
                Work::Generate { prompt, options } => {
                    generate(session, &prompt, &options, &job.events, job.deadline, stopping)
                }
                Work::Embed { inputs, pooling } => {
                    let pooling = pooling.or_else(|| session.model_pooling()).unwrap_or(Pooling::Mean);
                    match session.embed(&inputs, pooling, true, &Default::default()) {
                        Ok(rows) => Event::Embeddings(rows),
                        Err(e) => Event::Failed(e.into()),
                    }
                }
            })
        };
        // the slot is free before its client hears the end, so that the
        // client's next request finds it free
        in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(event) = last {
            let _ = job.events.send(event);
        }
    }
}

/// One generation, its tokens sent as they come; returns the last event.
/// It stops early when the receiver is gone (the client disconnected), at
/// the deadline, or at shutdown.
fn generate(
    session: &Arc<Inference>,
    prompt: &[i32],
    options: &GenerateOptions,
    events: &UnboundedSender<Event>,
    deadline: Instant,
    stopping: &AtomicBool,
) -> Event {
    let timed_out = std::cell::Cell::new(false);
    let give_up = || {
        if Instant::now() >= deadline {
            timed_out.set(true);
        }
        events.is_closed() || timed_out.get() || stopping.load(Ordering::Relaxed)
    };
    let result = session.generate::<crate::engine::Error>(
        prompt,
        None,
        options,
        |_, _| Ok(give_up()),
        |step| {
            let gone = events.send(Event::Token(step.text.to_string())).is_err();
            Ok(gone || give_up())
        },
        |rest| {
            let _ = events.send(Event::Tail(rest.to_string()));
            Ok(())
        },
    );
    match result {
        Ok(_) if timed_out.get() => {
            Event::Failed(ApiError::timed_out("the request took longer than the server's --timeout"))
        }
        Ok(_) if stopping.load(Ordering::Relaxed) => Event::Failed(ApiError::shutting_down()),
        Ok(g) => {
            let (finish, n_completion) = match g.stop_reason {
                StopReason::EndOfGeneration => (Finish::Stop, g.tokens.len() + 1),
                StopReason::StopString => (Finish::Stop, g.tokens.len()),
                _ => (Finish::Length, g.tokens.len()),
            };
            Event::Finished(Finished {
                finish,
                n_prompt: g.n_prompt,
                n_completion,
                logprobs: g.logprobs,
                prompt_ms: g.prompt_seconds * 1e3,
                predicted_ms: g.generate_seconds * 1e3,
            })
        }
        Err(e) => Event::Failed(e.into()),
    }
}
