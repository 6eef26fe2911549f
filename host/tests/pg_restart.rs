//! A PostgreSQL server restarted under live runs. Its own test binary: it
//! stops the cluster every other PostgreSQL test uses, and cargo runs test
//! binaries one at a time.

#[path = "all/common/mod.rs"]
mod common;

use common::engine::{pg_url, Engine, TestStore};
use common::*;
use keel::store::StoreError;
use keel::*;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn cluster(cmd: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/postgres.sh");
    let o = std::process::Command::new(script)
        .arg(cmd)
        .output()
        .unwrap();
    assert!(o.status.success(), "postgres.sh {cmd}: {}", output_text(&o));
}

/// Starts the cluster again however the test ends, for the tests after it.
struct Restart;
impl Drop for Restart {
    fn drop(&mut self) {
        cluster("start");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_fails_no_run_for_good() {
    pg_url();
    let s = TestStore::new(Engine::Postgres).await;
    let rt = s.runtime().await.with_lease_ttl_ms(60_000);

    // Run A waits for an approval.
    let asked = Arc::new(Mutex::new(0));
    let script_a = || {
        vec![
            call("ask_drop", r#"{"t":"x"}"#),
            Decision::Complete(r#""a""#.into()),
        ]
    };
    let (c, _) = consumers(
        script_a(),
        vec![counting_tool(
            "ask_drop",
            Effect::Destructive,
            asked.clone(),
        )],
    );
    let a = rt.start("a", Limits::default(), "{}", c).await.unwrap();
    let approval = a.pending.unwrap().id;

    // Run B is live, inside a tool call, while the server goes away.
    let (entered, release, calls) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let gate: Arc<dyn ToolProvider> = Arc::new(Gate {
        entered: entered.clone(),
        release: release.clone(),
        calls: calls.clone(),
    });
    let (c, _) = consumers(
        vec![
            call("slow", r#"{"n":1}"#),
            call("slow", r#"{"n":2}"#),
            Decision::Complete(r#""b""#.into()),
        ],
        vec![gate],
    );
    let live = rt.clone();
    let b = tokio::spawn(async move { live.start("b", Limits::default(), "{}", c).await });
    while !entered.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let _restart = Restart;
    cluster("stop");

    // While it is down: an operator's decision fails, in bounded time,
    // saying so; the command line says so too, without the password.
    let t = Instant::now();
    let err = rt
        .operator()
        .approve(&approval, "ops", None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let o = keel_bin()
        .args(["--store", &s.location, "runs"])
        .env_remove("KEEL_STORE")
        .output()
        .unwrap();
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(text.contains("cannot connect"), "{text}");
    let secret = s
        .location
        .split('@')
        .next()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap();
    assert!(!text.contains(secret), "{text}");

    cluster("start");
    // Run B goes on with no one's help: its writer connects again.
    release.store(true, Ordering::SeqCst);
    let b = tokio::time::timeout(Duration::from_secs(60), b)
        .await
        .expect("run B finishes")
        .unwrap()
        .unwrap();
    assert_eq!(b.run.status, RunStatus::Completed, "{:?}", b.run);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "each of B's calls ran once"
    );

    // The decision is taken again on the same runtime, and A finishes.
    let ap = rt.operator().approve(&approval, "ops", None).await.unwrap();
    assert_eq!(ap.status, ApprovalStatus::Approved);
    let (c, _) = consumers(
        script_a(),
        vec![counting_tool(
            "ask_drop",
            Effect::Destructive,
            asked.clone(),
        )],
    );
    let a = rt.resume(&a.run.id, c).await.unwrap();
    assert_eq!(a.run.status, RunStatus::Completed);
    assert_eq!(*asked.lock().unwrap(), 1, "the approved call ran once");

    // Both journals are whole: numbered without a repeat, in order.
    for id in [&a.run.id, &b.run.id] {
        let ev = rt.store().events_after(Some(id), 0, 1000).await.unwrap();
        assert!(ev.windows(2).all(|w| w[0].seq < w[1].seq));
        assert_eq!(ev.last().unwrap().kind.as_ref(), "run.completed");
    }
}
