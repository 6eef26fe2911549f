//! A run as chat messages, by the rules every Keel agent uses
//! (`keel_vocab::render`): native agents call this, plugins call the SDK,
//! and both run the same code over their own step type.

pub use keel_vocab::render::{RenderOptions, DEFAULT_SYSTEM};

use crate::model::Message;
use crate::types::{Decision, ObservationKind, Step};
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
    fn observation(&self) -> Option<(ObservationKind, &str)> {
        self.observation
            .as_ref()
            .map(|o| (o.kind, o.content.as_str()))
    }
}

/// The messages a model sees for this goal and these steps.
pub fn messages(goal: &str, steps: &[Step], opts: &RenderOptions) -> Vec<Message> {
    keel_vocab::render::messages(goal, steps, opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::samples;
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

    #[test]
    fn every_kind_of_step_renders_by_its_decision() {
        let steps = samples::every_kind_of_step();
        let m = messages("g", &steps, &RenderOptions::default());
        // Seven calls and one invalid reply, two messages each; the
        // undecided step and the two endings show nothing.
        assert_eq!(m.len(), 2 + 2 * 8);
        assert_eq!(m[2].tool_calls[0].id, "call_1");
        assert_eq!(m[2].tool_calls[0].arguments, r#"{ "path" : "a" }"#);
        assert_eq!(m[3].content, "[no result yet]");
        assert_eq!(m[11].content, r#"tool error: {"error":"é, not found"}"#);
        assert_eq!(m[13].content, r#"denied: "destroys data""#);
        assert_eq!(m[16].content, r#"[unusable reply: no tool named "fs_del"]"#);
    }
}
