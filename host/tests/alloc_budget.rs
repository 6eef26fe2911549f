//! Allocation budgets. A counting global allocator counts the heap
//! allocations (and the bytes they asked for) of a step of the loop, with
//! native and with wasm consumers, small and 8 KiB observations, and of one
//! whole fan-out run (its agent-llm and policy-rules instantiated, two
//! model calls, one tool call, four commits). Counts do not move with the
//! machine's load as times do: each must stay within 10% of its budget in
//! `host/tests/alloc_budgets.toml`. Lower a budget when a change cuts
//! allocations (the test prints what it measured); raising one is a
//! decision to write down in the commit that does it.
//!
//! Everything runs on one thread (a current-thread runtime; the store is
//! idle between commits, so each commit runs inline, not on the writer
//! thread), in one test function, so that nothing else allocates meanwhile.

#[path = "all/common/mod.rs"]
mod common;

use common::wasm::{host, plugin};
use keel::model::StubProvider;
use keel::wasm::{PluginLimits, WasmAgent, WasmPolicy, World};
use keel::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations made by this thread alone (the telemetry exporter's
    /// thread allocates beside the run, on its own schedule).
    static HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_here() {
    let _ = HERE.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// counters are only read.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count_here();
        ALLOCATIONS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size() as u64, Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count_here();
        ALLOCATIONS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size() as u64, Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // A growth is an allocation of the new size (it may copy).
        count_here();
        ALLOCATIONS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new as u64, Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Count {
    allocations: f64,
    bytes: f64,
}

fn now() -> (u64, u64) {
    (ALLOCATIONS.load(Relaxed), BYTES.load(Relaxed))
}

fn since(t: (u64, u64), per: f64) -> Count {
    let (a, b) = now();
    Count {
        allocations: (a - t.0) as f64 / per,
        bytes: (b - t.1) as f64 / per,
    }
}

const POLICY_RULES: &str = r#"{"rules":[{"tool":"echo","action":"allow"}]}"#;

/// The echo tool: answers with its arguments, padded to `pad` bytes.
fn echo(pad: usize) -> Arc<dyn ToolProvider> {
    Arc::new(FnTool::new(
        common::spec("echo", Effect::ReadOnly),
        move |args| Ok(serde_json::json!({ "args": args, "pad": "x".repeat(pad) })),
    ))
}

/// Calls echo `calls` times (with distinct arguments), then completes.
struct Calls(u32);

#[async_trait::async_trait]
impl Agent for Calls {
    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError> {
        let i = view.steps.len() as u32;
        Ok(if i < self.0 {
            Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: format!(r#"{{"i":{i}}}"#),
            })
        } else {
            Decision::Complete("1".into())
        })
    }
}

struct AllowAll;

#[async_trait::async_trait]
impl Policy for AllowAll {
    async fn evaluate(
        &mut self,
        _call: &ToolCall,
        _effect: Effect,
        _view: RunView<'_>,
    ) -> Result<Verdict, ConsumerError> {
        Ok(Verdict::Allow)
    }
}

fn tools(pad: usize) -> ToolSet {
    let mut set = ToolSet::new();
    set.add(echo(pad)).unwrap();
    set
}

fn limits() -> Limits {
    Limits {
        max_steps: 1_000,
        ..Limits::default()
    }
}

async fn native(calls: u32, pad: usize) -> Consumers {
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::new(std::time::Duration::ZERO)));
    wiring.build(Box::new(Calls(calls)), Box::new(AllowAll), tools(pad))
}

async fn wasm(calls: u32, pad: usize) -> Consumers {
    let agent = plugin("agent-scripted-rust.wasm", World::Agent).expect("agent-scripted built");
    let policy = plugin("policy-rules-rust.wasm", World::Policy).expect("policy-rules built");
    let script: Vec<serde_json::Value> = (0..calls)
        .map(|i| serde_json::json!({ "call": { "tool": "echo", "arguments": { "i": i } } }))
        .chain(std::iter::once(serde_json::json!({ "complete": 1 })))
        .collect();
    let config = serde_json::json!({ "script": script }).to_string();
    let model = Arc::new(StubProvider::new(std::time::Duration::ZERO));
    pair(&agent, &config, &policy, tools(pad), model).await
}

/// `agent` (with `config`) and `policy` (the rules allowing echo)
/// instantiated over `set`, the agent's model `model`.
async fn pair(
    agent: &keel::wasm::Plugin,
    config: &str,
    policy: &keel::wasm::Plugin,
    set: ToolSet,
    model: Arc<StubProvider>,
) -> Consumers {
    let wiring = ConsumersBuilder::new(model);
    let l = PluginLimits::default();
    let a = WasmAgent::new(&host(), agent, config, set.specs(), &l, &wiring)
        .await
        .unwrap();
    let p = WasmPolicy::new(&host(), policy, POLICY_RULES, &l, &wiring)
        .await
        .unwrap();
    wiring.build(Box::new(a), Box::new(p), set)
}

/// Allocations of one run of `calls` steps, consumers made outside the count.
async fn run_of(rt: &Runtime, wasm_consumers: bool, calls: u32, pad: usize) -> (u64, u64) {
    let c = if wasm_consumers {
        wasm(calls, pad).await
    } else {
        native(calls, pad).await
    };
    let t = now();
    let out = rt.start("budget", limits(), "{}", c).await.unwrap();
    let (a, b) = now();
    assert_eq!(out.run.status, RunStatus::Completed, "{:?}", out.run.reason);
    (a - t.0, b - t.1)
}

/// Per step: a long run less a short one, over the steps between them.
async fn per_step(rt: &Runtime, wasm_consumers: bool, pad: usize) -> Count {
    let (short, long) = (5, 45);
    run_of(rt, wasm_consumers, short, pad).await; // warm
    let s = run_of(rt, wasm_consumers, short, pad).await;
    let l = run_of(rt, wasm_consumers, long, pad).await;
    let steps = (long - short) as f64;
    Count {
        allocations: (l.0 as f64 - s.0 as f64) / steps,
        bytes: (l.1 as f64 - s.1 as f64) / steps,
    }
}

/// Allocations on this thread per native step: a 45-step run less a
/// 5-step one, over the 40 steps between them.
async fn per_step_here(rt: &Runtime) -> f64 {
    let run = |calls: u32| async move {
        let c = native(calls, 0).await;
        let t = HERE.with(|c| c.get());
        let out = rt.start("budget", limits(), "{}", c).await.unwrap();
        assert_eq!(out.run.status, RunStatus::Completed, "{:?}", out.run.reason);
        HERE.with(|c| c.get()) - t
    };
    run(5).await; // warm
    let (short, long) = (run(5).await, run(45).await);
    (long as f64 - short as f64) / 40.0
}

/// A run's tracer over a collector that refuses every export: its spans
/// are recorded and the exporter's thread tries to send them.
fn traced(rt: Runtime) -> Runtime {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = keel::telemetry::Telemetry::start(&format!("http://127.0.0.1:{port}"), "budget");
    rt.with_telemetry(Arc::new(t.unwrap()))
}

/// One fan-out run, its consumers' instantiation included.
async fn fanout_run(rt: &Runtime) -> Count {
    let agent = plugin("agent-llm-rust.wasm", World::Agent).expect("agent-llm built");
    let policy = plugin("policy-rules-rust.wasm", World::Policy).expect("policy-rules built");
    let model = Arc::new(StubProvider {
        latency: std::time::Duration::ZERO,
        tool_call: Some(("echo".into(), r#"{"q":"fan-out"}"#.into())),
        calls_before_answer: 1,
        answer: "done".into(),
    });
    let one = || async {
        let c = pair(&agent, "{}", &policy, tools(0), model.clone()).await;
        let lim = Limits {
            max_steps: 4,
            ..Limits::default()
        };
        let out = rt.start("fan-out", lim, "{}", c).await.unwrap();
        assert_eq!(out.run.status, RunStatus::Completed, "{:?}", out.run.reason);
    };
    for _ in 0..3 {
        one().await;
    }
    let runs = 20;
    let t = now();
    for _ in 0..runs {
        one().await;
    }
    since(t, runs as f64)
}

fn budgets() -> toml::Table {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/alloc_budgets.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn allocations_per_step_and_per_fan_out_run_stay_within_their_budgets() {
    if plugin("agent-scripted-rust.wasm", World::Agent).is_none() {
        return;
    }
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let measured: Vec<(&str, Count)> = tokio.block_on(async {
        let rt = Runtime::new(StoreHandle::spawn(Store::open_in_memory().unwrap()));
        vec![
            ("native_step", per_step(&rt, false, 0).await),
            ("native_step_8k", per_step(&rt, false, 8 << 10).await),
            ("wasm_step", per_step(&rt, true, 0).await),
            ("wasm_step_8k", per_step(&rt, true, 8 << 10).await),
            ("fanout_run", fanout_run(&rt).await),
        ]
    });
    // Recording a step's spans (decide, evaluate, execute_tool) costs the
    // run's own thread no allocation: they are built on the exporter's.
    let (plain, traced_step) = tokio.block_on(async {
        let plain = Runtime::new(StoreHandle::spawn(Store::open_in_memory().unwrap()));
        let with = traced(Runtime::new(StoreHandle::spawn(
            Store::open_in_memory().unwrap(),
        )));
        (per_step_here(&plain).await, per_step_here(&with).await)
    });
    eprintln!(
        "on the run's thread: {plain:.1} allocations a step untraced, {traced_step:.1} traced"
    );
    assert!(
        traced_step <= plain + 0.5,
        "a traced step allocates {traced_step:.1} times on the run's thread, an untraced one {plain:.1}"
    );
    let budgets = budgets();
    let mut over = Vec::new();
    for (name, m) in &measured {
        eprintln!(
            "{name}: {:.0} allocations, {:.0} bytes",
            m.allocations, m.bytes
        );
        let Some(b) = budgets.get(*name).and_then(|v| v.as_table()) else {
            over.push(format!("{name}: no budget in alloc_budgets.toml"));
            continue;
        };
        for (key, got) in [("allocations", m.allocations), ("bytes", m.bytes)] {
            let Some(limit) = b.get(key).and_then(|v| v.as_integer()) else {
                over.push(format!("{name}.{key}: no budget"));
                continue;
            };
            if got > limit as f64 * 1.10 {
                over.push(format!(
                    "{name}.{key}: {got:.0}, over its budget {limit} by more than 10%"
                ));
            }
        }
    }
    assert!(over.is_empty(), "{}", over.join("\n"));
}
