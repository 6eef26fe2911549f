//! Renders a run into chat messages for a model.
//!
//! The rules are `keel_vocab::render`'s, the same code the host's native
//! agents call: a system prompt, the goal as the user's message, then one
//! assistant tool call and one tool answer per step, with old results
//! elided and long ones capped. This module reads the SDK's [`Step`]s in
//! place and hands back WIT [`Message`]s, ready for `model::complete`.

pub use keel_vocab::render::{call_id, cap, RenderOptions, DEFAULT_SYSTEM};

use crate::{Decision, Message, ModelToolCall, ObservationKind, Role, Step};
use keel_vocab as v;
use keel_vocab::render::{DecisionRef, RenderStep};

impl RenderStep for Step {
    fn index(&self) -> u32 {
        self.index
    }
    fn decision(&self) -> Option<DecisionRef<'_>> {
        self.decision.as_ref().map(|d| match d {
            Decision::Call(c) => DecisionRef::Call {
                tool: &c.tool,
                arguments: &c.arguments,
            },
            Decision::Invalid(why) => DecisionRef::Invalid(why),
            Decision::Complete(_) | Decision::Fail(_) => DecisionRef::End,
        })
    }
    fn observation(&self) -> Option<(v::ObservationKind, &str)> {
        self.observation
            .as_ref()
            .map(|o| (observation_kind(o.kind), o.content.as_str()))
    }
}

/// The messages for a run with this goal and these steps.
pub fn messages(goal: &str, steps: &[Step], opts: &RenderOptions) -> Vec<Message> {
    v::render::messages(goal, steps, opts)
        .into_iter()
        .map(message)
        .collect()
}

/// The shared vocabulary's observation kind of a WIT one.
pub fn observation_kind(k: ObservationKind) -> v::ObservationKind {
    match k {
        ObservationKind::ToolResult => v::ObservationKind::ToolResult,
        ObservationKind::ToolError => v::ObservationKind::ToolError,
        ObservationKind::Denied => v::ObservationKind::Denied,
        ObservationKind::InvalidDecision => v::ObservationKind::InvalidDecision,
        ObservationKind::Final => v::ObservationKind::Final,
    }
}

/// A rendered message as the WIT record `model::complete` takes; its text
/// is moved, not copied.
fn message(m: v::Message) -> Message {
    Message {
        role: match m.role {
            v::Role::System => Role::System,
            v::Role::User => Role::User,
            v::Role::Assistant => Role::Assistant,
            v::Role::Tool => Role::Tool,
        },
        content: m.content,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| ModelToolCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            })
            .collect(),
        tool_call_id: m.tool_call_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Observation, StepState, ToolCall};

    fn step(i: u32, kind: ObservationKind, content: &str) -> Step {
        Step {
            index: i,
            version: 4,
            state: StepState::Done,
            decision: Some(Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: "{}".into(),
            })),
            verdict: None,
            observation: Some(Observation {
                kind,
                content: content.into(),
            }),
        }
    }

    #[test]
    fn wit_steps_render_by_the_shared_rules() {
        let steps = vec![
            step(0, ObservationKind::ToolResult, "{\"r\":1}"),
            step(1, ObservationKind::ToolError, "boom"),
        ];
        let m = messages("g", &steps, &RenderOptions::default());
        assert_eq!(m.len(), 6);
        assert_eq!(m[0].role, Role::System);
        assert_eq!(m[1].content, "g");
        assert_eq!(m[2].role, Role::Assistant);
        assert_eq!(m[2].tool_calls[0].id, "call_0");
        assert_eq!(m[2].tool_calls[0].name, "echo");
        assert_eq!(m[3].role, Role::Tool);
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_0"));
        assert_eq!(m[3].content, "{\"r\":1}");
        assert_eq!(m[5].content, "tool error: boom");
    }

    #[test]
    fn every_wit_observation_kind_has_its_own_vocabulary_kind() {
        let all = [
            ObservationKind::ToolResult,
            ObservationKind::ToolError,
            ObservationKind::Denied,
            ObservationKind::InvalidDecision,
            ObservationKind::Final,
        ];
        let mapped: Vec<_> = all.iter().map(|k| observation_kind(*k)).collect();
        assert_eq!(mapped, v::ObservationKind::ALL);
    }
}
