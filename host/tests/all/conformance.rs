//! Every twin of a plugin gives the same verdicts and decisions on the same
//! scenarios: policy-rules in Rust, C, Python and JavaScript; agent-scripted
//! in Rust, Python and JavaScript.

use crate::common;

use common::wasm::*;
use keel::consumer::RunView;
use keel::model::StubProvider;
use keel::wasm::{PluginLimits, WasmAgent, WasmPolicy, World};
use keel::*;
use serde_json::{json, Value};
use std::sync::Arc;

const POLICY_TWINS: &[&str] = &[
    "policy-rules-rust.wasm",
    "policy-rules-c.wasm",
    "policy-rules-py.wasm",
    "policy-rules-js.wasm",
];
const AGENT_TWINS: &[&str] = &[
    "agent-scripted-rust.wasm",
    "agent-scripted-py.wasm",
    "agent-scripted-js.wasm",
];

/// Whether every twin was built. Outside CI a missing one skips the whole
/// comparison, by name, instead of comparing fewer twins; under CI
/// [`plugin_path`] fails the test.
fn every_twin_built(twins: &[&str]) -> bool {
    let missing: Vec<&str> = twins
        .iter()
        .copied()
        .filter(|t| plugin_path(t).is_none())
        .collect();
    if !missing.is_empty() {
        eprintln!("skipping the comparison: {missing:?} not built");
    }
    missing.is_empty()
}

fn run_row() -> Run {
    let mut r = Run::new("run_c", "conformance", Limits::default(), 0);
    r.step_count = 1;
    r
}

/// A verdict with its presentation parsed, so twins may differ in JSON spacing.
fn normal(v: Verdict) -> (String, String, Value) {
    match v {
        Verdict::Allow => ("allow".into(), String::new(), Value::Null),
        Verdict::Deny(r) => ("deny".into(), r, Value::Null),
        Verdict::Abort(r) => ("abort".into(), r, Value::Null),
        Verdict::RequireApproval(a) => (
            "require-approval".into(),
            a.reason,
            serde_json::from_str(&a.presentation).unwrap(),
        ),
    }
}

fn policy_config() -> Value {
    json!({ "rules": [
        { "tool": "fs_read", "action": "allow" },
        { "tool": "fs_*", "args": { "path": "secrets/*" }, "action": "deny", "reason": "secrets are off limits" },
        { "tool": "fs_write", "args": { "path": "?.txt" }, "action": "allow" },
        { "effect": ["local-mutation", "remote-mutation"], "action": "require-approval", "reason": "writes need a human" },
        { "effect": "destructive", "action": "abort" },
        { "tool": "ünï*", "action": "deny" },
        { "tool": "net_?", "action": "require-approval" },
    ], "default": "deny" })
}

fn policy_cases() -> Vec<(&'static str, &'static str, Effect)> {
    vec![
        ("fs_read", r#"{"path":"secrets/k"}"#, Effect::ReadOnly),
        ("fs_list", r#"{"path":"secrets/k"}"#, Effect::ReadOnly),
        ("fs_list", r#"{"path":"public"}"#, Effect::ReadOnly),
        ("fs_write", r#"{"path":"a.txt"}"#, Effect::LocalMutation),
        ("fs_write", r#"{"path":"ab.txt"}"#, Effect::LocalMutation),
        ("fs_write", r#"{"path":"é.txt"}"#, Effect::LocalMutation),
        ("fs_write", r#"{"path":7}"#, Effect::LocalMutation),
        ("fs_write", r#"{}"#, Effect::LocalMutation),
        ("http_post", "{}", Effect::RemoteMutation),
        ("rm_rf", r#"{"path":"/"}"#, Effect::Destructive),
        ("ünïcode", "{}", Effect::ReadOnly),
        ("net_a", "{}", Effect::ReadOnly),
        ("net_ab", "{}", Effect::ReadOnly),
        ("other", "{}", Effect::Idempotent),
    ]
}

async fn policy(file: &str, config: &Value) -> Option<Result<WasmPolicy, ConsumerError>> {
    let p = plugin(file, World::Policy)?;
    Some(
        WasmPolicy::new(
            &host(),
            &p,
            &config.to_string(),
            &PluginLimits::default(),
            &ConsumersBuilder::new(Arc::new(StubProvider::default())),
        )
        .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_rules_twins_give_the_same_verdicts() {
    if !every_twin_built(POLICY_TWINS) {
        return;
    }
    let run = run_row();
    let mut results: Vec<(String, Vec<(String, String, Value)>)> = vec![];
    for twin in POLICY_TWINS {
        let p = policy(twin, &policy_config()).await.expect("checked above");
        let mut p = p.unwrap_or_else(|e| panic!("{twin}: {e}"));
        let mut verdicts = vec![];
        for (tool, args, effect) in policy_cases() {
            let view = RunView {
                run: &run,
                steps: &[],
                approvals: &[],
            };
            let call = ToolCall {
                tool: tool.into(),
                arguments: args.into(),
            };
            verdicts.push(normal(
                p.evaluate(&call, effect, view)
                    .await
                    .unwrap_or_else(|e| panic!("{twin} {tool}: {e}")),
            ));
        }
        results.push((twin.to_string(), verdicts));
    }
    let (first, reference) = &results[0];
    // The reference itself is what the README specifies.
    assert_eq!(reference[0].0, "allow");
    assert_eq!(
        reference[1],
        ("deny".into(), "secrets are off limits".into(), Value::Null)
    );
    assert_eq!(reference[3].0, "allow");
    assert_eq!(
        reference[4],
        (
            "require-approval".into(),
            "writes need a human".into(),
            json!({"rule": 3, "tool": "fs_write"})
        )
    );
    assert_eq!(
        reference[5].0, "allow",
        "? matches one character, é included"
    );
    assert_eq!(
        reference[9],
        ("abort".into(), "matched rule 4".into(), Value::Null)
    );
    assert_eq!(
        reference[13],
        ("deny".into(), "no rule matched".into(), Value::Null)
    );
    for (twin, verdicts) in &results[1..] {
        for (i, (a, b)) in reference.iter().zip(verdicts).enumerate() {
            assert_eq!(
                a,
                b,
                "{twin} differs from {first} on case {i} {:?}",
                policy_cases()[i]
            );
        }
    }
}

/// policy-rules matches the call alone, so every twin asks at `init` for
/// the call-only view: the deltas it is handed carry no steps and no
/// approvals, however many the run has, and its verdicts do not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_rules_twins_are_handed_the_call_alone() {
    if !every_twin_built(POLICY_TWINS) {
        return;
    }
    let mut run = run_row();
    run.step_count = 4;
    let steps: Vec<Step> = (0..3).map(decided_step).collect();
    let approvals = vec![Approval {
        id: "appr_c".into(),
        run_id: "run_c".into(),
        step_index: 2,
        kind: ApprovalKind::Policy,
        status: ApprovalStatus::Approved,
        call: ToolCall {
            tool: "fs_write".into(),
            arguments: "{}".into(),
        },
        reason: "why".into(),
        presentation: "{}".into(),
        hash: String::new(),
        created_at: 0,
        expires_at: None,
        decided_by: Some("op".into()),
        note: None,
        decided_at: Some(0),
        chain_head: None,
        tool_pin: None,
    }];
    let call = ToolCall {
        tool: "fs_read".into(),
        arguments: "{}".into(),
    };
    for twin in POLICY_TWINS {
        let p = policy(twin, &policy_config()).await.expect("checked above");
        let mut p = p.unwrap_or_else(|e| panic!("{twin}: {e}"));
        assert!(!p.sees_steps(), "{twin} asked for the full view");
        let view = RunView {
            run: &run,
            steps: &steps,
            approvals: &approvals,
        };
        let verdict = p.evaluate(&call, Effect::ReadOnly, view).await;
        assert_eq!(verdict.map(normal).unwrap().0, "allow", "{twin}");
        // The next call's delta (as the host would hand it), with a step
        // more in the run, has no steps and no approvals either.
        let more: Vec<Step> = (0..4).map(decided_step).collect();
        let view = RunView {
            run: &run,
            steps: &more,
            approvals: &approvals,
        };
        let (_, _, delta) = p.raw_parts(&call, Effect::ReadOnly, view);
        assert!(!delta.reset, "{twin}");
        assert!(
            delta.steps.is_empty() && delta.approvals.is_empty(),
            "{twin}"
        );
        assert_eq!(
            delta.run.step_count, 4,
            "{twin}: the run's info still comes"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_rules_twins_name_the_same_bad_key() {
    if !every_twin_built(POLICY_TWINS) {
        return;
    }
    let bad = [
        (json!({ "rules": [], "rule": [] }), "config"),
        (json!({ "rules": {} }), "config.rules"),
        (
            json!({ "rules": [{ "action": "permit" }] }),
            "config.rules[0].action",
        ),
        (
            json!({ "rules": [{ "tool": "x" }] }),
            "config.rules[0].action",
        ),
        (
            json!({ "rules": [{ "action": "allow", "tools": "x" }] }),
            "config.rules[0]",
        ),
        (
            json!({ "rules": [{ "action": "allow", "effect": "write" }] }),
            "config.rules[0].effect",
        ),
        (
            json!({ "rules": [{ "action": "allow", "args": { "p": 1 } }] }),
            "config.rules[0].args.p",
        ),
        (json!({ "rules": [], "default": "maybe" }), "config.default"),
    ];
    for twin in POLICY_TWINS {
        for (config, path) in &bad {
            let r = policy(twin, config).await.expect("checked above");
            let e = r
                .err()
                .unwrap_or_else(|| panic!("{twin} accepted {config}"))
                .to_string();
            let msg = e.split("init: ").nth(1).unwrap_or(&e);
            assert!(
                msg.starts_with(&format!("{path}:")),
                "{twin} on {config}: {e}"
            );
        }
    }
}

fn agent_script() -> Value {
    json!({ "script": [
        { "call": { "tool": "echo", "arguments": { "b": [1, 2.5, "x"], "a": { "z": null, "y": true } } } },
        { "call": { "tool": "echo" } },
        { "complete": { "done": "ünï" } },
        { "fail": "gave up" },
    ]})
}

fn decided_step(i: u32) -> Step {
    Step {
        index: i,
        version: 4,
        state: StepState::Done,
        decision: Some(Decision::Call(ToolCall {
            tool: "echo".into(),
            arguments: "{}".into(),
        })),
        call: None,
        effect: None,
        verdict: Some(Verdict::Allow),
        observation: Some(Observation {
            kind: ObservationKind::ToolResult,
            content: "{}".into(),
        }),
        started_at: 0,
        updated_at: 0,
    }
}

fn canonical(d: Decision) -> (String, Value) {
    match d {
        Decision::Call(c) => (
            format!("call {}", c.tool),
            serde_json::from_str(&c.arguments).unwrap(),
        ),
        Decision::Complete(r) => ("complete".into(), serde_json::from_str(&r).unwrap()),
        Decision::Fail(r) => ("fail".into(), Value::String(r)),
        Decision::Invalid(r) => ("invalid".into(), Value::String(r)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_scripted_twins_give_the_same_decisions() {
    if !every_twin_built(AGENT_TWINS) {
        return;
    }
    let mut results = vec![];
    for twin in AGENT_TWINS {
        let p = plugin(twin, World::Agent).expect("checked above");
        let mut a = WasmAgent::new(
            &host(),
            &p,
            &agent_script().to_string(),
            &[],
            &PluginLimits::default(),
            &ConsumersBuilder::new(Arc::new(StubProvider::default())),
        )
        .await
        .unwrap_or_else(|e| panic!("{twin}: {e}"));
        let mut run = run_row();
        let mut steps = vec![];
        let mut decisions = vec![];
        for i in 0..6u32 {
            run.step_count = i + 1;
            let view = RunView {
                run: &run,
                steps: &steps,
                approvals: &[],
            };
            decisions.push(canonical(
                a.decide(view)
                    .await
                    .unwrap_or_else(|e| panic!("{twin} step {i}: {e}")),
            ));
            steps.push(decided_step(i));
        }
        results.push((twin, decisions));
    }
    let reference = &results[0].1;
    assert_eq!(
        reference[0],
        (
            "call echo".into(),
            json!({ "a": { "y": true, "z": null }, "b": [1, 2.5, "x"] })
        )
    );
    assert_eq!(reference[1], ("call echo".into(), json!({})));
    assert_eq!(reference[2], ("complete".into(), json!({ "done": "ünï" })));
    assert_eq!(reference[3], ("fail".into(), json!("gave up")));
    assert_eq!(
        reference[4],
        ("fail".into(), json!("script exhausted after 4 decisions"))
    );
    for (twin, d) in &results[1..] {
        assert_eq!(reference, d, "{twin}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_scripted_twins_name_the_same_bad_key() {
    if !every_twin_built(AGENT_TWINS) {
        return;
    }
    let bad = [
        (json!({ "script": [], "scrip": [] }), "config"),
        (json!({ "script": {} }), "config.script"),
        (
            json!({ "script": [{ "call": {} }] }),
            "config.script[0].call.tool",
        ),
        (
            json!({ "script": [{ "call": { "tool": "a", "args": {} } }] }),
            "config.script[0].call",
        ),
        (
            json!({ "script": [{ "fail": 1 }] }),
            "config.script[0].fail",
        ),
        (json!({ "script": [{}] }), "config.script[0]"),
    ];
    for twin in AGENT_TWINS {
        let p = plugin(twin, World::Agent).expect("checked above");
        for (config, path) in &bad {
            let r = WasmAgent::new(
                &host(),
                &p,
                &config.to_string(),
                &[],
                &PluginLimits::default(),
                &ConsumersBuilder::new(Arc::new(StubProvider::default())),
            )
            .await;
            let e = r
                .err()
                .unwrap_or_else(|| panic!("{twin} accepted {config}"))
                .to_string();
            let msg = e.split("init: ").nth(1).unwrap_or(&e);
            assert!(
                msg.starts_with(&format!("{path}:")),
                "{twin} on {config}: {e}"
            );
        }
    }
}
