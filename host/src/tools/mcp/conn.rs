//! One live connection to an MCP server: the child process (in a process
//! group of its own, killed whole when the connection is dropped) or the
//! HTTP session, the rmcp client on it, the last lines of the server's
//! stderr, and what the server sent besides answers.

use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
#[allow(deprecated)] // logging notifications are still sent, and counted
use rmcp::model::{
    ClientCapabilities, ClientConfig, CustomNotification, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Lines of the server's stderr kept for error messages.
const STDERR_LINES: usize = 20;
/// Bytes of one stderr line kept.
const STDERR_LINE_BYTES: usize = 400;
/// Bytes of a line that is not JSON-RPC quoted in an error.
const GARBAGE_QUOTE_BYTES: usize = 120;
/// The largest JSON-RPC line read from a stdio server.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// How to reach a server.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A child process spoken to over its stdin and stdout.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// Variables set for it, besides the few passed from Keel's environment.
        env: Vec<(String, String)>,
        /// Its working directory.
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
    },
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Stdio { command, .. } => {
                let shown: Vec<String> = command
                    .iter()
                    .map(|a| keel_vocab::render::cap(a, 80))
                    .collect();
                write!(f, "`{}`", shown.join(" "))
            }
            Endpoint::Http { url } => write!(f, "{}", keel_vocab::render::cap(url, 200)),
        }
    }
}

/// What the server sent besides answers, counted for the call in flight.
#[derive(Default)]
pub struct Events {
    /// Notifications of any kind since the connection opened.
    pub notifications: AtomicU64,
    /// The server said its tool list changed, and no one has listed since.
    pub tools_changed: AtomicBool,
    /// Why stdout cannot be trusted any more: the first line that was not
    /// JSON-RPC (quoted), or a message over [`MAX_LINE_BYTES`].
    pub garbage: Mutex<Option<String>>,
    /// Progress notifications per progress token (one token per call).
    pub progress: Mutex<std::collections::HashMap<String, u64>>,
    /// Woken on every notification and on garbage.
    pub wake: tokio::sync::Notify,
}

impl Events {
    fn notified(&self) {
        self.notifications.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_waiters();
    }

    pub fn garbage(&self) -> Option<String> {
        self.garbage.lock().ok().and_then(|g| g.clone())
    }

    fn broken(&self, why: String) {
        if let Ok(mut g) = self.garbage.lock() {
            g.get_or_insert(why);
        }
        self.wake.notify_waiters();
    }

    /// Counts `token`'s progress notifications from now on.
    pub fn track(&self, token: &str) {
        if let Ok(mut m) = self.progress.lock() {
            m.insert(token.to_string(), 0);
        }
    }

    /// Progress notifications so far for `token`.
    pub fn progress_of(&self, token: &str) -> u64 {
        self.progress
            .lock()
            .map(|m| m.get(token).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Forgets `token` once its call is over.
    pub fn forget(&self, token: &str) {
        if let Ok(mut m) = self.progress.lock() {
            m.remove(token);
        }
    }
}

/// The client side of the protocol: Keel offers no sampling, roots or
/// elicitation; it only counts what the server sends.
pub struct Handler {
    events: Arc<Events>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let token = match &params.progress_token.0 {
            rmcp::model::NumberOrString::String(s) => s.to_string(),
            rmcp::model::NumberOrString::Number(n) => n.to_string(),
        };
        if let Ok(mut m) = self.events.progress.lock() {
            // Only tokens of calls in flight are counted: a server cannot
            // grow the map with tokens of its own.
            if let Some(n) = m.get_mut(&token) {
                *n += 1;
            }
        }
        self.events.wake.notify_waiters();
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        _params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.notified();
    }

    async fn on_resource_updated(
        &self,
        _params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.notified();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.notified();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.notified();
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.tools_changed.store(true, Ordering::SeqCst);
        self.events.notified();
    }

    async fn on_custom_notification(
        &self,
        _notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.notified();
    }

    fn get_info(&self) -> ClientConfig {
        let mut c = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("keel", env!("CARGO_PKG_VERSION")),
        );
        c.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        c
    }
}

/// The last lines a server wrote to stderr.
#[derive(Default)]
pub struct StderrTail(Mutex<VecDeque<String>>);

impl StderrTail {
    fn push(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = keel_vocab::render::cap(text.trim_end(), STDERR_LINE_BYTES);
        if text.is_empty() {
            return;
        }
        if let Ok(mut q) = self.0.lock() {
            if q.len() == STDERR_LINES {
                q.pop_front();
            }
            q.push_back(text);
        }
    }

    /// `""`, or `"; its stderr ended with: ..."` for an error message.
    pub fn suffix(&self) -> String {
        let lines: Vec<String> = self
            .0
            .lock()
            .map(|q| q.iter().rev().take(8).rev().cloned().collect())
            .unwrap_or_default();
        if lines.is_empty() {
            String::new()
        } else {
            format!("; its stderr ended with:\n  {}", lines.join("\n  "))
        }
    }
}

/// Reads stderr into the tail, a bounded amount per line, until EOF.
async fn drain_stderr(mut err: tokio::process::ChildStderr, tail: Arc<StderrTail>) {
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    loop {
        let n = match err.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                tail.push(&line);
                line.clear();
            } else if line.len() < STDERR_LINE_BYTES {
                line.push(b);
            }
        }
    }
    tail.push(&line);
}

/// The server's stdout, watched for lines that are not JSON-RPC (rmcp
/// skips those silently, which would leave a call waiting for its
/// deadline).
struct Tap<R> {
    inner: R,
    line: LineState,
    events: Arc<Events>,
}

enum LineState {
    Start,
    /// A JSON line, this many bytes in.
    Json(usize),
    Garbage(Vec<u8>),
}

impl<R> Tap<R> {
    fn scan(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match &mut self.line {
                LineState::Start => match b {
                    b' ' | b'\t' | b'\r' | b'\n' => {}
                    b'{' | b'[' => self.line = LineState::Json(1),
                    _ => self.line = LineState::Garbage(vec![b]),
                },
                LineState::Json(n) => {
                    if b == b'\n' {
                        self.line = LineState::Start;
                    } else {
                        *n += 1;
                        if *n == MAX_LINE_BYTES + 1 {
                            // rmcp drops such a line without a word.
                            self.events.broken(format!(
                                "the server sent a message over {MAX_LINE_BYTES} bytes"
                            ));
                        }
                    }
                }
                LineState::Garbage(quote) => {
                    if b != b'\n' {
                        if quote.len() < GARBAGE_QUOTE_BYTES {
                            quote.push(b);
                        }
                        continue;
                    }
                    let text = String::from_utf8_lossy(quote).trim_end().to_string();
                    self.events.broken(format!(
                        "the server wrote a line that is not JSON-RPC: {text:?}"
                    ));
                    self.line = LineState::Start;
                }
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Tap<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            this.scan(&buf.filled()[before..]);
        }
        r
    }
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the server cannot be started: {reason}")]
    Spawn { reason: String },
    #[error("the server did not complete the MCP handshake: {reason}{stderr}")]
    Handshake { reason: String, stderr: String },
}

/// A live connection.
pub struct Conn {
    pub service: RunningService<RoleClient, Handler>,
    pub events: Arc<Events>,
    pub stderr: Arc<StderrTail>,
    /// The protocol version the handshake settled on.
    pub protocol: String,
    child: Mutex<Option<Box<dyn ChildWrapper>>>,
}

impl Conn {
    /// Whether the connection still carries messages (a server that exited
    /// while idle leaves the service open but its transport closed).
    pub fn alive(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }

    /// Ends the connection now: the service stops and the server's whole
    /// process group is killed (and reaped).
    pub fn kill(&self) {
        self.service.cancellation_token().cancel();
        let child = self.child.lock().ok().and_then(|mut c| c.take());
        if let Some(child) = child {
            reap(child);
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The whole group: `npx` and the `node` it started alike.
        self.kill();
    }
}

/// A server's process group until a [`Conn`] owns it: killed and reaped
/// when dropped.
struct GroupGuard(Option<Box<dyn ChildWrapper>>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            reap(child);
        }
    }
}

/// Kills `child`'s process group and waits for it in the background.
fn reap(mut child: Box<dyn ChildWrapper>) {
    let _ = child.start_kill();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = child.wait().await;
        });
    }
}

/// The protocol versions Keel accepts from a server's answer to
/// `initialize` (it asks for the newest).
pub const ACCEPTED_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The environment a stdio server inherits from Keel's: what finding and
/// running a program needs, nothing with secrets in it.
const PASSED_ENV: [&str; 5] = ["PATH", "HOME", "LANG", "TMPDIR", "USER"];

/// Opens a connection and completes the handshake within `timeout`.
pub async fn connect(endpoint: &Endpoint, timeout: Duration) -> Result<Conn, ConnectError> {
    let events = Arc::new(Events::default());
    let stderr = Arc::new(StderrTail::default());
    let handler = Handler {
        events: events.clone(),
    };
    let handshake_failed = |reason: String, stderr: &StderrTail| ConnectError::Handshake {
        reason,
        stderr: stderr.suffix(),
    };
    let (service, child) = match endpoint {
        Endpoint::Stdio { command, env, cwd } => {
            let mut cmd = CommandWrap::with_new(&command[0], |c| {
                c.args(&command[1..])
                    .env_clear()
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                for k in PASSED_ENV {
                    if let Some(v) = std::env::var_os(k) {
                        c.env(k, v);
                    }
                }
                for (k, v) in env {
                    c.env(k, v);
                }
                if let Some(d) = cwd {
                    c.current_dir(d);
                }
            });
            cmd.wrap(ProcessGroup::leader());
            let child = cmd.spawn().map_err(|e| ConnectError::Spawn {
                reason: match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        format!(
                            "{:?} is not a program on PATH (or cwd is missing)",
                            command[0]
                        )
                    }
                    _ => e.to_string(),
                },
            })?;
            // Killed (the whole group) and reaped on every way out of here
            // but success, a dropped future included.
            let mut guard = GroupGuard(Some(child));
            let Some(child) = guard.0.as_mut() else {
                unreachable!("the guard holds the child it was given")
            };
            let (Some(stdin), Some(stdout)) = (child.stdin().take(), child.stdout().take()) else {
                return Err(ConnectError::Spawn {
                    reason: "its stdio pipes could not be opened".into(),
                });
            };
            if let Some(err) = child.stderr().take() {
                tokio::spawn(drain_stderr(err, stderr.clone()));
            }
            let tap = Tap {
                inner: stdout,
                line: LineState::Start,
                events: events.clone(),
            };
            let started = tokio::time::timeout(timeout, handler.serve((tap, stdin))).await;
            match started {
                Ok(Ok(s)) => (s, guard.0.take()),
                Ok(Err(e)) => {
                    // Its last words reach the tail before it is read.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return Err(handshake_failed(e.to_string(), &stderr));
                }
                Err(_) => {
                    return Err(handshake_failed(
                        format!("no answer within {} ms", timeout.as_millis()),
                        &stderr,
                    ));
                }
            }
        }
        Endpoint::Http { url } => {
            let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
            match tokio::time::timeout(timeout, handler.serve(transport)).await {
                Ok(Ok(s)) => (s, None),
                Ok(Err(e)) => return Err(handshake_failed(e.to_string(), &stderr)),
                Err(_) => {
                    return Err(handshake_failed(
                        format!("no answer within {} ms", timeout.as_millis()),
                        &stderr,
                    ))
                }
            }
        }
    };
    let protocol = service
        .peer()
        .peer_info()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    if !ACCEPTED_VERSIONS.contains(&protocol.as_str()) {
        service.cancellation_token().cancel();
        drop(GroupGuard(child));
        return Err(ConnectError::Handshake {
            reason: format!(
                "it settled on protocol version {protocol:?}, which Keel does not speak (it speaks {})",
                ACCEPTED_VERSIONS.join(", ")
            ),
            stderr: String::new(),
        });
    }
    Ok(Conn {
        service,
        events,
        stderr,
        protocol,
        child: Mutex::new(child),
    })
}
