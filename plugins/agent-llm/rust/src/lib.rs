//! `agent-llm`: a tool-calling agent that asks the host's model. See
//! ../README.md for the config.

use keel_guest::config;
use keel_guest::model;
use keel_guest::prelude::*;
use keel_guest::render::{self, RenderOptions};
use keel_guest::{FinishReason, ModelError, ModelRequest};

pub struct LlmAgent {
    tools: Vec<ToolSpec>,
    render: RenderOptions,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
}

impl Agent for LlmAgent {
    fn init(text: &str, tools: Vec<ToolSpec>) -> Result<Self, String> {
        let mut c = config::parse(text)?;
        let mut render = RenderOptions::default();
        if let Some(s) = c.opt_str("system")? {
            render.system = s;
        }
        if let Some(w) = c.opt_u64("window")? {
            render.window = w as usize;
        }
        if let Some(cap) = c.opt_u64("content_cap")? {
            if cap < 16 {
                return Err(format!("{}: at least 16", c.key_path("content_cap")));
            }
            render.content_cap = cap as usize;
        }
        let max_tokens = match c.opt_u64("max_tokens")? {
            Some(n) if n == 0 || n > u32::MAX as u64 => {
                return Err(format!(
                    "{}: between 1 and {}",
                    c.key_path("max_tokens"),
                    u32::MAX
                ))
            }
            n => n.map(|n| n as u32),
        };
        let temperature = match c.take("temperature") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(n))
                if n.as_f64().is_some_and(|t| (0.0..=2.0).contains(&t)) =>
            {
                n.as_f64().map(|t| t as f32)
            }
            Some(_) => {
                return Err(format!(
                    "{}: a number from 0 to 2",
                    c.key_path("temperature")
                ))
            }
        };
        c.finish()?;
        Ok(LlmAgent {
            tools,
            render,
            max_tokens,
            temperature,
        })
    }

    fn decide(&mut self, view: &View) -> Result<Decision, String> {
        let request = ModelRequest {
            messages: render::messages(view.goal(), view.steps(), &self.render),
            tools: self.tools.clone(),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
        };
        let response = match model::complete(&request) {
            Ok(r) => r,
            // Keel's host parks the run and never lets this arrive; a host
            // that does gets no server text into the conversation, which
            // the model would read as if it were about the task.
            Err(ModelError::Transient(_)) => {
                return Ok(Decision::Invalid(
                    "the model server was unavailable; the step was not decided".into(),
                ))
            }
            Err(ModelError::LimitExceeded(e)) => return Err(format!("model limit: {e}")),
            Err(ModelError::Permanent(e)) => return Err(format!("model error: {e}")),
            Err(ModelError::InvalidRequest(e)) => {
                return Err(format!("model rejected the request: {e}"))
            }
        };
        Ok(interpret(response.finish_reason, response.message))
    }
}

/// Turns a model reply into a decision. Never fails: anything unusable is an
/// `invalid` decision the model will see explained on the next step.
pub fn interpret(finish: FinishReason, message: keel_guest::Message) -> Decision {
    if finish == FinishReason::ContentFilter {
        return Decision::Invalid(format!(
            "the model refused: {}",
            render::cap(&message.content, 200)
        ));
    }
    if finish == FinishReason::Length {
        return Decision::Invalid("the reply was cut off at the token limit".into());
    }
    if message.tool_calls.len() > 1 {
        // A step holds one call; dropping the others silently would let the
        // model believe they ran.
        let names: Vec<&str> = message.tool_calls.iter().map(|c| c.name.as_str()).collect();
        return Decision::Invalid(format!(
            "the reply asked for {} tool calls at once ({}); call one tool per reply",
            names.len(),
            names.join(", ")
        ));
    }
    if let Some(call) = message.tool_calls.into_iter().next() {
        if call.name.is_empty() {
            return Decision::Invalid("a tool call without a tool name".into());
        }
        return match serde_json::from_str::<serde_json::Value>(&call.arguments) {
            Ok(v) if v.is_object() => Decision::Call(ToolCall {
                tool: call.name,
                arguments: v.to_string(),
            }),
            Ok(_) => Decision::Invalid(format!(
                "the arguments for {} are not a JSON object",
                call.name
            )),
            Err(e) => Decision::Invalid(format!(
                "the arguments for {} are not valid JSON: {e}",
                call.name
            )),
        };
    }
    if message.content.trim().is_empty() {
        return Decision::Invalid("an empty reply with no tool call".into());
    }
    Decision::Complete(serde_json::Value::String(message.content).to_string())
}

keel_guest::export_agent!(LlmAgent);

#[cfg(test)]
mod tests {
    use super::*;
    use keel_guest::{Message, ModelToolCall, Role};

    fn reply(content: &str, calls: Vec<(&str, &str)>) -> Message {
        Message {
            role: Role::Assistant,
            content: content.into(),
            tool_calls: calls
                .into_iter()
                .map(|(n, a)| ModelToolCall {
                    id: "x".into(),
                    name: n.into(),
                    arguments: a.into(),
                })
                .collect(),
            tool_call_id: None,
        }
    }

    #[test]
    fn interprets_replies() {
        assert_eq!(
            interpret(
                FinishReason::ToolCalls,
                reply("", vec![("fs_read", r#"{"path":"a"}"#)])
            ),
            Decision::Call(ToolCall {
                tool: "fs_read".into(),
                arguments: r#"{"path":"a"}"#.into()
            })
        );
        assert!(
            matches!(interpret(FinishReason::ToolCalls, reply("", vec![("fs_read", "{bad")])), Decision::Invalid(e) if e.contains("not valid JSON"))
        );
        assert!(matches!(
            interpret(FinishReason::Length, reply("abc", vec![])),
            Decision::Invalid(_)
        ));
        assert!(
            matches!(interpret(FinishReason::ContentFilter, reply("no", vec![])), Decision::Invalid(e) if e.contains("refused"))
        );
        assert_eq!(
            interpret(FinishReason::Stop, reply("done", vec![])),
            Decision::Complete("\"done\"".into())
        );
        assert!(matches!(
            interpret(FinishReason::Stop, reply("  ", vec![])),
            Decision::Invalid(_)
        ));
    }

    #[test]
    fn several_tool_calls_in_one_reply_are_refused_not_dropped() {
        let d = interpret(
            FinishReason::ToolCalls,
            reply("", vec![("fs_read", "{}"), ("fs_write", "{}")]),
        );
        assert!(
            matches!(&d, Decision::Invalid(e) if e.contains("2 tool calls") && e.contains("fs_write")),
            "{d:?}"
        );
    }
}
