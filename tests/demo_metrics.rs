//! The demo's `GET /metrics` over real HTTP: the Prometheus text format, counts that match the
//! requests sent, never limited and never a check; on Redis, the store latency histogram and a
//! fallback counted when that Redis is killed under the running demo.
#![cfg(all(feature = "redis", feature = "axum", feature = "admin"))]

mod common;

use common::demo::Demo;
use common::RedisServer;
use reqwest::StatusCode;
use tiered_ratelimit::observe::{
    CHECKS_TOTAL, FALLBACKS_TOTAL, STORE_DURATION_SECONDS, STORE_ERRORS_TOTAL,
};

/// `GET /api/v1/items` as `user`: the status.
async fn get(demo: &Demo, client: &reqwest::Client, user: &str) -> u16 {
    let resp = client.get(demo.url("/api/v1/items"));
    resp.header("x-user-id", user)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// `GET /metrics` (as `user`, to show that a scrape is no user's request): the text.
async fn scrape(demo: &Demo, client: &reqwest::Client, user: &str) -> Metrics {
    let resp = client
        .get(demo.url("/metrics"))
        .header("x-user-id", user)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/plain"), "{kind}");
    Metrics(resp.text().await.unwrap())
}

/// A scrape in the Prometheus text format.
struct Metrics(String);

impl Metrics {
    /// The sum of every series named `name` whose labels include all of `labels` (0 if none).
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name, labels).map(|(_, value)| value).sum()
    }

    /// Whether any series is named `name` with all of `labels`.
    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.series(name, labels).next().is_some()
    }

    /// `(labels, value)` of each series named `name` that has all of `labels`.
    fn series<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        self.0
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(move |line| {
                let (series, value) = line.rsplit_once(' ')?;
                let (metric, set) = match series.split_once('{') {
                    Some((metric, set)) => (metric, set.strip_suffix('}')?),
                    None => (series, ""),
                };
                let wanted = labels
                    .iter()
                    .all(|(k, v)| set.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
                (metric == name && wanted).then(|| (set, value.parse().unwrap()))
            })
    }
}

/// Limit 2 a user and 3 in all: u's three requests are 2 allowed and 1 denied (user), and the
/// scrape says exactly that. A hundred scrapes, by u too, are never limited and use none of the
/// global budget (v's request is still allowed, w's then denied by the global tier), and
/// `/rate-limit` shows the same usage before and after them.
#[tokio::test]
async fn metrics_count_the_checks_and_are_neither_limited_nor_checked() {
    let demo = Demo::start(&["--user-limit", "2", "--global-limit", "3"]);
    let client = reqwest::Client::new();
    let checks = |m: &Metrics, decision, tier| {
        m.sum(CHECKS_TOTAL, &[("decision", decision), ("tier", tier)])
    };
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get(&demo, &client, "u").await);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let m = scrape(&demo, &client, "u").await;
    assert!(
        m.0.contains("tiered_ratelimit_checks_total{decision=\"allowed\",tier=\"none\"} 2"),
        "{}",
        m.0
    );
    assert_eq!(checks(&m, "allowed", "none"), 2.0, "{}", m.0);
    assert_eq!(checks(&m, "denied", "user"), 1.0, "{}", m.0);
    assert_eq!(m.sum(CHECKS_TOTAL, &[]), 3.0, "{}", m.0);
    assert!(!m.has(STORE_DURATION_SECONDS, &[]), "memory is not timed");

    // `used` of each route and tier (`next_free_in_secs` runs down with the clock).
    let usage = |user: &'static str| {
        let request = client
            .get(demo.url("/rate-limit"))
            .header("x-user-id", user);
        async move {
            let text = request.send().await.unwrap().text().await.unwrap();
            let body: serde_json::Value = serde_json::from_str(&text).unwrap();
            let resources = body["resources"].as_object().unwrap();
            let used = resources.iter().flat_map(|(route, usage)| {
                let tiers = usage["tiers"].as_array().unwrap().iter();
                tiers.map(move |t| format!("{route} {}={}", t["tier"], t["used"]))
            });
            used.collect::<Vec<_>>()
        }
    };
    let before = usage("u").await;
    for _ in 0..100 {
        scrape(&demo, &client, "u").await;
    }
    assert_eq!(usage("u").await, before, "scrapes are not requests of u's");

    assert_eq!(
        get(&demo, &client, "v").await,
        200,
        "the scrapes used no budget"
    );
    assert_eq!(get(&demo, &client, "w").await, 429);
    let m = scrape(&demo, &client, "w").await;
    assert_eq!(checks(&m, "allowed", "none"), 3.0, "{}", m.0);
    assert_eq!(checks(&m, "denied", "user"), 1.0, "{}", m.0);
    assert_eq!(checks(&m, "denied", "global"), 1.0, "{}", m.0);
    assert_eq!(m.sum(CHECKS_TOTAL, &[]), 5.0, "{}", m.0);
}

/// On Redis every check is timed, in the sub-millisecond buckets the demo sets; killing that
/// Redis under the running demo counts one store error's fallback, and only one.
#[tokio::test]
async fn on_redis_the_latency_is_bucketed_and_a_dead_redis_is_one_fallback() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let demo = Demo::start(&[
        "--user-limit",
        "5",
        "--redis",
        &url,
        "--redis-timeout",
        "2s",
    ]);
    let client = reqwest::Client::new();
    for _ in 0..7 {
        get(&demo, &client, "r").await;
    }
    let m = scrape(&demo, &client, "r").await;
    let redis_label = [("backend", "redis")];
    let bucket = format!("{STORE_DURATION_SECONDS}_bucket");
    for le in ["0.0001", "0.0005", "0.001", "+Inf"] {
        assert!(
            m.has(&bucket, &[("backend", "redis"), ("le", le)]),
            "bucket le={le}:\n{}",
            m.0
        );
    }
    let count = m.sum(&format!("{STORE_DURATION_SECONDS}_count"), &redis_label);
    assert_eq!(count, 7.0, "one timed store call a check:\n{}", m.0);
    assert_eq!(m.sum(FALLBACKS_TOTAL, &[]), 0.0, "{}", m.0);
    assert_eq!(m.sum(CHECKS_TOTAL, &[("decision", "denied")]), 2.0);

    redis.kill();
    for _ in 0..5 {
        assert_eq!(get(&demo, &client, "after").await, 200);
    }
    let m = scrape(&demo, &client, "r").await;
    assert_eq!(m.sum(FALLBACKS_TOTAL, &[]), 1.0, "{}", m.0);
    assert!(m.sum(STORE_ERRORS_TOTAL, &redis_label) >= 1.0, "{}", m.0);
    // A killed server is refused or times out, depending on what the connection was doing.
    let reasons: Vec<_> = m.series(FALLBACKS_TOTAL, &[]).map(|(l, _)| l).collect();
    let outage = ["unreachable", "timeout", "error"].map(|r| format!("reason=\"{r}\""));
    assert!(
        reasons.len() == 1 && outage.iter().any(|r| r == reasons[0]),
        "{reasons:?}"
    );
    assert_eq!(m.sum(CHECKS_TOTAL, &[("decision", "allowed")]), 10.0);
}
