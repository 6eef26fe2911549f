//! A run's steps as chat messages for a model.
//!
//! These are the rules every Keel agent uses, native in the host or in a
//! plugin through the SDK: a system prompt, the goal as the user's message,
//! then one assistant tool call and one tool answer per step. Only the
//! `window` most recent observations are shown in full; older ones are
//! elided, and any observation longer than `content_cap` bytes is cut at a
//! character boundary with a marker that says how much was dropped.
//! Tool-call ids are synthesized from the step index (`call_<index>`), so the
//! same run always renders to the same messages.
//!
//! The render reads steps through [`RenderStep`], so each side renders its
//! own step type (the host's stored step, the guest's WIT step) without
//! copying it into a third shape first.

use crate::{Message, ModelToolCall, ObservationKind, Role};

/// How to render.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderOptions {
    /// The system prompt.
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

/// The system prompt an agent uses when its config names none.
pub const DEFAULT_SYSTEM: &str = "You are an agent working towards the user's goal. Use the tools \
    you are given, one call at a time. When the goal is reached, answer with the final result and \
    no tool call.";

/// A step's decision as the render reads it, borrowed from the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionRef<'a> {
    /// The agent called `tool` with `arguments` (JSON text).
    Call {
        /// The tool's name.
        tool: &'a str,
        /// The arguments as the agent gave them.
        arguments: &'a str,
    },
    /// The agent's reply could not be used, for this reason.
    Invalid(&'a str),
    /// The agent ended the run (complete or fail): nothing to show.
    End,
}

/// What the render needs of a step: its index, its decision and its
/// observation. The host's stored steps and the guest's WIT steps both
/// implement it.
pub trait RenderStep {
    /// The step's position in the run.
    fn index(&self) -> u32;
    /// The agent's decision, once made.
    fn decision(&self) -> Option<DecisionRef<'_>>;
    /// How the decision ended and its content, once known.
    fn observation(&self) -> Option<(ObservationKind, &str)>;
}

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
pub fn messages<S: RenderStep>(goal: &str, steps: &[S], opts: &RenderOptions) -> Vec<Message> {
    let mut out = Vec::with_capacity(2 + 2 * steps.len());
    out.push(Message::text(Role::System, &opts.system));
    out.push(Message::text(Role::User, goal));
    let observed = steps.iter().filter(|s| s.observation().is_some()).count();
    let mut seen = 0usize;
    for step in steps {
        let Some(decision) = step.decision() else {
            continue;
        };
        let content = match step.observation() {
            None => "[no result yet]".to_string(),
            Some((kind, content)) => {
                seen += 1;
                if observed - seen >= opts.window {
                    format!("[result of step {} elided]", step.index())
                } else {
                    let prefix = match kind {
                        ObservationKind::ToolResult => "",
                        ObservationKind::ToolError => "tool error: ",
                        ObservationKind::Denied => "denied: ",
                        ObservationKind::InvalidDecision => "invalid call: ",
                        ObservationKind::Final => "",
                    };
                    format!("{prefix}{}", cap(content, opts.content_cap))
                }
            }
        };
        match decision {
            DecisionRef::Call { tool, arguments } => {
                out.push(Message {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ModelToolCall {
                        id: call_id(step.index()),
                        name: tool.to_string(),
                        arguments: arguments.to_string(),
                    }],
                    tool_call_id: None,
                });
                out.push(Message {
                    role: Role::Tool,
                    content,
                    tool_calls: vec![],
                    tool_call_id: Some(call_id(step.index())),
                });
            }
            DecisionRef::Invalid(why) => {
                out.push(Message::text(
                    Role::Assistant,
                    &format!("[unusable reply: {why}]"),
                ));
                out.push(Message::text(
                    Role::User,
                    &format!("Your last reply could not be used ({why}). {content}"),
                ));
            }
            DecisionRef::End => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest step there is, to test the rules without either side.
    struct S {
        index: u32,
        decision: Option<DecisionRef<'static>>,
        observation: Option<(ObservationKind, String)>,
    }

    impl RenderStep for S {
        fn index(&self) -> u32 {
            self.index
        }
        fn decision(&self) -> Option<DecisionRef<'_>> {
            self.decision
        }
        fn observation(&self) -> Option<(ObservationKind, &str)> {
            self.observation.as_ref().map(|(k, c)| (*k, c.as_str()))
        }
    }

    fn step(i: u32, content: &str) -> S {
        S {
            index: i,
            decision: Some(DecisionRef::Call {
                tool: "echo",
                arguments: "{}",
            }),
            observation: Some((ObservationKind::ToolResult, content.into())),
        }
    }

    #[test]
    fn window_elides_old_results_and_ids_are_stable() {
        let steps: Vec<S> = (0..5).map(|i| step(i, "{\"r\":1}")).collect();
        let opts = RenderOptions {
            window: 2,
            ..Default::default()
        };
        let m = messages("g", &steps, &opts);
        assert_eq!(m.len(), 2 + 10);
        assert_eq!(m[0].content, DEFAULT_SYSTEM);
        assert_eq!(m[1].content, "g");
        assert_eq!(m[2].tool_calls[0].id, "call_0");
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_0"));
        assert_eq!(m[3].content, "[result of step 0 elided]");
        assert_eq!(m[7].content, "[result of step 2 elided]");
        assert_eq!(m[9].content, "{\"r\":1}");
        assert_eq!(m[11].content, "{\"r\":1}");
        assert_eq!(m, messages("g", &steps, &opts), "same run, same messages");
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

    #[test]
    fn invalid_replies_pending_results_and_endings() {
        let steps = vec![
            S {
                index: 0,
                decision: Some(DecisionRef::Invalid("no such tool")),
                observation: Some((ObservationKind::InvalidDecision, "{}".into())),
            },
            S {
                index: 1,
                decision: Some(DecisionRef::Call {
                    tool: "rm",
                    arguments: "{}",
                }),
                observation: Some((ObservationKind::Denied, "\"no\"".into())),
            },
            S {
                index: 2,
                decision: Some(DecisionRef::Call {
                    tool: "echo",
                    arguments: "{}",
                }),
                observation: None,
            },
            S {
                index: 3,
                decision: Some(DecisionRef::End),
                observation: Some((ObservationKind::Final, "done".into())),
            },
            S {
                index: 4,
                decision: None,
                observation: None,
            },
        ];
        let m = messages("g", &steps, &RenderOptions::default());
        assert_eq!(m.len(), 2 + 6);
        assert_eq!(m[2].content, "[unusable reply: no such tool]");
        assert_eq!(m[3].role, Role::User);
        assert_eq!(
            m[3].content,
            "Your last reply could not be used (no such tool). invalid call: {}"
        );
        assert_eq!(m[5].content, "denied: \"no\"");
        assert_eq!(m[7].content, "[no result yet]");
    }
}
