//! [`RateLimit`]: the service [`RateLimitLayer`](super::RateLimitLayer) makes.

use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;
use tracing::level_filters::LevelFilter;
use tracing::Level;

use super::body_mode::{BodyMode, WrappedBody};
use super::extract::{self, user_key, Head};
use super::future::{Answered, ResponseFuture};
use super::rejection::{reject, with_headers};
use super::RateLimitLayer;
use crate::decision::Decision;
use crate::header_style::HeaderStyle;
use crate::limiter::{Pending, RateLimiter};
use crate::request::CheckRequest;

/// The service made by [`RateLimitLayer`]; its responses carry the body of `A` (see
/// [`BodyMode`]).
#[derive(Clone, Debug)]
pub struct RateLimit<S, A = WrappedBody> {
    pub(crate) inner: S,
    pub(crate) layer: RateLimitLayer<A>,
}

impl<S, A> RateLimit<S, A> {
    /// The limiter behind the service.
    pub fn limiter(&self) -> &RateLimiter {
        self.layer.limiter()
    }
}

impl<S, A, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, A>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: 'static,
    A: BodyMode<ResBody>,
{
    type Response = Response<A::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error, A>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // A span only when a subscriber may take it, and else none at all: building a disabled
        // one costs a callsite check and, with no subscriber and tracing's `log` feature
        // (axum's default), a record of its fields for `log`; even `Span::none()` costs entering
        // and dropping it, about 60 instructions a request for nothing.
        let span = (LevelFilter::current() >= Level::DEBUG).then(|| {
            tracing::debug_span!(
                "rate_limit",
                tier = tracing::field::Empty,
                decision = tracing::field::Empty
            )
        });
        // In memory the decision is made here and now, with the user id borrowed from the
        // request: no allocation, no boxed future, no service clone. The request is taken
        // apart only for a closure that takes its `Parts`, and otherwise not moved before the
        // inner service takes it.
        // The header style comes with the decision, from the configuration the check used.
        let (decided, style) = if self.layer.needs_parts() {
            let (checked, whole) = self.check_parts(span.as_ref(), request);
            request = whole;
            checked
        } else {
            in_span(span.as_ref(), || self.check(Head::of(&request)))
        };
        let pending = match decided {
            Ok(decision) => {
                record_on(span.as_ref(), &decision);
                if !decision.allowed() {
                    let rejection = self.layer.rejection();
                    return ResponseFuture::rejected(reject(&decision, style, rejection));
                }
                return ResponseFuture::inner(self.inner.call(request), decision, style);
            }
            Err(pending) => pending,
        };
        // A store that waits (Redis): keep the service that poll_ready made ready, leave a
        // fresh clone in its place, and take the keys (worked out once, above) to the store in
        // a boxed future.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.layer.limiter().clone();
        let rejection = self.layer.rejection().cloned();
        let span = span.unwrap_or_else(tracing::Span::none);
        let recorder = span.clone();
        let future = async move {
            let decision = limiter.finish(pending).await;
            record_on(Some(&recorder), &decision);
            if !decision.allowed() {
                return Ok(Answered::Rejected(reject(
                    &decision,
                    style,
                    rejection.as_ref(),
                )));
            }
            let response = inner.call(request).await?;
            Ok(Answered::Inner(with_headers(response, &decision, style)))
        };
        ResponseFuture::waiting(Box::pin(tracing::Instrument::instrument(future, span)))
    }
}

impl<S, A> RateLimit<S, A> {
    /// Checks a request taken apart for a closure that takes its `Parts`; gives it back whole.
    #[inline(never)]
    fn check_parts<B>(
        &self,
        span: Option<&tracing::Span>,
        request: Request<B>,
    ) -> ((Result<Decision, Pending>, HeaderStyle), Request<B>) {
        let (parts, body) = request.into_parts();
        let checked = in_span(span, || self.check(Head::Parts(&parts)));
        (checked, Request::from_parts(parts, body))
    }

    /// Checks a request's head: the decision when the store answers at once, else the
    /// pending check for the store that waits.
    #[inline]
    fn check(&self, head: Head<'_>) -> (Result<Decision, Pending>, HeaderStyle) {
        let layer = &self.layer;
        let user_id = layer.user_id_in(head);
        let ip = if user_id.is_none() {
            let ip = layer.client_ip_of(head);
            if ip.is_none() {
                extract::warn_no_user_once();
            }
            ip
        } else {
            None
        };
        let endpoint = layer.endpoint_of(head);
        let check = CheckRequest::new(user_key(user_id.as_deref(), ip), endpoint.as_str())
            .with_cost(layer.cost_of(head));
        layer.limiter().check_now(check)
    }
}

/// `f`, in `span` if there is one.
#[inline]
fn in_span<R>(span: Option<&tracing::Span>, f: impl FnOnce() -> R) -> R {
    match span {
        Some(span) => span.in_scope(f),
        None => f(),
    }
}

/// Records the decision on the check's span, if any subscriber takes it (a disabled span still
/// looks its fields up by name, a few hundred instructions a request for nothing).
#[inline]
fn record_on(span: Option<&tracing::Span>, decision: &Decision) {
    let Some(span) = span.filter(|span| !span.is_disabled()) else {
        return;
    };
    let (d, tier) = crate::observe::labels(decision);
    span.record("decision", d);
    span.record("tier", tier);
}
