//! Model providers and the per-run gate that accounts for every call.
//!
//! Agents never reach a provider directly: a wasm agent's `model.complete`
//! import and a native agent both go through the run's [`ModelGate`], which
//! enforces the run's call and token limits and records each call so that it
//! is stored with the run's next transition.

pub mod openai;
pub mod replay;
mod stub;

pub use keel_vocab::{
    FinishReason, Message, ModelError, ModelRequest, ModelResponse, ModelToolCall, Role,
};
pub use openai::{OpenAiProvider, OpenAiSettings};
pub use replay::ReplayProvider;
pub use stub::StubProvider;

use crate::types::ModelCallRecord;
use crate::types::RunReason;
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A model error as an operator reads it: its kind, then what happened.
pub fn describe(e: &ModelError) -> String {
    e.to_string()
}

/// The names an OpenAI-compatible server accepts for a tool:
/// `^[a-zA-Z0-9_-]{1,64}$`.
pub fn openai_tool_name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// How the gate retries a provider's transient errors (refused or reset
/// connections, timeouts, 429, 5xx). Each attempt is recorded; when
/// they run out, the run parks (see [`ModelGate::complete`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt, at most.
    pub max_retries: u32,
    /// No retry starts later than this after the first attempt started.
    pub window: Duration,
    /// The first wait; each later one doubles, up to `cap`, and is drawn at
    /// random from its upper half (jitter, so that many runs do not retry
    /// in step).
    pub base: Duration,
    /// The longest wait between two attempts, before jitter and `Retry-After`.
    pub cap: Duration,
    /// The least wait after a timed-out attempt: the server may still be
    /// working on the abandoned request (a single-slot server queues the
    /// retry behind it).
    pub after_timeout: Duration,
}

impl RetryPolicy {
    /// No retries.
    pub const NONE: RetryPolicy = RetryPolicy {
        max_retries: 0,
        window: Duration::ZERO,
        base: Duration::ZERO,
        cap: Duration::ZERO,
        after_timeout: Duration::ZERO,
    };

    /// The wait before retry `n` (0 for the first), given what the last
    /// attempt said: a server's `Retry-After`, or a timeout.
    pub fn delay(&self, n: u32, retry_after: Option<Duration>, timed_out: bool) -> Duration {
        let full = self.base.saturating_mul(1u32 << n.min(20)).min(self.cap);
        let half = full / 2;
        let spread = (full - half).as_nanos() as u64;
        let jitter = match spread {
            0 => 0,
            s => getrandom::u64().unwrap_or(0) % s,
        };
        let mut wait = half + Duration::from_nanos(jitter);
        if timed_out {
            wait = wait.max(self.after_timeout);
        }
        if let Some(ra) = retry_after {
            wait = wait.max(ra);
        }
        wait
    }
}

/// One attempt's result, with what the server said about trying again.
#[derive(Debug)]
pub struct Attempt {
    /// The completion, or why the attempt failed.
    pub result: Result<ModelResponse, ModelError>,
    /// The server's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    /// The attempt ran out of time waiting for the server.
    pub timed_out: bool,
}

/// A source of completions.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// Short name stored with each call (`stub`, `openai`, `replay`).
    fn name(&self) -> &str;
    /// The model asked for (`gen_ai.request.model` in traces).
    fn model(&self) -> &str {
        self.name()
    }
    /// How the gate retries this provider's transient errors.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::NONE
    }
    /// One completion of `request`, tried once.
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;
    /// [`ModelProvider::complete`] with the server's retry hints; providers
    /// that have any override it.
    async fn attempt(&self, request: &ModelRequest) -> Attempt {
        Attempt {
            result: self.complete(request).await,
            retry_after: None,
            timed_out: false,
        }
    }
}

/// The run's model accounting.
pub struct ModelGate {
    provider: Arc<dyn ModelProvider>,
    state: Mutex<GateState>,
    /// The run's trace, when telemetry is on: each attempt becomes a span.
    trace: std::sync::OnceLock<crate::telemetry::RunTrace>,
}

#[derive(Debug, Default)]
struct GateState {
    step: u32,
    calls: u32,
    tokens: u64,
    max_calls: u32,
    max_tokens: u64,
    pending: Vec<ModelCallRecord>,
    limit_hit: Option<RunReason>,
    /// Calls refused by a limit in this step. Only the first is recorded:
    /// an agent that keeps calling adds nothing more to the store.
    refused: u32,
    /// Set when a call's retries ran out on transient errors: the server
    /// is down, and the loop parks the run instead of using the step.
    outage: Option<Outage>,
}

/// The model server stayed unavailable through a call's retries.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    /// The last attempt's error, as an operator reads it.
    pub error: String,
    /// How many attempts were made.
    pub attempts: u32,
    /// How long to wait before trying again.
    pub retry_in: Duration,
}

/// What the gate accumulated since it was last drained.
#[derive(Debug, Default)]
pub struct GateDrain {
    /// One record per attempt (and per first refused call) since the last drain, in order.
    pub records: Vec<ModelCallRecord>,
    /// The run's model calls so far, counting those from before this gate was armed.
    pub calls: u32,
    /// The run's prompt and completion tokens so far, counting those from before this gate was armed.
    pub tokens: u64,
    /// `limit_model_calls` or `limit_tokens` when a call was refused.
    pub limit_hit: Option<RunReason>,
}

impl ModelGate {
    /// A gate over `provider` with zeroed counters; [`ModelGate::arm`] sets the limits.
    pub fn new(provider: Arc<dyn ModelProvider>) -> ModelGate {
        ModelGate {
            provider,
            state: Mutex::new(GateState::default()),
            trace: std::sync::OnceLock::new(),
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
        s.outage = None;
    }

    /// Records each attempt from now on as a span of `trace` (once per run).
    pub fn trace(&self, trace: crate::telemetry::RunTrace) {
        let _ = self.trace.set(trace);
    }

    /// Takes the outage the step's calls ran into, if any (see
    /// [`ModelGate::complete`]).
    pub fn take_outage(&self) -> Option<Outage> {
        self.lock().outage.take()
    }

    /// Whether a call in this step ran into an outage.
    pub fn in_outage(&self) -> bool {
        self.lock().outage.is_some()
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

    /// One completion, retried on transient errors as the provider's
    /// [`RetryPolicy`] allows (exponential backoff with jitter, the
    /// server's `Retry-After` honoured, a pause after a timeout, within
    /// the policy's window); every attempt is recorded.
    ///
    /// When the retries run out the server is taken to be down: the call
    /// fails with [`ModelError::Transient`] and the gate keeps an
    /// [`Outage`], which the loop takes to park the run.
    ///
    /// Attempts that fail transiently are recorded but not charged to the
    /// run's call limit: they cost nothing but time, a run parked and
    /// resumed through a long outage must not fail for it, and their
    /// number is bounded by the retry policy per call.
    pub async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        if let Some(o) = &self.lock().outage {
            // The step is over: its run parks once the agent returns.
            return Err(ModelError::Transient(o.error.clone()));
        }
        let policy = self.provider.retry_policy();
        let started = Instant::now();
        let mut retries = 0;
        loop {
            let (result, retry_after, timed_out) = self.attempt(request).await;
            let e = match result {
                Err(ModelError::Transient(e)) => e,
                other => return other,
            };
            let wait = policy.delay(retries, retry_after, timed_out);
            if retries >= policy.max_retries || started.elapsed() + wait > policy.window {
                self.lock().outage = Some(Outage {
                    error: e.clone(),
                    attempts: retries + 1,
                    retry_in: wait.max(policy.base),
                });
                return Err(ModelError::Transient(format!(
                    "{e} (gave up after {} attempts in {} ms)",
                    retries + 1,
                    started.elapsed().as_millis(),
                )));
            }
            retries += 1;
            tracing::warn!("model call failed ({e}); retry {retries} in {wait:?}");
            tokio::time::sleep(wait).await;
        }
    }

    async fn attempt(
        &self,
        request: &ModelRequest,
    ) -> (Result<ModelResponse, ModelError>, Option<Duration>, bool) {
        {
            let mut s = self.lock();
            let refused = if s.calls >= s.max_calls {
                Some((
                    RunReason::LimitModelCalls,
                    format!("the run may make at most {} model calls", s.max_calls),
                ))
            } else if s.tokens >= s.max_tokens {
                Some((
                    RunReason::LimitTokens,
                    format!("the run may use at most {} tokens", s.max_tokens),
                ))
            } else {
                None
            };
            if let Some((reason, msg)) = refused {
                s.limit_hit = Some(reason);
                s.refused += 1;
                if s.refused > 1 {
                    return (Err(ModelError::LimitExceeded(msg)), None, false);
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
                return (Err(ModelError::LimitExceeded(msg)), None, false);
            }
            s.calls += 1;
        }
        let started = Instant::now();
        let wall = self.trace.get().map(|_| std::time::SystemTime::now());
        let Attempt {
            result,
            retry_after,
            timed_out,
        } = self.provider.attempt(request).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        if let (Some(t), Some(wall)) = (self.trace.get(), wall) {
            let end = wall + started.elapsed();
            let step = self.lock().step;
            let p = &*self.provider;
            match &result {
                Ok(r) => t.model_call(
                    p.name(),
                    p.model(),
                    wall,
                    end,
                    r.prompt_tokens,
                    r.completion_tokens,
                    step,
                    None,
                ),
                Err(e) => t.model_call(
                    p.name(),
                    p.model(),
                    wall,
                    end,
                    0,
                    0,
                    step,
                    Some(&describe(e)),
                ),
            }
        }
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
            Err(e) => {
                if matches!(e, ModelError::Transient(_)) {
                    s.calls -= 1;
                }
                ModelCallRecord {
                    step_index: step,
                    provider: self.provider.name().to_string(),
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    outcome: "error",
                    error: Some(describe(e)),
                    latency_ms,
                }
            }
        };
        s.pending.push(record);
        (result, retry_after, timed_out)
    }

    /// Takes (and clears) the limit the last calls ran into, if any.
    pub fn drain_limit(&self) -> Option<RunReason> {
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
    fn retry_waits_grow_with_jitter_and_honour_retry_after_and_timeouts() {
        let p = RetryPolicy {
            max_retries: 10,
            window: Duration::from_secs(60),
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
            after_timeout: Duration::from_secs(1),
        };
        for n in 0..8 {
            let full = Duration::from_millis(100 << n).min(Duration::from_secs(2));
            let d = p.delay(n, None, false);
            assert!(d >= full / 2 && d <= full, "retry {n}: {d:?}");
        }
        assert!(p.delay(0, Some(Duration::from_secs(3)), false) >= Duration::from_secs(3));
        assert!(p.delay(0, None, true) >= Duration::from_secs(1));
        assert_eq!(RetryPolicy::NONE.delay(3, None, false), Duration::ZERO);
    }

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
