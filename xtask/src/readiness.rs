//! Whether a server we started answers yet.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The status an authenticated `GET /v1/pets?limit=20` gets from `addr`, if
/// it answers at all. Plain HTTP/1.1 over a socket, so readiness needs no
/// HTTP client. (The bench's ceiling answers only the scenarios' requests,
/// `list20` among them.)
pub fn status(addr: SocketAddr, key: &str) -> Option<u16> {
    let response = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            stream,
            "GET /v1/pets?limit=20 HTTP/1.1\r\nHost: {addr}\r\n\
             Authorization: Bearer {key}\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    };
    response()
        .ok()?
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()
}
