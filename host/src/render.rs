//! A run as chat messages, by the same rules agent plugins use
//! (`keel_guest::render`): native agents call this, plugins call the SDK.

pub use keel_guest::render::{RenderOptions, DEFAULT_SYSTEM};

use crate::types::{self, Step};
use keel_guest as g;

/// The messages a model sees for this goal and these steps.
pub fn messages(goal: &str, steps: &[Step], opts: &RenderOptions) -> Vec<g::Message> {
    let steps: Vec<g::Step> = steps.iter().map(to_guest_step).collect();
    keel_guest::render::messages(goal, &steps, opts)
}

/// A stored step in the SDK's (WIT) shape.
pub fn to_guest_step(s: &Step) -> g::Step {
    g::Step {
        index: s.index,
        version: s.version,
        state: match s.state {
            types::StepState::Started => g::StepState::Started,
            types::StepState::Decided => g::StepState::Decided,
            types::StepState::AwaitingApproval => g::StepState::AwaitingApproval,
            types::StepState::Executing => g::StepState::Executing,
            types::StepState::Done => g::StepState::Done,
            types::StepState::Interrupted => g::StepState::Interrupted,
        },
        decision: s.decision.as_ref().map(|d| match d {
            types::Decision::Call(c) => g::Decision::Call(g::ToolCall {
                tool: c.tool.clone(),
                arguments: c.arguments.clone(),
            }),
            types::Decision::Complete(r) => g::Decision::Complete(r.clone()),
            types::Decision::Fail(r) => g::Decision::Fail(r.clone()),
            types::Decision::Invalid(r) => g::Decision::Invalid(r.clone()),
        }),
        verdict: None,
        observation: s.observation.as_ref().map(|o| g::Observation {
            kind: match o.kind {
                types::ObservationKind::ToolResult => g::ObservationKind::ToolResult,
                types::ObservationKind::ToolError => g::ObservationKind::ToolError,
                types::ObservationKind::Denied => g::ObservationKind::Denied,
                types::ObservationKind::InvalidDecision => g::ObservationKind::InvalidDecision,
                types::ObservationKind::Final => g::ObservationKind::Final,
            },
            content: o.content.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;

    #[test]
    fn renders_stored_steps_with_synthesized_ids() {
        let step = Step {
            index: 0,
            version: 4,
            state: StepState::Done,
            decision: Some(Decision::Call(ToolCall {
                tool: "fs_read".into(),
                arguments: r#"{"path":"a"}"#.into(),
            })),
            call: None,
            effect: None,
            verdict: Some(Verdict::Allow),
            observation: Some(Observation {
                kind: ObservationKind::ToolError,
                content: r#"{"error":"nope"}"#.into(),
            }),
            started_at: 0,
            updated_at: 0,
        };
        let m = messages("read a", &[step], &RenderOptions::default());
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].tool_calls[0].id, "call_0");
        assert_eq!(m[3].content, r#"tool error: {"error":"nope"}"#);
    }
}
