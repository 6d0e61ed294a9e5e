//! A webhook receiver for tests: an HTTP server on loopback (or an HTTPS
//! one, with the certificate it is given) that records every request it
//! gets and answers as its script says (`200`, `500`, `429` with
//! `Retry-After`, `410`, or hanging past the sender's timeout).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// A request the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    /// Its headers (names in lower case).
    pub headers: hyper::HeaderMap,
    /// Its body.
    pub body: Bytes,
    /// When it arrived.
    pub at: SystemTime,
    /// The status it was answered; 0 for a hang (the sender gives up
    /// before the answer).
    pub answered: u16,
}

impl Received {
    /// Its `webhook-id` header.
    pub fn id(&self) -> &str {
        self.header("webhook-id")
    }

    /// The header `name`, or "" without it.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
    }

    /// Its body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a webhook body is JSON")
    }
}

/// How the receiver answers one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// This status, at once.
    Status(u16),
    /// This status with `Retry-After: seconds`.
    RetryAfter(u16, u64),
    /// Nothing for this long, then 200.
    Hang(Duration),
}

/// Decides each answer, from the request and how many requests with the
/// same `webhook-id` came before it (0 for the first).
pub type Script = dyn Fn(&Received, usize) -> Answer + Send + Sync;

/// A running receiver; stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    scheme: &'static str,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// A receiver that answers every request `200`.
    pub async fn healthy() -> Receiver {
        Receiver::start(|_, _| Answer::Status(200)).await
    }

    /// A receiver answering as `script` says.
    pub async fn start(
        script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static,
    ) -> Receiver {
        Receiver::start_with(None, script).await
    }

    /// A receiver over HTTPS, with `tls`'s certificate, answering as
    /// `script` says. It speaks HTTP/1.1 only, so it offers only that by
    /// ALPN, whatever `tls` offered.
    pub async fn start_tls(
        mut tls: rustls::ServerConfig,
        script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static,
    ) -> Receiver {
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        Receiver::start_with(Some(acceptor), script).await
    }

    async fn start_with(
        tls: Option<tokio_rustls::TlsAcceptor>,
        script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static,
    ) -> Receiver {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let task = tokio::spawn(serve(listener, tls, Arc::clone(&received), script));
        Receiver {
            addr,
            scheme,
            received,
            task,
        }
    }

    /// The URL of `path` on it.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("not poisoned").clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Script>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let received = Arc::clone(&received);
        let script = Arc::clone(&script);
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                // A handshake the sender refused (a certificate it does not
                // trust) ends here, with no request.
                Some(tls) => {
                    if let Ok(stream) = tls.accept(stream).await {
                        serve_connection(stream, received, script).await;
                    }
                }
                None => serve_connection(stream, received, script).await,
            }
        });
    }
}

async fn serve_connection(
    stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Script>,
) {
    let service = hyper::service::service_fn(move |request| {
        answer(request, Arc::clone(&received), Arc::clone(&script))
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn answer(
    request: Request<Incoming>,
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Script>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let mut request = Received {
        headers: parts.headers,
        body,
        at: SystemTime::now(),
        answered: 0,
    };
    let answer = {
        let mut received = received.lock().expect("not poisoned");
        let before = received
            .iter()
            .filter(|earlier| earlier.id() == request.id())
            .count();
        let answer = script(&request, before);
        request.answered = match answer {
            Answer::Status(status) | Answer::RetryAfter(status, _) => status,
            Answer::Hang(_) => 0,
        };
        received.push(request);
        answer
    };
    let mut response = Response::new(Full::new(Bytes::new()));
    match answer {
        Answer::Status(status) => *response.status_mut() = status_code(status),
        Answer::RetryAfter(status, seconds) => {
            *response.status_mut() = status_code(status);
            response
                .headers_mut()
                .insert("retry-after", seconds.to_string().parse().expect("digits"));
        }
        Answer::Hang(duration) => tokio::time::sleep(duration).await,
    }
    Ok(response)
}

fn status_code(status: u16) -> hyper::StatusCode {
    hyper::StatusCode::from_u16(status).expect("a valid status")
}
