//! The cluster's rollback script (`src/store/redis/rollback.lua`) alone, on a `redis-server`
//! of its own: which entry it removes for a reservation, and which never. The races that make
//! it meet each case on a real cluster are in `tests/cluster_rollback.rs`.
#![cfg(feature = "redis")]

mod common;

use fred::types::scripts::Script;
use fred::types::Value;

use common::script::{client, scored_members};
use common::RedisServer;

const SOURCE: &str = include_str!("../src/store/redis/rollback.lua");

const A: &str = "0000000000000002:2";
const B: &str = "0000000000000003:1";
const C: &str = "0000000000000005:2";
/// A totals key: A (cost 2) at 5, B (cost 1) at 6, C (cost 2) at 7.
const TOTALS: &[(&str, u64)] = &[(A, 5), (B, 6), (C, 7)];
const X: &str = "0000000000000001:1";
/// Two entries of one score and cost.
const SAME: &[(&str, u64)] = &[(X, 6), ("0000000000000002:1", 6)];
/// A plain key, with two members the limiter did not write.
const PLAIN: &[(&str, u64)] = &[("junk", 1), ("2:x", 1), ("3", 3), ("3-1", 3)];

/// One case: the key's entries, the reservation (member, cost, time), the reply, the
/// members left.
type Case = (
    &'static str,
    &'static [(&'static str, u64)],
    (&'static str, u64, u64),
    i64,
    &'static [&'static str],
);

const CASES: &[Case] = &[
    ("by name first, at its score", TOTALS, (B, 1, 6), 1, &[A, C]),
    (
        "by name only at its score: else a stand-in",
        TOTALS,
        (A, 2, 7),
        2,
        &[A, B],
    ),
    (
        "by name only at its score: else nothing",
        TOTALS,
        (A, 2, 6),
        0,
        &[A, B, C],
    ),
    (
        "renamed: an entry of its score and cost",
        TOTALS,
        ("0000000000000009:2", 2, 7),
        2,
        &[A, B],
    ),
    (
        "renamed, cost 1",
        TOTALS,
        ("0000000000000009:1", 1, 6),
        2,
        &[A, C],
    ),
    (
        "an older entry of its cost never stands in",
        TOTALS,
        ("0000000000000009:2", 2, 6),
        0,
        &[A, B, C],
    ),
    (
        "nor one of another cost at its score",
        TOTALS,
        ("0000000000000009:1", 1, 5),
        0,
        &[A, B, C],
    ),
    (
        "the newest of its score and cost",
        SAME,
        ("0000000000000009:1", 1, 6),
        2,
        &[X],
    ),
    (
        "plain: one unit each",
        PLAIN,
        ("9", 1, 3),
        2,
        &["2:x", "junk", "3"],
    ),
    (
        "plain: never a member not the limiter's",
        PLAIN,
        ("9", 1, 1),
        0,
        &["2:x", "junk", "3", "3-1"],
    ),
    (
        "plain: no entry of cost 2",
        PLAIN,
        ("9", 2, 3),
        0,
        &["2:x", "junk", "3", "3-1"],
    ),
    ("a missing key stays missing", &[], ("9", 1, 9), 0, &[]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stand_in_has_the_reservations_score_and_cost() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    for (i, &(what, entries, (member, cost, at), reply, left)) in CASES.iter().enumerate() {
        let key = format!("k{i}");
        for (m, score) in entries {
            server.cli(&["ZADD", &key, &score.to_string(), m]);
        }
        let args = vec![member.to_owned(), cost.to_string(), at.to_string()];
        let got: Value = script
            .evalsha_with_reload(&client, vec![key.clone()], args)
            .await
            .unwrap();
        let members: Vec<String> =
            scored_members(&server.cli(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]))
                .into_iter()
                .map(|(m, _)| m)
                .collect();
        assert_eq!(
            (got.as_i64(), members),
            (Some(reply), left.iter().map(|m| m.to_string()).collect()),
            "{what}"
        );
    }
    assert_eq!(server.cli(&["EXISTS", "k11"]).trim(), "0");
    // At most LOOK (1,000) entries at the score are read, the newest first: an entry of the
    // cost behind 1,000 others does not stand in, behind 999 it does.
    for (others, reply) in [(1000, 0), (999, 2)] {
        let key = format!("look{others}");
        let mut zadd = vec!["ZADD".to_owned(), key.clone(), "6".into(), X.into()];
        for t in 2..others + 2 {
            zadd.extend(["6".to_owned(), format!("{t:016x}:2")]);
        }
        let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
        server.cli(&zadd);
        let args = vec!["gone".to_owned(), "1".to_owned(), "6".to_owned()];
        let got: Value = script
            .evalsha_with_reload(&client, vec![key.clone()], args)
            .await
            .unwrap();
        assert_eq!(got.as_i64(), Some(reply), "{others} others");
    }
    // It only removes (and sets its marker), so it runs over `maxmemory` too, as a bare ZREM
    // does.
    server.cli(&["ZADD", "oom", "5", "5"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let args = vec![
        "5".to_owned(),
        "1".to_owned(),
        "5".to_owned(),
        "1000".into(),
    ];
    let keys = vec!["oom".to_owned(), "{oom}#marker".to_owned()];
    let got: Result<Value, _> = script.evalsha_with_reload(&client, keys, args).await;
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(got.unwrap().as_i64(), Some(1));
    assert_eq!(server.cli(&["EXISTS", "oom"]).trim(), "0");
}

/// Run twice with its marker (fred may send a command again once it ran), the rollback does
/// nothing the second time: without the marker, the second run would take a stand-in, another
/// request's entry of the same score and cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_of_one_rollback_does_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    let run = |key: &str, marker: Option<&str>| {
        let keys: Vec<String> = [Some(key), marker]
            .into_iter()
            .flatten()
            .map(String::from)
            .collect();
        let args = ["5-1", "1", "5", "2000"].map(String::from).to_vec();
        let (script, client) = (&script, &client);
        async move {
            let got: Value = script
                .evalsha_with_reload(client, keys, args)
                .await
                .unwrap();
            got.as_i64().unwrap()
        }
    };
    let left = |key: &str| server.cli(&["ZCARD", key]).trim().to_owned();
    for key in ["with", "without"] {
        server.cli(&["ZADD", key, "5", "5", "5", "5-1"]);
    }
    assert_eq!(run("with", Some("{with}#m")).await, 1);
    assert_eq!(run("with", Some("{with}#m")).await, 3);
    assert_eq!(left("with"), "1", "the other request's entry stays");
    let ttl: u64 = server.cli(&["PTTL", "{with}#m"]).trim().parse().unwrap();
    assert!(ttl > 0 && ttl <= 2000, "the marker expires: {ttl}");
    assert_eq!(run("without", None).await, 1);
    assert_eq!(run("without", None).await, 2);
    assert_eq!(left("without"), "0");
}
