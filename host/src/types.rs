//! The run's vocabulary, shared by the store, the loop and every consumer.
//!
//! These mirror the WIT types of `keel:plugin`; `wasm::shape` maps between
//! the two. JSON payloads are kept as text: the store keeps exactly what it
//! was given, and consumers parse only what they read.

use serde::{Deserialize, Serialize};

use keel_vocab::spelled_enum;
pub use keel_vocab::{Effect, ObservationKind, ToolSpec};

spelled_enum! {
    /// Where a run is in its life; `completed`, `failed` and `cancelled` are
    /// final.
    pub enum RunStatus {
        /// The run goes on: a driver holds it or will take it up.
        Running = "running",
        /// Paused until an operator answers its pending approval.
        WaitingForApproval = "waiting_for_approval",
        /// Set aside until its model server is back (`reason` says why,
        /// `retry_at` when to try again); `resume` continues it.
        Parked = "parked",
        /// The agent completed it; `result` holds its JSON result.
        Completed = "completed",
        /// It ended in failure; `reason` says why and `result` holds the error.
        Failed = "failed",
        /// An operator cancelled it.
        Cancelled = "cancelled",
    }
}

spelled_enum! {
    /// Why a run is where it is: why it ended, or why it is parked.
    pub enum RunReason {
        /// The agent completed the run.
        Completed = "completed",
        /// The agent decided to fail the run (a `fail` decision).
        AgentFailed = "agent_failed",
        /// The agent's call returned an error instead of a decision.
        AgentError = "agent_error",
        /// The agent's plugin instance trapped.
        AgentTrapped = "agent_trapped",
        /// The policy's verdict was `abort`.
        PolicyAbort = "policy_abort",
        /// The policy's call returned an error instead of a verdict.
        PolicyError = "policy_error",
        /// The policy's plugin instance trapped.
        PolicyTrapped = "policy_trapped",
        /// An operator cancelled the run.
        OperatorCancelled = "operator_cancelled",
        /// The run reached its `max_steps`.
        LimitSteps = "limit_steps",
        /// `max_consecutive_failures` steps in a row failed.
        LimitConsecutiveFailures = "limit_consecutive_failures",
        /// The same call got the same result `max_identical_calls` times in a
        /// row.
        LimitIdenticalCalls = "limit_identical_calls",
        /// The run passed its wall-clock deadline (`deadline_ms`).
        LimitDeadline = "limit_deadline",
        /// The run used up its `max_model_calls`.
        LimitModelCalls = "limit_model_calls",
        /// The run used up its `max_tokens`.
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
        /// The run was created; the data holds its goal and limits.
        RunStarted = "run.started",
        /// The run paused on an approval.
        RunPaused = "run.paused",
        /// The run went on after its approval was answered, or after being
        /// parked.
        RunResumed = "run.resumed",
        /// The run was parked while its model server is down; the data holds
        /// the error and `retry_at`.
        RunParked = "run.parked",
        /// The run completed.
        RunCompleted = "run.completed",
        /// The run failed; the data holds its reason and error.
        RunFailed = "run.failed",
        /// An operator cancelled the run; the data says who.
        RunCancelled = "run.cancelled",
        /// A step started.
        StepStarted = "step.started",
        /// The agent's decision for a step was recorded, as it gave it.
        StepDecided = "step.decided",
        /// The verdict on a step's call was recorded.
        StepVerdict = "step.verdict",
        /// A step's tool is about to run.
        StepExecuting = "step.executing",
        /// A step's tool was found running after a crash, or the run was
        /// cancelled while it ran.
        StepInterrupted = "step.interrupted",
        /// A step finished; the data holds its observation.
        StepDone = "step.done",
        /// An approval was asked for; the data holds its id, kind and reason.
        ApprovalRequested = "approval.requested",
        /// An operator approved a pending approval; the data says who, with
        /// any note.
        ApprovalApproved = "approval.approved",
        /// An operator denied a pending approval; the data says who, with any
        /// note.
        ApprovalDenied = "approval.denied",
        /// An approval expired unanswered, and its step closed as denied.
        ApprovalExpired = "approval.expired",
        /// A pending approval was closed because the run was cancelled.
        ApprovalCancelled = "approval.cancelled",
        /// A driver took the run's lease from another holder; the data says
        /// from whom and why.
        LeaseTakenOver = "lease.taken_over",
        /// A model call was made or refused, with its tokens, outcome and
        /// latency.
        ModelCalled = "model.called",
        /// A plugin logged a line.
        PluginLog = "plugin.log",
        /// A plugin call logged more lines than its limit; the data says how
        /// many were dropped.
        PluginLogsDropped = "plugin.logs_dropped",
    }
}

impl RunStatus {
    /// Whether the run has ended: completed, failed or cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

spelled_enum! {
    /// Where a step is in its life, from `started` to `done`.
    pub enum StepState {
        /// The step exists; the agent has not decided yet.
        Started = "started",
        /// The agent's call is recorded and valid; the policy has not judged it
        /// yet.
        Decided = "decided",
        /// The policy or the operator's config asked for approval; the run is
        /// paused.
        AwaitingApproval = "awaiting_approval",
        /// The tool is running (written before it starts).
        Executing = "executing",
        /// Finished; the observation is final.
        Done = "done",
        /// Found `executing` after a crash or a cancel: the tool may or may not
        /// have run.
        Interrupted = "interrupted",
    }
}

spelled_enum! {
    /// Why an approval exists.
    pub enum ApprovalKind {
        /// The policy returned `require_approval`, or the operator's config
        /// requires approval for the tool.
        Policy = "policy",
        /// A side-effecting tool was interrupted by a crash and must not run
        /// again without an operator's word.
        InterruptedSideEffect = "interrupted_side_effect",
    }
}

spelled_enum! {
    /// Whether an approval still waits for an answer, and how it was closed.
    pub enum ApprovalStatus {
        /// Waiting for an operator's answer.
        Pending = "pending",
        /// An operator approved the call; the run goes on to run it.
        Approved = "approved",
        /// An operator denied the call; the step closes as denied.
        Denied = "denied",
        /// Nobody answered before `expires_at`; the step closes as denied.
        Expired = "expired",
        /// Closed unanswered because the run was cancelled.
        Cancelled = "cancelled",
    }
}

/// A request to run one tool. `arguments` is JSON text: verbatim as the agent
/// gave it inside a decision, canonical once validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The name of the tool to run, as its `ToolSpec` names it.
    pub tool: String,
    /// The arguments object, as JSON text.
    pub arguments: String,
}

/// What an agent wants next, exactly as it said it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run this tool; an unknown tool or arguments that fail its schema become
    /// an `invalid_decision` observation.
    Call(ToolCall),
    /// JSON text of the run's result.
    Complete(String),
    /// End the run as failed (`agent_failed`), with this reason.
    Fail(String),
    /// The agent could not produce a usable decision this time.
    Invalid(String),
}

/// What a policy shows an operator when it asks for approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Why approval is needed, in words.
    pub reason: String,
    /// JSON text shown beside the call.
    pub presentation: String,
}

/// A policy's judgement of one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Run the call.
    Allow,
    /// Do not run it; the agent sees this reason as the step's `denied`
    /// observation.
    Deny(String),
    /// Pause the run until an operator approves or denies the call.
    RequireApproval(ApprovalRequest),
    /// End the run as failed (`policy_abort`), with this reason.
    Abort(String),
}

/// What a step ended with, which the agent sees on later steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// What the content reports: a tool's result or error, a denial, an invalid
    /// decision, or the run's end.
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
    /// The step's 0-based position in the run.
    pub index: u32,
    /// Starts at 1 and grows by one with every stored change of the step.
    pub version: u32,
    /// Where the step is in its life.
    pub state: StepState,
    /// The agent's decision as it gave it, once it decided.
    pub decision: Option<Decision>,
    /// The validated call (canonical arguments) and its tool's effect, once
    /// the decision was found valid.
    pub call: Option<ToolCall>,
    /// What the called tool may do to the world, set with `call`.
    pub effect: Option<Effect>,
    /// The verdict on the call, once the policy judged it.
    pub verdict: Option<Verdict>,
    /// What the step ended with, once it is done.
    pub observation: Option<Observation>,
    /// When the step started, in ms since the epoch.
    pub started_at: i64,
    /// When the step last changed, in ms since the epoch.
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
    /// The approval's id, `appr_` followed by hex digits.
    pub id: String,
    /// The id of the run it belongs to.
    pub run_id: String,
    /// The index of the step that waits on it.
    pub step_index: u32,
    /// Why it was asked for.
    pub kind: ApprovalKind,
    /// Whether it is pending, or how it was closed.
    pub status: ApprovalStatus,
    /// The call it lets run once approved, with canonical arguments.
    pub call: ToolCall,
    /// Why approval is needed, in words, from the policy or the host.
    pub reason: String,
    /// JSON text shown beside the call.
    pub presentation: String,
    /// sha256 over exactly what the operator is shown.
    pub hash: String,
    /// When it was asked for, in ms since the epoch.
    pub created_at: i64,
    /// When it expires unanswered, in ms since the epoch; `None` when the run's
    /// limits set no `approval_ttl_ms`.
    pub expires_at: Option<i64>,
    /// Who approved or denied it, or who cancelled the run; `None` while
    /// pending or once expired.
    pub decided_by: Option<String>,
    /// The note given with the answer, if any.
    pub note: Option<String>,
    /// When it was answered, expired or cancelled, in ms since the epoch.
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
    /// The most steps the run may have; reaching it ends the run
    /// (`limit_steps`).
    pub max_steps: u32,
    /// How many failed steps in a row end the run
    /// (`limit_consecutive_failures`); 0 means no limit.
    pub max_consecutive_failures: u32,
    /// A call with the same tool, arguments and result this many times in a
    /// row ends the run.
    pub max_identical_calls: u32,
    /// Wall-clock deadline from the run's start, in milliseconds, time
    /// paused for approvals included. Every run has one: by default
    /// [`DEFAULT_RUN_DEADLINE_MS`] (24 hours).
    pub deadline_ms: Option<u64>,
    /// The most model calls the run may make; once reached, calls are refused
    /// and the run ends (`limit_model_calls`).
    pub max_model_calls: u32,
    /// The most prompt and completion tokens the run may use; once reached,
    /// calls are refused and the run ends (`limit_tokens`).
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
    /// The run's id, `run_` followed by hex digits.
    pub id: String,
    /// What the run was asked to do, as given (at most [`MAX_GOAL_BYTES`]).
    pub goal: String,
    /// Where the run is in its life.
    pub status: RunStatus,
    /// Why a terminal run ended, or why it is parked.
    pub reason: Option<RunReason>,
    /// JSON text of the result of a completed run.
    pub result: Option<String>,
    /// The limits the run was started with.
    pub limits: Limits,
    /// Opaque JSON the embedder stored with the run (the CLI keeps the config
    /// path here so that `resume` can rebuild the consumers).
    pub meta: String,
    /// How many steps the run has, the one being worked on included.
    pub step_count: u32,
    /// Model calls charged to the run so far.
    pub model_calls: u32,
    /// Prompt and completion tokens charged to the run so far.
    pub tokens: u64,
    /// How many steps in a row have failed (invalid decision, denial, tool
    /// error); a tool's success resets it.
    pub consecutive_failures: u32,
    /// The driver that holds the run's lease (`ID@HOST:PID:START`), if any.
    pub lease_owner: Option<String>,
    /// When that lease runs out, in ms since the epoch.
    pub lease_expires: Option<i64>,
    /// When a parked run is worth trying again (ms since the epoch); set
    /// only while the run is parked.
    #[serde(default)]
    pub retry_at: Option<i64>,
    /// When the run was created, in ms since the epoch.
    pub created_at: i64,
    /// When the run row last changed, in ms since the epoch.
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
    /// The step the event is about; `None` for an event about the whole run.
    pub step_index: Option<u32>,
    /// What the event records.
    pub kind: EventKind,
    /// The event's details, a JSON value whose shape depends on `kind`.
    pub data: serde_json::Value,
}

impl NewEvent {
    /// An event of `kind` about step `step_index` (or the whole run), with
    /// `data`.
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
    /// The step whose decision made the call.
    pub step_index: u32,
    /// The provider's short name (`stub`, `openai`, `replay`).
    pub provider: String,
    /// Tokens in the prompt, as the provider reported; 0 unless the call
    /// succeeded.
    pub prompt_tokens: u32,
    /// Tokens in the reply, as the provider reported; 0 unless the call
    /// succeeded.
    pub completion_tokens: u32,
    /// `ok`, `error` or `refused_limit`.
    pub outcome: &'static str,
    /// What went wrong, when the outcome is not `ok`.
    pub error: Option<String>,
    /// How long the attempt took, in milliseconds (0 when refused).
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
