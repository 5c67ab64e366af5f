//! [`ResponseFuture`]: the inner service's future (the check already made, in memory), a ready
//! 429, or, with a store that waits, the check and then the inner service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use super::body::ResponseBody;
use super::rejection::with_headers;
use crate::decision::Decision;
use crate::header_style::HeaderStyle;

pin_project! {
    /// The future of [`RateLimit`]: the inner service's future (the check is already made, in
    /// memory), a ready 429, or, with a store that waits, the check and then the inner service.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: FutureKind<F, B, E>,
    }
}

pin_project! {
    #[project = FutureKindProj]
    enum FutureKind<F, B, E> {
        Rejected { response: Option<Response<ResponseBody<B>>> },
        Inner { #[pin] future: F, decision: Decision, style: HeaderStyle },
        Waiting { future: BoxedResponse<B, E> },
    }
}

pub(crate) type BoxedResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn rejected(response: Response<ResponseBody<B>>) -> Self {
        Self {
            kind: FutureKind::Rejected {
                response: Some(response),
            },
        }
    }

    pub(crate) fn inner(future: F, decision: Decision, style: HeaderStyle) -> Self {
        Self {
            kind: FutureKind::Inner {
                future,
                decision,
                style,
            },
        }
    }

    pub(crate) fn waiting(future: BoxedResponse<B, E>) -> Self {
        Self {
            kind: FutureKind::Waiting { future },
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            FutureKindProj::Rejected { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
            FutureKindProj::Inner {
                future,
                decision,
                style,
            } => {
                let response = std::task::ready!(future.poll(cx))?;
                Poll::Ready(Ok(with_headers(response, decision, *style)))
            }
            FutureKindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}
