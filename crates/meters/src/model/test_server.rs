//! A one-thread HTTP server for tests: answers a fixed list of requests, one connection each,
//! then ends and hands back what it was asked.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread::JoinHandle;

/// One request as received: the request line (`POST /model`) and the body.
pub(crate) type Request = (String, String);

/// Serves `replies` in order (status 200, the text as body); returns the base URL
/// (`http://127.0.0.1:<port>`) and the thread, whose result is the requests.
pub(crate) fn serve(replies: Vec<String>) -> (String, JoinHandle<Vec<Request>>) {
    serve_with_headers(replies.into_iter().map(|r| (String::new(), r)).collect())
}

/// [`serve`] with extra header lines per reply (each ending in `\r\n`).
pub(crate) fn serve_with_headers(
    replies: Vec<(String, String)>,
) -> (String, JoinHandle<Vec<Request>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let thread = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for (headers, reply) in replies {
            let (mut stream, _) = listener.accept().unwrap();
            let mut data = Vec::new();
            let mut buf = [0u8; 4096];
            let head_end = loop {
                let n = stream.read(&mut buf).unwrap();
                assert!(n > 0, "connection closed before the request ended");
                data.extend_from_slice(&buf[..n]);
                if let Some(pos) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                    break pos;
                }
            };
            let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
            let length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = data[head_end + 4..].to_vec();
            while body.len() < length {
                let n = stream.read(&mut buf).unwrap();
                assert!(n > 0, "connection closed before the body ended");
                body.extend_from_slice(&buf[..n]);
            }
            let line = head.lines().next().unwrap_or("");
            let line = line.rsplit_once(' ').map_or(line, |(l, _)| l).to_string();
            requests.push((line, String::from_utf8_lossy(&body).into_owned()));
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 {headers}Connection: close\r\n\r\n{reply}",
                reply.len()
            )
            .unwrap();
        }
        requests
    });
    (url, thread)
}
