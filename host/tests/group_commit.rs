//! Group commit: many runs' writes share one SQLite transaction, yet each
//! keeps its own compare-and-set and fails alone.

mod common;

use common::*;
use keel::store::{Expect, NewEvent, Transition, Write};
use keel::*;
use std::sync::{Arc, Mutex};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_share_commits_and_every_run_is_complete() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let (rt, handle) = common::runtime_and_handle(&db);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let rt = rt.clone();
        tasks.spawn(async move {
            let n = Arc::new(Mutex::new(0));
            let (c, _rig) = consumers(
                vec![
                    call("echo", &format!(r#"{{"i":{i}}}"#)),
                    Decision::Complete("true".into()),
                ],
                vec![counting_tool("echo", Effect::ReadOnly, n)],
            );
            rt.start("g", Limits::default(), "{}", c).await.unwrap()
        });
    }
    let mut ids = Vec::new();
    while let Some(out) = tasks.join_next().await {
        let out = out.unwrap();
        assert_eq!(out.run.status, RunStatus::Completed);
        ids.push(out.run.id);
    }
    let stats = handle.stats();
    assert!(
        stats.transitions > stats.transactions,
        "200 concurrent runs never shared a commit: {stats:?}"
    );
    let store = Store::open_read_only(&db).unwrap();
    for id in &ids {
        let k = kinds(&store, id);
        assert_eq!(k.first().map(String::as_str), Some("run.started"), "{id}");
        assert_eq!(k.last().map(String::as_str), Some("run.completed"), "{id}");
        let steps = store.load_steps(id).unwrap();
        assert_eq!(steps.len(), 2);
        assert!(steps.iter().all(|s| s.state == StepState::Done));
    }
}

/// A run alone commits on its own thread: it pays its commits and no
/// handoff to the writer thread. Nothing of it is lost for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_run_commits_without_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let (rt, handle) = common::runtime_and_handle(&db);
    let n = Arc::new(Mutex::new(0));
    let (c, _rig) = consumers(
        vec![
            call("echo", r#"{"i":1}"#),
            call("echo", r#"{"i":2}"#),
            Decision::Complete("true".into()),
        ],
        vec![counting_tool("echo", Effect::ReadOnly, n)],
    );
    let out = rt.start("g", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let stats = handle.stats();
    // The run's creation starts step 0; each of the two calls is decided
    // and judged in one write, then done with the next step started; the
    // completion is one.
    assert_eq!(stats.transitions, 1 + 2 + 2 + 1, "{stats:?}");
    assert_eq!(stats.inline, stats.transactions, "{stats:?}");
    assert_eq!(stats.transitions, stats.transactions, "{stats:?}");
    let store = Store::open_read_only(&db).unwrap();
    let k = kinds(&store, &out.run.id);
    assert_eq!(k.last().map(String::as_str), Some("run.completed"));
    assert_eq!(store.load_steps(&out.run.id).unwrap().len(), 3);
}

#[test]
fn a_failed_member_of_a_group_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path().join("keel.db"), keel::Sync::Full).unwrap();
    let run = |id: &str| {
        let mut r = Run::new(id, "g", Limits::default(), 0);
        r.lease_owner = Some("me".into());
        r
    };
    let started = || {
        vec![NewEvent::new(
            keel::EventKind::RunStarted,
            None,
            serde_json::json!({}),
        )]
    };
    let finish = |id: &str, owner: &str| {
        let mut r = run(id);
        r.status = RunStatus::Completed;
        r.lease_owner = None;
        Transition {
            expect: Expect {
                status: RunStatus::Running,
                owner: Some(owner.into()),
                pending_approval: None,
            },
            run: r,
            steps: vec![],
            approvals: vec![],
            events: vec![NewEvent::new(
                keel::EventKind::RunCompleted,
                None,
                serde_json::json!({}),
            )],
            model_calls: vec![],
        }
    };
    let results = s
        .commit_group(vec![
            Write::Create {
                run: run("a"),
                steps: vec![],
                events: started(),
            },
            // The same id again: refused, and only this write is undone.
            Write::Create {
                run: run("a"),
                steps: vec![],
                events: started(),
            },
            Write::Create {
                run: run("b"),
                steps: vec![],
                events: started(),
            },
            // The wrong lease owner: a failed compare-and-set.
            Write::Transition(finish("b", "someone-else")),
            Write::Transition(finish("a", "me")),
        ])
        .unwrap();
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, false, true, false, true]);
    assert!(matches!(results[3], Err(StoreError::Conflict { .. })));
    assert_eq!(s.run("a").unwrap().status, RunStatus::Completed);
    assert_eq!(s.run("b").unwrap().status, RunStatus::Running);
    assert_eq!(kinds(&s, "a"), ["run.started", "run.completed"]);
    assert_eq!(kinds(&s, "b"), ["run.started"]);
}

#[test]
fn a_write_failing_part_way_fails_alone_and_the_rest_of_its_group_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path().join("keel.db"), keel::Sync::Full).unwrap();
    for id in ["a", "b"] {
        let mut r = Run::new(id, "g", Limits::default(), 0);
        r.lease_owner = Some("me".into());
        s.create_run(&r, vec![]).unwrap();
    }
    let step_transition = |id: &str, approvals: Vec<Approval>| {
        let mut r = Run::new(id, "g", Limits::default(), 0);
        r.lease_owner = Some("me".into());
        r.step_count = 1;
        Transition {
            expect: Expect {
                status: RunStatus::Running,
                owner: Some("me".into()),
                pending_approval: None,
            },
            run: r,
            steps: vec![],
            approvals,
            events: vec![NewEvent::new(
                keel::EventKind::StepStarted,
                Some(0),
                serde_json::json!({}),
            )],
            model_calls: vec![],
        }
    };
    // Its compare-and-set passes, then its approval names a run that does
    // not exist: the foreign key fails after the run row was updated.
    let orphan = Approval {
        id: "appr_x".into(),
        run_id: "ghost".into(),
        step_index: 0,
        kind: ApprovalKind::Policy,
        status: ApprovalStatus::Pending,
        call: ToolCall {
            tool: "t".into(),
            arguments: "{}".into(),
        },
        reason: "r".into(),
        presentation: "{}".into(),
        hash: "h".into(),
        created_at: 0,
        expires_at: None,
        decided_by: None,
        note: None,
        decided_at: None,
    };
    let results = s
        .commit_group(vec![
            Write::Transition(step_transition("a", vec![orphan])),
            Write::Transition(step_transition("b", vec![])),
        ])
        .unwrap();
    assert!(results[0].is_err(), "the faulty write fails");
    assert!(results[1].is_ok(), "{:?}", results[1]);
    assert_eq!(s.run("a").unwrap().step_count, 0, "nothing of it stayed");
    assert!(kinds(&s, "a").is_empty());
    assert_eq!(s.run("b").unwrap().step_count, 1);
    assert_eq!(kinds(&s, "b"), ["step.started"]);
}

#[test]
fn a_group_writes_every_step_version_and_status_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path().join("keel.db"), keel::Sync::Full).unwrap();
    let run = |id: &str, status: RunStatus, steps: u32| {
        let mut r = Run::new(id, "g", Limits::default(), 0);
        r.lease_owner = Some("me".into());
        r.status = status;
        r.step_count = steps;
        r
    };
    let step = |version: u32, state: StepState| Step {
        index: 0,
        version,
        state,
        decision: None,
        call: None,
        effect: None,
        verdict: None,
        observation: None,
        started_at: 1,
        updated_at: version as i64,
    };
    let transition = |r: Run, was: RunStatus, steps: Vec<Step>| {
        Write::Transition(Transition {
            expect: Expect {
                status: was,
                owner: Some("me".into()),
                pending_approval: None,
            },
            run: r,
            steps,
            approvals: vec![],
            events: vec![],
            model_calls: vec![],
        })
    };
    for id in ["a", "b"] {
        s.create_run(&run(id, RunStatus::Running, 0), vec![])
            .unwrap();
    }
    // One group: a step is created and updated twice, its run's status is
    // kept and then changed; the other run pauses with its step decided.
    let results = s
        .commit_group(vec![
            transition(
                run("a", RunStatus::Running, 1),
                RunStatus::Running,
                vec![step(1, StepState::Started)],
            ),
            transition(
                run("b", RunStatus::Running, 1),
                RunStatus::Running,
                vec![step(1, StepState::Started)],
            ),
            transition(
                run("a", RunStatus::Running, 1),
                RunStatus::Running,
                vec![step(2, StepState::Decided)],
            ),
            transition(
                run("b", RunStatus::WaitingForApproval, 1),
                RunStatus::Running,
                vec![step(2, StepState::AwaitingApproval)],
            ),
            transition(
                run("a", RunStatus::Completed, 1),
                RunStatus::Running,
                vec![step(3, StepState::Done)],
            ),
        ])
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(only_step(&s, "a"), (3, StepState::Done));
    assert_eq!(only_step(&s, "b"), (2, StepState::AwaitingApproval));
    // The status index follows every status change.
    let listed = |status| -> Vec<String> {
        s.list_runs(Some(status), 10)
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    assert_eq!(listed(RunStatus::Completed), ["a"]);
    assert_eq!(listed(RunStatus::WaitingForApproval), ["b"]);
    assert!(listed(RunStatus::Running).is_empty());

    // A later version of a step whose row is missing is written whole.
    s.connection()
        .execute("DELETE FROM steps WHERE run_id='b'", [])
        .unwrap();
    let results = s
        .commit_group(vec![transition(
            run("b", RunStatus::WaitingForApproval, 1),
            RunStatus::WaitingForApproval,
            vec![step(3, StepState::Executing)],
        )])
        .unwrap();
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(only_step(&s, "b"), (3, StepState::Executing));
    assert_eq!(s.load_steps("b").unwrap()[0].started_at, 1);
}

/// A run's one step row: its version and state.
fn only_step(s: &Store, id: &str) -> (u32, StepState) {
    let steps = s.load_steps(id).unwrap();
    assert_eq!(steps.len(), 1, "one row per step");
    (steps[0].version, steps[0].state)
}
