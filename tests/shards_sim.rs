//! The shard simulator's reduced run (`examples/shard_sim`, the crate's own shard logic against
//! exact modelled logs): never over the limit in any window, and at most 1% wrongly denied,
//! for 4 and 16 shards, 10 and 100 instances, Poisson, bursty and skewed demand from 0.5x to
//! 3x the limit. The plain design (one try, no cache) is run too, to show the measure catches
//! what the walk avoids.

#[path = "../examples/shard_sim/sim.rs"]
mod sim;

use sim::{Params, Pattern};

/// The full run's ratio of limit to window (10,000 a minute), at a tenth of its size.
fn params(shards: usize, instances: usize, demand: f64, pattern: Pattern) -> Params {
    Params {
        limit: 1_000,
        window: 6_000_000,
        shards,
        instances,
        demand,
        pattern,
        max_cost: 1,
        windows: 3,
        tries: shards,
        cache: true,
        split: true,
        rtt: 500,
        seed: 14 + shards as u64 * 1_000 + instances as u64,
    }
}

#[test]
fn never_over_and_at_most_one_percent_wrongly_denied() {
    for shards in [4, 16] {
        for instances in [10, 100] {
            for demand in [0.5, 1.0, 2.0, 3.0] {
                for pattern in Pattern::ALL {
                    let p = params(shards, instances, demand, pattern);
                    let o = sim::run(&p);
                    let at = format!("S {shards}, {instances} instances, {demand}x, {pattern:?}");
                    assert!(o.max_live <= p.limit, "over the limit at {at}: {o:?}");
                    assert!(o.wrong_fraction() <= 0.01, "wrongly denied at {at}: {o:?}");
                    assert!(o.requests > 1_000, "{at}: {o:?}");
                    if demand >= 2.0 {
                        // Saturated: the last window is (almost) full.
                        assert!(o.last_window_fill >= 0.99, "short at {at}: {o:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn costs_never_go_over_the_limit_and_are_split_rather_than_stranded() {
    for shards in [4, 16] {
        for demand in [1.0, 3.0] {
            let p = Params {
                max_cost: 4,
                ..params(shards, 10, demand, Pattern::Bursty)
            };
            let o = sim::run(&p);
            let at = format!("S {shards} {demand}x");
            assert!(o.max_live <= p.limit, "{at}: {o:?}");
            assert!(o.wrong_fraction() <= 0.01, "{at}: {o:?}");
            // Without the split, fixed caps strand room that costs above 1 cannot use.
            let unsplit = sim::run(&Params { split: false, ..p });
            assert!(unsplit.max_live <= p.limit);
            assert!(
                unsplit.wrongly_denied > o.wrongly_denied,
                "{at}: {unsplit:?} {o:?}"
            );
        }
    }
}

#[test]
fn the_plain_design_is_measurably_worse() {
    let p = Params {
        tries: 1,
        cache: false,
        split: false,
        ..params(16, 10, 1.5, Pattern::Poisson)
    };
    let plain = sim::run(&p);
    assert!(plain.max_live <= p.limit);
    assert!(plain.wrong_fraction() > 0.01, "{plain:?}");
}
