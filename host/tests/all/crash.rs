//! Crash safety for stores an earlier Keel left between two writes. (A
//! crash at every write point, cancel from another process and the race
//! of two processes for a run are in `engines.rs`, on both engines.)

use crate::common;

use common::*;
use keel::store::{Expect, Transition};
use keel::*;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

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

/// A store holding run `left` whose step 0 is `step`, as a crash could
/// leave it, with nobody holding the run.
fn store_left_at(db: &Path, step: &Step) {
    let mut s = Store::open(db, keel::Durability::Full).unwrap();
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
