//! A finished span as a run's thread records it, and its OTLP form.
//!
//! A step's spans are recorded as [`Record`]s: ids, times and the few
//! values that differ between spans, held by `Arc` or `&'static str`, so
//! that recording one allocates nothing in the common case. The exporter's
//! thread turns them into the SDK's [`SpanData`] (names, attributes,
//! events, status) just before it encodes them: every allocation a span
//! costs is made, and freed, on that thread.

use crate::types::{RunReason, RunStatus};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, SpanData, SpanEvents, SpanLinks,
};
use std::sync::Arc;
use std::time::SystemTime;

/// What every span of one run shares.
#[derive(Debug)]
pub(super) struct RunIds {
    pub trace_id: TraceId,
    /// The run's own span, parent of the others.
    pub span_id: SpanId,
    pub run_id: Arc<str>,
    pub agent: Arc<str>,
}

/// One finished span of a run.
#[derive(Debug)]
pub(super) struct Record {
    pub run: Arc<RunIds>,
    pub start: SystemTime,
    pub end: SystemTime,
    pub step: u32,
    /// The span's error status, when its work failed.
    pub error: Option<Box<str>>,
    pub what: What,
}

/// The kind of a span, with what only that kind carries.
#[derive(Debug)]
pub(super) enum What {
    /// The agent's `decide` and what it decided (`None` on an error).
    Decide {
        plugin: Arc<str>,
        decision: Option<&'static str>,
    },
    /// The policy's `evaluate` on a call of `tool` and its verdict.
    Evaluate {
        plugin: Arc<str>,
        tool: Arc<str>,
        verdict: &'static str,
        reason: Option<Box<str>>,
    },
    /// A tool call.
    Tool { tool: Arc<str> },
    /// A model call, with its tokens when it succeeded.
    Model {
        provider: Arc<str>,
        model: Arc<str>,
        input_tokens: u32,
        output_tokens: u32,
    },
    /// The wait for an operator's answer to an approval.
    Approval {
        tool: Arc<str>,
        id: Box<str>,
        status: &'static str,
        decided_by: Option<Box<str>>,
    },
    /// The run's own span, built once it ended.
    Run {
        status: RunStatus,
        reason: Option<RunReason>,
        steps: u32,
        tokens: u64,
    },
}

fn text(s: &Arc<str>) -> Value {
    Value::String(StringValue::from(s.clone()))
}

fn owned(s: &str) -> Value {
    Value::String(StringValue::from(s.to_string()))
}

impl Record {
    /// The span as the OTLP exporter takes it; child span ids are drawn
    /// here, the run's span has the id its run's id gives it.
    pub fn into_span(self, scope: &InstrumentationScope, ids: &RandomIdGenerator) -> SpanData {
        let run = &self.run;
        let step = KeyValue::new("keel.step.index", i64::from(self.step));
        let conversation = KeyValue::new("gen_ai.conversation.id", text(&run.run_id));
        let mut events = Vec::new();
        let mut status = match &self.error {
            Some(e) => Status::error(e.to_string()),
            None => Status::Unset,
        };
        let (name, kind, mut attributes) = match &self.what {
            What::Decide { plugin, decision } => {
                let mut a = Vec::with_capacity(5);
                if let Some(d) = decision {
                    a.push(KeyValue::new("keel.decision", *d));
                }
                a.extend(plugin_attrs("agent", "decide", step));
                (format!("decide {plugin}"), SpanKind::Internal, a)
            }
            What::Evaluate {
                plugin,
                tool,
                verdict,
                reason,
            } => {
                let mut ev = vec![
                    KeyValue::new("keel.policy.verdict", *verdict),
                    KeyValue::new("gen_ai.tool.name", text(tool)),
                ];
                if let Some(r) = reason {
                    ev.push(KeyValue::new("keel.policy.reason", owned(r)));
                }
                events.push(Event::new("policy.verdict", self.end, ev, 0));
                let mut a = vec![KeyValue::new("keel.policy.verdict", *verdict)];
                a.extend(plugin_attrs("policy", "evaluate", step));
                (format!("evaluate {plugin}"), SpanKind::Internal, a)
            }
            What::Tool { tool } => {
                let mut a = vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", text(tool)),
                    KeyValue::new(
                        "gen_ai.tool.call.id",
                        format!("{}:{}", run.run_id, self.step),
                    ),
                    step,
                ];
                if self.error.is_some() {
                    a.push(KeyValue::new("error.type", "tool_error"));
                }
                (format!("execute_tool {tool}"), SpanKind::Internal, a)
            }
            What::Model {
                provider,
                model,
                input_tokens,
                output_tokens,
            } => {
                let mut a = vec![
                    KeyValue::new("gen_ai.operation.name", "chat"),
                    KeyValue::new("gen_ai.provider.name", text(provider)),
                    KeyValue::new("gen_ai.request.model", text(model)),
                    step,
                ];
                match self.error {
                    None => a.extend([
                        KeyValue::new("gen_ai.usage.input_tokens", i64::from(*input_tokens)),
                        KeyValue::new("gen_ai.usage.output_tokens", i64::from(*output_tokens)),
                    ]),
                    Some(_) => a.push(KeyValue::new("error.type", "model_error")),
                }
                (format!("chat {model}"), SpanKind::Client, a)
            }
            What::Approval {
                tool,
                id,
                status: answer,
                decided_by,
            } => {
                let mut a = vec![
                    KeyValue::new("gen_ai.tool.name", text(tool)),
                    KeyValue::new("keel.approval.id", owned(id)),
                    KeyValue::new("keel.approval.status", *answer),
                    step,
                ];
                if let Some(by) = decided_by {
                    a.push(KeyValue::new("keel.approval.decided_by", owned(by)));
                }
                let answered = vec![KeyValue::new("keel.approval.status", *answer)];
                events.push(Event::new("approval.answered", self.end, answered, 0));
                (format!("await_approval {tool}"), SpanKind::Internal, a)
            }
            What::Run {
                status: st,
                reason,
                steps,
                tokens,
            } => {
                let mut a = vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", text(&run.agent)),
                    KeyValue::new("keel.run.status", st.as_str()),
                    KeyValue::new("keel.run.steps", i64::from(*steps)),
                    KeyValue::new("gen_ai.usage.total_tokens", *tokens as i64),
                ];
                if let Some(r) = reason {
                    a.push(KeyValue::new("keel.run.reason", r.as_str()));
                }
                if *st == RunStatus::Completed {
                    status = Status::Ok;
                } else {
                    let why = reason.map_or(st.as_str(), |r| r.as_str());
                    let ev = vec![KeyValue::new("keel.run.reason", why)];
                    events.push(Event::new(format!("run.{st}"), self.end, ev, 0));
                    status = Status::error(format!("the run ended {st}: {why}"));
                }
                (format!("invoke_agent {}", run.agent), SpanKind::Internal, a)
            }
        };
        attributes.push(conversation);
        let root = matches!(self.what, What::Run { .. });
        let (span_id, parent) = if root {
            (run.span_id, SpanId::INVALID)
        } else {
            (ids.new_span_id(), run.span_id)
        };
        SpanData {
            span_context: SpanContext::new(
                run.trace_id,
                span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            // The run's span is a child's parent in every process that
            // records one, but only one process builds it.
            parent_span_is_remote: !root,
            span_kind: kind,
            name: name.into(),
            start_time: self.start,
            end_time: self.end.max(self.start),
            attributes,
            dropped_attributes_count: 0,
            events: span_events(events),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope.clone(),
        }
    }
}

fn plugin_attrs(world: &'static str, function: &'static str, step: KeyValue) -> [KeyValue; 3] {
    [
        KeyValue::new("keel.plugin.world", world),
        KeyValue::new("keel.plugin.function", function),
        step,
    ]
}

fn span_events(events: Vec<Event>) -> SpanEvents {
    let mut e = SpanEvents::default();
    e.events = events;
    e
}
