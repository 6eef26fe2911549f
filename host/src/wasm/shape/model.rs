//! A model call across the wasm boundary: an agent's request lifted, the
//! provider's answer or error lowered.

use crate::model as m;
use crate::wasm::bindings::wit;

use super::effect::tool_spec_in;

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

fn call_in(c: wit::ModelToolCall) -> m::ModelToolCall {
    m::ModelToolCall {
        id: c.id,
        name: c.name,
        arguments: c.arguments,
    }
}

fn call_out(c: m::ModelToolCall) -> wit::ModelToolCall {
    wit::ModelToolCall {
        id: c.id,
        name: c.name,
        arguments: c.arguments,
    }
}

fn message_in(msg: wit::Message) -> m::Message {
    m::Message {
        role: role_in(msg.role),
        content: msg.content,
        tool_calls: msg.tool_calls.into_iter().map(call_in).collect(),
        tool_call_id: msg.tool_call_id,
    }
}

fn message_out(msg: m::Message) -> wit::Message {
    wit::Message {
        role: role_out(msg.role),
        content: msg.content,
        tool_calls: msg.tool_calls.into_iter().map(call_out).collect(),
        tool_call_id: msg.tool_call_id,
    }
}

/// An agent's `model.complete` request as the host's.
pub fn model_request_in(r: wit::ModelRequest) -> m::ModelRequest {
    m::ModelRequest {
        messages: r.messages.into_iter().map(message_in).collect(),
        tools: r.tools.into_iter().map(tool_spec_in).collect(),
        max_tokens: r.max_tokens,
        temperature: r.temperature,
    }
}

/// The provider's answer as the agent receives it.
pub fn model_response_out(r: m::ModelResponse) -> wit::ModelResponse {
    wit::ModelResponse {
        message: message_out(r.message),
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

/// A model error as the agent receives it.
pub fn model_error_out(e: m::ModelError) -> wit::ModelError {
    match e {
        m::ModelError::LimitExceeded(s) => wit::ModelError::LimitExceeded(s),
        m::ModelError::Transient(s) => wit::ModelError::Transient(s),
        m::ModelError::Permanent(s) => wit::ModelError::Permanent(s),
        m::ModelError::InvalidRequest(s) => wit::ModelError::InvalidRequest(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_shape_crosses_the_boundary_and_back_unchanged() {
        let messages = vec![
            m::Message::text(m::Role::System, "be brief"),
            m::Message::text(m::Role::User, "read a"),
            m::Message {
                role: m::Role::Assistant,
                content: String::new(),
                tool_calls: vec![m::ModelToolCall {
                    id: "call_0".into(),
                    name: "fs_read".into(),
                    arguments: r#"{"path":"a"}"#.into(),
                }],
                tool_call_id: None,
            },
            m::Message {
                role: m::Role::Tool,
                content: "hello".into(),
                tool_calls: vec![],
                tool_call_id: Some("call_0".into()),
            },
        ];
        for msg in messages {
            assert_eq!(message_in(message_out(msg.clone())), msg);
        }
    }
}
