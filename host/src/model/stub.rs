//! A deterministic provider for tests and benchmarks.

use super::*;
use std::time::Duration;

/// Answers every request with the same kind of reply after `latency`: by
/// default a final text answer; with `tool_call` set, a call of that tool
/// while the conversation has fewer than `calls_before_answer` tool results.
#[derive(Debug, Clone, Default)]
pub struct StubProvider {
    /// How long each request waits before it is answered.
    pub latency: Duration,
    /// (tool name, arguments JSON) to call.
    pub tool_call: Option<(String, String)>,
    /// How many tool results the conversation needs before the stub stops calling `tool_call` and answers.
    pub calls_before_answer: usize,
    /// The text of the final answer (`done` from [`StubProvider::new`]).
    pub answer: String,
}

impl StubProvider {
    /// A stub that waits `latency`, then answers `done` without calling any tool.
    pub fn new(latency: Duration) -> StubProvider {
        StubProvider {
            latency,
            answer: "done".into(),
            ..Default::default()
        }
    }
}

#[async_trait]
impl ModelProvider for StubProvider {
    fn name(&self) -> &str {
        "stub"
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let prompt_tokens = request
            .messages
            .iter()
            .map(|m| m.content.len() / 4 + 1)
            .sum::<usize>() as u32;
        let results = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count();
        let message = match &self.tool_call {
            Some((name, args)) if results < self.calls_before_answer => Message {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![ModelToolCall {
                    id: format!("stub_{results}"),
                    name: name.clone(),
                    arguments: args.clone(),
                }],
                tool_call_id: None,
            },
            _ => Message {
                role: Role::Assistant,
                content: self.answer.clone(),
                tool_calls: vec![],
                tool_call_id: None,
            },
        };
        let finish_reason = if message.tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        Ok(ModelResponse {
            completion_tokens: 1 + message.content.len() as u32 / 4,
            message,
            finish_reason,
            prompt_tokens,
        })
    }
}
