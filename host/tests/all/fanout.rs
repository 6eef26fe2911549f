//! `keel bench fanout`: a small fan-out through the real binary, with the
//! wasm agent and policy, journaled to a store the test then reads; and the
//! command's answers to bad input. `keel bench serve`: a small load
//! through a server's API.

use crate::common;

use common::wasm::{plugin_path, plugins_dir};
use std::process::Output;

fn keel(args: &[&str]) -> Output {
    bench("fanout", args)
}

fn bench(which: &str, args: &[&str]) -> Output {
    let cache = common::wasm::test_cache();
    common::keel_bin()
        .args(["bench", which, "--plugins"])
        .arg(plugins_dir())
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    common::output_text(o)
}

fn have_plugins() -> bool {
    plugin_path("agent-llm-rust.wasm").is_some() && plugin_path("policy-rules-rust.wasm").is_some()
}

#[test]
fn a_durable_fan_out_completes_every_run_and_journals_each_one_whole() {
    if !have_plugins() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fan.db");
    let o = keel(&[
        "--runs",
        "300",
        "--concurrency",
        "100",
        "--latency",
        "5ms",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(r["runs"], 300);
    assert_eq!(r["completed"], 300);
    assert_eq!(r["failed"], 0);
    // Created with step 0 started; step 0 decided and judged (executing),
    // then done with step 1 started; step 1 decided and the run completed.
    // Ten events for those, and a `model.called` for each model call.
    assert_eq!(r["transitions_per_run"], 4.0, "{r}");
    assert_eq!(r["journal_records_per_run"], 12.0, "{r}");
    let (p50, p90, p99) = (
        r["p50_ms"].as_f64().unwrap(),
        r["p90_ms"].as_f64().unwrap(),
        r["p99_ms"].as_f64().unwrap(),
    );
    // Two model calls of 5 ms each: no run can be faster than 10 ms.
    assert!(10.0 <= p50 && p50 <= p90 && p90 <= p99, "{r}");
    assert!(r["peak_rss_mib"].as_f64().unwrap() > 0.0);
    assert!(r["throughput_runs_per_s"].as_f64().unwrap() > 0.0);
    // The writer's share is measured, and is a share: a 300-run load
    // keeps the writer busy some of the time, never more than all of it
    // (the measurement's own rounding aside).
    let (cpu, writer_cpu, busy, runnable) = (
        r["cpu_us_per_run"].as_f64().unwrap(),
        r["writer_cpu_us_per_run"].as_f64().unwrap(),
        r["writer_busy_pct"].as_f64().unwrap(),
        r["writer_runnable_pct"].as_f64().unwrap(),
    );
    assert!(cpu > 0.0 && (0.0..=cpu).contains(&writer_cpu), "{r}");
    assert!(busy > 0.0 && busy <= 101.0, "{r}");
    assert!((0.0..=101.0).contains(&runnable), "{r}");

    // The floor beside it did the same work without the loop: the same
    // writes and journal records per run, the same plugin calls, and it
    // cost less than the runs did.
    let f = &r["floor"];
    assert_eq!(f["runs"], 300, "{r}");
    assert_eq!(f["writes_per_run"], r["transitions_per_run"], "{r}");
    assert_eq!(
        f["journal_records_per_run"], r["journal_records_per_run"],
        "{r}"
    );
    // decide (a tool call), evaluate, decide (the answer).
    assert_eq!(f["plugin_calls_per_run"], 3.0, "{r}");
    let floor_cpu = r["floor_cpu_us_per_run"].as_f64().unwrap();
    assert_eq!(f["cpu_us_per_run"].as_f64().unwrap(), floor_cpu);
    assert!(floor_cpu > 0.0 && floor_cpu < cpu, "{r}");
    let ratio = r["floor_ratio"].as_f64().unwrap();
    assert!((ratio - cpu / floor_cpu).abs() < 1e-6, "{r}");
    // Its store was a file of its own, removed afterwards.
    assert!(!dir.path().join("fan.db.floor").exists());

    // The store holds every run (and the warm-up), completed, with both
    // model calls and the tool's step.
    let store = keel::Store::open_read_only(&db).unwrap();
    let runs = store.list_runs(None, 1000).unwrap();
    assert_eq!(runs.len(), 301);
    for run in &runs {
        assert_eq!(run.status, keel::RunStatus::Completed, "{}", run.id);
        assert_eq!(run.model_calls, 2, "{}", run.id);
        assert_eq!(store.model_call_count(&run.id).unwrap(), 2);
        let steps = store.load_steps(&run.id).unwrap();
        assert_eq!(steps.len(), 2);
        assert!(steps.iter().all(|s| s.state == keel::StepState::Done));
        assert!(run.lease_owner.is_none());
    }
}

#[test]
fn the_in_memory_mode_reports_the_same_journal() {
    if !have_plugins() {
        return;
    }
    let o = keel(&[
        "--runs",
        "100",
        "--concurrency",
        "50",
        "--latency",
        "0",
        "--memory",
        "--json",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["completed"], 100);
    assert_eq!(r["journal_records_per_run"], 12.0);
    assert!(r["store"].as_str().unwrap().contains("in-memory"));
}

#[test]
fn the_floor_alone_does_the_runs_work_without_driving_them() {
    if !have_plugins() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("floor.db");
    let o = keel(&[
        "--floor",
        "--runs",
        "200",
        "--concurrency",
        "50",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let f: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(f["runs"], 200);
    assert_eq!(f["live_pairs"], 50);
    assert_eq!(f["runs_per_commit"], 50);
    assert_eq!(f["writes_per_run"], 4.0);
    assert_eq!(f["journal_records_per_run"], 12.0);
    let (cpu, wasm, store) = (
        f["cpu_us_per_run"].as_f64().unwrap(),
        f["wasm_cpu_us_per_run"].as_f64().unwrap(),
        f["store_cpu_us_per_run"].as_f64().unwrap(),
    );
    assert!(
        wasm > 0.0 && store > 0.0 && (cpu - wasm - store).abs() < 1e-6,
        "{f}"
    );
    // Only the recorded run was driven: the floor's rows went to a store
    // of their own, removed afterwards.
    let kept = keel::Store::open_read_only(&db).unwrap();
    assert_eq!(kept.list_runs(None, 1000).unwrap().len(), 1);
    assert!(!dir.path().join("floor.db.floor").exists());
}

#[test]
fn a_sweep_runs_the_fan_out_and_its_floor_at_each_concurrency() {
    if !have_plugins() {
        return;
    }
    let o = keel(&[
        "--sweep",
        "10,40",
        "--runs",
        "120",
        "--latency",
        "0",
        "--memory",
        "--json",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    let points = r["sweep"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{r}");
    for (p, c) in points.iter().zip([10, 40]) {
        assert_eq!(p["concurrency"], c, "{r}");
        assert_eq!(p["completed"], 120, "{r}");
        assert!(p["floor_ratio"].as_f64().unwrap() > 0.0, "{r}");
    }
    let growth = r["cpu_per_run_against_first"].as_array().unwrap();
    assert_eq!(growth[0], 1.0);
    let second = points[1]["cpu_us_per_run"].as_f64().unwrap()
        / points[0]["cpu_us_per_run"].as_f64().unwrap();
    assert!((growth[1].as_f64().unwrap() - second).abs() < 1e-9, "{r}");
}

#[test]
fn bad_flags_are_usage_errors_that_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("old.db");
    std::fs::write(&existing, b"x").unwrap();
    let existing = existing.to_str().unwrap();
    std::fs::write(dir.path().join("f.db.floor"), b"x").unwrap();
    let floor_taken = dir.path().join("f.db");
    let floor_taken = floor_taken.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--runs", "0"], "at least 1"),
        (&["--latency", "5 parsecs"], "unknown unit"),
        (&["--latency=-5ms"], "duration"),
        (&["--sync", "sometimes"], "full or normal"),
        (&["--memory", "--db", "x.db"], "exclude"),
        (&["--memory", "--sync", "normal"], "never synced"),
        (&["--db", existing], "exists"),
        (&["--agent", "/no/such/agent.wasm"], "no such component"),
        (&["--floor", "--no-floor"], "cannot be used with"),
        (&["--sweep", "5", "--floor"], "cannot be used with"),
        (&["--sweep", "0"], "at least 1"),
        (&["--db", floor_taken], "floor writes a fresh store"),
    ];
    for (args, says) in cases {
        let o = keel(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains(says),
            "{args:?} should say {says:?}: {}",
            text(&o)
        );
    }
    assert_eq!(
        std::fs::read(existing).unwrap(),
        b"x",
        "an existing file is left alone"
    );
    // A floor store in the way is found before any run is driven.
    assert!(!dir.path().join("f.db").exists());
}

#[test]
fn the_serve_bench_drives_every_run_through_the_api_and_times_streams_and_approvals() {
    if !have_plugins() || plugin_path("tool-echo-rust.wasm").is_none() {
        return;
    }
    let o = bench(
        "serve",
        &[
            "--runs",
            "200",
            "--concurrency",
            "50",
            "--latency",
            "5ms",
            "--sse-clients",
            "20",
            "--approvals",
            "10",
            "--json",
            "-",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    let (serve, fanout) = (&r["serve"], &r["fanout"]);
    assert_eq!(
        (serve["completed"].as_u64(), serve["failed"].as_u64()),
        (Some(200), Some(0)),
        "{r}"
    );
    assert_eq!(
        fanout["completed"], 200,
        "the fan-out is measured beside it: {r}"
    );
    assert_eq!(serve["submit"]["count"], 200, "{r}");
    assert_eq!(
        serve["approve"]["count"], 10,
        "every approval answered: {r}"
    );
    assert_eq!(serve["sse_clients"], 20, "{r}");
    for spread in [
        "submit",
        "approve",
        "events_under_load",
        "events_after_approval",
    ] {
        let x = &serve[spread];
        assert!(x["count"].as_u64().unwrap() > 0, "{spread}: {r}");
        let (p50, p99, max) = (
            x["p50_ms"].as_f64().unwrap(),
            x["p99_ms"].as_f64().unwrap(),
            x["max_ms"].as_f64().unwrap(),
        );
        assert!(0.0 <= p50 && p50 <= p99 && p99 <= max, "{spread}: {r}");
    }
    // Two model calls of 5 ms a run, 50 at once: at most 5,000 runs/s.
    let tp = serve["throughput_runs_per_s"].as_f64().unwrap();
    assert!(tp > 0.0 && tp < 5_000.0, "{r}");
}

/// `keel bench soak`: runs created, finished and pruned in rounds leave a
/// store whose size levels off (the file and its log stop growing once
/// freed pages are reused), while the same load without pruning keeps
/// growing; the runs kept are the last round's.
#[test]
fn a_store_pruned_in_rounds_levels_off_and_one_never_pruned_grows() {
    if !have_plugins() {
        return;
    }
    let soak = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "--runs",
            "3000",
            "--round",
            "500",
            "--concurrency",
            "100",
            "--report-every",
            "500",
            "--latency",
            "0",
            "--json",
            "-",
        ];
        args.extend(extra);
        let o = bench("soak", &args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // What the database's pages hold: the file's own size moves only at
    // checkpoints.
    let size = |s: &serde_json::Value| s["size_bytes"].as_u64().unwrap();
    let pruned = soak(&[]);
    let samples = pruned["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 6, "{pruned}");
    let (mid, last) = (&samples[2], &samples[5]);
    assert!(
        size(last) <= size(mid) + size(mid) / 10,
        "the pruned store kept growing: {pruned}"
    );
    assert!(last["live_runs"].as_u64().unwrap() <= 1001, "{pruned}");
    assert_eq!(pruned["failed"], 0);

    let grown = soak(&["--no-prune"]);
    let samples = grown["samples"].as_array().unwrap();
    assert_eq!(samples[5]["live_runs"], 3001, "{grown}");
    assert!(
        2 * size(&samples[5]) > 3 * size(&samples[2]),
        "without pruning the file grows with the runs: {grown}"
    );
}
