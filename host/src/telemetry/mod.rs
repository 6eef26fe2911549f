//! OpenTelemetry traces of runs, exported over OTLP/HTTP (protobuf) in the
//! GenAI semantic conventions: a span per run (`invoke_agent {agent}`),
//! per model call (`chat {model}`), per tool call (`execute_tool {tool}`),
//! per plugin call and per approval wait, children of the run's span.
//!
//! A run's trace id and its span's id are derived from the run's id, and
//! the trace id is stored in the run's `meta` when telemetry starts it, so
//! that a run resumed in another process (after a crash, after an
//! approval) continues the same trace. A step only records its spans in a
//! compact form (`span`) on a bounded queue (`queue`); the exporter's own
//! thread builds them into OTLP spans and sends them in batches with a
//! blocking client (`client`). A full queue drops spans, and a collector
//! that is down, hangs or answers errors never blocks or fails a run.

mod client;
mod queue;
mod span;

pub use client::LOG_INTERVAL;

use crate::types::{Approval, Run};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SpanExporter as _;
use queue::Queue;
use sha2::{Digest, Sha256};
use span::{Record, RunIds, What};
use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The environment variable that names the collector when the config
/// does not.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// How long one export may take before it is abandoned.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Spans queued for export at most; more are dropped.
pub const MAX_QUEUE: usize = 8192;

/// Spans sent in one export at most.
pub const EXPORT_BATCH: usize = 512;

/// How long a span waits in the queue at most before it is exported.
pub const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// How long a process waits at exit for its last spans to leave.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Distinct names (tools, plugins, models) kept shared at most; a name
/// past them is copied into each of its spans.
const MAX_NAMES: usize = 4096;

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The collector's endpoint is not an http:// or https:// URL.
    #[error("[telemetry] otlp_endpoint {0:?} is not an http:// or https:// URL")]
    BadEndpoint(String),
    /// The OTLP exporter could not be built.
    #[error("starting the OTLP exporter: {0}")]
    Exporter(String),
}

/// The `[telemetry]` section.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://host:4318`); spans go to its
    /// `/v1/traces`. Default: `$OTEL_EXPORTER_OTLP_ENDPOINT`; neither: off.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the spans (default `keel`).
    pub service_name: Option<String>,
}

/// A process's exporter: the queue its runs record spans into and the
/// thread that exports them. Dropping it does not flush: call
/// [`Telemetry::shutdown`].
#[derive(Debug)]
pub struct Telemetry {
    queue: Arc<Queue>,
    /// Signalled by the exporter's thread when it ended; taken by the
    /// first shutdown.
    done: Mutex<Option<mpsc::Receiver<()>>>,
    /// Names shared by the spans that carry them.
    names: Mutex<HashMap<Box<str>, Arc<str>>>,
    endpoint: String,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.queue.abandon();
    }
}

impl Telemetry {
    /// The exporter `cfg` (or the environment) asks for, or `None` when
    /// neither names a collector.
    pub fn from_config(cfg: Option<&TelemetryConfig>) -> Result<Option<Telemetry>, TelemetryError> {
        let endpoint = cfg
            .and_then(|c| c.otlp_endpoint.clone())
            .or_else(|| std::env::var(ENDPOINT_ENV).ok())
            .filter(|e| !e.trim().is_empty());
        let Some(endpoint) = endpoint else {
            return Ok(None);
        };
        let service = cfg
            .and_then(|c| c.service_name.clone())
            .unwrap_or_else(|| "keel".into());
        Telemetry::start(&endpoint, &service).map(Some)
    }

    /// Starts exporting to the collector at `endpoint` (its base URL).
    pub fn start(endpoint: &str, service: &str) -> Result<Telemetry, TelemetryError> {
        let base = endpoint.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://"))
            || base.parse::<ureq::http::Uri>().is_err()
        {
            return Err(TelemetryError::BadEndpoint(endpoint.to_string()));
        }
        let url = if base.ends_with("/v1/traces") {
            base.to_string()
        } else {
            format!("{base}/v1/traces")
        };
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client::BlockingClient::new(EXPORT_TIMEOUT))
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        exporter.set_resource(
            &opentelemetry_sdk::Resource::builder()
                .with_service_name(service.to_string())
                .build(),
        );
        let scope = InstrumentationScope::builder("keel").build();
        let queue = Arc::new(Queue::new());
        let (tx, done) = mpsc::channel();
        let q = queue.clone();
        std::thread::Builder::new()
            .name("keel-otlp-export".into())
            .spawn(move || {
                q.export_loop(exporter, scope);
                let _ = tx.send(());
            })
            .map_err(|e| TelemetryError::Exporter(format!("starting its thread: {e}")))?;
        Ok(Telemetry {
            queue,
            done: Mutex::new(Some(done)),
            names: Mutex::new(HashMap::new()),
            endpoint: url,
        })
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends what is queued, waiting at most [`FLUSH_TIMEOUT`], and stops.
    pub fn shutdown(&self) {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(done) = done else { return };
        self.queue.flush();
        if done.recv_timeout(FLUSH_TIMEOUT).is_err() {
            tracing::warn!(
                "telemetry: the last spans may be lost: the collector took over {} s",
                FLUSH_TIMEOUT.as_secs()
            );
        }
    }

    /// [`Telemetry::shutdown`] off the async threads (it may wait for a
    /// collector), for a process about to exit.
    pub async fn finish(self: Arc<Self>) {
        let _ = tokio::task::spawn_blocking(move || self.shutdown()).await;
    }

    /// `name`, shared with every span that carries it.
    fn name(&self, name: &str) -> Arc<str> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = names.get(name) {
            return n.clone();
        }
        let n = Arc::<str>::from(name);
        if names.len() < MAX_NAMES {
            names.insert(name.into(), n.clone());
        }
        n
    }

    /// The trace of `run`, whose agent is `agent`.
    pub fn run(self: &Arc<Self>, run: &Run, agent: &str) -> RunTrace {
        RunTrace {
            t: self.clone(),
            ids: Arc::new(RunIds {
                trace_id: trace_id_of(run),
                span_id: run_span_id(&run.id),
                run_id: Arc::from(run.id.as_str()),
                agent: self.name(agent),
            }),
        }
    }
}

/// The trace id a run's spans carry: the one stored in its meta
/// (`trace_id`, 32 hex digits), else one derived from its id.
pub fn trace_id_of(run: &Run) -> TraceId {
    serde_json::from_str::<serde_json::Value>(&run.meta)
        .ok()
        .and_then(|m| m.get("trace_id")?.as_str().map(str::to_string))
        .and_then(|h| TraceId::from_hex(&h).ok())
        .filter(|t| *t != TraceId::INVALID)
        .unwrap_or_else(|| derived_trace_id(&run.id))
}

/// A trace id from a run id (the first 16 bytes of a SHA-256).
pub fn derived_trace_id(run_id: &str) -> TraceId {
    let h = Sha256::digest(format!("keel.trace.v1\0{run_id}"));
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    TraceId::from_bytes(b)
}

fn run_span_id(run_id: &str) -> SpanId {
    let h = Sha256::digest(format!("keel.span.v1\0{run_id}"));
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[..8]);
    SpanId::from_bytes(b)
}

/// `meta` with `trace_id` set to the run's trace (a run about to be
/// created with telemetry on).
pub fn meta_with_trace(meta: &str, run_id: &str) -> String {
    let mut m =
        serde_json::from_str::<serde_json::Value>(meta).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(map) = m.as_object_mut() {
        map.entry("trace_id")
            .or_insert_with(|| derived_trace_id(run_id).to_string().into());
    }
    m.to_string()
}

/// Milliseconds since the epoch as a time.
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

/// What a policy answered, as a trace records it.
pub struct Judged<'a> {
    /// The verdict's name (`allow`, `deny`, `require_approval`, `abort`,
    /// or `error`).
    pub verdict: &'static str,
    /// The tool the call was for.
    pub tool: &'a str,
    /// The policy's reason, when it gave one.
    pub reason: Option<&'a str>,
}

/// One run's trace: children of its span, and the span itself once the
/// run ends. Cheap to clone; recording a span only queues it.
#[derive(Clone)]
pub struct RunTrace {
    t: Arc<Telemetry>,
    ids: Arc<RunIds>,
}

impl RunTrace {
    /// The trace every span of the run belongs to.
    pub fn trace_id(&self) -> TraceId {
        self.ids.trace_id
    }

    fn record(
        &self,
        start: SystemTime,
        end: SystemTime,
        step: u32,
        error: Option<&str>,
        what: What,
    ) {
        self.t.queue.push(Record {
            run: self.ids.clone(),
            start,
            end,
            step,
            error: error.map(Box::from),
            what,
        });
    }

    /// A model call (`chat {model}`).
    #[allow(clippy::too_many_arguments)]
    pub fn model_call(
        &self,
        provider: &str,
        model: &str,
        start: SystemTime,
        end: SystemTime,
        input_tokens: u32,
        output_tokens: u32,
        step: u32,
        error: Option<&str>,
    ) {
        let what = What::Model {
            provider: self.t.name(provider),
            model: self.t.name(model),
            input_tokens,
            output_tokens,
        };
        self.record(start, end, step, error, what);
    }

    /// The agent's `decide` on step `step` (`decide {agent}`), begun at
    /// `start` and ended now, with what it decided or its error.
    pub fn decided(
        &self,
        plugin: &str,
        step: u32,
        start: SystemTime,
        decision: Option<&'static str>,
        error: Option<&str>,
    ) {
        let what = What::Decide {
            plugin: self.t.name(plugin),
            decision,
        };
        self.record(start, SystemTime::now(), step, error, what);
    }

    /// The policy's `evaluate` on step `step` (`evaluate {policy}`), begun
    /// at `start` and ended now, with its verdict or its error.
    pub fn judged(
        &self,
        plugin: &str,
        step: u32,
        start: SystemTime,
        j: Judged<'_>,
        error: Option<&str>,
    ) {
        let what = What::Evaluate {
            plugin: self.t.name(plugin),
            tool: self.t.name(j.tool),
            verdict: j.verdict,
            reason: j.reason.filter(|r| !r.is_empty()).map(Box::from),
        };
        self.record(start, SystemTime::now(), step, error, what);
    }

    /// A tool call (`execute_tool {tool}`); its call id is the step's.
    pub fn tool_call(&self, tool: &str, step: u32, start: SystemTime, error: Option<&str>) {
        let what = What::Tool {
            tool: self.t.name(tool),
        };
        self.record(start, SystemTime::now(), step, error, what);
    }

    /// The wait for an operator's answer, from the approval's request to
    /// its answer (or expiry), as the store recorded them.
    pub fn approval_wait(&self, a: &Approval, status: &'static str, end_ms: i64) {
        let what = What::Approval {
            tool: self.t.name(&a.call.tool),
            id: a.id.as_str().into(),
            status,
            decided_by: a.decided_by.as_deref().map(Box::from),
        };
        let (start, end) = (at_ms(a.created_at), at_ms(a.decided_at.unwrap_or(end_ms)));
        self.record(start, end, a.step_index, None, what);
    }

    /// The run's own span (`invoke_agent {agent}`), from its creation to
    /// now, with its end as status. Built once, by the process that saw
    /// the run end.
    pub fn end_run(&self, run: &Run) {
        let what = What::Run {
            status: run.status,
            reason: run.reason,
            steps: run.step_count,
            tokens: run.tokens,
        };
        let start = at_ms(run.created_at);
        self.record(start, SystemTime::now().max(start), 0, None, what);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Limits;

    #[test]
    fn a_runs_trace_id_is_the_one_in_its_meta_else_one_derived_from_its_id() {
        let mut run = Run::new("run_a", "g", Limits::default(), 0);
        let derived = derived_trace_id("run_a");
        assert_eq!(trace_id_of(&run), derived);
        assert_ne!(derived, derived_trace_id("run_b"));
        assert_ne!(derived, TraceId::INVALID);
        run.meta = meta_with_trace(r#"{"config":"k.toml"}"#, "run_a");
        let meta: serde_json::Value = serde_json::from_str(&run.meta).unwrap();
        assert_eq!(meta["config"], "k.toml", "the embedder's meta is kept");
        assert_eq!(meta["trace_id"], derived.to_string());
        // A trace id given at creation (a caller's) wins over the derived one.
        let theirs = "4bf92f3577b34da6a3ce929d0e0e4736";
        run.meta = format!(r#"{{"trace_id":"{theirs}"}}"#);
        assert_eq!(trace_id_of(&run).to_string(), theirs);
        assert_eq!(meta_with_trace(&run.meta, "run_a"), run.meta);
        // A malformed one is ignored.
        run.meta = r#"{"trace_id":"not hex"}"#.into();
        assert_eq!(trace_id_of(&run), derived);
    }

    #[test]
    fn an_endpoint_that_is_not_an_http_url_is_refused() {
        for bad in ["ftp://x", "localhost:4318", "", "http://bad host"] {
            assert!(
                matches!(
                    Telemetry::start(bad, "t"),
                    Err(TelemetryError::BadEndpoint(_))
                ),
                "{bad:?}"
            );
        }
    }
}
