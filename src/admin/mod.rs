//! Admin routes, opt-in (feature `admin`): an axum [`Router`] over one [`RateLimiter`] that an
//! application mounts behind its own authentication, or behind a bearer token with
//! [`require_bearer`].
//!
//! | route | in | out |
//! |---|---|---|
//! | `GET /usage?user=ID&endpoint=ROUTE` (or `ip=ADDR` for an address-keyed caller; no `endpoint`: the unmatched-route key) | | `200` the [`Usage`](crate::Usage) JSON |
//! | `POST /reset` | `{"user": ID}` or `{"endpoint": ROUTE}` | `200 {"reset": {...}}` |
//! | `POST /block` | `{"user": ID}`, `{"ip": ADDR}` or `{"endpoint": ROUTE}`, and `"seconds": N` | `200 {"blocked": {...}, "seconds": N}` |
//! | `POST /unblock` | `{"user": ID}`, `{"ip": ADDR}` or `{"endpoint": ROUTE}` | `200 {"unblocked": {...}}` |
//!
//! Every error is `application/problem+json` (RFC 9457) with a `detail` naming the field: `400`
//! for a body or query that does not parse, names no target or several, or has an unknown field;
//! `422` for a block the configuration would never meet (the tier is off) or of no time or too
//! long; `503` when the store failed (Redis unreachable: the block did not land).
//!
//! ```
//! use axum::Router;
//! use tiered_ratelimit::{admin, RateLimitConfig, RateLimiter};
//!
//! # fn main() -> Result<(), tiered_ratelimit::ConfigError> {
//! let limiter = RateLimiter::new(RateLimitConfig::builder().user_limit(100).build()?);
//! let app: Router = Router::new()
//!     // ... the application's routes, behind RateLimitLayer::from_limiter(limiter.clone())
//!     .nest("/admin", admin::require_bearer(admin::router(limiter), "a long random token"));
//! # let _ = app;
//! # Ok(()) }
//! ```

use std::net::IpAddr;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};

use crate::block::BlockTarget;
use crate::limiter::{BlockError, RateLimiter};
use crate::request::{CheckRequest, UserKey};

mod auth;

/// The longest block the admin routes take (`seconds`): a year.
pub const MAX_BLOCK_SECONDS: u64 = 366 * 24 * 3600;

/// The admin routes over `limiter` (see the module docs), to mount with `Router::nest`. They
/// are not rate limited themselves (mount them outside the limited routes' layer).
pub fn router(limiter: RateLimiter) -> Router {
    Router::new()
        .route("/usage", get(usage))
        .route("/reset", post(reset))
        .route("/block", post(block))
        .route("/unblock", post(unblock))
        .with_state(limiter)
}

/// `router` behind `Authorization: Bearer <token>`: any other request (no header, another
/// scheme, a wrong token, a token that differs only in length) gets a `401` problem+json with
/// `WWW-Authenticate: Bearer`. The token is compared in constant time (as SHA-256 digests, so
/// neither the first differing byte nor the length shows in the time taken).
pub fn require_bearer(router: Router, token: impl AsRef<str>) -> Router {
    let secret = auth::Secret::new(token.as_ref());
    router.layer(axum::middleware::from_fn(move |request, next| {
        auth::require(secret.clone(), request, next)
    }))
}

/// Who or what a request names: exactly one of the three.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Target {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    /// Only for `/block`.
    #[serde(default, skip_serializing)]
    seconds: Option<u64>,
}

impl Target {
    fn parse(body: &Bytes) -> Result<Self, String> {
        serde_json::from_slice(body).map_err(|e| format!("the JSON body: {e}"))
    }

    fn block_target(&self) -> Result<BlockTarget<'_>, String> {
        match (&self.user, self.ip, &self.endpoint) {
            (Some(user), None, None) => Ok(BlockTarget::User(user)),
            (None, Some(ip), None) => Ok(BlockTarget::Ip(ip)),
            (None, None, Some(route)) => Ok(BlockTarget::Endpoint(route)),
            _ => Err("name exactly one of `user`, `ip` and `endpoint`".into()),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    user: Option<String>,
    ip: Option<IpAddr>,
    endpoint: Option<String>,
}

async fn usage(
    State(limiter): State<RateLimiter>,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Response {
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => return bad_request(format!("the query: {}", e.body_text())),
    };
    let user = match (&q.user, q.ip) {
        (Some(user), None) => UserKey::Id(user),
        (None, Some(ip)) => UserKey::Ip(ip),
        (None, None) => UserKey::Anonymous,
        _ => return bad_request("name `user` or `ip`, not both".into()),
    };
    let request = CheckRequest::new(user, q.endpoint.as_deref());
    match limiter.usage_request(request).await {
        Ok(usage) => json(StatusCode::OK, &usage),
        Err(e) => unavailable(&e),
    }
}

async fn reset(State(limiter): State<RateLimiter>, body: Bytes) -> Response {
    let target = match Target::parse(&body) {
        Ok(t) => t,
        Err(detail) => return bad_request(detail),
    };
    match (&target.user, target.ip, &target.endpoint, target.seconds) {
        (Some(user), None, None, None) => limiter.reset_user(user).await,
        (None, None, Some(route), None) => limiter.reset_endpoint(route).await,
        _ => return bad_request("name exactly one of `user` and `endpoint`".into()),
    }
    json(StatusCode::OK, &serde_json::json!({ "reset": target }))
}

async fn block(State(limiter): State<RateLimiter>, body: Bytes) -> Response {
    let target = match Target::parse(&body) {
        Ok(t) => t,
        Err(detail) => return bad_request(detail),
    };
    let Some(seconds) = target.seconds else {
        return bad_request("`seconds`: how long the block lasts, is missing".into());
    };
    if seconds > MAX_BLOCK_SECONDS {
        let detail = format!("`seconds`: {seconds} is more than {MAX_BLOCK_SECONDS} (a year)");
        return problem(StatusCode::UNPROCESSABLE_ENTITY, "Bad block", &detail);
    }
    let block = match target.block_target() {
        Ok(b) => b,
        Err(detail) => return bad_request(detail),
    };
    match limiter.block(block, Duration::from_secs(seconds)).await {
        Ok(()) => json(
            StatusCode::OK,
            &serde_json::json!({ "blocked": target, "seconds": seconds }),
        ),
        Err(e) => block_failed(&e),
    }
}

async fn unblock(State(limiter): State<RateLimiter>, body: Bytes) -> Response {
    let target = match Target::parse(&body) {
        Ok(t) => t,
        Err(detail) => return bad_request(detail),
    };
    if target.seconds.is_some() {
        return bad_request("`seconds` has no meaning for an unblock".into());
    }
    let block = match target.block_target() {
        Ok(b) => b,
        Err(detail) => return bad_request(detail),
    };
    match limiter.unblock(block).await {
        Ok(()) => json(StatusCode::OK, &serde_json::json!({ "unblocked": target })),
        Err(e) => block_failed(&e),
    }
}

fn block_failed(error: &BlockError) -> Response {
    match error {
        BlockError::Store(e) => unavailable(e),
        other => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Bad block",
            &other.to_string(),
        ),
    }
}

fn unavailable(error: &dyn std::error::Error) -> Response {
    let detail = format!("the rate limit store failed: {error}");
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "Store unavailable",
        &detail,
    )
}

fn bad_request(detail: String) -> Response {
    problem(StatusCode::BAD_REQUEST, "Bad request", &detail)
}

fn json(status: StatusCode, value: &impl Serialize) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An RFC 9457 `application/problem+json` response.
pub(crate) fn problem(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = json(status, &body);
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
