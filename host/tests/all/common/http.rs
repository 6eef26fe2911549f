//! A `keel serve` process on a free loopback port, and a plain HTTP/1.1
//! client over a TCP socket for talking to it (every byte sent is the
//! test's own, so bad requests are exactly as bad as written).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `keel serve`, killed if the test ends without stopping it.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    /// Its stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeProcess {
    /// Starts `keel --store STORE serve --listen 127.0.0.1:0 ARGS` and waits
    /// (30 s at most) for the address it listens on.
    pub fn start(store: &str, args: &[&str]) -> ServeProcess {
        let mut child = super::keel_bin()
            .args([
                "--store",
                store,
                "--log",
                "info",
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .env_remove("KEEL_STORE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split(';').next().unwrap_or("").trim().to_string();
                    let _ = tx.send(addr);
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                panic!("keel serve did not start: {}", log.lock().unwrap());
            }
        };
        ServeProcess { child, addr, log }
    }

    /// Sends SIGTERM and waits (30 s at most) for exit 0; returns the log.
    pub fn terminate(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let since = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "the server did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(100));
        let log = self.log.lock().unwrap().clone();
        assert_eq!(status.code(), Some(0), "{log}");
        log
    }

    /// One request; `token` goes in `Authorization: Bearer`.
    pub fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Reply {
        request(self.addr, method, path, token, &[], body.map(str::as_bytes))
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Reply {
        self.call("GET", path, token, None)
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &str) -> Reply {
        self.call("POST", path, token, Some(body))
    }
}

/// An answer: status, headers (lower-case names) and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    /// The error code of a JSON error answer.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request with `Connection: close` and reads the whole answer.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    send(&mut s, addr, method, path, token, extra, body);
    answer(s)
}

/// Writes one request with `Connection: close` on `s`.
pub fn send(
    s: &mut TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<&[u8]>,
) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (n, v) in extra {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    if let Some(b) = body {
        // The server may answer (413) and close before reading it all.
        let _ = s.write_all(b);
    }
}

/// Reads the whole answer to the request sent on `s`.
pub fn answer(mut s: TcpStream) -> Reply {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    parse(&read_reply(&mut s))
}

/// Reads one answer: up to its `Content-Length`, the end of its chunks, or
/// the connection's end (some peers keep it open despite `close`).
fn read_reply(s: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let body = &raw[end + 4..];
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                return raw;
            }
            if head.contains("transfer-encoding: chunked") && body.ends_with(b"0\r\n\r\n") {
                return raw;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return raw,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
}

fn parse(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One server-sent event as received.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Follows a run's event stream until the server ends it; returns the
/// events (keep-alive comments left out).
pub fn follow_events(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    last_event_id: Option<&str>,
) -> Vec<SseEvent> {
    let mut extra = vec![("Accept", "text/event-stream")];
    if let Some(id) = last_event_id {
        extra.push(("Last-Event-ID", id));
    }
    let reply = request(addr, "GET", path, token, &extra, None);
    sse_events(&reply)
}

/// The events of an event-stream answer (keep-alive comments left out).
pub fn sse_events(reply: &Reply) -> Vec<SseEvent> {
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/event-stream"));
    let mut out = Vec::new();
    for block in reply.body.split("\n\n") {
        let mut ev = SseEvent {
            id: None,
            event: None,
            data: String::new(),
        };
        let mut any = false;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                ev.id = Some(v.trim().to_string());
                any = true;
            } else if let Some(v) = line.strip_prefix("event:") {
                ev.event = Some(v.trim().to_string());
                any = true;
            } else if let Some(v) = line.strip_prefix("data:") {
                ev.data.push_str(v.trim_start());
                any = true;
            }
        }
        if any {
            out.push(ev);
        }
    }
    out
}

/// Polls `f` every 50 ms until it returns something (30 s at most).
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let since = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes a tokens file in `dir` naming each `(name, role, token)` by the
/// token's sha256; returns its path.
pub fn tokens_file(dir: &std::path::Path, callers: &[(&str, &str, &str)]) -> String {
    use sha2::{Digest, Sha256};
    let mut text = String::from("# who may call the API\n");
    for (name, role, token) in callers {
        text.push_str(&format!(
            "{name} {role} {}\n",
            hex::encode(Sha256::digest(token.as_bytes()))
        ));
    }
    let p = dir.join("tokens");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}
