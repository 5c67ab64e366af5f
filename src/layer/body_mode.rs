//! What body the layer's responses carry: the inner service's wrapped in [`ResponseBody`]
//! ([`WrappedBody`], the default, for any inner body), or the inner service's own type
//! ([`InnerBody`], chosen with [`RateLimitLayer::inner_body`](super::RateLimitLayer::inner_body)
//! for bodies made from [`Bytes`], such as axum's).

use bytes::Bytes;

use super::body::ResponseBody;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::WrappedBody {}
    impl Sealed for super::InnerBody {}
}

/// How a [`RateLimit`](super::RateLimit) service's responses carry their body: the inner
/// service's body `B` on an allowed request, the rejection's bytes on a denied one. Sealed:
/// implemented by [`WrappedBody`] and [`InnerBody`] only; only its `Body` is for users to name.
pub trait BodyMode<B>: sealed::Sealed {
    /// The body of the service's responses.
    type Body;

    /// The inner service's body, as the service answers it. Not part of the API.
    #[doc(hidden)]
    fn inner(body: B) -> Self::Body;

    /// The rejection's body (the 429's problem document, or what
    /// [`on_rejection`](super::RateLimitLayer::on_rejection) returned). Not part of the API.
    #[doc(hidden)]
    fn rejection(data: Bytes) -> Self::Body;
}

/// The default [`BodyMode`]: responses carry [`ResponseBody`], the inner service's body or the
/// rejection's, whatever the inner body's type.
#[derive(Clone, Copy, Debug, Default)]
pub struct WrappedBody;

/// The [`BodyMode`] of [`RateLimitLayer::inner_body`](super::RateLimitLayer::inner_body):
/// responses carry the inner service's own body type, and a rejection's body is made with its
/// `From<Bytes>`. An allowed request's response is the inner response as it was, headers
/// added; under axum, which boxes any body but its own, that saves a box and a layer of
/// indirection on every allowed response.
#[derive(Clone, Copy, Debug, Default)]
pub struct InnerBody;

impl<B> BodyMode<B> for WrappedBody {
    type Body = ResponseBody<B>;

    #[inline]
    fn inner(body: B) -> ResponseBody<B> {
        ResponseBody::inner(body)
    }

    #[inline]
    fn rejection(data: Bytes) -> ResponseBody<B> {
        ResponseBody::rejection(data)
    }
}

impl<B: From<Bytes>> BodyMode<B> for InnerBody {
    type Body = B;

    #[inline(always)]
    fn inner(body: B) -> B {
        body
    }

    #[inline]
    fn rejection(data: Bytes) -> B {
        B::from(data)
    }
}
