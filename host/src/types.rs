//! The run's vocabulary, shared by the store, the loop and every consumer.
//!
//! These mirror the WIT types of `keel:plugin`; `wasm::shape` maps between
//! the two. JSON payloads are kept as text: the store keeps exactly what it
//! was given, and consumers parse only what they read.

use serde::{Deserialize, Serialize};

use keel_vocab::spelled_enum;
pub use keel_vocab::{Effect, ObservationKind, ToolSpec};

spelled_enum! {
    pub enum RunStatus {
        Running = "running",
        WaitingForApproval = "waiting_for_approval",
        /// Set aside until its model server is back (`reason` says why,
        /// `retry_at` when to try again); `resume` continues it.
        Parked = "parked",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

spelled_enum! {
    /// Why a run is where it is: why it ended, or why it is parked.
    pub enum RunReason {
        Completed = "completed",
        AgentFailed = "agent_failed",
        AgentError = "agent_error",
        AgentTrapped = "agent_trapped",
        PolicyAbort = "policy_abort",
        PolicyError = "policy_error",
        PolicyTrapped = "policy_trapped",
        OperatorCancelled = "operator_cancelled",
        LimitSteps = "limit_steps",
        LimitConsecutiveFailures = "limit_consecutive_failures",
        LimitIdenticalCalls = "limit_identical_calls",
        LimitDeadline = "limit_deadline",
        LimitModelCalls = "limit_model_calls",
        LimitTokens = "limit_tokens",
        /// Parked: the model server stayed unavailable through the retries.
        ModelUnavailable = "model_unavailable",
        /// An MCP tool's schema changed from its pin during the run, and
        /// the config says to fail (`on_pin_mismatch = "fail"`).
        ToolChanged = "tool_changed",
    }
}

spelled_enum! {
    /// What an event in a run's journal records.
    pub enum EventKind {
        RunStarted = "run.started",
        RunPaused = "run.paused",
        RunResumed = "run.resumed",
        RunParked = "run.parked",
        RunCompleted = "run.completed",
        RunFailed = "run.failed",
        RunCancelled = "run.cancelled",
        StepStarted = "step.started",
        StepDecided = "step.decided",
        StepVerdict = "step.verdict",
        StepExecuting = "step.executing",
        StepInterrupted = "step.interrupted",
        StepDone = "step.done",
        ApprovalRequested = "approval.requested",
        ApprovalApproved = "approval.approved",
        ApprovalDenied = "approval.denied",
        ApprovalExpired = "approval.expired",
        ApprovalCancelled = "approval.cancelled",
        LeaseTakenOver = "lease.taken_over",
        ModelCalled = "model.called",
        PluginLog = "plugin.log",
        PluginLogsDropped = "plugin.logs_dropped",
    }
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

spelled_enum! {
    pub enum StepState {
        Started = "started",
        Decided = "decided",
        AwaitingApproval = "awaiting_approval",
        Executing = "executing",
        Done = "done",
        Interrupted = "interrupted",
    }
}

spelled_enum! {
    pub enum ApprovalKind {
        Policy = "policy",
        InterruptedSideEffect = "interrupted_side_effect",
    }
}

spelled_enum! {
    pub enum ApprovalStatus {
        Pending = "pending",
        Approved = "approved",
        Denied = "denied",
        Expired = "expired",
        /// Closed unanswered because the run was cancelled.
        Cancelled = "cancelled",
    }
}

/// A request to run one tool. `arguments` is JSON text: verbatim as the agent
/// gave it inside a decision, canonical once validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool: String,
    pub arguments: String,
}

/// What an agent wants next, exactly as it said it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Call(ToolCall),
    /// JSON text of the run's result.
    Complete(String),
    Fail(String),
    /// The agent could not produce a usable decision this time.
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub reason: String,
    /// JSON text shown beside the call.
    pub presentation: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny(String),
    RequireApproval(ApprovalRequest),
    Abort(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub kind: ObservationKind,
    /// JSON text.
    pub content: String,
}

impl Observation {
    /// An observation whose content is `{"<key>": "<text>"}`.
    pub fn message(kind: ObservationKind, key: &str, text: &str) -> Observation {
        let mut m = serde_json::Map::new();
        m.insert(key.to_string(), serde_json::Value::String(text.to_string()));
        Observation {
            kind,
            content: serde_json::Value::Object(m).to_string(),
        }
    }
}

/// One step as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub index: u32,
    pub version: u32,
    pub state: StepState,
    pub decision: Option<Decision>,
    /// The validated call (canonical arguments) and its tool's effect, once
    /// the decision was found valid.
    pub call: Option<ToolCall>,
    pub effect: Option<Effect>,
    pub verdict: Option<Verdict>,
    pub observation: Option<Observation>,
    pub started_at: i64,
    pub updated_at: i64,
}

impl Step {
    /// Step `index` as it starts at `now`, before the agent decides it.
    pub fn started(index: u32, now: i64) -> Step {
        Step {
            index,
            version: 1,
            state: StepState::Started,
            decision: None,
            call: None,
            effect: None,
            verdict: None,
            observation: None,
            started_at: now,
            updated_at: now,
        }
    }
}

/// An operator's decision point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub run_id: String,
    pub step_index: u32,
    pub kind: ApprovalKind,
    pub status: ApprovalStatus,
    pub call: ToolCall,
    pub reason: String,
    pub presentation: String,
    /// sha256 over exactly what the operator is shown.
    pub hash: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub decided_by: Option<String>,
    pub note: Option<String>,
    pub decided_at: Option<i64>,
    /// The run's chain head when the approval was asked for; its hash
    /// covers it (`None` for approvals asked for before the chain).
    #[serde(default)]
    pub chain_head: Option<String>,
    /// For an MCP tool, the pin of its server's tools when the approval
    /// was asked for; its hash covers it, and a call is not run on an
    /// approval given for another schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_pin: Option<String>,
}

/// The largest goal a run may be given, in bytes (1 MiB).
pub const MAX_GOAL_BYTES: usize = 1 << 20;

/// A run's wall-clock bound unless its limits say otherwise: 24 hours.
pub const DEFAULT_RUN_DEADLINE_MS: u64 = 24 * 60 * 60 * 1000;

/// A run's limits. Zero or `None` means "no limit" only where said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_steps: u32,
    pub max_consecutive_failures: u32,
    /// A call with the same tool, arguments and result this many times in a
    /// row ends the run.
    pub max_identical_calls: u32,
    /// Wall-clock deadline from the run's start, in milliseconds, time
    /// paused for approvals included. Every run has one: by default
    /// [`DEFAULT_RUN_DEADLINE_MS`] (24 hours).
    pub deadline_ms: Option<u64>,
    pub max_model_calls: u32,
    pub max_tokens: u64,
    /// How long an approval stays pending before it expires, in milliseconds.
    pub approval_ttl_ms: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 100,
            max_consecutive_failures: 5,
            max_identical_calls: 3,
            deadline_ms: Some(DEFAULT_RUN_DEADLINE_MS),
            max_model_calls: 200,
            max_tokens: 2_000_000,
            approval_ttl_ms: None,
        }
    }
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub id: String,
    pub goal: String,
    pub status: RunStatus,
    /// Why a terminal run ended, or why it is parked.
    pub reason: Option<RunReason>,
    /// JSON text of the result of a completed run.
    pub result: Option<String>,
    pub limits: Limits,
    /// Opaque JSON the embedder stored with the run (the CLI keeps the config
    /// path here so that `resume` can rebuild the consumers).
    pub meta: String,
    pub step_count: u32,
    pub model_calls: u32,
    pub tokens: u64,
    pub consecutive_failures: u32,
    pub lease_owner: Option<String>,
    pub lease_expires: Option<i64>,
    /// When a parked run is worth trying again (ms since the epoch); set
    /// only while the run is parked.
    #[serde(default)]
    pub retry_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// How many events the run's journal holds: the position of its
    /// newest event in the run's hash chain (`store::chain`).
    #[serde(default)]
    pub chain_len: u64,
    /// The hash of the run's newest event (the chain's first hash while it
    /// has none). The store sets it; an auditor keeps it to check the
    /// journal against later.
    #[serde(default)]
    pub chain_head: String,
}

impl Run {
    /// A new running run with no steps, no lease and empty meta (`{}`).
    pub fn new(id: &str, goal: &str, limits: Limits, now: i64) -> Run {
        Run {
            id: id.to_string(),
            goal: goal.to_string(),
            status: RunStatus::Running,
            reason: None,
            result: None,
            limits,
            meta: "{}".to_string(),
            step_count: 0,
            model_calls: 0,
            tokens: 0,
            consecutive_failures: 0,
            lease_owner: None,
            lease_expires: None,
            retry_at: None,
            created_at: now,
            updated_at: now,
            chain_len: 0,
            chain_head: String::new(),
        }
    }
}

// What a run records besides its rows: made by the loop, the consumers and
// the model gate, inserted by the store with the run's next transition.

/// An event about to be inserted with its transition.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub step_index: Option<u32>,
    pub kind: EventKind,
    pub data: serde_json::Value,
}

impl NewEvent {
    pub fn new(kind: EventKind, step_index: Option<u32>, data: serde_json::Value) -> NewEvent {
        NewEvent {
            step_index,
            kind,
            data,
        }
    }
}

/// One call to the model provider, as accounted.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCallRecord {
    pub step_index: u32,
    pub provider: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// `ok`, `error` or `refused_limit`.
    pub outcome: &'static str,
    pub error: Option<String>,
    pub latency_ms: u64,
}

/// Canonical JSON: object keys sorted, no insignificant whitespace. This is
/// what the store keeps for validated arguments and what approval hashes cover.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            // Sort explicitly: the map's own order depends on serde_json features.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
pub(crate) mod samples;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for e in Effect::ALL {
            assert_eq!(e.as_str().parse::<Effect>().unwrap(), *e);
        }
        for s in StepState::ALL {
            assert_eq!(s.as_str().parse::<StepState>().unwrap(), *s);
        }
        assert!("bogus".parse::<RunStatus>().is_err());
    }

    #[test]
    fn every_kind_of_step_round_trips_through_json() {
        for s in samples::every_kind_of_step() {
            let text = serde_json::to_string(&s).unwrap();
            let back: Step = serde_json::from_str(&text).unwrap();
            assert_eq!(back, s, "{text}");
        }
    }

    #[test]
    fn a_step_in_json_has_the_shape_the_api_documents() {
        let steps = samples::every_kind_of_step();
        let v = serde_json::to_value(&steps[2]).unwrap();
        assert_eq!(v["state"], "awaiting_approval");
        assert_eq!(v["decision"]["call"]["tool"], "fs_write");
        assert_eq!(v["call"]["arguments"], r#"{"path":"a"}"#);
        assert_eq!(v["effect"], "local-mutation");
        assert_eq!(
            v["verdict"]["require_approval"]["reason"],
            "writes outside the workspace"
        );
        let v = serde_json::to_value(&steps[6]).unwrap();
        assert_eq!(v["verdict"]["deny"], "destroys data");
        assert_eq!(v["observation"]["kind"], "denied");
        let v = serde_json::to_value(&steps[3]).unwrap();
        assert_eq!(v["verdict"], "allow");
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{ "b": 1, "a": [ 2, {"d":1,"c":2} ] }"#).unwrap();
        assert_eq!(canonical_json(&v), r#"{"a":[2,{"c":2,"d":1}],"b":1}"#);
    }
}
