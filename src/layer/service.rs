//! [`RateLimit`]: the service [`RateLimitLayer`](super::RateLimitLayer) makes.

use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::extract::{self, user_key};
use super::future::ResponseFuture;
use super::rejection::{reject, with_headers};
use super::RateLimitLayer;
use crate::decision::Decision;
use crate::limiter::RateLimiter;
use crate::request::CheckRequest;

/// The service made by [`RateLimitLayer`].
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    pub(crate) inner: S,
    pub(crate) layer: RateLimitLayer,
}

impl<S> RateLimit<S> {
    /// The limiter behind the service.
    pub fn limiter(&self) -> &RateLimiter {
        &self.layer.limiter
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let user_id = self.layer.user_id.as_ref().and_then(|f| f(&parts));
        let ip = if user_id.is_none() {
            let ip = extract::peer_ip(&parts).map(|peer| self.layer.client_ip.client(&parts, peer));
            if ip.is_none() {
                extract::warn_no_user_once();
            }
            ip
        } else {
            None
        };
        let endpoint = self.layer.endpoint_of(&parts);
        let cost = self.layer.cost.as_ref().map_or(1, |f| f(&parts));
        let request = Request::from_parts(parts, body);
        let span = tracing::debug_span!(
            "rate_limit",
            tier = tracing::field::Empty,
            decision = tracing::field::Empty
        );
        // In memory the decision is made here and now: no boxed future, no service clone.
        let check = CheckRequest::new(user_key(&user_id, ip), endpoint.as_str()).with_cost(cost);
        let decided = span.in_scope(|| self.layer.limiter.check_now(check));
        let style = self.layer.limiter.config().headers();
        if let Some(decision) = decided {
            record_on(&span, &decision);
            if !decision.allowed() {
                let rejection = self.layer.rejection.as_ref();
                return ResponseFuture::rejected(reject(&decision, style, rejection));
            }
            return ResponseFuture::inner(self.inner.call(request), decision, style);
        }
        // A store that waits (Redis): keep the service that poll_ready made ready, leave a
        // fresh clone in its place, and decide in a boxed future.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.layer.limiter.clone();
        let rejection = self.layer.rejection.clone();
        let recorder = span.clone();
        let future = async move {
            let decision = limiter
                .check_request(
                    CheckRequest::new(user_key(&user_id, ip), endpoint.as_str()).with_cost(cost),
                )
                .await;
            record_on(&recorder, &decision);
            if !decision.allowed() {
                return Ok(reject(&decision, style, rejection.as_ref()));
            }
            let response = inner.call(request).await?;
            Ok(with_headers(response, &decision, style))
        };
        ResponseFuture::waiting(Box::pin(tracing::Instrument::instrument(future, span)))
    }
}

fn record_on(span: &tracing::Span, decision: &Decision) {
    let (d, tier) = crate::observe::labels(decision);
    span.record("decision", d);
    span.record("tier", tier);
}
