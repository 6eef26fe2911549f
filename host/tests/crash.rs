//! Crash safety: a child process is killed (aborted) right after each write
//! point of a step, then the run is resumed here. No side-effecting tool may
//! run twice without an operator's word, and no committed step may be lost.

mod common;

use common::*;
use keel::store::{Expect, Transition};
use keel::*;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

fn script() -> Vec<Decision> {
    vec![
        call("write_a", r#"{"n":1}"#),
        call("read_b", r#"{"n":2}"#),
        call("put_c", r#"{"n":3}"#),
        Decision::Complete(r#""done""#.into()),
    ]
}

/// Tools that append a line per execution to `log` (synced), so the parent
/// can count executions across processes.
fn logged_tools(log: &Path) -> Vec<Arc<dyn ToolProvider>> {
    [
        ("write_a", Effect::LocalMutation),
        ("read_b", Effect::ReadOnly),
        ("put_c", Effect::Idempotent),
    ]
    .into_iter()
    .map(|(name, effect)| {
        let log = log.to_path_buf();
        let n = name.to_string();
        Arc::new(FnTool::new(spec(name, effect), move |args| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| e.to_string())?;
            writeln!(f, "{n} {args}").map_err(|e| e.to_string())?;
            f.sync_all().map_err(|e| e.to_string())?;
            Ok(serde_json::json!({ "did": n }))
        })) as Arc<dyn ToolProvider>
    })
    .collect()
}

fn runs_of(log: &Path, tool: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&format!("{tool} ")))
        .count()
}

/// Runs in the child process only (it is `#[ignore]`d otherwise).
#[tokio::test]
#[ignore]
async fn crash_child() {
    let Ok(db) = std::env::var("KEEL_CRASH_DB") else {
        return;
    };
    let log = std::env::var("KEEL_CRASH_LOG").unwrap();
    let rt = runtime(Path::new(&db)).with_lease_ttl_ms(50);
    let (c, _) = consumers(script(), logged_tools(Path::new(&log)));
    let _ = rt.start("crash me", Limits::default(), "{}", c).await;
}

fn crash_at(point: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let log = dir.path().join("effects.log");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KEEL_CRASH_DB", &db)
        .env("KEEL_CRASH_LOG", &log)
        .env("KEEL_TEST_CRASH_AT", point)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child was killed at {point}");
    (dir, db, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_point_loses_nothing_and_repeats_no_side_effect() {
    // A point names a write by an event it carries: the run's creation
    // carries step 0's start (`step.started@1`), a decision goes with its
    // verdict and, when allowed, `step.executing`, and a step's end with
    // the next step's start, so some points name the same write.
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
    for point in points {
        let (_dir, db, log) = crash_at(point);
        let store = Store::open(&db, keel::Sync::Full).unwrap();
        let run = store
            .list_runs(None, 1)
            .unwrap()
            .pop()
            .expect("the child created a run");
        let before = store.load_steps(&run.id).unwrap();
        drop(store);
        std::thread::sleep(std::time::Duration::from_millis(60)); // the dead child's lease expires
        let rt = runtime(&db).with_lease_ttl_ms(50);
        let (c, _) = consumers(script(), logged_tools(&log));
        let mut out = rt
            .resume(&run.id, c)
            .await
            .unwrap_or_else(|e| panic!("{point}: {e}"));
        if out.run.status == RunStatus::WaitingForApproval {
            let a = out.pending.clone().unwrap();
            assert_eq!(a.kind, ApprovalKind::InterruptedSideEffect, "{point}");
            assert_eq!(a.call.tool, "write_a", "{point}");
            assert!(
                runs_of(&log, "write_a") <= 1,
                "{point}: interrupted, and not run again without an operator"
            );
            let mut op = Store::open(&db, keel::Sync::Full).unwrap();
            op.decide_approval(&a.id, false, "ops", Some("it already ran"), 1)
                .unwrap();
            let (c, _) = consumers(script(), logged_tools(&log));
            out = rt.resume(&run.id, c).await.unwrap();
        }
        assert_eq!(
            out.run.status,
            RunStatus::Completed,
            "{point}: {:?}",
            out.run
        );
        assert!(
            runs_of(&log, "write_a") <= 1,
            "{point}: write_a ran {} times",
            runs_of(&log, "write_a")
        );
        let after = Store::open_read_only(&db)
            .unwrap()
            .load_steps(&run.id)
            .unwrap();
        assert!(
            after.iter().all(|s| s.state == StepState::Done),
            "{point}: a step was left behind: {after:?}"
        );
        // The read-only and idempotent calls ran (again, if the crash hit them).
        assert!(
            runs_of(&log, "read_b") >= 1 && runs_of(&log, "put_c") >= 1,
            "{point}"
        );
        for s in before.iter().filter(|s| s.state == StepState::Done) {
            assert_eq!(
                Some(s),
                after.get(s.index as usize),
                "{point}: committed step {} changed",
                s.index
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_from_another_process_stops_a_running_loop() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let rt = runtime(&db);
    let started = Arc::new(Mutex::new(false));
    let s2 = started.clone();
    let waiting: Arc<dyn ToolProvider> = Arc::new(keel::FnTool::new(
        spec("wait", Effect::ReadOnly),
        move |_| {
            *s2.lock().unwrap() = true;
            std::thread::sleep(std::time::Duration::from_millis(300));
            Ok(serde_json::json!({}))
        },
    ));
    let many: Vec<Decision> = (0..50)
        .map(|i| call("wait", &format!(r#"{{"n":{i}}}"#)))
        .collect();
    let (c, _) = consumers(many, vec![waiting]);
    let handle = tokio::spawn(async move { rt.start("long", Limits::default(), "{}", c).await });
    while !*started.lock().unwrap() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let run_id = Store::open_read_only(&db)
        .unwrap()
        .list_runs(None, 1)
        .unwrap()[0]
        .id
        .clone();
    // The keel binary is another process: `keel cancel`.
    let keel = env!("CARGO_BIN_EXE_keel");
    let out = std::process::Command::new(keel)
        .args([
            "--store",
            db.to_str().unwrap(),
            "cancel",
            &run_id,
            "--by",
            "ops",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = handle.await.unwrap().unwrap();
    assert_eq!(done.run.status, RunStatus::Cancelled);
    assert!(done.run.step_count < 50);
}

/// Runs in the lease-race children only.
#[tokio::test]
#[ignore]
async fn lease_child() {
    let Ok(db) = std::env::var("KEEL_LEASE_DB") else {
        return;
    };
    let log = std::path::PathBuf::from(std::env::var("KEEL_LEASE_LOG").unwrap());
    let run_id = std::env::var("KEEL_LEASE_RUN").unwrap();
    let me = std::process::id();
    let tool: Arc<dyn ToolProvider> = Arc::new(keel::FnTool::new(
        spec("step", Effect::LocalMutation),
        move |args| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| e.to_string())?;
            writeln!(f, "{me} {args}").map_err(|e| e.to_string())?;
            std::thread::sleep(std::time::Duration::from_millis(100));
            Ok(serde_json::json!({}))
        },
    ));
    let script: Vec<Decision> = (0..8)
        .map(|i| call("step", &format!(r#"{{"n":{i}}}"#)))
        .chain([Decision::Complete("1".into())])
        .collect();
    let (c, _) = consumers(script, vec![tool]);
    let rt = runtime(Path::new(&db));
    match rt.resume(&run_id, c).await {
        Ok(out) if out.run.status == RunStatus::Completed => std::process::exit(10),
        Err(DriverError::Store(StoreError::Leased { .. })) => std::process::exit(11),
        // The other process finished before this one started: also refused.
        Err(DriverError::Terminal(..)) => std::process::exit(12),
        other => panic!("unexpected: {other:?}"),
    }
}

#[test]
fn two_processes_racing_for_one_run_never_both_drive_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let log = dir.path().join("steps.log");
    let mut s = Store::open(&db, keel::Sync::Full).unwrap();
    let run = Run::new(
        "race",
        "race",
        Limits::default(),
        keel::driver::Clock::now_ms(&keel::driver::SystemClock),
    );
    s.create_run(&run, vec![]).unwrap();
    drop(s);
    let spawn = || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "lease_child", "--ignored", "--test-threads=1"])
            .env("KEEL_LEASE_DB", &db)
            .env("KEEL_LEASE_LOG", &log)
            .env("KEEL_LEASE_RUN", "race")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn(), spawn());
    let mut codes = vec![a.wait().unwrap().code(), b.wait().unwrap().code()];
    codes.sort();
    assert!(
        codes == vec![Some(10), Some(11)] || codes == vec![Some(10), Some(12)],
        "one drove the run to completion, the other was refused: {codes:?}"
    );
    let lines = std::fs::read_to_string(&log).unwrap();
    let pids: std::collections::BTreeSet<&str> = lines
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "every step ran in one process: {lines}");
    assert_eq!(lines.lines().count(), 8, "each step ran once");
}

/// A store holding run `left` whose step 0 is `step`, as a crash could
/// leave it, with nobody holding the run.
fn store_left_at(db: &Path, step: &Step) {
    let mut s = Store::open(db, keel::Sync::Full).unwrap();
    let run = Run::new(
        "left",
        "left",
        Limits::default(),
        keel::driver::Clock::now_ms(&keel::driver::SystemClock),
    );
    s.create_run(&run, vec![]).unwrap();
    let mut next = run.clone();
    next.step_count = 1;
    next.updated_at = 1;
    s.commit(Transition {
        expect: Expect {
            status: RunStatus::Running,
            owner: None,
            pending_approval: None,
        },
        run: next,
        steps: vec![step.clone()],
        approvals: vec![],
        events: vec![],
        model_calls: vec![],
    })
    .unwrap();
}

/// Step 0 of `script()`, decided: a valid call of `write_a`.
fn decided_step() -> Step {
    let args = r#"{"n":1}"#;
    Step {
        index: 0,
        version: 2,
        state: StepState::Decided,
        decision: Some(call("write_a", args)),
        call: Some(ToolCall {
            tool: "write_a".into(),
            arguments: args.into(),
        }),
        effect: Some(Effect::LocalMutation),
        verdict: None,
        observation: None,
        started_at: 0,
        updated_at: 1,
    }
}

/// Resumes run `left` with `script()` and checks that it completed with
/// four steps done and each tool run once in all: `ran_before` lists the
/// tools that ran before the resume.
async fn resume_left(db: &Path, log: &Path, ran_before: &[&str]) -> Vec<Step> {
    let (c, _) = consumers(script(), logged_tools(log));
    let out = runtime(db).resume("left", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed, "{:?}", out.run);
    for tool in ["write_a", "read_b", "put_c"] {
        let want = usize::from(!ran_before.contains(&tool));
        assert_eq!(runs_of(log, tool), want, "{tool}");
    }
    let steps = Store::open_read_only(db)
        .unwrap()
        .load_steps("left")
        .unwrap();
    assert_eq!(steps.len(), 4);
    assert!(steps.iter().all(|s| s.state == StepState::Done));
    steps
}

/// Keel before this version wrote a step's end and the next step's start
/// as two writes, so a store may hold a running run whose last step is
/// done, with no next step. Resumed, it goes on with the next step and
/// repeats nothing of the finished one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_left_between_two_steps_resumes_with_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("keel.db"), dir.path().join("effects.log"));
    let done = Step {
        version: 4,
        state: StepState::Done,
        verdict: Some(Verdict::Allow),
        observation: Some(Observation {
            kind: ObservationKind::ToolResult,
            content: r#"{"did":"write_a"}"#.into(),
        }),
        ..decided_step()
    };
    store_left_at(&db, &done);
    let steps = resume_left(&db, &log, &["write_a"]).await;
    assert_eq!(steps[0], done, "the finished step is kept as it was");
}

/// Keel before this version wrote a decision before the policy judged it,
/// so a store may hold a decided step. Resumed, the policy judges it and
/// its tool runs once: a decided step's tool never started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_left_with_a_decided_step_is_judged_and_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("keel.db"), dir.path().join("effects.log"));
    store_left_at(&db, &decided_step());
    let steps = resume_left(&db, &log, &[]).await;
    assert_eq!(steps[0].decision, decided_step().decision);
    assert_eq!(steps[0].verdict, Some(Verdict::Allow));
}
