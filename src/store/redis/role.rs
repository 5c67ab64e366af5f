//! What the server a single server's URL reached is, at the first connection: a replica, or a
//! node of a Redis Cluster (both refused: see `Connections::connect`).

use fred::prelude::{Client, ClientLike, Error as FredError};
use fred::types::Value;

use super::ask;

/// `Some` (` of HOST:PORT`, its master, where it says) when a single server says it is a
/// replica (`ROLE`): a replica refuses the script's writes, or keeps them from the instances on
/// the master, and the start refuses it. A server that does not answer `ROLE` (an ACL user
/// without it) is taken for a master. (A cluster client only sends to masters.)
pub(super) async fn replica_of(client: &Client) -> Option<String> {
    if client.is_clustered() {
        return None;
    }
    let reply: Result<Value, FredError> = client
        .custom(ask::custom("ROLE"), Vec::<String>::new())
        .await;
    let Ok(Value::Array(parts)) = reply else {
        return None;
    };
    let field = |i: usize| parts.get(i).and_then(|v| v.as_string());
    // Redis and Valkey say `slave`; some compatible servers say `replica`.
    if !matches!(field(0).as_deref(), Some("slave" | "replica")) {
        return None;
    }
    Some(match (field(1), field(2)) {
        (Some(host), Some(port)) => format!(" of {host}:{port}"),
        _ => String::new(),
    })
}

/// Whether a client that is not a cluster client reached a node of a Redis Cluster of several
/// masters (`INFO cluster` says `cluster_enabled:1`, and `CLUSTER INFO` that the node does not
/// hold every slot alone): most keys would answer MOVED. A cluster of one master holding every
/// slot (with replicas or not), reached at that master, is taken (a review: a one-tier config works there); a check over several tiers then
/// fails with `CROSSSLOT`, a configuration error. `false` when the server cannot tell (no
/// such section, or the user may not run `INFO`).
pub(super) async fn cluster_node(client: &Client) -> bool {
    if client.is_clustered() {
        return false;
    }
    let reply: Result<String, FredError> =
        client.custom(ask::custom("INFO"), vec!["cluster"]).await;
    if !reply.is_ok_and(|info| info.lines().any(|l| l.trim() == "cluster_enabled:1")) {
        return false;
    }
    let info: Result<String, FredError> = client.custom(ask::custom("CLUSTER"), vec!["INFO"]).await;
    let Ok(info) = info else {
        return true;
    };
    let field = |name: &str| {
        (info.lines())
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    // `cluster_size`: the masters that hold slots (its replicas do not count).
    let alone = field("cluster_size") == Some(1);
    let every_slot = field("cluster_slots_assigned") == Some(u64::from(crate::shards::SLOTS));
    if !(alone && every_slot) {
        return true;
    }
    // And that master is the node the URL names (not a master without slots beside it: a
    // review).
    // (Refused by an ACL: it cannot tell, and takes it.)
    let Some(nodes) = ask::cluster_nodes(client).await else {
        return false;
    };
    // Its own line holds a slot range among fields 9 and on (not only a migration).
    !ask::own_line(&nodes).is_some_and(|mine| mine.split(' ').skip(8).any(|f| !f.starts_with('[')))
}
