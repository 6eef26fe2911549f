//! Per-plugin limits and how a dead instance's trap is named.

use crate::consumer::TrapKind;
use serde::Deserialize;

/// What one call into a plugin may use. Every field has a safe default and
/// can be set per plugin in its config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginLimits {
    /// Fuel (roughly, wasm instructions) per call.
    pub fuel: u64,
    /// Wall-clock time per call, in milliseconds, not counting time spent in
    /// host imports (a slow model call is not charged to the guest).
    pub deadline_ms: u64,
    /// Linear memory the instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// The largest JSON text or string a call may return, in bytes.
    pub max_output_bytes: usize,
    /// Log lines an instance may send per call; the rest are counted and dropped.
    pub log_lines_per_call: u32,
    /// Bytes of one log line kept; longer lines are cut.
    pub log_line_bytes: usize,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            fuel: 20_000_000_000,
            deadline_ms: 10_000,
            memory_bytes: 512 << 20,
            max_output_bytes: 4 << 20,
            log_lines_per_call: 200,
            log_line_bytes: 4096,
        }
    }
}

/// Names a trap from the error wasmtime returned.
pub fn classify(err: &wasmtime::Error, stderr: &str) -> (TrapKind, String) {
    use wasmtime::Trap;
    let panic_line = guest_message(stderr);
    if let Some(trap) = err.downcast_ref::<Trap>() {
        return match trap {
            Trap::OutOfFuel => (TrapKind::OutOfFuel, "the call used up its fuel".into()),
            Trap::Interrupt => (TrapKind::Deadline, "the call passed its wall-clock deadline".into()),
            Trap::StackOverflow => (TrapKind::StackOverflow, "the wasm stack overflowed".into()),
            Trap::MemoryOutOfBounds => (
                TrapKind::Other,
                "out-of-bounds memory access (in Rust and C guests usually their stack in linear memory overflowing)".into(),
            ),
            Trap::UnreachableCodeReached => (
                TrapKind::Panic,
                panic_line.unwrap_or_else(|| "the guest hit `unreachable` (a panic or abort)".into()),
            ),
            other => (TrapKind::Other, format!("{other}{}", panic_line.map(|p| format!(": {p}")).unwrap_or_default())),
        };
    }
    let text = format!("{err:#}");
    if text.contains("forcing trap when growing memory") || text.contains("memory limit") {
        return (
            TrapKind::MemoryCap,
            "the instance hit its memory cap".into(),
        );
    }
    if text.contains("exceeds the plugin's output limit") {
        return (TrapKind::BadOutput, text);
    }
    (
        TrapKind::Other,
        panic_line.map(|p| format!("{text}: {p}")).unwrap_or(text),
    )
}

/// The guest's last words on stderr: a Rust panic's location and message,
/// or the last few lines of whatever else it printed (Python tracebacks,
/// C's abort message).
fn guest_message(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if let Some(i) = lines.iter().rposition(|l| l.contains("panicked at")) {
        let msg: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| !l.starts_with("note:"))
            .copied()
            .collect();
        return Some(format!("{} {}", lines[i], msg.join(" ")).trim().to_string());
    }
    let tail: Vec<&str> = lines.iter().rev().take(3).rev().copied().collect();
    (!tail.is_empty()).then(|| tail.join(" | "))
}
