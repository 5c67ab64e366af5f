//! Random sequences of steps, aimed at the edges (see the file's docs in `tests/model.rs`).

use super::*;

/// A random sequence, generated against the model (so that clock steps can aim at the times
/// it predicts: a denial's retry time, an entry's expiry).
pub(super) fn generate(seed: u64, len: usize) -> (Scenario, Vec<Step>) {
    let mut rng = Rng(seed);
    let sc = Scenario::random(&mut rng);
    let mut model = Model::new(&sc);
    let w = sc.window;
    let mut now = sc.start;
    // The absolute time a recent denial (or shadow denial) said room comes.
    let mut room_at: Option<u64> = None;
    let limits = sc.limits();
    let mut steps = Vec::with_capacity(len);
    // The last few checks ((user, route), cost), which clients tend to repeat.
    let mut recent: Vec<((usize, usize), u64)> = Vec::new();
    // Steps a pattern has queued (a client retrying a denied request while others go on).
    let mut queued: std::collections::VecDeque<Step> = Default::default();
    while steps.len() < len {
        let roll = rng.below(100);
        let step = if let Some(step) = queued.pop_front() {
            step
        } else if roll < 3 {
            Step::ResetUser {
                user: rng.below(IDS as u64) as usize,
            }
        } else if roll < 4 {
            Step::ResetEndpoint {
                route: rng.below(NAMED_ROUTES as u64) as usize,
            }
        } else if roll < 7 {
            let of = if rng.percent(60) {
                Blocked::User(rng.below(IDS as u64) as usize)
            } else {
                Blocked::Route(rng.below(NAMED_ROUTES as u64) as usize)
            };
            if roll < 6 {
                Step::Block { of }
            } else {
                Step::Unblock { of }
            }
        } else if roll < 38 {
            let ahead = |at: u64| at.checked_sub(now).filter(|&d| d > 0);
            let (by, why) = match rng.below(14) {
                0 => (0, "0"),
                1 => (1, "1µs"),
                2 => (w - 1, "W-1µs"),
                3 => (w, "W"),
                4 => (w + 1, "W+1µs"),
                5 | 6 => match room_at.and_then(ahead) {
                    Some(d) => (d, "to retry_after"),
                    None => (rng.below(w / 4), "random"),
                },
                7 => match room_at.and_then(|t| ahead(t - 1)) {
                    Some(d) => (d, "to retry_after-1µs"),
                    None => (1, "1µs"),
                },
                8 | 9 => {
                    let live = model.live_entries(now);
                    if live.is_empty() {
                        (rng.below(w), "random")
                    } else {
                        let t = rng.pick(&live);
                        if rng.percent(50) {
                            (t + w - now, "to an entry's last counted µs")
                        } else {
                            (t + w + 1 - now, "past an entry's window")
                        }
                    }
                }
                10 => (w * rng.range(2, 5), "several windows"),
                11 => (rng.below(w / 4), "random"),
                12 => (rng.below(w), "random"),
                _ => (rng.range(1, 2_000), "a few µs"),
            };
            Step::Advance { by, why }
        } else {
            let mut cost = match rng.below(100) {
                0..=64 => 1,
                65..=66 => 0,
                67..=88 => {
                    let limit = rng.pick(&limits);
                    rng.range(2, limit.max(2))
                }
                _ => rng.pick(&limits) + rng.range(1, 2),
            };
            let mut user = rng.below(USERS.len() as u64) as usize;
            let mut route = rng.below(ROUTES.len() as u64) as usize;
            match (recent.last().copied(), rng.below(100)) {
                // A client retrying: one of the last few checks again, exactly.
                (Some(_), 0..=24) => ((user, route), cost) = rng.pick(&recent),
                // The same client again, on its last route or another, at another cost.
                (Some(((u, r), _)), 25..=44) => {
                    user = u;
                    if rng.percent(60) {
                        route = r;
                    }
                }
                _ => {}
            }
            recent.push(((user, route), cost));
            if recent.len() > 4 {
                recent.remove(0);
            }
            Step::Check { user, route, cost }
        };
        match step {
            Step::Advance { by, .. } => now += by,
            Step::ResetUser { user } => model.reset_user(user),
            Step::ResetEndpoint { route } => model.reset_endpoint(route),
            Step::Block { of } => model.block(now, of),
            Step::Unblock { of } => model.unblock(of),
            Step::Check { user, route, cost } => {
                let d = model.check(now, user, route, cost);
                // (A block's end is not aimed at: Redis counts it on its own clock.)
                if !d.retry_after.is_zero() && !d.cost_exceeds_limit && !d.by_block {
                    room_at = Some(now + d.retry_after.as_micros() as u64);
                }
                if !d.allowed && queued.is_empty() && rng.percent(60) {
                    // The client retries a little later, while the same user (or another one on
                    // the same route) gets a cheaper request through.
                    if rng.percent(70) {
                        let by = match rng.below(3) {
                            0 => rng.range(1, 2_000),
                            _ => rng.range(1, w / 4),
                        };
                        queued.push_back(Step::Advance {
                            by,
                            why: "a little",
                        });
                    }
                    if rng.percent(75) {
                        let other = if rng.percent(30) {
                            rng.below(USERS.len() as u64) as usize
                        } else {
                            user
                        };
                        let cheaper = rng.range(1, cost.saturating_sub(1).max(1));
                        let cheaper = Step::Check {
                            user: other,
                            route,
                            cost: cheaper,
                        };
                        queued.push_back(cheaper);
                    }
                    queued.push_back(step);
                }
            }
        }
        steps.push(step);
    }
    (sc, steps)
}
