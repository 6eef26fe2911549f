//! Group commit: many runs' writes share one transaction, yet each keeps
//! its own compare-and-set and fails alone. What a group's outcome must be
//! runs on both store engines, from one test code (`sqlite::NAME` and
//! `postgres::NAME`); how SQLite's writer thread forms groups is tested on
//! SQLite alone.

use crate::common;

use common::engine::{event_kinds, TestStore};
use common::*;
use keel::store::{Committed, Expect, NewEvent, RunStore, Transition, Write};
use keel::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

on_both_engines!(
    concurrent_runs_share_commits_and_every_run_is_complete,
    a_failed_member_of_a_group_rolls_back_alone,
    a_write_failing_part_way_fails_alone_and_the_rest_of_its_group_commits,
    a_group_writes_every_step_version_and_status_whole,
);

async fn concurrent_runs_share_commits_and_every_run_is_complete(s: TestStore) {
    let rt = s.runtime().await;
    let before = rt.store().writer_stats();
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
    let after = rt.store().writer_stats();
    let (transitions, transactions) = (
        after.transitions - before.transitions,
        after.transactions - before.transactions,
    );
    assert!(
        transitions > transactions,
        "200 concurrent runs never shared a commit: {transitions} writes in {transactions} transactions"
    );
    let store = s.reader().await;
    for id in &ids {
        let k = event_kinds(&*store, id).await;
        assert_eq!(k.first().map(String::as_str), Some("run.started"), "{id}");
        assert_eq!(k.last().map(String::as_str), Some("run.completed"), "{id}");
        let steps = store.steps(id).await.unwrap();
        assert_eq!(steps.len(), 2);
        assert!(steps.iter().all(|s| s.state == StepState::Done));
    }
}

/// A run alone commits on its own thread: it pays its commits and no
/// handoff to the writer thread. Nothing of it is lost for that.
/// SQLite only: it is about SQLite's writer thread and inline commits.
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

/// A store opened as `keel serve` opens it commits every write on the
/// writer thread, even a lone run's on an idle store, so that the async
/// workers that answer requests and feed event streams never wait on a
/// sync. Nothing of the run is lost for that. SQLite only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_opened_for_serving_commits_only_on_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let opts = keel::store::OpenOptions {
        inline_commits: false,
        ..Default::default()
    };
    let loc = keel::store::Location::File(db.clone());
    let store = keel::store::open(&loc, opts).await.unwrap();
    let rt = Runtime::on(store.clone());
    let n = Arc::new(Mutex::new(0));
    let (c, _rig) = consumers(
        vec![
            call("echo", r#"{"i":1}"#),
            Decision::Complete("true".into()),
        ],
        vec![counting_tool("echo", Effect::ReadOnly, n)],
    );
    let out = rt.start("g", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    let stats = store.writer_stats();
    assert!(stats.transactions > 0, "{stats:?}");
    assert_eq!(stats.inline, 0, "{stats:?}");
    let read = Store::open_read_only(&db).unwrap();
    let k = kinds(&read, &out.run.id);
    assert_eq!(k.last().map(String::as_str), Some("run.completed"));
}

/// Writes that occupy the store's writers while a group queues behind
/// them (a writer thread or task takes what has queued when it is free).
const BLOCKERS: u64 = 2;

/// Commits `writes` through `store` as one group, in this order, and
/// returns each one's result. Every write to the store is held (see
/// [`TestStore::hold_writes`]) while [`BLOCKERS`] writes, one after the
/// other, keep the store's writers waiting on the hold; then `writes` are
/// queued in order, and the hold is let go. Asserts that they shared one
/// transaction (perhaps with a blocker).
async fn in_one_group(
    s: &TestStore,
    store: &Arc<dyn RunStore>,
    writes: Vec<Write>,
) -> Vec<Result<Committed, StoreError>> {
    static BLOCKER: AtomicUsize = AtomicUsize::new(0);
    let n = writes.len() as u64;
    let before = store.writer_stats();
    let held = s.hold_writes().await;
    let mut blockers = Vec::new();
    for _ in 0..BLOCKERS {
        let store = store.clone();
        let mut r = Run::new(
            &format!("blocker{}", BLOCKER.fetch_add(1, Ordering::SeqCst)),
            "holds a writer",
            Limits::default(),
            0,
        );
        r.status = RunStatus::Failed;
        blockers.push(tokio::spawn(async move {
            store.create_run(r, vec![], vec![]).await
        }));
        // Taken by a free writer, which waits on the hold.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let queued: Vec<Pin<Box<dyn Future<Output = _> + Send>>> = writes
        .into_iter()
        .map(|w| {
            let store = store.clone();
            Box::pin(async move {
                match w {
                    Write::Create { run, steps, events } => {
                        store.create_run(run, steps, events).await
                    }
                    Write::Transition(t) => store.commit(t).await,
                }
            }) as Pin<Box<dyn Future<Output = _> + Send>>
        })
        .collect();
    let (results, ()) = tokio::join!(started_in_order(queued), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        held.release().await;
    });
    for b in blockers {
        b.await.unwrap().unwrap();
    }
    let after = store.writer_stats();
    let (transitions, transactions) = (
        after.transitions - before.transitions,
        after.transactions - before.transactions,
    );
    eprintln!(
        "{:?}: {n} writes and {BLOCKERS} blockers in {transactions} transactions",
        s.engine
    );
    assert_eq!(transitions, n + BLOCKERS);
    assert!(
        transactions <= BLOCKERS + 1,
        "the {n} writes were not one group: {transitions} writes in {transactions} transactions"
    );
    results
}

/// Awaits `fs` together, polling them first in their order (each store
/// write is queued on its first poll).
async fn started_in_order<T>(mut fs: Vec<Pin<Box<dyn Future<Output = T> + Send>>>) -> Vec<T> {
    let mut out: Vec<Option<T>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

async fn a_failed_member_of_a_group_rolls_back_alone(s: TestStore) {
    let store = s.open().await;
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
    let results = in_one_group(
        &s,
        &store,
        vec![
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
        ],
    )
    .await;
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, false, true, false, true], "{results:?}");
    assert!(matches!(results[3], Err(StoreError::Conflict { .. })));
    assert_eq!(store.run("a").await.unwrap().status, RunStatus::Completed);
    assert_eq!(store.run("b").await.unwrap().status, RunStatus::Running);
    assert_eq!(
        event_kinds(&*store, "a").await,
        ["run.started", "run.completed"]
    );
    assert_eq!(event_kinds(&*store, "b").await, ["run.started"]);
}

async fn a_write_failing_part_way_fails_alone_and_the_rest_of_its_group_commits(s: TestStore) {
    let store = s.open().await;
    for id in ["a", "b"] {
        let mut r = Run::new(id, "g", Limits::default(), 0);
        r.lease_owner = Some("me".into());
        store.create_run(r, vec![], vec![]).await.unwrap();
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
    // not exist: the foreign key (on both engines' `approvals.run_id`)
    // fails after the run row was updated.
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
        chain_head: None,
        tool_pin: None,
    };
    let results = in_one_group(
        &s,
        &store,
        vec![
            Write::Transition(step_transition("a", vec![orphan])),
            Write::Transition(step_transition("b", vec![])),
        ],
    )
    .await;
    assert!(results[0].is_err(), "the faulty write fails");
    assert!(results[1].is_ok(), "{:?}", results[1]);
    assert_eq!(
        store.run("a").await.unwrap().step_count,
        0,
        "nothing of it stayed"
    );
    assert!(event_kinds(&*store, "a").await.is_empty());
    assert_eq!(store.run("b").await.unwrap().step_count, 1);
    assert_eq!(event_kinds(&*store, "b").await, ["step.started"]);
    assert_eq!(
        s.number("SELECT count(*) FROM approvals").await,
        0,
        "the orphan approval was not written"
    );
}

async fn a_group_writes_every_step_version_and_status_whole(s: TestStore) {
    let store = s.open().await;
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
        store
            .create_run(run(id, RunStatus::Running, 0), vec![], vec![])
            .await
            .unwrap();
    }
    // One group: a step is created and updated twice, its run's status is
    // kept and then changed; the other run pauses with its step decided.
    let results = in_one_group(
        &s,
        &store,
        vec![
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
        ],
    )
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(only_step(&*store, "a").await, (3, StepState::Done));
    assert_eq!(
        only_step(&*store, "b").await,
        (2, StepState::AwaitingApproval)
    );
    // The status index follows every status change (the blockers are
    // failed runs).
    let listed = |status| {
        let store = store.clone();
        async move {
            store
                .list_runs(Some(status), 10)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect::<Vec<String>>()
        }
    };
    assert_eq!(listed(RunStatus::Completed).await, ["a"]);
    assert_eq!(listed(RunStatus::WaitingForApproval).await, ["b"]);
    assert!(listed(RunStatus::Running).await.is_empty());

    // A later version of a step whose row is missing is written whole.
    s.exec("DELETE FROM steps WHERE run_id = 'b'").await;
    let results = in_one_group(
        &s,
        &store,
        vec![transition(
            run("b", RunStatus::WaitingForApproval, 1),
            RunStatus::WaitingForApproval,
            vec![step(3, StepState::Executing)],
        )],
    )
    .await;
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(only_step(&*store, "b").await, (3, StepState::Executing));
    assert_eq!(store.steps("b").await.unwrap()[0].started_at, 1);
}

/// A run's one step row: its version and state.
async fn only_step(s: &dyn RunStore, id: &str) -> (u32, StepState) {
    let steps = s.steps(id).await.unwrap();
    assert_eq!(steps.len(), 1, "one row per step");
    (steps[0].version, steps[0].state)
}
