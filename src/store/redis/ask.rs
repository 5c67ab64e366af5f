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
use std::time::{Duration, Instant};

use fred::prelude::{Client, ClientLike, ConnectionConfig, Error as FredError, ErrorKind};
use fred::types::{ClusterHash, CustomCommand, FromValue, Value};

use super::super::StoreError;
use super::rollback::{self, Reservation, ROLLBACK};
use super::{connection, fred_error, script, Connections};
use crate::config::RedisConfig;

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

/// How long a master found importing a slot is asked first for that slot, without looking
/// again: a slot's migration spans many commands, and looking (`CLUSTER NODES` on every master)
/// under the lock for each made every redirected command wait for all the others (a review:
/// 64 tasks on a migrating key, 8x slower, and a fallback at a 100 ms timeout). A master that
/// no longer imports the slot answers MOVED, and is then forgotten.
const IMPORTER_TTL: Duration = Duration::from_secs(1);

/// One plain (non-cluster) connection per master, opened at its first ASK, and the master last
/// found importing each slot.
///
/// The lock also keeps each `ASKING` and the command it is for together on the wire.
#[derive(Default)]
pub(super) struct AskClients {
    state: tokio::sync::Mutex<AskState>,
    /// Every connection opened, for closing them (the lock above may be held by a redirection
    /// when the store closes).
    opened: std::sync::Mutex<Vec<Client>>,
}

#[derive(Default)]
struct AskState {
    clients: Vec<(String, Client)>,
    /// `(slot, master, when found)`.
    importers: Vec<(u16, String, Instant)>,
}

impl AskState {
    /// The master found importing `slot` within [`IMPORTER_TTL`].
    fn importer(&self, slot: u16) -> Option<String> {
        self.importers
            .iter()
            .find(|(s, _, at)| *s == slot && at.elapsed() < IMPORTER_TTL)
            .map(|(_, addr, _)| addr.clone())
    }

    fn remember(&mut self, slot: u16, addr: String) {
        self.importers
            .retain(|(s, _, at)| *s != slot && at.elapsed() < IMPORTER_TTL);
        self.importers.push((slot, addr, Instant::now()));
    }

    fn forget(&mut self, slot: u16) {
        self.importers.retain(|(s, _, _)| *s != slot);
    }
}

impl AskClients {
    /// Every connection opened (for closing them).
    pub(super) fn open_now(&self) -> Vec<Client> {
        self.opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

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

    /// Runs `command` on `key` at the master importing its slot, after `ASKING`. `None` when no
    /// master is importing the slot (or none could be asked): the caller sends it again.
    ///
    /// The master found last for the slot is asked first (within [`IMPORTER_TTL`]); else every
    /// master is asked whether it imports the slot: those in fred's slot map, and those the
    /// first of them lists in `CLUSTER NODES` (a master added since, as a scale-out reshard
    /// does, has no slot in the map yet).
    async fn asking(&self, key: &str, command: Redirected<'_>) -> Option<Result<Value, FredError>> {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let mut state = self.ask_clients.state.lock().await;
        if let Some(addr) = state.importer(slot) {
            if let Some(client) = self.ask_client(&mut state.clients, addr).await {
                match asked(&client, key, command).await {
                    Err(e) if redirected(&e) => state.forget(slot),
                    reply => return Some(reply),
                }
            }
        }
        let mut masters: Vec<String> = (self.client.active_connections().iter())
            .map(|server| address(&server.host, server.port))
            .collect();
        let mut listed = false;
        let mut i = 0;
        while i < masters.len() {
            let addr = masters[i].clone();
            i += 1;
            // A master that cannot be asked, or cannot tell, is passed over: another may be
            // the one importing the slot.
            let Some(client) = self.ask_client(&mut state.clients, addr.clone()).await else {
                continue;
            };
            let Some(nodes) = cluster_nodes(&client).await else {
                continue;
            };
            if !listed {
                listed = true;
                for other in masters_in(&nodes) {
                    if !masters.contains(&other) {
                        masters.push(other);
                    }
                }
            }
            if !imports(&nodes, slot) {
                continue;
            }
            let reply = asked(&client, key, command).await;
            if !matches!(&reply, Err(e) if redirected(e)) {
                state.remember(slot, addr);
            }
            return Some(reply);
        }
        None
    }

    /// The plain connection to the master at `addr`, opened (and kept) at its first use, and
    /// opened again if it has been lost since (it never reconnects by itself, so the one
    /// replaced is gone for good).
    async fn ask_client(
        &self,
        clients: &mut Vec<(String, Client)>,
        addr: String,
    ) -> Option<Client> {
        if let Some(at) = clients.iter().position(|(a, _)| *a == addr) {
            if clients[at].1.is_connected() {
                return Some(clients[at].1.clone());
            }
            clients.swap_remove(at);
        }
        let config = RedisConfig {
            url: crate::redis_url::single_node(&self.config.url, &addr),
            cluster: false,
            ..self.config.clone()
        };
        let client = connection::build_client(&config, false).ok()?;
        let router = client.init().await.ok()?;
        // Closed with the store's other connections.
        self.keep_router(router);
        let mut opened = self
            .ask_clients
            .opened
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        opened.retain(Client::is_connected);
        opened.push(client.clone());
        drop(opened);
        clients.push((addr, client.clone()));
        Some(client)
    }
}

/// `host:port`, with an IPv6 host in brackets (as a URL takes it).
fn address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `CLUSTER NODES` of the master behind `client` (`None`: it could not tell).
async fn cluster_nodes(client: &Client) -> Option<String> {
    client.custom(custom("CLUSTER"), vec!["NODES"]).await.ok()
}

/// Whether `nodes` (a master's `CLUSTER NODES`) says that master imports `slot`: its own line
/// holds `[slot-<-source]` (only a node's own line shows its migrations).
fn imports(nodes: &str, slot: u16) -> bool {
    let importing = format!("[{slot}-<-");
    (nodes.lines())
        .find(|l| l.contains("myself"))
        .is_some_and(|mine| mine.contains(&importing))
}

/// The masters `nodes` (a `CLUSTER NODES` reply) lists that are up, as `host:port`.
fn masters_in(nodes: &str) -> Vec<String> {
    let mut masters = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
            continue;
        }
        // `ip:port@cport[,hostname]`.
        let addr = addr.split(['@', ',']).next().unwrap_or_default();
        let Some((host, port)) = addr.rsplit_once(':') else {
            continue;
        };
        if let (false, Ok(port)) = (host.is_empty(), port.parse()) {
            masters.push(address(host, port));
        }
    }
    masters
}

/// Whether `error` is a node's redirection (MOVED or ASK: it is not the node for the key).
fn redirected(error: &FredError) -> bool {
    *error.kind() == ErrorKind::Routing
        || error.details().starts_with("MOVED")
        || error.details().starts_with("ASK")
}

/// `ASKING`, then `command` on `key`, on `client`'s one connection (the caller holds the lock
/// that keeps them together); a script the master does not hold (`NOSCRIPT`) is loaded there,
/// and both are sent again.
async fn asked(client: &Client, key: &str, command: Redirected<'_>) -> Result<Value, FredError> {
    let asking = || client.custom::<(), _>(custom("ASKING"), Vec::<String>::new());
    asking().await?;
    match send(client, key, command).await {
        Err(e) if e.details().starts_with("NOSCRIPT") => {
            let Redirected::Script { lua, .. } = command else {
                return Err(e);
            };
            let _: String = client.custom(custom("SCRIPT"), vec!["LOAD", lua]).await?;
            asking().await?;
            send(client, key, command).await
        }
        reply => reply,
    }
}

/// Sends `command` on `key` (right after `ASKING`, on the same connection).
async fn send(client: &Client, key: &str, command: Redirected<'_>) -> Result<Value, FredError> {
    // `EVALSHA sha 1 key args..`, `EVAL source 1 key args..` or `name key args..`.
    let (name, head, args) = match command {
        Redirected::Script { sha, args, .. } => ("EVALSHA", Some(sha), args),
        Redirected::Rollback { args } => ("EVAL", Some(rollback::SOURCE), args),
        Redirected::Command { name, args } => (name, None, args),
    };
    let mut full: Vec<String> = Vec::with_capacity(args.len() + 3);
    if let Some(script) = head {
        full.extend([script.to_owned(), "1".to_owned()]);
    }
    full.push(key.to_owned());
    full.extend(args.iter().cloned());
    client.custom::<Value, _>(custom(name), full).await
}

/// A command fred has no method for, sent to any node (one node, off a cluster).
pub(super) fn custom(command: &'static str) -> CustomCommand {
    CustomCommand::new_static(command, ClusterHash::Random, false)
}
