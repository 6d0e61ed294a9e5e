//! Which connections are idle: the service each connection is given is
//! wrapped so that a request counts as in progress from the moment hyper
//! hands it over until its response's body is written (or dropped). A
//! connection with none in progress may be closed by the idle timeout or
//! evicted at the cap; one with a request in progress never is.
//!
//! The response body, not the handler's future, ends the request: a large
//! page still being written to a slow reader is not idle.
//!
//! The answer to a `HEAD` request (a `405`: the contract has no `HEAD`
//! operation) keeps its headers and loses its body here. hyper leaves out
//! the body itself over HTTP/1.1, but over HTTP/2 it sends it, and a
//! client then ends the stream with `PROTOCOL_ERROR` (RFC 9110 §9.3.2: a
//! `HEAD` response has no content).
//!
//! The socket is wrapped too ([`Watched`]), below TLS, so that the table
//! knows which idle connections have begun to send (a handshake, a request
//! head) and which are silent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::Service;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::table::Slot;

/// A request in progress on its connection, until dropped.
struct InFlight(Arc<Slot>);

impl InFlight {
    fn start(slot: &Arc<Slot>) -> InFlight {
        slot.request_started();
        InFlight(Arc::clone(slot))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

/// `S`, with its connection's requests counted in progress.
pub(super) struct Tracked<S> {
    inner: S,
    slot: Arc<Slot>,
}

impl<S> Tracked<S> {
    pub(super) fn new(inner: S, slot: Arc<Slot>) -> Tracked<S> {
        Tracked { inner, slot }
    }
}

impl<S, B> Service<Request<Incoming>> for Tracked<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.slot);
        let head = request.method() == http::Method::HEAD;
        TrackedFuture {
            inner: self.inner.call(request),
            in_flight: Some(in_flight),
            head,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's future; its response's body takes the request
    /// over.
    pub(super) struct TrackedFuture<F> {
        #[pin]
        inner: F,
        in_flight: Option<InFlight>,
        head: bool,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx));
        let in_flight = this.in_flight.take();
        let head = *this.head;
        Poll::Ready(response.map(|response| {
            response.map(|inner| TrackedBody {
                inner,
                _in_flight: in_flight,
                head,
            })
        }))
    }
}

pin_project_lite::pin_project! {
    /// A response body; its request is in progress until it is dropped.
    /// Empty when it answers a `HEAD` request.
    pub(super) struct TrackedBody<B> {
        #[pin]
        inner: B,
        _in_flight: Option<InFlight>,
        head: bool,
    }
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if self.head {
            return Poll::Ready(None);
        }
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.head || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// A connection's socket, telling its slot when the peer sends.
    pub(super) struct Watched<I> {
        #[pin]
        inner: I,
        slot: Arc<Slot>,
    }
}

impl<I> Watched<I> {
    pub(super) fn new(inner: I, slot: Arc<Slot>) -> Watched<I> {
        Watched { inner, slot }
    }
}

impl<I: AsyncRead> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        this.slot.started();
        let before = buf.filled().len();
        let read = ready!(this.inner.poll_read(cx, buf));
        if buf.filled().len() > before {
            this.slot.received();
        }
        Poll::Ready(read)
    }
}

impl<I: AsyncWrite> AsyncWrite for Watched<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}
