//! Native consumers and helpers shared by the integration tests.
#![allow(dead_code)]

use async_trait::async_trait;
use keel::model::StubProvider;
use keel::*;
use std::sync::{Arc, Mutex};

/// Plays decisions in order; records every view it was handed.
pub struct ScriptAgent {
    pub script: Vec<Decision>,
    pub seen: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Agent for ScriptAgent {
    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError> {
        self.seen.lock().unwrap().push(
            serde_json::to_string(&(view.run.step_count, view.steps, view.approvals)).unwrap(),
        );
        let i = view.steps.iter().filter(|s| s.decision.is_some()).count();
        Ok(self
            .script
            .get(i)
            .cloned()
            .unwrap_or(Decision::Fail("script exhausted".into())))
    }
}

/// Judges by tool name: `deny_*` denied, `ask_*` needs approval, `abort_*`
/// aborts, the rest allowed. Records what it was asked.
pub struct NamePolicy {
    pub seen: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Policy for NamePolicy {
    async fn evaluate(
        &mut self,
        call: &ToolCall,
        effect: Effect,
        view: RunView<'_>,
    ) -> Result<Verdict, ConsumerError> {
        self.seen.lock().unwrap().push(
            serde_json::to_string(&(call, effect, view.steps.len(), view.approvals)).unwrap(),
        );
        Ok(if call.tool.starts_with("deny_") {
            Verdict::Deny("not this one".into())
        } else if call.tool.starts_with("ask_") {
            Verdict::RequireApproval(ApprovalRequest {
                reason: "a human must agree".into(),
                presentation: r#"{"why":"test"}"#.into(),
            })
        } else if call.tool.starts_with("abort_") {
            Verdict::Abort("stop everything".into())
        } else {
            Verdict::Allow
        })
    }
}

pub fn spec(name: &str, effect: Effect) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name} for tests"),
        parameters:
            r#"{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":true}"#
                .into(),
        effect,
    }
}

/// A tool that echoes its arguments and counts its calls.
pub fn counting_tool(name: &str, effect: Effect, count: Arc<Mutex<u32>>) -> Arc<dyn ToolProvider> {
    Arc::new(FnTool::new(spec(name, effect), move |args| {
        *count.lock().unwrap() += 1;
        Ok(serde_json::json!({ "echo": args }))
    }))
}

pub fn call(tool: &str, args: &str) -> Decision {
    Decision::Call(ToolCall {
        tool: tool.into(),
        arguments: args.into(),
    })
}

pub struct Rig {
    pub agent_seen: Arc<Mutex<Vec<String>>>,
    pub policy_seen: Arc<Mutex<Vec<String>>>,
}

pub fn consumers(script: Vec<Decision>, tools: Vec<Arc<dyn ToolProvider>>) -> (Consumers, Rig) {
    let agent_seen = Arc::new(Mutex::new(vec![]));
    let policy_seen = Arc::new(Mutex::new(vec![]));
    let mut set = ToolSet::new();
    for t in tools {
        set.add(t).unwrap();
    }
    let c = ConsumersBuilder::new(Arc::new(StubProvider::default())).build(
        Box::new(ScriptAgent {
            script,
            seen: agent_seen.clone(),
        }),
        Box::new(NamePolicy {
            seen: policy_seen.clone(),
        }),
        set,
    );
    (
        c,
        Rig {
            agent_seen,
            policy_seen,
        },
    )
}

pub fn runtime(path: &std::path::Path) -> Runtime {
    runtime_and_handle(path).0
}

/// A runtime on a SQLite store at `path`, and the store's handle (for its
/// writer's statistics).
#[allow(dead_code)]
pub fn runtime_and_handle(path: &std::path::Path) -> (Runtime, StoreHandle) {
    let store = Store::open(path, keel::Durability::Full).unwrap();
    let handle = StoreHandle::spawn(store);
    (Runtime::new(handle.clone()), handle)
}

pub fn kinds(store: &Store, run_id: &str) -> Vec<String> {
    store
        .events_after(Some(run_id), 0, 10_000)
        .unwrap()
        .into_iter()
        .map(|e| e.kind.into_owned())
        .collect()
}
pub mod cli;
#[macro_use]
pub mod engine;
pub mod http;
pub mod wasm;

/// A read-only tool `slow` whose calls wait (without holding a thread)
/// until `release` is set; it counts its calls and says when one began.
pub struct Gate {
    pub entered: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub release: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

#[async_trait::async_trait]
impl keel::ToolProvider for Gate {
    fn specs(&self) -> Vec<keel::ToolSpec> {
        vec![spec("slow", keel::Effect::ReadOnly)]
    }
    async fn call(&self, _name: &str, _arguments: &str) -> Result<String, keel::ToolError> {
        use std::sync::atomic::Ordering;
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.entered.store(true, Ordering::SeqCst);
        while !self.release.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Ok(r#"{"slow":true}"#.into())
    }
}

/// The `keel` binary built for these tests.
pub fn keel_bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
}

/// What a finished command printed, stdout then stderr (for messages).
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
