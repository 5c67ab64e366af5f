//! The invalidation channel: a reset on any instance makes every instance forget its cached
//! denials of the key (Redis pub/sub on `<prefix>:invalidate`; see `denial_cache`).

use std::time::Duration;

use fred::prelude::PubsubInterface;
use fred::prelude::{Client, ClientLike, Error as FredError, ErrorKind, EventInterface};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::Connections;

/// The invalidation channel of a key prefix: every store on it forgets the keys published.
fn channel(prefix: &str) -> String {
    format!("{prefix}:invalidate")
}

/// The message that makes every store forget every cached denial (no key is `*`: keys start
/// with the prefix and a `:`).
pub(super) const EVERY_KEY: &str = "*";

/// Tells every store on `prefix` to forget its cached denials of `key`.
pub(super) async fn publish(client: &Client, prefix: &str, key: String) -> Result<(), FredError> {
    let _receivers: i64 = client.publish(channel(prefix), key).await?;
    Ok(())
}

impl Connections {
    /// Subscribes a connection of its own to the invalidation channel, and turns the denial
    /// cache on once it is subscribed. A lost connection turns the cache off (and empties it):
    /// nothing is then answered that a reset elsewhere could have changed. On a single server,
    /// when the connection comes back (Redis restarted, say: the client reconnects in the
    /// background), it subscribes again, proves it with a probe of its own, and turns the cache
    /// on again, empty; on a cluster (whose clients do not reconnect so), or if it has not come
    /// back [`RESUBSCRIBE_FOR`] after the loss, the cache stays off. A lag (messages lost)
    /// empties the cache. Gives up at `deadline` at first (the cache then stays off).
    pub(super) async fn listen_for_invalidations(&self, deadline: tokio::time::Instant) {
        let subscriber = self.client.clone_new();
        let mut messages = subscriber.message_rx();
        let mut errors = subscriber.error_rx();
        let mut reconnections = subscriber.reconnect_rx();
        let mut router = None;
        let channel = channel(&self.prefix);
        let subscribed = async {
            router = Some(subscriber.init().await?);
            subscribe(
                &subscriber,
                &self.client,
                &channel,
                self.clustered,
                &mut messages,
            )
            .await
        };
        let subscribed = tokio::time::timeout_at(deadline, subscribed)
            .await
            .unwrap_or_else(|_| Err(FredError::new(ErrorKind::Timeout, "no probe came back")));
        if let Err(error) = subscribed {
            tracing::warn!(%error, "no Redis invalidation channel: repeated denials ask Redis");
            let _ = tokio::time::timeout(Duration::from_secs(1), subscriber.quit()).await;
            if let Some(router) = router {
                router.abort();
            }
            return;
        }
        if let Some(router) = router {
            self.keep_router(router);
        }
        let denials = self.denials.clone();
        denials.enable();
        let (listening, publisher) = (subscriber.clone(), self.client.clone());
        // At least 100 ms between tries, whatever the connect timeout.
        let patience = self.connect_timeout.max(Duration::from_millis(100));
        let clustered = self.clustered;
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = messages.recv() => match message {
                        Ok(message) => match message.value.as_str() {
                            Some(key) if key == EVERY_KEY => denials.forget_all(),
                            // A probe (any instance's): not a key, which holds a `:`.
                            Some(key) if !key.contains(':') => {}
                            Some(key) => denials.forget(&key),
                            // Not text (nothing of ours): any denial may be stale.
                            None => denials.forget_all(),
                        },
                        // Lagged: some messages were lost, so every cached denial may be stale.
                        Err(RecvError::Lagged(_)) => denials.forget_all(),
                        Err(RecvError::Closed) => break,
                    },
                    _ = errors.recv() => {
                        // The connection is lost, and its subscription with it.
                        denials.disable();
                        if clustered {
                            tracing::warn!("the Redis invalidation channel was lost: repeated \
                                            denials ask Redis from now on");
                            break;
                        }
                        tracing::warn!("the Redis invalidation channel was lost: repeated \
                                        denials ask Redis until it is back");
                        let back = resubscribe(&listening, &publisher, &channel, patience,
                                               &mut messages, &mut errors, &mut reconnections);
                        if !back.await {
                            tracing::warn!("the Redis invalidation channel did not come back: \
                                            repeated denials ask Redis from now on");
                            break;
                        }
                        // Empty, and no denial asked before this moment is kept.
                        denials.forget_all();
                        denials.enable();
                        tracing::info!("the Redis invalidation channel is back");
                    }
                }
            }
            denials.disable();
        });
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some((subscriber, task));
    }
}

/// How long after the loss a listener tries to come back before it gives up
/// (the client's own reconnections last about a minute when each fails at once).
const RESUBSCRIBE_FOR: Duration = Duration::from_secs(180);

/// After the listener's connection was lost (single server): waits until the client is
/// connected again (it reconnects in the background), then subscribes again, until that is
/// proven: `true`. `false` if that has not happened [`RESUBSCRIBE_FOR`] after the loss. (The
/// store closing aborts the task.)
async fn resubscribe(
    subscriber: &Client,
    publisher: &Client,
    channel: &str,
    patience: Duration,
    messages: &mut tokio::sync::broadcast::Receiver<fred::types::Message>,
    errors: &mut ErrorReceiver,
    reconnections: &mut tokio::sync::broadcast::Receiver<fred::types::config::Server>,
) -> bool {
    let lost = tokio::time::Instant::now();
    loop {
        if lost.elapsed() > RESUBSCRIBE_FOR {
            return false;
        }
        match tokio::time::timeout(patience, reconnections.recv()).await {
            Ok(Err(RecvError::Closed)) => tokio::time::sleep(patience).await,
            _ => while drained(reconnections.try_recv()) {},
        }
        if !subscriber.is_connected() {
            continue;
        }
        // What failed before this try is no news; what fails during it is, and stays queued.
        while drained(errors.try_recv()) {}
        let again = subscribe(subscriber, publisher, channel, false, messages);
        if let Ok(Ok(())) = tokio::time::timeout(patience, again).await {
            return true;
        }
    }
}

/// The receiver of a client's errors (`error_rx`).
type ErrorReceiver =
    tokio::sync::broadcast::Receiver<(FredError, Option<fred::types::config::Server>)>;

/// Whether a `try_recv` took something (or found it had lagged): there may be more.
fn drained<T>(received: Result<T, TryRecvError>) -> bool {
    matches!(received, Ok(_) | Err(TryRecvError::Lagged(_)))
}

/// Subscribes `subscriber` to `channel`, and waits until a probe `publisher` sends on it comes
/// back through it: a probe of its own (`probe-` and a token no other caller gets; never a
/// key, which always holds a `:`), not another instance's, nor one of an earlier try.
async fn subscribe(
    subscriber: &Client,
    publisher: &Client,
    channel: &str,
    clustered: bool,
    messages: &mut tokio::sync::broadcast::Receiver<fred::types::Message>,
) -> Result<(), FredError> {
    subscriber.subscribe(channel).await?;
    let probe = format!("probe-{}", super::rollback::token());
    let receivers: i64 = publisher.publish(channel, probe.as_str()).await?;
    // On a cluster PUBLISH counts only the subscribers of the node it reached; the probe
    // coming back (below, within the connect timeout) is the proof there.
    if receivers < 1 && !clustered {
        return Err(FredError::new(
            ErrorKind::Unknown,
            "SUBSCRIBE had no effect",
        ));
    }
    loop {
        let message = messages.recv().await.map_err(|e| {
            FredError::new(ErrorKind::Unknown, format!("invalidation channel: {e}"))
        })?;
        if message.value.as_str().is_some_and(|v| *v == *probe) {
            return Ok(());
        }
    }
}
