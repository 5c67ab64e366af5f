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
    /// cache on once it is subscribed. Any error or lag on that connection turns the cache off
    /// (and empties it): nothing is then answered that a reset elsewhere could have changed.
    /// When the connection comes back (Redis restarted, say: the client reconnects in the
    /// background), it subscribes again, proves it with a probe, and turns the cache on again,
    /// empty. Gives up at `deadline` at first (the cache then stays off).
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
                            Some(key) => denials.forget(&key),
                            None => denials.disable(),
                        },
                        // Lagged: some messages were lost, so every cached denial may be stale.
                        Err(RecvError::Lagged(_)) => denials.forget_all(),
                        Err(RecvError::Closed) => break,
                    },
                    _ = errors.recv() => {
                        // The connection is lost, and its subscription with it.
                        denials.disable();
                        tracing::warn!("the Redis invalidation channel was lost: repeated \
                                        denials ask Redis until it is back");
                        resubscribe(&listening, &publisher, &channel, clustered, patience,
                                    &mut messages, &mut errors, &mut reconnections).await;
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

/// After the listener's connection was lost: waits until the client is connected again (it
/// reconnects in the background), then subscribes again, until that is proven. Runs until it
/// succeeds, or the listener task is aborted (the store closed).
#[allow(clippy::too_many_arguments)]
async fn resubscribe(
    subscriber: &Client,
    publisher: &Client,
    channel: &str,
    clustered: bool,
    patience: Duration,
    messages: &mut tokio::sync::broadcast::Receiver<fred::types::Message>,
    errors: &mut ErrorReceiver,
    reconnections: &mut tokio::sync::broadcast::Receiver<fred::types::config::Server>,
) {
    loop {
        match tokio::time::timeout(patience, reconnections.recv()).await {
            Ok(Err(RecvError::Closed)) => tokio::time::sleep(patience).await,
            _ => while drained(reconnections.try_recv()) {},
        }
        if !subscriber.is_connected() {
            continue;
        }
        // What failed before this try is no news; what fails during it is, and stays queued.
        while drained(errors.try_recv()) {}
        let again = subscribe(subscriber, publisher, channel, clustered, messages);
        if let Ok(Ok(())) = tokio::time::timeout(patience, again).await {
            return;
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
/// back through it.
async fn subscribe(
    subscriber: &Client,
    publisher: &Client,
    channel: &str,
    clustered: bool,
    messages: &mut tokio::sync::broadcast::Receiver<fred::types::Message>,
) -> Result<(), FredError> {
    subscriber.subscribe(channel).await?;
    let receivers: i64 = publisher.publish(channel, "").await?;
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
        if message.value.as_str().is_some_and(|v| v.is_empty()) {
            return Ok(());
        }
    }
}
