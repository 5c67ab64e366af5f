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
//! waits for its reply. With no batch on its way, the task sends one at once, with every check
//! waiting at that moment (at most [`MAX_CHECKS`]): so a lone check goes at once, alone. With
//! one on its way, the next batch gathers for at least one pass of the runtime (so that it
//! sees the callers the runtime is about to run), and goes when the first of these comes:
//! - it holds its share of the checks out (see [`share`]: half of them, or all those not on
//!   their way if that is fewer; worked out when the last batch came back, 64 before any has,
//!   or half of the checks out now if that is more, so that a burst after quiet traffic is
//!   not sent one check at a time);
//! - a pass of the runtime added no check (every task that could run has run);
//! - it has gathered for [`GATHER_PASSES`] passes;
//! - the batch on its way comes back (Redis would wait for this one), or a whole batch waits.
//!
//! So under load the two batches on their way carry the checks in two halves. When
//! [`IN_FLIGHT`] batches are on their way, checks gather until one comes back, or until a whole
//! batch of them waits: that batch goes at once too (at most [`MAX_IN_FLIGHT`] batches on their
//! way), so that a long round trip (Redis in another zone) does not cap a store at two batches
//! per round trip. The connection writes each batch at once (`TCP_NODELAY`, in
//! `connection.rs`): with Nagle's algorithm a batch written while the one before is
//! unacknowledged would wait for that ACK, mostly the reply. A check whose caller has stopped
//! waiting (a timeout of its own, a client gone) before its batch is made is not sent.
//!
//! Why halves: Redis spends a fixed part of each script run on the batch as a whole (the
//! command, the script's start, the shared keys' reads and writes), so fewer, larger batches
//! cost it less a check. Sending the next batch as soon as its first check comes would keep
//! three groups of checks going round (one at Redis, one queued there, one gathering), each a
//! third of the checks out: batches of 5 at 16 checks in flight on a one-worker runtime, where
//! halves make them 8 (docs/BENCHMARKS.md, section 24).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fred::prelude::{Client, Error as FredError, ErrorKind};
use fred::types::scripts::Script;
use fred::types::Value;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot, Notify};

use super::script::BatchArgs;

/// Batches on their way to Redis at once: while one is on the wire or being decided, the next
/// gathers (a few passes of the runtime at most) and follows it, so that under load Redis finds
/// the next batch queued when it ends one, and a batch never waits for more than one before it.
const IN_FLIGHT: usize = 2;

/// The most checks in one batch: a script of 64 checks runs for well under a millisecond.
const MAX_CHECKS: usize = 64;

/// The most passes of the runtime a batch gathers for while another is on its way: the callers
/// a batch's answers wake all run within one or two, and a trickle of checks that kept adding
/// one a pass would keep Redis with nothing queued behind the batch on its way.
const GATHER_PASSES: u32 = 4;

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
    // The checks in the batches on their way, and the next batch's share (set when one comes
    // back; used while another is on its way).
    let (mut flying, mut next_share) = (0, MAX_CHECKS);
    // A batch gathering while another is on its way: its first check, how many checks waited
    // when the task last looked, and the passes of the runtime it has waited.
    let mut gathering: Option<(Job, usize, u32)> = None;
    let mut open = true;
    // Sends `first` and the checks queued after it (`most` in all), as one batch.
    let launch =
        |first, most, jobs: &mut _, in_flight: &mut FuturesUnordered<_>, flying: &mut usize| {
            let batch = gather(first, jobs, &backlog, most);
            if !batch.is_empty() {
                *flying += batch.len();
                in_flight.push(send(&client, &script, batch));
            }
        };
    while open || !in_flight.is_empty() || gathering.is_some() {
        tokio::select! {
            biased;
            Some(answered) = in_flight.next(), if !in_flight.is_empty() => {
                flying -= answered;
                next_share = share(flying, answered, backlog.queued.load(Ordering::Acquire));
            }
            // Every task that could run has run since the task last looked.
            () = tokio::task::yield_now(), if gathering.is_some() => {
                if let Some((first, seen, passes)) = gathering.take() {
                    let queued = backlog.queued.load(Ordering::Acquire);
                    let want = wanted(next_share, flying, queued);
                    let passes = passes + 1;
                    if gathers_on(passes, seen, queued, want) {
                        gathering = Some((first, queued, passes));
                    } else {
                        launch(first, want, &mut jobs, &mut in_flight, &mut flying);
                    }
                }
            }
            job = jobs.recv(), if open && gathering.is_none() && in_flight.len() < IN_FLIGHT => {
                match job {
                    Some(first) if in_flight.is_empty() => {
                        launch(first, MAX_CHECKS, &mut jobs, &mut in_flight, &mut flying);
                    }
                    // One on its way: the next batch gathers for at least one pass, so that
                    // it sees the callers the runtime is about to run.
                    Some(first) => {
                        gathering = Some((first, backlog.queued.load(Ordering::Acquire), 0));
                    }
                    None => open = false,
                }
            }
            () = backlog.full.notified(), if open && in_flight.len() < MAX_IN_FLIGHT => {}
        }
        // A batch gathering goes at once when nothing is on its way (Redis would wait for
        // it), or when a whole batch waits.
        if in_flight.is_empty() || backlog.full() {
            if let Some((first, ..)) = gathering.take() {
                launch(first, MAX_CHECKS, &mut jobs, &mut in_flight, &mut flying);
            }
        }
        // Whole batches waiting go now, whatever is on its way (up to MAX_IN_FLIGHT).
        while open && in_flight.len() < MAX_IN_FLIGHT && backlog.full() {
            let Ok(first) = jobs.try_recv() else { break };
            launch(first, MAX_CHECKS, &mut jobs, &mut in_flight, &mut flying);
        }
    }
}

/// The size of the next batch while `flying` checks are on their way, when a batch of
/// `answered` has just come back and `queued` wait: the checks out are about all three (the
/// callers just answered are about to send their next), and the next batch takes half of them,
/// or all those not on their way if that is fewer; so two batches on their way carry halves,
/// whatever sizes they had. At least 1, at most [`MAX_CHECKS`].
fn share(flying: usize, answered: usize, queued: usize) -> usize {
    let out = flying + answered + queued;
    (out - flying).min(out.div_ceil(2)).clamp(1, MAX_CHECKS)
}

/// The size a gathering batch waits for, now that `queued` checks wait and `flying` are on their
/// way: its share as worked out when the last batch came back, or half of the checks out now if
/// that is more (the share is old after quiet traffic: a burst that follows takes its half).
fn wanted(next_share: usize, flying: usize, queued: usize) -> usize {
    next_share.max(share(flying, 0, queued))
}

/// Whether a batch gathering for `want` checks waits on after `passes` passes of the runtime,
/// now that `queued` wait where `seen` did when the task last yielded: only while it is short,
/// checks still come (once a pass adds none, every task that could run has run) and it has not
/// gathered for [`GATHER_PASSES`] passes; waiting longer would only keep Redis waiting.
fn gathers_on(passes: u32, seen: usize, queued: usize, want: usize) -> bool {
    passes < GATHER_PASSES && queued < want && queued > seen
}

/// A batch: `first` and the checks queued after it, at most `most` taken from the queue;
/// without those whose caller has stopped waiting.
fn gather(
    first: Job,
    jobs: &mut mpsc::UnboundedReceiver<Job>,
    backlog: &Backlog,
    most: usize,
) -> Vec<Job> {
    let mut batch = Vec::with_capacity(most.min(1 + jobs.len()));
    let mut taken = 1;
    if !first.reply.is_closed() {
        batch.push(first);
    }
    while taken < most {
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

/// Runs one batch and hands each check its reply (or the batch's error); returns its size.
async fn send(client: &Client, script: &Script, batch: Vec<Job>) -> usize {
    let size = batch.len();
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
    size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_batch_takes_half_the_checks_out_or_all_those_not_on_their_way() {
        // Halves stay halves.
        assert_eq!(share(8, 8, 0), 8);
        // Uneven batches even out: 15 back and 1 on its way, then 8 go (the rest follow).
        assert_eq!(share(1, 15, 0), 8);
        // 1 back and 15 on its way: only 1 is not on its way.
        assert_eq!(share(15, 1, 0), 1);
        // Checks already waiting count as out.
        assert_eq!(share(4, 4, 8), 8);
        // At least one, at most a whole batch.
        assert_eq!(share(0, 0, 0), 1);
        assert_eq!(share(40, 40, 60), MAX_CHECKS);
    }

    #[test]
    fn after_quiet_traffic_a_burst_takes_half_of_the_checks_out() {
        // One lone check came back (share 1); one is on its way and 50 wait: 26 go.
        assert_eq!(wanted(share(0, 1, 0), 1, 50), 26);
        // In a steady load the share from the last answer stands.
        assert_eq!(wanted(share(8, 8, 0), 8, 3), 8);
    }

    #[test]
    fn a_batch_gathers_while_it_is_short_and_checks_still_come() {
        assert!(gathers_on(1, 3, 5, 8), "short, and two more came");
        assert!(!gathers_on(1, 5, 5, 8), "short, but none came: it goes");
        assert!(!gathers_on(1, 3, 8, 8), "its share is there: it goes");
        assert!(
            !gathers_on(1, 3, 12, 8),
            "more than its share: it goes with its share"
        );
        assert!(gathers_on(GATHER_PASSES - 1, 3, 5, 8));
        assert!(
            !gathers_on(GATHER_PASSES, 3, 5, 8),
            "a trickle: it goes after its last pass"
        );
    }
}
