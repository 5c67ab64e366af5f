//! What the layer answers as the README and docs/POLICIES.md show it: the default 429 body to
//! the byte, `Retry-After` on a window under a second, no header where no tier applies, and a
//! cost of 0.

use std::time::Duration;

use http::StatusCode;
use http_body_util::BodyExt;
use tiered_ratelimit::{
    CheckRequest, ManualClock, RateLimitConfig, RateLimitLayer, RateLimiter, Tier, UserKey,
};
use tower::{Layer, ServiceExt};

use crate::common::http::{config, get_as, header_user_id, items_router, serve};

/// README (the demo) and docs/POLICIES.md, "Headers, the 429 body": the default 429 is
/// `application/problem+json`, 166 bytes, the line the README shows.
#[tokio::test]
async fn the_default_429_body_is_the_one_the_readme_shows() {
    let readme = include_str!("../../README.md");
    let shown = readme
        .lines()
        .find(|l| l.starts_with(r#"{"type":"about:blank""#))
        .expect("the README's 429 body");
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let limiter = RateLimiter::builder(config(5, 100, 1000))
        .clock(clock.clone())
        .build();
    let svc = header_user_id(RateLimitLayer::from_limiter(limiter))
        .endpoint(|_| Some("/api/v1/items/{id}".to_owned()))
        .layer(tower::service_fn(|_req: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::from("item")))
        }));
    let request = || {
        http::Request::builder()
            .header("x-user-id", "bob")
            .body(String::new())
            .unwrap()
    };
    for _ in 0..5 {
        let r = svc.clone().oneshot(request()).await.unwrap();
        assert_eq!(r.status(), 200);
    }
    clock.advance(Duration::from_secs(1));
    let r = svc.oneshot(request()).await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(r.headers()["retry-after"], "60");
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(std::str::from_utf8(&body).unwrap(), shown);
    assert_eq!(body.len(), 166, "the README's content-length");
}

/// README, "Headers": "`Retry-After`: whole seconds, rounded up ... at least `1` on a 429",
/// with a window under a second.
#[tokio::test]
async fn a_sub_second_window_still_says_retry_after_one() {
    let config = RateLimitConfig::builder()
        .window(Duration::from_millis(300))
        .user_limit(1)
        .build()
        .unwrap();
    // On a manual clock: the second request meets the first's entry however slow the machine.
    let limiter = RateLimiter::builder(config)
        .clock(ManualClock::at(Duration::from_secs(1_000_000)))
        .build();
    let app = items_router().route_layer(header_user_id(RateLimitLayer::from_limiter(limiter)));
    let url = format!("{}/api/v1/items", serve(app, false).await);
    let client = reqwest::Client::new();
    assert_eq!(
        get_as(&client, &url, Some("a")).await.status,
        StatusCode::OK
    );
    let r = get_as(&client, &url, Some("a")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.retry_after.as_deref(), Some("1"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["retry_after"], 1, "{body}");
}

/// README, "Headers": "A request no tier applies to (every limit 0, ...) carries no
/// rate-limit header."
#[tokio::test]
async fn with_every_limit_zero_no_rate_limit_header_is_sent() {
    let app = items_router().route_layer(header_user_id(RateLimitLayer::new(config(0, 0, 0))));
    let url = format!("{}/api/v1/items", serve(app, true).await);
    let client = reqwest::Client::new();
    for user in [Some("a"), None] {
        let r = get_as(&client, &url, user).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.remaining, None, "{user:?}");
        assert_eq!(r.retry_after, None, "{user:?}");
    }
}

/// docs/POLICIES.md, "Request cost": "A request spends `n` units in every tier; 0 counts as
/// 1", through `check_n`, `CheckRequest::with_cost` and the layer's `.cost` closure.
#[tokio::test]
async fn a_cost_of_zero_counts_as_one() {
    let limiter = RateLimiter::builder(config(3, 10, 0))
        .clock(ManualClock::new())
        .build();
    let d = limiter.check_n("u", "/", 0).await;
    assert_eq!(
        (d.allowed(), d.remaining(), d.cost()),
        (true, 2, 1),
        "{d:?}"
    );
    let d = limiter
        .check_request(CheckRequest::new(UserKey::Id("u"), Some("/")).with_cost(0))
        .await;
    assert_eq!(d.remaining(), 1, "{d:?}");
    let usage = limiter.usage("u", "/").await.unwrap();
    assert_eq!(usage.tier(Tier::User).unwrap().used, 2);
    assert_eq!(usage.tier(Tier::Endpoint).unwrap().used, 2);

    let layer = header_user_id(RateLimitLayer::new(config(3, 10, 0))).cost(|_| 0);
    let url = format!(
        "{}/api/v1/items",
        serve(items_router().route_layer(layer), false).await
    );
    let client = reqwest::Client::new();
    let mut answers = Vec::new();
    for _ in 0..4 {
        let r = get_as(&client, &url, Some("z")).await;
        answers.push((r.status.as_u16(), r.remaining.unwrap()));
    }
    assert_eq!(
        answers,
        [
            (200, "2".into()),
            (200, "1".into()),
            (200, "0".into()),
            (429, "0".into())
        ]
    );
}
