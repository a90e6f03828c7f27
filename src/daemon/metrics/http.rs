//! The metrics endpoint's HTTP/1.x: one `GET` per connection, answered and closed.
//!
//! `GET /metrics` is the Prometheus text format, `GET /stats` the table of `vhostfs stats`.
//! A request is read up to its blank line (at most 8 KiB) with 1 s timeouts on the socket, so a
//! client that sends nothing, or reads nothing, holds the endpoint for a second at most.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::{prometheus, table, Registry};

const TIMEOUT: Duration = Duration::from_secs(1);
const MAX_REQUEST: usize = 8 << 10;

/// A connected stream with timeouts.
pub(super) trait Stream: Read + Write {
    fn set_timeouts(&self, t: Duration) -> io::Result<()>;
}

impl Stream for UnixStream {
    fn set_timeouts(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))?;
        self.set_write_timeout(Some(t))
    }
}

impl Stream for TcpStream {
    fn set_timeouts(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))?;
        self.set_write_timeout(Some(t))
    }
}

/// Reads the request head: up to its blank line, the end of the stream or [`MAX_REQUEST`].
fn read_head(s: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            break;
        }
    }
    Ok(head)
}

/// The status, content type and body for a request line.
fn respond(request_line: &str, registry: &Registry) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let mut words = request_line.split_whitespace();
    let (method, target) = (words.next(), words.next());
    let path = target.map(|t| t.split('?').next().unwrap_or(t));
    match (method, path) {
        (Some("GET"), Some("/metrics")) => (
            "200 OK",
            prometheus::CONTENT_TYPE,
            prometheus::encode(&registry.snapshot()),
        ),
        (Some("GET"), Some("/stats")) => ("200 OK", TEXT, table::table(&registry.snapshot())),
        (Some("GET"), Some(_)) => (
            "404 Not Found",
            TEXT,
            "not found: GET /metrics (Prometheus text format) or /stats (a table)\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            TEXT,
            "only GET is served\n".into(),
        ),
    }
}

/// Answers one request on `s` and closes it.
pub(super) fn answer(mut s: impl Stream, registry: &Registry) -> io::Result<()> {
    s.set_timeouts(TIMEOUT)?;
    let head = read_head(&mut s)?;
    let head = String::from_utf8_lossy(&head);
    let (status, content_type, body) = respond(head.lines().next().unwrap_or(""), registry);
    let response = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(response.as_bytes())?;
    s.flush()
}
