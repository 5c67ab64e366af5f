//! Admin routes, opt-in (feature `admin`): an axum [`Router`] over one [`RateLimiter`] that an
//! application mounts behind its own authentication, or behind a bearer token with
//! [`require_bearer`].
//!
//! | route | in | out |
//! |---|---|---|
//! | `GET /usage?user=ID&endpoint=ROUTE` (or `ip=ADDR`, read as the layer keys it: IPv6 by its /64, or `ip=NET`; no `endpoint`: the unmatched-route key) | | `200` the [`Usage`](crate::Usage) JSON |
//! | `POST /reset` | `{"user": ID}` or `{"endpoint": ROUTE}` | `200 {"reset": {...}}` |
//! | `POST /block` | `{"user": ID}`, `{"ip": ADDR or NET}` or `{"endpoint": ROUTE}`, and `"seconds": N` | `200 {"blocked": {...}, "seconds": N}` |
//! | `POST /unblock` | `{"user": ID}`, `{"ip": ADDR or NET}` or `{"endpoint": ROUTE}` | `200 {"unblocked": {...}}` |
//!
//! POST bodies must be sent as `Content-Type: application/json` (else `415`: a form or
//! `text/plain` body is what another site can make a browser send). Every error is
//! `application/problem+json` (RFC 9457) with a `detail` naming the field: `400` for a body or
//! query that does not parse, names no target or several, names an empty `user` or `endpoint`
//! to block or unblock, or has an unknown field; `404` for another path; `405` for another
//! method on an admin path (with `Allow`); `413` for a body over axum's limit; `422` for a block the configuration would
//! never meet (the tier is off), of no time, too long, or of an IPv4 network; `503` when the
//! store failed (the change did not land or, after a timeout, may still land: repeat it).
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

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequest, Query, RawQuery, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};

use crate::block::{BlockError, BlockTarget, MAX_BLOCK};
use crate::limiter::RateLimiter;
use crate::request::{CheckRequest, UserKey};

mod auth;
mod query;

/// The admin routes over `limiter` (see the module docs), to mount with `Router::nest`. They
/// are not rate limited themselves (mount them outside the limited routes' layer).
pub fn router(limiter: RateLimiter) -> Router {
    Router::new()
        .route("/usage", get(usage))
        .route("/reset", post(reset))
        .route("/block", post(block))
        .route("/unblock", post(unblock))
        .fallback(|| async {
            let detail = "no such admin route: GET /usage, POST /reset, /block, /unblock";
            problem(StatusCode::NOT_FOUND, "Not Found", detail)
        })
        // (axum adds the `Allow` header to what this returns.)
        .method_not_allowed_fallback(|method: http::Method| async move {
            let detail =
                format!("{method} is not allowed here: GET /usage, POST /reset, /block, /unblock");
            problem(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                &detail,
            )
        })
        .with_state(limiter)
}

/// `router` behind `Authorization: Bearer <token>`: any other request (no header, another
/// scheme, a wrong token, a token that differs only in length) gets a `401` problem+json with
/// `WWW-Authenticate: Bearer`. The token is compared in constant time (as SHA-256 digests, so
/// neither the first differing byte nor the length shows in the time taken). An empty `token`
/// matches nothing: every request is refused (and an error is logged here); so does a token
/// no request can present (see [`can_be_presented`]).
pub fn require_bearer(router: Router, token: impl AsRef<str>) -> Router {
    let secret = auth::Secret::new(token.as_ref());
    router.layer(axum::middleware::from_fn(move |request, next| {
        auth::require(secret.clone(), request, next)
    }))
}

/// Whether a request can present `token` in `Authorization: Bearer <token>`, by HTTP's rules
/// for a header's value: not empty, no space or tab at its end (HTTP strips them from the end
/// of the value; at the start they follow `Bearer ` and arrive) and no control byte but tab
/// (below 0x20, or 0x7f: a header's value refuses them). Any other byte goes, UTF-8 included.
/// A token that cannot be presented matches nothing, so its routes refuse every request:
/// check it where the token is configured.
///
/// ```
/// use tiered_ratelimit::admin::can_be_presented;
/// assert!(can_be_presented("0123456789abcdef"));
/// assert!(can_be_presented("0123456789\tabcdef\u{a0}"));
/// assert!(can_be_presented(" 0123456789abcdef"));
/// assert!(!can_be_presented("0123456789abcdef "));
/// assert!(!can_be_presented("0123456789abcdef\t"));
/// assert!(!can_be_presented("0123456789\u{7}abcdef"));
/// ```
pub fn can_be_presented(token: &str) -> bool {
    let bytes = token.as_bytes();
    !bytes.is_empty()
        && !bytes.last().is_some_and(|b| *b == b' ' || *b == b'\t')
        && !bytes.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
}

/// Who or what a request names: exactly one of the three.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Target {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    /// An address (`192.0.2.7`, `2001:db8::1`: its /64) or a network (`2001:db8::/48`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    /// Only for `/block`.
    #[serde(default, skip_serializing)]
    seconds: Option<u64>,
}

/// The JSON body of a POST, which must say it is JSON: a body of another type (a form, or
/// `text/plain`, which a browser sends cross-site without asking) is refused with a 415; any
/// refusal is problem+json.
impl<S: Send + Sync> FromRequest<S> for Target {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let json = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            let detail = "the body must be JSON, sent with `Content-Type: application/json`";
            let status = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            return Err(problem(status, "Unsupported Media Type", detail));
        }
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|e: BytesRejection| problem(e.status(), "Bad body", &e.body_text()))?;
        serde_json::from_slice(&body).map_err(|e| bad_request(format!("the JSON body: {e}")))
    }
}

impl Target {
    fn block_target(&self) -> Result<BlockTarget<'_>, String> {
        match (&self.user, &self.ip, &self.endpoint) {
            // The layer never counts a request under an empty id (nor an empty route): such a
            // block would stop nothing, so it is refused, not reported as done.
            (Some(user), None, None) if user.is_empty() => Err(
                "`user`: an empty id names no user the layer counts (a request without a \
                     user id is counted by its address: block `ip`)"
                    .into(),
            ),
            (None, None, Some(route)) if route.is_empty() => {
                Err("`endpoint`: an empty route names no endpoint the layer counts".into())
            }
            (Some(user), None, None) => Ok(BlockTarget::User(user)),
            (None, Some(ip), None) => address(ip),
            (None, None, Some(route)) => Ok(BlockTarget::Endpoint(route)),
            _ => Err("name exactly one of `user`, `ip` and `endpoint`".into()),
        }
    }
}

/// `ip`: an address, or a network with its prefix length.
fn address(ip: &str) -> Result<BlockTarget<'static>, String> {
    let bad = |e: &dyn std::fmt::Display| format!("`ip`: {ip:?} is no address or network: {e}");
    if ip.contains('/') {
        ip.parse().map(BlockTarget::Net).map_err(|e| bad(&e))
    } else {
        ip.parse::<IpAddr>()
            .map(BlockTarget::Ip)
            .map_err(|e| bad(&e))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    user: Option<String>,
    ip: Option<String>,
    endpoint: Option<String>,
}

async fn usage(
    State(limiter): State<RateLimiter>,
    RawQuery(raw): RawQuery,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Response {
    if !raw.as_deref().is_none_or(query::decodes_to_utf8) {
        return bad_request("the query: not UTF-8 once percent-decoded".into());
    }
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => return bad_request(format!("the query: {}", e.body_text())),
    };
    // An address is read as the layer keys it (an IPv6 client by its /64, or the network
    // given), so that the usage is the bucket the layer counts.
    let grouped = match q.ip.as_deref().map(address) {
        Some(Ok(target)) => match target.bucket_address() {
            Ok(grouped) => grouped,
            Err(e) => return bad_request(format!("`ip`: {e}")),
        },
        Some(Err(detail)) => return bad_request(detail),
        None => None,
    };
    let user = match (&q.user, grouped) {
        (Some(user), None) => UserKey::Id(user),
        (None, Some(ip)) => UserKey::Ip(ip),
        (None, None) => UserKey::Anonymous,
        _ => return bad_request("name `user` or `ip`, not both".into()),
    };
    let request = CheckRequest::new(user, q.endpoint.as_deref());
    match limiter.usage_request(request).await {
        Ok(usage) => json(StatusCode::OK, &usage),
        Err(e) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Store unavailable",
            &format!(
                "the rate limit store failed: {}. Nothing was changed; ask again",
                sentence(&e)
            ),
        ),
    }
}

async fn reset(State(limiter): State<RateLimiter>, target: Target) -> Response {
    let done = match (&target.user, &target.ip, &target.endpoint, target.seconds) {
        (Some(user), None, None, None) => limiter.reset_user(user).await,
        (None, None, Some(route), None) => limiter.reset_endpoint(route).await,
        _ => return bad_request("name exactly one of `user` and `endpoint`".into()),
    };
    match done {
        Ok(()) => json(StatusCode::OK, &serde_json::json!({ "reset": target })),
        Err(e) => unavailable(&e),
    }
}

async fn block(State(limiter): State<RateLimiter>, target: Target) -> Response {
    let Some(seconds) = target.seconds else {
        return bad_request("`seconds`: how long the block lasts, is missing".into());
    };
    if seconds > MAX_BLOCK.as_secs() {
        let max = MAX_BLOCK.as_secs();
        let detail = format!("`seconds`: {seconds} is more than {max} (a year)");
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

async fn unblock(State(limiter): State<RateLimiter>, target: Target) -> Response {
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

/// The store failed. The change may not have landed, or (after a timeout) may still land
/// later: every admin change is safe to repeat.
fn unavailable(error: &dyn std::error::Error) -> Response {
    let detail = format!(
        "the rate limit store failed: {}. The change may not have landed (after a \
         timeout it may still land later); it is safe to repeat",
        sentence(error)
    );
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "Store unavailable",
        &detail,
    )
}

/// An error's text without its closing period, to go on in a sentence of its own (fred's end
/// in one: `Request timed out.`).
fn sentence(error: &dyn std::error::Error) -> String {
    error.to_string().trim_end_matches('.').to_owned()
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
