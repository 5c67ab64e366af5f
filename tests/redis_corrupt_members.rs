//! Members the limiter did not write (an operator's ZADD into a key under its prefix), placed
//! where the script reads them least: inside a batch's picture of a shared key, behind names it
//! trims, as a future newest member, in a totals key about to be rebased. No tier admits past
//! its limit, the script never raises a Lua error, and a batch answers and writes what its
//! checks alone would (docs/REDIS.md, "Batches"). Found by an outside review of the first
//! guard (`1899e86`); the tests marked "failed before" failed on it.
#![cfg(feature = "redis")]

mod common;

use common::script::{client, recorded, strings};
use common::RedisServer;
use fred::prelude::{Client, ClientLike, SortedSetsInterface};
use fred::types::scripts::Script;
use fred::types::Value;

const SOURCE: &str = include_str!("../src/store/redis/script.lua");
const W: u64 = 60_000_000;
const NOW: u64 = 1_700_000_000_000_000;

/// Eight checks of (user i, global) for i = 1..=8, the i-th at `now + step * i`, global limit
/// `limit`: a batch big enough for a picture of the global key.
fn user_and_global(now: u64, step: u64, limit: u64) -> Vec<(Vec<String>, Vec<u64>)> {
    (1..=8)
        .map(|i| {
            (
                vec![format!("t:user:{i}"), "t:global".to_owned()],
                vec![now + step * i, W, 1, 2, 0, 10, limit],
            )
        })
        .collect()
}

/// `checks`: (keys, args) each; one EVALSHA.
async fn eval(
    client: &Client,
    script: &Script,
    checks: &[(Vec<String>, Vec<u64>)],
) -> Result<Value, fred::error::Error> {
    let keys: Vec<String> = checks.iter().flat_map(|c| c.0.clone()).collect();
    let args: Vec<String> = checks
        .iter()
        .flat_map(|c| c.1.iter().map(|a| a.to_string()))
        .collect();
    script.evalsha_with_reload(client, keys, args).await
}

async fn zadd(client: &Client, key: &str, entries: Vec<(f64, String)>) {
    let _: () = client
        .zadd(key, None, None, false, false, entries)
        .await
        .unwrap();
}

async fn in_window(client: &Client, key: &str, at: u64) -> u64 {
    client
        .zcount(key, (at - W) as f64, f64::INFINITY)
        .await
        .unwrap()
}

/// A global key holding two entries of ours about to leave the window, then `member` (at
/// now-10); eight checks of (user, global), global limit 5. The batch's picture trims the two,
/// reaches `member`, and (for a name the script's time_of rejects but time_digits accepts) reads
/// it as time 1 and trims it too, while Redis keeps it.
/// Failed before for "1-x", "1-", "1700000000000000-zz", "1700000000000000-1-1".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digits_then_dash_junk_in_a_shared_key_never_admits_past_the_limit() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    let limit = 5;
    let mut failures = Vec::new();
    for member in ["1-x", "1-", "5-a-b", "1699999999999990-zz"] {
        let _: () = client.flushall(false).await.unwrap();
        let (t1, t2) = (NOW - W + 1, NOW - W + 2);
        zadd(
            &client,
            "t:global",
            vec![
                (t1 as f64, t1.to_string()),
                (t2 as f64, t2.to_string()),
                ((NOW - 10) as f64, member.to_owned()),
            ],
        )
        .await;
        let checks = user_and_global(NOW, 1, limit);
        let reply = eval(&client, &script, &checks).await.unwrap();
        let Value::Array(replies) = reply else {
            panic!()
        };
        let replies: Vec<Vec<String>> = replies.iter().map(strings).collect();
        let n = in_window(&client, "t:global", NOW + 8).await;
        if n > limit {
            failures.push(format!(
                "{member:?}: t:global holds {n} entries in the window, limit {limit}; check 3 answered {:?}",
                replies[2]
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The same, but the garbage is in the MIDDLE of the picture's names (the newest member is
/// ours, so the picture is made and must read the garbage lazily). Kills mutations of the lazy
/// reading (`ok` starting at #q; no leading-zero check) that the repo's tests miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_middle_of_a_picture_never_admits_past_the_limit() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    let limit = 6;
    let mut failures = Vec::new();
    for member in [
        "abc",
        "0000000000000005",
        "-1",
        "0x10",
        "17000000000000zz",
        "00",
    ] {
        let _: () = client.flushall(false).await.unwrap();
        let (t1, t2) = (NOW - W + 1, NOW - W + 2);
        zadd(
            &client,
            "t:global",
            vec![
                (t1 as f64, t1.to_string()),
                (t2 as f64, t2.to_string()),
                ((NOW - 10) as f64, member.to_owned()),
                ((NOW - 5) as f64, (NOW - 5).to_string()),
            ],
        )
        .await;
        let checks = user_and_global(NOW, 1, limit);
        let reply = eval(&client, &script, &checks).await;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{member:?}: the batch failed whole: {e:?}"));
                continue;
            }
        };
        let Value::Array(replies) = reply else {
            panic!()
        };
        let replies: Vec<Vec<String>> = replies.iter().map(strings).collect();
        let n = in_window(&client, "t:global", NOW + 8).await;
        if n > limit {
            failures.push(format!(
                "{member:?}: t:global holds {n} entries in the window, limit {limit}: {replies:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A totals key about to rebase (newest total just under 2^52), every entry from the future
/// (a clock ahead), and a member "" (or "0", "000000000000000a", ...) among them. The check
/// validates the oldest and newest it reads, then the clamp moves all entries to `now`, where
/// they sort by name: the rebase reads the name-first member as the oldest and does arithmetic
/// on nil: a Lua runtime error, alone and for the whole batch. Failed before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebase_after_a_clamp_never_raises_a_lua_error() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    let mut failures = Vec::new();
    for garbage in ["", "0", "000000000000000a", "-"] {
        for batch in [false, true] {
            let _: () = client.flushall(false).await.unwrap();
            zadd(
                &client,
                "t:global",
                vec![
                    ((NOW + 1000) as f64, "0010000000000000:1".to_owned()),
                    ((NOW + 2000) as f64, garbage.to_owned()),
                    ((NOW + 3000) as f64, "0010000000000001:1".to_owned()),
                ],
            )
            .await;
            let n = if batch { 8 } else { 1 };
            let checks: Vec<(Vec<String>, Vec<u64>)> = (0..n)
                .map(|i| {
                    (
                        vec![
                            format!("t:user:{i}"),
                            "t:endpoint:/x".to_owned(),
                            "t:global".to_owned(),
                        ],
                        vec![NOW + i, W, 1, 3, 0, 10, 100, 1000],
                    )
                })
                .collect();
            if let Err(e) = eval(&client, &script, &checks).await {
                if e.details().contains("user_script") {
                    failures.push(format!("{garbage:?} (batch: {batch}): {}", e.details()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A totals key whose newest member is not one of ours ("+10": no ':' at byte 17, not a hex
/// total) is read as a total anyway (total_of: strtoul of the first 16 bytes), so the count
/// comes out 0 in a full tier and the script admits. Limit 3, three entries of ours in the
/// window: nothing more may be admitted. Failed before (three admitted, count 0 each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_totals_key_whose_newest_member_is_not_ours_admits_nothing_past_the_limit() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    let mut failures = Vec::new();
    for (garbage, first) in [
        ("+10", 0x11u64),
        ("0x10", 0x11),
        (" 10", 0x11),
        ("10", 0x11),
        ("0", 0x1),
    ] {
        let _: () = client.flushall(false).await.unwrap();
        let mut entries: Vec<(f64, String)> = (0..3)
            .map(|j| ((NOW - 50 + 10 * j) as f64, format!("{:016x}:1", first + j)))
            .collect();
        entries.push(((NOW - 20) as f64, garbage.to_owned()));
        zadd(&client, "t:global", entries).await;
        let mut admitted = Vec::new();
        for i in 0..6 {
            let reply = eval(
                &client,
                &script,
                &[(vec!["t:global".to_owned()], vec![NOW + i, W, 1, 1, 0, 3])],
            )
            .await;
            if let Ok(r) = reply {
                let r = strings(&r);
                if recorded(&r) {
                    admitted.push(r);
                }
            }
        }
        if !admitted.is_empty() {
            failures.push(format!(
                "{garbage:?}: admitted past a full tier: {admitted:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The same checks as one batch (keys under `b:`) and one EVALSHA each (keys under `a:`,
/// stopping at the first error): every reply up to it and every key must be the same.
async fn batch_equals_alone(
    client: &Client,
    script: &Script,
    entries: &[(&str, Vec<(f64, String)>)],
    checks: &[(Vec<String>, Vec<u64>)],
) -> Result<(), String> {
    let _: () = client.flushall(false).await.unwrap();
    for prefix in ["a:", "b:"] {
        for (key, members) in entries {
            zadd(client, &format!("{prefix}{key}"), members.clone()).await;
        }
    }
    let with = |prefix: &str| -> Vec<(Vec<String>, Vec<u64>)> {
        checks
            .iter()
            .map(|(k, a)| {
                (
                    k.iter().map(|k| format!("{prefix}{k}")).collect(),
                    a.clone(),
                )
            })
            .collect()
    };
    let batch = eval(client, script, &with("b:"))
        .await
        .map_err(|e| format!("the batch failed whole: {e:?}"))?;
    let Value::Array(batch) = batch else { panic!() };
    let batch: Vec<Vec<String>> = batch.iter().map(strings).collect();
    for (i, check) in with("a:").iter().enumerate() {
        match eval(client, script, std::slice::from_ref(check)).await {
            Ok(alone) => {
                let alone = strings(&alone);
                if batch[i] != alone {
                    return Err(format!("check {i}: batch {:?}, alone {alone:?}", batch[i]));
                }
            }
            Err(e) => {
                if batch[i][0] != "3" {
                    return Err(format!("check {i}: batch {:?}, alone {e:?}", batch[i]));
                }
                break;
            }
        }
    }
    let mut keys: Vec<String> = checks.iter().flat_map(|c| c.0.clone()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let a: Vec<(String, f64)> = client
            .zrange(format!("a:{key}"), 0, -1, None, false, None, true)
            .await
            .unwrap();
        let b: Vec<(String, f64)> = client
            .zrange(format!("b:{key}"), 0, -1, None, false, None, true)
            .await
            .unwrap();
        if a != b {
            return Err(format!("{key}: batch {b:?}, alone {a:?}"));
        }
    }
    Ok(())
}

/// A name the limiter did not write INSIDE a batch's picture (neither the oldest nor the last
/// one read), and one after it (the newest, from the future, next to an entry of ours at
/// `now`): the batch must answer and write what the checks alone would. It catches the
/// lazy-reading mutations the earlier tests missed (no leading-zero check, the "Redis answers"
/// branch dropped, the last name or the newest not validated). Names `<digits>-<junk>` failed
/// before: inside a picture the batch trimmed one by its digits (alone: "cannot read"); as the
/// newest its digits became the picture's `max`, so the batch held back a member named `now`
/// though one of ours had that name: ZADD renamed instead of adding, and an entry was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_equals_alone_with_garbage_inside_a_picture() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    let mut failures = Vec::new();
    let checks = |now: u64, step: u64| user_and_global(now, step, 100);
    let ours = |t: u64| (t as f64, t.to_string());
    for garbage in [
        "abc",
        "0000000000000005",
        "-1",
        "0x10",
        "00",
        "17000000000000zz",
        "1-x",
        "1-",
        "1700000000000000-zz",
    ] {
        // Behind two entries the batch trims, before one of ours (the newest).
        let (t1, t2) = (NOW - W + 1, NOW - W + 2);
        let inside = vec![
            ours(t1),
            ours(t2),
            ((NOW - 10) as f64, garbage.to_owned()),
            ours(NOW - 5),
        ];
        if let Err(e) =
            batch_equals_alone(&client, &script, &[("t:global", inside)], &checks(NOW, 1)).await
        {
            failures.push(format!("{garbage:?} inside: {e}"));
        }
        // The newest, from the future, with an entry of ours at now: the whole key read
        // (few members), or a prefix of it (more members than the picture reads).
        for extra in [0, 12] {
            let mut newest = vec![ours(NOW - 100), ours(NOW)];
            newest.extend((0..extra).map(|j| ours(NOW - 90 + j)));
            newest.push((f64::INFINITY, garbage.to_owned()));
            if let Err(e) =
                batch_equals_alone(&client, &script, &[("t:global", newest)], &checks(NOW, 0)).await
            {
                failures.push(format!("{garbage:?} newest (+{extra}): {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Through the limiter: a user key holding a name the limiter did not write makes the check
/// that meets it fall back to memory, answered, with an error naming the tier; the script
/// refuses it (a name of another length than the time's) or the client does (the same length:
/// the script's hot path sends it as it is, docs/REDIS.md "Batches").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_meeting_a_member_it_did_not_write_falls_back_naming_the_tier() {
    let server = RedisServer::start();
    let now = common::wall_clock().as_micros() as u64;
    let same_length = format!("{:0>16}", "a");
    for (user, name) in [("short", "garbage-zz".to_owned()), ("long", same_length)] {
        let key = format!("rate_limit:user:{user}");
        let score = (now - 1_000).to_string();
        server.cli(&["ZADD", &key, &score, &name]);
        let config = common::limits(10, 100, 1000, std::time::Duration::from_secs(60))
            .redis_url(server.url())
            .build()
            .unwrap();
        let limiter = tiered_ratelimit::RateLimiter::new(config);
        limiter.wait_connected().await;
        assert!(limiter.check(user, "/e").await.allowed(), "{name:?}");
        assert_eq!(
            limiter.backend(),
            tiered_ratelimit::Backend::Memory,
            "{name:?}"
        );
        let cause = format!("{:?}", limiter.fallback_cause());
        assert!(
            cause.contains("cannot read a member of the key of tier 1"),
            "{name:?}: {cause}"
        );
    }
}
