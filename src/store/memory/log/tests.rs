//! Unit tests of one key's log (`log.rs`).

use super::*;

/// The log against a plain list of request times (one per request, any number per µs),
/// on seeded sequences that put many requests in one microsecond, with costs now and then.
#[test]
fn requests_of_one_microsecond_share_an_entry_and_count_as_many() {
    let mut next = crate::test_rng::seeded(0x5eed);
    for round in 0..200 {
        let mut log = Log::default();
        // Each request's time and units, oldest first.
        let mut model: VecDeque<(u64, u64)> = VecDeque::new();
        let mut now = 1_000_000;
        let window = 50;
        for step in 0..400 {
            now += next() % 3;
            let cutoff = now - window;
            while model.front().is_some_and(|&(t, _)| t < cutoff) {
                model.pop_front();
            }
            let t = TierCheck::new(crate::tier::Tier::User, "u", u64::MAX);
            let facts = log.facts(&t, cutoff);
            let units: u64 = model.iter().map(|&(_, u)| u).sum();
            assert_eq!(facts.count, units, "round {round} step {step}");
            assert_eq!(facts.oldest, model.front().map(|&(t, _)| t));
            assert_eq!(log.requests(), model.len());
            if units > 0 {
                let want = 1 + next() % units;
                let mut acc = 0;
                let expected = model.iter().find(|&&(_, u)| {
                    acc += u;
                    acc >= want
                });
                assert_eq!(log.expiry_of(want), expected.map(|&(t, _)| t));
            }
            let live_at = cutoff + next() % 5;
            let live: u64 = model
                .iter()
                .filter(|&&(t, _)| t >= live_at)
                .map(|&(_, u)| u)
                .sum();
            assert_eq!(log.live(live_at).0, live, "round {round} step {step}");
            let cost = if round % 4 == 0 && next().is_multiple_of(50) {
                3
            } else {
                1
            };
            log.record_at_least(now, cost);
            model.push_back((now, cost));
        }
    }
}

#[test]
fn an_entry_stands_for_at_most_its_field_and_then_a_new_one_starts() {
    let mut log = Log::default();
    for _ in 0..MAX_MORE + 3 {
        log.record_at_least(7, 1);
    }
    assert_eq!(log.requests() as u64, MAX_MORE + 3);
    assert_eq!(log.entries.len(), 2);
    let t = TierCheck::new(crate::tier::Tier::User, "u", u64::MAX);
    assert_eq!(log.facts(&t, 7).count, MAX_MORE + 3);
    assert_eq!(log.facts(&t, 8).count, 0);
}

#[test]
fn a_clock_past_the_year_2112_stops_there_and_fails_closed() {
    let mut log = Log::default();
    log.record_at_least(u64::MAX, 1);
    log.record_at_least(u64::MAX - 5, 1);
    let t = TierCheck::new(crate::tier::Tier::User, "u", u64::MAX);
    // Both at the last time it counts; never expired by a later cutoff there.
    assert_eq!(log.facts(&t, TIME).count, 2);
    assert_eq!(log.newest(), Some(TIME));
}
