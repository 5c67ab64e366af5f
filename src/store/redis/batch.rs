//! Checks that wait at the same moment go to Redis together, as one EVALSHA of the script.
//!
//! Each check still costs exactly one round trip: it is sent once, in one batch, and answered
//! from that batch's reply. What the batch saves is Redis's time: the script runs once for
//! many checks, and the keys they share (the endpoint's, the global one) are read once per
//! batch instead of once per check (see `script.lua`). The script decides a batch's checks one
//! after the other, in order, each exactly as a script of its own would: batching changes no
//! answer.
//!
//! One task per store sends the batches. A check hands it the check's keys and arguments and
//! waits for its reply. The task starts a batch at once while fewer than [`IN_FLIGHT`] batches
//! are on their way, with every check waiting at that moment (at most [`MAX_CHECKS`]); when
//! that many are on their way, checks gather until one comes back, or until a whole batch of
//! them waits: that batch goes at once too (at most [`MAX_IN_FLIGHT`] batches on their way),
//! so that a long round trip (Redis in another zone) does not cap a store at two batches per
//! round trip. So a lone check is sent at once, alone, and under load the batches grow with
//! it. A check whose caller has stopped waiting (a timeout of its own, a client gone) before
//! its batch is made is not sent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fred::prelude::{Client, Error as FredError, ErrorKind};
use fred::types::scripts::Script;
use fred::types::Value;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot, Notify};

use super::script::BatchArgs;

/// Batches on their way to Redis at once: while one is on the wire or being decided, the next
/// gathers, so Redis always has work and a batch never waits for more than one before it.
const IN_FLIGHT: usize = 2;

/// The most checks in one batch: a script of 64 checks runs for well under a millisecond.
const MAX_CHECKS: usize = 64;

/// The most batches on their way at once, full ones sent past [`IN_FLIGHT`] included: 1,024
/// checks a round trip.
const MAX_IN_FLIGHT: usize = 16;

/// One check's part of a batch, and where its reply goes.
struct Job {
    keys: Vec<String>,
    args: Vec<String>,
    reply: oneshot::Sender<Result<Value, FredError>>,
}

/// How many checks wait in a task's queue, and the signal that a whole batch of them does.
#[derive(Default)]
struct Backlog {
    queued: AtomicUsize,
    full: Notify,
}

/// The store's side of the batching task: hands it checks, and starts it (again, if the
/// runtime it ran on has gone) when a check needs it.
pub(super) struct Batcher {
    client: Client,
    script: Script,
    jobs: Mutex<Option<(mpsc::UnboundedSender<Job>, Arc<Backlog>)>>,
}

impl Batcher {
    /// A batcher for `script` on `client`; its task starts at the first check.
    pub(super) fn new(client: Client, script: Script) -> Self {
        Self {
            client,
            script,
            jobs: Mutex::new(None),
        }
    }

    /// Sends one check (its script keys and arguments, see `script.lua`) in the next batch and
    /// returns its own reply. Must be called inside a tokio runtime.
    pub(super) async fn check(
        &self,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value, FredError> {
        let (reply, answer) = oneshot::channel();
        self.send(Job { keys, args, reply })?;
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Queues `job`, starting the task if there is none (or its runtime is gone).
    fn send(&self, job: Job) -> Result<(), FredError> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        // Counted before it is queued, so that the count is never below the queue's length.
        let job = match jobs.as_ref() {
            Some((tx, backlog)) => {
                backlog.queued_one();
                match tx.send(job) {
                    Ok(()) => return Ok(()),
                    Err(mpsc::error::SendError(job)) => job,
                }
            }
            None => job,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::default());
        let task = run(
            self.client.clone(),
            self.script.clone(),
            rx,
            backlog.clone(),
        );
        tokio::runtime::Handle::try_current()
            .map_err(|_| FredError::new(ErrorKind::Unknown, "no tokio runtime to send checks"))?
            .spawn(task);
        backlog.queued_one();
        tx.send(job).map_err(|_| gone())?;
        *jobs = Some((tx, backlog));
        Ok(())
    }
}

impl Backlog {
    /// One more check queued: the task is told when that makes a whole batch.
    fn queued_one(&self) {
        if self.queued.fetch_add(1, Ordering::AcqRel) + 1 == MAX_CHECKS {
            self.full.notify_one();
        }
    }

    /// Whether a whole batch waits (or is about to: a check is counted just before it is
    /// queued).
    fn full(&self) -> bool {
        self.queued.load(Ordering::Acquire) >= MAX_CHECKS
    }
}

fn gone() -> FredError {
    FredError::new(
        ErrorKind::Canceled,
        "the task sending checks to Redis has stopped",
    )
}

/// The batching task: ends when the store (every sender) is gone and its batches are answered.
async fn run(
    client: Client,
    script: Script,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    backlog: Arc<Backlog>,
) {
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    while open || !in_flight.is_empty() {
        tokio::select! {
            biased;
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            job = jobs.recv(), if open && in_flight.len() < IN_FLIGHT => match job {
                Some(first) => {
                    let batch = gather(first, &mut jobs, &backlog);
                    if !batch.is_empty() {
                        in_flight.push(send(&client, &script, batch));
                    }
                }
                None => open = false,
            },
            () = backlog.full.notified(), if open && in_flight.len() < MAX_IN_FLIGHT => {}
        }
        // Whole batches waiting go now, whatever is on its way (up to MAX_IN_FLIGHT).
        while open && in_flight.len() < MAX_IN_FLIGHT && backlog.full() {
            let Ok(first) = jobs.try_recv() else { break };
            let batch = gather(first, &mut jobs, &backlog);
            if !batch.is_empty() {
                in_flight.push(send(&client, &script, batch));
            }
        }
    }
}

/// A batch: `first` and the checks queued after it, at most [`MAX_CHECKS`] taken from the
/// queue; without those whose caller has stopped waiting.
fn gather(first: Job, jobs: &mut mpsc::UnboundedReceiver<Job>, backlog: &Backlog) -> Vec<Job> {
    let mut batch = Vec::with_capacity(MAX_CHECKS.min(1 + jobs.len()));
    let mut taken = 1;
    if !first.reply.is_closed() {
        batch.push(first);
    }
    while taken < MAX_CHECKS {
        match jobs.try_recv() {
            Ok(job) => {
                taken += 1;
                if !job.reply.is_closed() {
                    batch.push(job);
                }
            }
            Err(_) => break,
        }
    }
    backlog.queued.fetch_sub(taken, Ordering::AcqRel);
    batch
}

/// Runs one batch and hands each check its reply (or the batch's error).
async fn send(client: &Client, script: &Script, batch: Vec<Job>) {
    let mut checks = BatchArgs::with_capacity(
        batch.iter().map(|j| j.keys.len()).sum(),
        batch.iter().map(|j| j.args.len()).sum(),
    );
    let mut replies = Vec::with_capacity(batch.len());
    for job in batch {
        checks.push(job.keys, job.args);
        replies.push(job.reply);
    }
    let result: Result<Vec<Value>, FredError> = script
        .evalsha_with_reload(client, checks.keys, checks.args)
        .await;
    match result {
        // A batch of one check is answered with that check's reply.
        Ok(answer) if replies.len() == 1 => {
            if let Some(reply) = replies.pop() {
                let _ = reply.send(Ok(Value::Array(answer)));
            }
        }
        Ok(answers) if answers.len() == replies.len() => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Ok(answers) => {
            let error = FredError::new(
                ErrorKind::Unknown,
                format!(
                    "the rate limit script answered {} checks of {}",
                    answers.len(),
                    replies.len()
                ),
            );
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}
