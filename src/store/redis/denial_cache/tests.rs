//! Unit tests of the denial cache: what it answers (only the same request, limits and window,
//! only while the key cannot change and the subscription is up), what it never keeps, and how a
//! full cache purges.

use super::*;

const MS: Duration = Duration::from_millis(1);

fn cost(cost: u64) -> Terms {
    Terms {
        cost,
        limit: 5,
        shadow: false,
        window: 1_000_000,
        others: 0,
    }
}

#[test]
fn a_denial_under_other_limits_or_window_is_not_answered() {
    let cache = DenialCache::default();
    cache.enable();
    cache.remember("k".into(), cost(1), 0, 8 * MS, 5 * MS);
    assert!(cache.get("k", cost(1), 0).is_some());
    let raised = Terms {
        limit: 50,
        ..cost(1)
    };
    let shadow = Terms {
        shadow: true,
        ..cost(1)
    };
    let shorter = Terms {
        window: 1_000,
        ..cost(1)
    };
    // An invalidation heard while a request was in flight: its denial is not remembered.
    let cache = DenialCache::default();
    cache.enable();
    let epoch = cache.epoch();
    cache.forget("other");
    cache.remember_since(epoch, "k".into(), cost(1), (0, 0), 8 * MS, 5 * MS);
    assert_eq!(cache.get("k", cost(1), 1), None);
    cache.remember_since(cache.epoch(), "k".into(), cost(1), (0, 0), 8 * MS, 5 * MS);
    assert!(cache.get("k", cost(1), 1).is_some());
    let other_route = Terms {
        others: 7,
        ..cost(1)
    };
    for terms in [raised, shadow, shorter, other_route] {
        assert_eq!(cache.get("k", terms, 0), None, "{terms:?}");
    }
}

#[test]
fn answers_only_the_same_cost_and_only_while_the_key_cannot_change() {
    let cache = DenialCache::default();
    cache.enable();
    // At t = 1000 µs: no room until 5 ms from now, cost 2 fits in 8 ms.
    cache.remember("k".into(), cost(2), 1_000, 8 * MS, 5 * MS);
    assert_eq!(cache.get("k", cost(2), 1_000), Some(8 * MS));
    assert_eq!(cache.get("k", cost(2), 3_000), Some(6 * MS));
    let known = |until, fits_by| Some(KnownFull { until, fits_by });
    assert_eq!(
        cache.full_until("k", (5, 1_000_000), 3_000, 2),
        known(6_000, 9_000),
        "full for every cost; cost 2 fits when Redis said"
    );
    assert_eq!(
        cache.full_until("k", (5, 1_000_000), 3_000, 1),
        known(6_000, 9_000),
        "a smaller cost fits no later"
    );
    assert_eq!(
        cache.full_until("k", (5, 1_000_000), 3_000, 3),
        known(6_000, 1_003_001),
        "a larger cost: by a window from now at the latest"
    );
    assert_eq!(
        cache.full_until("k", (6, 1_000_000), 3_000, 2),
        None,
        "not under another limit"
    );
    assert_eq!(
        cache.get("k", cost(1), 3_000),
        None,
        "another cost asks Redis"
    );
    assert_eq!(
        cache.get("k", cost(2), 6_000),
        None,
        "the oldest entry may have left"
    );
    assert_eq!(
        cache.get("k", cost(2), 3_000),
        None,
        "and the entry is gone"
    );
}

#[test]
fn a_full_cache_purges_only_when_an_eighth_of_it_can_go() {
    let cache = DenialCache::default();
    cache.enable();
    // Full: entry i cannot change until 1,000 + i µs.
    for i in 0..MAX_KEYS as u64 {
        let still = Duration::from_micros(1_000 + i);
        cache.remember(format!("k{i}"), cost(1), 0, still, still);
    }
    assert_eq!(cache.entries.len(), MAX_KEYS);
    // Nothing has ended: the purge frees nothing, and the new denial goes to Redis.
    cache.remember("new".into(), cost(1), 10, 8 * MS, 5 * MS);
    assert_eq!(cache.get("new", cost(1), 10), None);
    // One entry has ended, but no second purge runs until an eighth of them can go: the
    // full cache costs no scan per denial.
    let eighth = (MAX_KEYS / PURGE_SHARE) as u64;
    cache.remember("new".into(), cost(1), 1_001, 8 * MS, 5 * MS);
    assert_eq!(cache.entries.len(), MAX_KEYS);
    assert_eq!(cache.get("new", cost(1), 1_001), None);
    cache.remember("new".into(), cost(1), 1_000 + eighth - 1, 8 * MS, 5 * MS);
    assert_eq!(cache.entries.len(), MAX_KEYS);
    // Then one purge frees that eighth and one more (the entries up to 1,000 + eighth µs),
    // and the denial is remembered.
    let then = 1_000 + eighth;
    cache.remember("new".into(), cost(1), then, 8 * MS, 5 * MS);
    assert_eq!(cache.entries.len(), MAX_KEYS - eighth as usize);
    assert_eq!(cache.get("new", cost(1), then), Some(8 * MS));
}

#[test]
fn forgetting_everything_lets_the_next_full_cache_purge_at_once() {
    let cache = DenialCache::default();
    cache.enable();
    let hour = Duration::from_secs(3_600);
    for i in 0..=MAX_KEYS as u64 {
        cache.remember(format!("k{i}"), cost(1), 0, hour, hour);
    }
    // The purge at the one past the cap found nothing ended: none before an hour has gone.
    cache.forget_all();
    // Refilled with denials of a millisecond, all ended a second later.
    for i in 0..MAX_KEYS as u64 {
        cache.remember(format!("j{i}"), cost(1), 0, MS, MS);
    }
    let second = 1_000_000;
    cache.remember("new".into(), cost(1), second, 8 * MS, 5 * MS);
    assert_eq!(cache.get("new", cost(1), second), Some(8 * MS));
}

#[test]
fn a_tier_with_room_left_is_never_remembered() {
    let cache = DenialCache::default();
    cache.enable();
    cache.remember("k".into(), cost(3), 0, 8 * MS, Duration::ZERO);
    assert_eq!(cache.get("k", cost(3), 0), None);
}

#[test]
fn nothing_is_answered_without_the_subscription() {
    let cache = DenialCache::default();
    cache.remember("k".into(), cost(1), 0, 8 * MS, 5 * MS);
    assert_eq!(cache.get("k", cost(1), 0), None);
    cache.enable();
    cache.remember("k".into(), cost(1), 0, 8 * MS, 5 * MS);
    assert!(cache.get("k", cost(1), 0).is_some());
    cache.disable();
    assert_eq!(cache.get("k", cost(1), 0), None);
    cache.enable();
    assert_eq!(
        cache.get("k", cost(1), 0),
        None,
        "disabling forgot everything"
    );
    cache.remember("k".into(), cost(1), 0, 8 * MS, 5 * MS);
    cache.forget("k");
    assert_eq!(cache.get("k", cost(1), 0), None);
}

/// A closed store's cache stays off, whatever a listener still running does; and a cache
/// turned on again after a lost channel starts empty, refusing any denial asked before.
#[test]
fn closed_stays_off_and_a_cache_back_on_keeps_nothing_asked_before() {
    let cache = DenialCache::default();
    cache.enable();
    cache.close();
    cache.enable();
    cache.remember("k".into(), cost(1), 0, 8 * MS, 5 * MS);
    assert_eq!(cache.get("k", cost(1), 0), None, "closed");

    let cache = DenialCache::default();
    cache.enable();
    let asked = cache.epoch(); // a check sent before the channel was lost
    cache.disable();
    // Back: emptied, then on (as the listener does).
    cache.forget_all();
    cache.enable();
    cache.remember_since(asked, "k".into(), cost(1), (0, 0), 8 * MS, 5 * MS);
    assert_eq!(cache.get("k", cost(1), 0), None, "asked before it was back");
    let now_asked = cache.epoch();
    cache.remember_since(now_asked, "k".into(), cost(1), (0, 0), 8 * MS, 5 * MS);
    assert!(cache.get("k", cost(1), 0).is_some(), "asked after");
}

/// A denial Redis timed at some moment between sending and answering (its own clock): the key
/// is taken as unchanged from the earliest of those moments, and the wait as counted from the
/// latest, so the cache neither answers after the key may have changed nor tells a wait shorter
/// than Redis's; one whose `still` ended before the answer came is not remembered.
#[test]
fn a_denial_is_placed_within_its_round_trip_on_the_safe_side() {
    let cache = DenialCache::default();
    cache.enable();
    let us = |n: u64| Duration::from_micros(n);
    // Sent at 100, answered at 400: still 500 (until 600 at the latest), fits after 800
    // (1,200 at the latest).
    cache.remember_since(
        cache.epoch(),
        "k".into(),
        cost(1),
        (100, 400),
        us(800),
        us(500),
    );
    assert_eq!(cache.get("k", cost(1), 400), Some(us(800)));
    assert_eq!(cache.get("k", cost(1), 599), Some(us(601)));
    assert_eq!(cache.get("k", cost(1), 600), None);
    // Still 300 from a send at 100 ends at 400: by the answer, nothing is certain.
    cache.remember_since(
        cache.epoch(),
        "j".into(),
        cost(1),
        (100, 400),
        us(800),
        us(300),
    );
    assert_eq!(cache.get("j", cost(1), 400), None);
    cache.remember_since(
        cache.epoch(),
        "j".into(),
        cost(1),
        (100, 400),
        us(800),
        us(301),
    );
    assert_eq!(cache.get("j", cost(1), 400), Some(us(800)));
}
