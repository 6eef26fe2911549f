//! What the loop drives: an agent, a policy and tools. Native Rust types and
//! WebAssembly components implement the same traits, and the loop cannot tell
//! them apart. A consumer is handed a read-only view and returns a decision
//! or a verdict; it never touches the store.

use crate::types::*;
use async_trait::async_trait;
use std::fmt;

/// The run as a consumer sees it: every step before the one being decided
/// or judged, and every approval. Borrowed from the loop's cache, read-only.
#[derive(Debug, Clone, Copy)]
pub struct RunView<'a> {
    /// The run's row as the loop holds it.
    pub run: &'a Run,
    /// The run's steps before the one being decided or judged, in index order.
    pub steps: &'a [Step],
    /// Every approval of the run, answered or not.
    pub approvals: &'a [Approval],
}

/// Why a plugin instance died.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrapKind {
    /// The call used up its fuel.
    OutOfFuel,
    /// The call passed its wall-clock deadline.
    Deadline,
    /// The instance hit its memory cap.
    MemoryCap,
    /// The wasm stack overflowed.
    StackOverflow,
    /// The guest panicked or hit `unreachable`.
    Panic,
    /// What it returned was too big or malformed.
    BadOutput,
    /// Any other trap, such as an out-of-bounds memory access.
    Other,
}

/// Plugin traps seen by this process, by kind (in [`TrapKind::ALL`]'s
/// order), for a service's metrics.
static TRAPS: [std::sync::atomic::AtomicU64; 7] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 7];

impl TrapKind {
    /// Every kind, in the order [`TrapKind::counts`] and the metrics list them.
    pub const ALL: [TrapKind; 7] = [
        TrapKind::OutOfFuel,
        TrapKind::Deadline,
        TrapKind::MemoryCap,
        TrapKind::StackOverflow,
        TrapKind::Panic,
        TrapKind::BadOutput,
        TrapKind::Other,
    ];

    /// Counts one trap of this kind (see [`TrapKind::counts`]).
    pub fn count(self) {
        TRAPS[self as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Traps counted by this process so far, by kind.
    pub fn counts() -> [(TrapKind, u64); 7] {
        TrapKind::ALL.map(|k| {
            (
                k,
                TRAPS[k as usize].load(std::sync::atomic::Ordering::Relaxed),
            )
        })
    }

    /// The kind's spelling in errors and metrics, such as `out_of_fuel`.
    pub fn as_str(self) -> &'static str {
        match self {
            TrapKind::OutOfFuel => "out_of_fuel",
            TrapKind::Deadline => "deadline",
            TrapKind::MemoryCap => "memory_cap",
            TrapKind::StackOverflow => "stack_overflow",
            TrapKind::Panic => "panic",
            TrapKind::BadOutput => "bad_output",
            TrapKind::Other => "other",
        }
    }
}

/// A consumer that could not answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConsumerError {
    /// The plugin returned its own error.
    #[error("{0}")]
    Failed(String),
    /// The plugin instance trapped and is dead; it will not be called again.
    #[error("trapped ({}): {message}", kind.as_str())]
    Trapped {
        /// What stopped the instance.
        kind: TrapKind,
        /// What happened, in words, starting with the plugin's name.
        message: String,
    },
    /// The model provider's limit for the run was reached during the call.
    #[error("model limit reached: {0}")]
    ModelLimit(String),
}

/// Chooses the next step.
#[async_trait]
pub trait Agent: Send {
    /// The next decision, given the run so far; an error ends the run as
    /// failed.
    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError>;
    /// What traces call it (`gen_ai.agent.name`): a plugin's name.
    fn name(&self) -> &str {
        "agent"
    }
}

/// Judges every valid tool call before it runs.
#[async_trait]
pub trait Policy: Send {
    /// A verdict on `call`, whose tool has `effect`; an error ends the run as
    /// failed.
    async fn evaluate(
        &mut self,
        call: &ToolCall,
        effect: Effect,
        view: RunView<'_>,
    ) -> Result<Verdict, ConsumerError>;
    /// What traces call it: a plugin's name.
    fn name(&self) -> &str {
        "policy"
    }
}

/// A tool's failure, shown to the agent as a `tool_error` observation.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// What went wrong, in words; the agent sees it in the observation.
    pub message: String,
    /// The trap's kind when the tool's instance trapped; `None` for an error
    /// the tool returned.
    pub trap: Option<TrapKind>,
    /// The run cannot go on (an MCP tool whose pinned schema changed, with
    /// `on_pin_mismatch = "fail"`): the error is the step's observation and
    /// the run fails with it.
    pub fatal: bool,
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.trap {
            Some(k) => write!(f, "tool trapped ({}): {}", k.as_str(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl ToolError {
    /// An error saying `message`, not a trap and not fatal.
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError {
            message: message.into(),
            trap: None,
            fatal: false,
        }
    }
}

/// One or more tools. Arguments arrive validated against the tool's schema,
/// as canonical JSON.
#[async_trait]
pub trait ToolProvider: Send + Sync {
    /// The tools this provider offers, with their names, schemas and effects.
    fn specs(&self) -> Vec<ToolSpec>;
    /// Runs tool `name` with `arguments`; the result must be JSON text, and an
    /// error becomes the step's observation.
    async fn call(&self, name: &str, arguments: &str) -> Result<String, ToolError>;
}

/// A native tool from a closure: the quickest way to give an embedded run a
/// capability of the host program.
pub struct FnTool<F> {
    spec: ToolSpec,
    f: F,
}

impl<F> FnTool<F>
where
    F: Fn(serde_json::Value) -> Result<serde_json::Value, String> + Send + Sync + 'static,
{
    /// A tool described by `spec` that calls `f` with the parsed arguments;
    /// `f`'s error becomes a tool error.
    pub fn new(spec: ToolSpec, f: F) -> FnTool<F> {
        FnTool { spec, f }
    }
}

#[async_trait]
impl<F> ToolProvider for FnTool<F>
where
    F: Fn(serde_json::Value) -> Result<serde_json::Value, String> + Send + Sync + 'static,
{
    fn specs(&self) -> Vec<ToolSpec> {
        vec![self.spec.clone()]
    }
    async fn call(&self, _name: &str, arguments: &str) -> Result<String, ToolError> {
        let args = serde_json::from_str(arguments)
            .map_err(|e| ToolError::new(format!("arguments: {e}")))?;
        (self.f)(args)
            .map(|v| v.to_string())
            .map_err(ToolError::new)
    }
}

/// Events a consumer produces while it works (plugin log lines), stored
/// with the run's next transition. Shared between the loop and the
/// consumers of one run.
#[derive(Debug, Default)]
pub struct EventSink {
    pending: std::sync::Mutex<Vec<Pending>>,
}

/// A plugin's log line as it was sent. Its event is built when the loop
/// drains the sink, off the plugin's call path.
#[derive(Debug)]
pub struct LogLine {
    /// The name of the plugin that logged it.
    pub plugin: std::sync::Arc<str>,
    /// The index of the step it was logged during, if any.
    pub step: Option<u32>,
    /// The line's level: `trace`, `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// The text, cut to the plugin's per-line byte limit.
    pub message: String,
}

#[derive(Debug)]
enum Pending {
    Event(crate::types::NewEvent),
    Log(LogLine),
}

impl EventSink {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `event` for the run's next transition.
    pub fn push(&self, event: crate::types::NewEvent) {
        self.lock().push(Pending::Event(event));
    }

    /// Queues a plugin's log line, to be stored as a `plugin.log` event.
    pub fn log(&self, line: LogLine) {
        self.lock().push(Pending::Log(line));
    }

    /// Everything pushed so far, in order, as events.
    pub fn drain(&self) -> Vec<crate::types::NewEvent> {
        let pending = {
            let mut g = self.lock();
            // The next call likely logs as much: room for it up front, so
            // that the plugin's log calls do not regrow the vector.
            let room = Vec::with_capacity(g.len());
            std::mem::replace(&mut *g, room)
        };
        pending
            .into_iter()
            .map(|p| match p {
                Pending::Event(e) => e,
                Pending::Log(l) => crate::types::NewEvent::new(
                    EventKind::PluginLog,
                    l.step,
                    serde_json::json!({ "plugin": &*l.plugin, "level": l.level, "message": l.message }),
                ),
            })
            .collect()
    }
}
