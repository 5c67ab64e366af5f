//! The master importing a slot, and the connections that send it `ASKING` and a command back
//! to back (see the parent module's docs).

use std::time::{Duration, Instant};

use fred::prelude::{Client, ClientLike, Error as FredError, ErrorKind};
use fred::types::Value;

use super::super::rollback;
use super::super::{connection, Connections};
use super::{custom, Redirected};
use crate::config::RedisConfig;

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
pub(in crate::store::redis) struct AskClients {
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
    pub(in crate::store::redis) fn open_now(&self) -> Vec<Client> {
        self.opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Connections {
    /// Runs `command` on `key` at the master importing its slot, after `ASKING`. `None` when no
    /// master is importing the slot (or none could be asked): the caller sends it again.
    ///
    /// The master found last for the slot is asked first (within [`IMPORTER_TTL`]); else every
    /// master is asked whether it imports the slot: those in fred's slot map, and those the
    /// first of them lists in `CLUSTER NODES` (a master added since, as a scale-out reshard
    /// does, has no slot in the map yet).
    pub(super) async fn asking(
        &self,
        key: &str,
        command: Redirected<'_>,
    ) -> Option<Result<Value, FredError>> {
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

/// `CLUSTER NODES` of the node behind `client` (`None`: it could not tell, or may not).
pub(in crate::store::redis) async fn cluster_nodes(client: &Client) -> Option<String> {
    client.custom(custom("CLUSTER"), vec!["NODES"]).await.ok()
}

/// The node's own line of `nodes` (its `CLUSTER NODES`): `myself` among its flags, the third
/// field (a hostname in the second may hold any text: a review fooled a text match with one).
pub(in crate::store::redis) fn own_line(nodes: &str) -> Option<&str> {
    nodes.lines().find(|line| {
        (line.split(' ').nth(2)).is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
    })
}

/// Whether `nodes` (a master's `CLUSTER NODES`) says that master imports `slot`: its own line
/// holds `[slot-<-source]` (only a node's own line shows its migrations).
fn imports(nodes: &str, slot: u16) -> bool {
    let importing = format!("[{slot}-<-");
    own_line(nodes).is_some_and(|mine| mine.contains(&importing))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_own_line_is_found_by_its_flags_not_its_text() {
        let nodes = "\
a 127.0.0.1:7000@17000,myself-a master - 0 0 1 connected 0-100
b 127.0.0.1:7001@17001 myself,master - 0 0 2 connected 101-200 [300-<-a]";
        assert_eq!(own_line(nodes).map(|l| &l[..1]), Some("b"));
        assert!(imports(nodes, 300));
        assert!(!imports(
            "a 127.0.0.1:7000@17000,myself-a master - 0 0 1 connected [300-<-b]",
            300
        ));
    }
}
