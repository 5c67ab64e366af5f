//! A workaround for fred 10.x (seen in 10.1.0), which does not follow ASK redirections, and
//! corrupts the replies of a shared connection when it tries.
//!
//! While a cluster slot migrates, its old owner answers `ASK <slot> <host:port>` for a key that
//! has already moved (or is new). fred sends `ASKING` to that target, but then resends the
//! command itself to the slot's old owner (`router/commands.rs`, `process_ask`, sets
//! `command.hasher` to the slot and leaves `command.cluster_node` unset, so `Router::route`
//! picks the owner from its slot map again), which answers ASK again, until the command's
//! redirection budget runs out ("Too many redirections"). Worse, it writes that `ASKING` on the
//! shared, pipelined connection to the target and takes the next reply there as its answer
//! (`router/utils.rs`, `send_asking_with_policy`, `read_skip_pubsub`): with other commands on
//! their way on that connection, that reply is the oldest of theirs, and every reply after it
//! goes to the command before it (an outside audit: checks under concurrent ASKs were answered
//! with other checks' replies, admitted past their limit, and the limiter fell back). The
//! report for fred is in `docs/upstream/fred-ask.md`.
//!
//! So, on a cluster, fred follows no redirection at all (`max_redirections` 0: an ASK or a
//! MOVED is a routing error for the caller at once; on a MOVED fred first syncs its slot map),
//! and this module follows them ([`Connections::follow`]): on that error it finds the master
//! importing the key's slot (its own `CLUSTER NODES` line says `[slot-<-source]`) and sends
//! `ASKING` and the command there, back to back, on a plain connection of its own, under a lock;
//! with no master importing the slot (a MOVED, or a migration that ended meanwhile) it sends the
//! command again through the cluster client, whose slot map fred has synced. Every command this
//! store sends on a key goes through it. Remove it once fred follows ASK without sharing the
//! connection.

use std::future::Future;

use fred::prelude::{ClientLike, ConnectionConfig, Error as FredError, ErrorKind};
use fred::types::{ClusterHash, CustomCommand, FromValue, Value};

use super::super::StoreError;
use super::rollback::{Reservation, ROLLBACK};
use super::{fred_error, script, Connections};

mod importer;

pub(super) use importer::{cluster_nodes, own_line, AskClients};

/// fred's `max_command_attempts` on a cluster: more than its default redirection budget (a
/// margin kept from when fred followed redirections itself, each ASK spending an attempt: when
/// they ran out first, the client's connection task ended; see the module docs).
pub(super) fn cluster_command_attempts() -> u32 {
    ConnectionConfig::default().max_redirections + 2
}

/// fred's `max_redirections` on a cluster: none (see the module docs).
pub(super) const CLUSTER_REDIRECTIONS: u32 = 0;

/// How many times a command is sent again after a routing error before that error is final:
/// an ASK takes two (sent again to the slot's owner, which answers ASK again, then to the master
/// importing the slot), and a MOVED after it (the migration ending meanwhile) two more.
const FOLLOWED: usize = 5;

/// A command to send again, after `ASKING`, to the master importing its key's slot.
#[derive(Clone, Copy, Debug)]
pub(super) enum Redirected<'a> {
    /// A script (`EVALSHA sha 1 key args..`), with its arguments, and its source (loaded
    /// there on `NOSCRIPT`: the importing master may not have it, after a restart or as a new
    /// node).
    Script {
        sha: &'a str,
        lua: &'a str,
        args: &'a [String],
    },
    /// A rollback (`EVAL source 1 key args..`: sent whole, since the importing master may not
    /// have loaded it).
    Rollback { args: &'a [String] },
    /// `name key args..`.
    Command {
        name: &'static str,
        args: &'a [String],
    },
}

impl Connections {
    /// The script on one key of a cluster (with `block`, the key's block key, in its slot),
    /// following an ASK.
    ///
    /// While the slot migrates, the script runs on the key alone, without its block key: a
    /// multi-key command there fails with `TRYAGAIN` (or, after `ASKING`, when a key is
    /// missing on the importing master, as a block key usually is). So during a migration of
    /// its slot a block is not seen; the counts stay exact.
    ///
    /// `check` is the check's arguments without the block key (see `script::args`).
    pub(super) async fn eval_one(
        &self,
        key: &str,
        block: Option<String>,
        check: &[String],
    ) -> Result<Vec<Value>, StoreError> {
        // With the block key; alone when the two are split by a migration (TRYAGAIN). Sent
        // again the same way after a MOVED, when the slot map has changed.
        let send = || async {
            let alone = || vec![key.to_owned()];
            let Some(block) = &block else {
                return (self.script)
                    .evalsha_with_reload(&self.client, alone(), check.to_vec())
                    .await;
            };
            let keys = vec![key.to_owned(), block.clone()];
            let args = script::with_blocks(check, 1);
            match self
                .script
                .evalsha_with_reload(&self.client, keys, args)
                .await
            {
                Err(e) if e.details().starts_with("TRYAGAIN") => {
                    (self.script)
                        .evalsha_with_reload(&self.client, alone(), check.to_vec())
                        .await
                }
                other => other,
            }
        };
        // After ASKING, the script runs on the key alone (as above).
        let sha = self.script.sha1();
        let command = Redirected::Script {
            sha,
            lua: script::SOURCE,
            args: check,
        };
        let first = send().await;
        self.follow(key, command, first, send)
            .await
            .map_err(|e| fred_error("rate limit script failed", e))
    }

    /// `first`, the reply of `command` on `key` through the cluster client, with the
    /// redirections fred does not follow followed here (see the module docs). fred's routing
    /// error does not say whether the node answered MOVED or ASK, so `again` first sends the
    /// command once more through the cluster client: after a MOVED fred has synced its slot
    /// map, and the owner answers; after an ASK the owner answers ASK again, and only then is
    /// the master importing the slot sent `ASKING` and `command` (a MOVED taken for an ASK
    /// once ran a check where its key was not, while another master was importing the slot: a
    /// review got 6 admitted of 5, and the slot's next move failed on the key left behind).
    /// At most [`FOLLOWED`] times; off a cluster, no routing error comes, and `first` is the
    /// reply.
    pub(super) async fn follow<T, F>(
        &self,
        key: &str,
        command: Redirected<'_>,
        first: Result<T, FredError>,
        again: impl Fn() -> F,
    ) -> Result<T, FredError>
    where
        T: FromValue,
        F: Future<Output = Result<T, FredError>>,
    {
        let mut result = first;
        for round in 0..FOLLOWED {
            match &result {
                Err(e) if *e.kind() == ErrorKind::Routing => {}
                _ => break,
            }
            let ask = round % 2 == 1;
            result = match ask {
                true => match self.asking(key, command).await {
                    Some(reply) => reply.and_then(Value::convert),
                    None => again().await,
                },
                false => again().await,
            };
        }
        result
    }

    /// `name key args..` on `key`'s node, following redirections ([`follow`](Self::follow)).
    pub(super) async fn on_key<T: FromValue>(
        &self,
        name: &'static str,
        key: &str,
        args: &[String],
    ) -> Result<T, FredError> {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let send = || {
            let mut all = Vec::with_capacity(args.len() + 1);
            all.push(key.to_owned());
            all.extend(args.iter().cloned());
            let command = CustomCommand::new_static(name, ClusterHash::Custom(slot), false);
            self.client.custom::<T, _>(command, all)
        };
        let first = send().await;
        self.follow(key, Redirected::Command { name, args }, first, send)
            .await
    }

    /// The rollback script for `reservation` on a cluster, with its marker (so that a second
    /// run, fred sending it again, does nothing), following an ASK.
    ///
    /// While the slot migrates, the key and its marker together may fail with `TRYAGAIN` (the
    /// marker is missing where the key is not), and a master importing the slot is asked with
    /// the key alone: there a second run is not recognized.
    pub(super) async fn roll_back_one(&self, reservation: &Reservation) -> Result<(), StoreError> {
        let key = reservation.key.as_str();
        let args = reservation.args(self.command_timeout);
        // With the marker; alone when the two are split by a migration (TRYAGAIN). Sent again
        // the same way after a MOVED.
        let send = || async {
            let keys = vec![key.to_owned(), reservation.marker()];
            match ROLLBACK
                .evalsha_with_reload(&self.client, keys, args.clone())
                .await
            {
                Err(e) if e.details().starts_with("TRYAGAIN") => {
                    (ROLLBACK)
                        .evalsha_with_reload(&self.client, vec![key], args.clone())
                        .await
                }
                other => other,
            }
        };
        let first: Result<Value, FredError> = send().await;
        self.follow(key, Redirected::Rollback { args: &args }, first, send)
            .await
            .map(|_: Value| ())
            .map_err(|e| fred_error("rolling back a reservation failed", e))
    }
}

/// A command fred has no method for, sent to any node (one node, off a cluster).
pub(super) fn custom(command: &'static str) -> CustomCommand {
    CustomCommand::new_static(command, ClusterHash::Random, false)
}
