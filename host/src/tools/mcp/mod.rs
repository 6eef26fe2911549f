//! MCP servers as tools. A server is started (or reached) once per
//! assembly and shared by its runs; each run's start lists its tools and
//! checks the operator's pin over the exposed ones; each call is bounded in
//! time, size and notifications, and a server that crashes, hangs or
//! answers garbage fails only that call and is started again for the next.

mod conn;
mod pin;

pub use conn::{Endpoint, MAX_LINE_BYTES};
pub use pin::{canonical, diff, entry, parse_pin, pin_of, Snapshot, SnapshotDir, PINNED_FIELDS};

use crate::config::PinMismatch;
use crate::consumer::{ToolError, ToolProvider};
use crate::types::{canonical_json, Effect, ToolSpec};
use async_trait::async_trait;
use conn::Conn;
use rmcp::model::{CallToolRequestParams, NumberOrString, ProgressToken, RequestParamsMeta};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Notifications one call may bring before it is failed as a flood (its
/// own progress notifications, or others while it is the only call).
pub const MAX_NOTIFICATIONS_PER_CALL: u64 = 1_000;
/// Tools a server may list.
pub const MAX_LISTED_TOOLS: usize = 1_024;
/// Pages a server's tool list may take.
pub const MAX_LIST_PAGES: usize = 64;
/// Bytes of a server's error text kept in the observation.
const ERROR_TEXT_BYTES: usize = 4 << 10;

/// One `[[tools]]` entry's server, as the config describes it.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// How errors name it: `tools[1] (`npx -y ...`)`.
    pub label: String,
    /// How to reach the server.
    pub endpoint: Endpoint,
    /// The server's tools the run may use (`expose`).
    pub expose: Vec<String>,
    /// The operator's `sha256:HEX` pin over the exposed tools.
    pub pin: String,
    /// What a pin that does not match does (`on_pin_mismatch`).
    pub on_mismatch: PinMismatch,
    /// Per call.
    pub deadline: Duration,
    /// The largest result of one call, in bytes.
    pub max_output_bytes: usize,
    /// For the handshake and the tool list.
    pub start_timeout: Duration,
    /// Where verified snapshots are kept, to explain a later mismatch.
    pub snapshots: Option<std::path::PathBuf>,
}

/// Why a server's tools cannot be used; each names the server (and the
/// tool), and `keel run` exits 2 on any of them with nothing run.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server did not start, or did not list its tools.
    #[error("{server}: {reason}")]
    Start {
        /// The server's label.
        server: String,
        /// What failed.
        reason: String,
    },
    /// The server's tools are not what the config allows.
    #[error("{server}: {reason}")]
    Refused {
        /// The server's label.
        server: String,
        /// Why its tools cannot be used.
        reason: String,
    },
}

/// What a run's start found.
pub struct Started {
    /// The tools the run may call: the exposed ones, less any dropped.
    pub specs: Vec<ToolSpec>,
    /// The pin of the tools in `specs` (the config's, unless some were dropped).
    pub pin: String,
    /// Tools left out under `on_pin_mismatch = "drop"`, with why.
    pub dropped: Vec<String>,
}

/// A server shared by an assembly's runs.
pub struct McpServer {
    spec: ServerSpec,
    state: tokio::sync::Mutex<State>,
    /// Held while the tools are listed again after a change, so that no
    /// call passes the refusal check before the refusals are recorded.
    rechecking: tokio::sync::Mutex<()>,
    /// Numbers the calls' progress tokens (unique per server).
    next_call: std::sync::atomic::AtomicU64,
    /// Calls in flight, over which other notifications are shared.
    in_flight: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct State {
    conn: Option<Arc<Conn>>,
    /// The exposed tools as the pin was verified over (or, dropping, the
    /// unchanged part of them).
    pinned: Option<Snapshot>,
    /// Pinned tools refused since they changed, with what changed.
    refused: BTreeMap<String, String>,
}

impl McpServer {
    /// A server not yet connected to; the first [`McpServer::start`] connects.
    pub fn new(spec: ServerSpec) -> McpServer {
        McpServer {
            spec,
            state: Default::default(),
            rechecking: Default::default(),
            next_call: Default::default(),
            in_flight: Default::default(),
        }
    }

    /// How errors name the server, e.g. ``tools[1] (`npx -y srv`)``.
    pub fn label(&self) -> &str {
        &self.spec.label
    }

    fn start_err(&self, reason: impl Into<String>) -> McpError {
        McpError::Start {
            server: self.spec.label.clone(),
            reason: reason.into(),
        }
    }

    fn refused(&self, reason: impl Into<String>) -> McpError {
        McpError::Refused {
            server: self.spec.label.clone(),
            reason: reason.into(),
        }
    }

    /// Connects if needed, lists the tools and checks the pin: what a run
    /// starts with.
    pub async fn start(&self) -> Result<Started, McpError> {
        let mut st = self.state.lock().await;
        let conn = match &st.conn {
            Some(c) if c.alive() => c.clone(),
            _ => {
                let c = Arc::new(
                    conn::connect(&self.spec.endpoint, self.spec.start_timeout)
                        .await
                        .map_err(|e| self.start_err(e.to_string()))?,
                );
                st.conn = Some(c.clone());
                c
            }
        };
        let listed = match self.list(&conn).await {
            Ok(l) => l,
            Err(e) => {
                st.conn = None;
                return Err(e);
            }
        };
        if let Some(why) = conn.events.garbage() {
            // Every call would fail on it: say so once, at the start.
            st.conn = None;
            return Err(self.refused(format!("its stdout cannot be trusted: {why}")));
        }
        let exposed = self.exposed(&listed)?;
        // A schema that cannot be read is refused whatever the pin says.
        let exposed_specs = self.specs_of(&exposed)?;
        let dir = self.spec.snapshots.clone().map(SnapshotDir);
        if let Some(d) = &dir {
            d.keep(&exposed);
        }
        let actual = pin_of(&exposed);
        let mut dropped = Vec::new();
        let pinned = if actual.eq_ignore_ascii_case(&self.spec.pin) {
            exposed
        } else {
            // What the pin was taken over: kept on disk, or verified by an
            // earlier run of this process.
            let old = dir
                .as_ref()
                .and_then(|d| d.find(&self.spec.pin))
                .or_else(|| {
                    st.pinned
                        .clone()
                        .filter(|p| pin_of(p).eq_ignore_ascii_case(&self.spec.pin))
                });
            let changes = old.as_ref().map(|o| diff(o, &exposed));
            let told = match &changes {
                Some(c) => c
                    .iter()
                    .map(|(t, what)| format!("tool {t:?}: {what}"))
                    .collect::<Vec<_>>()
                    .join("; "),
                None => "the schemas it was taken over are not in the snapshot cache, so what changed cannot be told; `keel mcp inspect` shows the tools now".to_string(),
            };
            let head = format!(
                "the pin does not match the exposed tools: the config pins {}, the server's tools hash to {actual}: {told}",
                self.spec.pin
            );
            // Runs already going refuse the changed tools from now on,
            // every exposed tool when what changed is not known.
            let changed: Vec<String> = match &changes {
                Some(c) => c.keys().cloned().collect(),
                None => self.spec.expose.clone(),
            };
            for t in changed {
                st.refused
                    .entry(t)
                    .or_insert_with(|| "the server's tools no longer match the pin".to_string());
            }
            if self.spec.on_mismatch == PinMismatch::Fail {
                return Err(self.refused(head));
            }
            let changes = changes.unwrap_or_default();
            let keep: Snapshot = match &old {
                Some(_) => exposed
                    .into_iter()
                    .filter(|(t, _)| !changes.contains_key(t))
                    .collect(),
                None => Snapshot::new(),
            };
            for t in &self.spec.expose {
                if !keep.contains_key(t) {
                    dropped.push(format!("{}: tool {t:?} dropped: {head}", self.spec.label));
                }
            }
            keep
        };
        let specs: Vec<ToolSpec> = exposed_specs
            .into_iter()
            .filter(|s| pinned.contains_key(&s.name))
            .collect();
        let pin = pin_of(&pinned);
        if dropped.is_empty() {
            // The tools are as pinned again: nothing stays refused.
            st.refused.clear();
        }
        st.pinned = Some(pinned);
        Ok(Started {
            specs,
            pin,
            dropped,
        })
    }

    /// Every tool the server lists, by name, with its pinned fields; at
    /// most [`MAX_LISTED_TOOLS`] tools over [`MAX_LIST_PAGES`] pages, within
    /// the start timeout.
    async fn list(&self, conn: &Conn) -> Result<Snapshot, McpError> {
        let listing = async {
            let mut tools = Vec::new();
            let mut cursor = None;
            for _ in 0..MAX_LIST_PAGES {
                let page = conn
                    .service
                    .peer()
                    .list_tools(Some(
                        rmcp::model::PaginatedRequestParams::default().with_cursor(cursor),
                    ))
                    .await
                    .map_err(|e| {
                        self.start_err(format!(
                            "listing its tools failed: {e}{}",
                            conn.stderr.suffix()
                        ))
                    })?;
                tools.extend(page.tools);
                if tools.len() > MAX_LISTED_TOOLS {
                    return Err(
                        self.refused(format!("it lists more than {MAX_LISTED_TOOLS} tools"))
                    );
                }
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => return Ok(tools),
                }
            }
            Err(self.refused(format!("its tool list goes on past {MAX_LIST_PAGES} pages")))
        };
        let tools = tokio::time::timeout(self.spec.start_timeout, listing)
            .await
            .map_err(|_| {
                self.start_err(format!(
                    "it did not list its tools within {} ms{}",
                    self.spec.start_timeout.as_millis(),
                    conn.stderr.suffix()
                ))
            })??;
        let mut out = Snapshot::new();
        for t in &tools {
            if out.insert(t.name.to_string(), entry(t)).is_some() {
                return Err(self.refused(format!("it lists two tools named {:?}", t.name)));
            }
        }
        Ok(out)
    }

    /// The exposed subset of `listed`; every exposed tool must be there.
    fn exposed(&self, listed: &Snapshot) -> Result<Snapshot, McpError> {
        let names = || {
            let all: Vec<&str> = listed.keys().map(String::as_str).collect();
            all.join(", ")
        };
        if listed.is_empty() {
            return Err(self.refused("it lists no tools"));
        }
        if self.spec.expose.is_empty() {
            return Err(self.refused(format!(
                "no tool is exposed: list the ones the run may use in `expose` (it has: {}); `keel mcp inspect` prints the block",
                names()
            )));
        }
        let mut out = Snapshot::new();
        for t in &self.spec.expose {
            match listed.get(t) {
                Some(e) => {
                    out.insert(t.clone(), e.clone());
                }
                None => {
                    return Err(self.refused(format!(
                        "tool {t:?} in `expose` is not one the server lists (it lists: {})",
                        names()
                    )))
                }
            }
        }
        Ok(out)
    }

    /// Tool specs for the run; an input schema that is not a JSON Schema
    /// for an object is refused, naming the tool.
    fn specs_of(&self, snap: &Snapshot) -> Result<Vec<ToolSpec>, McpError> {
        let mut out = Vec::new();
        for (name, e) in snap {
            let schema = &e["inputSchema"];
            check_input_schema(name, schema).map_err(|why| self.refused(why))?;
            out.push(ToolSpec {
                name: name.clone(),
                description: e["description"].as_str().unwrap_or("").to_string(),
                parameters: canonical_json(schema),
                // Hints are not trusted: the config's `effect` decides.
                effect: Effect::Destructive,
            });
        }
        Ok(out)
    }

    /// The live connection, started again (and its tools checked against
    /// the pinned ones) if the last one failed.
    async fn conn(&self) -> Result<Arc<Conn>, ToolError> {
        let mut st = self.state.lock().await;
        if let Some(c) = &st.conn {
            if c.alive() {
                return Ok(c.clone());
            }
        }
        let c = Arc::new(
            conn::connect(&self.spec.endpoint, self.spec.start_timeout)
                .await
                .map_err(|e| {
                    ToolError::new(format!("{}: restarting it failed: {e}", self.spec.label))
                })?,
        );
        // A restarted server is checked as a tool-list change would be.
        c.events.tools_changed.store(true, Ordering::SeqCst);
        st.conn = Some(c.clone());
        Ok(c)
    }

    /// After a tool-list change: lists again and refuses each pinned tool
    /// that differs from what was pinned.
    async fn recheck(&self, conn: &Conn) -> Result<(), ToolError> {
        let listed = self
            .list(conn)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
        let mut st = self.state.lock().await;
        let State {
            pinned, refused, ..
        } = &mut *st;
        let Some(pinned) = pinned else {
            return Ok(());
        };
        let now: Snapshot = listed
            .into_iter()
            .filter(|(t, _)| pinned.contains_key(t))
            .collect();
        for (tool, what) in diff(pinned, &now) {
            refused.entry(tool).or_insert(what);
        }
        Ok(())
    }

    /// Drops `conn` if it is still the live one: the next call starts the
    /// server again.
    async fn discard(&self, conn: &Arc<Conn>) {
        conn.kill();
        let mut st = self.state.lock().await;
        if st.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            st.conn = None;
        }
    }

    /// Calls tool `name` with `arguments` (a JSON object, validated).
    /// The whole call, restarting and re-listing included, takes at most
    /// the tool's deadline.
    pub async fn call(&self, name: &str, arguments: &str) -> Result<String, ToolError> {
        let deadline = tokio::time::Instant::now() + self.spec.deadline;
        // A stall before the request is sent (a restart, a re-listing, a
        // lock another run holds) ends a little after the call's own
        // deadline would have.
        let outer = deadline + Duration::from_millis(50);
        match tokio::time::timeout_at(outer, self.call_by(name, arguments, deadline)).await {
            Ok(r) => r,
            Err(_) => Err(ToolError::new(format!(
                "{}: tool {name:?}: the server was not ready to take the call within {} ms",
                self.spec.label,
                self.spec.deadline.as_millis()
            ))),
        }
    }

    async fn call_by(
        &self,
        name: &str,
        arguments: &str,
        deadline: tokio::time::Instant,
    ) -> Result<String, ToolError> {
        let conn = self.conn().await?;
        {
            let one = self.rechecking.lock().await;
            if conn.events.tools_changed.load(Ordering::SeqCst) {
                if let Err(e) = self.recheck(&conn).await {
                    drop(one);
                    self.discard(&conn).await;
                    return Err(e);
                }
                conn.events.tools_changed.store(false, Ordering::SeqCst);
            }
        }
        if let Some(what) = self.state.lock().await.refused.get(name) {
            return Err(ToolError {
                message: format!(
                    "{}: tool {name:?} changed since its pin was checked ({what}); the call is refused",
                    self.spec.label
                ),
                trap: None,
                fatal: self.spec.on_mismatch == PinMismatch::Fail,
            });
        }
        let args: serde_json::Map<String, serde_json::Value> = serde_json::from_str(arguments)
            .map_err(|e| ToolError::new(format!("arguments: {e}")))?;
        let mut params = CallToolRequestParams::new(name.to_string()).with_arguments(args);
        let token = format!("keel-{}", self.next_call.fetch_add(1, Ordering::Relaxed));
        params.set_progress_token(ProgressToken(NumberOrString::String(token.clone().into())));
        conn.events.track(&token);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _done = CallDone {
            events: &conn.events,
            token: &token,
            in_flight: &self.in_flight,
        };
        let peer = conn.service.peer().clone();
        let call = peer.call_tool(params);
        tokio::pin!(call);
        let deadline = tokio::time::sleep_until(deadline);
        tokio::pin!(deadline);
        let before = conn.events.notifications.load(Ordering::Relaxed);
        let failed = |why: String| {
            ToolError::new(format!(
                "{}: tool {name:?}: {why}; the server is started again for the next call{}",
                self.spec.label,
                conn.stderr.suffix()
            ))
        };
        let result = loop {
            let woken = conn.events.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(line) = conn.events.garbage() {
                let e = failed(line);
                self.discard(&conn).await;
                return Err(e);
            }
            let others = conn.events.notifications.load(Ordering::Relaxed) - before;
            let calls = self.in_flight.load(Ordering::SeqCst).max(1);
            if conn.events.progress_of(&token) > MAX_NOTIFICATIONS_PER_CALL
                || others > MAX_NOTIFICATIONS_PER_CALL * calls
            {
                let e = failed(format!(
                    "the server sent more than {MAX_NOTIFICATIONS_PER_CALL} notifications during the call"
                ));
                self.discard(&conn).await;
                return Err(e);
            }
            tokio::select! {
                r = &mut call => break r,
                _ = &mut deadline => {
                    let e = failed(format!("no answer within {} ms", self.spec.deadline.as_millis()));
                    self.discard(&conn).await;
                    return Err(e);
                }
                _ = woken => continue,
            }
        };
        let result = match result {
            Ok(r) => r,
            Err(rmcp::ServiceError::McpError(e)) => {
                return Err(ToolError::new(format!(
                    "{}: tool {name:?}: the server answered with an error: {}",
                    self.spec.label,
                    keel_vocab::render::cap(&e.message, ERROR_TEXT_BYTES)
                )))
            }
            Err(e) => {
                // Its exit status and last words, if it died.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let why = match e {
                    rmcp::ServiceError::TransportClosed => {
                        "the server closed the connection (it exited or crashed)".to_string()
                    }
                    e => e.to_string(),
                };
                let e = failed(why);
                self.discard(&conn).await;
                return Err(e);
            }
        };
        if result.is_error == Some(true) {
            let text: Vec<String> = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            return Err(ToolError::new(format!(
                "{}: tool {name:?} failed: {}",
                self.spec.label,
                keel_vocab::render::cap(&text.join("\n"), ERROR_TEXT_BYTES)
            )));
        }
        let mut out = serde_json::Map::new();
        out.insert(
            "content".into(),
            serde_json::to_value(&result.content).unwrap_or_default(),
        );
        if let Some(s) = result.structured_content {
            out.insert("structuredContent".into(), s);
        }
        let text = serde_json::Value::Object(out).to_string();
        if text.len() > self.spec.max_output_bytes {
            return Err(ToolError::new(format!(
                "{}: tool {name:?}: its result is {} bytes, over the tool's limit of {} (limits.max_output_bytes)",
                self.spec.label,
                text.len(),
                self.spec.max_output_bytes
            )));
        }
        Ok(text)
    }
}

/// `Ok` if `schema` is one Keel can validate a tool's arguments against:
/// a valid JSON Schema describing an object, within the spec bounds.
pub fn check_input_schema(name: &str, schema: &serde_json::Value) -> Result<(), String> {
    crate::tools::schema::well_formed(schema).map_err(|why| {
        format!("tool {name:?}: its input schema is not a valid JSON Schema: {why}")
    })?;
    if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(format!(
            "tool {name:?}: its input schema does not describe an object (`\"type\": \"object\"`)"
        ));
    }
    let text = canonical_json(schema);
    let bound = crate::tools::schema::SpecBounds::MAX_SCHEMA_BYTES;
    if text.len() > bound {
        return Err(format!(
            "tool {name:?}: its input schema is {} bytes, over the limit of {bound}",
            text.len()
        ));
    }
    Ok(())
}

/// What `keel mcp inspect` shows of a server.
pub struct Inspection {
    /// `name version` as the server gave them in the handshake.
    pub server: String,
    /// The protocol version the handshake settled on.
    pub protocol: String,
    /// Every tool it lists, with its pinned fields.
    pub tools: Snapshot,
}

/// Starts the server at `endpoint`, lists its tools and stops it.
pub async fn inspect(endpoint: &Endpoint, timeout: Duration) -> Result<Inspection, McpError> {
    let server = McpServer::new(ServerSpec {
        label: endpoint.to_string(),
        endpoint: endpoint.clone(),
        expose: vec![],
        pin: String::new(),
        on_mismatch: PinMismatch::Fail,
        deadline: timeout,
        max_output_bytes: 0,
        start_timeout: timeout,
        snapshots: None,
    });
    let conn = conn::connect(endpoint, timeout)
        .await
        .map_err(|e| server.start_err(e.to_string()))?;
    let tools = server.list(&conn).await?;
    let who = conn
        .service
        .peer()
        .peer_info()
        .and_then(|i| {
            i.server_info
                .as_ref()
                .map(|s| format!("{} {}", s.name, s.version))
        })
        .unwrap_or_default();
    let protocol = conn.protocol.clone();
    conn.kill();
    Ok(Inspection {
        server: who,
        protocol,
        tools,
    })
}

/// Ends a call's bookkeeping however the call ends.
struct CallDone<'a> {
    events: &'a conn::Events,
    token: &'a str,
    in_flight: &'a std::sync::atomic::AtomicU64,
}

impl Drop for CallDone<'_> {
    fn drop(&mut self) {
        self.events.forget(self.token);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A run's view of one server: the tools its start found.
pub struct McpTools {
    server: Arc<McpServer>,
    specs: Vec<ToolSpec>,
}

impl McpTools {
    /// A run's view of `server` with the `specs` its start found.
    pub fn new(server: Arc<McpServer>, specs: Vec<ToolSpec>) -> McpTools {
        McpTools { server, specs }
    }
}

#[async_trait]
impl ToolProvider for McpTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    async fn call(&self, name: &str, arguments: &str) -> Result<String, ToolError> {
        self.server.call(name, arguments).await
    }
}
