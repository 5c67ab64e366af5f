//! [`ResponseFuture`]: the inner service's future (the check already made, in memory), a ready
//! 429, or, with a store that waits, the check and then the inner service.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

use super::body_mode::{BodyMode, WrappedBody};
use super::rejection::with_headers;
use crate::decision::Decision;
use crate::header_style::HeaderStyle;

pin_project! {
    /// The future of [`RateLimit`](super::RateLimit): the inner service's future (the check is
    /// already made, in memory), a ready 429, or, with a store that waits, the check and then
    /// the inner service. Its response's body is `A`'s (see [`BodyMode`]).
    pub struct ResponseFuture<F, B, E, A = WrappedBody> {
        #[pin]
        kind: FutureKind<F, B, E>,
        mode: PhantomData<fn() -> A>,
    }
}

pin_project! {
    #[project = FutureKindProj]
    enum FutureKind<F, B, E> {
        Rejected { response: Option<Response<Bytes>> },
        Inner { #[pin] future: F, decision: Decision, style: HeaderStyle },
        Waiting { future: BoxedAnswer<B, E> },
    }
}

/// What a check that waited for its store ends in: the inner service's response (headers
/// added) or the rejection.
pub(crate) enum Answered<B> {
    Inner(Response<B>),
    Rejected(Response<Bytes>),
}

pub(crate) type BoxedAnswer<B, E> = Pin<Box<dyn Future<Output = Result<Answered<B>, E>> + Send>>;

impl<F, B, E, A> ResponseFuture<F, B, E, A> {
    fn of(kind: FutureKind<F, B, E>) -> Self {
        Self {
            kind,
            mode: PhantomData,
        }
    }

    pub(crate) fn rejected(response: Response<Bytes>) -> Self {
        Self::of(FutureKind::Rejected {
            response: Some(response),
        })
    }

    pub(crate) fn inner(future: F, decision: Decision, style: HeaderStyle) -> Self {
        Self::of(FutureKind::Inner {
            future,
            decision,
            style,
        })
    }

    pub(crate) fn waiting(future: BoxedAnswer<B, E>) -> Self {
        Self::of(FutureKind::Waiting { future })
    }
}

impl<F, B, E, A> fmt::Debug for ResponseFuture<F, B, E, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E, A> Future for ResponseFuture<F, B, E, A>
where
    F: Future<Output = Result<Response<B>, E>>,
    A: BodyMode<B>,
{
    type Output = Result<Response<A::Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            FutureKindProj::Rejected { response } => Poll::Ready(Ok(response
                .take()
                .expect("polled after completion")
                .map(A::rejection))),
            FutureKindProj::Inner {
                future,
                decision,
                style,
            } => {
                let response = std::task::ready!(future.poll(cx))?;
                Poll::Ready(Ok(with_headers(response, decision, *style).map(A::inner)))
            }
            FutureKindProj::Waiting { future } => Poll::Ready(
                std::task::ready!(future.as_mut().poll(cx)).map(|answer| match answer {
                    Answered::Inner(response) => response.map(A::inner),
                    Answered::Rejected(response) => response.map(A::rejection),
                }),
            ),
        }
    }
}
