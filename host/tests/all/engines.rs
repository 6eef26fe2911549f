//! The store conformance suite: every guarantee of the store and the loop
//! that is not about SQLite's own file, from one test code, on SQLite and
//! on PostgreSQL (`sqlite::NAME` and `postgres::NAME`). Child processes
//! (crashes, races, claimers) are this binary run again with `--ignored`.

use crate::common;

use common::engine::{Engine, TestStore};
use common::*;
use keel::driver::operator::decision_transition;
use keel::store::{Expect, Location, NewEvent, OpenOptions, RunStore, Transition};
use keel::*;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

on_both_engines!(
    the_same_run_writes_the_same_rows_and_events_on_both_engines,
    a_failed_compare_and_set_writes_nothing,
    a_group_commits_many_runs_and_a_failed_member_fails_alone,
    approve_then_resume_runs_the_call_once_and_a_tampered_approval_is_refused,
    two_operators_deciding_one_approval_at_once_cannot_both_succeed,
    cancel_from_another_process_stops_a_live_loop,
    two_processes_racing_for_one_run_never_both_drive_it,
    a_crash_at_any_write_point_loses_nothing_and_repeats_no_side_effect,
    claimers_in_three_processes_drive_every_run_once,
    a_follower_reading_by_number_misses_no_event_of_two_writers,
    a_run_claimed_long_before_it_is_driven_is_driven_under_a_renewed_lease,
    a_claim_by_id_takes_only_the_named_runs_that_need_a_driver,
    verify_finds_every_kind_of_tampering_and_passes_an_untouched_journal,
    a_write_prepared_from_an_older_run_row_links_its_events_after_the_stored_head,
    prune_removes_finished_runs_whole_and_leaves_every_other_run_verifiable,
);

/// A run with every kind of step: an allowed call, a denied one, an
/// invalid decision, an approval (denied by an operator), and the end.
fn tour() -> Vec<Decision> {
    vec![
        call("write_a", r#"{"n":1}"#),
        call("deny_b", r#"{"n":2}"#),
        call("nope", r#"{"n":3}"#),
        call("ask_c", r#"{"n":4}"#),
        Decision::Complete(r#""toured""#.into()),
    ]
}

/// Drives [`tour`] on `rt` with fixed ids and clock: returns the run's
/// rows and journal as JSON, with what only an engine chooses (event
/// numbers) left out.
async fn tour_on(store: Arc<dyn RunStore>) -> serde_json::Value {
    let rt = Runtime::on(store.clone())
        .with_ids(Arc::new(keel::driver::SeqIds::new()))
        .with_clock(Arc::new(keel::driver::StepClock::new(1_000, 7)));
    let (id, tool_calls) = toured(&rt).await;
    let id = &id;
    let events: Vec<_> = store
        .events_after(Some(id), 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.step_index, e.kind, e.data, e.at))
        .collect();
    let mut run = store.run(id).await.unwrap();
    // The lease owner names the process and host.
    run.lease_owner = None;
    serde_json::json!({
        "run": run,
        "steps": store.steps(id).await.unwrap(),
        "approvals": store.approvals(id).await.unwrap(),
        "events": events,
        "model_calls": store.model_calls(id).await.unwrap(),
        "tool_calls": tool_calls,
    })
}

/// Every transition is one transaction with its events, and both engines
/// store the same run alike: the same rows, the same events in the same
/// order, read back the same way.
async fn the_same_run_writes_the_same_rows_and_events_on_both_engines(s: TestStore) {
    let here = tour_on(s.open().await).await;
    let reference = TestStore::new(Engine::Sqlite).await;
    let there = tour_on(reference.open().await).await;
    assert_eq!(here, there);
    let kinds: Vec<&str> = here["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[1].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run.started"));
    assert_eq!(kinds.last(), Some(&"run.completed"));
    assert!(kinds.contains(&"approval.denied"));
    // Numbers grow in the order of the journal.
    let store = s.open().await;
    let all = store.events_after(None, 0, 1000).await.unwrap();
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(store.count_events().await.unwrap(), all.len() as u64);
}

/// A transition whose expectation no longer holds is refused with
/// `Conflict` (or `RunNotFound`) and writes nothing: no row, no event.
async fn a_failed_compare_and_set_writes_nothing(s: TestStore) {
    let rt = s.runtime().await;
    let run = rt.submit("cas", Limits::default(), "{}").await.unwrap();
    let store = rt.store().clone();
    let events = store.count_events().await.unwrap();
    let mut next = run.clone();
    next.step_count = 9;
    let t = |owner: Option<&str>, status: RunStatus, run: Run| Transition {
        expect: Expect {
            status,
            owner: owner.map(str::to_string),
            pending_approval: None,
        },
        run,
        steps: vec![Step::started(5, 1)],
        approvals: vec![],
        events: vec![NewEvent::new(
            EventKind::StepStarted,
            Some(5),
            serde_json::json!({}),
        )],
        model_calls: vec![],
    };
    let wrong_owner = store
        .commit(t(Some("someone"), RunStatus::Running, next.clone()))
        .await;
    assert!(
        matches!(wrong_owner, Err(StoreError::Conflict { ref owner, .. }) if owner.is_none()),
        "{wrong_owner:?}"
    );
    let wrong_status = store.commit(t(None, RunStatus::Parked, next.clone())).await;
    assert!(matches!(wrong_status, Err(StoreError::Conflict { .. })));
    let mut ghost = next.clone();
    ghost.id = "no_such_run".into();
    let missing = store.commit(t(None, RunStatus::Running, ghost)).await;
    assert!(
        matches!(missing, Err(StoreError::RunNotFound(_))),
        "{missing:?}"
    );
    assert_eq!(store.count_events().await.unwrap(), events);
    assert_eq!(store.run(&run.id).await.unwrap().step_count, 1);
    assert_eq!(store.steps(&run.id).await.unwrap().len(), 1);
    // The right expectation applies.
    store
        .commit(t(None, RunStatus::Running, next))
        .await
        .unwrap();
    assert_eq!(store.run(&run.id).await.unwrap().step_count, 9);
    assert_eq!(store.count_events().await.unwrap(), events + 1);
}

/// Many runs' writes at once are committed in shared transactions; a
/// member whose compare-and-set fails, or a duplicate new run, fails alone
/// and leaves nothing, and every other member commits whole.
async fn a_group_commits_many_runs_and_a_failed_member_fails_alone(s: TestStore) {
    let rt = s.runtime().await;
    let store = rt.store().clone();
    let mut runs = Vec::new();
    for i in 0..200 {
        runs.push(
            rt.submit(&format!("g{i}"), Limits::default(), "{}")
                .await
                .unwrap(),
        );
    }
    let before = store.writer_stats();
    let events = store.count_events().await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, run) in runs.iter().enumerate() {
        let (store, run) = (store.clone(), run.clone());
        tasks.spawn(async move {
            let mut next = run.clone();
            next.updated_at += 1;
            let owner = (i == 13).then(|| "nobody-holds-it".to_string());
            let t = Transition {
                expect: Expect {
                    status: RunStatus::Running,
                    owner,
                    pending_approval: None,
                },
                run: next,
                steps: vec![],
                approvals: vec![],
                events: vec![NewEvent::new(
                    EventKind::LeaseTakenOver,
                    None,
                    serde_json::json!({ "i": i }),
                )],
                model_calls: vec![],
            };
            (i, store.commit(t).await)
        });
    }
    {
        // A new run whose id exists already.
        let store = store.clone();
        let dup = runs[0].clone();
        tasks.spawn(async move { (usize::MAX, store.create_run(dup, vec![], vec![]).await) });
    }
    let mut failed = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (i, r) = r.unwrap();
        if r.is_err() {
            failed.push(i);
        }
    }
    failed.sort();
    assert_eq!(failed, vec![13, usize::MAX]);
    assert_eq!(store.count_events().await.unwrap(), events + 199);
    let after = store.writer_stats();
    let (transitions, transactions) = (
        after.transitions - before.transitions,
        after.transactions - before.transactions,
    );
    assert!(
        transitions >= 200 && transactions < transitions,
        "{transitions} writes in {transactions} transactions"
    );
    for (i, run) in runs.iter().enumerate() {
        let got = store.run(&run.id).await.unwrap();
        assert_eq!(
            got.updated_at,
            run.updated_at + u64::from(i != 13) as i64,
            "run {i}"
        );
    }
}

/// Approve and resume runs exactly the recorded call, once; approving
/// again is refused; an approval whose row was altered is refused by its
/// hash and nothing runs.
async fn approve_then_resume_runs_the_call_once_and_a_tampered_approval_is_refused(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    let script = || vec![call("ask_w", r#"{"n":7}"#), Decision::Complete("1".into())];
    let tools = || vec![counting_tool("ask_w", Effect::LocalMutation, n.clone())];
    let (c, _) = consumers(script(), tools());
    let out = rt.start("a", Limits::default(), "{}", c).await.unwrap();
    let a = out.pending.unwrap();
    let op = s.runtime().await.operator();
    op.approve(&a.id, "ops", None).await.unwrap();
    assert!(
        op.approve(&a.id, "ops", None).await.is_err(),
        "approving twice"
    );
    let (c, _) = consumers(script(), tools());
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(*n.lock().unwrap(), 1);

    let (c, _) = consumers(script(), tools());
    let out = rt.start("b", Limits::default(), "{}", c).await.unwrap();
    let a = out.pending.unwrap();
    op.approve(&a.id, "ops", None).await.unwrap();
    s.exec(&format!(
        "UPDATE approvals SET arguments='{{\"n\":999}}' WHERE id='{}'",
        a.id
    ))
    .await;
    let (c, _) = consumers(script(), tools());
    let r = rt.resume(&out.run.id, c).await;
    assert!(matches!(r, Err(DriverError::Tampered { .. })), "{r:?}");
    assert_eq!(*n.lock().unwrap(), 1, "nothing ran");
    assert_eq!(
        rt.store().run(&out.run.id).await.unwrap().status,
        RunStatus::WaitingForApproval
    );
}

/// Two operators deciding one approval at once, through two handles (as
/// two processes): exactly one decision is recorded.
async fn two_operators_deciding_one_approval_at_once_cannot_both_succeed(s: TestStore) {
    let rt = s.runtime().await;
    let n = Arc::new(Mutex::new(0));
    for round in 0..5 {
        let (c, _) = consumers(
            vec![call("ask_w", r#"{"n":7}"#)],
            vec![counting_tool("ask_w", Effect::LocalMutation, n.clone())],
        );
        let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
        let a = out.pending.unwrap();
        let (one, two) = (s.open().await, s.open().await);
        let run = one.run(&out.run.id).await.unwrap();
        let approve = decision_transition(&run, &a, true, "alice", None, 1).unwrap();
        let deny = decision_transition(&run, &a, false, "bob", None, 1).unwrap();
        let (x, y) = tokio::join!(one.commit(approve), two.commit(deny));
        assert!(
            x.is_ok() != y.is_ok(),
            "round {round}: exactly one decision wins: {:?} / {:?}",
            x.map(|_| ()),
            y.map(|_| ())
        );
        let decided = one
            .events_after(Some(&out.run.id), 0, 100)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.kind == "approval.approved" || e.kind == "approval.denied")
            .count();
        assert_eq!(decided, 1, "round {round}: one decision journaled");
    }
}

/// `keel cancel` from another process makes the live loop stop.
async fn cancel_from_another_process_stops_a_live_loop(s: TestStore) {
    let rt = s.runtime().await;
    let started = Arc::new(Mutex::new(false));
    let s2 = started.clone();
    let waiting: Arc<dyn ToolProvider> =
        Arc::new(FnTool::new(spec("wait", Effect::ReadOnly), move |_| {
            *s2.lock().unwrap() = true;
            std::thread::sleep(std::time::Duration::from_millis(200));
            Ok(serde_json::json!({}))
        }));
    let many: Vec<Decision> = (0..50)
        .map(|i| call("wait", &format!(r#"{{"n":{i}}}"#)))
        .collect();
    let (c, _) = consumers(many, vec![waiting]);
    let live = rt.clone();
    let handle = tokio::spawn(async move { live.start("long", Limits::default(), "{}", c).await });
    while !*started.lock().unwrap() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let run_id = rt.store().list_runs(None, 1).await.unwrap()[0].id.clone();
    let out = keel_bin()
        .args(["--store", &s.location, "cancel", &run_id, "--by", "ops"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let cancelled = std::time::Instant::now();
    let done = handle.await.unwrap().unwrap();
    // The loop learns of it at its next status poll (every 0.5 s), or at
    // its next write's compare-and-set: well within the bound.
    let took = cancelled.elapsed();
    eprintln!(
        "{:?}: the live loop stopped {took:?} after the cancel",
        s.engine
    );
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    assert_eq!(done.run.status, RunStatus::Cancelled);
    assert!(done.run.step_count < 50);
}

/// Events are numbered in commit order: a follower that reads "after the
/// last number I saw" while two writers (as two processes would) commit at
/// once sees every event exactly once.
async fn a_follower_reading_by_number_misses_no_event_of_two_writers(s: TestStore) {
    let writers = [s.open().await, s.open().await];
    let follower = s.open().await;
    let rt = Runtime::on(writers[0].clone());
    let mut runs = Vec::new();
    for i in 0..20 {
        runs.push(
            rt.submit(&format!("f{i}"), Limits::default(), "{}")
                .await
                .unwrap(),
        );
    }
    let start = follower.count_events().await.unwrap();
    let base = follower
        .events_after(None, 0, 100_000)
        .await
        .unwrap()
        .last()
        .map_or(0, |e| e.seq);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reading = {
        let (follower, done) = (follower.clone(), done.clone());
        tokio::spawn(async move {
            let (mut seen, mut after) = (Vec::new(), base);
            loop {
                let last_round = done.load(std::sync::atomic::Ordering::SeqCst);
                let batch = follower.events_after(None, after, 500).await.unwrap();
                if let Some(e) = batch.last() {
                    after = e.seq;
                }
                seen.extend(batch.into_iter().map(|e| e.seq));
                if last_round {
                    break seen;
                }
            }
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    for (i, run) in runs.into_iter().enumerate() {
        let store = writers[i % 2].clone();
        tasks.spawn(async move {
            let mut next = run;
            for k in 0..30 {
                next.updated_at += 1;
                let t = Transition {
                    expect: Expect {
                        status: RunStatus::Running,
                        owner: None,
                        pending_approval: None,
                    },
                    run: next.clone(),
                    steps: vec![],
                    approvals: vec![],
                    events: vec![NewEvent::new(
                        EventKind::LeaseTakenOver,
                        None,
                        serde_json::json!({ "k": k }),
                    )],
                    model_calls: vec![],
                };
                store.commit(t).await.unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = reading.await.unwrap();
    let all: Vec<i64> = follower
        .events_after(None, base, 100_000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(all.len(), 600);
    assert_eq!(follower.count_events().await.unwrap() - start, 600);
    let missed: Vec<_> = all.iter().filter(|n| !seen.contains(n)).collect();
    assert!(missed.is_empty(), "the follower missed events {missed:?}");
    assert_eq!(seen, all, "the follower saw every event once, in order");
}

/// This binary run again as a child: `mode` says what it does.
fn spawn_child(mode: &str, store: &TestStore, env: &[(&str, &str)]) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "engines::child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("KEEL_CHILD", mode)
    .env("KEEL_CHILD_STORE", &store.location)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Tools that append a line per execution to `log` (synced): `{tag} {args}`.
fn logged(log: &Path, tools: &[(&str, Effect)], tag: &str) -> Vec<Arc<dyn ToolProvider>> {
    tools
        .iter()
        .map(|&(name, effect)| {
            let (log, n, tag) = (log.to_path_buf(), name.to_string(), tag.to_string());
            Arc::new(FnTool::new(spec(name, effect), move |args| {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .map_err(|e| e.to_string())?;
                // One write per line: processes append to one file at once.
                f.write_all(format!("{n} {tag} {args}\n").as_bytes())
                    .map_err(|e| e.to_string())?;
                f.sync_all().map_err(|e| e.to_string())?;
                Ok(serde_json::json!({ "did": n }))
            })) as Arc<dyn ToolProvider>
        })
        .collect()
}

fn lines_of(log: &Path, tool: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&format!("{tool} ")))
        .map(str::to_string)
        .collect()
}

const CRASH_TOOLS: [(&str, Effect); 3] = [
    ("write_a", Effect::LocalMutation),
    ("read_b", Effect::ReadOnly),
    ("put_c", Effect::Idempotent),
];

fn crash_script() -> Vec<Decision> {
    vec![
        call("write_a", r#"{"n":1}"#),
        call("read_b", r#"{"n":2}"#),
        call("put_c", r#"{"n":3}"#),
        Decision::Complete(r#""done""#.into()),
    ]
}

fn race_script() -> Vec<Decision> {
    (0..8)
        .map(|i| call("step", &format!(r#"{{"n":{i}}}"#)))
        .chain([Decision::Complete("1".into())])
        .collect()
}

/// The children's entry (ignored unless run as a child).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn child() {
    let (Ok(mode), Ok(loc)) = (
        std::env::var("KEEL_CHILD"),
        std::env::var("KEEL_CHILD_STORE"),
    ) else {
        return;
    };
    let log = std::path::PathBuf::from(std::env::var("KEEL_CHILD_LOG").unwrap());
    let store = keel::store::open(&Location::parse(&loc), OpenOptions::default())
        .await
        .unwrap();
    let me = std::process::id().to_string();
    match mode.as_str() {
        // Starts the crash script; KEEL_TEST_CRASH_AT aborts it.
        "crash" => {
            let rt = Runtime::on(store).with_lease_ttl_ms(50);
            let (c, _) = consumers(crash_script(), logged(&log, &CRASH_TOOLS, &me));
            let _ = rt.start("crash me", Limits::default(), "{}", c).await;
        }
        // Races another child to resume run KEEL_CHILD_RUN.
        "race" => {
            let run_id = std::env::var("KEEL_CHILD_RUN").unwrap();
            let rt = Runtime::on(store);
            let slow = logged(&log, &[("step", Effect::LocalMutation)], &me);
            let (c, _) = consumers(race_script(), slow);
            match rt.resume(&run_id, c).await {
                Ok(out) if out.run.status == RunStatus::Completed => std::process::exit(10),
                Err(DriverError::Store(StoreError::Leased { .. })) => std::process::exit(11),
                Err(DriverError::Terminal(..)) => std::process::exit(12),
                other => panic!("unexpected: {other:?}"),
            }
        }
        // Claims and drives runs until none is left to claim for a while.
        "claim" => {
            let rt = Runtime::on(store);
            // Start together: say ready, wait for the parent's go.
            let gate = std::path::PathBuf::from(std::env::var("KEEL_CHILD_GATE").unwrap());
            std::fs::write(gate.join(format!("ready-{}", std::process::id())), b"").unwrap();
            while !gate.join("go").exists() {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            let mut idle = 0;
            while idle < 10 {
                let claimed = rt.claim(4).await.unwrap();
                if claimed.is_empty() {
                    idle += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
                idle = 0;
                let mut live = tokio::task::JoinSet::new();
                for run in claimed {
                    let (rt, log, me) = (rt.clone(), log.clone(), me.clone());
                    live.spawn(async move {
                        let tag = format!("{me} {}", run.id);
                        let tools = logged(&log, &[("step", Effect::LocalMutation)], &tag);
                        let script =
                            vec![call("step", r#"{"n":1}"#), Decision::Complete("1".into())];
                        let (c, _) = consumers(script, tools);
                        rt.drive_claimed(&run, c).await.unwrap()
                    });
                }
                while let Some(done) = live.join_next().await {
                    assert_eq!(done.unwrap().run.status, RunStatus::Completed);
                }
                // A pause between batches, as a server's claimer has: a
                // claimer waiting in SQLite's busy handler (which sleeps
                // up to 100 ms between tries) would otherwise find the
                // write lock taken again each time it looks, and one fast
                // process would drain the pool alone.
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// Two processes racing to resume one run: one drives it, the other is
/// refused; every step runs once, in one process.
async fn two_processes_racing_for_one_run_never_both_drive_it(s: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("steps.log");
    let rt = s.runtime().await;
    let run = rt.submit("race", Limits::default(), "{}").await.unwrap();
    let env = [
        ("KEEL_CHILD_LOG", log.to_str().unwrap()),
        ("KEEL_CHILD_RUN", run.id.as_str()),
    ];
    let (mut a, mut b) = (
        spawn_child("race", &s, &env).spawn().unwrap(),
        spawn_child("race", &s, &env).spawn().unwrap(),
    );
    let mut codes = vec![a.wait().unwrap().code(), b.wait().unwrap().code()];
    codes.sort();
    assert!(
        codes == vec![Some(10), Some(11)] || codes == vec![Some(10), Some(12)],
        "one drove the run to completion, the other was refused: {codes:?}"
    );
    let lines = lines_of(&log, "step");
    let pids: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert_eq!(pids.len(), 1, "every step ran in one process: {lines:?}");
    assert_eq!(lines.len(), 8, "each step ran once");
}

/// A child is killed right after each write point of a step, then the run
/// is resumed here: no committed step is lost, every step ends done, a
/// read-only or idempotent tool may run again, and a side effect waits
/// for an operator instead of running twice.
async fn a_crash_at_any_write_point_loses_nothing_and_repeats_no_side_effect(s: TestStore) {
    let points = [
        "step.started@1",
        "step.decided@1",
        "step.executing@1",
        "tool.ran",
        "step.done@1",
        "step.started@2",
        "step.executing@2",
        "step.done@2",
        "step.executing@3",
        "step.done@3",
        "step.started@4",
    ];
    let store = s.open().await;
    for point in points {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("effects.log");
        let known: std::collections::HashSet<String> = store
            .list_runs(None, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        let status = spawn_child(
            "crash",
            &s,
            &[
                ("KEEL_CHILD_LOG", log.to_str().unwrap()),
                ("KEEL_TEST_CRASH_AT", point),
            ],
        )
        .status()
        .unwrap();
        assert!(!status.success(), "the child was killed at {point}");
        let run = store
            .list_runs(None, 1000)
            .await
            .unwrap()
            .into_iter()
            .find(|r| !known.contains(&r.id))
            .expect("the child created a run");
        let before = store.steps(&run.id).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(60)).await; // the lease expires
        let rt = Runtime::on(store.clone()).with_lease_ttl_ms(50);
        let tools = || logged(&log, &CRASH_TOOLS, "parent");
        let (c, _) = consumers(crash_script(), tools());
        let mut out = rt
            .resume(&run.id, c)
            .await
            .unwrap_or_else(|e| panic!("{point}: {e}"));
        if out.run.status == RunStatus::WaitingForApproval {
            let a = out.pending.clone().unwrap();
            assert_eq!(a.kind, ApprovalKind::InterruptedSideEffect, "{point}");
            assert_eq!(a.call.tool, "write_a", "{point}");
            rt.operator()
                .deny(&a.id, "ops", Some("it already ran"))
                .await
                .unwrap();
            let (c, _) = consumers(crash_script(), tools());
            out = rt.resume(&run.id, c).await.unwrap();
        }
        assert_eq!(out.run.status, RunStatus::Completed, "{point}");
        assert!(
            lines_of(&log, "write_a").len() <= 1,
            "{point}: write_a ran twice"
        );
        let after = store.steps(&run.id).await.unwrap();
        assert!(
            after.iter().all(|s| s.state == StepState::Done),
            "{point}: {after:?}"
        );
        for st in before.iter().filter(|st| st.state == StepState::Done) {
            assert_eq!(
                Some(st),
                after.get(st.index as usize),
                "{point}: step {} changed",
                st.index
            );
        }
        // A kill at any point leaves a journal whose chain holds, with the
        // recovery's writes linked after the dead process's.
        if let Err(b) = keel::audit::verify(&store.journal(&run.id).await.unwrap()) {
            panic!("{point}: {b}");
        }
    }
}

/// Three processes claim from one pool of submitted runs: each run is
/// driven by one process at a time, every run completes, and no step runs
/// twice.
async fn claimers_in_three_processes_drive_every_run_once(s: TestStore) {
    let runs = if s.engine == Engine::Postgres {
        300
    } else {
        90
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("claims.log");
    let rt = s.runtime().await;
    let mut ids = Vec::new();
    for i in 0..runs {
        ids.push(
            rt.submit(&format!("pool {i}"), Limits::default(), "{}")
                .await
                .unwrap()
                .id,
        );
    }
    let gate = dir.path().join("gate");
    std::fs::create_dir(&gate).unwrap();
    let env = [
        ("KEEL_CHILD_LOG", log.to_str().unwrap()),
        ("KEEL_CHILD_GATE", gate.to_str().unwrap()),
    ];
    let mut children: Vec<_> = (0..3)
        .map(|_| spawn_child("claim", &s, &env).spawn().unwrap())
        .collect();
    // All three claim from the same moment, so that the pool is shared.
    let since = std::time::Instant::now();
    while std::fs::read_dir(&gate).unwrap().count() < 3 {
        assert!(
            since.elapsed() < std::time::Duration::from_secs(120),
            "the claimers never got ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    std::fs::write(gate.join("go"), b"").unwrap();
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    let lines = lines_of(&log, "step");
    let mut per_run: std::collections::HashMap<&str, usize> = Default::default();
    let mut pids = std::collections::HashSet::new();
    for l in &lines {
        let mut f = l.split(' ');
        let (_, pid, run) = (f.next(), f.next().unwrap(), f.next().unwrap());
        pids.insert(pid);
        *per_run.entry(run).or_default() += 1;
    }
    assert_eq!(per_run.len(), runs, "every run's step ran");
    assert!(per_run.values().all(|&n| n == 1), "no step ran twice");
    for id in &ids {
        assert_eq!(
            rt.store().run(id).await.unwrap().status,
            RunStatus::Completed
        );
    }
    assert!(pids.len() >= 2, "the pool was shared: {pids:?}");
}

/// An agent that completes the run once the test lets it.
struct Deciding {
    ran: std::sync::mpsc::Sender<()>,
    wait: std::sync::mpsc::Receiver<()>,
}

#[async_trait::async_trait]
impl Agent for Deciding {
    async fn decide(&mut self, _view: RunView<'_>) -> Result<Decision, ConsumerError> {
        let _ = self.ran.send(());
        let _ = self.wait.recv_timeout(std::time::Duration::from_secs(30));
        Ok(Decision::Complete("1".into()))
    }
}

/// A clock the test moves by hand.
struct Manual(std::sync::atomic::AtomicI64);

impl keel::driver::Clock for Manual {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A claimed run is driven under the claim's lease when it starts at once;
/// one whose plugins took long to start (most of the lease gone) takes its
/// lease again first, so that its first steps do not run under a lease
/// about to lapse, which another claimer could then take.
async fn a_run_claimed_long_before_it_is_driven_is_driven_under_a_renewed_lease(s: TestStore) {
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;
    let t0 = 1_000_000;
    let clock = Arc::new(Manual(std::sync::atomic::AtomicI64::new(t0)));
    let store = s.open().await;
    let rt = Runtime::on(store.clone())
        .with_clock(clock.clone())
        .with_lease_ttl_ms(30_000);
    for (late_by, lease_at_least) in [(1_000, t0 + 30_000), (25_000, t0 + 25_000 + 30_000)] {
        clock.0.store(t0, SeqCst);
        let run = rt
            .submit("slow start", Limits::default(), "{}")
            .await
            .unwrap();
        let claimed = rt.claim(1).await.unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].lease_expires, Some(t0 + 30_000));
        clock.0.store(t0 + late_by, SeqCst);
        // The agent tells when it is deciding and waits to be let go, so
        // that the test reads the lease the run has before its first
        // commit (each commit extends it).
        let (ran, running) = std::sync::mpsc::channel::<()>();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (mut c, _) = consumers(vec![], vec![]);
        c.agent = Box::new(Deciding { ran, wait });
        let (rt2, first) = (rt.clone(), claimed[0].clone());
        let driving = tokio::spawn(async move { rt2.drive_claimed(&first, c).await });
        tokio::task::spawn_blocking(move || running.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap()
            .expect("the step ran");
        let during = store.run(&run.id).await.unwrap();
        go.send(()).unwrap();
        let out = driving.await.unwrap().unwrap();
        assert_eq!(out.run.status, RunStatus::Completed);
        assert_eq!(during.lease_owner, claimed[0].lease_owner, "{during:?}");
        assert!(
            during.lease_expires >= Some(lease_at_least),
            "driven {late_by} ms after its claim, the agent decided under a lease to {:?}",
            during.lease_expires
        );
    }
}

/// A claim by id (what `keel serve` does for the runs its API just made
/// claimable) takes each named run that needs a driver, once, and passes
/// over a run another claimer holds, one still waiting for its approval,
/// and an id no run has.
async fn a_claim_by_id_takes_only_the_named_runs_that_need_a_driver(s: TestStore) {
    let store = s.open().await;
    let rt = Runtime::on(store.clone()).with_lease_ttl_ms(30_000);
    let other = Runtime::on(store.clone()).with_lease_ttl_ms(30_000);
    let free = rt.submit("free", Limits::default(), "{}").await.unwrap();
    let held = rt.submit("held", Limits::default(), "{}").await.unwrap();
    let taken = other
        .claim_runs(std::slice::from_ref(&held.id))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1, "{taken:?}");
    let n = Arc::new(Mutex::new(0));
    let tool = counting_tool("ask_c", Effect::Destructive, n.clone());
    let (c, _) = consumers(vec![call("ask_c", r#"{"n":4}"#)], vec![tool]);
    let paused = rt.start("waits", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(paused.run.status, RunStatus::WaitingForApproval);
    let waiting = paused.run.id.clone();
    let asked = [
        free.id.clone(),
        held.id.clone(),
        waiting.clone(),
        "run_that_never_was".to_string(),
        free.id.clone(),
    ];
    let claimed = rt.claim_runs(&asked).await.unwrap();
    let ids: Vec<&str> = claimed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [free.id.as_str()], "only the free run, once");
    let row = store.run(&free.id).await.unwrap();
    assert_eq!(row.lease_owner, claimed[0].lease_owner);
    assert!(row.lease_owner.is_some());
    assert_eq!(
        store.run(&held.id).await.unwrap().lease_owner,
        taken[0].lease_owner,
        "the other claimer keeps its run"
    );
    assert!(
        rt.claim_runs(&asked).await.unwrap().is_empty(),
        "nothing is taken twice"
    );
    rt.operator()
        .approve(&paused.pending.unwrap().id, "ops", None)
        .await
        .unwrap();
    let answered = rt.claim_runs(std::slice::from_ref(&waiting)).await.unwrap();
    assert_eq!(answered.len(), 1, "an answered approval's run is claimed");
    assert!(rt.claim_runs(&[]).await.unwrap().is_empty());
    assert_eq!(*n.lock().unwrap(), 0, "a claim runs no tool");
}

/// Drives [`tour`] on `rt`: a run with an allowed, a denied and an
/// invalid call, an approval an operator denies, and the end. Returns the
/// run's id and how many tool calls ran.
async fn toured(rt: &Runtime) -> (String, u32) {
    let n = Arc::new(Mutex::new(0));
    let tools = || {
        vec![
            counting_tool("write_a", Effect::LocalMutation, n.clone()),
            counting_tool("deny_b", Effect::ReadOnly, n.clone()),
            counting_tool("ask_c", Effect::Destructive, n.clone()),
        ]
    };
    let (c, _) = consumers(tour(), tools());
    let out = rt.start("tour", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    let a = out.pending.unwrap();
    rt.operator()
        .deny(&a.id, "ops", Some("not today"))
        .await
        .unwrap();
    let (c, _) = consumers(tour(), tools());
    let done = rt.resume(&out.run.id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    let count = *n.lock().unwrap();
    (done.run.id, count)
}

/// Every event is chained to the one before it and the run rows are
/// sealed by their transitions' events, on both engines, so that `keel
/// verify` finds each way of editing a store afterwards at the event it
/// breaks: edited data, a deleted event, a deleted tail, an inserted one,
/// two swapped, and a run, step or approval row changed; and a journal
/// nobody touched verifies, with the run row's head as its last hash.
async fn verify_finds_every_kind_of_tampering_and_passes_an_untouched_journal(s: TestStore) {
    use keel::audit::{verify, Problem};
    let rt = s.runtime().await;
    let reader = s.reader().await;
    let check = |id: String| {
        let reader = reader.clone();
        async move { verify(&reader.journal(&id).await.unwrap()) }
    };
    let (intact, _) = toured(&rt).await;
    let ok = check(intact.clone()).await.unwrap();
    let run = reader.run(&intact).await.unwrap();
    assert_eq!(ok.head, run.chain_head);
    assert_eq!(ok.events, run.chain_len);
    assert_eq!(
        ok.events,
        reader
            .events_after(Some(&intact), 0, 1000)
            .await
            .unwrap()
            .len() as u64
    );
    // The approval's hash covers the chain head it was asked at.
    let a = &reader.approvals(&intact).await.unwrap()[0];
    assert!(a.chain_head.is_some());

    type Tamper = Box<dyn Fn(&str, i64, i64) -> String>;
    // Each builds its SQL from the run's id and the numbers of its events
    // at positions 3 and 4.
    let cases: Vec<(&str, Problem, Option<i64>, Tamper)> = vec![
        (
            "edited data",
            Problem::Edited,
            Some(3),
            Box::new(|id, _, _| {
                format!(
                    "UPDATE events SET data='{{\"forged\":true}}' WHERE run_id='{id}' AND pos=3"
                )
            }),
        ),
        (
            "a deleted event",
            Problem::Deleted,
            Some(5),
            Box::new(|id, _, _| format!("DELETE FROM events WHERE run_id='{id}' AND pos=4")),
        ),
        (
            "a deleted tail",
            Problem::Deleted,
            Some(10),
            Box::new(|id, _, _| format!("DELETE FROM events WHERE run_id='{id}' AND pos >= 10")),
        ),
        (
            "an inserted event",
            Problem::Inserted,
            None,
            Box::new(|id, _, _| {
                format!(
                    "INSERT INTO events (seq, run_id, step_idx, kind, data, at)
             SELECT max(seq) + 1, '{id}', 0, 'step.done', '{{}}', 5 FROM events"
                )
            }),
        ),
        (
            "a copied event",
            Problem::Inserted,
            None,
            Box::new(|id, _, _| {
                format!(
            "INSERT INTO events (seq, run_id, step_idx, kind, data, at, pos, seals, hash)
             SELECT (SELECT max(seq) + 1 FROM events), run_id, step_idx, kind, data, at, pos, seals, hash
             FROM events WHERE run_id='{id}' AND pos=2")
            }),
        ),
        (
            "two swapped events",
            Problem::Reordered,
            Some(4),
            Box::new(|_, a, b| {
                format!(
                    "UPDATE events SET seq=-1 WHERE seq={b};
             UPDATE events SET seq={b} WHERE seq={a};
             UPDATE events SET seq={a} WHERE seq=-1;"
                )
            }),
        ),
        (
            "a step row",
            Problem::StepRow,
            None,
            Box::new(|id, _, _| {
                format!(
            "UPDATE steps SET obs_content='{{\"forged\":true}}' WHERE run_id='{id}' AND idx=0")
            }),
        ),
        (
            "an approval row",
            Problem::ApprovalRow,
            None,
            Box::new(|id, _, _| {
                format!("UPDATE approvals SET decided_by='mallory' WHERE run_id='{id}'")
            }),
        ),
        (
            "a run row",
            Problem::RunRow,
            None,
            Box::new(|id, _, _| format!("UPDATE runs SET result='\"forged\"' WHERE id='{id}'")),
        ),
    ];
    for (what, problem, pos, tamper) in &cases {
        let (id, _) = toured(&rt).await;
        check(id.clone()).await.unwrap();
        let at = |pos: i64| format!("SELECT seq FROM events WHERE run_id='{id}' AND pos={pos}");
        let (a, b) = (s.number(&at(3)).await, s.number(&at(4)).await);
        s.exec(&tamper(&id, a, b)).await;
        let b = check(id.clone()).await.expect_err(what);
        assert_eq!(b.problem, *problem, "{what}: {b}");
        assert_eq!(b.run_id, id);
        if let Some(p) = pos {
            assert_eq!(b.pos, Some(*p), "{what}: {b}");
        }
    }
    // Each tampering broke only its own run.
    check(intact).await.unwrap();
}

/// A write prepared from an older run row than the store holds (same
/// status, same owner: another writer's transition in between) still
/// applies, as its compare-and-set allows, and its events are linked after
/// the stored head, not the one it was prepared from: the chain verifies.
async fn a_write_prepared_from_an_older_run_row_links_its_events_after_the_stored_head(
    s: TestStore,
) {
    let rt = s.runtime().await;
    let run = rt.submit("old row", Limits::default(), "{}").await.unwrap();
    let store = rt.store().clone();
    let t = |run: &Run| Transition {
        expect: Expect {
            status: RunStatus::Running,
            owner: None,
            pending_approval: None,
        },
        run: run.clone(),
        steps: vec![],
        approvals: vec![],
        events: vec![NewEvent::new(
            EventKind::PluginLog,
            None,
            serde_json::json!({}),
        )],
        model_calls: vec![],
    };
    let moved = store.commit(t(&run)).await.unwrap().run;
    assert_eq!(moved.chain_len, run.chain_len + 1);
    let stale = store.commit(t(&run)).await.unwrap().run;
    assert_eq!(stale.chain_len, moved.chain_len + 1);
    assert_ne!(stale.chain_head, moved.chain_head);
    let j = s.reader().await.journal(&run.id).await.unwrap();
    let held = keel::audit::verify(&j).unwrap();
    assert_eq!(
        (held.events, held.head),
        (stale.chain_len, stale.chain_head)
    );
    assert_eq!(
        s.reader().await.run(&run.id).await.unwrap().chain_len,
        stale.chain_len
    );
}

/// A run waiting for its approval (not finished).
async fn waiting(rt: &Runtime) -> String {
    let n = Arc::new(Mutex::new(0));
    let (c, _) = consumers(
        vec![call("ask_c", r#"{"n":4}"#)],
        vec![counting_tool("ask_c", Effect::Destructive, n)],
    );
    let out = rt.start("wait", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    out.run.id
}

/// Retention removes finished runs whole, on both engines: the run and
/// every row it owns (steps, approvals, events, model calls), exported
/// first when asked, by status, and only when finished before the
/// cutoff; a run that has not finished, a run whose journal grew since it
/// was read, and the run holding the store's newest event stay, and every
/// run left still verifies. A dry run changes nothing.
async fn prune_removes_finished_runs_whole_and_leaves_every_other_run_verifiable(s: TestStore) {
    use keel::retention::{prune, Prune};
    use keel::store::{Doomed, Finished};
    let rt = s.runtime().await;
    let store = rt.store().clone();
    let (done, _) = toured(&rt).await;
    let cancelled = waiting(&rt).await;
    rt.operator().cancel(&cancelled, "ops").await.unwrap();
    let open = waiting(&rt).await;
    let (newest, _) = toured(&rt).await;
    let owned = |id: &str| {
        [
            "SELECT count(*) FROM runs WHERE id='ID'",
            "SELECT count(*) FROM steps WHERE run_id='ID'",
            "SELECT count(*) FROM approvals WHERE run_id='ID'",
            "SELECT count(*) FROM events WHERE run_id='ID'",
            "SELECT count(*) FROM model_calls WHERE run_id='ID'",
        ]
        .map(|q| q.replace("ID", id))
    };
    let rows = |id: String| {
        let s = &s;
        async move {
            let mut n = Vec::new();
            for q in owned(&id) {
                n.push(s.number(&q).await);
            }
            n
        }
    };
    // The scripted agent calls no model: give the run a model call's row.
    s.exec(&format!(
        "INSERT INTO model_calls (run_id, step_idx, provider, prompt_tokens, completion_tokens,
           outcome, latency_ms, at) VALUES ('{done}', 0, 'stub', 1, 1, 'ok', 1, 1)"
    ))
    .await;
    assert!(rows(done.clone()).await.iter().all(|n| *n > 0));
    let later = keel::driver::Clock::now_ms(&keel::driver::SystemClock) + 60_000;
    let all = Prune {
        finished_before: later,
        statuses: vec![],
        export_dir: None,
    };
    let listed = |p: Prune| {
        let store = store.clone();
        async move {
            let mut ids = Vec::new();
            prune(store.as_ref(), None, &p, |r| ids.push(r.id.clone()))
                .await
                .unwrap();
            ids
        }
    };

    // A dry run lists the finished runs (not the one holding the newest
    // event) and removes nothing.
    let events = s.number("SELECT count(*) FROM events").await;
    assert_eq!(
        listed(all.clone()).await,
        vec![done.clone(), cancelled.clone()]
    );
    assert_eq!(s.number("SELECT count(*) FROM events").await, events);
    // The cutoff is strict, and the statuses select.
    let done_at = store.run(&done).await.unwrap().updated_at;
    let early = Prune {
        finished_before: done_at,
        ..all.clone()
    };
    assert_eq!(listed(early).await, Vec::<String>::new());
    let only_cancelled = Prune {
        statuses: vec![RunStatus::Cancelled],
        ..all.clone()
    };
    assert_eq!(
        listed(only_cancelled.clone()).await,
        vec![cancelled.clone()]
    );
    assert!(Finished::new(later, &[RunStatus::Running], 10).is_err());

    // A run whose journal is longer than the length it was read with is
    // left.
    let q = Finished::new(later, &[], 10).unwrap();
    let len = store.run(&done).await.unwrap().chain_len;
    let stale = [Doomed {
        id: done.clone(),
        chain_len: len - 1,
    }];
    assert!(store.delete_runs(&stale, &q).await.unwrap().is_empty());
    // Nor does asking delete a run that has not finished.
    let open_len = store.run(&open).await.unwrap().chain_len;
    let unfinished = [Doomed {
        id: open.clone(),
        chain_len: open_len,
    }];
    assert!(store.delete_runs(&unfinished, &q).await.unwrap().is_empty());

    let sum = prune(
        store.as_ref(),
        Some(store.as_ref()),
        &only_cancelled,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(sum.runs, 1);
    assert_eq!(rows(cancelled.clone()).await, vec![0; 5]);
    assert!(store.get_run(&done).await.unwrap().is_some());

    // With an export, each run is written out first, and the file holds
    // the chain the store held.
    let dir = tempfile::tempdir().unwrap();
    let head = store.run(&done).await.unwrap().chain_head;
    let exporting = Prune {
        export_dir: Some(dir.path().join("out")),
        ..all.clone()
    };
    let sum = prune(store.as_ref(), Some(store.as_ref()), &exporting, |_| {})
        .await
        .unwrap();
    assert_eq!((sum.runs, sum.skipped), (1, 0));
    assert_eq!(rows(done.clone()).await, vec![0; 5]);
    assert!(matches!(
        store.journal(&done).await,
        Err(keel::store::StoreError::RunNotFound(_))
    ));
    let file = dir.path().join("out").join(format!("{done}.jsonl"));
    let j = keel::audit::export::read(std::io::BufReader::new(std::fs::File::open(&file).unwrap()))
        .unwrap();
    assert_eq!(keel::audit::verify(&j).unwrap().head, head);

    // Every run left verifies; the one holding the newest event goes
    // once a newer one exists; the unfinished one stays whatever is asked.
    for id in [&open, &newest] {
        keel::audit::verify(&store.journal(id).await.unwrap()).unwrap();
    }
    let last = waiting(&rt).await;
    prune(store.as_ref(), Some(store.as_ref()), &all, |_| {})
        .await
        .unwrap();
    assert_eq!(rows(newest.clone()).await, vec![0; 5]);
    for id in [&open, &last] {
        assert!(rows(id.clone()).await[3] > 0);
        keel::audit::verify(&store.journal(id).await.unwrap()).unwrap();
    }
}
