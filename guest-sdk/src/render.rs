//! Renders a run into chat messages for a model.
//!
//! These are the rules every Keel agent uses, in a plugin or native in the
//! host (the host calls this same code): a system prompt, the goal as the
//! user's message, then one assistant tool call and one tool answer per step.
//! Only the `window` most recent observations are shown in full; older ones
//! are elided, and any observation longer than `content_cap` bytes is cut at
//! a character boundary with a marker that says how much was dropped.
//! Tool-call ids are synthesized from the step index (`call_<index>`), so the
//! same view always renders to the same messages.

use crate::{Decision, Message, ModelToolCall, ObservationKind, Role, Step};

/// How to render.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderOptions {
    pub system: String,
    /// How many of the most recent observations are shown in full.
    pub window: usize,
    /// The most bytes of one observation shown.
    pub content_cap: usize,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            system: DEFAULT_SYSTEM.to_string(),
            window: 20,
            content_cap: 4000,
        }
    }
}

pub const DEFAULT_SYSTEM: &str = "You are an agent working towards the user's goal. Use the tools \
    you are given, one call at a time. When the goal is reached, answer with the final result and \
    no tool call.";

/// The id of the tool call of step `index`.
pub fn call_id(index: u32) -> String {
    format!("call_{index}")
}

/// Cuts `text` to at most `cap` bytes at a character boundary, saying how
/// many bytes were dropped.
pub fn cap(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} more bytes]", &text[..end], text.len() - end)
}

/// The messages for a run with this goal and these steps.
pub fn messages(goal: &str, steps: &[Step], opts: &RenderOptions) -> Vec<Message> {
    let mut out = Vec::with_capacity(2 + 2 * steps.len());
    out.push(text(Role::System, &opts.system));
    out.push(text(Role::User, goal));
    let observed = steps.iter().filter(|s| s.observation.is_some()).count();
    let mut seen = 0usize;
    for step in steps {
        let Some(decision) = &step.decision else {
            continue;
        };
        let content = match &step.observation {
            None => "[no result yet]".to_string(),
            Some(o) => {
                seen += 1;
                if observed - seen >= opts.window {
                    format!("[result of step {} elided]", step.index)
                } else {
                    let prefix = match o.kind {
                        ObservationKind::ToolResult => "",
                        ObservationKind::ToolError => "tool error: ",
                        ObservationKind::Denied => "denied: ",
                        ObservationKind::InvalidDecision => "invalid call: ",
                        ObservationKind::Final => "",
                    };
                    format!("{prefix}{}", cap(&o.content, opts.content_cap))
                }
            }
        };
        match decision {
            Decision::Call(call) => {
                out.push(Message {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ModelToolCall {
                        id: call_id(step.index),
                        name: call.tool.clone(),
                        arguments: call.arguments.clone(),
                    }],
                    tool_call_id: None,
                });
                out.push(Message {
                    role: Role::Tool,
                    content,
                    tool_calls: vec![],
                    tool_call_id: Some(call_id(step.index)),
                });
            }
            Decision::Invalid(why) => {
                out.push(text(Role::Assistant, &format!("[unusable reply: {why}]")));
                out.push(text(
                    Role::User,
                    &format!("Your last reply could not be used ({why}). {content}"),
                ));
            }
            Decision::Complete(_) | Decision::Fail(_) => {}
        }
    }
    out
}

fn text(role: Role, content: &str) -> Message {
    Message {
        role,
        content: content.to_string(),
        tool_calls: vec![],
        tool_call_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Observation, StepState, ToolCall};

    fn step(i: u32, content: &str) -> Step {
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
                kind: ObservationKind::ToolResult,
                content: content.into(),
            }),
        }
    }

    #[test]
    fn window_elides_old_results_and_ids_are_stable() {
        let steps: Vec<Step> = (0..5).map(|i| step(i, "{\"r\":1}")).collect();
        let m = messages(
            "g",
            &steps,
            &RenderOptions {
                window: 2,
                ..Default::default()
            },
        );
        assert_eq!(m.len(), 2 + 10);
        assert_eq!(m[1].content, "g");
        assert_eq!(m[2].tool_calls[0].id, "call_0");
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_0"));
        assert_eq!(m[3].content, "[result of step 0 elided]");
        assert_eq!(m[7].content, "[result of step 2 elided]");
        assert_eq!(m[9].content, "{\"r\":1}");
        assert_eq!(m[11].content, "{\"r\":1}");
    }

    #[test]
    fn content_is_capped_at_a_char_boundary() {
        assert_eq!(cap("abc", 3), "abc");
        assert_eq!(cap("aéb", 2), "a…[3 more bytes]");
        let steps = vec![step(0, &"x".repeat(100))];
        let m = messages(
            "g",
            &steps,
            &RenderOptions {
                content_cap: 10,
                ..Default::default()
            },
        );
        assert_eq!(m[3].content, format!("{}…[90 more bytes]", "x".repeat(10)));
    }
}
