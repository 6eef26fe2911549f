//! The `keel` binary on bad input: a clear message, the documented exit
//! code, and the store untouched.

use crate::common;

use common::cli::{self, keel, text};
use common::wasm::plugin_path;
use std::path::{Path, PathBuf};

/// A config like the quickstart's, in `dir`, with `agent` as the agent.
fn config(dir: &Path, agent: &Path) -> Option<PathBuf> {
    cli::fs_write_config(dir, agent, "complete = 1", None)
}

#[test]
fn a_missing_or_invalid_config_is_a_usage_error_that_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let o = keel(&["run", "--config", "/no/such/keel.toml", "--goal", "x"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("/no/such/keel.toml: cannot read the config"),
        "{}",
        text(&o)
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[agent]\ncomponent = \"a.wasm\"\ncolour = 3\n[policy]\ncomponent = \"p.wasm\"\n",
    )
    .unwrap();
    let o = keel(&["run", "--config", bad.to_str().unwrap(), "--goal", "x"]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(
        t.contains("bad.toml") && t.contains("line 3") && t.contains("colour"),
        "{t}"
    );
    assert!(!dir.path().join("keel.db").exists(), "no store was created");
}

#[test]
fn a_wrong_world_or_corrupt_component_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let Some(policy) = plugin_path("policy-rules-rust.wasm") else {
        return;
    };
    let cfg = config(dir.path(), &policy).unwrap();
    let o = keel(&["run", "--config", cfg.to_str().unwrap(), "--goal", "x"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("does not fit the agent world"),
        "{}",
        text(&o)
    );
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asmgarbage").unwrap();
    let cfg = config(dir.path(), &junk).unwrap();
    let o = keel(&["run", "--config", cfg.to_str().unwrap(), "--goal", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("not a WebAssembly component"),
        "{}",
        text(&o)
    );
    assert!(!dir.path().join("keel.db").exists(), "no store was created");
    let o = keel(&[
        "plugin",
        "check",
        policy.to_str().unwrap(),
        "--world",
        "agent",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = keel(&[
        "plugin",
        "check",
        policy.to_str().unwrap(),
        "--world",
        "policy",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = keel(&["plugin", "inspect", policy.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["world"], "policy");
    assert_eq!(v["language"], "rust");
}

#[test]
fn operator_commands_refuse_what_does_not_apply_and_leave_the_store_alone() {
    let dir = tempfile::tempdir().unwrap();
    let Some(agent) = plugin_path("agent-scripted-rust.wasm") else {
        return;
    };
    let cfg = config(dir.path(), &agent).unwrap();
    let db = dir.path().join("keel.db");
    let store = db.to_str().unwrap();
    let o = keel(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--goal",
        "x",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3), "paused: {}", text(&o));
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    let run = last["run"]["id"].as_str().unwrap().to_string();
    let appr = last["pending"]["id"].as_str().unwrap().to_string();

    let o = keel(&["--store", store, "approve", "appr_nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = keel(&[
        "--store", store, "deny", &run, "--by", "ops", "--note", "no",
    ]);
    assert_eq!(o.status.code(), Some(0), "deny by run id: {}", text(&o));
    let o = keel(&["--store", store, "approve", &appr]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "not pending any more: {}",
        text(&o)
    );
    assert!(text(&o).contains("not pending"), "{}", text(&o));
    let o = keel(&["--store", store, "resume", &run]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the agent goes on after the denial: {}",
        text(&o)
    );
    let before = std::fs::read(&db).unwrap();
    let o = keel(&["--store", store, "cancel", &run]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a completed run cannot be cancelled: {}",
        text(&o)
    );
    let o = keel(&["--store", store, "resume", &run]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = keel(&["--store", store, "show", &run, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["run"]["status"], "completed");
    assert_eq!(v["approvals"][0]["status"], "denied");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "refused commands wrote nothing"
    );
    assert!(
        !dir.path().join("work/a.txt").exists(),
        "the denied write never ran"
    );
    let o = keel(&["--store", store, "events", &run, "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("approval.denied"));
}

#[test]
fn a_locked_store_is_refused_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    drop(keel::Store::open(&db, keel::Durability::Full).unwrap());
    let mut s = keel::Store::open(&db, keel::Durability::Full).unwrap();
    let run = keel::Run::new("r", "g", Default::default(), 0);
    s.create_run(&run, vec![]).unwrap();
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let o = keel(&["--store", db.to_str().unwrap(), "cancel", "r"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("locked by another writer"),
        "{}",
        text(&o)
    );
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(s.run("r").unwrap().status, keel::RunStatus::Running);
}

#[test]
fn events_follow_streams_until_the_run_ends() {
    let dir = tempfile::tempdir().unwrap();
    let Some(agent) = plugin_path("agent-scripted-rust.wasm") else {
        return;
    };
    let cfg = config(dir.path(), &agent).unwrap();
    let db = dir.path().join("keel.db");
    let store = db.to_str().unwrap();
    let o = keel(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--goal",
        "x",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    let run = last["run"]["id"].as_str().unwrap().to_string();
    let follower = common::keel_bin()
        .args(["--store", store, "events", &run, "--follow", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        keel(&["--store", store, "approve", &run, "--by", "ops"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        keel(&["--store", store, "resume", &run]).status.code(),
        Some(0)
    );
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success());
    let kinds: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["event"]["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("run.started"));
    assert!(
        kinds.contains(&"approval.approved".to_string()),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run.completed"),
        "it followed to the end and stopped"
    );
}

#[test]
fn plugin_inspect_names_exactly_the_worlds_check_accepts() {
    let dir = common::wasm::plugins_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "no {}",
            dir.display()
        );
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        // Rust and C components compile in a fraction of a second; Python
        // and JavaScript ones take seconds each without a cache.
        .filter(|p| {
            p.to_string_lossy().ends_with("-rust.wasm") || p.to_string_lossy().ends_with("-c.wasm")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    for f in &files {
        let f = f.to_str().unwrap();
        let o = keel(&["plugin", "inspect", f, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{f}: {}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let said: Vec<String> = v["worlds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect();
        let accepted: Vec<String> = ["agent", "policy", "tool"]
            .into_iter()
            .filter(|w| keel(&["plugin", "check", f, "--world", w]).status.code() == Some(0))
            .map(String::from)
            .collect();
        assert_eq!(said, accepted, "{f}");
        assert_eq!(said.len(), 1, "{f} fits one world");
    }
    // A core module gets the same advice from inspect, check and compile.
    let tmp = tempfile::tempdir().unwrap();
    let core = tmp.path().join("core.wasm");
    std::fs::write(&core, wat::parse_str("(module)").unwrap()).unwrap();
    let core = core.to_str().unwrap();
    for args in [
        vec!["plugin", "inspect", core],
        vec!["plugin", "check", core, "--world", "agent"],
        vec![
            "plugin",
            "compile",
            core,
            "--cache-dir",
            tmp.path().join("c").to_str().unwrap(),
        ],
    ] {
        let o = keel(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains("core wasm module; turn it into a component"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

mod plugin_new;
