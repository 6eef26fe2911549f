//! Bad files and faults: a corrupt or foreign database, a schema newer than
//! the binary, a database locked by another writer, a full disk. Each gives a
//! clear error and leaves no partial transition. And an older schema, which
//! is migrated with nothing lost.

use crate::common;

use common::*;
use keel::*;
use std::sync::{Arc, Mutex};

#[test]
fn a_corrupt_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    let junk: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&p, &junk).unwrap();
    let e = Store::open(&p, keel::Durability::Full).err().unwrap();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("not a SQLite database"), "{e}");
    assert!(matches!(
        Store::open_read_only(&p).err().unwrap(),
        StoreError::Corrupt { .. }
    ));
    assert_eq!(std::fs::read(&p).unwrap(), junk, "nothing was written");
}

#[test]
fn a_foreign_sqlite_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("other.db");
    let c = rusqlite::Connection::open(&p).unwrap();
    c.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers VALUES (1, 'a');").unwrap();
    drop(c);
    let e = Store::open(&p, keel::Durability::Full).err().unwrap();
    assert!(matches!(e, StoreError::Foreign { .. }), "{e}");
    let c = rusqlite::Connection::open(&p).unwrap();
    let tables: i64 = c
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type='table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "no Keel tables were added");
}

#[test]
fn a_newer_schema_is_refused_by_writers_and_readers() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    drop(Store::open(&p, keel::Durability::Full).unwrap());
    rusqlite::Connection::open(&p)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let e = Store::open(&p, keel::Durability::Full).err().unwrap();
    assert!(matches!(e, StoreError::TooNew { found: 99, .. }), "{e}");
    assert!(e.to_string().contains("upgrade keel"), "{e}");
    assert!(matches!(
        Store::open_read_only(&p).err().unwrap(),
        StoreError::TooNew { .. }
    ));
}

#[test]
fn the_read_only_open_never_creates_or_migrates() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("none.db");
    assert!(matches!(
        Store::open_read_only(&p).err().unwrap(),
        StoreError::Missing { .. }
    ));
    assert!(!p.exists());
    drop(Store::open(&p, keel::Durability::Full).unwrap());
    let mut ro = Store::open_read_only(&p).unwrap();
    assert!(ro.list_runs(None, 10).unwrap().is_empty());
    assert!(matches!(
        ro.cancel("x", "y", 0).err().unwrap(),
        StoreError::ReadOnly
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_locked_by_another_writer_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    let rt = runtime(&p);
    let n = Arc::new(Mutex::new(0));
    let (c, _) = consumers(
        vec![call("ask_w", "{}")],
        vec![counting_tool("ask_w", Effect::LocalMutation, n)],
    );
    let out = rt.start("x", Limits::default(), "{}", c).await.unwrap();
    let a = out.pending.unwrap();
    // Another process holds the write lock for longer than the busy timeout.
    let holder = rusqlite::Connection::open(&p).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let mut op = Store::open(&p, keel::Durability::Full).unwrap();
    let started = std::time::Instant::now();
    let e = op
        .decide_approval(&a.id, true, "ops", None, 1)
        .err()
        .unwrap();
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("locked by another writer"), "{e}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(keel::store::BUSY_TIMEOUT_MS - 100)
    );
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        op.approval(&a.id).unwrap().status,
        ApprovalStatus::Pending,
        "nothing was half-written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_loop_with_a_clear_error_and_no_partial_transition() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    let store = Store::open(&p, keel::Durability::Full).unwrap();
    // A size-limited file: SQLite refuses to grow it past this many pages.
    let pages: i64 = store
        .connection()
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    store
        .connection()
        .query_row(&format!("PRAGMA max_page_count={}", pages + 40), [], |_| {
            Ok(())
        })
        .unwrap();
    let rt = Runtime::new(StoreHandle::spawn(store));
    let big: Arc<dyn ToolProvider> = Arc::new(FnTool::new(spec("big", Effect::ReadOnly), |args| {
        Ok(serde_json::json!({ "pad": "y".repeat(20_000), "args": args }))
    }));
    let calls: Vec<Decision> = (0..100)
        .map(|i| call("big", &format!(r#"{{"n":{i}}}"#)))
        .collect();
    let (c, _) = consumers(calls, vec![big]);
    let e = rt
        .start(
            "fill",
            Limits {
                max_steps: 200,
                ..Limits::default()
            },
            "{}",
            c,
        )
        .await
        .err()
        .expect("the disk fills up");
    assert!(matches!(e, DriverError::Store(StoreError::DiskFull)), "{e}");
    assert!(e.to_string().contains("disk is full"), "{e}");
    let ro = Store::open_read_only(&p).unwrap();
    let run = ro.list_runs(None, 1).unwrap().pop().unwrap();
    let steps = ro.load_steps(&run.id).unwrap();
    assert_eq!(
        run.step_count as usize,
        steps.len(),
        "the run row and its steps agree"
    );
    let events = ro.events_after(Some(&run.id), 0, 100_000).unwrap();
    for s in &steps {
        let done = events
            .iter()
            .any(|e| e.kind == "step.done" && e.step_index == Some(s.index));
        assert_eq!(
            done,
            s.state == StepState::Done,
            "step {} and its events agree",
            s.index
        );
    }
}

/// A store written by a version-1 binary (events and model calls numbered
/// by AUTOINCREMENT) opens in this one: migrated in place, every event kept
/// with its number and order, and new events numbered after the old ones.
#[test]
fn a_version_1_store_is_migrated_keeping_every_event_and_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(keel::store::MIGRATIONS[0]).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.pragma_update(None, "application_id", 0x4B45_454C)
            .unwrap();
        c.execute(
            "INSERT INTO runs (id, goal, status, limits, meta, step_count, model_calls, tokens,
                consecutive_failures, created_at, updated_at)
             VALUES ('old', 'g', 'completed', ?1, '{}', 1, 1, 10, 0, 1, 2)",
            [serde_json::to_string(&Limits::default()).unwrap()],
        )
        .unwrap();
        for (at, kind) in ["run.started", "step.started", "run.completed"]
            .iter()
            .enumerate()
        {
            c.execute(
                "INSERT INTO events (run_id, step_idx, kind, data, at) VALUES ('old', NULL, ?1, '{}', ?2)",
                rusqlite::params![kind, at as i64],
            )
            .unwrap();
        }
        c.execute(
            "INSERT INTO model_calls (run_id, step_idx, provider, prompt_tokens, completion_tokens,
                outcome, latency_ms, at) VALUES ('old', 0, 'stub', 5, 5, 'ok', 50, 1)",
            [],
        )
        .unwrap();
    }

    let mut store = Store::open(&p, keel::Durability::Full).unwrap();
    let version: i64 = store
        .connection()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, keel::store::CURRENT_VERSION);
    let old = store.events_after(Some("old"), 0, 100).unwrap();
    let seen: Vec<(i64, &str)> = old.iter().map(|e| (e.seq, e.kind.as_ref())).collect();
    assert_eq!(
        seen,
        [
            (1, "run.started"),
            (2, "step.started"),
            (3, "run.completed")
        ]
    );
    assert_eq!(store.model_call_count("old").unwrap(), 1);
    assert_eq!(store.run("old").unwrap().status, RunStatus::Completed);

    let mut run = store.run("old").unwrap();
    run.id = "new".into();
    run.status = RunStatus::Running;
    let done = store
        .create_run(
            &run,
            vec![keel::store::NewEvent::new(
                keel::EventKind::RunStarted,
                None,
                serde_json::json!({}),
            )],
        )
        .unwrap();
    assert_eq!(done.events[0].seq, 4, "new events come after the old ones");
    let all: Vec<i64> = store
        .events_after(None, 0, 100)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(all, [1, 2, 3, 4]);
    // The old run's events were linked into a chain as the store was
    // migrated, its rows sealed as they were then: it verifies, and so
    // does the run written since.
    let old = keel::audit::verify(&store.journal("old").unwrap()).unwrap();
    assert_eq!(old.events, 3);
    assert_eq!(old.head, store.run("old").unwrap().chain_head);
    keel::audit::verify(&store.journal("new").unwrap()).unwrap();
}
