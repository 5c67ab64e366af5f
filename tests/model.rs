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
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
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
        let vip_plan = rng.percent(50).then(|| rng.range(1, 8));
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
        .route(ROUTES[LOGIN].expect("a named route"), self.login)
        .headers(self.headers);
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

/// Whole seconds, rounded up.
fn secs_up(us: u64) -> u64 {
    us.div_ceil(1_000_000)
}

/// The contract, as the README and docs/POLICIES.md state it: one sliding log of
/// (time, cost) per key.
struct Model {
    sc: Scenario,
    logs: BTreeMap<String, Vec<(u64, u64)>>,
    /// Blocked users and routes, and when each block ends (µs).
    blocks: BTreeMap<Blocked, u64>,
}

/// What one tier says about a request.
enum Verdict {
    /// Room: this much is left after the request.
    Room(u64),
    /// No room before `retry` µs from now; `exceeds`: the cost is above the limit.
    Full { retry: u64, exceeds: bool },
}

/// A decision as the model derives it, before its headers are written.
struct Expected {
    allowed: bool,
    remaining: u64,
    /// µs.
    retry: u64,
    blocked_by: Option<Tier>,
    shadow_blocked_by: Option<Tier>,
    exceeds: bool,
    cost: u64,
    by_block: bool,
    /// The tier closest to its limit (the blocking one on a denial) and when it next gains
    /// capacity, in µs: the IETF `RateLimit` header.
    binding: Option<(Tier, u64)>,
}

impl Model {
    fn new(sc: &Scenario) -> Self {
        Self {
            sc: sc.clone(),
            logs: BTreeMap::new(),
            blocks: BTreeMap::new(),
        }
    }

    /// A user's general bucket.
    fn user_key(user: usize) -> Option<String> {
        match USERS[user] {
            Who::Id(id) => Some(format!("user:{id}")),
            Who::Ip(ip) => Some(format!("user:@{ip}")),
            Who::Anonymous => None,
        }
    }

    fn endpoint_key(route: usize) -> String {
        match ROUTES[route] {
            Some(r) => format!("endpoint:{r}"),
            None => "endpoint:(unmatched)".to_owned(),
        }
    }

    /// The enabled tiers of a request, most specific first: (tier, key, limit).
    fn tiers(&self, user: usize, route: usize) -> Vec<(Tier, String, u64)> {
        let sc = &self.sc;
        let login = route == LOGIN;
        let route_user = sc.login.user_limit.filter(|_| login);
        // A route's own user limit wins over a plan, which wins over the default.
        let user_limit = route_user
            .or(sc.vip_plan.filter(|_| user == VIP))
            .unwrap_or(sc.user);
        let endpoint_limit = sc
            .login
            .endpoint_limit
            .filter(|_| login)
            .unwrap_or(sc.endpoint);
        let mut tiers = Vec::new();
        if let (Some(general), true) = (Self::user_key(user), user_limit > 0) {
            // A route's own user limit counts in a bucket of that route's own.
            let key = match route_user {
                Some(_) => format!("{general}@{}", route_name(route)),
                None => general,
            };
            tiers.push((Tier::User, key, user_limit));
        }
        if endpoint_limit > 0 {
            tiers.push((Tier::Endpoint, Self::endpoint_key(route), endpoint_limit));
        }
        if sc.global > 0 {
            tiers.push((Tier::Global, "global".to_owned(), sc.global));
        }
        tiers
    }

    /// One tier's verdict on `cost` units at `now` (its log trimmed first: a trim alone changes
    /// nothing observable).
    fn verdict(&mut self, key: &str, limit: u64, now: u64, cost: u64) -> Verdict {
        let window = self.sc.window;
        let log = self.logs.entry(key.to_owned()).or_default();
        // An entry at exactly now - window still counts.
        log.retain(|&(t, _)| t + window >= now);
        if cost > limit {
            return Verdict::Full {
                retry: window,
                exceeds: true,
            };
        }
        let count: u64 = log.iter().map(|&(_, c)| c).sum();
        if count + cost <= limit {
            return Verdict::Room(limit - count - cost);
        }
        // Room comes when enough units have expired: the entry that brings the count down far
        // enough frees its units 1 µs after its window ends.
        let need = count + cost - limit;
        let mut freed = 0;
        for &(t, c) in log.iter() {
            freed += c;
            if freed >= need {
                return Verdict::Full {
                    retry: t + window + 1 - now,
                    exceeds: false,
                };
            }
        }
        unreachable!("cost <= limit, so expiring everything makes room")
    }

    fn check(&mut self, now: u64, user: usize, route: usize, cost: u64) -> Observed {
        let cost = cost.max(1); // 0 counts as 1
        let tiers = self.tiers(user, route);
        let policies: Vec<(Tier, u64)> = tiers.iter().map(|(t, _, l)| (*t, *l)).collect();
        let expected = match self.block_of(now, user, route, &tiers) {
            Some((tier, left)) => Expected {
                allowed: false,
                remaining: 0,
                retry: left,
                blocked_by: Some(tier),
                shadow_blocked_by: None,
                exceeds: false,
                cost,
                by_block: true,
                binding: Some((tier, left)),
            },
            None => self.decide(now, &tiers, cost),
        };
        self.observe(&expected, &policies)
    }

    /// A block on a counted tier of the request (docs/OPERATIONS.md): blocks answer before
    /// any count, shadow mode or not; the first blocked tier, and the longest time left.
    fn block_of(
        &self,
        now: u64,
        user: usize,
        route: usize,
        tiers: &[(Tier, String, u64)],
    ) -> Option<(Tier, u64)> {
        let blocked = |of: Blocked| self.blocks.get(&of).filter(|&&until| until > now);
        let mut found: Option<(Tier, u64)> = None;
        for (tier, ..) in tiers {
            let until = match tier {
                Tier::User if user < IDS => blocked(Blocked::User(user)),
                Tier::Endpoint if route < NAMED_ROUTES => blocked(Blocked::Route(route)),
                _ => None,
            };
            if let Some(&until) = until {
                let left = until - now;
                found = Some(found.map_or((*tier, left), |(t, l)| (t, l.max(left))));
            }
        }
        found
    }

    /// Whether a block of `of` is taken: its tier is counted somewhere in the configuration
    /// (else `BlockError::TierOff`).
    fn counted(&self, of: Blocked) -> bool {
        let sc = &self.sc;
        match of {
            Blocked::User(_) => {
                sc.user > 0 || sc.vip_plan.is_some() || sc.login.user_limit.is_some_and(|l| l > 0)
            }
            Blocked::Route(r) => {
                let own = sc.login.endpoint_limit.filter(|_| r == LOGIN);
                own.unwrap_or(sc.endpoint) > 0
            }
        }
    }

    /// A block of `of`, if taken: it lasts [`BLOCK`] from `now`.
    fn block(&mut self, now: u64, of: Blocked) {
        if self.counted(of) {
            self.blocks.insert(of, now + BLOCK);
        }
    }

    fn unblock(&mut self, of: Blocked) {
        self.blocks.remove(&of);
    }

    fn decide(&mut self, now: u64, tiers: &[(Tier, String, u64)], cost: u64) -> Expected {
        let mut e = Expected {
            allowed: true,
            remaining: u64::MAX,
            retry: 0,
            blocked_by: None,
            shadow_blocked_by: None,
            exceeds: false,
            cost,
            by_block: false,
            binding: None,
        };
        if tiers.is_empty() {
            return e;
        }
        // A cost above an enforced tier's limit can never be admitted: the first such tier
        // denies it, whatever the others hold (docs/POLICIES.md), with a wait of one window.
        let shadow_of = |tier: &Tier| self.sc.shadow[TIERS.iter().position(|t| t == tier).unwrap()];
        if let Some((tier, ..)) = tiers
            .iter()
            .find(|(tier, _, limit)| cost > *limit && !shadow_of(tier))
        {
            let retry = self.sc.window;
            e.allowed = false;
            e.remaining = 0;
            e.retry = retry;
            e.blocked_by = Some(*tier);
            e.exceeds = true;
            e.binding = Some((*tier, retry));
            return e;
        }
        let mut record = Vec::new();
        // The tier with the least left (the first of equals), and its key.
        let mut least: Option<(u64, Tier, &str)> = None;
        let mut shadowed: Option<(Tier, u64)> = None;
        for (tier, key, limit) in tiers {
            let shadow = self.sc.shadow[TIERS.iter().position(|t| t == tier).unwrap()];
            match self.verdict(key, *limit, now, cost) {
                Verdict::Room(left) => {
                    if least.is_none_or(|(l, ..)| left < l) {
                        least = Some((left, *tier, key));
                    }
                    record.push(key.clone());
                }
                Verdict::Full { retry, exceeds } if !shadow => {
                    // The first full enforced tier denies; nothing is recorded anywhere.
                    e.allowed = false;
                    e.remaining = 0;
                    e.retry = retry;
                    e.blocked_by = Some(*tier);
                    e.exceeds = exceeds;
                    e.binding = Some((*tier, retry));
                    return e;
                }
                Verdict::Full { retry, .. } => {
                    // A full shadow tier does not deny, and does not record the request.
                    shadowed.get_or_insert((*tier, retry));
                }
            }
        }
        for key in record {
            self.logs.entry(key).or_default().push((now, cost));
        }
        if let Some((tier, retry)) = shadowed {
            // Served, and reported as enforcing the tier would have answered.
            e.remaining = 0;
            e.retry = retry;
            e.shadow_blocked_by = Some(tier);
            e.binding = Some((tier, retry));
        } else if let Some((left, tier, key)) = least {
            // Its oldest live entry (this request's, if it was empty) leaves the window.
            let oldest = self.logs[key][0].0;
            e.remaining = left;
            e.binding = Some((tier, oldest + self.sc.window + 1 - now));
        }
        e
    }

    /// The decision's fields and headers (README, docs/POLICIES.md "Headers").
    fn observe(&self, e: &Expected, policies: &[(Tier, u64)]) -> Observed {
        let style = self.sc.headers;
        // Whole seconds rounded up; at least 1 on a 429 (and on a shadow denial).
        let retry_after_secs = if e.retry == 0 {
            0
        } else {
            secs_up(e.retry).max(1)
        };
        let mut headers = Vec::new();
        // No tier applied: nothing to count, so no rate-limit header at all.
        let limited = !policies.is_empty();
        if limited && style != HeaderStyle::Ietf {
            headers.push(format!("x-ratelimit-remaining: {}", e.remaining));
        }
        if limited && (style != HeaderStyle::Ietf || !e.allowed) {
            headers.push(format!("retry-after: {retry_after_secs}"));
        }
        if style != HeaderStyle::Legacy {
            if !policies.is_empty() {
                let w = secs_up(self.sc.window);
                let items: Vec<String> = policies
                    .iter()
                    .map(|(t, q)| format!("\"{t}\";q={q};w={w}"))
                    .collect();
                headers.push(format!("ratelimit-policy: {}", items.join(", ")));
            }
            if let Some((tier, reset)) = e.binding {
                headers.push(format!(
                    "ratelimit: \"{tier}\";r={};t={}",
                    e.remaining,
                    secs_up(reset)
                ));
            }
        }
        headers.sort();
        Observed {
            allowed: e.allowed,
            remaining: e.remaining,
            retry_after: Duration::from_micros(e.retry),
            retry_after_secs,
            blocked_by: e.blocked_by,
            shadow_blocked_by: e.shadow_blocked_by,
            cost_exceeds_limit: e.exceeds,
            cost: e.cost,
            by_block: e.by_block,
            headers: headers.join("; "),
        }
    }

    /// Applies one step; a check's expected decision.
    fn step(&mut self, now: &mut u64, step: Step) -> Option<Observed> {
        match step {
            Step::Advance { by, .. } => *now += by,
            Step::ResetUser { user } => self.reset_user(user),
            Step::ResetEndpoint { route } => self.reset_endpoint(route),
            Step::Block { of } => self.block(*now, of),
            Step::Unblock { of } => self.unblock(of),
            Step::Check { user, route, cost } => return Some(self.check(*now, user, route, cost)),
        }
        None
    }

    /// `reset_user` forgets the user's general bucket only (not its route buckets).
    fn reset_user(&mut self, user: usize) {
        if let Some(key) = Self::user_key(user) {
            self.logs.remove(&key);
        }
    }

    fn reset_endpoint(&mut self, route: usize) {
        self.logs.remove(&Self::endpoint_key(route));
    }

    /// Every live entry's time (to aim clock steps at their last counted microsecond).
    fn live_entries(&self, now: u64) -> Vec<u64> {
        let window = self.sc.window;
        self.logs
            .values()
            .flatten()
            .map(|&(t, _)| t)
            .filter(|&t| t + window >= now)
            .collect()
    }
}

// ------------------------------------------------------------------------------ generation

/// A random sequence, generated against the model (so that clock steps can aim at the times
/// it predicts: a denial's retry time, an entry's expiry).
fn generate(seed: u64, len: usize) -> (Scenario, Vec<Step>) {
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

// ------------------------------------------------------------------------------ concurrency

/// What one concurrent check asked and got.
#[derive(Clone, Debug)]
struct Outcome {
    user: usize,
    route: usize,
    cost: u64,
    decision: Observed,
}

pub async fn concurrent_mixed_costs_are_exact(b: TestBackend) {
    const TASKS: u64 = 8;
    const CHECKS: usize = 50;
    const USER_LIMIT: u64 = 40;
    const ENDPOINT_LIMIT: u64 = 60;
    const GLOBAL_LIMIT: u64 = 100;
    const CUSERS: [&str; 5] = ["c0", "c1", "c2", "c3", "c4"];
    const CROUTES: [&str; 3] = ["/c0", "/c1", "/c2"];
    let window = Duration::from_secs(60);
    let name = backend_name(&b);
    // The cluster reserves tier by tier and rolls back: a request may be denied by a
    // reservation that is then undone. Only the single-step stores are exact both ways.
    let atomic = !matches!(b, TestBackend::Cluster(..));
    let rounds = match b {
        TestBackend::Cluster(..) => 2,
        _ => 3,
    };
    let base = env_u64("MODEL_SEED").unwrap_or_else(fresh_seed);
    for round in 0..rounds {
        let seed = Rng(base ^ round).next();
        let ctx = format!("{name}, round {round}, seed {seed:#x} (MODEL_SEED={base:#x})");
        let prefix = fresh_prefix();
        let store = MemoryStore::new();
        let clock = ManualClock::at(Duration::from_secs(1_000_000));
        let config = limits(USER_LIMIT, ENDPOINT_LIMIT, GLOBAL_LIMIT, window);
        let limiter = limiter_on(&b, config, &prefix, &clock, Some(&store)).await;
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let limiter = limiter.clone();
                let mut rng = Rng(seed ^ (task + 1).wrapping_mul(0xA24B_AED4_963E_E407));
                tokio::spawn(async move {
                    let mut out = Vec::with_capacity(CHECKS);
                    for _ in 0..CHECKS {
                        let user = rng.below(CUSERS.len() as u64) as usize;
                        let route = rng.below(CROUTES.len() as u64) as usize;
                        let cost = rng.range(1, 4);
                        let d = limiter.check_n(CUSERS[user], CROUTES[route], cost).await;
                        out.push(Outcome {
                            user,
                            route,
                            cost,
                            decision: Observed::of(&d, limiter.config().headers()),
                        });
                        tokio::task::yield_now().await;
                    }
                    out
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.expect("task"));
        }
        assert_eq!(
            limiter.backend(),
            b.expected_backend(),
            "{ctx}: fell back: {:?}",
            limiter.fallback_cause()
        );

        // What was admitted, per key: (units, requests).
        let mut users = [(0u64, 0usize); 5];
        let mut routes = [(0u64, 0usize); 3];
        let mut global = (0u64, 0usize);
        for o in all.iter().filter(|o| o.decision.allowed) {
            for slot in [&mut users[o.user], &mut routes[o.route], &mut global] {
                slot.0 += o.cost;
                slot.1 += 1;
            }
        }
        // Never over a limit.
        for (i, u) in users.iter().enumerate() {
            assert!(u.0 <= USER_LIMIT, "{ctx}: user {i} admitted {} units", u.0);
        }
        for (i, r) in routes.iter().enumerate() {
            assert!(
                r.0 <= ENDPOINT_LIMIT,
                "{ctx}: route {i} admitted {} units",
                r.0
            );
        }
        assert!(global.0 <= GLOBAL_LIMIT, "{ctx}: {} units in all", global.0);

        let final_of = |tier: Tier, o: &Outcome| -> (u64, u64) {
            match tier {
                Tier::User => (users[o.user].0, USER_LIMIT),
                Tier::Endpoint => (routes[o.route].0, ENDPOINT_LIMIT),
                Tier::Global => (global.0, GLOBAL_LIMIT),
            }
        };
        let (mut global_denials, mut early_denials) = (0, 0);
        for o in &all {
            let d = &o.decision;
            assert_eq!(d.cost, o.cost, "{ctx}: {o:?}");
            assert_eq!(d.shadow_blocked_by, None, "{ctx}: {o:?}");
            assert!(!d.cost_exceeds_limit, "{ctx}: {o:?}");
            let tiers_left = [
                USER_LIMIT - users[o.user].0,
                ENDPOINT_LIMIT - routes[o.route].0,
                GLOBAL_LIMIT - global.0,
            ];
            if d.allowed {
                assert_eq!(d.blocked_by, None, "{ctx}: {o:?}");
                assert_eq!(d.retry_after, Duration::ZERO, "{ctx}: {o:?}");
                // Its own units were in every tier when it was admitted.
                assert!(d.remaining <= USER_LIMIT - o.cost, "{ctx}: {o:?}");
                if atomic {
                    // Counts only grow: what was left then is at least what is left now.
                    let least = *tiers_left.iter().min().unwrap();
                    assert!(
                        d.remaining >= least,
                        "{ctx}: {o:?}, {least} left at the end"
                    );
                }
            } else {
                let tier = d.blocked_by.unwrap_or_else(|| panic!("{ctx}: {o:?}"));
                assert_eq!(d.remaining, 0, "{ctx}: {o:?}");
                // Every entry is at the one frozen instant.
                assert_eq!(
                    d.retry_after,
                    window + Duration::from_micros(1),
                    "{ctx}: {o:?}"
                );
                global_denials += usize::from(tier == Tier::Global);
                // No wrong denial: the tier was (and stayed) too full for this cost. On the
                // cluster a reservation rolled back later may have made it look full.
                let (count, limit) = final_of(tier, o);
                if count + o.cost <= limit {
                    early_denials += 1;
                    assert!(
                        !atomic,
                        "{ctx}: {o:?} denied by {tier}, which ended with {count} of {limit}"
                    );
                }
            }
        }
        let demand: u64 = all.iter().map(|o| o.cost).sum();
        eprintln!(
            "concurrent on {name}, round {round}: {demand} units asked, {} admitted in {} \
             requests, {global_denials} global denials, {early_denials} denied early",
            global.0, global.1
        );
        if atomic {
            // Enough demand fills the global tier up to less than any cost it then denied.
            assert!(global_denials > 0, "{ctx}: the global tier never filled");
        }

        // Denied requests left nothing: the logs hold exactly the admitted requests...
        let entries = |tier: Tier, id: &str| -> usize {
            match &b {
                TestBackend::Memory => store.entries(tier, id),
                TestBackend::Redis(server) => {
                    let key = redis_key(&b, &prefix, tier, id);
                    server.cli(&["ZCARD", &key]).trim().parse().expect("ZCARD")
                }
                TestBackend::Cluster(cluster, _) => {
                    let key = redis_key(&b, &prefix, tier, id);
                    cluster
                        .cli_for(&key, &["ZCARD", &key])
                        .trim()
                        .parse()
                        .expect("ZCARD")
                }
            }
        };
        for (i, u) in CUSERS.iter().enumerate() {
            assert_eq!(
                entries(Tier::User, u),
                users[i].1,
                "{ctx}: entries of user {u}"
            );
        }
        for (i, r) in CROUTES.iter().enumerate() {
            assert_eq!(
                entries(Tier::Endpoint, r),
                routes[i].1,
                "{ctx}: entries of {r}"
            );
        }
        assert_eq!(entries(Tier::Global, ""), global.1, "{ctx}: global entries");

        // ... and, half a window later, count exactly the admitted units: a probe limiter on
        // the same keys with one tier and a large limit says how much is left.
        clock.advance(window / 2);
        let probe = |config: RateLimitConfigBuilder| {
            let (b, prefix, clock, store) = (&b, prefix.as_str(), &clock, &store);
            async move { limiter_on(b, config, prefix, clock, Some(store)).await }
        };
        let big = 1_000_000;
        let counted = |d: Decision| {
            assert!(d.allowed(), "{ctx}: probe denied: {d:?}");
            big - 1 - d.remaining()
        };
        let user_probe = probe(limits(big, 0, 0, window)).await;
        for (i, u) in CUSERS.iter().enumerate() {
            let n = counted(user_probe.check(u, "/probe").await);
            check_count(atomic, n, users[i].0, &format!("{ctx}: units of user {u}"));
        }
        let endpoint_probe = probe(limits(0, big, 0, window)).await;
        for (i, r) in CROUTES.iter().enumerate() {
            let n = counted(endpoint_probe.check("probe", r).await);
            check_count(atomic, n, routes[i].0, &format!("{ctx}: units of {r}"));
        }
        let global_probe = probe(limits(0, 0, big, window)).await;
        let n = counted(global_probe.check("probe", "/probe").await);
        check_count(atomic, n, global.0, &format!("{ctx}: units in all"));
    }
}

/// A probe's count against the admitted units: exact on atomic stores; on the cluster a
/// rolled-back member in the middle of a log leaves its cost in later running totals (docs:
/// "stricter for a while, never looser"), so only a lower bound holds there.
fn check_count(atomic: bool, counted: u64, admitted: u64, what: &str) {
    if atomic {
        assert_eq!(counted, admitted, "{what}");
    } else {
        assert!(
            counted >= admitted,
            "{what}: counted {counted} < {admitted}"
        );
    }
}

/// A tier's Redis key (docs/REDIS.md, "Keys"); ids here need no encoding.
fn redis_key(b: &TestBackend, prefix: &str, tier: Tier, id: &str) -> String {
    let prefix = match b {
        TestBackend::Cluster(_, own) => format!("{own}{prefix}"),
        _ => prefix.to_owned(),
    };
    match tier {
        Tier::Global => format!("{prefix}:global"),
        tier => format!("{prefix}:{tier}:{id}"),
    }
}

mod contract {
    pub use super::{concurrent_mixed_costs_are_exact, model_agrees_with_the_contract};
}

contract_tests!(
    model_agrees_with_the_contract,
    concurrent_mixed_costs_are_exact
);
