//! A run and its approvals across the wasm boundary: the run's header and
//! the approvals a plugin's view holds, and the view delta that carries
//! them with the steps.

use super::step::{call, StepRef, ToolCallRef};
use crate::types::{Approval, ApprovalKind, ApprovalStatus, Run, RunStatus};
use crate::wasm::bindings::wit;
use wasmtime::component::{ComponentType, Lower};

/// `approval`, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct ApprovalRef<'a> {
    pub id: &'a str,
    #[component(name = "step-index")]
    pub step_index: u32,
    pub kind: wit::ApprovalKind,
    pub status: wit::ApprovalStatus,
    pub call: ToolCallRef<'a>,
    pub reason: &'a str,
    #[component(name = "decided-by")]
    pub decided_by: Option<&'a str>,
    pub note: Option<&'a str>,
}

/// `run-info`, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct RunInfoRef<'a> {
    pub id: &'a str,
    pub goal: &'a str,
    pub status: wit::RunStatus,
    #[component(name = "step-count")]
    pub step_count: u32,
    #[component(name = "model-calls")]
    pub model_calls: u32,
    pub tokens: u64,
}

/// `view-delta`, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct ViewDeltaRef<'a> {
    pub reset: bool,
    pub run: RunInfoRef<'a>,
    pub steps: Vec<StepRef<'a>>,
    pub approvals: Vec<ApprovalRef<'a>>,
}

/// A stored approval as a plugin's view holds it.
pub fn approval(a: &Approval) -> ApprovalRef<'_> {
    ApprovalRef {
        id: &a.id,
        step_index: a.step_index,
        kind: approval_kind_out(a.kind),
        status: approval_status_out(a.status),
        call: call(&a.call),
        reason: &a.reason,
        decided_by: a.decided_by.as_deref(),
        note: a.note.as_deref(),
    }
}

/// The run's header as a plugin's view holds it.
pub fn run(r: &Run, step_count: u32) -> RunInfoRef<'_> {
    RunInfoRef {
        id: &r.id,
        goal: &r.goal,
        status: run_status_out(r.status),
        step_count,
        model_calls: r.model_calls,
        tokens: r.tokens,
    }
}

fn approval_kind_out(k: ApprovalKind) -> wit::ApprovalKind {
    match k {
        ApprovalKind::Policy => wit::ApprovalKind::Policy,
        ApprovalKind::InterruptedSideEffect => wit::ApprovalKind::InterruptedSideEffect,
    }
}

fn approval_status_out(s: ApprovalStatus) -> wit::ApprovalStatus {
    match s {
        ApprovalStatus::Pending => wit::ApprovalStatus::Pending,
        ApprovalStatus::Approved => wit::ApprovalStatus::Approved,
        ApprovalStatus::Denied => wit::ApprovalStatus::Denied,
        ApprovalStatus::Expired => wit::ApprovalStatus::Expired,
        // A cancelled run's plugins are never called again; to one that
        // was, an approval closed by the cancel is as good as denied.
        ApprovalStatus::Cancelled => wit::ApprovalStatus::Denied,
    }
}

fn run_status_out(s: RunStatus) -> wit::RunStatus {
    match s {
        // Plugins are called only while a run is worked on, and a parked
        // run is running again before its agent is called: plugins never
        // see `parked`, so the contract does not name it.
        RunStatus::Running | RunStatus::Parked => wit::RunStatus::Running,
        RunStatus::WaitingForApproval => wit::RunStatus::WaitingForApproval,
        RunStatus::Completed => wit::RunStatus::Completed,
        RunStatus::Failed => wit::RunStatus::Failed,
        RunStatus::Cancelled => wit::RunStatus::Cancelled,
    }
}

// Owned WIT values, built from the borrowed records (see `step`).

impl From<ApprovalRef<'_>> for wit::Approval {
    fn from(a: ApprovalRef<'_>) -> Self {
        wit::Approval {
            id: a.id.to_string(),
            step_index: a.step_index,
            kind: a.kind,
            status: a.status,
            call: a.call.into(),
            reason: a.reason.to_string(),
            decided_by: a.decided_by.map(str::to_string),
            note: a.note.map(str::to_string),
        }
    }
}

impl From<RunInfoRef<'_>> for wit::RunInfo {
    fn from(r: RunInfoRef<'_>) -> Self {
        wit::RunInfo {
            id: r.id.to_string(),
            goal: r.goal.to_string(),
            status: r.status,
            step_count: r.step_count,
            model_calls: r.model_calls,
            tokens: r.tokens,
        }
    }
}

impl From<ViewDeltaRef<'_>> for wit::ViewDelta {
    fn from(d: ViewDeltaRef<'_>) -> Self {
        wit::ViewDelta {
            reset: d.reset,
            run: d.run.into(),
            steps: d.steps.into_iter().map(Into::into).collect(),
            approvals: d.approvals.into_iter().map(Into::into).collect(),
        }
    }
}
