//! The model's one thread and the work waiting for it. A request that a client waits on (a
//! query's embeddings: toolsift's filter holds the LLM request for them, `timeout_ms`) goes
//! before background work (the filter's backfill of a new catalog's tool texts, which it marks
//! with `x-toolsift-priority: background`), and background work is done one model run at a
//! time ([`Model::BACKGROUND_TOKENS_PER_RUN`]: all-MiniLM-L6-v2's [`BACKGROUND_TOKENS_PER_RUN`],
//! multilingual-e5-small's [`e5::BACKGROUND_TOKENS_PER_RUN`]), so a query waits for at most one
//! run of it, not for a catalog's worth of tool texts. Background work still gets a run after every
//! [`QUERY_BURST`] queries in a row: a steady stream of queries slows a backfill, never stops
//! it. Each request is its own job: its texts run with its own `input_type`, never mixed with
//! another request's.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::e5::{self, E5Embedder, E5Work};
use crate::model::{Embedder, Embeddings, InputType, MAX_TOKENS_PER_RUN, ModelError, Work};

/// The request header that says how urgent a request is: `background` for work nobody waits
/// on; anything else, or none, is a query.
pub const PRIORITY_HEADER: &str = "x-toolsift-priority";

/// all-MiniLM-L6-v2's padded tokens per model run of background work: about 8 tool texts of
/// 20-30 word pieces, some 40-80 ms on two cores (runs of 256-512 tokens measured no slower
/// per text than one run of a whole batch), the most a query waits behind background work.
pub const BACKGROUND_TOKENS_PER_RUN: usize = 256;

/// Queries served in a row while background work waits, before one run of it.
pub const QUERY_BURST: usize = 8;

/// Requests waiting for the inference thread, at most. When full, handlers wait
/// (backpressure) rather than queueing without bound.
const QUEUE_DEPTH: usize = 256;

/// How urgent a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// A client waits on it: served first, whole.
    Query,
    /// Nobody waits on it: served when no query waits, one model run at a time.
    Background,
}

impl Priority {
    /// What a request's [`PRIORITY_HEADER`] says.
    pub fn of_header(value: Option<&[u8]>) -> Priority {
        match value {
            Some(v) if v.trim_ascii().eq_ignore_ascii_case(b"background") => Priority::Background,
            _ => Priority::Query,
        }
    }
}

/// What the inference thread needs of a model: start a request's texts, then one run at a
/// time (the real ones are [`Embedder`] and [`E5Embedder`]; the tests use a stand-in that
/// only counts).
pub trait Model: Send + 'static {
    type Work: Send + 'static;
    /// Tokens per model run of a query, which is served whole: how its texts are cut into runs.
    const QUERY_TOKENS_PER_RUN: usize;
    /// Tokens per model run of background work: the most a query waits behind it.
    const BACKGROUND_TOKENS_PER_RUN: usize;
    /// Prepares `inputs`, all of them in the role `input_type`, in runs of at most
    /// `max_tokens` tokens.
    fn start(
        &mut self,
        inputs: &[String],
        input_type: InputType,
        max_tokens: usize,
    ) -> Result<Self::Work, ModelError>;
    /// Does the next run; true when the work is done.
    fn step(&mut self, work: &mut Self::Work) -> Result<bool, ModelError>;
    fn finish(work: Self::Work) -> Embeddings;
}

impl Model for Embedder {
    type Work = Work;
    const QUERY_TOKENS_PER_RUN: usize = MAX_TOKENS_PER_RUN;
    const BACKGROUND_TOKENS_PER_RUN: usize = BACKGROUND_TOKENS_PER_RUN;

    /// all-MiniLM-L6-v2 is symmetric: the role changes nothing.
    fn start(
        &mut self,
        inputs: &[String],
        _input_type: InputType,
        max_tokens: usize,
    ) -> Result<Work, ModelError> {
        Embedder::start(self, inputs, max_tokens)
    }

    fn step(&mut self, work: &mut Work) -> Result<bool, ModelError> {
        Embedder::step(self, work)
    }

    fn finish(work: Work) -> Embeddings {
        work.finish()
    }
}

impl Model for E5Embedder {
    type Work = E5Work;
    const QUERY_TOKENS_PER_RUN: usize = e5::QUERY_TOKENS_PER_RUN;
    const BACKGROUND_TOKENS_PER_RUN: usize = e5::BACKGROUND_TOKENS_PER_RUN;

    fn start(
        &mut self,
        inputs: &[String],
        input_type: InputType,
        max_tokens: usize,
    ) -> Result<E5Work, ModelError> {
        Ok(E5Embedder::start(self, inputs, input_type, max_tokens))
    }

    fn step(&mut self, work: &mut E5Work) -> Result<bool, ModelError> {
        E5Embedder::step(self, work)
    }

    fn finish(work: E5Work) -> Embeddings {
        work.finish()
    }
}

/// What the inference thread did, for `GET /stats`.
#[derive(Default)]
pub struct InferenceCounts {
    /// Texts embedded.
    pub embedded: AtomicU64,
    /// Requests not run, or not finished, because their client had gone.
    pub abandoned: AtomicU64,
    /// Requests received as background work.
    pub background: AtomicU64,
    /// Requests the inference thread has taken from the queues (a background request at its
    /// first run), whether it ran them or found their client gone.
    pub taken: AtomicU64,
}

struct Job {
    inputs: Vec<String>,
    input_type: InputType,
    reply: oneshot::Sender<Result<Embeddings, ModelError>>,
    /// Its place in the queue's depth, given back when the job is done.
    _slot: OwnedSemaphorePermit,
}

#[derive(Default)]
struct Waiting {
    queries: VecDeque<Job>,
    background: VecDeque<Job>,
}

struct Queues {
    waiting: Mutex<Waiting>,
    /// Signalled when a job is queued.
    queued: Condvar,
}

impl Queues {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the inference thread does next.
#[derive(Debug, PartialEq, Eq)]
enum Choice {
    Query,
    Background,
    Wait,
}

/// Queries first, unless `in_a_row` of them have gone while background work waited.
fn choose(queries: bool, background: bool, in_a_row: usize) -> Choice {
    match (queries, background) {
        (true, true) if in_a_row >= QUERY_BURST => Choice::Background,
        (true, _) => Choice::Query,
        (false, true) => Choice::Background,
        (false, false) => Choice::Wait,
    }
}

/// The model runs on one OS thread: onnxruntime already spreads one run over the cores, and a
/// second concurrent run would only contend with it. Async handlers never block on inference.
#[derive(Clone)]
pub struct InferenceQueue {
    queues: Arc<Queues>,
    slots: Arc<Semaphore>,
    pub counts: Arc<InferenceCounts>,
}

impl InferenceQueue {
    /// Starts the inference thread over `model`.
    pub fn start<M: Model>(model: M) -> std::io::Result<Self> {
        let queues = Arc::new(Queues {
            waiting: Mutex::default(),
            queued: Condvar::new(),
        });
        let counts = Arc::new(InferenceCounts::default());
        let (q, c) = (Arc::clone(&queues), Arc::clone(&counts));
        std::thread::Builder::new()
            .name("inference".to_owned())
            .spawn(move || serve(model, &q, &c))?;
        Ok(InferenceQueue {
            queues,
            slots: Arc::new(Semaphore::new(QUEUE_DEPTH)),
            counts,
        })
    }

    /// Embeds `inputs`, all in the role `input_type`, as `priority` says.
    pub async fn embed(
        &self,
        inputs: Vec<String>,
        input_type: InputType,
        priority: Priority,
    ) -> Result<Embeddings, ModelError> {
        let stopped = || ModelError::new("the inference thread has stopped");
        let slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| stopped())?;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            inputs,
            input_type,
            reply,
            _slot: slot,
        };
        {
            let mut waiting = self.queues.lock();
            match priority {
                Priority::Query => waiting.queries.push_back(job),
                Priority::Background => {
                    self.counts.background.fetch_add(1, Ordering::Relaxed);
                    waiting.background.push_back(job);
                }
            }
        }
        self.queues.queued.notify_one();
        answer.await.map_err(|_| stopped())?
    }

    /// Requests waiting for the inference thread now, in both queues (not the one it runs).
    pub fn queued(&self) -> usize {
        let waiting = self.queues.lock();
        waiting.queries.len() + waiting.background.len()
    }
}

/// A background job under way: its work is started on its first run.
struct Current<W> {
    job: Job,
    work: Option<W>,
}

/// The inference thread: forever the next thing [`choose`] says.
fn serve<M: Model>(mut model: M, queues: &Queues, counts: &InferenceCounts) {
    let mut current: Option<Current<M::Work>> = None;
    let mut in_a_row = 0;
    loop {
        let query = {
            let mut waiting = queues.lock();
            loop {
                let background = current.is_some() || !waiting.background.is_empty();
                match choose(!waiting.queries.is_empty(), background, in_a_row) {
                    Choice::Query => {
                        counts.taken.fetch_add(1, Ordering::Relaxed);
                        break waiting.queries.pop_front();
                    }
                    Choice::Background => {
                        if current.is_none() {
                            current = waiting.background.pop_front().map(|job| {
                                counts.taken.fetch_add(1, Ordering::Relaxed);
                                Current { job, work: None }
                            });
                        }
                        break None;
                    }
                    Choice::Wait => {
                        waiting = queues
                            .queued
                            .wait(waiting)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                }
            }
        };
        match query {
            Some(job) => {
                in_a_row += 1;
                run_query(&mut model, job, counts);
            }
            None => {
                in_a_row = 0;
                current = current.and_then(|c| run_background(&mut model, c, counts));
            }
        }
    }
}

/// A query, whole. A client that gave up (the filter's `timeout_ms` passed, and Envoy closed
/// the connection, so hyper dropped the handler and its receiver) gets no inference: under
/// load, computing answers nobody waits for would keep every later request waiting past its
/// own deadline too.
fn run_query<M: Model>(model: &mut M, job: Job, counts: &InferenceCounts) {
    if job.reply.is_closed() {
        counts.abandoned.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let answer = model
        .start(&job.inputs, job.input_type, M::QUERY_TOKENS_PER_RUN)
        .and_then(|mut work| {
            while !model.step(&mut work)? {}
            Ok(M::finish(work))
        });
    finish(job, answer, counts);
}

/// One run of background work; the work again while runs are left. A client gone stops it.
fn run_background<M: Model>(
    model: &mut M,
    mut current: Current<M::Work>,
    counts: &InferenceCounts,
) -> Option<Current<M::Work>> {
    if current.job.reply.is_closed() {
        counts.abandoned.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let mut work = match current.work.take() {
        Some(work) => work,
        None => match model.start(
            &current.job.inputs,
            current.job.input_type,
            M::BACKGROUND_TOKENS_PER_RUN,
        ) {
            Ok(work) => work,
            Err(error) => {
                finish(current.job, Err(error), counts);
                return None;
            }
        },
    };
    match model.step(&mut work) {
        Ok(false) => {
            current.work = Some(work);
            Some(current)
        }
        Ok(true) => {
            finish(current.job, Ok(M::finish(work)), counts);
            None
        }
        Err(error) => {
            finish(current.job, Err(error), counts);
            None
        }
    }
}

fn finish(job: Job, answer: Result<Embeddings, ModelError>, counts: &InferenceCounts) {
    if answer.is_ok() {
        let texts = job.inputs.len() as u64;
        counts.embedded.fetch_add(texts, Ordering::Relaxed);
    }
    // The client may have gone meanwhile; its answer is then simply dropped.
    let _ = job.reply.send(answer);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A model that takes `run` per run, each text 32 word pieces, and logs the first input
    /// of each request it runs (the request's name, then `/passage` for passages) once per run.
    struct Counting {
        log: Arc<Mutex<Vec<String>>>,
        run: Duration,
    }

    struct Runs {
        name: String,
        left: usize,
        texts: usize,
    }

    impl Model for Counting {
        type Work = Runs;
        const QUERY_TOKENS_PER_RUN: usize = MAX_TOKENS_PER_RUN;
        const BACKGROUND_TOKENS_PER_RUN: usize = BACKGROUND_TOKENS_PER_RUN;

        fn start(
            &mut self,
            inputs: &[String],
            input_type: InputType,
            max_tokens: usize,
        ) -> Result<Runs, ModelError> {
            let name = match input_type {
                InputType::Query => inputs[0].clone(),
                InputType::Passage => format!("{}/passage", inputs[0]),
            };
            Ok(Runs {
                name,
                left: (inputs.len() * 32).div_ceil(max_tokens),
                texts: inputs.len(),
            })
        }

        fn step(&mut self, work: &mut Runs) -> Result<bool, ModelError> {
            std::thread::sleep(self.run);
            self.log.lock().unwrap().push(work.name.clone());
            work.left -= 1;
            Ok(work.left == 0)
        }

        fn finish(work: Runs) -> Embeddings {
            Embeddings {
                vectors: vec![vec![1.0]; work.texts],
                prompt_tokens: work.texts * 32,
            }
        }
    }

    fn counting(run_ms: u64) -> (InferenceQueue, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let model = Counting {
            log: Arc::clone(&log),
            run: Duration::from_millis(run_ms),
        };
        (InferenceQueue::start(model).unwrap(), log)
    }

    fn texts(name: &str, n: usize) -> Vec<String> {
        vec![name.to_owned(); n]
    }

    /// Returns once the model has done its first run.
    async fn first_run(log: &Mutex<Vec<String>>) {
        while log.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// `n` texts called `name` sent to `queue` as queries' texts and `priority`, from a task
    /// of their own.
    fn spawn(
        queue: &InferenceQueue,
        name: &str,
        n: usize,
        priority: Priority,
    ) -> tokio::task::JoinHandle<Result<Embeddings, ModelError>> {
        spawn_as(queue, name, n, InputType::Query, priority)
    }

    /// The same in the role `input_type`.
    fn spawn_as(
        queue: &InferenceQueue,
        name: &str,
        n: usize,
        input_type: InputType,
        priority: Priority,
    ) -> tokio::task::JoinHandle<Result<Embeddings, ModelError>> {
        let (queue, inputs) = (queue.clone(), texts(name, n));
        tokio::spawn(async move { queue.embed(inputs, input_type, priority).await })
    }

    #[test]
    fn queries_first_unless_background_work_waited_a_burst() {
        assert_eq!(choose(true, true, 0), Choice::Query);
        assert_eq!(choose(true, true, QUERY_BURST - 1), Choice::Query);
        assert_eq!(choose(true, true, QUERY_BURST), Choice::Background);
        assert_eq!(choose(true, false, QUERY_BURST), Choice::Query);
        assert_eq!(choose(false, true, 0), Choice::Background);
        assert_eq!(choose(false, false, 0), Choice::Wait);
    }

    #[test]
    fn the_priority_header_says_background_or_nothing() {
        assert_eq!(Priority::of_header(None), Priority::Query);
        assert_eq!(
            Priority::of_header(Some(b"background")),
            Priority::Background
        );
        assert_eq!(
            Priority::of_header(Some(b" Background ")),
            Priority::Background
        );
        assert_eq!(Priority::of_header(Some(b"urgent")), Priority::Query);
    }

    /// Two background requests of 64 texts (8 runs each) wait; a query that comes while the
    /// first is under way goes after the run in progress, before the rest of both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_waits_for_one_run_of_background_work_not_for_all_of_it() {
        let (queue, log) = counting(20);
        let first = spawn(&queue, "b1", 64, Priority::Background);
        let second = spawn(&queue, "b2", 64, Priority::Background);
        first_run(&log).await;
        let seen = log.lock().unwrap().len();
        let answer = queue
            .embed(texts("q", 1), InputType::Query, Priority::Query)
            .await
            .unwrap();
        assert_eq!(answer.vectors.len(), 1);
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        let log = log.lock().unwrap().clone();
        let at = log.iter().position(|n| n == "q").unwrap();
        assert!(at <= seen + 1, "the query ran after {at} runs: {log:?}");
        assert_eq!(log.iter().filter(|n| *n == "b1").count(), 8, "{log:?}");
        // The background requests in turn, the first one whole before the second.
        let last_b1 = log.iter().rposition(|n| n == "b1").unwrap();
        let first_b2 = log.iter().position(|n| n == "b2").unwrap();
        assert!(last_b1 < first_b2, "{log:?}");
    }

    /// A stream of queries that never lets up: background work still gets a run after every
    /// QUERY_BURST of them, and is done long before the queries are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_work_is_not_starved_by_a_stream_of_queries() {
        let (queue, log) = counting(1);
        // Keep the thread busy while everything is queued, so the order is the queue's.
        let busy = spawn(&queue, "busy", 200, Priority::Query);
        first_run(&log).await;
        let background = spawn(&queue, "b", 64, Priority::Background);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let queries: Vec<_> = (0..100)
            .map(|_| spawn(&queue, "q", 1, Priority::Query))
            .collect();
        busy.await.unwrap().unwrap();
        background.await.unwrap().unwrap();
        for query in queries {
            query.await.unwrap().unwrap();
        }
        let log = log.lock().unwrap().clone();
        let order: Vec<&String> = log.iter().filter(|n| *n != "busy").collect();
        let runs: Vec<usize> = order
            .iter()
            .enumerate()
            .filter(|(_, n)| n.as_str() == "b")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(runs.len(), 8, "{order:?}");
        for pair in runs.windows(2) {
            assert!(pair[1] - pair[0] <= QUERY_BURST + 1, "{order:?}");
        }
        assert!(*runs.last().unwrap() < order.len() - 1, "{order:?}");
        assert_eq!(queue.counts.background.load(Ordering::Relaxed), 1);
        assert_eq!(
            queue.counts.embedded.load(Ordering::Relaxed),
            200 + 64 + 100
        );
    }

    /// A background request whose client hangs up is dropped between runs, not finished.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_work_whose_client_left_stops_between_runs() {
        let (queue, log) = counting(10);
        let background = spawn(&queue, "b", 64, Priority::Background);
        first_run(&log).await;
        background.abort();
        let _ = background.await;
        // The next request is served once the abandoned one has been dropped.
        queue
            .embed(texts("q", 1), InputType::Query, Priority::Query)
            .await
            .unwrap();
        queue
            .embed(texts("b2", 8), InputType::Query, Priority::Background)
            .await
            .unwrap();
        let runs = log.lock().unwrap().iter().filter(|n| *n == "b").count();
        assert!(runs < 8, "{runs} runs");
        assert_eq!(queue.counts.abandoned.load(Ordering::Relaxed), 1);
    }

    /// A model each of whose runs waits for the test to open its gate (one run per `()` sent):
    /// what is under way and what waits is the test's doing, not the clock's.
    struct Gated {
        opened: std::sync::mpsc::Receiver<()>,
    }

    impl Model for Gated {
        type Work = usize;
        const QUERY_TOKENS_PER_RUN: usize = MAX_TOKENS_PER_RUN;
        const BACKGROUND_TOKENS_PER_RUN: usize = BACKGROUND_TOKENS_PER_RUN;

        fn start(
            &mut self,
            inputs: &[String],
            _: InputType,
            _: usize,
        ) -> Result<usize, ModelError> {
            Ok(inputs.len())
        }

        fn step(&mut self, _: &mut usize) -> Result<bool, ModelError> {
            self.opened
                .recv()
                .map_err(|_| ModelError::new("the gate was dropped"))?;
            Ok(true)
        }

        fn finish(texts: usize) -> Embeddings {
            Embeddings {
                vectors: vec![vec![1.0]; texts],
                prompt_tokens: texts * 32,
            }
        }
    }

    /// Waits until `reached` holds (the inference thread moves on its own), at most 10 s.
    async fn until(reached: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !reached() {
            assert!(std::time::Instant::now() < deadline, "never reached");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The counts say what waits and what the thread has taken: a client can tell that a
    /// request is under way and others queued behind it without timing anything.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_counts_say_what_is_queued_and_what_was_taken() {
        let (open, opened) = std::sync::mpsc::channel();
        let queue = InferenceQueue::start(Gated { opened }).unwrap();
        let taken = |q: &InferenceQueue| q.counts.taken.load(Ordering::Relaxed);
        assert_eq!((queue.queued(), taken(&queue)), (0, 0));
        let busy = spawn(&queue, "busy", 4, Priority::Query);
        until(|| taken(&queue) == 1).await;
        assert_eq!(queue.queued(), 0);
        let behind = spawn(&queue, "q", 1, Priority::Query);
        let background = spawn(&queue, "b", 8, Priority::Background);
        until(|| queue.queued() == 2).await;
        assert_eq!(taken(&queue), 1, "taken while the busy request runs");
        for _ in 0..3 {
            open.send(()).unwrap();
        }
        busy.await.unwrap().unwrap();
        behind.await.unwrap().unwrap();
        background.await.unwrap().unwrap();
        assert_eq!((queue.queued(), taken(&queue)), (0, 3));
    }

    /// Each request runs in its own role, whole or a run at a time: a background request of
    /// passages keeps its role through all its runs, and the queries that cut in keep theirs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_request_keeps_its_input_type_through_its_runs() {
        let (queue, log) = counting(10);
        let passages = spawn_as(&queue, "b", 64, InputType::Passage, Priority::Background);
        first_run(&log).await;
        let query = spawn_as(&queue, "q", 1, InputType::Query, Priority::Query);
        let document = spawn_as(&queue, "d", 2, InputType::Passage, Priority::Query);
        query.await.unwrap().unwrap();
        document.await.unwrap().unwrap();
        passages.await.unwrap().unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(
            log.iter().filter(|n| *n == "b/passage").count(),
            8,
            "{log:?}"
        );
        assert!(log.contains(&"q".to_owned()), "{log:?}");
        assert!(log.contains(&"d/passage".to_owned()), "{log:?}");
        assert_eq!(log.len(), 10, "{log:?}");
    }
}
