//! A stand-in for the service on 127.0.0.1 that answers requests with fixed
//! replies (status, headers, body) and records what it received, for the
//! responses the real server cannot be driven to produce.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How long a client may take to send its request.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A request as the stub received it.
#[derive(Clone, Debug)]
pub struct Received {
    /// `GET /v1/pets?limit=5 HTTP/1.1`.
    pub request_line: String,
    /// Header names (lower-cased) and values.
    pub headers: Vec<(String, String)>,
    /// The body, as text.
    pub body: String,
}

impl Received {
    /// The value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One answer of the stub.
#[derive(Clone, Debug)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    /// `status` with `body` as `application/json`.
    pub fn json(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// The same reply with the header `name: value` as well.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn to_http(&self) -> String {
        let (status, body) = (self.status, &self.body);
        let headers: String = self
            .headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect();
        format!(
            "HTTP/1.1 {status} Stub\r\ncontent-type: application/json\r\n{headers}\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

/// The stub server; it stops when dropped.
pub struct Stub {
    base_url: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: JoinHandle<()>,
}

impl Stub {
    /// Starts a stub answering every request with `status` and `body`
    /// (`application/json`).
    pub async fn start(status: u16, body: String) -> Stub {
        Stub::replying(vec![Reply::json(status, body)]).await
    }

    /// Starts a stub answering the first request with the first of
    /// `replies`, the second with the second, and every request after the
    /// last reply with the last.
    pub async fn replying(replies: Vec<Reply>) -> Stub {
        assert!(!replies.is_empty(), "a stub needs a reply");
        let replies = Arc::new(replies);
        let next = Arc::new(AtomicUsize::new(0));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        // Serves until the stub is dropped, which aborts it; each request
        // is read within a deadline.
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let log = Arc::clone(&log);
                let replies = Arc::clone(&replies);
                let next = Arc::clone(&next);
                tokio::spawn(async move {
                    let reading = read_request(&mut socket);
                    let Ok(Some(request)) = tokio::time::timeout(READ_TIMEOUT, reading).await
                    else {
                        return;
                    };
                    log.lock().unwrap().push(request);
                    let i = next.fetch_add(1, Ordering::SeqCst).min(replies.len() - 1);
                    let _ = socket.write_all(replies[i].to_http().as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Stub {
            base_url,
            received,
            task,
        }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn url(&self) -> &str {
        &self.base_url
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one HTTP/1.1 request (head and `content-length` body): to the end
/// of the head (at most 64 KiB) and of the body, or of the stream.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if data.len() > 64 * 1024 {
            return None;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received {
        request_line,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
