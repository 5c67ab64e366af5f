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
//! that many are on their way, checks gather until one comes back. So a lone check is sent at
//! once, alone, and under load the batches grow with it.

use std::sync::Mutex;

use fred::prelude::{Client, Error as FredError, ErrorKind};
use fred::types::scripts::Script;
use fred::types::Value;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

/// Batches on their way to Redis at once: while one is on the wire or being decided, the next
/// gathers, so Redis always has work and a batch never waits for more than one before it.
const IN_FLIGHT: usize = 2;

/// The most checks in one batch: a script of 64 checks runs for well under a millisecond.
const MAX_CHECKS: usize = 64;

/// One check's part of a batch, and where its reply goes.
struct Job {
    keys: Vec<String>,
    args: Vec<String>,
    reply: oneshot::Sender<Result<Value, FredError>>,
}

/// The store's side of the batching task: hands it checks, and starts it (again, if the
/// runtime it ran on has gone) when a check needs it.
pub(super) struct Batcher {
    client: Client,
    script: Script,
    jobs: Mutex<Option<mpsc::UnboundedSender<Job>>>,
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
        let job = match jobs.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let task = run(self.client.clone(), self.script.clone(), rx);
        tokio::runtime::Handle::try_current()
            .map_err(|_| FredError::new(ErrorKind::Unknown, "no tokio runtime to send checks"))?
            .spawn(task);
        tx.send(job).map_err(|_| gone())?;
        *jobs = Some(tx);
        Ok(())
    }
}

fn gone() -> FredError {
    FredError::new(
        ErrorKind::Canceled,
        "the task sending checks to Redis has stopped",
    )
}

/// The batching task: ends when the store (every sender) is gone and its batches are answered.
async fn run(client: Client, script: Script, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    while open || !in_flight.is_empty() {
        tokio::select! {
            biased;
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            job = jobs.recv(), if open && in_flight.len() < IN_FLIGHT => match job {
                Some(first) => {
                    let mut batch = vec![first];
                    while batch.len() < MAX_CHECKS {
                        match jobs.try_recv() {
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                    in_flight.push(send(&client, &script, batch));
                }
                None => open = false,
            },
        }
    }
}

/// Runs one batch and hands each check its reply (or the batch's error).
async fn send(client: &Client, script: &Script, batch: Vec<Job>) {
    let mut keys = Vec::with_capacity(batch.iter().map(|j| j.keys.len()).sum());
    let mut args = Vec::with_capacity(batch.iter().map(|j| j.args.len()).sum());
    let mut replies = Vec::with_capacity(batch.len());
    for job in batch {
        keys.extend(job.keys);
        args.extend(job.args);
        replies.push(job.reply);
    }
    let result: Result<Vec<Value>, FredError> =
        script.evalsha_with_reload(client, keys, args).await;
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
