//! The reference model: the contract as the README and docs/POLICIES.md state it, one sliding
//! log of (time, cost) per key, written from the docs and not from any store.

use super::*;

/// Whole seconds, rounded up.
fn secs_up(us: u64) -> u64 {
    us.div_ceil(1_000_000)
}

/// The contract, as the README and docs/POLICIES.md state it: one sliding log of
/// (time, cost) per key.
pub(super) struct Model {
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
    pub(super) fn new(sc: &Scenario) -> Self {
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

    pub(super) fn check(&mut self, now: u64, user: usize, route: usize, cost: u64) -> Observed {
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
    pub(super) fn counted(&self, of: Blocked) -> bool {
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
    pub(super) fn block(&mut self, now: u64, of: Blocked) {
        if self.counted(of) {
            self.blocks.insert(of, now + BLOCK);
        }
    }

    pub(super) fn unblock(&mut self, of: Blocked) {
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
        // In every style on a 429 and on a shadow denial (README "Shadow mode": the
        // `Retry-After` a 429 would have carried, on a 200).
        if limited && (style != HeaderStyle::Ietf || !e.allowed || e.shadow_blocked_by.is_some()) {
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
    pub(super) fn step(&mut self, now: &mut u64, step: Step) -> Option<Observed> {
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

    /// `reset_user` forgets the user's general bucket and its bucket on the route with a user
    /// limit of its own (docs/POLICIES.md, "A route's user limit").
    pub(super) fn reset_user(&mut self, user: usize) {
        if let Some(key) = Self::user_key(user) {
            if self.sc.login.user_limit.is_some_and(|l| l > 0) {
                self.logs.remove(&format!("{key}@{}", route_name(LOGIN)));
            }
            self.logs.remove(&key);
        }
    }

    pub(super) fn reset_endpoint(&mut self, route: usize) {
        self.logs.remove(&Self::endpoint_key(route));
    }

    /// Every live entry's time (to aim clock steps at their last counted microsecond).
    pub(super) fn live_entries(&self, now: u64) -> Vec<u64> {
        let window = self.sc.window;
        self.logs
            .values()
            .flatten()
            .map(|&(t, _)| t)
            .filter(|&t| t + window >= now)
            .collect()
    }
}
