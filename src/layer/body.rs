//! [`ResponseBody`]: the inner service's body, or the rejection's.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The response body of [`RateLimit`](super::RateLimit): the inner service's body, or the
    /// rejection's: by default the 429's RFC 9457 `application/problem+json` document naming
    /// the policy, else what [`on_rejection`](crate::RateLimitLayer::on_rejection) returned.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Rejection { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn rejection(data: Bytes) -> Self {
        // An empty body is at its end at once (a header-only response, as gRPC statuses are).
        let data = (!data.is_empty()).then_some(data);
        Self {
            kind: Kind::Rejection { data },
        }
    }
}

impl<B: Default> Default for ResponseBody<B> {
    fn default() -> Self {
        Self::inner(B::default())
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Rejection { .. } => "rejection",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Rejection { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Rejection { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Rejection { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
