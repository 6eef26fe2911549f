//! Steps across the wasm boundary: a step, its decision, verdict and
//! observation lowered into a plugin's view, and an agent's decision and a
//! policy's verdict lifted from their answers.

use crate::types::{
    ApprovalRequest, Decision, ObservationKind, Step, StepState, ToolCall, Verdict,
};
use crate::wasm::bindings::wit;
use wasmtime::component::{ComponentType, Lower};

/// `tool-call`, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct ToolCallRef<'a> {
    pub tool: &'a str,
    pub arguments: &'a str,
}

/// `decision`, borrowed.
#[derive(ComponentType, Lower)]
#[component(variant)]
pub enum DecisionRef<'a> {
    #[component(name = "call")]
    Call(ToolCallRef<'a>),
    #[component(name = "complete")]
    Complete(&'a str),
    #[component(name = "fail")]
    Fail(&'a str),
    #[component(name = "invalid")]
    Invalid(&'a str),
}

/// `approval-request`, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct ApprovalRequestRef<'a> {
    pub reason: &'a str,
    pub presentation: &'a str,
}

/// `verdict`, borrowed.
#[derive(ComponentType, Lower)]
#[component(variant)]
pub enum VerdictRef<'a> {
    #[component(name = "allow")]
    Allow,
    #[component(name = "deny")]
    Deny(&'a str),
    #[component(name = "require-approval")]
    RequireApproval(ApprovalRequestRef<'a>),
    #[component(name = "abort")]
    Abort(&'a str),
}

/// `observation`, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct ObservationRef<'a> {
    pub kind: wit::ObservationKind,
    pub content: &'a str,
}

/// `step`, borrowed. The host's step also holds what plugins are not shown
/// (the validated call, its effect, timestamps).
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct StepRef<'a> {
    pub index: u32,
    pub version: u32,
    pub state: wit::StepState,
    pub decision: Option<DecisionRef<'a>>,
    pub verdict: Option<VerdictRef<'a>>,
    pub observation: Option<ObservationRef<'a>>,
}

/// A tool call as a plugin receives it.
pub fn call(c: &ToolCall) -> ToolCallRef<'_> {
    ToolCallRef {
        tool: &c.tool,
        arguments: &c.arguments,
    }
}

fn decision(d: &Decision) -> DecisionRef<'_> {
    match d {
        Decision::Call(c) => DecisionRef::Call(call(c)),
        Decision::Complete(r) => DecisionRef::Complete(r),
        Decision::Fail(r) => DecisionRef::Fail(r),
        Decision::Invalid(r) => DecisionRef::Invalid(r),
    }
}

fn verdict(v: &Verdict) -> VerdictRef<'_> {
    match v {
        Verdict::Allow => VerdictRef::Allow,
        Verdict::Deny(r) => VerdictRef::Deny(r),
        Verdict::RequireApproval(a) => VerdictRef::RequireApproval(ApprovalRequestRef {
            reason: &a.reason,
            presentation: &a.presentation,
        }),
        Verdict::Abort(r) => VerdictRef::Abort(r),
    }
}

/// A stored step as a plugin's view holds it.
pub fn step(s: &Step) -> StepRef<'_> {
    StepRef {
        index: s.index,
        version: s.version,
        state: state_out(s.state),
        decision: s.decision.as_ref().map(decision),
        verdict: s.verdict.as_ref().map(verdict),
        observation: s.observation.as_ref().map(|o| ObservationRef {
            kind: observation_kind_out(o.kind),
            content: &o.content,
        }),
    }
}

fn state_out(s: StepState) -> wit::StepState {
    match s {
        StepState::Started => wit::StepState::Started,
        StepState::Decided => wit::StepState::Decided,
        StepState::AwaitingApproval => wit::StepState::AwaitingApproval,
        StepState::Executing => wit::StepState::Executing,
        StepState::Done => wit::StepState::Done,
        StepState::Interrupted => wit::StepState::Interrupted,
    }
}

fn observation_kind_out(k: ObservationKind) -> wit::ObservationKind {
    match k {
        ObservationKind::ToolResult => wit::ObservationKind::ToolResult,
        ObservationKind::ToolError => wit::ObservationKind::ToolError,
        ObservationKind::Denied => wit::ObservationKind::Denied,
        ObservationKind::InvalidDecision => wit::ObservationKind::InvalidDecision,
        ObservationKind::Final => wit::ObservationKind::Final,
    }
}

/// An agent's decision as the host's.
pub fn decision_in(d: wit::Decision) -> Decision {
    match d {
        wit::Decision::Call(c) => Decision::Call(ToolCall {
            tool: c.tool,
            arguments: c.arguments,
        }),
        wit::Decision::Complete(r) => Decision::Complete(r),
        wit::Decision::Fail(r) => Decision::Fail(r),
        wit::Decision::Invalid(r) => Decision::Invalid(r),
    }
}

/// A policy's verdict as the host's.
pub fn verdict_in(v: wit::Verdict) -> Verdict {
    match v {
        wit::Verdict::Allow => Verdict::Allow,
        wit::Verdict::Deny(r) => Verdict::Deny(r),
        wit::Verdict::RequireApproval(a) => Verdict::RequireApproval(ApprovalRequest {
            reason: a.reason,
            presentation: a.presentation,
        }),
        wit::Verdict::Abort(r) => Verdict::Abort(r),
    }
}

// Owned WIT values, for calls through the generated bindings (the
// benchmarks compare them with the borrowed path) and for the round-trip
// tests: built from the borrowed records, so both paths show plugins the
// same step.

impl From<ToolCallRef<'_>> for wit::ToolCall {
    fn from(c: ToolCallRef<'_>) -> Self {
        wit::ToolCall {
            tool: c.tool.to_string(),
            arguments: c.arguments.to_string(),
        }
    }
}

impl From<DecisionRef<'_>> for wit::Decision {
    fn from(d: DecisionRef<'_>) -> Self {
        match d {
            DecisionRef::Call(c) => wit::Decision::Call(c.into()),
            DecisionRef::Complete(r) => wit::Decision::Complete(r.to_string()),
            DecisionRef::Fail(r) => wit::Decision::Fail(r.to_string()),
            DecisionRef::Invalid(r) => wit::Decision::Invalid(r.to_string()),
        }
    }
}

impl From<VerdictRef<'_>> for wit::Verdict {
    fn from(v: VerdictRef<'_>) -> Self {
        match v {
            VerdictRef::Allow => wit::Verdict::Allow,
            VerdictRef::Deny(r) => wit::Verdict::Deny(r.to_string()),
            VerdictRef::RequireApproval(a) => wit::Verdict::RequireApproval(wit::ApprovalRequest {
                reason: a.reason.to_string(),
                presentation: a.presentation.to_string(),
            }),
            VerdictRef::Abort(r) => wit::Verdict::Abort(r.to_string()),
        }
    }
}

impl From<StepRef<'_>> for wit::Step {
    fn from(s: StepRef<'_>) -> Self {
        wit::Step {
            index: s.index,
            version: s.version,
            state: s.state,
            decision: s.decision.map(Into::into),
            verdict: s.verdict.map(Into::into),
            observation: s.observation.map(|o| wit::Observation {
                kind: o.kind,
                content: o.content.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Observation, StepState};

    fn state_in(s: wit::StepState) -> StepState {
        match s {
            wit::StepState::Started => StepState::Started,
            wit::StepState::Decided => StepState::Decided,
            wit::StepState::AwaitingApproval => StepState::AwaitingApproval,
            wit::StepState::Executing => StepState::Executing,
            wit::StepState::Done => StepState::Done,
            wit::StepState::Interrupted => StepState::Interrupted,
        }
    }

    fn observation_kind_in(k: wit::ObservationKind) -> ObservationKind {
        match k {
            wit::ObservationKind::ToolResult => ObservationKind::ToolResult,
            wit::ObservationKind::ToolError => ObservationKind::ToolError,
            wit::ObservationKind::Denied => ObservationKind::Denied,
            wit::ObservationKind::InvalidDecision => ObservationKind::InvalidDecision,
            wit::ObservationKind::Final => ObservationKind::Final,
        }
    }

    /// What a plugin could say back about a step it was shown, lifted by
    /// the production lifts where they exist.
    fn lifted(w: wit::Step, like: &Step) -> Step {
        Step {
            index: w.index,
            version: w.version,
            state: state_in(w.state),
            decision: w.decision.map(decision_in),
            verdict: w.verdict.map(verdict_in),
            observation: w.observation.map(|o| Observation {
                kind: observation_kind_in(o.kind),
                content: o.content,
            }),
            // Not part of the WIT step: the host keeps them to itself.
            call: like.call.clone(),
            effect: like.effect,
            started_at: like.started_at,
            updated_at: like.updated_at,
        }
    }

    #[test]
    fn every_kind_of_step_crosses_the_boundary_and_back_unchanged() {
        let steps = crate::types::samples::every_kind_of_step();
        for s in &steps {
            let w = wit::Step::from(step(s));
            assert_eq!(&lifted(w, s), s);
        }
    }
}
