//! The invalidation channel: a reset on any instance makes every instance forget its cached
//! denials of the key (Redis pub/sub on `<prefix>:invalidate`; see `denial_cache`).

use std::time::Duration;

use fred::prelude::PubsubInterface;
use fred::prelude::{Client, ClientLike, Error as FredError, ErrorKind, EventInterface};

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
    /// cache on once it is subscribed. Any failure, error or lag on that connection turns the
    /// cache off (and empties it) for good: nothing is then answered that a reset elsewhere
    /// could have changed. Gives up at `deadline` (the cache then stays off).
    pub(super) async fn listen_for_invalidations(&self, deadline: tokio::time::Instant) {
        let subscriber = self.client.clone_new();
        let mut messages = subscriber.message_rx();
        let mut errors = subscriber.error_rx();
        let mut router = None;
        let subscribed = self.subscribe(&subscriber, &mut messages, &mut router);
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
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = messages.recv() => match message {
                        Ok(message) => match message.value.as_str() {
                            Some(key) if key == EVERY_KEY => denials.forget_all(),
                            Some(key) => denials.forget(&key),
                            None => denials.disable(),
                        },
                        Err(_) => break, // lagged or closed: messages may be lost
                    },
                    _ = errors.recv() => break,
                }
            }
            denials.disable();
        });
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some((subscriber, task));
    }

    /// Subscribes `subscriber`, and waits until a probe published on the channel comes back
    /// through it. Its routing task, once it connected, goes to `router`.
    async fn subscribe(
        &self,
        subscriber: &Client,
        messages: &mut tokio::sync::broadcast::Receiver<fred::types::Message>,
        router: &mut Option<fred::types::ConnectHandle>,
    ) -> Result<(), FredError> {
        let channel = channel(&self.prefix);
        *router = Some(subscriber.init().await?);
        subscriber.subscribe(channel.as_str()).await?;
        let receivers: i64 = self.client.publish(channel.as_str(), "").await?;
        // On a cluster PUBLISH counts only the subscribers of the node it reached; the probe
        // coming back (below, within the connect timeout) is the proof there.
        if receivers < 1 && !self.clustered {
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
}
