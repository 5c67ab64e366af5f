//! The shard simulator's engine: the crate's own shard logic (`tiered_ratelimit::shards`:
//! layout, caps, rotation, the attempt's walk, the full-until rule) against modelled shards,
//! exact sliding logs in memory, one per key, as the Redis script keeps them. Deterministic:
//! a seeded generator, no clock, no threads. Shared by `examples/shard_sim` and
//! `tests/shards_sim.rs`.
//!
//! A request's `k`-th try runs `k` round trips (`rtt`) after its arrival, so a shard it saw
//! full may free before its walk ends (requests are still taken one at a time, in arrival
//! order; an entry is recorded at `max(time, newest entry)`, as the script does). It is
//! *wrongly denied* when it was denied while the shards together held fewer than
//! `limit - cost + 1` units at the end of its walk: one exact log with the same history would
//! have admitted it.

#![allow(dead_code)] // each of the two users reads a different part

use std::collections::{BTreeMap, VecDeque};

use tiered_ratelimit::shards::{full_until, Attempt, KnownFull, Rotation, ShardLayout};

/// How requests arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Poisson arrivals, spread evenly over the instances.
    Poisson,
    /// Poisson with bursts: in every fifth of a window, the first fifth runs at 3x the mean
    /// rate and the rest at 1/2 (the mean is unchanged), evenly over the instances.
    Bursty,
    /// Poisson, skewed over the instances: instance `i` gets a share proportional to
    /// `1 / (i + 1)` (Zipf).
    Skewed,
}

impl Pattern {
    /// Every pattern.
    pub const ALL: [Pattern; 3] = [Pattern::Poisson, Pattern::Bursty, Pattern::Skewed];

    /// A short name for the tables.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Poisson => "poisson",
            Pattern::Bursty => "bursty",
            Pattern::Skewed => "skewed",
        }
    }
}

/// One simulation's setting.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// The global limit (units per window).
    pub limit: u64,
    /// The window (µs).
    pub window: u64,
    /// `global_shards`.
    pub shards: usize,
    /// App instances (each with its own rotation and full-until cache).
    pub instances: usize,
    /// Units demanded per window, as a multiple of the limit.
    pub demand: f64,
    /// How requests arrive.
    pub pattern: Pattern,
    /// Costs are uniform in `1..=max_cost`.
    pub max_cost: u64,
    /// How long the run lasts, in windows.
    pub windows: u64,
    /// At most this many shards tried per request (the store tries them all).
    pub tries: usize,
    /// Whether instances skip the shards they know are full (the store does).
    pub cache: bool,
    /// Whether a cost no shard fits whole is split over the rooms seen (the store does).
    pub split: bool,
    /// One round trip to a shard (µs): the time between two tries of one request.
    pub rtt: u64,
    /// The generator's seed.
    pub seed: u64,
}

/// What one simulation counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// Requests made.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied although the shards together had room for them.
    pub wrongly_denied: u64,
    /// Scripts run (one per shard tried).
    pub calls: u64,
    /// The most units live in any window, over all shards (never above the limit).
    pub max_live: u64,
    /// Units admitted in the last window of the run, over the limit.
    pub last_window_fill: f64,
}

impl Outcome {
    /// Admitted, as a fraction of the requests.
    pub fn admitted_fraction(&self) -> f64 {
        self.admitted as f64 / self.requests.max(1) as f64
    }

    /// Wrongly denied, as a fraction of the requests.
    pub fn wrong_fraction(&self) -> f64 {
        self.wrongly_denied as f64 / self.requests.max(1) as f64
    }

    /// Scripts run per request.
    pub fn calls_per_request(&self) -> f64 {
        self.calls as f64 / self.requests.max(1) as f64
    }
}

/// A seeded generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential wait at `rate` (per µs).
    fn exp(&mut self, rate: f64) -> f64 {
        -(1.0 - self.unit()).ln() / rate
    }
}

/// One key's exact sliding log: an entry at `t` counts while `t >= now - window`.
#[derive(Default)]
struct Log {
    entries: VecDeque<(u64, u64)>,
    count: u64,
}

impl Log {
    fn trim(&mut self, now: u64, window: u64) {
        while let Some(&(t, cost)) = self.entries.front() {
            if t.saturating_add(window) >= now {
                break;
            }
            self.entries.pop_front();
            self.count -= cost;
        }
    }

    fn record(&mut self, now: u64, cost: u64) {
        let at = self.entries.back().map_or(now, |&(t, _)| t.max(now));
        self.entries.push_back((at, cost));
        self.count += cost;
    }

    /// When a request of `cost` fits under `cap` (µs), as the script's facts give it.
    fn fits_at(&self, now: u64, window: u64, cost: u64, cap: u64) -> u64 {
        if cost > cap {
            return now + window;
        }
        let mut need = (self.count + cost).saturating_sub(cap);
        for &(t, c) in &self.entries {
            if c >= need {
                return t + window + 1;
            }
            need -= c;
        }
        now
    }
}

/// Every admission over all shards, at the time its shard recorded it (not in order).
#[derive(Default)]
struct All {
    entries: BTreeMap<u64, u64>,
    count: u64,
}

impl All {
    fn trim(&mut self, now: u64, window: u64) {
        let cutoff = now.saturating_sub(window);
        while let Some(entry) = self.entries.first_entry() {
            if *entry.key() >= cutoff {
                break;
            }
            self.count -= entry.remove();
        }
    }

    fn record(&mut self, at: u64, cost: u64) {
        *self.entries.entry(at).or_default() += cost;
        self.count += cost;
    }
}

struct Instance {
    rotation: Rotation,
    full: Vec<u64>,
}

/// Runs one simulation.
pub fn run(p: &Params) -> Outcome {
    let mut rng = Rng(p.seed);
    let layout = ShardLayout::new(p.shards);
    let n = layout.used(p.limit);
    let mut shards: Vec<Log> = (0..n).map(|_| Log::default()).collect();
    let mut all = All::default(); // every admission, to check the limit over all shards
    let mut instances: Vec<Instance> = (0..p.instances)
        .map(|_| Instance {
            rotation: Rotation::new(rng.next()),
            full: vec![0; n],
        })
        .collect();
    let weights: Vec<f64> = (0..p.instances)
        .map(|i| match p.pattern {
            Pattern::Skewed => 1.0 / (i + 1) as f64,
            _ => 1.0,
        })
        .collect();
    let total_weight: f64 = weights.iter().sum();
    let mean_cost = (p.max_cost + 1) as f64 / 2.0;
    let rate = p.demand * p.limit as f64 / mean_cost / p.window as f64; // requests per µs
    let peak = if p.pattern == Pattern::Bursty {
        3.0 * rate
    } else {
        rate
    };
    let end = p.windows * p.window;
    let mut out = Outcome::default();
    let mut t = 0.0f64;
    loop {
        t += rng.exp(peak);
        let now = t as u64;
        if now >= end {
            break;
        }
        if p.pattern == Pattern::Bursty {
            let phase = now % (p.window / 5).max(1);
            let here = if phase * 5 < p.window / 5 {
                3.0 * rate
            } else {
                rate / 2.0
            };
            if rng.unit() >= here / peak {
                continue;
            }
        }
        let mut pick = rng.unit() * total_weight;
        let who = weights.iter().position(|&w| {
            pick -= w;
            pick < 0.0
        });
        let instance = &mut instances[who.unwrap_or(p.instances - 1)];
        let cost = 1 + rng.next() % p.max_cost;
        out.requests += 1;
        let calls = out.calls;
        let recorded = decide(p, &layout, &mut shards, instance, now, cost, &mut out.calls);
        // The walk ended at its last try.
        let now = now + (out.calls - calls).saturating_sub(1) * p.rtt;
        all.trim(now, p.window);
        if let Some(parts) = recorded {
            out.admitted += 1;
            for (at, units) in parts {
                all.record(at, units);
            }
            out.max_live = out.max_live.max(all.count);
            if now + p.window >= end {
                out.last_window_fill += cost as f64 / p.limit as f64;
            }
        } else if all.count + cost <= p.limit {
            out.wrongly_denied += 1;
        }
    }
    out
}

/// One request through the crate's shard logic, as the cluster store walks it: where it was
/// recorded (the time and units of each entry: several when split), if admitted.
fn decide(
    p: &Params,
    layout: &ShardLayout,
    shards: &mut [Log],
    instance: &mut Instance,
    now: u64,
    cost: u64,
    calls: &mut u64,
) -> Option<Vec<(u64, u64)>> {
    let n = shards.len();
    let start = instance.rotation.start(n);
    // (The simulator counts admissions, not waits: a shard's wait is taken as its `until`.)
    let known = |i: usize| {
        let until = p.cache.then(|| instance.full[i]).filter(|&t| t > 0)?;
        Some(KnownFull {
            until,
            fits_by: until,
        })
    };
    let Ok(mut attempt) = Attempt::new(n, start, p.tries.max(1), now, known) else {
        return None;
    };
    let mut now = now;
    let mut step = 0;
    while let Some(i) = attempt.next_shard(now + step) {
        now += step;
        step = p.rtt;
        *calls += 1;
        let cap = layout.cap(p.limit, i);
        let log = &mut shards[i];
        log.trim(now, p.window);
        if log.count + cost <= cap {
            log.record(now, cost);
            return log.entries.back().map(|&(t, _)| vec![(t, cost)]);
        }
        let room = cap.saturating_sub(log.count);
        attempt.denied(log.fits_at(now, p.window, cost, cap), room);
        let oldest = log.entries.front().map(|&(t, _)| t);
        if let Some(until) = full_until(log.count, cap, oldest, p.window) {
            instance.full[i] = until;
        }
    }
    let parts = attempt.split(cost).filter(|_| p.split)?;
    let mut recorded: Vec<(usize, u64, u64)> = Vec::with_capacity(parts.len());
    for (i, units) in parts {
        now += step;
        *calls += 1;
        let log = &mut shards[i];
        log.trim(now, p.window);
        if log.count + units > layout.cap(p.limit, i) {
            // Denied: the parts recorded are removed again (nothing came in between).
            for &(j, _, units) in &recorded {
                shards[j].entries.pop_back();
                shards[j].count -= units;
            }
            return None;
        }
        log.record(now, units);
        let at = log.entries.back().map_or(now, |&(t, _)| t);
        recorded.push((i, at, units));
    }
    Some(
        recorded
            .into_iter()
            .map(|(_, at, units)| (at, units))
            .collect(),
    )
}
