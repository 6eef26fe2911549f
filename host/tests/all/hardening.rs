//! What a plugin, an operator or another process cannot do to a run: the
//! races of creating a store and taking a lease, cancel settling what a run
//! is in, leases of dead processes, and the operator's word on effects.
//! Every test runs on both store engines, from one test code:
//! `sqlite::NAME` and `postgres::NAME`.

use crate::common;

use async_trait::async_trait;
use common::engine::{event_kinds, Engine, TestStore};
use common::*;
use keel::driver::operator::take_lease_in;
use keel::model::{ModelGate, ModelRequest, StubProvider};
use keel::store::{OpenOptions, RunStore};
use keel::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

on_both_engines!(
    many_processes_creating_one_store_at_once_all_succeed,
    a_finished_run_cannot_be_leased_or_resumed,
    a_lease_of_a_process_that_is_gone_is_taken_at_once_and_an_operator_can_force_one,
    a_cancel_interrupts_a_slow_model_call,
    a_cancel_during_a_tool_records_its_result_and_a_cancel_of_a_paused_run_closes_its_approval,
    the_operator_pins_a_tools_effect_and_requires_approval_whatever_the_policy_says,
    an_interrupted_side_effects_approval_altered_after_the_fact_is_refused_by_its_hash,
);

/// Six openers (each on a thread and runtime of its own, with its own
/// connections, as processes would be) open one store that does not exist
/// yet, at once: a SQLite file that is not there, or a fresh empty
/// PostgreSQL database. The first migrates under the store's lock (SQLite's
/// write lock, PostgreSQL's advisory lock); the others find nothing to do.
async fn many_processes_creating_one_store_at_once_all_succeed(s: TestStore) {
    let engine = s.engine;
    // A fresh PostgreSQL database per round costs more than a file.
    let rounds = if engine == Engine::Postgres { 10 } else { 25 };
    let mut first = Some(s);
    for round in 0..rounds {
        let s = match first.take() {
            Some(s) => s,
            None => TestStore::new(engine).await,
        };
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let (loc, b) = (s.loc(), barrier.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    b.wait();
                    rt.block_on(keel::store::open(&loc, OpenOptions::default()))
                        .map(drop)
                })
            })
            .collect();
        for (i, o) in opens.into_iter().enumerate() {
            if let Err(e) = o.join().unwrap() {
                panic!("{engine:?} round {round}, opener {i}: {e}");
            }
        }
        let r = s.reader().await;
        assert!(r.list_runs(None, 1).await.unwrap().is_empty());
    }
}

async fn a_finished_run_cannot_be_leased_or_resumed(s: TestStore) {
    let rt = s.runtime().await;
    let (c, _) = consumers(vec![Decision::Complete("1".into())], vec![]);
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let store = s.open().await;
    // As a racing resumer would, after reading the run still running.
    let late = take_lease_in(&*store, &out.run.id, "late", 0, 30_000, None).await;
    assert!(matches!(late, Err(StoreError::Terminal { .. })), "{late:?}");
    assert!(store.run(&out.run.id).await.unwrap().lease_owner.is_none());
    let (c, _) = consumers(vec![], vec![]);
    assert!(matches!(
        rt.resume(&out.run.id, c).await,
        Err(DriverError::Terminal(..))
    ));
}

async fn a_lease_of_a_process_that_is_gone_is_taken_at_once_and_an_operator_can_force_one(
    s: TestStore,
) {
    let store = s.open().await;
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
        store.create_run(r, vec![], vec![]).await.unwrap();
    }
    // The holder's process is gone: taken at once, long before expiry.
    let taken = take_lease_in(&*store, "dead", "me", 10, 30_000, None)
        .await
        .unwrap();
    assert_eq!(taken.lease_owner.as_deref(), Some("me"));
    let ev = store.events_after(Some("dead"), 0, 10).await.unwrap();
    assert_eq!(ev[0].kind, "lease.taken_over");
    assert!(ev[0].data.contains("holder_gone"), "{}", ev[0].data);
    // A live holder keeps it, unless an operator takes it over by name.
    let kept = take_lease_in(&*store, "alive", "me", 10, 30_000, None).await;
    assert!(matches!(kept, Err(StoreError::Leased { .. })), "{kept:?}");
    take_lease_in(&*store, "alive", "me", 10, 30_000, Some("ops-alice"))
        .await
        .unwrap();
    let ev = store.events_after(Some("alive"), 0, 10).await.unwrap();
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

async fn a_cancel_interrupts_a_slow_model_call(s: TestStore) {
    let rt = s.runtime().await;
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::new(Duration::from_secs(3600))));
    let (plain, _) = consumers(vec![], vec![]);
    let agent = SlowModelAgent {
        gate: wiring.model(),
    };
    let c = wiring.build(Box::new(agent), plain.policy, plain.tools);
    // An operator on another handle, as in another process.
    let op = s.runtime().await.operator();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let id = op.runs(None, 1).await.unwrap()[0].id.clone();
        op.cancel(&id, "ops").await.unwrap();
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
    let r = s.reader().await;
    let steps = r.steps(&out.run.id).await.unwrap();
    assert_eq!(steps[0].state, StepState::Done, "nothing is left open");
    assert!(r.run(&out.run.id).await.unwrap().lease_owner.is_none());
    assert_eq!(r.model_calls(&out.run.id).await.unwrap().len(), 0);
}

/// A side-effecting tool that cancels its own run through another handle
/// on the store (as an operator in another process would) while it runs,
/// then reports what it did.
struct CancellingWrite {
    other: Arc<dyn RunStore>,
    ran: Arc<Mutex<u32>>,
}

#[async_trait]
impl ToolProvider for CancellingWrite {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec("write", Effect::LocalMutation)]
    }
    async fn call(&self, _: &str, _: &str) -> Result<String, ToolError> {
        let op = keel::driver::Operator::writing(self.other.clone());
        let err = |e: StoreError| ToolError::new(e.to_string());
        let run = op.runs(None, 1).await.map_err(err)?.remove(0);
        op.cancel(&run.id, "ops").await.map_err(err)?;
        *self.ran.lock().unwrap() += 1;
        Ok(serde_json::json!({ "wrote": true }).to_string())
    }
}

async fn a_cancel_during_a_tool_records_its_result_and_a_cancel_of_a_paused_run_closes_its_approval(
    s: TestStore,
) {
    let rt = s.runtime().await;
    let ran = Arc::new(Mutex::new(0u32));
    let canceller: Arc<dyn ToolProvider> = Arc::new(CancellingWrite {
        other: s.open().await,
        ran: ran.clone(),
    });
    let (c, _) = consumers(vec![call("write", "{}")], vec![canceller]);
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Cancelled);
    assert_eq!(*ran.lock().unwrap(), 1);
    let r = s.reader().await;
    let steps = r.steps(&out.run.id).await.unwrap();
    assert_eq!(
        steps[0].state,
        StepState::Done,
        "the executing step is settled"
    );
    let obs = steps[0].observation.as_ref().unwrap();
    assert_eq!(obs.kind, ObservationKind::ToolResult);
    assert!(obs.content.contains("wrote"));
    let k = event_kinds(&*r, &out.run.id).await;
    let pos = |kind: &str| k.iter().position(|x| x == kind).unwrap();
    assert!(pos("run.cancelled") < pos("step.done"), "{k:?}");
    assert!(pos("step.interrupted") < pos("run.cancelled"), "{k:?}");
    assert!(r.run(&out.run.id).await.unwrap().lease_owner.is_none());

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
    let op = s.runtime().await.operator();
    op.cancel(&out.run.id, "ops").await.unwrap();
    let a = r.approvals(&out.run.id).await.unwrap();
    assert_eq!(a[0].status, ApprovalStatus::Cancelled);
    assert_eq!(a[0].decided_by.as_deref(), Some("ops"));
    let steps = r.steps(&out.run.id).await.unwrap();
    assert_eq!(steps[0].state, StepState::Done);
    assert!(event_kinds(&*r, &out.run.id)
        .await
        .contains(&"approval.cancelled".to_string()));
    assert_eq!(
        s.number("SELECT count(*) FROM approvals WHERE status = 'pending'")
            .await,
        0,
        "no approval of any run is left pending"
    );
}

async fn the_operator_pins_a_tools_effect_and_requires_approval_whatever_the_policy_says(
    s: TestStore,
) {
    let rt = s.runtime().await;
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
    let steps = s.reader().await.steps(&out.run.id).await.unwrap();
    assert_eq!(
        steps[0].effect,
        Some(Effect::Destructive),
        "recovery trusts the pin"
    );
}

async fn an_interrupted_side_effects_approval_altered_after_the_fact_is_refused_by_its_hash(
    s: TestStore,
) {
    use keel::store::{Expect, Transition};
    let now = keel::driver::Clock::now_ms(&keel::driver::SystemClock);
    let store = s.open().await;
    let mut run = Run::new("left", "g", Limits::default(), now);
    run.step_count = 1;
    store.create_run(run.clone(), vec![], vec![]).await.unwrap();
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
    store
        .commit(Transition {
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
        .await
        .unwrap();
    let ran = Arc::new(Mutex::new(0));
    let rt = s.runtime().await;
    let (c, _) = consumers(
        vec![],
        vec![counting_tool("write", Effect::LocalMutation, ran.clone())],
    );
    let out = rt.resume("left", c).await.unwrap();
    let a = out.pending.expect("an operator must decide");
    assert_eq!(a.kind, ApprovalKind::InterruptedSideEffect);
    let op = keel::driver::Operator::writing(store.clone());
    op.approve(&a.id, "ops", None).await.unwrap();
    // What the operator was shown is changed after they approved it.
    s.exec(&format!(
        "UPDATE approvals SET reason='it certainly did not run' WHERE id='{}'",
        a.id
    ))
    .await;
    let (c, _) = consumers(
        vec![],
        vec![counting_tool("write", Effect::LocalMutation, ran.clone())],
    );
    let err = rt.resume("left", c).await.unwrap_err();
    assert!(matches!(err, DriverError::Tampered { .. }), "{err}");
    assert_eq!(*ran.lock().unwrap(), 0, "nothing ran");
}
