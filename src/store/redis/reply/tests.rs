//! Unit tests of the script's reply: each case of `script.lua`'s reply read, and replies it
//! does not send refused.

use super::*;
use crate::tier::Tier;

fn tier(tier: Tier, limit: u64, shadow: bool) -> TierCheck<'static> {
    TierCheck {
        tier,
        id: "",
        limit,
        shadow,
    }
}

fn ints(values: &[i64]) -> Vec<Value> {
    values.iter().map(|&v| Value::Integer(v)).collect()
}

#[test]
fn an_admission_is_concluded_by_the_algorithm() {
    let tiers = [tier(Tier::User, 5, true), tier(Tier::Global, 9, false)];
    let window = Duration::from_secs(60);
    let req = StoreRequest {
        now: Duration::ZERO,
        window,
        cost: 1,
        tiers: &tiers,
    };
    // User (shadow) full: 5 of 5, oldest at 100, making room at 100; global 4 of 9.
    let mut reply = ints(&[1, 1_000]);
    reply.push(Value::from("0000000000000005:1"));
    reply.extend(ints(&[5, 100, 100, 4, 200, -1]));
    let parsed = Reply::parse(&reply).unwrap();
    // A plain key's oldest entry comes as its member's name: the same facts.
    let mut named = reply.clone();
    named[7] = Value::from("200");
    assert_eq!(Reply::parse(&named).unwrap(), parsed);
    assert_eq!(parsed.member.as_deref(), Some("0000000000000005:1"));
    let (outcome, still) =
        conclude(&tiers, &parsed.found, parsed.admitted, parsed.now, &req).unwrap();
    let wait = Duration::from_micros(60_000_000 + 1 + 100 - 1_000);
    assert_eq!(
        outcome,
        StoreOutcome::Admitted {
            remaining: 0,
            binding: Tier::User,
            resets_in: wait,
            shadow_denied: Some((Tier::User, wait)),
        }
    );
    assert_eq!(still, Duration::ZERO);
}

#[test]
fn a_denial_carries_how_long_the_tier_stays_full() {
    let tiers = [tier(Tier::User, 5, false), tier(Tier::Global, 9, false)];
    let req = StoreRequest {
        now: Duration::ZERO,
        window: Duration::from_micros(1_000),
        cost: 1,
        tiers: &tiers,
    };
    let mut reply = ints(&[0, 500]);
    reply.push(Value::from(""));
    reply.extend(ints(&[5, 40, 60]));
    let parsed = Reply::parse(&reply).unwrap();
    let (outcome, still) =
        conclude(&tiers, &parsed.found, parsed.admitted, parsed.now, &req).unwrap();
    assert_eq!(
        outcome,
        StoreOutcome::Denied {
            tier: Tier::User,
            retry_after: Duration::from_micros(60 + 1_000 + 1 - 500),
        }
    );
    assert_eq!(still, Duration::from_micros(40 + 1_000 + 1 - 500));
    // The script and the algorithm must agree: a denial the facts do not support is an error.
    let mut wrong = ints(&[0, 500]);
    wrong.push(Value::from(""));
    wrong.extend(ints(&[4, 40, -1]));
    let parsed = Reply::parse(&wrong).unwrap();
    assert!(conclude(&tiers, &parsed.found, parsed.admitted, parsed.now, &req).is_err());
}

#[test]
fn a_recording_with_no_tier_full_is_read_in_pairs() {
    // {4, now, member, count, oldest, ...}: the facts of a triple, with no expiry.
    let mut pairs = ints(&[4, 1_000]);
    pairs.push(Value::from("1000"));
    pairs.extend(ints(&[3]));
    pairs.push(Value::from("900"));
    pairs.extend(ints(&[7, -1]));
    let mut triples = ints(&[1, 1_000]);
    triples.push(Value::from("1000"));
    triples.extend(ints(&[3]));
    triples.push(Value::from("900"));
    triples.extend(ints(&[-1, 7, -1, -1]));
    let parsed = Reply::parse(&pairs).unwrap();
    assert_eq!(parsed, Reply::parse(&triples).unwrap());
    assert!(parsed.admitted);
    assert_eq!(parsed.found.len(), 2);
    assert_eq!(parsed.found[0].oldest, Some(900));
    // Pairs only for a recording, and whole: a denial or a pair cut short is an error.
    for bad in [
        &[4, 1_000, 0, 3, 900, 7][..],
        &[4, 1_000, 0][..],
        &[0, 1_000, 0, 3, 900][..],
        &[5, 1_000, 0, 3, 900][..],
    ] {
        assert!(Reply::parse(&ints(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn a_block_is_read_as_its_tier_and_time_left() {
    let mut reply = ints(&[2, 500]);
    reply.push(Value::from(""));
    reply.extend(ints(&[2, 30_000]));
    let parsed = Reply::parse(&reply).unwrap();
    assert_eq!(parsed.blocked, Some((1, 30_000)));
    assert!(!parsed.admitted && parsed.found.is_empty());
    for bad in [
        &[2, 500, 0, 0, 5][..],
        &[2, 500, 0, 1][..],
        &[2, 500, 0, 1, -3][..],
    ] {
        assert!(Reply::parse(&ints(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn an_oldest_name_of_other_characters_is_an_error_naming_its_tier() {
    let mut reply = ints(&[1, 500]);
    reply.push(Value::from("500"));
    reply.extend(ints(&[0, -1, -1, 3]));
    reply.push(Value::from("000000000000000a"));
    reply.extend(ints(&[-1]));
    let error = Reply::parse(&reply).unwrap_err().to_string();
    assert!(
        error.contains("cannot read a member of the key of tier 2"),
        "{error}"
    );
    for name in [
        "+000000000000400",
        "0000000000000400",
        "-000000000000400",
        "",
    ] {
        reply[7] = Value::from(name);
        assert!(Reply::parse(&reply).is_err(), "{name:?}");
    }
    reply[7] = Value::from("400");
    assert_eq!(Reply::parse(&reply).unwrap().found[1].oldest, Some(400));
    reply[7] = Value::from(400);
    assert_eq!(Reply::parse(&reply).unwrap().found[1].oldest, Some(400));
}

#[test]
fn a_failed_check_of_a_batch_is_sorted_as_the_same_error_alone() {
    let failed = |message: &str| {
        check_reply(Value::Array(vec![Value::from(3), Value::from(message)])).unwrap_err()
    };
    let error = failed("NOPERM User limiter has no permissions to run 'zremrangebyscore'");
    assert!(matches!(
        crate::ConnectError::from_error(&error, false, Duration::from_secs(1)),
        crate::ConnectError::NoPermission { .. }
    ));
    let error = failed("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");
    assert!(matches!(
        crate::ConnectError::from_error(&error, false, Duration::from_secs(1)),
        crate::ConnectError::Other { .. }
    ));
}

#[test]
fn anything_else_is_an_error() {
    for reply in [
        ints(&[]),
        ints(&[1, 5]),
        ints(&[1, 5, 0, 1]),
        ints(&[2, 5, 0, 1, 2, 3]),
        ints(&[1, -5, 0, 1, 2, 3]),
    ] {
        assert!(Reply::parse(&reply).is_err(), "{reply:?}");
    }
}
