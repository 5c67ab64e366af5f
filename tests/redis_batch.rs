//! The script decides a batch of checks exactly as it decides each alone (docs/REDIS.md, "The
//! script": batching changes no answer).
//!
//! Two `redis-server`s of the test's own, fed the same seeded random sequences: on one every
//! batch is one EVALSHA, on the other each of its checks is an EVALSHA of its own, in order.
//! Every check's reply and, after every batch, every key (members, scores, an expiry) must be
//! the same on both. The sequences aim at what the batch's picture of a shared key must get
//! right: the window's edge to the microsecond, a clock that steps back within a batch or jumps
//! a window, several checks in one microsecond, costs above 1, shadow tiers, full tiers, blocks,
//! limits of 1, and `now` crossing a power of ten (the picture compares decimal strings).
//!
//! `BATCH_SEED=S` replays one seed; `BATCH_SEQUENCES=N` runs more.
#![cfg(feature = "redis")]

mod common;

use common::rng::{env_u64, Rng};
use common::script::{client, recorded, strings};
use common::RedisServer;
use fred::prelude::{Client, ClientLike, KeysInterface, SortedSetsInterface};
use fred::types::scripts::Script;
use fred::types::Value;

const SOURCE: &str = include_str!("../src/store/redis/script.lua");

/// One check: its script keys and arguments (see `script.lua`).
#[derive(Clone, Debug)]
struct Check {
    keys: Vec<String>,
    args: Vec<String>,
}

/// Three busy users, whose keys most batches name several times (the batch's pictures), and two
/// quiet ones, whose keys a batch most often names once (each check reads them itself).
const USERS: [&str; 5] = [
    "t:user:a",
    "t:user:b",
    "t:user:c",
    "t:user:quiet-1",
    "t:user:quiet-2",
];
const ENDPOINTS: [&str; 2] = ["t:endpoint:/x", "t:endpoint:/y"];
const GLOBAL: &str = "t:global";

fn block_of(key: &str) -> String {
    format!("{{{key}}}#block")
}

/// A step back of a window: one less, exactly, one more, or up to two.
fn this_window_of(window: u64, rng: &mut Rng) -> u64 {
    match rng.below(4) {
        3 => window + rng.below(window),
        d => window + d - 1,
    }
}

/// The block keys an operator sets (true) or deletes (false) before a batch.
type Blocks = Vec<(String, bool)>;

/// A random sequence of batches: each batch's checks, with the blocks to set before it.
struct Sequence {
    batches: Vec<(Blocks, Vec<Check>)>,
}

fn generate(seed: u64) -> Sequence {
    let mut rng = Rng(seed);
    // Windows of seconds (a key's expiry is a window in Redis's own time, which must not pass
    // while the test runs), stepped through in microseconds. Time starts at 16 digits (today),
    // just below a power of ten, or within the first window.
    let window: u64 = [10_000_000, 10_000_007, 30_000_000][rng.below(3) as usize];
    let mut now: u64 = match rng.below(3) {
        0 => 1_700_000_000_000_000 + rng.below(1_000_000),
        1 => 100_000_000 - window - rng.below(2 * window),
        _ => rng.below(window / 2),
    };
    // Small limits fill the tiers (full tiers, expiries); large ones keep room, so that the
    // batch's pictures answer and hold members back.
    let limits = if rng.percent(50) {
        [1 + rng.below(3), 1 + rng.below(8), 2 + rng.below(12)]
    } else {
        [5 + rng.below(20), 40 + rng.below(100), 60 + rng.below(200)]
    };
    let mut recorded: Vec<u64> = Vec::new();
    let mut batches = Vec::new();
    for _ in 0..40 {
        // An operator blocks (for longer than the test runs) or unblocks a user or /x.
        let mut blocks = Vec::new();
        if rng.percent(8) {
            let key = [USERS[rng.below(3) as usize], ENDPOINTS[0]][rng.below(2) as usize];
            blocks.push((block_of(key), rng.percent(50)));
        }
        let size = match rng.below(4) {
            0 => 1,
            1 => 2 + rng.below(3),
            _ => 5 + rng.below(20),
        };
        let mut checks = Vec::new();
        let mut this_batch: Vec<u64> = Vec::new();
        for _ in 0..size {
            // The next time: a small step, none (the same microsecond), back a little, or to
            // the edge of the window of an entry already recorded (exactly, or 1 µs either side).
            now = match rng.below(14) {
                0 | 12 | 13 => now,
                1 => now.saturating_sub(1 + rng.below(3)),
                // A clock stepped back by a window or more (another instance's, say).
                10 => now.saturating_sub(this_window_of(window, &mut rng)),
                2 if !recorded.is_empty() => {
                    let at = recorded[rng.below(recorded.len() as u64) as usize];
                    (at + window + rng.below(3)).saturating_sub(1).max(now)
                }
                3 => now + window + rng.below(2),
                // Back to a time this batch has seen (a clock behind, then ahead again).
                4 if !this_batch.is_empty() => {
                    this_batch[rng.below(this_batch.len() as u64) as usize]
                }
                _ => now + rng.below(window / 3 + 1),
            };
            let this_window = if rng.percent(5) { window * 2 } else { window };
            let cost = if rng.percent(10) { 2 + rng.below(3) } else { 1 };
            let mut tiers: Vec<(&str, u64)> = Vec::new();
            if rng.percent(85) {
                let user = if rng.percent(30) {
                    3 + rng.below(2)
                } else {
                    rng.below(3)
                };
                tiers.push((USERS[user as usize], limits[0]));
            }
            if rng.percent(90) {
                tiers.push((ENDPOINTS[(rng.below(5) == 0) as usize], limits[1]));
            }
            if rng.percent(90) || tiers.is_empty() {
                tiers.push((GLOBAL, limits[2]));
            }
            let mut keys: Vec<String> = tiers.iter().map(|t| t.0.to_owned()).collect();
            let with_blocks = rng.percent(50);
            let block_keys: Vec<String> = if with_blocks {
                tiers
                    .iter()
                    .take_while(|t| t.0 != GLOBAL)
                    .map(|t| block_of(t.0))
                    .collect()
            } else {
                Vec::new()
            };
            let mut args = vec![
                now.to_string(),
                this_window.to_string(),
                cost.to_string(),
                tiers.len().to_string(),
                block_keys.len().to_string(),
            ];
            for (_, limit) in &tiers {
                let shadow = rng.percent(10);
                args.push(if shadow {
                    format!("-{limit}")
                } else {
                    limit.to_string()
                });
            }
            keys.extend(block_keys);
            recorded.push(now);
            this_batch.push(now);
            checks.push(Check { keys, args });
        }
        batches.push((blocks, checks));
    }
    Sequence { batches }
}

/// Makes about 40% of the checks after a batch's first repeat the check before them in all but
/// their time and user, as checks of other users on one route do (the limiter then sends them
/// short). From a second stream, so that a seed found before keeps its sequence without this.
fn with_repeats(mut sequence: Sequence, seed: u64) -> Sequence {
    let mut rng = Rng(seed ^ 0x7e9e_a75c_5e0d_5407);
    for (_, checks) in &mut sequence.batches {
        for i in 1..checks.len() {
            if !rng.percent(40) {
                continue;
            }
            let mut check = checks[i - 1].clone();
            check.args[0] = checks[i].args[0].clone();
            if USERS.contains(&check.keys[0].as_str()) {
                let user = USERS[rng.below(USERS.len() as u64) as usize];
                let tiers: usize = check.args[3].parse().unwrap();
                check.keys[0] = user.to_owned();
                if check.keys.len() > tiers {
                    check.keys[tiers] = block_of(user);
                }
            }
            checks[i] = check;
        }
    }
    sequence
}

/// The batch's `KEYS` and `ARGV` as the limiter sends them (docs/REDIS.md, "Batches"): a check
/// that repeats the last check sent whole in all but its time, its first tier's key and its
/// first block key goes short (its time and an empty string; those two keys), unless
/// `keep_whole` says to send it whole anyway (the script must take both).
fn short_form(
    checks: &[Check],
    mut keep_whole: impl FnMut() -> bool,
) -> (Vec<String>, Vec<String>) {
    let (mut keys, mut args) = (Vec::new(), Vec::new());
    let mut whole: Option<&Check> = None;
    for check in checks {
        let tiers: usize = check.args[3].parse().unwrap();
        let repeats = whole.is_some_and(|w| {
            w.args[1..] == check.args[1..]
                && w.keys.len() == check.keys.len()
                && (1..check.keys.len()).all(|j| j == tiers || w.keys[j] == check.keys[j])
        });
        if repeats && !keep_whole() {
            args.extend([check.args[0].clone(), String::new()]);
            keys.extend(check.keys.iter().step_by(tiers).take(2).cloned());
        } else {
            keys.extend(check.keys.iter().cloned());
            args.extend(check.args.iter().cloned());
            whole = Some(check);
        }
    }
    (keys, args)
}

/// Runs `checks` as one EVALSHA, each sent whole; the replies, one per check.
async fn run(client: &Client, script: &Script, checks: &[Check]) -> Vec<Vec<String>> {
    let keys: Vec<String> = checks.iter().flat_map(|c| c.keys.clone()).collect();
    let args: Vec<String> = checks.iter().flat_map(|c| c.args.clone()).collect();
    run_as(client, script, checks, keys, args).await
}

/// Runs `checks`, as `keys` and `args`, as one EVALSHA; the replies, one per check.
async fn run_as(
    client: &Client,
    script: &Script,
    checks: &[Check],
    keys: Vec<String>,
    args: Vec<String>,
) -> Vec<Vec<String>> {
    let reply: Vec<Value> = script
        .evalsha_with_reload(client, keys, args)
        .await
        .unwrap_or_else(|e| panic!("the script failed on {checks:?}: {e}"));
    // A batch of one check is answered with its reply, a larger one with a reply per check.
    if checks.len() == 1 {
        return vec![strings(&Value::Array(reply))];
    }
    assert_eq!(reply.len(), checks.len(), "one reply per check");
    reply.iter().map(strings).collect()
}

/// Every key of the test: its members with their scores, and its expiry (in 10 ms, so that
/// the two servers, which run at other moments, compare; -1: none, a leak; -2: no key).
async fn state(client: &Client) -> Vec<(String, Vec<(String, f64)>, i64)> {
    let mut out = Vec::new();
    for key in USERS.iter().chain(&ENDPOINTS).chain([&GLOBAL]) {
        let members: Vec<(String, f64)> = client
            .zrange(*key, 0, -1, None, false, None, true)
            .await
            .unwrap();
        let ttl: i64 = client.pttl(*key).await.unwrap();
        out.push((
            key.to_string(),
            members,
            if ttl >= 0 { ttl / 10 } else { ttl },
        ));
    }
    out
}

async fn replay(
    seed: u64,
    repeats: bool,
    batched: &Client,
    alone: &Client,
    script: &Script,
) -> Result<(), String> {
    let sequence = if repeats {
        with_repeats(generate(seed), seed)
    } else {
        generate(seed)
    };
    // Which repeats go whole anyway (about one in five).
    let coin = Rng(seed ^ 0x3c6e_f372_fe94_f82b);
    compare(
        &sequence,
        &format!("seed {seed:#x}"),
        coin,
        batched,
        alone,
        script,
    )
    .await
}

/// Runs `sequence` on both servers, each batch as one EVALSHA on `batched` (its repeats sent
/// short, but those `coin` keeps whole) and check by check on `alone`; the first difference in
/// a reply or a key, named by `name`.
async fn compare(
    sequence: &Sequence,
    name: &str,
    mut coin: Rng,
    batched: &Client,
    alone: &Client,
    script: &Script,
) -> Result<(), String> {
    for client in [batched, alone] {
        let _: () = client.flushall(false).await.unwrap();
    }
    for (b, (blocks, checks)) in sequence.batches.iter().enumerate() {
        for (key, set) in blocks {
            for client in [batched, alone] {
                if *set {
                    let expiry = Some(fred::types::Expiration::EX(600));
                    let _: () = client
                        .set(key.as_str(), "1", expiry, None, false)
                        .await
                        .unwrap();
                } else {
                    let _: i64 = client.del(key.as_str()).await.unwrap();
                }
            }
        }
        let (keys, args) = short_form(checks, || coin.percent(20));
        let together = run_as(batched, script, checks, keys, args).await;
        let mut one_by_one = Vec::new();
        for check in checks {
            one_by_one.extend(run(alone, script, std::slice::from_ref(check)).await);
        }
        for (i, (t, o)) in together.iter().zip(&one_by_one).enumerate() {
            if t != o && !same_block(t, o) {
                return Err(format!(
                    "{name}, batch {b}, check {i} of {}: batched {t:?}, alone {o:?}\nthe batch: {checks:#?}",
                    checks.len()
                ));
            }
        }
        let (s1, s2) = (state(batched).await, state(alone).await);
        for ((key, m1, t1), (_, m2, t2)) in s1.iter().zip(&s2) {
            if m1 != m2 {
                return Err(format!(
                    "{name}, after batch {b}: key {key}: batched {m1:?}, alone {m2:?}\nthe batch: {checks:#?}"
                ));
            }
            // Both with an expiry (or no key), and about the same one.
            if *t1 == -1 || *t2 == -1 || (*t1 < 0) != (*t2 < 0) || (t1 - t2).abs() > 20 {
                return Err(format!(
                    "{name}, after batch {b}: key {key}: expiry (10 ms) batched {t1}, alone {t2}"
                ));
            }
        }
    }
    Ok(())
}

/// Two answers of a block that differ only in its time left (ms), by less than the moments at
/// which the two servers ran.
fn same_block(a: &[String], b: &[String]) -> bool {
    let ms = |r: &[String]| r.get(4).and_then(|m| m.parse::<i64>().ok());
    a.len() == 5
        && a[0] == "2"
        && a[..4] == b[..4]
        && matches!((ms(a), ms(b)), (Some(x), Some(y)) if (x - y).abs() < 2_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_and_writes_what_its_checks_alone_would() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (batched, alone) = (client(&a).await, client(&b).await);
    let script = Script::from_lua(SOURCE);
    let seeds: Vec<u64> = match env_u64("BATCH_SEED") {
        Some(seed) => vec![seed],
        None => {
            let base = common::wall_clock().as_nanos() as u64;
            let n = env_u64("BATCH_SEQUENCES").unwrap_or(40);
            // Seeds that once found a fault a random run meets rarely, then fresh ones.
            let found = [
                // A shared key emptied in its batch's picture, then a member recorded more than
                // a window behind its trim not yet sent.
                0x18ed_d6df_474e_dde5,
            ];
            let fresh = (0..n).map(|i| base.wrapping_add(i.wrapping_mul(0x9E37_79B9)));
            found.into_iter().chain(fresh).collect()
        }
    };
    for seed in seeds {
        // Each sequence as generated, then with repeats (checks the limiter sends short).
        for repeats in [false, true] {
            if let Err(failure) = replay(seed, repeats, &batched, &alone, &script).await {
                panic!(
                    "{failure}\n(repeats: {repeats}; replay: BATCH_SEED={seed:#x} cargo test --test redis_batch)"
                );
            }
        }
    }
}

/// One whole check of unit cost at `now` (window `window`, no block keys) on `tiers` (key,
/// limit).
fn check_at(now: u64, window: u64, tiers: &[(&str, u64)]) -> Check {
    let mut args = vec![
        now.to_string(),
        window.to_string(),
        "1".to_owned(),
        tiers.len().to_string(),
        "0".to_owned(),
    ];
    args.extend(tiers.iter().map(|t| t.1.to_string()));
    Check {
        keys: tiers.iter().map(|t| t.0.to_owned()).collect(),
        args,
    }
}

/// The coins the fixed sequences run with: their repeats sent short, or, as each coin picks,
/// some of them whole.
const COINS: [u64; 3] = [1, 2, 3];

/// Runs a fixed `sequence` on two servers of its own, as `compare` does, its repeats sent as
/// `coin` picks; the batched server, holding the run's keys.
async fn compare_fixed(sequence: &Sequence, coin: u64) -> (RedisServer, Client) {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (batched, alone) = (client(&a).await, client(&b).await);
    let script = Script::from_lua(SOURCE);
    let name = format!("coin {coin}");
    if let Err(failure) = compare(sequence, &name, Rng(coin), &batched, &alone, &script).await {
        panic!("{failure}");
    }
    (a, batched)
}

/// The time and window of the fixed sequences: today, in microseconds, and 10 s.
const T: u64 = 1_700_000_000_000_000;
const W: u64 = 10_000_000;

/// A check more than a window ahead of the others trims a shared key's picture empty, and a
/// later tier then denies it (so it records nothing, and its trim waits in the picture). The
/// next check, back at the earlier time, must be recorded after that trim, as it is alone, and
/// not held back before it: the shortcut the batch takes for a member at the time of the last
/// one it held back, or later (the tests it made for that one hold for the next), must still
/// test the trim the picture has not sent. A random sequence meets this seldom; without that
/// test, the member was held back and then trimmed with the others, and the key left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trim_by_a_denied_check_ends_the_batch_shortcut_for_one_microsecond() {
    let (t, w) = (T, W);
    let (e, ahead) = (ENDPOINTS[0], t + 3 * w);
    let sequence = Sequence {
        batches: vec![
            // The global tier, limit 1, full at the later time.
            (Vec::new(), vec![check_at(ahead, w, &[(GLOBAL, 1)])]),
            (
                Vec::new(),
                vec![
                    check_at(t, w, &[(e, 100)]),
                    check_at(t, w, &[(e, 100)]),
                    check_at(ahead, w, &[(e, 100), (GLOBAL, 1)]),
                    check_at(t, w, &[(e, 100)]),
                    check_at(t, w, &[(e, 100)]),
                ],
            ),
        ],
    };
    for coin in COINS {
        let (_server, batched) = compare_fixed(&sequence, coin).await;
        // What happened, as the test means it: the later check denied (the global tier keeps
        // its one entry) after trimming the key, and the two checks after it recorded.
        let members: Vec<(String, f64)> = batched
            .zrange(e, 0, -1, None, false, None, true)
            .await
            .unwrap();
        assert_eq!(members.len(), 2, "coin {coin}: {members:?}");
        let global: i64 = batched.zcard(GLOBAL).await.unwrap();
        assert_eq!(global, 1, "coin {coin}");
    }
}

/// Two members at one time in a shared key of more members than its picture reads, a check
/// a little behind (recorded in Redis at once, with what the picture held back), then two at
/// the first time again: the picture must still know that time's plain name is taken, and
/// name the next members with a '-k' suffix, as alone, rather than write that name twice
/// (which would lose an entry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_behind_between_members_at_one_time_keeps_their_names_taken() {
    let (t, w) = (T, W);
    let e = ENDPOINTS[0];
    // 80 members before t (a picture reads at most 67 of them).
    let earlier = (0..80).map(|i| check_at(t - 10_000 + i, w, &[(e, 1_000)]));
    let at_t = || check_at(t, w, &[(e, 1_000)]);
    let sequence = Sequence {
        batches: vec![
            (Vec::new(), earlier.collect()),
            (
                Vec::new(),
                vec![
                    at_t(),
                    at_t(),
                    check_at(t - 5, w, &[(e, 1_000)]),
                    at_t(),
                    at_t(),
                ],
            ),
        ],
    };
    for coin in COINS {
        let (_server, batched) = compare_fixed(&sequence, coin).await;
        let count: i64 = batched.zcard(e).await.unwrap();
        assert_eq!(count, 85, "coin {coin}: every check recorded, once");
    }
}

/// What an operator (or another program) may have left in the fifth check's user key, and
/// what the script's error then says.
enum Corruption {
    /// A string where a sorted set belongs.
    WrongType,
    /// A member the limiter did not write, at a score (µs relative to the batch's time).
    Member(&'static str, i64),
    /// A totals key (members of ours) whose newest member is not.
    TotalsThen(&'static str),
}

/// A check of a batch that meets an error (a key of the wrong type, or a member the limiter
/// cannot read, that an operator wrote) does not take the checks before it down with it: they
/// keep their answers and are recorded in every tier, with what the batch's pictures held back
/// for the shared keys; the failing check and the ones after it are answered as failed (the
/// store then falls back for them) and leave no entry. Before, the whole batch failed, and its
/// earlier checks stayed recorded in their user keys only (the shared keys' held-back members
/// were lost with the script's error); a member the script could not read raised a Lua error
/// ("attempt to compare number with nil") and did just that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_one_check_of_a_batch_keeps_the_checks_before_it_whole() {
    let cases = [
        (Corruption::WrongType, "WRONGTYPE"),
        // Plain-looking (a '-' after the first byte), from the future or in the window.
        (
            Corruption::Member("garbage-zz", 9_000_000_000_000_000),
            "cannot read",
        ),
        (Corruption::Member("garbage-zz", -10), "cannot read"),
        (Corruption::Member("12a-3", -10), "cannot read"),
        // No '-' at all: longer or shorter than the time's digits.
        (
            Corruption::Member("zzzzzzzzzzzzzzzzzzzzzz", 9_000_000_000_000_000),
            "cannot read",
        ),
        (Corruption::Member("abc", -10), "cannot read"),
        // Totals-looking (a ':' at byte 17) with no hex before it, or a cost that is not.
        (Corruption::Member("zzzzzzzzzzzzzzzz:1", -10), "cannot read"),
        (
            Corruption::Member("0000000000000001:zz", -10),
            "cannot read",
        ),
        // A total past what a double holds exactly.
        (Corruption::Member("ffffffffffffffff:1", -10), "cannot read"),
        (Corruption::TotalsThen("zzzzzzzzzzzzzzzz:1"), "cannot read"),
    ];
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    // Each case with its batch sent whole, then short (checks 2 to 8 repeat check 1 but for
    // their time and user, as the limiter sends them): the checks after the failed one must
    // be stepped over in either form.
    let forms = [false, true].map(|short| cases.iter().map(move |case| (case, short)));
    for (n, ((corruption, error), short)) in forms.into_iter().flatten().enumerate() {
        let _: () = client.flushall(false).await.unwrap();
        let now: u64 = 1_700_000_000_000_000 + n as u64 * 1_000_000_000;
        let user = |i: usize| format!("t:user:{i}");
        let at = |d: i64| now.checked_add_signed(d).unwrap() as f64;
        match corruption {
            Corruption::WrongType => {
                let _: () = client.set(user(5), "x", None, None, false).await.unwrap();
            }
            Corruption::Member(member, d) => {
                let _: () = client
                    .zadd(user(5), None, None, false, false, (at(*d), *member))
                    .await
                    .unwrap();
            }
            Corruption::TotalsThen(member) => {
                let ours = vec![(at(-20), "0000000000000001:1"), (at(-10), *member)];
                let _: () = client
                    .zadd(user(5), None, None, false, false, ours)
                    .await
                    .unwrap();
            }
        }
        // Eight checks of three tiers (a batch big enough for pictures of the shared keys);
        // the fifth one's user key is corrupt.
        let checks: Vec<Check> = (1..=8)
            .map(|i| Check {
                keys: vec![user(i), ENDPOINTS[0].to_owned(), GLOBAL.to_owned()],
                args: [now + i as u64, 60_000_000, 1, 3, 0, 10, 100, 1000]
                    .iter()
                    .map(u64::to_string)
                    .collect(),
            })
            .collect();
        // (A batch answers even when one of its checks fails, one reply per check: `run_as`
        // panics if it does not.)
        let (keys, args) = short_form(&checks, || !short);
        assert_eq!(args.len(), if short { 8 + 7 * 2 } else { 8 * 8 });
        let replies = run_as(&client, &script, &checks, keys, args).await;
        for (i, r) in replies.iter().enumerate() {
            if i < 4 {
                assert!(recorded(r), "case {n}: check {i} admitted: {r:?}");
            } else {
                assert_eq!(r[0], "3", "case {n}: check {i} failed: {r:?}");
                assert!(r[1].contains(error), "case {n}: check {i}: {r:?}");
            }
        }
        for key in [ENDPOINTS[0], GLOBAL] {
            let members: Vec<String> = client
                .zrange(key, 0, -1, None, false, None, false)
                .await
                .unwrap();
            let times: Vec<String> = (1..=4).map(|i| (now + i).to_string()).collect();
            assert_eq!(
                members, times,
                "case {n}: {key}: the four checks before the error"
            );
            let ttl: i64 = client.pttl(key).await.unwrap();
            assert!(ttl > 0, "case {n}: {key} keeps its expiry: {ttl}");
        }
        for i in [1, 2, 3, 4, 6, 7, 8] {
            let k: u64 = client.zcard(user(i)).await.unwrap();
            assert_eq!(k, u64::from(i < 5), "case {n}: {}", user(i));
        }
        // A batch of one check fails with the same error, and records nothing.
        let alone = &checks[4];
        let failed: Result<Vec<Value>, _> = script
            .evalsha_with_reload(&client, alone.keys.clone(), alone.args.clone())
            .await;
        assert!(
            failed.as_ref().is_err_and(|e| e.details().contains(error)),
            "case {n}: {failed:?}"
        );
        for key in [ENDPOINTS[0], GLOBAL] {
            let k: u64 = client.zcard(key).await.unwrap();
            assert_eq!(k, 4, "case {n}: {key}");
        }
    }
}

/// A member the limiter did not write that has left the window is trimmed like any other, in a
/// batch as alone: the check is answered, and the member gone. (A name that is not a time, even
/// one as long as the cutoff's digits and above them as a string, must not pass for one in the
/// window: a script that skipped the trim while the oldest name looked in the window, tried and
/// reverted in docs/BENCHMARKS.md section 19, needed this test to show it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_the_limiter_did_not_write_that_has_left_the_window_is_trimmed() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    let window: u64 = 60_000_000;
    let names = ["zzzzzzzzzzzzzzzz", "!!!!!!!!!!!!!!!!", "garbage-zz", "abc"];
    for (n, name) in names.into_iter().enumerate() {
        let now: u64 = 1_700_000_000_000_000 + n as u64 * 1_000_000_000;
        let user = |i: usize| format!("t:user:{i}");
        let checks: Vec<Check> = (1..=8)
            .map(|i| Check {
                keys: vec![user(i), ENDPOINTS[0].to_owned(), GLOBAL.to_owned()],
                args: [now + i as u64, window, 1, 3, 0, 10, 100, 1000]
                    .iter()
                    .map(u64::to_string)
                    .collect(),
            })
            .collect();
        for batched in [true, false] {
            let _: () = client.flushall(false).await.unwrap();
            let old = (now - 2 * window) as f64;
            let _: () = client
                .zadd(user(5), None, None, false, false, (old, name))
                .await
                .unwrap();
            let replies = if batched {
                run(&client, &script, &checks).await
            } else {
                let mut replies = Vec::new();
                for check in &checks {
                    replies.extend(run(&client, &script, std::slice::from_ref(check)).await);
                }
                replies
            };
            for (i, r) in replies.iter().enumerate() {
                assert!(recorded(r), "{name:?}, batched {batched}: check {i}: {r:?}");
            }
            let members: Vec<String> = client
                .zrange(user(5), 0, -1, None, false, None, false)
                .await
                .unwrap();
            assert_eq!(
                members,
                [(now + 5).to_string()],
                "{name:?}, batched {batched}"
            );
        }
    }
}

/// A member the limiter did not write in a key several checks of a batch share cannot make the
/// batch's picture of that key count wrong: the tier still admits no more than its limit.
/// (The picture reads the key's oldest members' names as times; before, a name of other
/// characters was compared as if it were one, and trimmed from the picture while Redis kept
/// it.) The checks that meet it fail with an error; none is admitted past the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_the_limiter_did_not_write_in_a_shared_key_never_admits_past_the_limit() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let script = Script::from_lua(SOURCE);
    // Names of the time's length (so that only the picture reads them) and others; the key's
    // oldest member, or behind two of the limiter's that the batch's checks trim (so that the
    // picture reaches it as it trims).
    let members = ["000000000000000a", "abc", "17000000000000zz", "-1"];
    let window: u64 = 60_000_000;
    for (n, (member, behind)) in members
        .iter()
        .flat_map(|m| [(m, false), (m, true)])
        .enumerate()
    {
        let _: () = client.flushall(false).await.unwrap();
        let now: u64 = 1_700_000_000_000_000 + n as u64 * 1_000_000_000;
        let limit = 5;
        let mut entries = vec![((now - 10) as f64, member.to_string())];
        if behind {
            for d in [1, 2] {
                let t = now - window + d;
                entries.push((t as f64, t.to_string()));
            }
        }
        let _: () = client
            .zadd(GLOBAL, None, None, false, false, entries)
            .await
            .unwrap();
        let checks: Vec<Check> = (1..=8)
            .map(|i| Check {
                keys: vec![format!("t:user:{i}"), GLOBAL.to_owned()],
                args: [now + i as u64, window, 1, 2, 0, 10, limit]
                    .iter()
                    .map(u64::to_string)
                    .collect(),
            })
            .collect();
        let replies = run(&client, &script, &checks).await;
        let in_global: u64 = client.zcard(GLOBAL).await.unwrap();
        assert!(
            in_global <= limit,
            "{member:?} (behind two: {behind}): the global tier holds {in_global} entries, over its limit {limit}: {replies:?}"
        );
    }
}
