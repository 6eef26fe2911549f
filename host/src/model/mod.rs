//! Model providers and the per-run gate that accounts for every call.
//!
//! Agents never reach a provider directly: a wasm agent's `model.complete`
//! import and a native agent both go through the run's [`ModelGate`], which
//! enforces the run's call and token limits and records each call so that it
//! is stored with the run's next transition.

pub mod openai;
pub mod replay;
mod stub;

pub use keel_guest::{
    FinishReason, Message, ModelError, ModelRequest, ModelResponse, ModelToolCall, Role,
};
pub use openai::{OpenAiProvider, OpenAiSettings};
pub use replay::ReplayProvider;
pub use stub::StubProvider;

use crate::store::ModelCallRecord;
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A model error as an operator reads it: its kind, then what happened.
pub fn describe(e: &ModelError) -> String {
    match e {
        ModelError::LimitExceeded(m) => format!("limit exceeded: {m}"),
        ModelError::Transient(m) => format!("transient: {m}"),
        ModelError::Permanent(m) => format!("permanent: {m}"),
        ModelError::InvalidRequest(m) => format!("invalid request: {m}"),
    }
}

/// The names an OpenAI-compatible server accepts for a tool:
/// `^[a-zA-Z0-9_-]{1,64}$`.
pub fn openai_tool_name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A source of completions.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// Short name stored with each call (`stub`, `openai`, `replay`).
    fn name(&self) -> &str;
    /// How often the gate retries a transient error (each attempt is
    /// counted and charged as a call).
    fn max_retries(&self) -> u32 {
        0
    }
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;
}

/// The run's model accounting.
pub struct ModelGate {
    provider: Arc<dyn ModelProvider>,
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    step: u32,
    calls: u32,
    tokens: u64,
    max_calls: u32,
    max_tokens: u64,
    pending: Vec<ModelCallRecord>,
    limit_hit: Option<String>,
    /// Calls refused by a limit in this step. Only the first is recorded:
    /// an agent that keeps calling adds nothing more to the store.
    refused: u32,
}

/// What the gate accumulated since it was last drained.
#[derive(Debug, Default)]
pub struct GateDrain {
    pub records: Vec<ModelCallRecord>,
    pub calls: u32,
    pub tokens: u64,
    /// `limit_model_calls` or `limit_tokens` when a call was refused.
    pub limit_hit: Option<String>,
}

impl ModelGate {
    pub fn new(provider: Arc<dyn ModelProvider>) -> ModelGate {
        ModelGate {
            provider,
            state: Mutex::new(GateState::default()),
        }
    }

    /// Sets the counters from the run row and the limits; called by the loop
    /// before each step.
    pub fn arm(&self, step: u32, calls: u32, tokens: u64, max_calls: u32, max_tokens: u64) {
        let mut s = self.lock();
        s.step = step;
        s.calls = calls;
        s.tokens = tokens;
        s.max_calls = max_calls;
        s.max_tokens = max_tokens;
        s.limit_hit = None;
        s.refused = 0;
    }

    /// How many calls a limit refused in this step (see [`ModelGate::arm`]).
    pub fn refused_calls(&self) -> u32 {
        self.lock().refused
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        // A panic while holding this lock cannot leave the counters torn
        // (each update is a few plain assignments), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One completion, retried on transient errors as the provider allows;
    /// every attempt counts against the run's limits and is recorded.
    pub async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let mut attempt = 0;
        loop {
            match self.attempt(request).await {
                Err(ModelError::Transient(e)) if attempt < self.provider.max_retries() => {
                    attempt += 1;
                    tracing::warn!("model call failed ({e}); retry {attempt}");
                    tokio::time::sleep(std::time::Duration::from_millis(100 << attempt.min(6)))
                        .await;
                }
                other => return other,
            }
        }
    }

    async fn attempt(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        {
            let mut s = self.lock();
            let refused = if s.calls >= s.max_calls {
                Some((
                    "limit_model_calls",
                    format!("the run may make at most {} model calls", s.max_calls),
                ))
            } else if s.tokens >= s.max_tokens {
                Some((
                    "limit_tokens",
                    format!("the run may use at most {} tokens", s.max_tokens),
                ))
            } else {
                None
            };
            if let Some((reason, msg)) = refused {
                s.limit_hit = Some(reason.to_string());
                s.refused += 1;
                if s.refused > 1 {
                    return Err(ModelError::LimitExceeded(msg));
                }
                let step = s.step;
                s.pending.push(ModelCallRecord {
                    step_index: step,
                    provider: self.provider.name().to_string(),
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    outcome: "refused_limit",
                    error: Some(msg.clone()),
                    latency_ms: 0,
                });
                return Err(ModelError::LimitExceeded(msg));
            }
            s.calls += 1;
        }
        let started = Instant::now();
        let result = self.provider.complete(request).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        let mut s = self.lock();
        let step = s.step;
        let record = match &result {
            Ok(r) => {
                s.tokens += (r.prompt_tokens + r.completion_tokens) as u64;
                ModelCallRecord {
                    step_index: step,
                    provider: self.provider.name().to_string(),
                    prompt_tokens: r.prompt_tokens,
                    completion_tokens: r.completion_tokens,
                    outcome: "ok",
                    error: None,
                    latency_ms,
                }
            }
            Err(e) => ModelCallRecord {
                step_index: step,
                provider: self.provider.name().to_string(),
                prompt_tokens: 0,
                completion_tokens: 0,
                outcome: "error",
                error: Some(describe(e)),
                latency_ms,
            },
        };
        s.pending.push(record);
        result
    }

    /// Takes (and clears) the limit the last calls ran into, if any.
    pub fn drain_limit(&self) -> Option<String> {
        self.lock().limit_hit.take()
    }

    /// Takes the records and the counters for the next transition.
    pub fn drain(&self) -> GateDrain {
        let mut s = self.lock();
        GateDrain {
            records: std::mem::take(&mut s.pending),
            calls: s.calls,
            tokens: s.tokens,
            limit_hit: s.limit_hit.take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_text_and_tool_names_follow_the_openai_rule() {
        assert_eq!(
            describe(&ModelError::Transient("the server answered 500".into())),
            "transient: the server answered 500"
        );
        for ok in ["fs_read", "a", "A-b_9", &"x".repeat(64)] {
            assert!(openai_tool_name_ok(ok), "{ok}");
        }
        for bad in ["", "fs.read", "with space", "ünï", &"x".repeat(65)] {
            assert!(!openai_tool_name_ok(bad), "{bad}");
        }
    }
}
