//! Between the host's types and the generated WIT types.

use super::bindings::wit;
use crate::model as m;
use crate::types::*;

pub fn effect_out(e: Effect) -> wit::Effect {
    match e {
        Effect::ReadOnly => wit::Effect::ReadOnly,
        Effect::Idempotent => wit::Effect::Idempotent,
        Effect::LocalMutation => wit::Effect::LocalMutation,
        Effect::RemoteMutation => wit::Effect::RemoteMutation,
        Effect::Destructive => wit::Effect::Destructive,
    }
}

pub fn effect_in(e: wit::Effect) -> Effect {
    match e {
        wit::Effect::ReadOnly => Effect::ReadOnly,
        wit::Effect::Idempotent => Effect::Idempotent,
        wit::Effect::LocalMutation => Effect::LocalMutation,
        wit::Effect::RemoteMutation => Effect::RemoteMutation,
        wit::Effect::Destructive => Effect::Destructive,
    }
}

pub fn tool_spec_out(s: &ToolSpec) -> wit::ToolSpec {
    wit::ToolSpec {
        name: s.name.clone(),
        description: s.description.clone(),
        parameters: s.parameters.clone(),
        effect: effect_out(s.effect),
    }
}

pub fn tool_spec_in(s: wit::ToolSpec) -> ToolSpec {
    ToolSpec {
        name: s.name,
        description: s.description,
        parameters: s.parameters,
        effect: effect_in(s.effect),
    }
}

#[cfg(feature = "bench-hooks")]
pub fn call_out(c: &ToolCall) -> wit::ToolCall {
    wit::ToolCall {
        tool: c.tool.clone(),
        arguments: c.arguments.clone(),
    }
}

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

#[cfg(feature = "bench-hooks")]
fn decision_out(d: &Decision) -> wit::Decision {
    match d {
        Decision::Call(c) => wit::Decision::Call(call_out(c)),
        Decision::Complete(r) => wit::Decision::Complete(r.clone()),
        Decision::Fail(r) => wit::Decision::Fail(r.clone()),
        Decision::Invalid(r) => wit::Decision::Invalid(r.clone()),
    }
}

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

#[cfg(feature = "bench-hooks")]
fn verdict_out(v: &Verdict) -> wit::Verdict {
    match v {
        Verdict::Allow => wit::Verdict::Allow,
        Verdict::Deny(r) => wit::Verdict::Deny(r.clone()),
        Verdict::RequireApproval(a) => wit::Verdict::RequireApproval(wit::ApprovalRequest {
            reason: a.reason.clone(),
            presentation: a.presentation.clone(),
        }),
        Verdict::Abort(r) => wit::Verdict::Abort(r.clone()),
    }
}

pub fn step_state_out(s: StepState) -> wit::StepState {
    match s {
        StepState::Started => wit::StepState::Started,
        StepState::Decided => wit::StepState::Decided,
        StepState::AwaitingApproval => wit::StepState::AwaitingApproval,
        StepState::Executing => wit::StepState::Executing,
        StepState::Done => wit::StepState::Done,
        StepState::Interrupted => wit::StepState::Interrupted,
    }
}

pub fn observation_kind_out(k: ObservationKind) -> wit::ObservationKind {
    match k {
        ObservationKind::ToolResult => wit::ObservationKind::ToolResult,
        ObservationKind::ToolError => wit::ObservationKind::ToolError,
        ObservationKind::Denied => wit::ObservationKind::Denied,
        ObservationKind::InvalidDecision => wit::ObservationKind::InvalidDecision,
        ObservationKind::Final => wit::ObservationKind::Final,
    }
}

#[cfg(feature = "bench-hooks")]
pub fn step_out(s: &Step) -> wit::Step {
    wit::Step {
        index: s.index,
        version: s.version,
        state: step_state_out(s.state),
        decision: s.decision.as_ref().map(decision_out),
        verdict: s.verdict.as_ref().map(verdict_out),
        observation: s.observation.as_ref().map(|o| wit::Observation {
            kind: observation_kind_out(o.kind),
            content: o.content.clone(),
        }),
    }
}

pub fn approval_kind_out(k: ApprovalKind) -> wit::ApprovalKind {
    match k {
        ApprovalKind::Policy => wit::ApprovalKind::Policy,
        ApprovalKind::InterruptedSideEffect => wit::ApprovalKind::InterruptedSideEffect,
    }
}

pub fn approval_status_out(s: ApprovalStatus) -> wit::ApprovalStatus {
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

#[cfg(feature = "bench-hooks")]
pub fn approval_out(a: &Approval) -> wit::Approval {
    wit::Approval {
        id: a.id.clone(),
        step_index: a.step_index,
        kind: approval_kind_out(a.kind),
        status: approval_status_out(a.status),
        call: call_out(&a.call),
        reason: a.reason.clone(),
        decided_by: a.decided_by.clone(),
        note: a.note.clone(),
    }
}

pub fn run_status_out(s: RunStatus) -> wit::RunStatus {
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

#[cfg(feature = "bench-hooks")]
pub fn run_out(r: &Run, step_count: u32) -> wit::RunInfo {
    wit::RunInfo {
        id: r.id.clone(),
        goal: r.goal.clone(),
        status: run_status_out(r.status),
        step_count,
        model_calls: r.model_calls,
        tokens: r.tokens,
    }
}

fn role_in(r: wit::Role) -> m::Role {
    match r {
        wit::Role::System => m::Role::System,
        wit::Role::User => m::Role::User,
        wit::Role::Assistant => m::Role::Assistant,
        wit::Role::Tool => m::Role::Tool,
    }
}

fn role_out(r: m::Role) -> wit::Role {
    match r {
        m::Role::System => wit::Role::System,
        m::Role::User => wit::Role::User,
        m::Role::Assistant => wit::Role::Assistant,
        m::Role::Tool => wit::Role::Tool,
    }
}

pub fn model_request_in(r: wit::ModelRequest) -> m::ModelRequest {
    m::ModelRequest {
        messages: r
            .messages
            .into_iter()
            .map(|msg| m::Message {
                role: role_in(msg.role),
                content: msg.content,
                tool_calls: msg
                    .tool_calls
                    .into_iter()
                    .map(|c| m::ModelToolCall {
                        id: c.id,
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect(),
                tool_call_id: msg.tool_call_id,
            })
            .collect(),
        tools: r
            .tools
            .into_iter()
            .map(|t| keel_guest::ToolSpec {
                name: t.name,
                description: t.description,
                parameters: t.parameters,
                effect: match t.effect {
                    wit::Effect::ReadOnly => keel_guest::Effect::ReadOnly,
                    wit::Effect::Idempotent => keel_guest::Effect::Idempotent,
                    wit::Effect::LocalMutation => keel_guest::Effect::LocalMutation,
                    wit::Effect::RemoteMutation => keel_guest::Effect::RemoteMutation,
                    wit::Effect::Destructive => keel_guest::Effect::Destructive,
                },
            })
            .collect(),
        max_tokens: r.max_tokens,
        temperature: r.temperature,
    }
}

pub fn model_response_out(r: m::ModelResponse) -> wit::ModelResponse {
    wit::ModelResponse {
        message: wit::Message {
            role: role_out(r.message.role),
            content: r.message.content,
            tool_calls: r
                .message
                .tool_calls
                .into_iter()
                .map(|c| wit::ModelToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            tool_call_id: r.message.tool_call_id,
        },
        finish_reason: match r.finish_reason {
            m::FinishReason::Stop => wit::FinishReason::Stop,
            m::FinishReason::ToolCalls => wit::FinishReason::ToolCalls,
            m::FinishReason::Length => wit::FinishReason::Length,
            m::FinishReason::ContentFilter => wit::FinishReason::ContentFilter,
            m::FinishReason::Other => wit::FinishReason::Other,
        },
        prompt_tokens: r.prompt_tokens,
        completion_tokens: r.completion_tokens,
    }
}

pub fn model_error_out(e: m::ModelError) -> wit::ModelError {
    match e {
        m::ModelError::LimitExceeded(s) => wit::ModelError::LimitExceeded(s),
        m::ModelError::Transient(s) => wit::ModelError::Transient(s),
        m::ModelError::Permanent(s) => wit::ModelError::Permanent(s),
        m::ModelError::InvalidRequest(s) => wit::ModelError::InvalidRequest(s),
    }
}
