//! The loop with native consumers: step states, verdicts, approvals,
//! limits, cancel and leases. Every test runs on both store engines, from
//! one test code: `sqlite::NAME` and `postgres::NAME`.

use crate::common;

use common::engine::{event_kinds, TestStore};
use common::*;
use keel::driver::operator::{decision_transition, take_lease_in};
use keel::store::RunStore;
use keel::*;
use std::sync::{Arc, Mutex};

on_both_engines!(
    a_run_of_calls_completes_with_every_transition_stored,
    invalid_decisions_become_observations_and_count_as_failures,
    deny_is_an_observation_and_abort_ends_the_run,
    approval_pauses_then_approve_and_resume_runs_exactly_the_recorded_call,
    two_operators_deciding_one_approval_at_once_cannot_both_succeed,
    denial_is_final_and_visible_and_a_tampered_approval_is_refused,
    an_expired_approval_is_recorded_and_the_agent_goes_on,
    limits_end_runs_with_their_reason,
    a_tool_that_panics_or_errs_becomes_a_tool_error,
    cancel_from_another_connection_stops_the_live_loop_at_its_next_write,
    a_held_lease_refuses_a_second_driver_and_an_expired_one_is_taken_over,
    the_wall_clock_deadline_ends_a_run_even_inside_a_slow_tool,
    the_journal_lists_every_event_in_the_order_it_happened,
    an_observer_sees_each_event_once_in_order_and_only_after_its_commit,
);

async fn a_run_of_calls_completes_with_every_transition_stored(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let (c, rig) = consumers(
        vec![
            call("echo", r#"{"n":1}"#),
            call("echo", r#"{ "n" : 2 }"#),
            Decision::Complete(r#"{"ok":true}"#.into()),
        ],
        vec![counting_tool("echo", Effect::ReadOnly, n.clone())],
    );
    let out = rt.start("count", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    assert_eq!(out.run.result.as_deref(), Some(r#"{"ok":true}"#));
    assert_eq!(*n.lock().unwrap(), 2);
    let store = s.reader().await;
    let steps = store.steps(&out.run.id).await.unwrap();
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().all(|s| s.state == StepState::Done));
    // Arguments are stored canonically after validation, verbatim in the decision.
    assert_eq!(steps[1].call.as_ref().unwrap().arguments, r#"{"n":2}"#);
    assert_eq!(steps[1].decision, Some(call("echo", r#"{ "n" : 2 }"#)));
    assert_eq!(steps[0].version, 4, "started, decided, executing, done");
    let k = event_kinds(&*store, &out.run.id).await;
    assert_eq!(k.first().map(String::as_str), Some("run.started"));
    assert_eq!(k.last().map(String::as_str), Some("run.completed"));
    assert_eq!(k.iter().filter(|k| *k == "step.executing").count(), 2);
    // The agent saw the earlier steps, never the current one.
    assert_eq!(rig.agent_seen.lock().unwrap().len(), 3);
    assert!(
        store.run(&out.run.id).await.unwrap().lease_owner.is_none(),
        "lease released"
    );
}

async fn invalid_decisions_become_observations_and_count_as_failures(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let (c, _) = consumers(
        vec![
            call("nope", "{}"),
            call("echo", "[1,"),
            call("echo", r#"{"n":"x"}"#),
            Decision::Invalid("the model refused".into()),
            Decision::Complete("{not json".into()),
        ],
        vec![counting_tool("echo", Effect::ReadOnly, n.clone())],
    );
    let limits = Limits {
        max_consecutive_failures: 5,
        ..Limits::default()
    };
    let out = rt.start("bad", limits, "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Failed);
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("limit_consecutive_failures")
    );
    assert_eq!(*n.lock().unwrap(), 0, "no invalid call ran");
    let steps = s.reader().await.steps(&out.run.id).await.unwrap();
    let errs: Vec<String> = steps
        .iter()
        .map(|s| s.observation.as_ref().unwrap().content.clone())
        .collect();
    assert!(steps
        .iter()
        .all(|s| s.observation.as_ref().unwrap().kind == ObservationKind::InvalidDecision));
    assert!(errs[0].contains("unknown tool"), "{errs:?}");
    assert!(errs[1].contains("not a JSON object"), "{errs:?}");
    assert!(errs[2].contains("arguments.n"), "{errs:?}");
    assert!(errs[3].contains("refused"), "{errs:?}");
    assert!(errs[4].contains("not JSON"), "{errs:?}");
    // The decision is stored verbatim even when invalid.
    assert_eq!(steps[1].decision, Some(call("echo", "[1,")));
}

async fn deny_is_an_observation_and_abort_ends_the_run(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let (c, rig) = consumers(
        vec![call("deny_me", "{}"), call("abort_me", "{}")],
        vec![
            counting_tool("deny_me", Effect::Destructive, n.clone()),
            counting_tool("abort_me", Effect::Destructive, n.clone()),
        ],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Failed);
    assert_eq!(out.run.reason.map(|r| r.as_str()), Some("policy_abort"));
    assert_eq!(*n.lock().unwrap(), 0);
    let seen = rig.agent_seen.lock().unwrap().clone();
    assert!(
        seen[1].contains("denied") && seen[1].contains("not this one"),
        "the agent saw the denial: {}",
        seen[1]
    );
    // The run as stored says so too.
    let stored = s.reader().await.run(&out.run.id).await.unwrap();
    assert_eq!(stored.status, RunStatus::Failed);
    assert_eq!(stored.reason.map(|r| r.as_str()), Some("policy_abort"));
}

async fn approval_pauses_then_approve_and_resume_runs_exactly_the_recorded_call(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let script = vec![
        call("ask_write", r#"{"n":7}"#),
        Decision::Complete("1".into()),
    ];
    let (c, _) = consumers(
        script.clone(),
        vec![counting_tool("ask_write", Effect::LocalMutation, n.clone())],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    let a = out.pending.expect("a pending approval");
    assert_eq!(a.call.arguments, r#"{"n":7}"#);
    assert_eq!(*n.lock().unwrap(), 0);

    // Resume before an answer: stays paused, nothing runs.
    let (c, _) = consumers(
        script.clone(),
        vec![counting_tool("ask_write", Effect::LocalMutation, n.clone())],
    );
    let again = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(again.run.status, RunStatus::WaitingForApproval);
    assert_eq!(*n.lock().unwrap(), 0);

    // Approve from another handle on the store, as `keel approve` does.
    let op = s.runtime().await.operator();
    op.approve(&a.id, "alice", Some("fine")).await.unwrap();
    let twice = op.approve(&a.id, "alice", None).await;
    assert!(
        matches!(twice, Err(StoreError::Refused(_))),
        "approving twice is refused: {twice:?}"
    );

    let (c, _) = consumers(
        script,
        vec![counting_tool("ask_write", Effect::LocalMutation, n.clone())],
    );
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(*n.lock().unwrap(), 1, "the approved call ran once");
    let steps = op.show(&out.run.id).await.unwrap().steps;
    assert_eq!(
        steps[0].observation.as_ref().unwrap().content,
        r#"{"echo":{"n":7}}"#
    );
}

/// Both operators read the same pending approval, then both write (one
/// after the other here; `engines.rs` races them from two handles).
async fn two_operators_deciding_one_approval_at_once_cannot_both_succeed(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let (c, _) = consumers(
        vec![call("ask_write", r#"{"n":7}"#)],
        vec![counting_tool("ask_write", Effect::LocalMutation, n.clone())],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    let a = out.pending.expect("a pending approval");
    let op = s.open().await;
    let run = op.run(&out.run.id).await.unwrap();
    let approve = decision_transition(&run, &a, true, "alice", None, 1).unwrap();
    let deny = decision_transition(&run, &a, false, "bob", None, 1).unwrap();
    op.commit(approve).await.unwrap();
    assert!(
        matches!(op.commit(deny).await, Err(StoreError::Conflict { .. })),
        "the second decision is refused by the compare-and-set"
    );
    let stored = op.approval(&a.id).await.unwrap();
    assert_eq!(stored.status, ApprovalStatus::Approved);
    assert_eq!(stored.decided_by.as_deref(), Some("alice"));
    let decided = event_kinds(&*op, &out.run.id)
        .await
        .iter()
        .filter(|k| k.starts_with("approval.approved") || k.starts_with("approval.denied"))
        .count();
    assert_eq!(decided, 1, "one decision journaled");
}

async fn denial_is_final_and_visible_and_a_tampered_approval_is_refused(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let script = vec![
        call("ask_a", r#"{"n":1}"#),
        call("ask_a", r#"{"n":2}"#),
        Decision::Complete("0".into()),
    ];
    let tools = || vec![counting_tool("ask_a", Effect::RemoteMutation, n.clone())];
    let (c, _) = consumers(script.clone(), tools());
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    let a = out.pending.unwrap();
    let op = s.runtime().await.operator();
    op.deny(&a.id, "bob", Some("no way")).await.unwrap();
    let (c, rig) = consumers(script.clone(), tools());
    let second = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(
        second.run.status,
        RunStatus::WaitingForApproval,
        "paused again on the second call"
    );
    assert!(rig.agent_seen.lock().unwrap()[0].contains("denied by bob: no way"));
    assert_eq!(*n.lock().unwrap(), 0);

    // Tamper with the second approval's arguments, then approve it.
    let b = second.pending.unwrap();
    s.exec(&format!(
        "UPDATE approvals SET arguments='{{\"n\":999}}' WHERE id='{}'",
        b.id
    ))
    .await;
    op.approve(&b.id, "eve", None).await.unwrap();
    let (c, _) = consumers(script, tools());
    let err = rt.resume(&out.run.id, c).await.unwrap_err();
    assert!(matches!(err, DriverError::Tampered { .. }), "{err}");
    assert_eq!(*n.lock().unwrap(), 0, "nothing ran");
    assert_eq!(
        op.run(&out.run.id).await.unwrap().status,
        RunStatus::WaitingForApproval
    );
}

async fn an_expired_approval_is_recorded_and_the_agent_goes_on(s: TestStore) {
    let clock = Arc::new(keel::driver::StepClock::new(1_000, 1));
    let rt = s.runtime().await.with_clock(clock.clone());
    let n = Arc::new(Mutex::new(0));
    let script = vec![call("ask_a", "{}"), Decision::Complete("0".into())];
    let limits = Limits {
        approval_ttl_ms: Some(5),
        ..Limits::default()
    };
    let (c, _) = consumers(
        script.clone(),
        vec![counting_tool("ask_a", Effect::LocalMutation, n.clone())],
    );
    let out = rt.start("x", limits, "{}", c).await.unwrap();
    let a = out.pending.unwrap();
    for _ in 0..10 {
        keel::driver::Clock::now_ms(clock.as_ref());
    }
    // An operator on another handle, on the same (advanced) clock.
    let op = s.runtime().await.with_clock(clock.clone()).operator();
    let late = op.approve(&a.id, "late", None).await;
    assert!(
        matches!(&late, Err(StoreError::Refused(m)) if m.contains("expired")),
        "an expired approval cannot be approved: {late:?}"
    );
    let (c, _) = consumers(
        script,
        vec![counting_tool("ask_a", Effect::LocalMutation, n.clone())],
    );
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    let store = s.reader().await;
    assert_eq!(
        store.approval(&a.id).await.unwrap().status,
        ApprovalStatus::Expired
    );
    assert!(event_kinds(&*store, &out.run.id)
        .await
        .contains(&"approval.expired".to_string()));
    assert_eq!(*n.lock().unwrap(), 0);
}

async fn limits_end_runs_with_their_reason(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let many: Vec<Decision> = (0..10)
        .map(|i| call("echo", &format!(r#"{{"n":{i}}}"#)))
        .collect();
    let (c, _) = consumers(
        many,
        vec![counting_tool("echo", Effect::ReadOnly, n.clone())],
    );
    let out = rt
        .start(
            "x",
            Limits {
                max_steps: 3,
                ..Limits::default()
            },
            "{}",
            c,
        )
        .await
        .unwrap();
    assert_eq!(out.run.reason.map(|r| r.as_str()), Some("limit_steps"));
    assert_eq!(out.run.step_count, 3);
    assert_eq!(
        s.reader().await.steps(&out.run.id).await.unwrap().len(),
        3,
        "no step stored past the limit"
    );

    let same: Vec<Decision> = (0..10).map(|_| call("echo", r#"{"n":1}"#)).collect();
    let (c, _) = consumers(
        same,
        vec![counting_tool("echo", Effect::ReadOnly, n.clone())],
    );
    let out = rt
        .start(
            "x",
            Limits {
                max_identical_calls: 3,
                ..Limits::default()
            },
            "{}",
            c,
        )
        .await
        .unwrap();
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("limit_identical_calls")
    );
    assert_eq!(out.run.step_count, 3);
}

async fn a_tool_that_panics_or_errs_becomes_a_tool_error(s: TestStore) {
    let rt = s.runtime().await;
    let boom: Arc<dyn ToolProvider> = Arc::new(FnTool::new(spec("boom", Effect::ReadOnly), |_| {
        panic!("kaboom")
    }));
    let fail: Arc<dyn ToolProvider> = Arc::new(FnTool::new(spec("fail", Effect::ReadOnly), |_| {
        Err("no disk".to_string())
    }));
    let (c, _) = consumers(
        vec![
            call("boom", "{}"),
            call("fail", "{}"),
            Decision::Complete("0".into()),
        ],
        vec![boom, fail],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let steps = s.reader().await.steps(&out.run.id).await.unwrap();
    let o0 = steps[0].observation.clone().unwrap();
    assert_eq!(o0.kind, ObservationKind::ToolError);
    assert!(o0.content.contains("kaboom"), "{}", o0.content);
    let o1 = steps[1].observation.clone().unwrap();
    assert_eq!(o1.kind, ObservationKind::ToolError);
    assert!(o1.content.contains("no disk"), "{}", o1.content);
}

/// A tool that cancels its own run through another handle on the store
/// (as an operator in another process would) while the loop awaits it.
struct Canceller {
    other: Arc<dyn RunStore>,
}

#[async_trait::async_trait]
impl ToolProvider for Canceller {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec("slow", Effect::ReadOnly)]
    }
    async fn call(&self, _: &str, _: &str) -> Result<String, ToolError> {
        let op = keel::driver::Operator::writing(self.other.clone());
        let err = |e: StoreError| ToolError::new(e.to_string());
        let run = op.runs(None, 1).await.map_err(err)?.remove(0);
        op.cancel(&run.id, "operator").await.map_err(err)?;
        Ok("{}".into())
    }
}

async fn cancel_from_another_connection_stops_the_live_loop_at_its_next_write(s: TestStore) {
    let rt = s.runtime().await;
    let canceller: Arc<dyn ToolProvider> = Arc::new(Canceller {
        other: s.open().await,
    });
    let (c, _) = consumers(
        vec![
            call("slow", "{}"),
            call("slow", "{}"),
            Decision::Complete("0".into()),
        ],
        vec![canceller],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Cancelled);
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("operator_cancelled")
    );
    assert_eq!(out.run.step_count, 1, "no step after the cancel");
    let store = s.reader().await;
    assert_eq!(
        store.run(&out.run.id).await.unwrap().status,
        RunStatus::Cancelled
    );
    assert!(event_kinds(&*store, &out.run.id)
        .await
        .contains(&"run.cancelled".to_string()));
    let again = s
        .runtime()
        .await
        .operator()
        .cancel(&out.run.id, "again")
        .await;
    assert!(
        matches!(again, Err(StoreError::Refused(_))),
        "cancelling a terminal run is refused: {again:?}"
    );
}

async fn a_held_lease_refuses_a_second_driver_and_an_expired_one_is_taken_over(s: TestStore) {
    let store = s.open().await;
    let run = {
        let mut r = Run::new("r1", "g", Limits::default(), 0);
        r.lease_owner = Some("a".into());
        r.lease_expires = Some(1_000);
        r
    };
    store.create_run(run, vec![], vec![]).await.unwrap();
    let refused = take_lease_in(&*store, "r1", "b", 500, 100, None).await;
    assert!(
        matches!(refused, Err(StoreError::Leased { .. })),
        "{refused:?}"
    );
    let taken = take_lease_in(&*store, "r1", "b", 2_000, 100, None)
        .await
        .unwrap();
    assert_eq!(taken.lease_owner.as_deref(), Some("b"));
    assert_eq!(
        store.run("r1").await.unwrap().lease_owner.as_deref(),
        Some("b")
    );
    assert!(event_kinds(&*store, "r1")
        .await
        .contains(&"lease.taken_over".to_string()));
    assert!(
        !store.heartbeat("r1", "a", 2_001, 100).await.unwrap(),
        "the old owner lost it"
    );
    assert!(
        store.heartbeat("r1", "b", 2_001, 100).await.unwrap(),
        "the new owner holds it"
    );

    // A loop refuses a run whose lease another owner holds, until an
    // operator says that owner is gone.
    let rt = s.runtime().await;
    let run = rt.submit("held", Limits::default(), "{}").await.unwrap();
    let now = keel::driver::Clock::now_ms(&keel::driver::SystemClock);
    take_lease_in(&*store, &run.id, "a", now, 3_600_000, None)
        .await
        .unwrap();
    let n = Arc::new(Mutex::new(0));
    let script = || {
        let (c, _) = consumers(
            vec![call("echo", "{}"), Decision::Complete("1".into())],
            vec![counting_tool("echo", Effect::ReadOnly, n.clone())],
        );
        c
    };
    let second = rt.resume(&run.id, script()).await;
    assert!(
        matches!(second, Err(DriverError::Store(StoreError::Leased { .. }))),
        "{second:?}"
    );
    assert_eq!(*n.lock().unwrap(), 0, "the second driver ran nothing");
    let done = rt
        .resume_taking_over(&run.id, script(), "ops")
        .await
        .unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(*n.lock().unwrap(), 1);
    let taken: Vec<serde_json::Value> = store
        .events_after(Some(&run.id), 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "lease.taken_over")
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0]["why"], "operator");
    assert_eq!(taken[0]["by"], "ops");
    assert_eq!(taken[0]["from"], "a");
}

/// A tool whose call never returns by itself: it awaits an hour.
struct HangingTool;

#[async_trait::async_trait]
impl ToolProvider for HangingTool {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec("hang", Effect::ReadOnly)]
    }
    async fn call(&self, _: &str, _: &str) -> Result<String, ToolError> {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        Ok("{}".into())
    }
}

async fn the_wall_clock_deadline_ends_a_run_even_inside_a_slow_tool(s: TestStore) {
    let rt = s.runtime().await;
    let (c, _) = consumers(vec![call("hang", "{}")], vec![Arc::new(HangingTool)]);
    let limits = Limits {
        deadline_ms: Some(300),
        ..Limits::default()
    };
    // Only the deadline can end this run: the tool awaits for an hour.
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        rt.start("x", limits, "{}", c),
    )
    .await
    .expect("the run's deadline did not interrupt the tool")
    .unwrap();
    assert_eq!(out.run.status, RunStatus::Failed);
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("limit_deadline"),
        "{:?}",
        out.run.result
    );
    let steps = s.reader().await.steps(&out.run.id).await.unwrap();
    let obs = steps[0].observation.as_ref().unwrap();
    assert_eq!(obs.kind, ObservationKind::ToolError);
    assert!(
        obs.content.contains("deadline while the tool ran"),
        "{}",
        obs.content
    );
}

/// Not about a store: a plain test, run once.
#[test]
fn every_run_has_a_finite_wall_clock_bound_by_default() {
    assert_eq!(
        Limits::default().deadline_ms,
        Some(keel::DEFAULT_RUN_DEADLINE_MS)
    );
    assert_eq!(keel::DEFAULT_RUN_DEADLINE_MS, 24 * 3600 * 1000);
}

/// Wraps a consumer and logs a line through the run's sink on every call,
/// as a wasm plugin's `log` import does.
struct Logging<T> {
    inner: T,
    who: &'static str,
    sink: Arc<keel::consumer::EventSink>,
}

impl<T> Logging<T> {
    fn say(&self, view: &RunView<'_>) {
        self.sink.log(keel::consumer::LogLine {
            plugin: Arc::from(self.who),
            step: Some(view.run.step_count - 1),
            level: "info",
            message: self.who.to_string(),
        });
    }
}

#[async_trait::async_trait]
impl<T: Agent> Agent for Logging<T> {
    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError> {
        self.say(&view);
        self.inner.decide(view).await
    }
}

#[async_trait::async_trait]
impl<T: Policy> Policy for Logging<T> {
    async fn evaluate(
        &mut self,
        call: &ToolCall,
        effect: Effect,
        view: RunView<'_>,
    ) -> Result<Verdict, ConsumerError> {
        self.say(&view);
        self.inner.evaluate(call, effect, view).await
    }
}

/// Writes carry several events (a step's end and the next one's start; a
/// decision and its verdict), and the journal still lists every event in
/// the order it happened, plugin log lines included.
async fn the_journal_lists_every_event_in_the_order_it_happened(s: TestStore) {
    let rt = s.runtime().await;
    let wiring = ConsumersBuilder::new(Arc::new(keel::model::StubProvider::default()));
    let sink = wiring.events();
    let seen = Arc::new(Mutex::new(vec![]));
    let mut tools = ToolSet::new();
    tools
        .add(counting_tool(
            "echo",
            Effect::ReadOnly,
            Arc::new(Mutex::new(0)),
        ))
        .unwrap();
    tools
        .add(counting_tool(
            "deny_me",
            Effect::ReadOnly,
            Arc::new(Mutex::new(0)),
        ))
        .unwrap();
    let c = wiring.build(
        Box::new(Logging {
            inner: ScriptAgent {
                script: vec![
                    call("echo", "{}"),
                    call("deny_me", "{}"),
                    Decision::Complete("1".into()),
                ],
                seen: seen.clone(),
            },
            who: "agent",
            sink: sink.clone(),
        }),
        Box::new(Logging {
            inner: NamePolicy { seen: seen.clone() },
            who: "policy",
            sink: sink.clone(),
        }),
        tools,
    );
    let out = rt.start("order", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let journal = s
        .reader()
        .await
        .events_after(Some(&out.run.id), 0, 1000)
        .await
        .unwrap();
    let events: Vec<String> = journal
        .iter()
        .map(|e| match e.kind.as_ref() {
            "plugin.log" => format!(
                "log {}",
                serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["message"]
                    .as_str()
                    .unwrap()
            ),
            k => format!(
                "{k} {}",
                e.step_index.map(|i| i.to_string()).unwrap_or_default()
            ),
        })
        .collect();
    let expected = [
        "run.started ",
        "step.started 0",
        "log agent",
        "step.decided 0",
        "log policy",
        "step.verdict 0",
        "step.executing 0",
        "step.done 0",
        "step.started 1",
        "log agent",
        "step.decided 1",
        "log policy",
        "step.verdict 1",
        "step.done 1",
        "step.started 2",
        "log agent",
        "step.decided 2",
        "step.done 2",
        "run.completed ",
    ];
    assert_eq!(events, expected);
    // Every event number is larger than the one before.
    let seqs: Vec<i64> = journal.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

/// Looks events up through a reader of its own, on a thread and runtime
/// of its own: the observer (a plain callback on the loop's thread) can
/// wait for an answer without needing the loop's runtime to make progress.
fn event_lookup(
    s: &TestStore,
) -> impl Fn(&keel::store::Event) -> Option<(i64, String)> + Send + std::marker::Sync + 'static {
    let loc = s.loc();
    let (ask, asked) = tokio::sync::mpsc::unbounded_channel::<(String, i64)>();
    let (tell, told) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut asked = asked;
            let mut reader = None;
            while let Some((run_id, seq)) = asked.recv().await {
                // Opened at the first event: the store exists by then.
                if reader.is_none() {
                    reader = Some(keel::store::open_reader(&loc).await.unwrap());
                }
                let reader = reader.as_ref().unwrap();
                let found = reader
                    .events_after(Some(&run_id), seq - 1, 1)
                    .await
                    .unwrap()
                    .first()
                    .map(|f| (f.seq, f.kind.to_string()));
                if tell.send(found).is_err() {
                    break;
                }
            }
        })
    });
    let told = Mutex::new(told);
    move |e: &keel::store::Event| {
        let told = told.lock().unwrap();
        ask.send((e.run_id.clone(), e.seq)).unwrap();
        told.recv_timeout(std::time::Duration::from_secs(30))
            .expect("the lookup answers")
    }
}

async fn an_observer_sees_each_event_once_in_order_and_only_after_its_commit(s: TestStore) {
    let seen = Arc::new(Mutex::new(Vec::<i64>::new()));
    let s2 = seen.clone();
    // Looks each event up from another handle: found only if the
    // transition that carries it has committed.
    let lookup = event_lookup(&s);
    let rt = s
        .runtime()
        .await
        .with_observer(Arc::new(move |e: &keel::store::Event| {
            assert_eq!(
                lookup(e),
                Some((e.seq, e.kind.to_string())),
                "notified before its commit"
            );
            s2.lock().unwrap().push(e.seq);
        }));
    let n = Arc::new(Mutex::new(0));
    let (c, _) = consumers(
        vec![
            call("t", "{}"),
            call("ask_t", "{}"),
            Decision::Complete("1".into()),
        ],
        vec![
            counting_tool("t", Effect::ReadOnly, n.clone()),
            counting_tool("ask_t", Effect::LocalMutation, n.clone()),
        ],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    let all: Vec<i64> = s
        .reader()
        .await
        .events_after(Some(&out.run.id), 0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert!(!all.is_empty());
    assert_eq!(*seen.lock().unwrap(), all, "every event once, in order");
}
