//! `keel serve` and `keel submit`: a server picks up submitted runs, and
//! runs whose approval an operator answered, with no `keel resume`; it
//! stops on SIGTERM. On both engines.

use crate::common;

use common::engine::TestStore;
use common::http::ServeProcess;
use common::wasm::{plugin_path, quickstart_config};
use common::*;
use keel::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

on_both_engines!(
    a_server_drives_submitted_runs_and_acts_on_approvals_and_stops_on_sigterm,
    a_stopped_server_leaves_runs_at_a_step_boundary_for_the_next,
    a_killed_servers_runs_are_finished_by_the_others_and_no_effect_runs_twice,
    a_server_records_an_expired_approval_on_time,
    a_server_with_retention_prunes_finished_runs_on_its_schedule,
);

/// A config whose one run reads `n` files, one a step, no approval.
fn long_config(dir: &Path, n: usize) -> Option<PathBuf> {
    let agent = plugin_path("agent-scripted-rust.wasm")?;
    let policy = plugin_path("policy-rules-rust.wasm")?;
    let fs = plugin_path("tool-fs-rust.wasm")?;
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut script = String::new();
    for i in 0..n {
        std::fs::write(work.join(format!("f{i}")), format!("{i}")).unwrap();
        script.push_str(&format!(
            "  {{ call = {{ tool = \"fs_read\", arguments = {{ path = \"f{i}\" }} }} }},\n"
        ));
    }
    let text = format!(
        r#"
[engine]
cache_dir = "{cache}"
[model]
provider = "stub"
[limits]
max_steps = {steps}
[agent]
component = "{agent}"
[agent.config]
script = [
{script}  {{ complete = {{ read = {n} }} }},
]
[policy]
component = "{policy}"
[policy.config]
rules = [{{ tool = "fs_read", action = "allow" }}]
[[tools]]
component = "{fs}"
config = {{ root = "/workspace" }}
grant = {{ dirs = [{{ host = "{work}", guest = "/workspace", mode = "ro" }}] }}
"#,
        cache = dir.join("cache").display(),
        steps = n + 10,
        agent = agent.display(),
        policy = policy.display(),
        fs = fs.display(),
        work = work.display(),
    );
    let path = dir.join("long.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

fn keel(s: &TestStore, args: &[&str]) -> std::process::Output {
    keel_bin()
        .args(["--store", &s.location])
        .args(args)
        .env_remove("KEEL_STORE")
        .output()
        .unwrap()
}

fn start_server(s: &TestStore, extra: &[&str]) -> ServeProcess {
    ServeProcess::start(&s.location, extra)
}

async fn terminate(server: ServeProcess) -> String {
    tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap()
}

/// Waits until every run of `ids` has `status` (a minute at most).
async fn all_reach(s: &TestStore, ids: &[String], status: RunStatus) {
    let store = s.open().await;
    let since = Instant::now();
    loop {
        let mut n = 0;
        for id in ids {
            if store.run(id).await.unwrap().status == status {
                n += 1;
            }
        }
        if n == ids.len() {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "{n} of {} runs reached {status:?}",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_server_drives_submitted_runs_and_acts_on_approvals_and_stops_on_sigterm(s: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = quickstart_config(dir.path(), "") else {
        return;
    };
    let cfg = cfg.to_str().unwrap();

    // Bad input first: nothing is stored.
    let o = keel(&s, &["submit", "-c", "/no/such/keel.toml", "-g", "x"]);
    assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
    let o = keel(&s, &["serve", "--max-runs", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("at least 1"),
        "{}",
        output_text(&o)
    );

    let mut ids = Vec::new();
    for i in 0..4 {
        let goal = format!("write {i}");
        let o = keel(&s, &["submit", "-c", cfg, "-g", &goal, "--by", "carol"]);
        assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
        ids.push(String::from_utf8(o.stdout).unwrap().trim().to_string());
    }
    let store = s.open().await;
    let meta = store.run(&ids[0]).await.unwrap().meta;
    assert!(
        meta.contains("\"submitted_by\":\"carol\""),
        "the submitter is recorded: {meta}"
    );
    assert_eq!(
        store.list_runs(None, 100).await.unwrap().len(),
        4,
        "only the four"
    );

    let server = start_server(&s, &["--max-runs", "2"]);

    // The server starts them (two at a time); each pauses for its write.
    all_reach(&s, &ids, RunStatus::WaitingForApproval).await;
    // An operator answers; the server resumes them by itself.
    for id in &ids {
        let o = keel(&s, &["approve", id, "--by", "ops"]);
        assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    }
    all_reach(&s, &ids, RunStatus::Completed).await;
    for id in &ids {
        let kinds: Vec<String> = store
            .events_after(Some(id), 0, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|e| format!("{} {}", e.kind, e.data))
            .collect();
        let writes = kinds
            .iter()
            .filter(|k| k.starts_with("step.executing") && k.contains("fs_write"))
            .count();
        assert_eq!(writes, 1, "the approved write ran once: {kinds:#?}");
        assert!(store.run(id).await.unwrap().lease_owner.is_none());
    }

    // SIGTERM: it stops claiming and exits 0.
    let err = terminate(server).await;
    assert!(err.contains("stopped after driving"), "{err}");
    assert!(
        !err.contains("\u{1b}["),
        "no colour codes in a log that is not a terminal"
    );
}

async fn a_stopped_server_leaves_runs_at_a_step_boundary_for_the_next(s: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let n = 1000;
    let Some(cfg) = long_config(dir.path(), n) else {
        return;
    };
    let o = keel(&s, &["submit", "-c", cfg.to_str().unwrap(), "-g", "read"]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let store = s.open().await;

    let first = start_server(&s, &[]);
    let since = Instant::now();
    while store.run(&id).await.unwrap().step_count < 5 {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let log = terminate(first).await;
    assert!(
        log.contains("stopped after driving 1 runs; 0 left live"),
        "{log}"
    );

    // Left between two steps: running, unleased, every step done but the
    // next one, which the last write started and nobody decided yet.
    let run = store.run(&id).await.unwrap();
    assert_eq!(run.status, RunStatus::Running, "{run:?}");
    assert!(run.lease_owner.is_none(), "the lease was given back");
    assert!((run.step_count as usize) < n, "it stopped early: {run:?}");
    let steps = store.steps(&id).await.unwrap();
    let (last, before) = steps.split_last().unwrap();
    assert!(
        before.iter().all(|st| st.state == StepState::Done),
        "{steps:?}"
    );
    assert!(
        last.state == StepState::Done
            || (last.state == StepState::Started && last.decision.is_none()),
        "{last:?}"
    );

    // The next server finishes it; no step was done twice.
    let second = start_server(&s, &[]);
    all_reach(&s, std::slice::from_ref(&id), RunStatus::Completed).await;
    terminate(second).await;
    let steps = store.steps(&id).await.unwrap();
    assert_eq!(steps.len(), n + 1);
    let reads: std::collections::HashSet<_> = steps
        .iter()
        .filter_map(|st| st.call.as_ref().map(|c| c.arguments.clone()))
        .collect();
    assert_eq!(reads.len(), n, "each file read in one step");
    let started = store
        .events_after(Some(&id), 0, 100_000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == "step.started")
        .count();
    assert_eq!(started, n + 1, "no step started twice");
}

/// A config whose runs each append a line to `work/log` `writes` times
/// (allowed, no approval), then complete; leases of 1.5 s.
fn append_config(dir: &Path, writes: usize) -> Option<PathBuf> {
    let agent = plugin_path("agent-scripted-rust.wasm")?;
    let policy = plugin_path("policy-rules-rust.wasm")?;
    let fs = plugin_path("tool-fs-rust.wasm")?;
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Each write differs, so that the identical-call limit does not trip.
    let script: String = (0..writes)
        .map(|i| format!("  {{ call = {{ tool = \"fs_write\", arguments = {{ path = \"log\", content = \"write {i}\\n\", append = true }} }} }},\n"))
        .collect();
    let text = format!(
        r#"
[engine]
cache_dir = "{cache}"
[model]
provider = "stub"
[agent]
component = "{agent}"
[agent.config]
script = [
{script}  {{ complete = {{ done = true }} }},
]
[policy]
component = "{policy}"
[policy.config]
rules = [{{ tool = "fs_write", action = "allow" }}]
[[tools]]
component = "{fs}"
config = {{ root = "/workspace" }}
grant = {{ dirs = [{{ host = "{work}", guest = "/workspace", mode = "rw" }}] }}
[serve]
lease_ms = 1500
"#,
        cache = dir.join("cache").display(),
        agent = agent.display(),
        script = script,
        policy = policy.display(),
        fs = fs.display(),
        work = work.display(),
    );
    let path = dir.join("append.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

/// The process id in a lease owner (`id@host:pid:start`).
fn lease_pid(owner: &str) -> Option<u32> {
    let (_, tag) = owner.rsplit_once('@')?;
    tag.rsplit(':').nth(1)?.parse().ok()
}

async fn a_killed_servers_runs_are_finished_by_the_others_and_no_effect_runs_twice(s: TestStore) {
    let servers = match s.engine {
        common::engine::Engine::Sqlite => 2,
        common::engine::Engine::Postgres => 3,
    };
    let (runs, writes) = (50, 4);
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = append_config(dir.path(), writes) else {
        return;
    };
    let cfg = cfg.to_str().unwrap().to_string();
    let mut live: Vec<ServeProcess> = (0..servers)
        .map(|_| ServeProcess::start(&s.location, &["-c", &cfg]))
        .collect();
    let mut ids = Vec::new();
    for i in 0..runs {
        let r = live[0].post("/api/runs", None, &format!(r#"{{"goal":"append {i}"}}"#));
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }

    // A quarter of the way through, SIGKILL the server that holds the most
    // unfinished runs (which one claims what is up to the servers: the one
    // the runs were posted to may have claimed only the first).
    let store = s.open().await;
    let since = Instant::now();
    let victim = loop {
        let done = store.events_after(None, 0, 100_000).await.unwrap();
        let n = done.iter().filter(|e| e.kind == "step.done").count();
        if n >= runs * (writes + 1) / 4 {
            let mut held = vec![0; live.len()];
            for id in &ids {
                let r = store.run(id).await.unwrap();
                let pid = r.lease_owner.as_deref().and_then(lease_pid);
                if r.status == RunStatus::Running {
                    if let Some(i) = live.iter().position(|l| Some(l.child.id()) == pid) {
                        held[i] += 1;
                    }
                }
            }
            let (i, most) = held.iter().enumerate().max_by_key(|(_, h)| **h).unwrap();
            if *most > 0 {
                break i;
            }
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the servers never got going ({n} steps) or finished before one could be killed"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let killed = live.remove(victim);
    let pid = killed.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    drop(killed);

    // The others finish every run, or leave it waiting for an operator.
    let since = Instant::now();
    loop {
        let mut settled = 0;
        for id in &ids {
            let st = store.run(id).await.unwrap().status;
            if st == RunStatus::Completed || st == RunStatus::WaitingForApproval {
                settled += 1;
            }
        }
        if settled == runs {
            break;
        }
        if since.elapsed() > Duration::from_secs(90) {
            let mut stuck = Vec::new();
            for id in &ids {
                let r = store.run(id).await.unwrap();
                if r.status != RunStatus::Completed && r.status != RunStatus::WaitingForApproval {
                    stuck.push(format!(
                        "{} {} steps={} lease={:?}/{:?}",
                        r.id, r.status, r.step_count, r.lease_owner, r.lease_expires
                    ));
                }
            }
            let logs: Vec<String> = live.iter().map(|l| l.log.lock().unwrap().clone()).collect();
            let tail: String = logs
                .iter()
                .map(|l| l.lines().rev().take(15).collect::<Vec<_>>().join("\n"))
                .collect::<Vec<_>>()
                .join("\n----\n");
            panic!(
                "{settled} of {runs} runs settled; stuck: {stuck:#?}\nlogs (newest first):\n{tail}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (mut recorded, mut interrupted, mut taken_over) = (0, 0, 0);
    for id in &ids {
        let run = store.run(id).await.unwrap();
        let steps = store.steps(id).await.unwrap();
        let kinds = common::engine::event_kinds(store.as_ref(), id).await;
        taken_over += kinds.iter().filter(|k| *k == "lease.taken_over").count();
        recorded += steps
            .iter()
            .filter(|st| {
                st.call.as_ref().is_some_and(|c| c.tool == "fs_write")
                    && st
                        .observation
                        .as_ref()
                        .is_some_and(|o| o.kind == ObservationKind::ToolResult)
            })
            .count();
        let cut: Vec<&Step> = steps
            .iter()
            .filter(|st| st.state == StepState::Interrupted)
            .collect();
        interrupted += cut.len();
        if run.status == RunStatus::WaitingForApproval {
            // An interrupted write waits for an operator: it may have run.
            assert_eq!(cut.len(), 1, "{run:?} {steps:?}");
            let pending: Vec<Approval> = store
                .approvals(id)
                .await
                .unwrap()
                .into_iter()
                .filter(|a| a.status == ApprovalStatus::Pending)
                .collect();
            assert_eq!(pending.len(), 1, "{run:?}");
            assert_eq!(pending[0].kind, ApprovalKind::InterruptedSideEffect);
        } else {
            assert_eq!(run.status, RunStatus::Completed);
            assert!(cut.is_empty(), "{steps:?}");
            assert_eq!(steps.len(), writes + 1);
        }
    }
    eprintln!("{servers} servers: {taken_over} runs taken over, {recorded} writes recorded, {interrupted} interrupted");
    assert!(taken_over >= 1, "the killed server's runs were taken over");
    let lines = std::fs::read_to_string(dir.path().join("work/log"))
        .unwrap()
        .lines()
        .count();
    assert!(
        recorded <= lines && lines <= recorded + interrupted,
        "every recorded write ran once and only an interrupted one may have run unrecorded: {lines} lines, {recorded} recorded, {interrupted} interrupted"
    );
    for srv in live {
        terminate(srv).await;
    }
}

async fn a_server_records_an_expired_approval_on_time(s: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = quickstart_config(dir.path(), "") else {
        return;
    };
    // The quickstart's approval, unanswered, expires after a second.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[model]", "[limits]\napproval_ttl_ms = 1000\n[model]");
    std::fs::write(&cfg, text).unwrap();
    let srv = ServeProcess::start(&s.location, &["-c", cfg.to_str().unwrap()]);
    let r = srv.post("/api/runs", None, r#"{"goal":"write hello.txt"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let store = s.open().await;
    let since = Instant::now();
    let expired = loop {
        let a = store.approvals(&id).await.unwrap();
        if let Some(a) = a.into_iter().find(|a| a.status == ApprovalStatus::Expired) {
            break a;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the approval never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let events = store.events_after(Some(&id), 0, 1000).await.unwrap();
    let at = events
        .iter()
        .find(|e| e.kind == "approval.expired")
        .expect("an approval.expired event")
        .at;
    let due = expired.expires_at.unwrap();
    assert!(
        at >= due && at - due < 10_000,
        "recorded {} ms after it expired",
        at - due
    );
    srv.terminate();
}

/// With `[retention]`, a server removes runs that finished longer ago
/// than the section keeps them, on its schedule, exporting each first;
/// the store still verifies. A bad section is refused at start.
async fn a_server_with_retention_prunes_finished_runs_on_its_schedule(s: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = long_config(dir.path(), 1) else {
        return;
    };
    let base = std::fs::read_to_string(&cfg).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!("{base}[retention]\nfinished_before = \"soon\"\n"),
    )
    .unwrap();
    let o = keel(
        &s,
        &[
            "serve",
            "-c",
            bad.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("[retention] finished_before"),
        "{}",
        output_text(&o)
    );

    std::fs::write(
        &cfg,
        format!(
            "{base}[retention]\nfinished_before = \"200ms\"\nevery = \"100ms\"\nexport_dir = \"pruned\"\n"
        ),
    )
    .unwrap();
    let srv = ServeProcess::start(&s.location, &["-c", cfg.to_str().unwrap()]);
    let store = s.open().await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = srv.post("/api/runs", None, r#"{"goal":"read"}"#);
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(r.json()["id"].as_str().unwrap().to_string());
        let since = Instant::now();
        while store
            .get_run(ids.last().unwrap())
            .await
            .unwrap()
            .is_none_or(|r| r.status != RunStatus::Completed)
        {
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "the run never completed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The first goes; the second holds the store's newest event and stays.
    let since = Instant::now();
    while store.get_run(&ids[0]).await.unwrap().is_some() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the run was never pruned"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(srv.get(&format!("/api/runs/{}", ids[0]), None).status, 404);
    let export = dir.path().join("pruned").join(format!("{}.jsonl", ids[0]));
    let o = keel(&s, &["verify", "--file", export.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    let o = keel(&s, &["verify", "--all"]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    assert!(store.get_run(&ids[1]).await.unwrap().is_some());
    let log = srv.terminate();
    assert!(log.contains("pruned finished runs"), "{log}");
}
