//! The loop driving real wasm components: approvals through a wasm policy,
//! tool capabilities, the views plugins reassemble from deltas, and hostile
//! plugins that must not take the host down.

use crate::common;

use common::wasm::*;
use common::*;
use keel::model::StubProvider;
use keel::wasm::{PluginLimits, ToolCaps, WasmAgent, WasmPolicy, WasmTools, World};
use keel::*;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn tmpdb() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    (dir, p)
}

struct Parts {
    agent_file: &'static str,
    agent_config: serde_json::Value,
    agent_limits: PluginLimits,
    policy_config: serde_json::Value,
    tools: Vec<Arc<dyn ToolProvider>>,
    latency: Duration,
}

async fn wasm_consumers(p: &Parts) -> Option<Consumers> {
    let agent = plugin(p.agent_file, World::Agent)?;
    let policy = plugin("policy-rules-rust.wasm", World::Policy)?;
    let mut set = ToolSet::new();
    for t in &p.tools {
        set.add(t.clone()).unwrap();
    }
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::new(p.latency)));
    let a = WasmAgent::new(
        &host(),
        &agent,
        &p.agent_config.to_string(),
        set.specs(),
        &p.agent_limits,
        &wiring,
    )
    .await
    .unwrap();
    let pol = WasmPolicy::new(
        &host(),
        &policy,
        &p.policy_config.to_string(),
        &PluginLimits::default(),
        &wiring,
    )
    .await
    .unwrap();
    Some(wiring.build(Box::new(a), Box::new(pol), set))
}

async fn echo_tool() -> Option<Arc<dyn ToolProvider>> {
    let p = plugin("tool-echo-rust.wasm", World::Tool)?;
    Some(Arc::new(
        WasmTools::new(
            host(),
            p,
            "{}",
            PluginLimits::default(),
            ToolCaps::default(),
            false,
            None,
        )
        .await
        .unwrap(),
    ))
}

fn rules() -> serde_json::Value {
    json!({ "rules": [
        { "tool": "echo", "action": "allow" },
        { "tool": "fs_read", "action": "allow" },
        { "tool": "deny_*", "action": "deny", "reason": "no deny_ tools" },
        { "tool": "ask", "action": "require-approval", "reason": "ask first" },
        { "tool": "slow", "action": "allow" },
        { "effect": "local-mutation", "action": "require-approval", "reason": "writes need approval" },
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_agent_policy_and_fs_tool_pause_for_approval_and_complete() {
    let Some(fs_plugin) = plugin("tool-fs-rust.wasm", World::Tool) else {
        return;
    };
    let (dir, db) = tmpdb();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
    let caps = ToolCaps {
        dirs: vec![(work.clone(), "/workspace".into(), true)],
        ..ToolCaps::default()
    };
    let fs: Arc<dyn ToolProvider> = Arc::new(
        WasmTools::new(
            host(),
            fs_plugin,
            r#"{"root":"/workspace"}"#,
            PluginLimits::default(),
            caps,
            false,
            None,
        )
        .await
        .unwrap(),
    );
    let script = json!({ "script": [
        { "call": { "tool": "fs_write", "arguments": { "path": "hello.txt", "content": "hi" } } },
        { "call": { "tool": "fs_read", "arguments": { "path": "hello.txt" } } },
        { "call": { "tool": "fs_read", "arguments": { "path": "../secret.txt" } } },
        { "complete": { "ok": true } },
    ]});
    let parts = Parts {
        agent_file: "agent-scripted-rust.wasm",
        agent_config: script,
        agent_limits: PluginLimits::default(),
        policy_config: rules(),
        tools: vec![fs],
        latency: Duration::ZERO,
    };
    let rt = runtime(&db);
    let Some(c) = wasm_consumers(&parts).await else {
        return;
    };
    let out = rt.start("write", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    let a = out.pending.unwrap();
    assert_eq!(a.reason, "writes need approval");
    assert!(
        !work.join("hello.txt").exists(),
        "nothing written before approval"
    );
    let mut op = Store::open(&db, keel::Durability::Full).unwrap();
    op.decide_approval(&a.id, true, "ops", None, 1).unwrap();
    let c = wasm_consumers(&parts).await.unwrap();
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed, "{:?}", done.run);
    assert_eq!(
        std::fs::read_to_string(work.join("hello.txt")).unwrap(),
        "hi"
    );
    let steps = op.load_steps(&out.run.id).unwrap();
    assert!(steps[1]
        .observation
        .as_ref()
        .unwrap()
        .content
        .contains(r#""content":"hi""#));
    let escape = steps[2].observation.as_ref().unwrap();
    assert_eq!(
        escape.kind,
        ObservationKind::ToolError,
        "reading outside the grant fails inside the tool"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_a_plugin_reassembles_equals_the_hosts_after_every_step() {
    let Some(echo) = echo_tool().await else {
        return;
    };
    let (_dir, db) = tmpdb();
    // A native tool that hangs the first time, so the loop can be dropped
    // mid-execution and the step found interrupted on resume.
    let hang_once = Arc::new(Mutex::new(true));
    let h = hang_once.clone();
    let slow: Arc<dyn ToolProvider> = Arc::new(SlowTool { first: h });
    let script = json!({ "mode": "mirror", "script": [
        ["echo", { "n": 1 }],
        ["deny_me", {}],
        ["nope", {}],
        ["ask", {}],
        ["slow", {}],
        ["echo", { "n": 2 }],
    ]});
    let parts = Parts {
        agent_file: "hostile-agent-rust.wasm",
        agent_config: script,
        agent_limits: PluginLimits::default(),
        policy_config: rules(),
        tools: vec![echo, slow, spec_tool("deny_me"), spec_tool("ask")],
        latency: Duration::ZERO,
    };
    let rt = runtime(&db).with_lease_ttl_ms(60);
    let Some(c) = wasm_consumers(&parts).await else {
        return;
    };
    let out = rt
        .start("mirror", Limits::default(), "{}", c)
        .await
        .unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    let mut op = Store::open(&db, keel::Durability::Full).unwrap();
    op.decide_approval(&out.pending.unwrap().id, true, "ops", None, 1)
        .unwrap();
    // Resume with a fresh instance; the slow tool hangs: drop the loop.
    let c = wasm_consumers(&parts).await.unwrap();
    let r = tokio::time::timeout(Duration::from_millis(1500), rt.resume(&out.run.id, c)).await;
    assert!(r.is_err(), "the loop was stopped while the tool ran");
    tokio::time::sleep(Duration::from_millis(100)).await; // let the lease expire
    let c = wasm_consumers(&parts).await.unwrap();
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed, "{:?}", done.run);

    let steps = op.load_steps(&out.run.id).unwrap();
    let approvals = op.load_approvals(&out.run.id).unwrap();
    assert!(steps.iter().any(|s| s
        .observation
        .as_ref()
        .is_some_and(|o| o.kind == ObservationKind::Denied)));
    assert!(steps.iter().any(|s| s
        .observation
        .as_ref()
        .is_some_and(|o| o.kind == ObservationKind::InvalidDecision)));
    assert!(op
        .events_after(Some(&out.run.id), 0, 1000)
        .unwrap()
        .iter()
        .any(|e| e.kind == "step.interrupted"));
    let mut checked = 0;
    for s in &steps {
        let text = match &s.decision {
            Some(Decision::Call(c)) => c.arguments.clone(),
            Some(Decision::Complete(r)) => r.clone(),
            _ => continue,
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let seen = v["view"].as_str().unwrap();
        let k = s.index as usize;
        let expected = host_summary(
            &steps[..k],
            approvals.iter().filter(|a| (a.step_index as usize) < k),
        );
        assert_eq!(seen, expected, "the view at step {k}");
        checked += 1;
    }
    assert_eq!(checked, steps.len());
}

struct SlowTool {
    first: Arc<Mutex<bool>>,
}

#[async_trait::async_trait]
impl ToolProvider for SlowTool {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec("slow", Effect::Idempotent)]
    }
    async fn call(&self, _: &str, _: &str) -> Result<String, ToolError> {
        let hang = std::mem::replace(&mut *self.first.lock().unwrap(), false);
        if hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Ok("{\"slow\":true}".into())
    }
}

fn spec_tool(name: &str) -> Arc<dyn ToolProvider> {
    let n = Arc::new(Mutex::new(0));
    counting_tool(name, Effect::LocalMutation, n)
}

fn host_summary<'a>(steps: &[Step], approvals: impl Iterator<Item = &'a Approval>) -> String {
    let s: Vec<String> = steps
        .iter()
        .map(|s| {
            let decision = match &s.decision {
                None => "none",
                Some(Decision::Call(_)) => "call",
                Some(Decision::Complete(_)) => "complete",
                Some(Decision::Fail(_)) => "fail",
                Some(Decision::Invalid(_)) => "invalid",
            };
            let (kind, len) = s
                .observation
                .as_ref()
                .map(|o| (o.kind.as_str(), o.content.len()))
                .unwrap_or(("none", 0));
            format!(
                "{}/{}/{}/{decision}/{kind}/{len}",
                s.index,
                s.version,
                s.state.as_str()
            )
        })
        .collect();
    let a: Vec<String> = approvals
        .map(|a| format!("{}={}", a.id, a.status.as_str()))
        .collect();
    format!("{}|{}", s.join(";"), a.join(";"))
}

async fn hostile_run(
    db: &std::path::Path,
    mode: &str,
    limits: PluginLimits,
    run_limits: Limits,
) -> Option<Outcome> {
    let echo = echo_tool().await?;
    let parts = Parts {
        agent_file: "hostile-agent-rust.wasm",
        agent_config: json!({ "mode": mode, "after": 1 }),
        agent_limits: limits,
        policy_config: rules(),
        tools: vec![echo],
        latency: Duration::from_millis(1),
    };
    let rt = runtime(db);
    let c = wasm_consumers(&parts).await?;
    Some(rt.start(mode, run_limits, "{}", c).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_end_their_run_with_a_clear_reason_and_the_host_carries_on() {
    let (_dir, db) = tmpdb();
    let tight = PluginLimits {
        fuel: 2_000_000_000,
        deadline_ms: 1_000,
        memory_bytes: 64 << 20,
        ..PluginLimits::default()
    };
    let cases: Vec<(&str, PluginLimits, &str, &str)> = vec![
        ("loop", tight.clone(), "agent_trapped", "out_of_fuel"),
        (
            "loop",
            PluginLimits {
                fuel: u64::MAX / 2,
                ..tight.clone()
            },
            "agent_trapped",
            "deadline",
        ),
        ("memory", tight.clone(), "agent_trapped", "memory_cap"),
        ("recurse", tight.clone(), "agent_trapped", "stack_overflow"),
        ("trap", tight.clone(), "agent_trapped", "deliberate panic"),
        (
            "huge-string",
            PluginLimits {
                memory_bytes: 400 << 20,
                ..tight.clone()
            },
            "agent_trapped",
            "output limit",
        ),
    ];
    // A well-behaved run goes on in the same process meanwhile.
    let good_db = db.with_file_name("good.db");
    let good = tokio::spawn(async move {
        let parts = Parts {
            agent_file: "agent-scripted-rust.wasm",
            agent_config: json!({ "script": (0..20).map(|i| json!({ "call": { "tool": "echo", "arguments": { "i": i } } }))
                .chain(std::iter::once(json!({ "complete": 1 }))).collect::<Vec<_>>() }),
            agent_limits: PluginLimits::default(),
            policy_config: rules(),
            tools: vec![echo_tool().await?],
            latency: Duration::ZERO,
        };
        let c = wasm_consumers(&parts).await?;
        Some(
            runtime(&good_db)
                .start("good", Limits::default(), "{}", c)
                .await
                .unwrap(),
        )
    });
    for (mode, limits, reason, detail) in cases {
        let Some(out) = hostile_run(&db, mode, limits, Limits::default()).await else {
            return;
        };
        assert_eq!(out.run.status, RunStatus::Failed, "{mode}");
        assert_eq!(
            out.run.reason.map(|r| r.as_str()),
            Some(reason),
            "{mode}: {:?}",
            out.run.result
        );
        let result = out.run.result.clone().unwrap_or_default();
        assert!(result.contains(detail), "{mode}: {result}");
        // What was committed before the trap is still there.
        let store = Store::open_read_only(&db).unwrap();
        let steps = store.load_steps(&out.run.id).unwrap();
        assert_eq!(
            steps[0].observation.as_ref().unwrap().kind,
            ObservationKind::ToolResult,
            "{mode}"
        );
    }
    let good = good.await.unwrap();
    if let Some(g) = good {
        assert_eq!(g.run.status, RunStatus::Completed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_output_log_floods_and_model_floods_are_contained() {
    let (_dir, db) = tmpdb();
    let l = PluginLimits::default();
    let Some(out) = hostile_run(&db, "bad-json", l.clone(), Limits::default()).await else {
        return;
    };
    assert_eq!(out.run.status, RunStatus::Failed);
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("limit_consecutive_failures"),
        "bad JSON is an invalid decision each time"
    );

    let out = hostile_run(
        &db,
        "unknown-tool",
        l.clone(),
        Limits {
            max_consecutive_failures: 3,
            ..Limits::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("limit_consecutive_failures")
    );

    let out = hostile_run(&db, "log-flood", l.clone(), Limits::default())
        .await
        .unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let store = Store::open_read_only(&db).unwrap();
    let logs = store
        .events_after(Some(&out.run.id), 0, 100_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "plugin.log")
        .count();
    assert_eq!(
        logs, l.log_lines_per_call as usize,
        "the flood is cut at the per-call limit"
    );

    let out = hostile_run(
        &db,
        "model-flood",
        l,
        Limits {
            max_model_calls: 25,
            ..Limits::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(out.run.status, RunStatus::Failed);
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("limit_model_calls")
    );
    assert_eq!(out.run.model_calls, 25);
    assert_eq!(
        store.model_call_count(&out.run.id).unwrap(),
        26,
        "25 calls and the refused one are recorded"
    );
}
