//! OpenTelemetry traces of runs, exported over OTLP/HTTP (protobuf) in the
//! GenAI semantic conventions: a span per run (`invoke_agent {agent}`),
//! per model call (`chat {model}`), per tool call (`execute_tool {tool}`),
//! per plugin call and per approval wait, children of the run's span.
//!
//! A run's trace id and its span's id are derived from the run's id, and
//! the trace id is stored in the run's `meta` when telemetry starts it, so
//! that a run resumed in another process (after a crash, after an
//! approval) continues the same trace. Spans are exported in batches on
//! the processor's own thread with a blocking client (`client`): a step
//! only queues them, a full queue drops them, and a collector that is
//! down, hangs or answers errors never blocks or fails a run.

mod client;

pub use client::LOG_INTERVAL;

use crate::types::{Run, RunStatus};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue, StringValue, Value};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SdkTracer,
    SdkTracerProvider,
};
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The environment variable that names the collector when the config
/// does not.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// How long one export may take before it is abandoned.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Spans queued for export at most; more are dropped.
pub const MAX_QUEUE: usize = 8192;

/// How long a process waits at exit for its last spans to leave.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

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

/// A process's exporter. Dropping it does not flush: call
/// [`Telemetry::shutdown`].
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    endpoint: String,
}

thread_local! {
    /// Ids the next span built on this thread must have (a run's span,
    /// whose ids follow from the run's id).
    static FIXED_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
    static FIXED_SPAN: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// Random ids, except where [`FIXED_TRACE`] and [`FIXED_SPAN`] say
/// otherwise.
#[derive(Debug)]
struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        FIXED_TRACE
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }
    fn new_span_id(&self) -> SpanId {
        FIXED_SPAN
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_span_id())
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
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client::BlockingClient::new(EXPORT_TIMEOUT))
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUE)
                    .with_scheduled_delay(Duration::from_millis(500))
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_id_generator(Ids(RandomIdGenerator::default()))
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service.to_string())
                    .build(),
            )
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "keel");
        Ok(Telemetry {
            provider,
            tracer,
            endpoint: url,
        })
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends what is queued, waiting at most [`FLUSH_TIMEOUT`], and stops.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            tracing::warn!("telemetry: the last spans may be lost: {e}");
        }
    }

    /// [`Telemetry::shutdown`] off the async threads (it may wait for a
    /// collector), for a process about to exit.
    pub async fn finish(self: Arc<Self>) {
        let _ = tokio::task::spawn_blocking(move || self.shutdown()).await;
    }

    /// The trace of `run`, whose agent is `agent`.
    pub fn run(self: &Arc<Self>, run: &Run, agent: &str) -> RunTrace {
        let (trace_id, span_id) = (trace_id_of(run), run_span_id(&run.id));
        RunTrace {
            t: self.clone(),
            trace_id,
            span_id,
            // Built once: each span shares these rather than copying them.
            parent: Context::new().with_remote_span_context(SpanContext::new(
                trace_id,
                span_id,
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            )),
            run_id: StringValue::from(Arc::<str>::from(run.id.as_str())),
            agent: Arc::from(agent),
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

/// How a span ended.
pub enum Outcome<'a> {
    /// The span's work succeeded.
    Ok,
    /// The span's work failed, with this message as its error status.
    Error(&'a str),
}

/// One run's trace: children of its span, and the span itself once the
/// run ends. Cheap to clone; building a span only queues it.
#[derive(Clone)]
pub struct RunTrace {
    t: Arc<Telemetry>,
    trace_id: TraceId,
    span_id: SpanId,
    parent: Context,
    run_id: StringValue,
    agent: Arc<str>,
}

impl RunTrace {
    /// The trace every span of the run belongs to.
    pub fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    /// A finished child span of the run.
    pub fn child(
        &self,
        name: String,
        kind: SpanKind,
        start: SystemTime,
        end: SystemTime,
        mut attributes: Vec<KeyValue>,
        events: Vec<(&'static str, Vec<KeyValue>)>,
        outcome: Outcome<'_>,
    ) {
        attributes.push(KeyValue::new(
            "gen_ai.conversation.id",
            Value::String(self.run_id.clone()),
        ));
        let mut span = self
            .t
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.t.tracer, &self.parent);
        for (name, attrs) in events {
            span.add_event(name, attrs);
        }
        if let Outcome::Error(e) = outcome {
            span.set_status(Status::error(e.to_string()));
        }
        span.end_with_timestamp(end.max(start));
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
        let mut a = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider.to_string()),
            KeyValue::new("gen_ai.request.model", model.to_string()),
            KeyValue::new("keel.step.index", i64::from(step)),
        ];
        match error {
            None => a.extend([
                KeyValue::new("gen_ai.usage.input_tokens", i64::from(input_tokens)),
                KeyValue::new("gen_ai.usage.output_tokens", i64::from(output_tokens)),
            ]),
            Some(_) => a.push(KeyValue::new("error.type", "model_error")),
        }
        let outcome = error.map_or(Outcome::Ok, Outcome::Error);
        let name = format!("chat {model}");
        self.child(name, SpanKind::Client, start, end, a, vec![], outcome);
    }

    /// A call into a plugin (`decide {agent}`, `evaluate {policy}`).
    #[allow(clippy::too_many_arguments)]
    pub fn plugin_call(
        &self,
        function: &'static str,
        world: &'static str,
        plugin: &str,
        step: u32,
        start: SystemTime,
        mut attributes: Vec<KeyValue>,
        events: Vec<(&'static str, Vec<KeyValue>)>,
        error: Option<&str>,
    ) {
        attributes.extend([
            KeyValue::new("keel.plugin.world", world),
            KeyValue::new("keel.plugin.function", function),
            KeyValue::new("keel.step.index", i64::from(step)),
        ]);
        self.child(
            format!("{function} {plugin}"),
            SpanKind::Internal,
            start,
            SystemTime::now(),
            attributes,
            events,
            error.map_or(Outcome::Ok, Outcome::Error),
        );
    }

    /// A tool call (`execute_tool {tool}`); its call id is the step's.
    pub fn tool_call(&self, tool: &str, step: u32, start: SystemTime, error: Option<&str>) {
        let mut a = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new(
                "gen_ai.tool.call.id",
                format!("{}:{step}", self.run_id.as_str()),
            ),
            KeyValue::new("keel.step.index", i64::from(step)),
        ];
        if error.is_some() {
            a.push(KeyValue::new("error.type", "tool_error"));
        }
        self.child(
            format!("execute_tool {tool}"),
            SpanKind::Internal,
            start,
            SystemTime::now(),
            a,
            vec![],
            error.map_or(Outcome::Ok, Outcome::Error),
        );
    }

    /// The wait for an operator's answer, from the approval's request to
    /// its answer (or expiry), as the store recorded them.
    pub fn approval_wait(&self, a: &crate::types::Approval, status: &str, end_ms: i64) {
        let mut attrs = vec![
            KeyValue::new("gen_ai.tool.name", a.call.tool.clone()),
            KeyValue::new("keel.approval.id", a.id.clone()),
            KeyValue::new("keel.approval.status", status.to_string()),
            KeyValue::new("keel.step.index", i64::from(a.step_index)),
        ];
        if let Some(by) = &a.decided_by {
            attrs.push(KeyValue::new("keel.approval.decided_by", by.clone()));
        }
        self.child(
            format!("await_approval {}", a.call.tool),
            SpanKind::Internal,
            at_ms(a.created_at),
            at_ms(a.decided_at.unwrap_or(end_ms)),
            attrs,
            vec![(
                "approval.answered",
                vec![KeyValue::new("keel.approval.status", status.to_string())],
            )],
            Outcome::Ok,
        );
    }

    /// The run's own span (`invoke_agent {agent}`), from its creation to
    /// now, with its end as status. Built once, by the process that saw
    /// the run end.
    pub fn end_run(&self, run: &Run) {
        let mut a = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new(
                "gen_ai.agent.name",
                Value::String(self.agent.clone().into()),
            ),
            KeyValue::new("gen_ai.conversation.id", Value::String(self.run_id.clone())),
            KeyValue::new("keel.run.status", run.status.as_str()),
            KeyValue::new("keel.run.steps", i64::from(run.step_count)),
            KeyValue::new("gen_ai.usage.total_tokens", run.tokens as i64),
        ];
        if let Some(r) = run.reason {
            a.push(KeyValue::new("keel.run.reason", r.as_str()));
        }
        FIXED_TRACE.with(|f| f.set(Some(self.trace_id)));
        FIXED_SPAN.with(|f| f.set(Some(self.span_id)));
        let mut span = self
            .t
            .tracer
            .span_builder(format!("invoke_agent {}", self.agent))
            .with_kind(SpanKind::Internal)
            .with_start_time(at_ms(run.created_at))
            .with_attributes(a)
            .start_with_context(&self.t.tracer, &Context::new());
        FIXED_TRACE.with(|f| f.set(None));
        FIXED_SPAN.with(|f| f.set(None));
        match run.status {
            RunStatus::Completed => span.set_status(Status::Ok),
            st => {
                let why = run.reason.map_or(st.as_str(), |r| r.as_str());
                span.add_event(
                    format!("run.{st}"),
                    vec![KeyValue::new("keel.run.reason", why)],
                );
                span.set_status(Status::error(format!("the run ended {st}: {why}")));
            }
        }
        span.end_with_timestamp(SystemTime::now().max(at_ms(run.created_at)));
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
