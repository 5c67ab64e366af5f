//! Metrics and tracing, observed from outside: a metrics recorder installed for this whole test
//! binary (so everything lives in one test), and a tracing subscriber writing to a buffer. The
//! stores seen: memory, a custom store that fails, Redis until it is killed, and Redis with the
//! opt-in recovery, killed and restarted.
#![cfg(all(feature = "redis", feature = "axum"))]

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use common::logs::Logs;
use common::{free_port, limits, RedisServer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tiered_ratelimit::observe::{
    BLOCK_CHANGES_TOTAL, CHECKS_TOTAL, FALLBACKS_TOTAL, RECOVERIES_TOTAL, STORE_DURATION_SECONDS,
    STORE_ERRORS_TOTAL,
};
use tiered_ratelimit::store::{Store, StoreError, StoreOutcome, StoreRequest};
use tiered_ratelimit::{Backend, BlockTarget, ManualClock, RateLimitLayer, RateLimiter, Tier};
use tower::ServiceExt;

const MINUTE: Duration = Duration::from_secs(60);

type Snap = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// What was recorded since the last snapshot (taking one resets the recorder's values).
fn snap(s: &Snapshotter) -> Snap {
    s.snapshot().into_vec()
}

/// The counter `name` with exactly these labels (0 if never incremented).
fn counter(s: &Snap, name: &str, labels: &[(&str, &str)]) -> u64 {
    s.iter()
        .find_map(|(key, _, _, value)| {
            let k = key.key();
            let same = k.name() == name
                && k.labels().count() == labels.len()
                && labels
                    .iter()
                    .all(|(n, v)| k.labels().any(|l| l.key() == *n && l.value() == *v));
            match (same, value) {
                (true, DebugValue::Counter(n)) => Some(*n),
                _ => None,
            }
        })
        .unwrap_or(0)
}

/// The counter `name` summed over all its label values.
fn counter_sum(s: &Snap, name: &str) -> u64 {
    s.iter()
        .filter(|(key, ..)| key.key().name() == name)
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

fn histogram_samples(s: &Snap, name: &str, backend: &str) -> usize {
    s.iter()
        .filter(|(key, ..)| {
            key.key().name() == name && key.key().labels().any(|l| l.value() == backend)
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Histogram(samples) => samples.len(),
            _ => 0,
        })
        .sum()
}

/// A custom store (`Backend::Custom`) whose every check fails.
#[derive(Clone)]
struct Failing;

impl Store for Failing {
    fn check(
        &self,
        _request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        std::future::ready(Err(StoreError::new("down")))
    }
    fn reset(&self, _tier: Tier, _id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::ready(Ok(()))
    }
    fn backend(&self) -> Backend {
        Backend::Custom
    }
}

/// A limiter of `limits` on `server`, connected, with timeouts no hiccup of a loaded machine
/// meets (a fallback in this test is a kill's).
async fn on_redis(
    server: &RedisServer,
    limits: tiered_ratelimit::RateLimitConfigBuilder,
) -> RateLimiter {
    let limiter = RateLimiter::connect(
        limits
            .redis_url(server.url())
            .redis_command_timeout(Duration::from_secs(2))
            .redis_connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
    )
    .await;
    assert_eq!(limiter.backend(), Backend::Redis);
    limiter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_spans_report_decisions_fallbacks_and_store_latency() {
    let recorder = DebuggingRecorder::new();
    let s = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let logs = Logs::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_env_filter("tiered_ratelimit=debug")
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    // Decisions, by tier.
    let memory = RateLimiter::new(limits(1, 0, 0, MINUTE).build().unwrap());
    assert!(memory.check("m", "/").await.allowed());
    assert!(!memory.check("m", "/").await.allowed());
    assert!(!memory.check("m", "/").await.allowed());
    let m = snap(&s);
    assert_eq!(
        counter(
            &m,
            CHECKS_TOTAL,
            &[("decision", "allowed"), ("tier", "none")]
        ),
        1
    );
    assert_eq!(
        counter(
            &m,
            CHECKS_TOTAL,
            &[("decision", "denied"), ("tier", "user")]
        ),
        2
    );
    assert_eq!(
        histogram_samples(&m, STORE_DURATION_SECONDS, "memory"),
        0,
        "memory is not timed"
    );

    // Blocks: refused requests count as `blocked`, not `denied`; blocks set and lifted count.
    let blocking = RateLimiter::new(limits(5, 5, 0, MINUTE).build().unwrap());
    let ends = [BlockTarget::User("b"), BlockTarget::Endpoint("/x")];
    for target in ends {
        blocking.block(target, MINUTE).await.unwrap();
    }
    assert!(blocking.check("b", "/").await.by_block());
    assert!(blocking.check("c", "/x").await.by_block());
    blocking.unblock(ends[0]).await.unwrap();
    let m = snap(&s);
    let blocked = |tier| counter(&m, CHECKS_TOTAL, &[("decision", "blocked"), ("tier", tier)]);
    assert_eq!((blocked("user"), blocked("endpoint")), (1, 1));
    let denied = counter(
        &m,
        CHECKS_TOTAL,
        &[("decision", "denied"), ("tier", "user")],
    );
    assert_eq!(denied, 0, "a block is not a full window");
    let changes = |action| counter(&m, BLOCK_CHANGES_TOTAL, &[("action", action)]);
    assert_eq!((changes("block"), changes("unblock")), (2, 1));

    // docs/POLICIES.md, "Metrics and tracing": store errors and latency have `backend` =
    // `redis` | `custom`. A custom store that fails lets the check through, counted and timed.
    let custom = RateLimiter::builder(limits(2, 0, 0, MINUTE).build().unwrap())
        .clock(ManualClock::new())
        .store(Failing)
        .build();
    assert!(custom.check("a", "/").await.allowed());
    let m = snap(&s);
    assert_eq!(histogram_samples(&m, STORE_DURATION_SECONDS, "custom"), 1);
    assert_eq!(counter(&m, STORE_ERRORS_TOTAL, &[("backend", "custom")]), 1);

    // Redis: store latency.
    let server = RedisServer::start();
    let redis = on_redis(&server, limits(5, 0, 0, MINUTE)).await;
    for _ in 0..3 {
        assert!(redis.check("r", "/").await.allowed());
    }
    let m = snap(&s);
    assert_eq!(histogram_samples(&m, STORE_DURATION_SECONDS, "redis"), 3);
    assert_eq!(
        counter(
            &m,
            CHECKS_TOTAL,
            &[("decision", "allowed"), ("tier", "none")]
        ),
        3
    );
    assert_eq!(counter_sum(&m, FALLBACKS_TOTAL), 0);

    // A fallback: counted once, with the error that caused it.
    drop(server);
    assert!(redis.check("r", "/").await.allowed());
    assert!(redis.check("r", "/").await.allowed());
    assert_eq!(redis.backend(), Backend::Memory);
    let m = snap(&s);
    assert_eq!(counter_sum(&m, FALLBACKS_TOTAL), 1);
    assert_eq!(
        counter(&m, FALLBACKS_TOTAL, &[("reason", "config")]),
        0,
        "a killed server is an outage"
    );
    assert!(counter(&m, STORE_ERRORS_TOTAL, &[("backend", "redis")]) >= 1);
    // docs/OPERATIONS.md: after a fallback "the latency lines stop, as memory checks are not
    // timed".
    for i in 0..10 {
        assert!(redis.check(&format!("t{i}"), "/").await.allowed());
    }
    let m = snap(&s);
    for backend in ["memory", "redis", "custom"] {
        let timed = histogram_samples(&m, STORE_DURATION_SECONDS, backend);
        assert_eq!(timed, 0, "timed as {backend} after the fallback");
    }
    // Redis absent at start: a second limiter, a second fallback.
    let absent = RateLimiter::connect(
        limits(5, 0, 0, MINUTE)
            .redis_url(format!("redis://127.0.0.1:{}", free_port()))
            .build()
            .unwrap(),
    )
    .await;
    assert_eq!(absent.backend(), Backend::Memory);
    assert_eq!(
        counter(&snap(&s), FALLBACKS_TOTAL, &[("reason", "unreachable")]),
        1
    );

    // A wrong password: a fallback for a configuration error, labelled so.
    let guarded = RedisServer::start();
    guarded.cli(&["CONFIG", "SET", "requirepass", "secret"]);
    let misconfigured = RateLimiter::connect(
        limits(5, 0, 0, MINUTE)
            .redis_url(format!("redis://:wrong@127.0.0.1:{}", guarded.port()))
            .build()
            .unwrap(),
    )
    .await;
    assert_eq!(misconfigured.backend(), Backend::Memory);
    let m = snap(&s);
    assert_eq!(counter(&m, FALLBACKS_TOTAL, &[("reason", "config")]), 1);
    assert_eq!(counter_sum(&m, FALLBACKS_TOTAL), 1);

    // docs/POLICIES.md, "Fallback recovery": "`tiered_ratelimit_fallbacks_total` /
    // `tiered_ratelimit_recoveries_total` count them", each swap to memory and each back.
    let mut recovering = RedisServer::start();
    let limiter = RateLimiter::connect(
        limits(3, 0, 0, MINUTE)
            .redis_url(recovering.url())
            .redis_command_timeout(Duration::from_secs(1))
            .redis_connect_timeout(Duration::from_secs(5))
            .redis_recovery(Duration::from_millis(50), Duration::from_millis(200))
            .build()
            .unwrap(),
    )
    .await;
    assert_eq!(limiter.backend(), Backend::Redis);
    snap(&s);
    for round in 0..2 {
        recovering.kill();
        assert!(limiter.check("u", "/").await.allowed());
        assert_eq!(limiter.backend(), Backend::Memory, "round {round}");
        assert_eq!(counter_sum(&snap(&s), FALLBACKS_TOTAL), 1, "round {round}");
        recovering.restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        while limiter.backend() != Backend::Redis && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(limiter.backend(), Backend::Redis, "round {round}");
        // Counted just after the swap: gather snapshots (each resets the values) until it is.
        let (mut recoveries, mut fallbacks) = (0, 0);
        while recoveries == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let m = snap(&s);
            recoveries += counter(&m, RECOVERIES_TOTAL, &[]);
            fallbacks += counter_sum(&m, FALLBACKS_TOTAL);
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // nothing counted twice
        let m = snap(&s);
        recoveries += counter(&m, RECOVERIES_TOTAL, &[]);
        fallbacks += counter_sum(&m, FALLBACKS_TOTAL);
        assert_eq!((recoveries, fallbacks), (1, 0), "round {round}");
    }

    // The layer's span carries the tier and the decision.
    let app = Router::new()
        .route("/x", get(|| async { "x" }))
        .route_layer(RateLimitLayer::new(
            limits(0, 1, 0, MINUTE).build().unwrap(),
        ));
    let request = || http::Request::get("/x").body(Body::empty()).unwrap();
    assert_eq!(app.clone().oneshot(request()).await.unwrap().status(), 200);
    assert_eq!(app.oneshot(request()).await.unwrap().status(), 429);
    // The same on Redis, where the check waits on the store inside the span.
    let span_server = RedisServer::start();
    let app = Router::new()
        .route("/x", get(|| async { "x" }))
        .route_layer(RateLimitLayer::from_limiter(
            on_redis(&span_server, limits(0, 1, 0, MINUTE)).await,
        ));
    assert_eq!(app.clone().oneshot(request()).await.unwrap().status(), 200);
    assert_eq!(app.oneshot(request()).await.unwrap().status(), 429);
    let text = logs.text();
    let spans: Vec<&str> = text.lines().filter(|l| l.contains("rate_limit{")).collect();
    let count = |tier: &str, decision: &str| {
        spans
            .iter()
            .filter(|l| l.contains(tier) && l.contains(decision))
            .count()
    };
    // One of each from memory, one from Redis.
    assert_eq!(count("tier=\"none\"", "decision=\"allowed\""), 2, "{text}");
    assert_eq!(
        count("tier=\"endpoint\"", "decision=\"denied\""),
        2,
        "{text}"
    );
    assert!(
        text.contains("falls back to in-memory state for good"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("ERROR") && l.contains("WRONGPASS") && l.contains("fix:")),
        "{text}"
    );
}
