//! The 429: an RFC 9457 `application/problem+json` body naming the violated policy (or the
//! user's own rejection), and the rate-limit headers on every response.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::headers;
use super::RejectFn;
use crate::decision::Decision;
use crate::header_style::HeaderStyle;

/// The inner service's response, with the rate-limit headers (a `Retry-After` of its own is
/// kept).
#[inline]
pub(crate) fn with_headers<B>(
    mut response: Response<B>,
    decision: &Decision,
    style: HeaderStyle,
) -> Response<B> {
    headers::write_on_response(decision, style, response.headers_mut());
    response
}

/// The 429 (or the user's own rejection), with the rate-limit headers.
pub(crate) fn reject(
    decision: &Decision,
    style: HeaderStyle,
    custom: Option<&RejectFn>,
) -> Response<Bytes> {
    let mut response = match custom {
        Some(f) => f(decision),
        None => problem(decision),
    };
    headers::write(decision, style, response.headers_mut());
    response
}

/// RFC 9457 `application/problem+json`, naming the violated policy (the tier).
fn problem(decision: &Decision) -> Response<Bytes> {
    let tier = decision.blocked_by().map_or("rate", |t| t.as_str());
    let retry = decision.retry_after_secs();
    let detail = match decision.cost_limit() {
        _ if decision.by_block() => {
            format!("Requests of this {tier} are blocked; the block ends in {retry} s.")
        }
        Some(limit) => format!(
            "This request costs {} units, more than the {tier} limit of {limit}: \
             it can never be admitted.",
            decision.cost()
        ),
        None => format!("The {tier} rate limit is reached; retry after {retry} s."),
    };
    let block = if decision.by_block() {
        ",\"block\":true"
    } else {
        ""
    };
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
         \"detail\":\"{detail}\",\"policy\":\"{tier}\",\"retry_after\":{retry},\
         \"cost\":{}{block}}}",
        decision.cost()
    );
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
