//! Scenarios shared by the benchmarks: the n-step run of reference
//! scenario 000 (n−1 allowed tool calls with distinct arguments, then
//! complete; the tool answers with its arguments or with ~8 KiB of JSON),
//! with native or wasm consumers.

// The allocator of the `keel` binary, so that the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use async_trait::async_trait;
use keel::model::StubProvider;
use keel::*;
use std::sync::Arc;

/// Calls `echo` with `{"i": k}` for k < n−1, then completes.
pub struct CountingAgent {
    pub n: u32,
}

#[async_trait]
impl Agent for CountingAgent {
    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError> {
        let k = view.steps.len() as u32;
        Ok(if k + 1 >= self.n {
            Decision::Complete("true".into())
        } else {
            Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: format!("{{\"i\":{k}}}"),
            })
        })
    }
}

pub struct AllowAll;

#[async_trait]
impl Policy for AllowAll {
    async fn evaluate(
        &mut self,
        _: &ToolCall,
        _: Effect,
        _: RunView<'_>,
    ) -> Result<Verdict, ConsumerError> {
        Ok(Verdict::Allow)
    }
}

/// The echo tool; with `pad` it answers with ~8 KiB of JSON.
pub fn echo_tool(pad: usize) -> Arc<dyn ToolProvider> {
    let spec = ToolSpec {
        name: "echo".into(),
        description: "echo".into(),
        parameters: r#"{"type":"object"}"#.into(),
        effect: Effect::ReadOnly,
    };
    let padding = "x".repeat(pad);
    Arc::new(FnTool::new(spec, move |args| {
        Ok(if padding.is_empty() {
            args
        } else {
            serde_json::json!({ "echo": args, "pad": padding })
        })
    }))
}

pub fn native_consumers(n: u32, pad: usize) -> Consumers {
    let mut tools = ToolSet::new();
    let _ = tools.add(echo_tool(pad));
    ConsumersBuilder::new(Arc::new(StubProvider::default())).build(
        Box::new(CountingAgent { n }),
        Box::new(AllowAll),
        tools,
    )
}

pub fn limits(n: u32) -> Limits {
    Limits {
        max_steps: n + 1,
        max_identical_calls: 0,
        ..Limits::default()
    }
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    v[(v.len() - 1) / 2]
}

/// CPU time of the whole process so far (every thread), in seconds. Unlike
/// wall time it leaves out time spent waiting, for writes or for a core.
pub fn process_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write to.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    if ok {
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    } else {
        0.0
    }
}

/// The process's minor page faults so far (Linux; 0 elsewhere).
pub fn minor_faults() -> u64 {
    // Field 10 of /proc/self/stat, counted after the command name's `)`.
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| s.get(s.rfind(')')? + 2..)?.split(' ').nth(7)?.parse().ok())
        .unwrap_or(0)
}

/// Where `make plugins` put the components.
pub fn plugins_dir() -> std::path::PathBuf {
    std::env::var_os("KEEL_PLUGINS")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins")
        })
}

/// A run row for views handed to plugins outside a loop.
pub fn bench_run(step_count: u32) -> Run {
    let mut r = Run::new("bench", "bench", Limits::default(), 0);
    r.step_count = step_count;
    r
}

/// A finished step of the echo scenario with an observation of `pad` bytes.
pub fn done_step(i: u32, pad: usize) -> Step {
    let content = if pad == 0 {
        format!("{{\"i\":{i}}}")
    } else {
        serde_json::json!({ "echo": { "i": i }, "pad": "x".repeat(pad) }).to_string()
    };
    Step {
        index: i,
        version: 4,
        state: StepState::Done,
        decision: Some(Decision::Call(ToolCall {
            tool: "echo".into(),
            arguments: format!("{{\"i\":{i}}}"),
        })),
        call: Some(ToolCall {
            tool: "echo".into(),
            arguments: format!("{{\"i\":{i}}}"),
        }),
        effect: Some(Effect::ReadOnly),
        verdict: Some(Verdict::Allow),
        observation: Some(Observation {
            kind: ObservationKind::ToolResult,
            content,
        }),
        started_at: 0,
        updated_at: 0,
    }
}

/// agent-scripted's config for the echo scenario: n−1 echo calls, then
/// complete. Built once per scenario, outside what is timed: like an
/// operator's config file, it is an input of the run, not a cost of it.
pub fn script_config(n: u32) -> String {
    let script: Vec<serde_json::Value> = (0..n.saturating_sub(1))
        .map(|i| serde_json::json!({ "call": { "tool": "echo", "arguments": { "i": i } } }))
        .chain(std::iter::once(serde_json::json!({ "complete": true })))
        .collect();
    serde_json::json!({ "script": script }).to_string()
}

/// Wasm consumers for the echo scenario: the Rust agent-scripted playing
/// `config` (from [`script_config`]), policy-rules allowing echo, and the
/// native echo tool (the tool is the same for native and wasm runs, so the
/// comparison isolates the agent and policy boundary).
pub async fn wasm_consumers(
    host: &keel::wasm::WasmHost,
    agent: &keel::wasm::Plugin,
    policy: &keel::wasm::Plugin,
    config: &str,
    pad: usize,
) -> Consumers {
    use keel::wasm::{PluginLimits, WasmAgent, WasmPolicy};
    let mut tools = ToolSet::new();
    let _ = tools.add(echo_tool(pad));
    let rules = r#"{"rules":[{"tool":"echo","action":"allow"}]}"#;
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::default()));
    let a = WasmAgent::new(
        host,
        agent,
        config,
        tools.specs(),
        &PluginLimits::default(),
        &wiring,
    )
    .await
    .unwrap();
    let p = WasmPolicy::new(host, policy, rules, &PluginLimits::default(), &wiring)
        .await
        .unwrap();
    wiring.build(Box::new(a), Box::new(p), tools)
}

/// Whether the paired measurement `name` runs: all of them unless
/// `KEEL_PAIRED` names some (comma-separated prefixes), which saves the
/// minutes of the others while one figure is being worked on.
pub fn paired_selected(name: &str) -> bool {
    match std::env::var("KEEL_PAIRED") {
        Ok(only) => only.split(',').any(|p| name.starts_with(p.trim())),
        Err(_) => true,
    }
}
