//! The loop's kept steps equal a fresh load: one scenario run twice with a
//! deterministic clock and ids, once with the step cache and once reloading
//! everything at every step; every consumer input, every event and every
//! stored row must be the same.

mod common;

use common::*;
use keel::driver::{SeqIds, StepClock};
use keel::*;
use std::sync::{Arc, Mutex};

fn script() -> Vec<Decision> {
    vec![
        call("echo", r#"{"n":1}"#),
        call("deny_x", "{}"),
        call("nope", "{}"),
        call("broken", "{}"),
        call("ask_y", r#"{"b":2,"a":1}"#),
        call("echo", r#"{"n":2}"#),
        Decision::Complete(r#"{"ok":1}"#.into()),
    ]
}

fn tools() -> Vec<Arc<dyn ToolProvider>> {
    let n = Arc::new(Mutex::new(0));
    let broken: Arc<dyn ToolProvider> =
        Arc::new(FnTool::new(spec("broken", Effect::ReadOnly), |_| {
            Err("it broke".to_string())
        }));
    vec![
        counting_tool("echo", Effect::ReadOnly, n.clone()),
        counting_tool("deny_x", Effect::ReadOnly, n.clone()),
        counting_tool("ask_y", Effect::LocalMutation, n),
        broken,
    ]
}

struct Trace {
    inputs: Vec<String>,
    events: Vec<keel::store::Event>,
    steps: Vec<keel::store::StepRow>,
    approvals: Vec<keel::store::ApprovalRow>,
    run: Run,
    clock_readings: i64,
}

async fn scenario(reload: bool) -> Trace {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let clock = Arc::new(StepClock::new(1_000_000, 7));
    let rt = runtime(&db)
        .with_clock(clock.clone())
        .with_ids(Arc::new(SeqIds::new()))
        .reload_each_step(reload);
    let (c, rig1) = consumers(script(), tools());
    let out = rt
        .start("same twice", Limits::default(), "{}", c)
        .await
        .unwrap();
    let a = out.pending.unwrap();
    let mut op = Store::open(&db, keel::Sync::Full).unwrap();
    op.decide_approval(&a.id, true, "ops", Some("ok"), 5)
        .unwrap();
    let (c, rig2) = consumers(script(), tools());
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    let mut inputs = vec![];
    for rig in [rig1, rig2] {
        inputs.extend(rig.agent_seen.lock().unwrap().iter().cloned());
        inputs.extend(rig.policy_seen.lock().unwrap().iter().cloned());
    }
    let id = out.run.id.clone();
    Trace {
        inputs,
        events: op.events_after(Some(&id), 0, 10_000).unwrap(),
        steps: op.step_rows(&id).unwrap(),
        approvals: op.approval_rows(&id).unwrap(),
        run: op.run(&id).unwrap(),
        clock_readings: clock.readings(1_000_000),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_steps_equal_reloaded_steps_in_every_input_event_and_row() {
    let cached = scenario(false).await;
    let reloaded = scenario(true).await;
    assert_eq!(cached.inputs, reloaded.inputs);
    assert_eq!(cached.events, reloaded.events);
    assert_eq!(cached.steps, reloaded.steps);
    assert_eq!(cached.approvals, reloaded.approvals);
    assert_eq!(cached.run, reloaded.run);
    assert_eq!(cached.clock_readings, reloaded.clock_readings);
    // The scenario covered what it claims.
    let kinds: Vec<&str> = cached
        .steps
        .iter()
        .filter_map(|s| s.obs_kind.as_deref())
        .collect();
    for k in [
        "tool_result",
        "denied",
        "invalid_decision",
        "tool_error",
        "final",
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    assert!(cached.events.iter().any(|e| e.kind == "run.paused"));
    assert!(cached.inputs.len() >= 7 + 3);
}
