//! The rate limiter as a hyper `Service` around the server's own, one per
//! connection: it decides before the inner service sees the request, so
//! that a refused request costs a digest, a lookup and a GCRA step, and
//! nothing of it is read, routed or done.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use dropshot::Body;
use http::{Request, Response};

use super::budgets::Admitted;
use super::{Decision, Limits, refusal};

/// `inner`, rate limited; see the module's documentation.
#[derive(Clone)]
pub struct RateLimited<S> {
    inner: S,
    remote: SocketAddr,
    limits: Arc<Limits>,
}

impl<S> RateLimited<S> {
    /// `inner`, serving the connection from `remote`, under `limits`.
    pub fn new(inner: S, remote: SocketAddr, limits: Arc<Limits>) -> RateLimited<S> {
        RateLimited {
            inner,
            remote,
            limits,
        }
    }
}

impl<S, B> hyper::service::Service<Request<B>> for RateLimited<S>
where
    S: hyper::service::Service<Request<B>, Response = Response<Body>>,
    S::Future: Unpin,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Answer<S::Future>;

    fn call(&self, request: Request<B>) -> Answer<S::Future> {
        let started = Instant::now();
        match self.limits.decide(&request, self.remote) {
            Decision::Exempt => Answer::Inner {
                future: self.inner.call(request),
                admitted: None,
            },
            Decision::Admitted(admitted) => Answer::Inner {
                future: self.inner.call(request),
                admitted: Some(admitted),
            },
            Decision::Refused { refused, key } => Answer::Refused(Some(refusal::answer(
                &self.limits,
                &request,
                self.remote,
                started,
                refused,
                key,
            ))),
        }
    }
}

/// The answer: the inner service's, with the RateLimit fields added and
/// the key's place in flight held until it is ready; or a `429`.
pub enum Answer<F> {
    /// The inner service answers.
    Inner {
        /// Its answer.
        future: F,
        /// The fields to add and the place to give back; `None` for a path
        /// that is not limited.
        admitted: Option<Admitted>,
    },
    /// Refused; taken when polled.
    Refused(Option<Response<Body>>),
}

impl<F, E> Future for Answer<F>
where
    F: Future<Output = Result<Response<Body>, E>> + Unpin,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Inner { future, admitted } => {
                let mut response = std::task::ready!(Pin::new(future).poll(cx))?;
                // Dropping the admission gives the place in flight back.
                if let Some(admitted) = admitted.take() {
                    admitted.fields.write(response.headers_mut());
                }
                Poll::Ready(Ok(response))
            }
            Answer::Refused(response) => Poll::Ready(Ok(response
                .take()
                .expect("an answer is polled to its end once"))),
        }
    }
}
