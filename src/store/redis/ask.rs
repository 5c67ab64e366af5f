//! A workaround for fred 10.x (seen in 10.1.0), which does not follow ASK redirections.
//!
//! While a cluster slot migrates, its old owner answers `ASK <slot> <host:port>` for a key that
//! has already moved. fred sends `ASKING` to that target, but then resends the command itself
//! to the slot's old owner (`router/commands.rs`, `process_ask`, sets `command.hasher` to the
//! slot and leaves `command.cluster_node` unset, so `Router::route` picks the owner from its
//! slot map again), which answers ASK again, until the command's redirection budget runs out
//! ("Too many redirections"). Worse, each round spends one of the command's write attempts, and
//! when they run out first, `process_ask` returns an error that ends the client's connection
//! task. The report for fred is in `docs/upstream/fred-ask.md`.
//!
//! So, on a cluster, fred gets more attempts than redirections ([`cluster_command_attempts`]):
//! the caller gets the redirection error and the client stays alive. On that error
//! ([`ErrorKind::Routing`](fred::prelude::ErrorKind::Routing)) this module follows the ASK
//! itself: it finds the master importing the key's slot (its own `CLUSTER NODES` line says
//! `[slot-<-source]`) and sends `ASKING` and the command there, back to back, on a plain
//! connection of its own. Remove it once fred follows ASK.

use fred::prelude::{Client, ClientLike, ConnectionConfig, Error as FredError, ErrorKind};
use fred::types::{ClusterHash, CustomCommand, Value};

use super::super::StoreError;
use super::rollback::{self, Reservation, ROLLBACK};
use super::{connection, fred_error, script, Connections};
use crate::config::RedisConfig;

/// fred's `max_command_attempts` on a cluster: more than its redirection budget, so that an
/// unfollowed ASK ends in an error for the caller rather than in the end of the client's
/// connection task (see the module docs).
pub(super) fn cluster_command_attempts() -> u32 {
    ConnectionConfig::default().max_redirections + 2
}

/// One plain (non-cluster) connection per master, opened at its first ASK.
///
/// The lock also keeps each `ASKING` and the command it is for together on the wire.
#[derive(Default)]
pub(super) struct AskClients(tokio::sync::Mutex<Vec<(String, Client)>>);

impl AskClients {
    /// The connections open now (for closing them), unless a redirection is using them.
    pub(super) fn open_now(&self) -> Vec<Client> {
        match self.0.try_lock() {
            Ok(clients) => clients.iter().map(|(_, c)| c.clone()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// A command to send again, after `ASKING`, to the master importing its key's slot.
#[derive(Clone, Copy, Debug)]
enum Redirected<'a> {
    /// The script (`EVALSHA sha 1 key args..`), with its arguments.
    Script { sha: &'a str, args: &'a [String] },
    /// A rollback (`EVAL source 1 key args..`: sent whole, since the importing master may not
    /// have loaded it).
    Rollback { args: &'a [String] },
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
        let alone = || vec![key.to_owned()];
        let mut result: Result<Vec<Value>, FredError> = match &block {
            Some(block) => {
                let keys = vec![key.to_owned(), block.clone()];
                let args = script::with_blocks(check, 1);
                self.script
                    .evalsha_with_reload(&self.client, keys, args)
                    .await
            }
            None => {
                self.script
                    .evalsha_with_reload(&self.client, alone(), check.to_vec())
                    .await
            }
        };
        if block.is_some() && matches!(&result, Err(e) if e.details().starts_with("TRYAGAIN")) {
            result = self
                .script
                .evalsha_with_reload(&self.client, alone(), check.to_vec())
                .await;
        }
        self.answer(key, result, check).await
    }

    /// The reply of the script on `key` alone (`check`: its arguments), following an ASK.
    async fn answer(
        &self,
        key: &str,
        result: Result<Vec<Value>, FredError>,
        check: &[String],
    ) -> Result<Vec<Value>, StoreError> {
        let failed = |e| fred_error("rate limit script failed", e);
        match result {
            Err(e) if *e.kind() == ErrorKind::Routing => {
                let sha = self.script.sha1();
                let command = Redirected::Script { sha, args: check };
                self.asking(key, command)
                    .await
                    .unwrap_or_else(|| Err(failed(e)))
            }
            other => other.map_err(failed),
        }
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
        let keys = vec![key.to_owned(), reservation.marker()];
        let mut result: Result<Value, FredError> = ROLLBACK
            .evalsha_with_reload(&self.client, keys, args.clone())
            .await;
        if matches!(&result, Err(e) if e.details().starts_with("TRYAGAIN")) {
            result = ROLLBACK
                .evalsha_with_reload(&self.client, vec![key], args.clone())
                .await;
        }
        let failed = |e| fred_error("rolling back a reservation failed", e);
        match result {
            Ok(_) => Ok(()),
            Err(e) if *e.kind() == ErrorKind::Routing => {
                match self.asking(key, Redirected::Rollback { args: &args }).await {
                    Some(reply) => reply.map(|_| ()),
                    None => Err(failed(e)),
                }
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// Runs `command` on `key` at the master importing its slot, after `ASKING`. `None` when no
    /// master is importing the slot (or none could be asked): the caller keeps its error.
    async fn asking(
        &self,
        key: &str,
        command: Redirected<'_>,
    ) -> Option<Result<Vec<Value>, StoreError>> {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let mut clients = self.ask_clients.0.lock().await;
        for server in self.client.active_connections() {
            let addr = format!("{}:{}", server.host, server.port);
            // A master that cannot be asked, or cannot tell, is passed over: another may be
            // the one importing the slot.
            let Some(client) = ask_client(&mut clients, &self.config, addr).await else {
                continue;
            };
            if imports(&client, slot).await != Some(true) {
                continue;
            }
            let asking: Result<(), FredError> =
                client.custom(custom("ASKING"), Vec::<String>::new()).await;
            if let Err(e) = asking {
                return Some(Err(fred_error("ASKING failed", e)));
            }
            let reply = send(&client, key, command).await;
            return Some(reply.map_err(|e| fred_error("redirected command failed", e)));
        }
        None
    }
}

/// The plain connection to the master at `addr`, opened (and kept) at its first use, and
/// opened again if it has been lost since (it never reconnects by itself, so the one replaced
/// is gone for good).
async fn ask_client(
    clients: &mut Vec<(String, Client)>,
    config: &RedisConfig,
    addr: String,
) -> Option<Client> {
    if let Some(at) = clients.iter().position(|(a, _)| *a == addr) {
        if clients[at].1.is_connected() {
            return Some(clients[at].1.clone());
        }
        clients.swap_remove(at);
    }
    let config = RedisConfig {
        url: crate::redis_url::single_node(&config.url, &addr),
        cluster: false,
        ..config.clone()
    };
    let client = connection::build_client(&config, false).ok()?;
    client.init().await.ok()?;
    clients.push((addr, client.clone()));
    Some(client)
}

/// Whether the master behind `client` is importing `slot` (`None`: it could not tell).
async fn imports(client: &Client, slot: u16) -> Option<bool> {
    let nodes: String = client.custom(custom("CLUSTER"), vec!["NODES"]).await.ok()?;
    let importing = format!("[{slot}-<-");
    let mine = nodes.lines().find(|l| l.contains("myself"))?;
    Some(mine.contains(&importing))
}

/// Sends `command` on `key` (right after `ASKING`, on the same connection).
async fn send(
    client: &Client,
    key: &str,
    command: Redirected<'_>,
) -> Result<Vec<Value>, FredError> {
    // `EVALSHA sha 1 key args..` or `EVAL source 1 key args..`.
    let (name, script, args) = match command {
        Redirected::Script { sha, args } => ("EVALSHA", sha, args),
        Redirected::Rollback { args } => ("EVAL", rollback::SOURCE, args),
    };
    let mut full: Vec<String> = Vec::with_capacity(args.len() + 3);
    full.extend([script.to_owned(), "1".to_owned(), key.to_owned()]);
    full.extend(args.iter().cloned());
    match client.custom::<Value, _>(custom(name), full).await? {
        Value::Array(values) => Ok(values),
        value => Ok(vec![value]),
    }
}

/// A command fred has no method for, sent to any node (one node, off a cluster).
pub(super) fn custom(command: &'static str) -> CustomCommand {
    CustomCommand::new_static(command, ClusterHash::Random, false)
}
