//! The admin routes (issue 13, item 5) over real HTTP: usage of anyone, reset, block and
//! unblock as JSON; problem+json errors naming the field; a bearer token compared in constant
//! time, refusing a missing, wrong, or length-only-different token.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tiered_ratelimit::{
    admin, CheckRequest, ManualClock, RateLimitLayer, RateLimiter, UserKey, MAX_BLOCK,
};

use crate::common::{limits, RedisServer, TestBackend};
use crate::config;

const TOKEN: &str = "correct-horse-battery-staple";
const MINUTE: Duration = Duration::from_secs(60);

/// The app: `/items` limited, the admin routes under `/admin` behind the token, not limited.
async fn serve(limiter: RateLimiter) -> String {
    let layer = RateLimitLayer::from_limiter(limiter.clone()).user_id_header("x-user-id");
    let app = Router::new()
        .route("/items", get(|| async { "items" }))
        .route_layer(layer)
        .nest(
            "/admin",
            admin::require_bearer(admin::router(limiter), TOKEN),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

struct Admin {
    url: String,
    client: reqwest::Client,
}

impl Admin {
    async fn post(&self, path: &str, body: &str) -> (StatusCode, String, Value) {
        let resp = self
            .client
            .post(format!("{}/admin{path}", self.url))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        reply(resp).await
    }

    async fn get(&self, path: &str) -> (StatusCode, String, Value) {
        let resp = self
            .client
            .get(format!("{}/admin{path}", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        reply(resp).await
    }

    async fn items(&self, user: &str) -> reqwest::Response {
        self.client
            .get(format!("{}/items", self.url))
            .header("x-user-id", user)
            .send()
            .await
            .unwrap()
    }
}

/// Status, content type and JSON body.
async fn reply(resp: reqwest::Response) -> (StatusCode, String, Value) {
    let status = resp.status();
    let kind = resp.headers()["content-type"].to_str().unwrap().to_owned();
    let body = resp.text().await.unwrap();
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, kind, json)
}

async fn admin_on(b: &TestBackend, user_limit: u64) -> Admin {
    admin_of(limiter_on(b, user_limit)).await
}

/// The limiter `admin_on` serves: `user_limit`, an endpoint limit of 100, a minute.
fn limiter_on(b: &TestBackend, user_limit: u64) -> RateLimiter {
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    RateLimiter::builder(config(b, limits(user_limit, 100, 0, MINUTE)))
        .clock(clock)
        .build()
}

/// The admin routes of `limiter`, served once it is connected.
async fn admin_of(limiter: RateLimiter) -> Admin {
    limiter.wait_connected().await;
    Admin {
        url: serve(limiter).await,
        client: reqwest::Client::new(),
    }
}

pub async fn usage_reset_block_and_unblock_over_http(b: TestBackend) {
    let admin = admin_on(&b, 3).await;
    assert_eq!(admin.items("alice").await.status(), 200);
    assert_eq!(admin.items("alice").await.status(), 200);
    let (status, _, usage) = admin.get("/usage?user=alice&endpoint=/items").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["tiers"][0]["tier"], "user");
    assert_eq!(usage["tiers"][0]["used"], 2, "{usage}");
    assert_eq!(usage["tiers"][0]["remaining"], 1, "{usage}");

    let (status, _, out) = admin.post("/reset", r#"{"user":"alice"}"#).await;
    assert_eq!(
        (status, &out),
        (StatusCode::OK, &json!({"reset": {"user": "alice"}}))
    );
    let (_, _, usage) = admin.get("/usage?user=alice&endpoint=/items").await;
    assert_eq!(usage["tiers"][0]["used"], 0, "{usage}");

    let block = r#"{"user":"mallory","seconds":120}"#;
    let (status, _, out) = admin.post("/block", block).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out, json!({"blocked": {"user": "mallory"}, "seconds": 120}));
    let refused = admin.items("mallory").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "120");
    // docs/OPERATIONS.md, "Admin routes": `POST /unblock` answers `200 {"unblocked": {...}}`.
    let (status, _, out) = admin.post("/unblock", r#"{"user":"mallory"}"#).await;
    assert_eq!(
        (status, &out),
        (StatusCode::OK, &json!({"unblocked": {"user": "mallory"}}))
    );
    assert_eq!(admin.items("mallory").await.status(), 200);

    let (status, _, _) = admin
        .post("/block", r#"{"ip":"192.0.2.9","seconds":5}"#)
        .await;
    assert_eq!(status, 200);
    let (status, _, _) = admin
        .post("/block", r#"{"endpoint":"/items","seconds":5}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(admin.items("anyone").await.status(), 429);
    // The admin routes are not limited: far past every limit, they still answer.
    for _ in 0..20 {
        let (status, _, _) = admin.get("/usage?user=bob").await;
        assert_eq!(status, 200);
    }
}

crate::on_every_backend!(admin: usage_reset_block_and_unblock_over_http);

/// docs/OPERATIONS.md, "Admin routes": a block of "at most a year" ([`MAX_BLOCK`]) lands;
/// one second more is a `422` naming `seconds`, and blocks nothing.
#[tokio::test]
async fn a_block_of_the_longest_time_lands_and_a_second_more_is_refused() {
    // "A year", as the docs say it: 366 days, so that a leap year fits.
    assert_eq!(MAX_BLOCK, Duration::from_secs(366 * 24 * 3600));
    let admin = admin_on(&TestBackend::memory(), 5).await;
    let longest = MAX_BLOCK.as_secs();
    let (status, _, out) = admin
        .post(
            "/block",
            &format!(r#"{{"user":"mallory","seconds":{longest}}}"#),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(admin.items("mallory").await.status(), 429);
    let (status, _, out) = admin
        .post(
            "/block",
            &format!(r#"{{"user":"eve","seconds":{}}}"#, longest + 1),
        )
        .await;
    assert_eq!(status, 422, "{out}");
    assert!(
        out["detail"].as_str().unwrap().contains("`seconds`"),
        "{out}"
    );
    assert_eq!(admin.items("eve").await.status(), 200);
}

#[tokio::test]
async fn every_bad_request_is_a_problem_naming_the_field() {
    let admin = admin_on(&TestBackend::memory(), 0).await;
    let cases: &[(&str, &str, u16, &str)] = &[
        ("/block", "{not json", 400, "JSON body"),
        (
            "/block",
            r#"{"user":"a","endpoint":"/b","seconds":1}"#,
            400,
            "exactly one",
        ),
        ("/block", r#"{"seconds":1}"#, 400, "exactly one"),
        (
            "/block",
            r#"{"user":"a","minutes":1}"#,
            400,
            "unknown field `minutes`",
        ),
        ("/block", r#"{"endpoint":"/items"}"#, 400, "`seconds`"),
        (
            "/block",
            r#"{"endpoint":"/items","seconds":-1}"#,
            400,
            "JSON body",
        ),
        (
            "/block",
            r#"{"endpoint":"/items","seconds":0}"#,
            422,
            "longer than zero",
        ),
        (
            "/block",
            r#"{"endpoint":"/items","seconds":99999999}"#,
            422,
            "`seconds`",
        ),
        (
            "/block",
            r#"{"ip":"not-an-ip","seconds":5}"#,
            400,
            "`ip`: \"not-an-ip\" is no address",
        ),
        // docs/OPERATIONS.md: `422` for a block the configuration would not enforce: an IPv4
        // network wider than one address, or
        (
            "/block",
            r#"{"ip":"10.0.0.0/8","seconds":60}"#,
            422,
            "one address at a time",
        ),
        // the user limit is 0: a user block would stop nothing.
        ("/block", r#"{"user":"a","seconds":5}"#, 422, "switched off"),
        ("/unblock", r#"{"user":"a","seconds":5}"#, 400, "`seconds`"),
        // The layer never counts a request under an empty id or route: a block of one would
        // stop nothing, and is refused rather than reported as done.
        (
            "/block",
            r#"{"user":"","seconds":5}"#,
            400,
            "`user`: an empty id",
        ),
        ("/unblock", r#"{"user":""}"#, 400, "`user`: an empty id"),
        (
            "/block",
            r#"{"endpoint":"","seconds":5}"#,
            400,
            "`endpoint`: an empty route",
        ),
        (
            "/reset",
            r#"{"ip":"192.0.2.1"}"#,
            400,
            "exactly one of `user` and `endpoint`",
        ),
    ];
    for &(path, body, status, detail) in cases {
        let (got, kind, problem) = admin.post(path, body).await;
        assert_eq!(got.as_u16(), status, "{path} {body}: {problem}");
        assert_eq!(kind, "application/problem+json", "{path} {body}");
        assert_eq!(problem["status"], status);
        let text = problem["detail"].as_str().unwrap();
        assert!(text.contains(detail), "{path} {body}: {text}");
    }
    // Another method on an admin path: a 405 problem, with `Allow`.
    let resp = admin
        .client
        .get(format!("{}/admin/block", admin.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["allow"], "POST");
    let (got, kind, problem) = reply(resp).await;
    assert_eq!(
        (got.as_u16(), kind.as_str()),
        (405, "application/problem+json")
    );
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("GET is not allowed"));
    // A path the routes do not serve: a 404 problem.
    let (got, kind, problem) = admin.get("/nope").await;
    assert_eq!(
        (got.as_u16(), kind.as_str()),
        (404, "application/problem+json"),
        "{problem}"
    );
    let (got, kind, problem) = admin.get("/usage?user=a&ip=192.0.2.1").await;
    assert_eq!(
        (got.as_u16(), kind.as_str()),
        (400, "application/problem+json")
    );
    assert!(problem["detail"].as_str().unwrap().contains("not both"));
    let (got, _, problem) = admin.get("/usage?ip=nope").await;
    assert_eq!(got.as_u16(), 400, "{problem}");
    // Bytes that are not UTF-8 are refused, not read as U+FFFD (another, real id: an audit).
    for query in ["user=%FF%FE", "user=ok&endpoint=%80"] {
        let (got, _, problem) = admin.get(&format!("/usage?{query}")).await;
        assert_eq!(got.as_u16(), 400, "{query}: {problem}");
        let text = problem["detail"].as_str().unwrap();
        assert!(text.contains("not UTF-8"), "{query}: {text}");
    }
    let (got, _, problem) = admin.get("/usage?ip=192.0.2.0/24").await;
    assert_eq!(got.as_u16(), 400, "{problem}");
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("one address at a time"));
}

/// docs/OPERATIONS.md, "Admin routes": `GET /usage` with no `endpoint` reads the
/// unmatched-route key.
#[tokio::test]
async fn a_usage_without_an_endpoint_reads_the_unmatched_route_key() {
    let limiter = limiter_on(&TestBackend::memory(), 5);
    let admin = admin_of(limiter.clone()).await;
    let unmatched = CheckRequest::new(UserKey::Id("u"), None);
    assert!(limiter.check_request(unmatched).await.allowed());
    let (status, _, usage) = admin.get("/usage?user=u").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["tiers"][1]["tier"], "endpoint", "{usage}");
    assert_eq!(usage["tiers"][1]["used"], 1, "{usage}");
}

#[tokio::test]
async fn without_the_right_token_every_admin_route_is_refused() {
    let admin = admin_on(&TestBackend::memory(), 5).await;
    let longer = format!("{TOKEN}x");
    let wrong_case = TOKEN.to_uppercase();
    let refused: Vec<Option<String>> = vec![
        None,
        Some(String::new()),
        Some("Bearer".into()),
        Some("Bearer ".into()),
        Some(format!("Basic {TOKEN}")),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])), // shorter by one
        Some(format!("Bearer {longer}")),                      // longer by one
        Some(format!("Bearer {wrong_case}")),
        Some(format!("Bearer  {TOKEN}")),
    ];
    for (path, post) in [("/usage?user=a", false), ("/block", true), ("/reset", true)] {
        for auth in &refused {
            let url = format!("{}/admin{path}", admin.url);
            let mut req = if post {
                admin.client.post(url).body(r#"{"user":"a","seconds":5}"#)
            } else {
                admin.client.get(url)
            };
            if let Some(auth) = auth {
                req = req.header("authorization", auth);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 401, "{path} with {auth:?}");
            assert_eq!(resp.headers()["www-authenticate"], "Bearer");
            let body = resp.text().await.unwrap();
            assert!(body.contains("\"status\":401"), "{body}");
        }
    }
    assert_eq!(admin.items("a").await.status(), 200, "nothing was blocked");
    let ok = admin
        .client
        .get(format!("{}/admin/usage?user=a", admin.url))
        .header("authorization", format!("bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200, "the scheme is case-insensitive");
}

/// An operator who passes an empty token (an unset variable read with `unwrap_or_default`) gets
/// routes that refuse everyone, not routes that take `Authorization: Bearer ` (an empty token,
/// which an in-process caller can send: over HTTP the trailing space is trimmed).
#[tokio::test]
async fn an_empty_token_refuses_every_request_even_an_empty_bearer() {
    use tower::ServiceExt;
    let b = TestBackend::memory();
    let limiter = RateLimiter::builder(config(&b, limits(5, 0, 0, MINUTE)))
        .clock(ManualClock::new())
        .build();
    let app = admin::require_bearer(admin::router(limiter), "");
    for auth in [None, Some("Bearer "), Some("Bearer"), Some("bearer x")] {
        let mut req = http::Request::get("/usage?user=a");
        if let Some(auth) = auth {
            req = req.header("authorization", http::HeaderValue::from_static(auth));
        }
        let resp = app
            .clone()
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{auth:?}");
    }
}

/// A store that fails: the block did not land, and the answer says so (503), not 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_that_redis_could_not_take_is_a_503() {
    let mut server = RedisServer::start();
    let limiter = crate::common::impatient_limiter(&server).await;
    let admin = Admin {
        url: serve(limiter).await,
        client: reqwest::Client::new(),
    };
    server.kill();
    let (status, kind, problem) = admin.post("/block", r#"{"user":"x","seconds":5}"#).await;
    assert_eq!(status, 503, "{problem}");
    assert_eq!(kind, "application/problem+json");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("store failed"), "{detail}");
    assert!(!detail.contains(".."), "one sentence ends once: {detail}");
}
