//! The bearer token in front of the admin routes, compared in constant time.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderValue, StatusCode};
use sha2::{Digest, Sha256};

use super::problem;

/// A secret compared in constant time: as its SHA-256 digest, so that neither the position of
/// the first differing byte nor the length of either side changes the work done. An empty
/// token (an unset environment variable read with `unwrap_or_default`, say) is no secret: it
/// matches nothing, so its routes fail closed.
#[derive(Clone)]
pub(super) struct Secret {
    digest: [u8; 32],
    unusable: bool,
}

impl Secret {
    pub(super) fn new(token: &str) -> Self {
        let unusable = !super::can_be_presented(token);
        if token.is_empty() {
            tracing::error!(
                "admin::require_bearer was given an empty token: every admin request will be \
                 refused with a 401"
            );
        } else if unusable {
            tracing::error!(
                "admin::require_bearer was given a token that ends with a space or a tab, or \
                 holds a control byte, which no request can present: every admin request will \
                 be refused with a 401"
            );
        }
        Self {
            digest: Sha256::digest(token.as_bytes()).into(),
            unusable,
        }
    }

    /// Whether `candidate` is the secret: every byte of both digests is compared, whatever
    /// differs. Never, for an empty secret or one no request can present.
    pub(super) fn matches(&self, candidate: &[u8]) -> bool {
        let other: [u8; 32] = Sha256::digest(candidate).into();
        let diff = self
            .digest
            .iter()
            .zip(other.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0 && !self.unusable
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(request: &Request) -> Option<&[u8]> {
    let value = request.headers().get(AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

/// Lets the request through only with the right bearer token; else a 401 (problem+json, with
/// `WWW-Authenticate: Bearer`) that says nothing of how the token differed.
pub(super) async fn require(secret: Secret, request: Request, next: Next) -> Response {
    // A missing header is compared too (as an empty token), so it takes the same work.
    let token = bearer(&request).unwrap_or_default();
    let presented = bearer(&request).is_some();
    if secret.matches(token) && presented {
        return next.run(request).await;
    }
    let mut response = problem(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "The admin routes need `Authorization: Bearer <token>` with the right token.",
    );
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        let secret = Secret::new("s3cret-token");
        assert!(secret.matches(b"s3cret-token"));
        for wrong in [
            &b""[..],
            b"s3cret-toke",
            b"s3cret-token ",
            b"s3cret-tokenX",
            b"S3cret-token",
            b"x3cret-token",
        ] {
            assert!(!secret.matches(wrong), "{wrong:?}");
        }
    }

    #[test]
    fn an_empty_token_matches_nothing_not_even_an_empty_bearer() {
        let secret = Secret::new("");
        for candidate in [&b""[..], b" ", b"x"] {
            assert!(!secret.matches(candidate), "{candidate:?}");
        }
    }
}
