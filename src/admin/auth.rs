//! The bearer token in front of the admin routes, compared in constant time.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderValue, StatusCode};
use sha2::{Digest, Sha256};

use super::problem;

/// A secret compared in constant time: as its SHA-256 digest, so that neither the position of
/// the first differing byte nor the length of either side changes the work done.
#[derive(Clone)]
pub(super) struct Secret([u8; 32]);

impl Secret {
    pub(super) fn new(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// Whether `candidate` is the secret: every byte of both digests is compared, whatever
    /// differs.
    pub(super) fn matches(&self, candidate: &[u8]) -> bool {
        let other: [u8; 32] = Sha256::digest(candidate).into();
        let diff = self
            .0
            .iter()
            .zip(other.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
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
}
