//! The loop's kept steps equal a fresh load: one scenario run twice with a
//! deterministic clock and ids, once with the step cache and once reloading
//! everything at every step; every consumer input, every event and every
//! stored row must be the same. On both store engines, from one test code:
//! `sqlite::NAME` and `postgres::NAME`.

use crate::common;

use common::engine::TestStore;
use common::*;
use keel::driver::operator::decide_in;
use keel::driver::{SeqIds, StepClock};
use keel::*;
use std::sync::{Arc, Mutex};

on_both_engines!(cached_steps_equal_reloaded_steps_in_every_input_event_and_row);

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

/// The columns of a run's `steps` rows, as stored.
const STEP_ROWS: &str = "SELECT run_id, idx, version, state, decision, call_tool, call_args,
    effect, verdict, obs_kind, obs_content, started_at, updated_at FROM steps";
/// The column of `obs_kind` in [`STEP_ROWS`].
const OBS_KIND: usize = 9;
/// The columns of a run's `approvals` rows, as stored.
const APPROVAL_ROWS: &str = "SELECT id, run_id, step_idx, kind, status, tool, arguments,
    reason, presentation, hash, created_at, expires_at, decided_by, note, decided_at
    FROM approvals";

struct Trace {
    inputs: Vec<String>,
    events: Vec<keel::store::Event>,
    steps: Vec<Step>,
    step_rows: Vec<Vec<Option<String>>>,
    approvals: Vec<Approval>,
    approval_rows: Vec<Vec<Option<String>>>,
    run: Run,
    clock_readings: i64,
}

/// The scenario on `s` (a fresh store: event numbers start alike).
async fn scenario(s: &TestStore, reload: bool) -> Trace {
    let clock = Arc::new(StepClock::new(1_000_000, 7));
    let rt = s
        .runtime()
        .await
        .with_clock(clock.clone())
        .with_ids(Arc::new(SeqIds::new()))
        .reload_each_step(reload);
    let (c, rig1) = consumers(script(), tools());
    let out = rt
        .start("same twice", Limits::default(), "{}", c)
        .await
        .unwrap();
    let a = out.pending.unwrap();
    // An operator on another handle, at a fixed time (off the run's clock).
    let op = s.open().await;
    decide_in(&*op, &a.id, true, "ops", Some("ok"), 5)
        .await
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
    let r = s.reader().await;
    Trace {
        inputs,
        events: r.events_after(Some(&id), 0, 10_000).await.unwrap(),
        steps: r.steps(&id).await.unwrap(),
        step_rows: s
            .rows(&format!("{STEP_ROWS} WHERE run_id = '{id}' ORDER BY idx"))
            .await,
        approvals: r.approvals(&id).await.unwrap(),
        approval_rows: s
            .rows(&format!(
                "{APPROVAL_ROWS} WHERE run_id = '{id}' ORDER BY created_at, id"
            ))
            .await,
        run: r.run(&id).await.unwrap(),
        clock_readings: clock.readings(1_000_000),
    }
}

async fn cached_steps_equal_reloaded_steps_in_every_input_event_and_row(s: TestStore) {
    let cached = scenario(&s, false).await;
    let reloaded = scenario(&TestStore::new(s.engine).await, true).await;
    assert_eq!(cached.inputs, reloaded.inputs);
    assert_eq!(cached.events, reloaded.events);
    assert_eq!(cached.steps, reloaded.steps);
    assert_eq!(cached.step_rows, reloaded.step_rows);
    assert_eq!(cached.approvals, reloaded.approvals);
    assert_eq!(cached.approval_rows, reloaded.approval_rows);
    assert_eq!(cached.run, reloaded.run);
    assert_eq!(cached.clock_readings, reloaded.clock_readings);
    // The scenario covered what it claims.
    assert_eq!(cached.step_rows.len(), cached.steps.len());
    assert_eq!(cached.approval_rows.len(), 1);
    let kinds: Vec<&str> = cached
        .step_rows
        .iter()
        .filter_map(|r| r[OBS_KIND].as_deref())
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
