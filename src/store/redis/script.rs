//! The Lua script (`script.lua`) and its arguments, in one place; its reply is read in
//! `reply.rs`.
//!
//! The script trims, counts and, only if every enforced tier has room, records the request in
//! every tier with room, atomically.

use std::ops::Range;

use super::super::{StoreRequest, TierCheck};
use crate::clock::saturating_micros;
use crate::config::TimeSource;

/// The script, run with EVALSHA (and reloaded on NOSCRIPT).
pub(super) const SOURCE: &str = include_str!("script.lua");

/// `ARGV[1]`: the limiter's `now` in microseconds, or empty for the script to read Redis `TIME`.
pub(super) fn now_arg(time_source: TimeSource, req: &StoreRequest<'_>) -> String {
    match time_source {
        TimeSource::App => saturating_micros(req.now).to_string(),
        TimeSource::Redis => String::new(),
    }
}

/// One check's part of the script's `ARGV` for `tiers` (the tiers whose keys are its `KEYS`, in
/// the same order, followed by `blocks` block keys): now, the window, the cost, the number of
/// tiers and of block keys, then one limit per tier.
pub(super) fn args(
    req: &StoreRequest<'_>,
    now: &str,
    tiers: &[TierCheck<'_>],
    blocks: usize,
) -> Vec<String> {
    // The script reads both numbers as one digit each (a request has at most three tiers).
    debug_assert!(tiers.len() < 10 && blocks < 10);
    let mut args = Vec::with_capacity(5 + tiers.len());
    args.push(now.to_owned());
    args.push(saturating_micros(req.window).to_string());
    args.push(req.cost.to_string());
    args.push(tiers.len().to_string());
    args.push(blocks.to_string());
    args.extend(tiers.iter().map(limit_arg));
    args
}

/// `check` (one check's arguments, see [`args`]) with `blocks` block keys instead.
pub(super) fn with_blocks(check: &[String], blocks: usize) -> Vec<String> {
    let mut args = check.to_vec();
    if let Some(b) = args.get_mut(4) {
        *b = blocks.to_string();
    }
    args
}

/// A batch's `KEYS` and `ARGV`, its checks added in order (see `script.lua`). A check that
/// repeats the last check sent whole in all but its time, its first tier's key and its first
/// block key (most checks of a batch: other users on the same route) is sent short: its time
/// and an empty string, its first tier's key and its first block key. Redis then reads 2
/// arguments and 1 or 2 keys for it instead of 5 + n arguments and n + b keys.
#[derive(Debug, Default)]
pub(super) struct BatchArgs {
    /// The script's `KEYS`.
    pub(super) keys: Vec<String>,
    /// The script's `ARGV`.
    pub(super) args: Vec<String>,
    /// Where the keys and the arguments of the last check sent whole are.
    whole: Option<(Range<usize>, Range<usize>)>,
}

impl BatchArgs {
    /// An empty batch with room for `keys` keys and `args` arguments.
    pub(super) fn with_capacity(keys: usize, args: usize) -> Self {
        Self {
            keys: Vec::with_capacity(keys),
            args: Vec::with_capacity(args),
            whole: None,
        }
    }

    /// Adds one check: its keys and arguments (see [`args`]).
    pub(super) fn push(&mut self, mut keys: Vec<String>, mut args: Vec<String>) {
        let tiers = args.len().saturating_sub(5);
        if tiers > 0 && self.repeats(&keys, &args, tiers) {
            // Short: the time and an empty string; the first tier's key, then the first block
            // key if there are block keys.
            args.truncate(1);
            args.push(String::new());
            if keys.len() > tiers {
                keys.swap(1, tiers);
                keys.truncate(2);
            } else {
                keys.truncate(1);
            }
        } else {
            self.whole = Some((
                self.keys.len()..self.keys.len() + keys.len(),
                self.args.len()..self.args.len() + args.len(),
            ));
        }
        self.keys.append(&mut keys);
        self.args.append(&mut args);
    }

    /// Whether a check of `tiers` tiers with `keys` and `args` repeats the last whole check but
    /// for its time (`args[0]`), its first tier's key (`keys[0]`) and its first block key
    /// (`keys[tiers]`).
    fn repeats(&self, keys: &[String], args: &[String], tiers: usize) -> bool {
        let Some((k, a)) = &self.whole else {
            return false;
        };
        let (whole_keys, whole_args) = (&self.keys[k.clone()], &self.args[a.clone()]);
        whole_args[1..] == args[1..]
            && whole_keys.len() == keys.len()
            && whole_keys[1..tiers] == keys[1..tiers]
            && (keys.len() == tiers || whole_keys[tiers + 1..] == keys[tiers + 1..])
    }
}

/// A tier's limit as the script takes it: negative for a shadow tier.
fn limit_arg(tier: &TierCheck<'_>) -> String {
    if tier.shadow {
        format!("-{}", tier.limit)
    } else {
        tier.limit.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tier::Tier;

    #[test]
    fn arguments_are_now_window_cost_tiers_blocks_then_one_limit_per_tier() {
        let mut global = TierCheck::new(Tier::Global, "", 9);
        global.shadow = true;
        let tiers = [TierCheck::new(Tier::User, "", 5), global];
        let req = StoreRequest {
            now: Duration::from_secs(2),
            window: Duration::from_millis(1500),
            cost: 3,
            tiers: &tiers,
        };
        assert_eq!(now_arg(TimeSource::App, &req), "2000000");
        assert_eq!(now_arg(TimeSource::Redis, &req), "");
        assert_eq!(
            args(&req, "7", &tiers, 1),
            ["7", "1500000", "3", "2", "1", "5", "-9"].map(String::from)
        );
        assert_eq!(args(&req, "", &tiers[1..], 0).len(), 6);
    }

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    /// A batch's checks read back from its `KEYS` and `ARGV` as `script.lua`'s header says:
    /// a check whose second argument is empty is short and repeats the last whole one but for
    /// its time, its first tier's key and (with block keys) its first block key.
    fn decode(keys: &[String], args: &[String]) -> Vec<(Vec<String>, Vec<String>)> {
        let (mut checks, mut a, mut k) = (Vec::new(), 0, 0);
        let mut whole: Option<(Vec<String>, Vec<String>)> = None;
        while a < args.len() {
            if args[a + 1].is_empty() {
                let (mut ks, mut xs) = whole.clone().expect("a short check after a whole one");
                let tiers: usize = xs[3].parse().unwrap();
                xs[0] = args[a].clone();
                ks[0] = keys[k].clone();
                k += 1;
                if ks.len() > tiers {
                    ks[tiers] = keys[k].clone();
                    k += 1;
                }
                checks.push((ks, xs));
                a += 2;
            } else {
                let tiers: usize = args[a + 3].parse().unwrap();
                let blocks: usize = args[a + 4].parse().unwrap();
                let check = (
                    keys[k..k + tiers + blocks].to_vec(),
                    args[a..a + 5 + tiers].to_vec(),
                );
                whole = Some(check.clone());
                checks.push(check);
                k += tiers + blocks;
                a += 5 + tiers;
            }
        }
        assert_eq!(k, keys.len(), "every key read once");
        checks
    }

    #[test]
    fn every_batch_reads_back_as_the_checks_put_in_it() {
        let mut next = crate::test_rng::seeded(0x5eed_ba7c);
        let mut short = 0;
        for _ in 0..5_000 {
            let mut batch = BatchArgs::default();
            let mut checks = Vec::new();
            for _ in 0..1 + next() % 12 {
                // 1 to 3 tiers (the global one last), block keys for the others or none, few
                // users, routes, windows, costs and limits, so that checks repeat often.
                let tiers = 1 + (next() % 3) as usize;
                let mut keys: Vec<String> = (0..tiers)
                    .map(|i| match (i + 3 - tiers, next() % 3) {
                        (0, u) => format!("u:{u}"),
                        (1, e) => format!("e:{}", e % 2),
                        _ => "g".to_owned(),
                    })
                    .collect();
                if next().is_multiple_of(2) {
                    let blocked: Vec<String> = keys[..tiers - usize::from(keys[tiers - 1] == "g")]
                        .iter()
                        // (The format allows any block key: not only one per tier's key.)
                        .map(|key| format!("{{{key}}}#b{}", next() % 4 / 3))
                        .collect();
                    keys.extend(blocked);
                }
                let now = match next() % 3 {
                    0 => String::new(),
                    n => (1_000 + n).to_string(),
                };
                let mut args = vec![
                    now,
                    ["1000000", "2000000"][(next().is_multiple_of(4)) as usize].to_owned(),
                    ["1", "2"][(next().is_multiple_of(5)) as usize].to_owned(),
                    tiers.to_string(),
                    (keys.len() - tiers).to_string(),
                ];
                args.extend(
                    (0..tiers).map(|_| ["5", "-5"][(next().is_multiple_of(6)) as usize].to_owned()),
                );
                batch.push(keys.clone(), args.clone());
                checks.push((keys, args));
            }
            short += checks.iter().map(|c| c.1.len()).sum::<usize>() - batch.args.len();
            assert_eq!(decode(&batch.keys, &batch.args), checks);
        }
        assert!(
            short > 5_000,
            "short checks were made: {short} empty arguments"
        );
    }

    #[test]
    fn a_check_that_repeats_the_last_whole_one_but_for_its_time_and_first_keys_is_sent_short() {
        let mut batch = BatchArgs::default();
        let whole = ["10", "1000", "1", "3", "2", "5", "6", "7"];
        let (a, a_block) = (["u:a", "e", "g", "{u:a}#b", "{e}#b"], "{u:a}#b");
        batch.push(strings(&a), strings(&whole));
        // Another user, the same route: short.
        batch.push(
            strings(&["u:b", "e", "g", "{u:b}#b", "{e}#b"]),
            strings(&["11", "1000", "1", "3", "2", "5", "6", "7"]),
        );
        // Another limit (an override, or a shadow tier): whole.
        batch.push(
            strings(&["u:c", "e", "g", "{u:c}#b", "{e}#b"]),
            strings(&["12", "1000", "1", "3", "2", "5", "6", "-7"]),
        );
        // Short again, as a repeat of the check just sent whole; the same user is no matter.
        batch.push(
            strings(&["u:c", "e", "g", "{u:c}#b", "{e}#b"]),
            strings(&["", "1000", "1", "3", "2", "5", "6", "-7"]),
        );
        // Another endpoint, another endpoint block key, another cost: whole each.
        for (keys, args) in [
            (
                ["u:d", "f", "g", "{u:d}#b", "{e}#b"],
                ["13", "1000", "1", "3", "2", "5", "6", "-7"],
            ),
            (
                ["u:d", "f", "g", "{u:d}#b", "{f}#b"],
                ["13", "1000", "1", "3", "2", "5", "6", "-7"],
            ),
            (
                ["u:d", "f", "g", "{u:d}#b", "{f}#b"],
                ["13", "1000", "2", "3", "2", "5", "6", "-7"],
            ),
        ] {
            batch.push(strings(&keys), strings(&args));
        }
        // Without block keys, and with one tier.
        batch.push(
            strings(&["u:e", "e", "g"]),
            strings(&["14", "1000", "1", "3", "0", "5", "6", "7"]),
        );
        batch.push(
            strings(&["u:f", "e", "g"]),
            strings(&["15", "1000", "1", "3", "0", "5", "6", "7"]),
        );
        batch.push(
            strings(&["g"]),
            strings(&["16", "1000", "1", "1", "0", "7"]),
        );
        batch.push(
            strings(&["g"]),
            strings(&["17", "1000", "1", "1", "0", "7"]),
        );
        let mut keys = strings(&a);
        keys.extend(strings(&["u:b", "{u:b}#b"]));
        keys.extend(strings(&[
            "u:c", "e", "g", "{u:c}#b", "{e}#b", "u:c", "{u:c}#b",
        ]));
        keys.extend(strings(&["u:d", "f", "g", "{u:d}#b", "{e}#b"]));
        for _ in 0..2 {
            keys.extend(strings(&["u:d", "f", "g", "{u:d}#b", "{f}#b"]));
        }
        keys.extend(strings(&["u:e", "e", "g", "u:f", "g", "g"]));
        assert_eq!(batch.keys, keys);
        let mut args = strings(&whole);
        args.extend(strings(&["11", ""]));
        args.extend(strings(&[
            "12", "1000", "1", "3", "2", "5", "6", "-7", "", "",
        ]));
        for (now, cost) in [("13", "1"), ("13", "1"), ("13", "2")] {
            args.extend(strings(&[now, "1000", cost, "3", "2", "5", "6", "-7"]));
        }
        args.extend(strings(&[
            "14", "1000", "1", "3", "0", "5", "6", "7", "15", "",
        ]));
        args.extend(strings(&["16", "1000", "1", "1", "0", "7", "17", ""]));
        assert_eq!(batch.args, args);
        assert_eq!(a_block, batch.keys[3]);
    }
}
