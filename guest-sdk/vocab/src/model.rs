//! A model call as a provider sees it: the messages in, the message out,
//! and what went wrong.
//!
//! These mirror the `keel:plugin/types` records of the same names; the
//! host's wasm boundary and the guest SDK map the WIT values to them.

use crate::Effect;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A tool as agents, policies and models see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name calls use.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object, as JSON text.
    pub parameters: String,
    /// What running it may do to the world.
    pub effect: Effect,
}

/// Who says a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The instructions the agent gives the model.
    System,
    /// The goal, and the agent speaking for the run.
    User,
    /// The model.
    Assistant,
    /// A tool's answer to one of the model's calls.
    Tool,
}

/// One tool call a model asks for inside a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelToolCall {
    /// The call's id, which the tool's answer names.
    pub id: String,
    /// The tool to call.
    pub name: String,
    /// The arguments, as JSON text.
    pub arguments: String,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who says it.
    pub role: Role,
    /// What it says (empty for a bare tool call).
    pub content: String,
    /// The tools an assistant message calls.
    pub tool_calls: Vec<ModelToolCall>,
    /// For a tool message, the id of the call it answers.
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message of text alone.
    pub fn text(role: Role, content: &str) -> Message {
        Message {
            role,
            content: content.to_string(),
            tool_calls: vec![],
            tool_call_id: None,
        }
    }
}

/// What an agent asks a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// The most tokens the answer may take.
    pub max_tokens: Option<u32>,
    /// Sampling temperature, when the agent sets one.
    pub temperature: Option<f32>,
}

/// Why a model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// It was done.
    Stop,
    /// It called tools.
    ToolCalls,
    /// It ran out of tokens.
    Length,
    /// The provider filtered the answer.
    ContentFilter,
    /// Anything else the provider said.
    Other,
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// The assistant's message.
    pub message: Message,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Tokens the request took.
    pub prompt_tokens: u32,
    /// Tokens the answer took.
    pub completion_tokens: u32,
}

/// Why a model call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// The run's call or token budget is spent.
    LimitExceeded(String),
    /// The provider failed in a way that may pass (a timeout, a 5xx, a 429).
    Transient(String),
    /// The provider refused in a way retrying will not change.
    Permanent(String),
    /// The request itself was malformed.
    InvalidRequest(String),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::LimitExceeded(m) => write!(f, "limit exceeded: {m}"),
            ModelError::Transient(m) => write!(f, "transient: {m}"),
            ModelError::Permanent(m) => write!(f, "permanent: {m}"),
            ModelError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
        }
    }
}

impl std::error::Error for ModelError {}
