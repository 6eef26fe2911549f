//! The loop with native consumers: step states, verdicts, approvals,
//! limits, cancel and leases.

mod common;

use common::*;
use keel::*;
use std::sync::{Arc, Mutex};

fn tmpdb() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    (dir, p)
}

#[tokio::test]
async fn a_run_of_calls_completes_with_every_transition_stored() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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
    let store = Store::open_read_only(&db).unwrap();
    let steps = store.load_steps(&out.run.id).unwrap();
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().all(|s| s.state == StepState::Done));
    // Arguments are stored canonically after validation, verbatim in the decision.
    assert_eq!(steps[1].call.as_ref().unwrap().arguments, r#"{"n":2}"#);
    assert_eq!(steps[1].decision, Some(call("echo", r#"{ "n" : 2 }"#)));
    assert_eq!(steps[0].version, 4, "started, decided, executing, done");
    let k = kinds(&store, &out.run.id);
    assert_eq!(k.first().map(String::as_str), Some("run.started"));
    assert_eq!(k.last().map(String::as_str), Some("run.completed"));
    assert_eq!(k.iter().filter(|k| *k == "step.executing").count(), 2);
    // The agent saw the earlier steps, never the current one.
    let seen = rig.agent_seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert!(
        store
            .get_run(&out.run.id)
            .unwrap()
            .unwrap()
            .lease_owner
            .is_none(),
        "lease released"
    );
}

#[tokio::test]
async fn invalid_decisions_become_observations_and_count_as_failures() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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
    let store = Store::open_read_only(&db).unwrap();
    let steps = store.load_steps(&out.run.id).unwrap();
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

#[tokio::test]
async fn deny_is_an_observation_and_abort_ends_the_run() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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
    let seen = rig.agent_seen.lock().unwrap();
    assert!(
        seen[1].contains("denied") && seen[1].contains("not this one"),
        "the agent saw the denial: {}",
        seen[1]
    );
}

#[tokio::test]
async fn approval_pauses_then_approve_and_resume_runs_exactly_the_recorded_call() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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

    // Approve from another connection, as `keel approve` does.
    let mut op = Store::open(&db, keel::Sync::Full).unwrap();
    op.decide_approval(&a.id, true, "alice", Some("fine"), 1)
        .unwrap();
    assert!(
        op.decide_approval(&a.id, true, "alice", None, 2).is_err(),
        "approving twice is refused"
    );

    let (c, _) = consumers(
        script,
        vec![counting_tool("ask_write", Effect::LocalMutation, n.clone())],
    );
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(*n.lock().unwrap(), 1, "the approved call ran once");
    let steps = op.load_steps(&out.run.id).unwrap();
    assert_eq!(
        steps[0].observation.as_ref().unwrap().content,
        r#"{"echo":{"n":7}}"#
    );
}

#[tokio::test]
async fn two_operators_deciding_one_approval_at_once_cannot_both_succeed() {
    use keel::driver::operator::decision_transition;
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
    let n = Arc::new(Mutex::new(0));
    let (c, _) = consumers(
        vec![call("ask_write", r#"{"n":7}"#)],
        vec![counting_tool("ask_write", Effect::LocalMutation, n.clone())],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    let a = out.pending.expect("a pending approval");
    // Both read the same pending approval, then both write.
    let mut op = Store::open(&db, keel::Sync::Full).unwrap();
    let run = op.run(&out.run.id).unwrap();
    let approve = decision_transition(&run, &a, true, "alice", None, 1).unwrap();
    let deny = decision_transition(&run, &a, false, "bob", None, 1).unwrap();
    op.commit(approve).unwrap();
    assert!(
        matches!(op.commit(deny), Err(StoreError::Conflict { .. })),
        "the second decision is refused by the compare-and-set"
    );
    let stored = op.approval(&a.id).unwrap();
    assert_eq!(stored.status, ApprovalStatus::Approved);
    assert_eq!(stored.decided_by.as_deref(), Some("alice"));
    let decided = common::kinds(&op, &out.run.id)
        .iter()
        .filter(|k| k.starts_with("approval.approved") || k.starts_with("approval.denied"))
        .count();
    assert_eq!(decided, 1, "one decision journaled");
}

#[tokio::test]
async fn denial_is_final_and_visible_and_a_tampered_approval_is_refused() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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
    let mut op = Store::open(&db, keel::Sync::Full).unwrap();
    op.decide_approval(&a.id, false, "bob", Some("no way"), 1)
        .unwrap();
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
    op.connection()
        .execute(
            "UPDATE approvals SET arguments='{\"n\":999}' WHERE id=?1",
            [&b.id],
        )
        .unwrap();
    op.decide_approval(&b.id, true, "eve", None, 2).unwrap();
    let (c, _) = consumers(script, tools());
    let err = rt.resume(&out.run.id, c).await.unwrap_err();
    assert!(matches!(err, DriverError::Tampered { .. }), "{err}");
    assert_eq!(*n.lock().unwrap(), 0, "nothing ran");
    assert_eq!(
        op.run(&out.run.id).unwrap().status,
        RunStatus::WaitingForApproval
    );
}

#[tokio::test]
async fn an_expired_approval_is_recorded_and_the_agent_goes_on() {
    let (_d, db) = tmpdb();
    let clock = Arc::new(keel::driver::StepClock::new(1_000, 1));
    let rt = runtime(&db).with_clock(clock.clone());
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
    let mut op = Store::open(&db, keel::Sync::Full).unwrap();
    assert!(
        op.decide_approval(&a.id, true, "late", None, 10_000)
            .is_err(),
        "an expired approval cannot be approved"
    );
    let (c, _) = consumers(
        script,
        vec![counting_tool("ask_a", Effect::LocalMutation, n.clone())],
    );
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(op.approval(&a.id).unwrap().status, ApprovalStatus::Expired);
    assert!(kinds(&op, &out.run.id).contains(&"approval.expired".to_string()));
    assert_eq!(*n.lock().unwrap(), 0);
}

#[tokio::test]
async fn limits_end_runs_with_their_reason() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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

#[tokio::test]
async fn a_tool_that_panics_or_errs_becomes_a_tool_error() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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
    let store = Store::open_read_only(&db).unwrap();
    let steps = store.load_steps(&out.run.id).unwrap();
    let o0 = steps[0].observation.clone().unwrap();
    assert_eq!(o0.kind, ObservationKind::ToolError);
    assert!(o0.content.contains("kaboom"), "{}", o0.content);
    assert!(steps[1]
        .observation
        .as_ref()
        .unwrap()
        .content
        .contains("no disk"));
}

#[tokio::test]
async fn cancel_from_another_connection_stops_the_live_loop_at_its_next_write() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
    let db2 = db.clone();
    let gate = Arc::new(tokio::sync::Notify::new());
    let (g2, run_id) = (gate.clone(), Arc::new(Mutex::new(String::new())));
    let rid = run_id.clone();
    // The tool cancels its own run from a second connection, as an operator
    // in another process would, while the loop waits for it.
    let canceller: Arc<dyn ToolProvider> =
        Arc::new(FnTool::new(spec("slow", Effect::ReadOnly), move |_| {
            let id = rid.lock().unwrap().clone();
            let mut op = Store::open(&db2, keel::Sync::Full).map_err(|e| e.to_string())?;
            let id = if id.is_empty() {
                op.list_runs(None, 1).unwrap()[0].id.clone()
            } else {
                id
            };
            op.cancel(&id, "operator", 5).map_err(|e| e.to_string())?;
            g2.notify_one();
            Ok(serde_json::json!({}))
        }));
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
    let store = Store::open_read_only(&db).unwrap();
    assert_eq!(out.run.step_count, 1, "no step after the cancel");
    assert!(kinds(&store, &out.run.id).contains(&"run.cancelled".to_string()));
    let mut op = Store::open(&db, keel::Sync::Full).unwrap();
    assert!(
        matches!(
            op.cancel(&out.run.id, "again", 9),
            Err(StoreError::Refused(_))
        ),
        "cancelling a terminal run is refused"
    );
}

#[tokio::test]
async fn a_held_lease_refuses_a_second_driver_and_an_expired_one_is_taken_over() {
    let (_d, db) = tmpdb();
    let mut s = Store::open(&db, keel::Sync::Full).unwrap();
    let run = {
        let mut r = Run::new("r1", "g", Limits::default(), 0);
        r.lease_owner = Some("a".into());
        r.lease_expires = Some(1_000);
        r
    };
    s.create_run(&run, vec![]).unwrap();
    assert!(matches!(
        s.acquire_lease("r1", "b", 500, 100),
        Err(StoreError::Leased { .. })
    ));
    let taken = s.acquire_lease("r1", "b", 2_000, 100).unwrap();
    assert_eq!(taken.lease_owner.as_deref(), Some("b"));
    assert!(kinds(&s, "r1").contains(&"lease.taken_over".to_string()));
    assert!(
        !s.heartbeat("r1", "a", 2_001, 100).unwrap(),
        "the old owner lost it"
    );
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

#[tokio::test]
async fn the_wall_clock_deadline_ends_a_run_even_inside_a_slow_tool() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
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
    let store = Store::open_read_only(&db).unwrap();
    let steps = store.load_steps(&out.run.id).unwrap();
    let obs = steps[0].observation.as_ref().unwrap();
    assert_eq!(obs.kind, ObservationKind::ToolError);
    assert!(
        obs.content.contains("deadline while the tool ran"),
        "{}",
        obs.content
    );
}

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
#[tokio::test]
async fn the_journal_lists_every_event_in_the_order_it_happened() {
    let (_d, db) = tmpdb();
    let rt = runtime(&db);
    let sink = Arc::new(keel::consumer::EventSink::default());
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
    let c = Consumers::new(
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
        Arc::new(keel::model::ModelGate::new(Arc::new(
            keel::model::StubProvider::default(),
        ))),
        sink,
    );
    let out = rt.start("order", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let store = Store::open_read_only(&db).unwrap();
    let events: Vec<String> = store
        .events_after(Some(&out.run.id), 0, 1000)
        .unwrap()
        .into_iter()
        .map(|e| match e.kind.as_str() {
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
    let seqs: Vec<i64> = store
        .events_after(Some(&out.run.id), 0, 1000)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

#[tokio::test]
async fn an_observer_sees_each_event_once_in_order_and_only_after_its_commit() {
    let (_d, db) = tmpdb();
    let seen = Arc::new(Mutex::new(Vec::<i64>::new()));
    let (s2, db2) = (seen.clone(), db.clone());
    let reader = Arc::new(Mutex::new(None::<Store>));
    // Looks each event up from another connection: found only if the
    // transition that carries it has committed.
    let rt = runtime(&db).with_observer(Arc::new(move |e: &keel::store::Event| {
        let mut r = reader.lock().unwrap();
        let store = r.get_or_insert_with(|| Store::open_read_only(&db2).unwrap());
        let found = store
            .events_after(Some(&e.run_id), e.seq - 1, 1)
            .unwrap()
            .first()
            .map(|f| (f.seq, f.kind.clone()));
        assert_eq!(
            found,
            Some((e.seq, e.kind.clone())),
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
    let store = Store::open_read_only(&db).unwrap();
    let all: Vec<i64> = store
        .events_after(Some(&out.run.id), 0, 1000)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(*seen.lock().unwrap(), all, "every event once, in order");
}
