//! What a plugin, an operator or another process cannot do to a run: the
//! races of creating a store and taking a lease, cancel settling what a run
//! is in, leases of dead processes, and the operator's word on effects.

mod common;

use async_trait::async_trait;
use common::*;
use keel::model::{ModelGate, ModelRequest, StubProvider};
use keel::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn tmpdb() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    (dir, p)
}

#[test]
fn many_processes_creating_one_store_at_once_all_succeed() {
    for round in 0..25 {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keel.db");
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let (p, b) = (p.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    Store::open(&p, keel::Sync::Full).map(drop)
                })
            })
            .collect();
        for (i, o) in opens.into_iter().enumerate() {
            if let Err(e) = o.join().unwrap() {
                panic!("round {round}, opener {i}: {e}");
            }
        }
        let s = Store::open_read_only(&p).unwrap();
        assert!(s.list_runs(None, 1).unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_finished_run_cannot_be_leased_or_resumed() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
    let (c, _) = consumers(vec![Decision::Complete("1".into())], vec![]);
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let mut s = Store::open(&db, keel::Sync::Full).unwrap();
    // As a racing resumer would, after reading the run still running.
    assert!(matches!(
        s.acquire_lease(&out.run.id, "late", 0, 30_000),
        Err(StoreError::Terminal { .. })
    ));
    assert!(s.run(&out.run.id).unwrap().lease_owner.is_none());
    let (c, _) = consumers(vec![], vec![]);
    assert!(matches!(
        rt.resume(&out.run.id, c).await,
        Err(DriverError::Terminal(..))
    ));
}

#[tokio::test]
async fn a_lease_of_a_process_that_is_gone_is_taken_at_once_and_an_operator_can_force_one() {
    let (_d, db) = tmpdb();
    let mut s = Store::open(&db, keel::Sync::Full).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let host = keel::store::lease::process_tag()
        .split(':')
        .next()
        .unwrap()
        .to_string();
    let far = i64::MAX / 2;
    for (id, owner) in [
        ("dead", format!("lease_x@{host}:{pid}:1")),
        ("alive", keel::store::lease::owner_id("lease_y")),
    ] {
        let mut r = Run::new(id, "g", Limits::default(), 0);
        r.lease_owner = Some(owner);
        r.lease_expires = Some(far);
        s.create_run(&r, vec![]).unwrap();
    }
    // The holder's process is gone: taken at once, long before expiry.
    let taken = s.acquire_lease("dead", "me", 10, 30_000).unwrap();
    assert_eq!(taken.lease_owner.as_deref(), Some("me"));
    let ev = s.events_after(Some("dead"), 0, 10).unwrap();
    assert_eq!(ev[0].kind, "lease.taken_over");
    assert!(ev[0].data.contains("holder_gone"), "{}", ev[0].data);
    // A live holder keeps it, unless an operator takes it over by name.
    assert!(matches!(
        s.acquire_lease("alive", "me", 10, 30_000),
        Err(StoreError::Leased { .. })
    ));
    s.acquire_lease_as("alive", "me", 10, 30_000, Some("ops-alice"))
        .unwrap();
    let ev = s.events_after(Some("alive"), 0, 10).unwrap();
    assert!(
        ev[0].data.contains("\"by\":\"ops-alice\""),
        "{}",
        ev[0].data
    );
    assert!(
        ev[0].data.contains("\"why\":\"operator\""),
        "{}",
        ev[0].data
    );
}

/// An agent whose decision waits on a model call that takes an hour.
struct SlowModelAgent {
    gate: Arc<ModelGate>,
}

#[async_trait]
impl Agent for SlowModelAgent {
    async fn decide(&mut self, _: RunView<'_>) -> Result<Decision, ConsumerError> {
        let req = ModelRequest {
            messages: vec![],
            tools: vec![],
            max_tokens: None,
            temperature: None,
        };
        let _ = self.gate.complete(&req).await;
        Ok(Decision::Complete("1".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_interrupts_a_slow_model_call() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
    let gate = Arc::new(ModelGate::new(Arc::new(StubProvider::new(
        Duration::from_secs(3600),
    ))));
    let (mut c, _) = consumers(vec![], vec![]);
    c.agent = Box::new(SlowModelAgent { gate: gate.clone() });
    c.model = gate;
    let db2 = db.clone();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut op = Store::open(&db2, keel::Sync::Full).unwrap();
        let id = op.list_runs(None, 1).unwrap()[0].id.clone();
        op.cancel(&id, "ops", 1).unwrap();
    });
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        rt.start("x", Limits::default(), "{}", c),
    )
    .await
    .expect("the cancel did not interrupt the model call")
    .unwrap();
    canceller.await.unwrap();
    assert_eq!(out.run.status, RunStatus::Cancelled);
    let s = Store::open_read_only(&db).unwrap();
    let steps = s.load_steps(&out.run.id).unwrap();
    assert_eq!(steps[0].state, StepState::Done, "nothing is left open");
    assert!(s.run(&out.run.id).unwrap().lease_owner.is_none());
    assert_eq!(s.model_call_count(&out.run.id).unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_tool_records_its_result_and_a_cancel_of_a_paused_run_closes_its_approval(
) {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
    let db2 = db.clone();
    let ran = Arc::new(Mutex::new(0u32));
    let r2 = ran.clone();
    // The tool cancels its own run from another connection while it runs.
    let canceller: Arc<dyn ToolProvider> = Arc::new(FnTool::new(
        spec("write", Effect::LocalMutation),
        move |_| {
            let mut op = Store::open(&db2, keel::Sync::Full).map_err(|e| e.to_string())?;
            let id = op.list_runs(None, 1).unwrap()[0].id.clone();
            op.cancel(&id, "ops", 5).map_err(|e| e.to_string())?;
            *r2.lock().unwrap() += 1;
            Ok(serde_json::json!({ "wrote": true }))
        },
    ));
    let (c, _) = consumers(vec![call("write", "{}")], vec![canceller]);
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Cancelled);
    assert_eq!(*ran.lock().unwrap(), 1);
    let s = Store::open_read_only(&db).unwrap();
    let steps = s.load_steps(&out.run.id).unwrap();
    assert_eq!(
        steps[0].state,
        StepState::Done,
        "the executing step is settled"
    );
    let obs = steps[0].observation.as_ref().unwrap();
    assert_eq!(obs.kind, ObservationKind::ToolResult);
    assert!(obs.content.contains("wrote"));
    let k = kinds(&s, &out.run.id);
    let pos = |kind: &str| k.iter().position(|x| x == kind).unwrap();
    assert!(pos("run.cancelled") < pos("step.done"), "{k:?}");
    assert!(pos("step.interrupted") < pos("run.cancelled"), "{k:?}");
    assert!(s.run(&out.run.id).unwrap().lease_owner.is_none());
    drop(s);

    // A paused run: its approval is closed as cancelled, its step done.
    let (c, _) = consumers(
        vec![call("ask_write", "{}")],
        vec![counting_tool(
            "ask_write",
            Effect::LocalMutation,
            Arc::new(Mutex::new(0)),
        )],
    );
    let out = rt.start("y", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    let mut op = Store::open(&db, keel::Sync::Full).unwrap();
    op.cancel(&out.run.id, "ops", 7).unwrap();
    let a = op.load_approvals(&out.run.id).unwrap();
    assert_eq!(a[0].status, ApprovalStatus::Cancelled);
    assert_eq!(a[0].decided_by.as_deref(), Some("ops"));
    let steps = op.load_steps(&out.run.id).unwrap();
    assert_eq!(steps[0].state, StepState::Done);
    assert!(kinds(&op, &out.run.id).contains(&"approval.cancelled".to_string()));
    assert!(op.pending_approvals().unwrap().is_empty());
}

#[tokio::test]
async fn the_operator_pins_a_tools_effect_and_requires_approval_whatever_the_policy_says() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
    let n = Arc::new(Mutex::new(0));
    // The tool claims to be read-only; NamePolicy allows it.
    let (mut c, rig) = consumers(
        vec![call("remove", "{}")],
        vec![counting_tool("remove", Effect::ReadOnly, n.clone())],
    );
    c.tools.pin_effect("remove", Effect::Destructive).unwrap();
    c.tools.require_approval("remove").unwrap();
    assert!(c.tools.pin_effect("nope", Effect::ReadOnly).is_err());
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    assert_eq!(*n.lock().unwrap(), 0, "nothing ran");
    let a = out.pending.unwrap();
    assert!(a.reason.contains("operator's config"), "{}", a.reason);
    assert!(
        rig.policy_seen.lock().unwrap()[0].contains("\"destructive\""),
        "the policy judged the pinned effect"
    );
    let s = Store::open_read_only(&db).unwrap();
    let steps = s.load_steps(&out.run.id).unwrap();
    assert_eq!(
        steps[0].effect,
        Some(Effect::Destructive),
        "recovery trusts the pin"
    );
}

#[tokio::test]
async fn an_interrupted_side_effects_approval_altered_after_the_fact_is_refused_by_its_hash() {
    use keel::store::{Expect, Transition};
    let (_d, db) = tmpdb();
    let now = keel::driver::Clock::now_ms(&keel::driver::SystemClock);
    let mut s = Store::open(&db, keel::Sync::Full).unwrap();
    let mut run = Run::new("left", "g", Limits::default(), now);
    run.step_count = 1;
    s.create_run(&run, vec![]).unwrap();
    // Left by a crash while a side-effecting tool ran.
    let step = Step {
        index: 0,
        version: 3,
        state: StepState::Executing,
        decision: Some(call("write", "{}")),
        call: Some(ToolCall {
            tool: "write".into(),
            arguments: "{}".into(),
        }),
        effect: Some(Effect::LocalMutation),
        verdict: Some(Verdict::Allow),
        observation: None,
        started_at: now,
        updated_at: now,
    };
    s.commit(Transition {
        expect: Expect {
            status: RunStatus::Running,
            owner: None,
            pending_approval: None,
        },
        run: run.clone(),
        steps: vec![step],
        approvals: vec![],
        events: vec![],
        model_calls: vec![],
    })
    .unwrap();
    let ran = Arc::new(Mutex::new(0));
    let rt = runtime(&db);
    let (c, _) = consumers(
        vec![],
        vec![counting_tool("write", Effect::LocalMutation, ran.clone())],
    );
    let out = rt.resume("left", c).await.unwrap();
    let a = out.pending.expect("an operator must decide");
    assert_eq!(a.kind, ApprovalKind::InterruptedSideEffect);
    s.decide_approval(&a.id, true, "ops", None, now).unwrap();
    // What the operator was shown is changed after they approved it.
    s.connection()
        .execute(
            "UPDATE approvals SET reason='it certainly did not run' WHERE id=?1",
            [&a.id],
        )
        .unwrap();
    let (c, _) = consumers(
        vec![],
        vec![counting_tool("write", Effect::LocalMutation, ran.clone())],
    );
    let err = rt.resume("left", c).await.unwrap_err();
    assert!(matches!(err, DriverError::Tampered { .. }), "{err}");
    assert_eq!(*ran.lock().unwrap(), 0, "nothing ran");
}
