//! Model-based randomized tests of the contract, on memory, a Redis server and the cluster.
//!
//! `model_agrees_with_the_contract`: a small reference model written from the README's
//! contract and docs/POLICIES.md (not from any store) predicts every field of every decision,
//! and its headers (legacy, IETF or both), for random sequences of checks (mixed costs, users by
//! id, by address and anonymous, matched routes and the unmatched one, a route with limits of
//! its own, a user on a plan, shadow tiers), `reset_user` / `reset_endpoint` calls, blocks and
//! unblocks of users and routes (a blocked request is refused and leaves no trace, which every
//! later decision checks), and clock
//! steps aimed at the edges (0, 1 µs, W - 1 µs, W, W + 1 µs, exactly a denial's `retry_after()`
//! and 1 µs less, an entry's last counted microsecond and the next, several windows, random
//! steps). Clients retry denied requests while cheaper ones get through. On a mismatch the
//! sequence is shrunk on the failing backend and printed with its seed.
//!
//! `concurrent_mixed_costs_are_exact`: tasks checking random costs at once, on one frozen
//! instant; no tier ever holds more than its limit, no request is denied wrongly (atomic stores),
//! and a denied request leaves nothing behind (counted afterwards with probe limiters).
//!
//! Files: the reference model is `tests/model/reference.rs`, the sequences' generator
//! `tests/model/generate.rs`, the concurrent test `tests/model/concurrency.rs`; this file holds
//! the scenarios, the steps, what a decision shows, and the replay and shrinking.
//!
//! Knobs (environment): `MODEL_SEQUENCES=N` sequences per backend (default 200 on memory, 80 on
//! Redis, 40 on the cluster: a few seconds in all), `MODEL_STEPS=N` steps per sequence (default
//! 60), `MODEL_SEED=S` (decimal or 0x-hex) to replay exactly one sequence (or seed the concurrent
//! test). A failing run reports every kind of mismatch it met (by the fields that differ), each
//! with its first sequence shrunk.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{
    BlockTarget, CheckRequest, Decision, HeaderStyle, ManualClock, RateLimitConfigBuilder,
    RateLimiter, RouteLimits, Tier, UserKey,
};

use crate::common::rng::{env_u64, Rng};
use crate::common::{limits, TestBackend};

/// A seed of its own for this run, unless `MODEL_SEED` names one.
fn fresh_seed() -> u64 {
    let nanos = crate::common::wall_clock().as_nanos() as u64;
    Rng(nanos ^ (u64::from(std::process::id()) << 32)).next()
}

/// A key prefix no other limiter of this process uses (fresh keys on a shared server).
fn fresh_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("m{}", N.fetch_add(1, Ordering::Relaxed))
}

fn backend_name(b: &TestBackend) -> &'static str {
    match b {
        TestBackend::Memory => "memory",
        TestBackend::Redis(_) => "redis",
        TestBackend::Cluster(..) => "cluster",
    }
}

/// A limiter on `b`, its keys under `prefix`, driven by `clock`. On memory, `store` (if given)
/// is its store, so that several limiters can share one.
async fn limiter_on(
    b: &TestBackend,
    config: RateLimitConfigBuilder,
    prefix: &str,
    clock: &ManualClock,
    store: Option<&MemoryStore>,
) -> RateLimiter {
    let config = b.config_with_prefix(config, prefix);
    let mut builder = RateLimiter::builder(config).clock(clock.clone());
    if let (TestBackend::Memory, Some(store)) = (b, store) {
        builder = builder.memory_store(store.clone());
    }
    let limiter = builder.build();
    limiter.wait_connected().await;
    assert_eq!(
        limiter.backend(),
        b.expected_backend(),
        "backend up: {:?}",
        limiter.fallback_cause()
    );
    limiter
}

/// `12.000001s`, `10s`, `3µs`.
struct Micros(u64);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, us) = (self.0 / 1_000_000, self.0 % 1_000_000);
        match (s, us) {
            (0, us) => write!(f, "{us}µs"),
            (s, 0) => write!(f, "{s}s"),
            (s, us) => write!(f, "{s}.{us:06}s"),
        }
    }
}

// ------------------------------------------------------------------------------- scenarios

/// Who asks: a user id, a client address (no id), or nobody known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Id(&'static str),
    Ip(IpAddr),
    Anonymous,
}

impl Who {
    fn key(self) -> UserKey<'static> {
        match self {
            Who::Id(id) => UserKey::Id(id),
            Who::Ip(ip) => UserKey::Ip(ip),
            Who::Anonymous => UserKey::Anonymous,
        }
    }
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Id(id) => write!(f, "{id:?}"),
            Who::Ip(ip) => write!(f, "ip {ip}"),
            Who::Anonymous => write!(f, "anonymous"),
        }
    }
}

const VIP_ID: &str = "vip";
const USERS: [Who; 6] = [
    Who::Id("u0"),
    Who::Id("u1"),
    Who::Id("u2"),
    Who::Id(VIP_ID),
    Who::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
    Who::Anonymous,
];
/// The user that may be on a plan.
const VIP: usize = 3;
/// The users with an id come first: the ones `reset_user` can name.
const IDS: usize = 4;
/// Route templates; `None`: no route matched.
const ROUTES: [Option<&str>; 4] = [Some("/a"), Some("/b"), Some("/login"), None];
/// The route with limits of its own.
const LOGIN: usize = 2;
/// The matched routes come first: the ones `reset_endpoint` can name.
const NAMED_ROUTES: usize = 3;
const TIERS: [Tier; 3] = [Tier::User, Tier::Endpoint, Tier::Global];

fn route_name(route: usize) -> String {
    match ROUTES[route] {
        Some(r) => format!("{r:?}"),
        None => "(unmatched)".to_owned(),
    }
}

/// One sequence's configuration.
#[derive(Clone, Debug)]
struct Scenario {
    window: u64,
    start: u64,
    user: u64,
    endpoint: u64,
    global: u64,
    login: RouteLimits,
    /// The user limit of `vip`'s plan, if it has one.
    vip_plan: Option<u64>,
    /// Shadow mode per tier (user, endpoint, global).
    shadow: [bool; 3],
    headers: HeaderStyle,
}

impl Scenario {
    fn random(rng: &mut Rng) -> Self {
        let window = rng.pick(&[10_000_000, 60_000_000, 7_500_001]);
        let start = match rng.below(3) {
            0 => 0,
            1 => 1_000_000_000,
            _ => 1_700_000_000_000_000 + rng.below(1_000_000_000),
        };
        let user = if rng.percent(12) { 0 } else { rng.range(1, 6) };
        let endpoint = if rng.percent(20) { 0 } else { rng.range(1, 6) };
        let global = match rng.below(4) {
            0 => 0,
            1 => rng.range(6, 12),
            _ => rng.range(1, 6),
        };
        let login = RouteLimits {
            user_limit: match rng.below(10) {
                0 => Some(0),
                1..=6 => Some(rng.range(1, 4)),
                _ => None,
            },
            endpoint_limit: match rng.below(10) {
                0 => Some(0),
                1..=4 => Some(rng.range(1, 5)),
                _ => None,
            },
        };
        let mut vip_plan = rng.percent(50).then(|| rng.range(1, 8));
        // A third of the scenarios have neither the route's own limits nor the plan: the
        // limiter's hot configuration, whose unit checks on memory take the store's direct
        // path (`src/store/memory/direct.rs`) when no tier is in shadow mode.
        let mut login = login;
        if rng.percent(33) {
            (login, vip_plan) = (RouteLimits::default(), None);
        }
        let shadow = match rng.below(20) {
            0..=10 => [false; 3],
            11..=16 => {
                let mut s = [false; 3];
                s[rng.below(3) as usize] = true;
                s
            }
            _ => [true; 3],
        };
        let headers = rng.pick(&[HeaderStyle::Legacy, HeaderStyle::Ietf, HeaderStyle::Both]);
        Self {
            window,
            start,
            user,
            endpoint,
            global,
            login,
            vip_plan,
            shadow,
            headers,
        }
    }

    fn builder(&self) -> RateLimitConfigBuilder {
        let mut c = limits(
            self.user,
            self.endpoint,
            self.global,
            Duration::from_micros(self.window),
        )
        .headers(self.headers);
        // A route without limits of its own is left out: one that sets nothing changes
        // nothing, and without it (and a plan) the configuration is the hot one.
        if self.login != RouteLimits::default() {
            c = c.route(ROUTES[LOGIN].expect("a named route"), self.login);
        }
        if let Some(limit) = self.vip_plan {
            c = c.plan("gold", limit).user_plan(VIP_ID, "gold");
        }
        if self.shadow == [true; 3] {
            c = c.shadow(true);
        } else {
            for (tier, shadow) in TIERS.iter().zip(self.shadow) {
                if shadow {
                    c = c.shadow_tier(*tier);
                }
            }
        }
        c
    }

    /// Every limit a tier can have here (to aim costs at and over the limits).
    fn limits(&self) -> Vec<u64> {
        let mut all = vec![self.user, self.endpoint, self.global];
        all.extend(self.login.user_limit);
        all.extend(self.login.endpoint_limit);
        all.extend(self.vip_plan);
        all.retain(|&l| l > 0);
        if all.is_empty() {
            all.push(1);
        }
        all
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = |l: u64| match l {
            0 => "off".to_owned(),
            l => l.to_string(),
        };
        let over = |l: Option<u64>| l.map_or("default".to_owned(), limit);
        write!(
            f,
            "window {}; limits user {}, endpoint {}, global {}; {} has user {}, endpoint {}",
            Micros(self.window),
            limit(self.user),
            limit(self.endpoint),
            limit(self.global),
            route_name(LOGIN),
            over(self.login.user_limit),
            over(self.login.endpoint_limit),
        )?;
        match self.vip_plan {
            Some(l) => write!(f, "; {VIP_ID:?} on a plan of {}", limit(l))?,
            None => write!(f, "; no plan")?,
        }
        let shadow: Vec<&str> = TIERS
            .iter()
            .zip(self.shadow)
            .filter(|(_, s)| *s)
            .map(|(t, _)| t.as_str())
            .collect();
        if !shadow.is_empty() {
            write!(f, "; shadow {}", shadow.join("+"))?;
        }
        write!(
            f,
            "; headers {:?}; clock starts at {}",
            self.headers,
            Micros(self.start)
        )
    }
}

// ----------------------------------------------------------------------------------- steps

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Check {
        user: usize,
        route: usize,
        cost: u64,
    },
    ResetUser {
        user: usize,
    },
    ResetEndpoint {
        route: usize,
    },
    Advance {
        by: u64,
        why: &'static str,
    },
    /// A block of [`BLOCK`] on a user with an id or a named route.
    Block {
        of: Blocked,
    },
    Unblock {
        of: Blocked,
    },
}

/// What a block step names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Blocked {
    /// One of the first [`IDS`] users.
    User(usize),
    /// One of the first [`NAMED_ROUTES`] routes.
    Route(usize),
}

impl Blocked {
    fn target(self) -> BlockTarget<'static> {
        match self {
            Blocked::User(u) => match USERS[u] {
                Who::Id(id) => BlockTarget::User(id),
                other => unreachable!("only users with an id are blocked: {other}"),
            },
            Blocked::Route(r) => BlockTarget::Endpoint(ROUTES[r].expect("a named route")),
        }
    }

    /// The model's name of it.
    fn key(self) -> String {
        match self {
            Blocked::User(u) => format!("user {}", USERS[u]),
            Blocked::Route(r) => format!("route {}", route_name(r)),
        }
    }
}

/// How long a block step blocks (µs): longer than any sequence, so it only ends by `unblock`.
const BLOCK: u64 = 1_000 * 3_600 * 1_000_000;

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Step::Check { user, route, cost } => {
                write!(f, "check {} {} cost {cost}", USERS[user], route_name(route))
            }
            Step::ResetUser { user } => write!(f, "reset_user {}", USERS[user]),
            Step::ResetEndpoint { route } => write!(f, "reset_endpoint {}", route_name(route)),
            Step::Advance { by, why } => write!(f, "advance {} ({why})", Micros(by)),
            Step::Block { of } => write!(f, "block {} for {}", of.key(), Micros(BLOCK)),
            Step::Unblock { of } => write!(f, "unblock {}", of.key()),
        }
    }
}

// ----------------------------------------------------------------------------------- model

/// Every observable field of a decision, and its headers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Observed {
    allowed: bool,
    remaining: u64,
    retry_after: Duration,
    retry_after_secs: u64,
    blocked_by: Option<Tier>,
    shadow_blocked_by: Option<Tier>,
    cost_exceeds_limit: bool,
    cost: u64,
    by_block: bool,
    /// `name: value` pairs, sorted, joined by `; `.
    headers: String,
}

impl Observed {
    /// What `d` says, with the headers the layer would send in `style`.
    fn of(d: &Decision, style: tiered_ratelimit::HeaderStyle) -> Self {
        let mut headers: Vec<String> = tiered_ratelimit::headers::to_header_map(d, style)
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or("(not ASCII)")))
            .collect();
        headers.sort();
        Self {
            allowed: d.allowed(),
            remaining: d.remaining(),
            retry_after: d.retry_after(),
            retry_after_secs: d.retry_after_secs(),
            blocked_by: d.blocked_by(),
            shadow_blocked_by: d.shadow_blocked_by(),
            cost_exceeds_limit: d.cost_exceeds_limit(),
            cost: d.cost(),
            by_block: d.by_block(),
            headers: headers.join("; "),
        }
    }

    /// The same without the block's time left: Redis counts a block on its own clock, which
    /// the test's manual clock does not move. (What is left is checked to lie within the
    /// block on its own.)
    fn without_block_time(&self) -> Self {
        if !self.by_block {
            return self.clone();
        }
        let secs = self.retry_after_secs;
        let headers = self
            .headers
            .replace(&format!("retry-after: {secs}"), "retry-after: (left)")
            .replace(&format!(";t={secs}"), ";t=(left)");
        Self {
            retry_after: Duration::ZERO,
            retry_after_secs: 0,
            headers,
            ..self.clone()
        }
    }
}

impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let remaining = match self.remaining {
            u64::MAX => "MAX".to_owned(),
            r => r.to_string(),
        };
        if self.allowed {
            write!(f, "allowed, remaining {remaining}")?;
        } else {
            write!(f, "DENIED, remaining {remaining}")?;
        }
        if let Some(t) = self.blocked_by {
            write!(f, ", blocked_by {t}")?;
        }
        if let Some(t) = self.shadow_blocked_by {
            write!(f, ", shadow_blocked_by {t}")?;
        }
        if !self.retry_after.is_zero() || self.retry_after_secs != 0 {
            let us = u64::try_from(self.retry_after.as_micros()).unwrap_or(u64::MAX);
            write!(
                f,
                ", retry_after {} (Retry-After: {})",
                Micros(us),
                self.retry_after_secs
            )?;
            let extra_nanos = self.retry_after.subsec_nanos() % 1_000;
            if extra_nanos > 0 {
                write!(f, " [+{extra_nanos}ns]")?;
            }
        }
        if self.cost_exceeds_limit {
            write!(f, ", cost_exceeds_limit")?;
        }
        if self.by_block {
            write!(f, ", by_block")?;
        }
        write!(f, ", cost {}", self.cost)
    }
}

#[path = "model/reference.rs"]
mod reference;
use reference::Model;

#[path = "model/generate.rs"]
mod generate;
use generate::generate;

// --------------------------------------------------------------------------------- running

/// The first decision where a store and the model disagree.
#[derive(Clone, Debug)]
struct Mismatch {
    /// Index of the check in the sequence.
    at: usize,
    expected: Observed,
    actual: Observed,
    decision: String,
}

impl Mismatch {
    /// Which fields differ: failures with the same signature are taken for the same bug.
    fn signature(&self) -> String {
        let (e, a) = (&self.expected, &self.actual);
        let fields = [
            ("allowed", e.allowed != a.allowed),
            ("remaining", e.remaining != a.remaining),
            ("retry_after", e.retry_after != a.retry_after),
            ("blocked_by", e.blocked_by != a.blocked_by),
            (
                "shadow_blocked_by",
                e.shadow_blocked_by != a.shadow_blocked_by,
            ),
            (
                "cost_exceeds_limit",
                e.cost_exceeds_limit != a.cost_exceeds_limit,
            ),
            ("cost", e.cost != a.cost),
            ("by_block", e.by_block != a.by_block),
        ];
        let mut fields: Vec<&str> = fields.iter().filter(|f| f.1).map(|f| f.0).collect();
        // Headers follow from the fields above, unless only they differ.
        if fields.is_empty() && e.headers != a.headers {
            fields.push("headers");
        }
        fields.join("+")
    }
}

/// Runs `steps` on a fresh limiter on `b` and the model side by side.
async fn replay(b: &TestBackend, sc: &Scenario, steps: &[Step]) -> Result<(), Mismatch> {
    let clock = ManualClock::at(Duration::from_micros(sc.start));
    let limiter = limiter_on(b, sc.builder(), &fresh_prefix(), &clock, None).await;
    let mut model = Model::new(sc);
    let mut now = sc.start;
    for (at, &step) in steps.iter().enumerate() {
        let taken = match step {
            Step::Block { of } => Some(model.counted(of)),
            // An unblock is never refused: it ends whatever blocks there are.
            Step::Unblock { .. } => Some(true),
            _ => None,
        };
        let expected = model.step(&mut now, step);
        clock.set(Duration::from_micros(now));
        match step {
            Step::Advance { .. } => {}
            Step::Block { of } => {
                let result = limiter
                    .block(of.target(), Duration::from_micros(BLOCK))
                    .await;
                assert_eq!(
                    result.is_ok(),
                    taken.unwrap(),
                    "step {at}, {step}: {result:?}"
                );
            }
            Step::Unblock { of } => {
                let result = limiter.unblock(of.target()).await;
                assert_eq!(
                    result.is_ok(),
                    taken.unwrap(),
                    "step {at}, {step}: {result:?}"
                );
            }
            Step::ResetUser { user } => {
                if let Who::Id(id) = USERS[user] {
                    limiter.reset_user(id).await.expect("reset");
                }
            }
            Step::ResetEndpoint { route } => {
                if let Some(route) = ROUTES[route] {
                    limiter.reset_endpoint(route).await.expect("reset");
                }
            }
            Step::Check { user, route, cost } => {
                let request = CheckRequest::new(USERS[user].key(), ROUTES[route]).with_cost(cost);
                let decision = limiter.check_request(request).await;
                assert_eq!(
                    limiter.backend(),
                    b.expected_backend(),
                    "the limiter fell back to memory: Redis failed, not the contract: {:?}",
                    limiter.fallback_cause()
                );
                let expected = expected.expect("a check has a decision");
                let actual = Observed::of(&decision, limiter.config().headers());
                let blocks_on_redis = actual.by_block && !matches!(b, TestBackend::Memory);
                let same = if blocks_on_redis {
                    // Redis counts the block on its own clock: what is left lies within it.
                    let within = Duration::from_micros(BLOCK) >= actual.retry_after
                        && actual.retry_after + Duration::from_secs(60) > expected.retry_after;
                    within && actual.without_block_time() == expected.without_block_time()
                } else {
                    actual == expected
                };
                if !same {
                    return Err(Mismatch {
                        at,
                        expected,
                        actual,
                        decision: format!("{decision:?}"),
                    });
                }
            }
        }
    }
    Ok(())
}

trait SameFailure {
    /// Passing, or failing in another way: not the failure being shrunk.
    fn filter_same(self, signature: &str) -> Self;
}

impl SameFailure for Result<(), Mismatch> {
    fn filter_same(self, signature: &str) -> Self {
        match self {
            Err(f) if f.signature() != signature => Ok(()),
            other => other,
        }
    }
}

/// At most this many kinds of failure (by the fields that differ) are shrunk in one run.
const SHRUNK_KINDS: usize = 4;

/// At most this many replays while shrinking (each is a fresh limiter).
const SHRINK_BUDGET: usize = 600;

/// A smaller sequence (and simpler scenario) that still fails: chunks of steps dropped (halving
/// the chunk down to single steps), costs set to 1, scenario features switched off.
async fn shrink(
    b: &TestBackend,
    sc: &Scenario,
    steps: &[Step],
    first: Mismatch,
) -> (Scenario, Vec<Step>, Mismatch) {
    let signature = first.signature();
    let mut sc = sc.clone();
    let mut steps = steps[..=first.at].to_vec();
    let mut failure = first;
    let mut budget = SHRINK_BUDGET;
    // Scenario simplifications already tried on a sequence (they fail or pass the same again).
    let mut tried = std::collections::HashSet::new();
    let mut progress = true;
    while progress && budget > 0 {
        progress = false;
        // Drop chunks of steps, halving the chunk size.
        let mut chunk = (steps.len() / 2).max(1);
        loop {
            let mut i = 0;
            while i < steps.len() && budget > 0 {
                let end = (i + chunk).min(steps.len());
                let candidate: Vec<Step> =
                    steps[..i].iter().chain(&steps[end..]).copied().collect();
                budget -= 1;
                match replay(b, &sc, &candidate).await {
                    Err(f) if !candidate.is_empty() && f.signature() == signature => {
                        steps = candidate[..=f.at].to_vec();
                        failure = f;
                        progress = true;
                    }
                    _ => i += chunk,
                }
            }
            if chunk == 1 || budget == 0 {
                break;
            }
            chunk /= 2;
        }
        // Simpler costs and clock steps.
        let mut i = 0;
        while i < steps.len() {
            i += 1;
            let simpler = match steps[i - 1] {
                Step::Check { user, route, cost } if cost != 1 => {
                    vec![Step::Check {
                        user,
                        route,
                        cost: 1,
                    }]
                }
                Step::Advance { by, .. } if by > 1 => {
                    let w = sc.window;
                    let mut s = vec![Step::Advance { by: 0, why: "0" }];
                    if by > w + 1 {
                        s.push(Step::Advance {
                            by: w + 1,
                            why: "W+1µs",
                        });
                    }
                    s
                }
                _ => continue,
            };
            for candidate_step in simpler {
                if budget == 0 {
                    break;
                }
                budget -= 1;
                let mut candidate = steps.clone();
                candidate[i - 1] = candidate_step;
                let result = replay(b, &sc, &candidate).await;
                if let Err(f) = result.filter_same(&signature) {
                    steps = candidate[..=f.at].to_vec();
                    failure = f;
                    progress = true;
                    break;
                }
            }
        }
        // A simpler scenario: fewer features (each tried on the scenario as it is by then).
        let simplify: [fn(&mut Scenario); 10] = [
            |s| s.shadow = [false; 3],
            |s| s.headers = HeaderStyle::Legacy,
            |s| s.window = 10_000_000,
            |s| s.vip_plan = None,
            |s| s.login.user_limit = None,
            |s| s.login.endpoint_limit = None,
            |s| s.global = 0,
            |s| s.endpoint = 0,
            |s| s.user = 0,
            |s| s.start = 1_000_000_000,
        ];
        for f in simplify {
            let mut candidate = sc.clone();
            f(&mut candidate);
            let key = format!("{candidate:?} {steps:?}");
            let same = format!("{candidate:?}") == format!("{sc:?}");
            if same || budget == 0 || !tried.insert(key) {
                continue;
            }
            budget -= 1;
            let result = replay(b, &candidate, &steps).await;
            if let Err(f) = result.filter_same(&signature) {
                steps.truncate(f.at + 1);
                failure = f;
                sc = candidate;
                progress = true;
            }
        }
    }
    (sc, steps, failure)
}

/// The headers of both sides, when they differ.
fn headers_diff(m: &Mismatch) -> String {
    if m.expected.headers == m.actual.headers {
        return String::new();
    }
    format!(
        "  expected headers {}\n  actual headers   {}\n",
        m.expected.headers, m.actual.headers
    )
}

/// How often the model predicted each kind of decision over a run (to see that the sequences
/// reach the interesting cases).
#[derive(Debug, Default)]
struct Tally {
    checks: u64,
    denied: u64,
    exceeds: u64,
    shadow: u64,
    unlimited: u64,
    resets: u64,
}

impl Tally {
    fn add(&mut self, sc: &Scenario, steps: &[Step]) {
        let mut model = Model::new(sc);
        let mut now = sc.start;
        for &step in steps {
            self.resets += u64::from(matches!(
                step,
                Step::ResetUser { .. } | Step::ResetEndpoint { .. }
            ));
            if let Some(d) = model.step(&mut now, step) {
                self.checks += 1;
                self.denied += u64::from(!d.allowed);
                self.exceeds += u64::from(d.cost_exceeds_limit);
                self.shadow += u64::from(d.shadow_blocked_by.is_some());
                self.unlimited += u64::from(d.remaining == u64::MAX);
            }
        }
    }
}

/// The sequence, with the model's expected decision after each check.
fn describe(sc: &Scenario, steps: &[Step]) -> String {
    let mut model = Model::new(sc);
    let mut now = sc.start;
    let mut out = String::new();
    for (i, &step) in steps.iter().enumerate() {
        let note = match model.step(&mut now, step) {
            Some(d) => format!("=> {d}"),
            None if matches!(step, Step::Advance { .. }) => {
                format!("now = start + {}", Micros(now - sc.start))
            }
            None => String::new(),
        };
        out.push_str(&format!("  {:>2}. {step:<40} {note}\n", i + 1));
    }
    out
}

pub async fn model_agrees_with_the_contract(b: TestBackend) {
    let name = backend_name(&b);
    let default_sequences = match b {
        TestBackend::Memory => 200,
        TestBackend::Redis(_) => 80,
        TestBackend::Cluster(..) => 40,
    };
    let len = env_u64("MODEL_STEPS").unwrap_or(60) as usize;
    let (seeds, base) = match env_u64("MODEL_SEED") {
        Some(seed) => (vec![seed], seed),
        None => {
            let base = fresh_seed();
            let n = env_u64("MODEL_SEQUENCES").unwrap_or(default_sequences);
            let mut rng = Rng(base);
            ((0..n).map(|_| rng.next()).collect(), base)
        }
    };
    eprintln!(
        "model on {name}: {} sequence(s) of {len} steps, base seed {base:#x}",
        seeds.len()
    );
    let started = std::time::Instant::now();
    let mut tally = Tally::default();
    // One shrunk report per kind of failure, and how many sequences failed that way.
    let mut reports: Vec<(String, usize, String)> = Vec::new();
    let total = seeds.len();
    for seed in seeds {
        let (sc, steps) = generate(seed, len);
        tally.add(&sc, &steps);
        let Err(first) = replay(&b, &sc, &steps).await else {
            continue;
        };
        let signature = first.signature();
        if let Some(report) = reports.iter_mut().find(|r| r.0 == signature) {
            report.1 += 1;
            continue;
        }
        let original = first.at + 1;
        // Shrinking takes hundreds of replays: only for the first few kinds of failure.
        let (sc, steps, failure) = if reports.len() < SHRUNK_KINDS {
            shrink(&b, &sc, &steps, first).await
        } else {
            (sc, steps[..original].to_vec(), first)
        };
        let report = format!(
            "seed {seed:#x} (replay: MODEL_SEED={seed:#x} cargo test --test model {name}::model_agrees_with_the_contract)\n\
             config: {sc}\n\
             steps ({original} before shrinking):\n{}\
             at step {}:\n  expected {}\n  actual   {}\n{}  decision {}\n",
            describe(&sc, &steps),
            failure.at + 1,
            failure.expected,
            failure.actual,
            headers_diff(&failure),
            failure.decision,
        );
        eprintln!("model on {name}: a failure ({signature}):\n{report}");
        reports.push((signature, 1, report));
    }
    eprintln!(
        "model on {name}: {total} sequences in {:?}; model decisions: {tally:?}",
        started.elapsed()
    );
    if !reports.is_empty() {
        let mut message =
            format!("\nthe {name} store disagrees with the model (base seed {base:#x}):\n");
        for (signature, count, report) in &reports {
            message.push_str(&format!(
                "\n--- {count} of {total} sequences differ in {signature}; the first, shrunk:\n{report}"
            ));
        }
        panic!("{message}");
    }
}

#[path = "model/concurrency.rs"]
mod concurrency;

mod contract {
    pub use super::concurrency::concurrent_mixed_costs_are_exact;
    pub use super::model_agrees_with_the_contract;
}

contract_tests!(
    model_agrees_with_the_contract,
    concurrent_mixed_costs_are_exact
);
