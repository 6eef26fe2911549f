//! What only the PostgreSQL engine can meet: a server that ends a
//! connection in the middle of a transaction, and URLs, databases and
//! roles that are not what Keel needs. (Everything both engines share is
//! in `engines.rs`; a server restart is in `pg_restart.rs`.)

use crate::common;

use common::engine::{pg_client, pg_reader_url, with_database, Engine, TestStore};
use common::*;
use keel::store::StoreError;
use keel::*;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A run paused for the approval of one destructive call, and the counter
/// of that tool's executions.
async fn paused(rt: &Runtime) -> (Outcome, Arc<Mutex<u32>>) {
    let n = Arc::new(Mutex::new(0));
    let (c, _) = consumers(
        vec![
            call("ask_drop", r#"{"t":"x"}"#),
            Decision::Complete(r#""done""#.into()),
        ],
        vec![counting_tool("ask_drop", Effect::Destructive, n.clone())],
    );
    let out = rt.start("ask", Limits::default(), "{}", c).await.unwrap();
    assert_eq!(out.run.status, RunStatus::WaitingForApproval);
    (out, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_ended_mid_transaction_writes_nothing_and_the_next_write_goes_through() {
    let s = TestStore::new(Engine::Postgres).await;
    let rt = s.runtime().await;
    let (out, n) = paused(&rt).await;
    let run_id = out.run.id.clone();
    let approval = out.pending.unwrap().id;
    let events = s.number("SELECT count(*) FROM events").await;

    // Another session holds the run's row, so Keel's transaction waits
    // inside its compare-and-set.
    let holder = pg_client(&s.location).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .query("SELECT id FROM runs WHERE id = $1 FOR UPDATE", &[&run_id])
        .await
        .unwrap();
    let op = rt.operator();
    let a2 = approval.clone();
    let deciding = tokio::spawn(async move { op.approve(&a2, "ops", None).await });

    // Find Keel's backend waiting on that lock and end it.
    let watcher = pg_client(&s.location).await;
    let db = s.database.clone().unwrap();
    assert!(
        end_waiting_backends(&watcher, &db).await,
        "Keel's transaction never waited on the held row"
    );
    let err = tokio::time::timeout(Duration::from_secs(30), deciding)
        .await
        .expect("the decision returns once its connection is gone")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Unavailable { .. }),
        "a lost connection is Unavailable: {err:?}"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();

    // Nothing of the decision was written.
    let ap = rt.store().approval(&approval).await.unwrap();
    assert_eq!(ap.status, ApprovalStatus::Pending);
    assert_eq!(s.number("SELECT count(*) FROM events").await, events);
    assert_eq!(
        rt.store().run(&run_id).await.unwrap().status,
        RunStatus::WaitingForApproval
    );

    // The same handle connects again and the decision goes through.
    let ap = rt.operator().approve(&approval, "ops", None).await.unwrap();
    assert_eq!(ap.status, ApprovalStatus::Approved);
    let (c, _) = consumers(
        vec![
            call("ask_drop", r#"{"t":"x"}"#),
            Decision::Complete(r#""done""#.into()),
        ],
        vec![counting_tool("ask_drop", Effect::Destructive, n.clone())],
    );
    let done = rt.resume(&run_id, c).await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(*n.lock().unwrap(), 1, "the approved call ran once");
}

/// Ends Keel's backends of database `db` that wait on a lock, and waits
/// until they are gone; false if none waited within five seconds.
async fn end_waiting_backends(watcher: &tokio_postgres::Client, db: &str) -> bool {
    for _ in 0..500 {
        let rows = watcher
            .query(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND application_name = 'keel' AND wait_event_type = 'Lock'",
                &[&db],
            )
            .await
            .unwrap();
        let ended: Vec<i32> = rows
            .iter()
            .filter(|r| r.get::<_, bool>(1))
            .map(|r| r.get(0))
            .collect();
        if !ended.is_empty() {
            for _ in 0..3000 {
                let left: i64 = watcher
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                        &[&ended],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if left == 0 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the ended backends {ended:?} did not go away");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_loop_whose_connection_ends_mid_write_stops_clearly_and_resumes() {
    let s = TestStore::new(Engine::Postgres).await;
    let rt = s.runtime().await;
    let (entered, release, calls) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let gate = || -> Arc<dyn ToolProvider> {
        Arc::new(Gate {
            entered: entered.clone(),
            release: release.clone(),
            calls: calls.clone(),
        })
    };
    let script = || {
        vec![
            call("slow", r#"{"n":1}"#),
            Decision::Complete(r#""done""#.into()),
        ]
    };
    let (c, _) = consumers(script(), vec![gate()]);
    let live = rt.clone();
    let running = tokio::spawn(async move { live.start("live", Limits::default(), "{}", c).await });
    while !entered.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let run_id = rt.store().list_runs(None, 1).await.unwrap()[0].id.clone();
    let events = s.number("SELECT count(*) FROM events").await;

    // Hold the run's row, let the tool return: the loop's write of the
    // step's end waits inside its transaction, and its backend is ended.
    let holder = pg_client(&s.location).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .query("SELECT id FROM runs WHERE id = $1 FOR UPDATE", &[&run_id])
        .await
        .unwrap();
    release.store(true, Ordering::SeqCst);
    let watcher = pg_client(&s.location).await;
    assert!(
        end_waiting_backends(&watcher, s.database.as_deref().unwrap()).await,
        "the loop's write never waited on the held row"
    );
    // Its transaction died with it; the held row is let go (the loop gives
    // its lease back on its way out, which waits for the row).
    holder.batch_execute("ROLLBACK").await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the loop stops once its connection is gone")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, DriverError::Store(StoreError::Unavailable { .. })),
        "the loop stops with a clear error: {err:?}"
    );
    assert!(err.to_string().contains("can be resumed"), "{err}");

    // No partial transition: the step is still executing, no event added.
    assert_eq!(s.number("SELECT count(*) FROM events").await, events);
    let steps = rt.store().steps(&run_id).await.unwrap();
    assert_eq!(steps[0].state, StepState::Executing);

    // The database is back (it never left): the run resumes and completes;
    // the read-only call may run again, as after a crash.
    let (c, _) = consumers(script(), vec![gate()]);
    let done = rt.resume_taking_over(&run_id, c, "ops").await.unwrap();
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let ev = rt
        .store()
        .events_after(Some(&run_id), 0, 1000)
        .await
        .unwrap();
    assert_eq!(ev.last().unwrap().kind.as_ref(), "run.completed");
}

/// `keel --store URL ARGS…` with the password of `url` never shown.
fn keel_at(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let o = keel_bin()
        .args(["--store", url])
        .args(args)
        .env_remove("KEEL_STORE")
        .output()
        .unwrap();
    (o.status.code(), output_text(&o))
}

fn password(url: &str) -> String {
    let rest = url.strip_prefix("postgres://").unwrap();
    let creds = rest.split('@').next().unwrap();
    creds.split_once(':').unwrap().1.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_databases_and_roles_are_refused_with_what_to_do_and_no_secret() {
    let s = TestStore::new(Engine::Postgres).await;
    let secret = password(&s.location);
    let wrong = s.location.replace(&secret, "not-the-password");
    let port = s
        .location
        .split(':')
        .nth(3)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let unreachable = s.location.replace(&format!(":{port}/"), ":1/");
    let no_db = with_database(&s.location, "keel_no_such_database");
    let require = format!("{}?sslmode=require", s.location);
    let cases: Vec<(String, &str)> = vec![
        (
            "postgres://keel:pw@[::1/keel".into(),
            "not a valid PostgreSQL URL",
        ),
        ("postgres://127.0.0.1:5432/keel".into(), "names no user"),
        (wrong.clone(), "refused the login"),
        (unreachable, "cannot connect"),
        (no_db, "does not exist"),
        (require, "sslmode"),
    ];
    for (url, says) in &cases {
        for args in [&["runs"][..], &["cancel", "r-1", "--by", "ops"][..]] {
            let (code, text) = keel_at(url, args);
            assert_eq!(code, Some(2), "{args:?} on {says}: {text}");
            assert!(text.contains(says), "{args:?} should say {says:?}: {text}");
            assert!(
                !text.contains(&secret),
                "the password is never shown: {text}"
            );
            assert!(
                !text.contains("not-the-password"),
                "a wrong password is not shown either: {text}"
            );
        }
    }
    // None of them created anything in the database they named.
    assert_eq!(
        s.number("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_applications_database_is_left_alone() {
    let s = TestStore::new(Engine::Postgres).await;
    s.exec("CREATE TABLE customers (id INT PRIMARY KEY, name TEXT); INSERT INTO customers VALUES (1, 'a')")
        .await;
    for args in [&["runs"][..], &["cancel", "r-1", "--by", "ops"][..]] {
        let (code, text) = keel_at(&s.location, args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains("not a Keel store"), "{args:?}: {text}");
    }
    let err = keel::store::open(&s.loc(), keel::store::OpenOptions::default())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert_eq!(
        s.number("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .await,
        1,
        "no table was added"
    );
    assert_eq!(s.number("SELECT count(*) FROM customers").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_to_writers_and_readers() {
    let s = TestStore::new(Engine::Postgres).await;
    let rt = s.runtime().await;
    paused(&rt).await;
    drop(rt);
    s.exec("UPDATE keel_meta SET version = 99").await;
    let events = s.number("SELECT count(*) FROM events").await;
    let err = keel::store::open(&s.loc(), keel::store::OpenOptions::default())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, StoreError::TooNew { found: 99, .. }),
        "{err:?}"
    );
    let err = keel::store::open_reader(&s.loc()).await.err().unwrap();
    assert!(
        matches!(err, StoreError::TooNew { found: 99, .. }),
        "{err:?}"
    );
    for args in [&["runs"][..], &["cancel", "r-1", "--by", "ops"][..]] {
        let (code, text) = keel_at(&s.location, args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains("newer"), "{args:?}: {text}");
    }
    assert_eq!(s.number("SELECT count(*) FROM events").await, events);
    assert_eq!(s.number("SELECT version FROM keel_meta").await, 99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_role_reads_and_is_refused_before_any_write() {
    let s = TestStore::new(Engine::Postgres).await;
    let rt = s.runtime().await;
    let (out, _) = paused(&rt).await;
    let reader = with_database(&pg_reader_url(), s.database.as_deref().unwrap());
    let secret = password(&reader);

    let (code, text) = keel_at(&reader, &["runs", "--json"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&out.run.id), "{text}");

    let events = s.number("SELECT count(*) FROM events").await;
    let approval = out.pending.unwrap().id;
    for args in [
        &["cancel", out.run.id.as_str(), "--by", "ops"][..],
        &["approve", approval.as_str(), "--by", "ops"][..],
    ] {
        let (code, text) = keel_at(&reader, args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains("may not write"), "{args:?}: {text}");
        assert!(!text.contains(&secret), "{text}");
    }
    assert_eq!(s.number("SELECT count(*) FROM events").await, events);
    assert_eq!(
        rt.store().run(&out.run.id).await.unwrap().status,
        RunStatus::WaitingForApproval
    );
}

/// A database written before the chain (schema version 1) is refused to
/// readers with what to do, and migrated by the first writer with its
/// events linked and its rows sealed as they were: its runs verify, and a
/// new write of an old run chains after its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_is_migrated_with_its_journal_linked() {
    let s = TestStore::new(Engine::Postgres).await;
    s.exec(keel::store::postgres::MIGRATIONS[0]).await;
    s.exec("UPDATE keel_meta SET version = 1").await;
    let limits = serde_json::to_string(&Limits::default()).unwrap();
    s.exec(&format!(
        "INSERT INTO runs (id, goal, status, limits, meta, step_count, model_calls, tokens,
            consecutive_failures, created_at, updated_at)
         VALUES ('old', 'g', 'running', '{limits}', '{{}}', 1, 0, 0, 0, 1, 2);
         INSERT INTO steps (run_id, idx, version, state, started_at, updated_at)
         VALUES ('old', 0, 1, 'started', 1, 1);
         INSERT INTO events (seq, run_id, step_idx, kind, data, at) VALUES
            (nextval('events_seq'), 'old', NULL, 'run.started', '{{}}', 1),
            (nextval('events_seq'), 'old', 0, 'step.started', '{{}}', 1);"
    ))
    .await;
    let err = keel::store::open_reader(&s.loc()).await.err().unwrap();
    assert!(err.to_string().contains("version 1"), "{err}");

    let store = s.open().await;
    let held = keel::audit::verify(&store.journal("old").await.unwrap()).unwrap();
    assert_eq!(held.events, 2);
    let run = store.run("old").await.unwrap();
    assert_eq!((run.chain_len, &run.chain_head), (2, &held.head));
    let mut next = run.clone();
    next.updated_at = 3;
    store
        .commit(keel::store::Transition {
            expect: keel::store::Expect {
                status: RunStatus::Running,
                owner: None,
                pending_approval: None,
            },
            run: next,
            steps: vec![],
            approvals: vec![],
            events: vec![keel::store::NewEvent::new(
                EventKind::PluginLog,
                None,
                serde_json::json!({}),
            )],
            model_calls: vec![],
        })
        .await
        .unwrap();
    let held = keel::audit::verify(&store.journal("old").await.unwrap()).unwrap();
    assert_eq!(held.events, 3);
    s.reader().await;
}
