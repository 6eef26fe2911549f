//! What the operator sees and types: plugin text escaped in every
//! human-readable output, listings that page through everything, store
//! paths that say what is wrong with them, goals from files.

use crate::common;

use common::cli::{self, keel, text};
use common::wasm::plugin_path;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The terminal sequences a hostile plugin writes: cursor up, erase line.
const ESCAPES: &str = "\\u001b[1A\\u001b[2Kgotcha";

/// A config whose scripted agent writes a file (the policy asks for
/// approval with a reason full of escape sequences), then fails with one.
fn config(dir: &Path) -> Option<PathBuf> {
    let agent = plugin_path("agent-scripted-rust.wasm")?;
    cli::fs_write_config(
        dir,
        &agent,
        &format!(r#"fail = "{ESCAPES}""#),
        Some(ESCAPES),
    )
}

fn no_raw_escape(o: &Output, what: &str) {
    assert!(
        !o.stdout.contains(&0x1b) && !o.stderr.contains(&0x1b),
        "{what} printed a raw escape: {}",
        text(o)
    );
}

#[test]
fn plugin_text_reaches_the_terminal_escaped_and_json_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = config(dir.path()) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let store = store.to_str().unwrap();
    let o = keel(&["run", "--config", cfg.to_str().unwrap(), "--goal", "x"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    no_raw_escape(&o, "the approval prompt of keel run");
    assert!(
        text(&o).contains("\\u{1b}[1A\\u{1b}[2Kgotcha"),
        "{}",
        text(&o)
    );
    let run = keel(&["--store", store, "runs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let id = v[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        keel(&["--store", store, "approve", &id]).status.code(),
        Some(0)
    );
    let o = keel(&["--store", store, "resume", &id]);
    assert_eq!(o.status.code(), Some(4), "the agent fails: {}", text(&o));
    no_raw_escape(&o, "keel resume");
    for args in [
        vec!["show", id.as_str()],
        vec!["events", id.as_str()],
        vec!["runs"],
    ] {
        let mut all = vec!["--store", store];
        all.extend(args.iter());
        let o = keel(&all);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        no_raw_escape(&o, &format!("keel {args:?}"));
    }
    let o = keel(&["--store", store, "show", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["run"]["result"].as_str().unwrap(),
        serde_json::json!({ "error": "\u{1b}[1A\u{1b}[2Kgotcha" }).to_string(),
        "--json keeps the text exact"
    );
}

#[test]
fn keel_events_lists_every_event_of_a_long_run() {
    use keel::store::{Expect, NewEvent, Transition};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let mut s = keel::Store::open(&db, keel::Durability::Full).unwrap();
    let mut run = keel::Run::new("r", "g", Default::default(), 0);
    s.create_run(
        &run,
        vec![NewEvent::new(
            keel::EventKind::RunStarted,
            None,
            serde_json::json!({}),
        )],
    )
    .unwrap();
    let mut events: Vec<NewEvent> = (0..1303)
        .map(|i| {
            NewEvent::new(
                keel::EventKind::PluginLog,
                None,
                serde_json::json!({ "i": i }),
            )
        })
        .collect();
    events.push(NewEvent::new(
        keel::EventKind::RunCompleted,
        None,
        serde_json::json!({}),
    ));
    let expect = Expect {
        status: run.status,
        owner: None,
        pending_approval: None,
    };
    run.status = keel::RunStatus::Completed;
    s.commit(Transition {
        expect,
        run,
        steps: vec![],
        approvals: vec![],
        events,
        model_calls: vec![],
    })
    .unwrap();
    let o = keel(&["--store", db.to_str().unwrap(), "events", "r"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1305, "every event, not the first 1,000");
    assert!(lines.last().unwrap().contains("run.completed"));
    let o = keel(&["--store", db.to_str().unwrap(), "events", "r", "--follow"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1305);
}

#[test]
fn store_paths_that_cannot_hold_a_store_say_why_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // A directory.
    for args in [
        vec!["--store", d, "runs"],
        vec!["--store", d, "cancel", "r"],
    ] {
        let o = keel(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("directory"), "{args:?}: {}", text(&o));
    }
    let o = keel(&["bench", "fanout", "--runs", "1", "--db", d]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // No permission (even root may not create files in sysfs).
    if let Some(cfg) = config(dir.path()) {
        let o = keel(&[
            "--store",
            "/sys/keel.db",
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--goal",
            "x",
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("permission denied"), "{}", text(&o));
    }
    // No store where one is looked for.
    let empty = tempfile::tempdir().unwrap();
    for args in [
        vec!["resume", "run_x"],
        vec!["show", "run_x"],
        vec!["approve", "run_x"],
    ] {
        let o = common::keel_bin()
            .args(&args)
            .current_dir(empty.path())
            .env_remove("KEEL_STORE")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let t = text(&o);
        assert!(
            t.contains("no Keel store at keel.db") && t.contains("--store"),
            "{t}"
        );
        assert!(!t.contains("never initialised"), "{t}");
    }
}

#[test]
fn a_store_on_a_read_only_file_system_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&ro)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI runs as root and must be able to mount a read-only tmpfs"
        );
        eprintln!("skipping: cannot mount a read-only file system here");
        return;
    }
    let db = ro.join("keel.db");
    let o = keel(&["--store", db.to_str().unwrap(), "cancel", "r"]);
    // The file does not exist: nothing to cancel, whatever the mount.
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = keel::Store::open(&db, keel::Durability::Full)
        .err()
        .unwrap();
    let _ = std::process::Command::new("umount").arg(&ro).status();
    assert!(err.to_string().contains("read-only file system"), "{err}");
    assert!(matches!(err, keel::StoreError::Unusable { .. }));
}

#[test]
fn a_goal_comes_from_a_file_or_standard_input_within_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = config(dir.path()) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let goal = "a goal\nwith two lines and ünïcode\n";
    let f = dir.path().join("goal.txt");
    std::fs::write(&f, goal).unwrap();
    let o = keel(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--goal-file",
        f.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let o = keel(&["--store", store.to_str().unwrap(), "runs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["goal"], goal);

    use std::io::Write;
    let mut child = common::keel_bin()
        .args([
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--goal-file",
            "-",
            "--json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from stdin")
        .unwrap();
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    let o = keel(&["--store", store.to_str().unwrap(), "runs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["goal"], "from stdin");

    std::fs::write(&f, "x".repeat((1 << 20) + 1)).unwrap();
    let before = std::fs::read(&store).unwrap();
    let o = keel(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--goal-file",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("over the limit"), "{}", text(&o));
    assert_eq!(
        std::fs::read(&store).unwrap(),
        before,
        "nothing was written"
    );
    let o = keel(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--goal",
        "x",
        "--goal-file",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "one goal only: {}", text(&o));
}

#[test]
fn a_run_whose_model_server_is_down_parks_and_the_operator_sees_why() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on the discard port: every attempt is refused.
    let Some(cfg_path) = common::wasm::llm_echo_config(
        dir.path(),
        "keel.toml",
        r#"provider = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "m"
max_retries = 1"#,
    ) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let store = store.to_str().unwrap();
    let o = keel(&["run", "--config", cfg_path.to_str().unwrap(), "--goal", "x"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        text(&o).contains("parked (model_unavailable)"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("keel resume"), "{}", text(&o));
    let runs = keel(&["--store", store, "runs"]);
    assert!(text(&runs).contains("parked"), "{}", text(&runs));
    assert!(text(&runs).contains("retry after"), "{}", text(&runs));
    let v: serde_json::Value =
        serde_json::from_slice(&keel(&["--store", store, "runs", "--json"]).stdout).unwrap();
    let id = v[0]["id"].as_str().unwrap().to_string();
    assert_eq!(v[0]["status"], "parked");
    assert!(v[0]["retry_at"].as_i64().is_some(), "{v}");
    let show = keel(&["--store", store, "show", &id]);
    assert!(text(&show).contains("retry:  after"), "{}", text(&show));
    assert!(
        text(&show).contains("cannot reach the model server"),
        "{}",
        text(&show)
    );
    // Still down: the resume parks it again, and nothing is charged.
    let o = keel(&[
        "--store",
        store,
        "resume",
        "--config",
        cfg_path.to_str().unwrap(),
        &id,
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&keel(&["--store", store, "show", &id, "--json"]).stdout).unwrap();
    assert_eq!(v["run"]["consecutive_failures"], 0, "{v}");
    assert_eq!(v["run"]["model_calls"], 0, "{v}");
    assert_eq!(v["model_calls"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(v["steps"].as_array().unwrap().len(), 1, "{v}");
    let o = keel(&["--store", store, "cancel", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&keel(&["--store", store, "show", &id, "--json"]).stdout).unwrap();
    assert_eq!(v["run"]["status"], "cancelled", "{v}");
    assert_eq!(v["run"]["retry_at"], serde_json::Value::Null, "{v}");
}

/// `keel verify` passes an untouched store and exits 1 naming the run,
/// the event and what is wrong once a row is edited; `keel export` writes
/// a run that `keel verify --file` checks without the store, and an
/// export edited or cut short is found too. A run that does not exist is
/// bad input (2), and an export never overwrites a file.
#[test]
fn verify_and_export_find_an_edited_journal_in_the_store_and_in_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = config(dir.path()) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let store = store.to_str().unwrap();
    let o = keel(&["run", "--config", cfg.to_str().unwrap(), "--goal", "x"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let runs = keel(&["--store", store, "runs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let id = v[0]["id"].as_str().unwrap().to_string();
    keel(&["--store", store, "approve", &id]);
    assert_eq!(
        keel(&["--store", store, "resume", &id]).status.code(),
        Some(4)
    );

    let o = keel(&["--store", store, "verify", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(&format!("ok      {id}")), "{}", text(&o));
    let o = keel(&["--store", store, "verify", "--all", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let head = v["runs"][0]["head"].as_str().unwrap().to_string();
    let o = keel(&["--store", store, "verify", "no_such_run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no_such_run"), "{}", text(&o));

    let file = dir.path().join("run.jsonl");
    let f = file.to_str().unwrap();
    let o = keel(&["--store", store, "export", &id, "--out", f]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = keel(&["--store", store, "export", &id, "--out", f]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an export never overwrites: {}",
        text(&o)
    );
    let o = keel(&["verify", "--file", f, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["runs"][0]["head"],
        head.as_str(),
        "the file holds the store's chain"
    );

    let exported = std::fs::read_to_string(&file).unwrap();
    let edited_file = dir.path().join("edited.jsonl");
    let edited = exported.replacen(
        "\"kind\":\"step.started\",\"data\":\"{}\"",
        "\"kind\":\"step.started\",\"data\":\"{\\\"x\\\":1}\"",
        1,
    );
    assert_ne!(edited, exported);
    std::fs::write(&edited_file, edited).unwrap();
    let o = keel(&["verify", "--file", edited_file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("edited at event"), "{}", text(&o));
    let cut = dir.path().join("cut.jsonl");
    let lines: Vec<&str> = exported.lines().collect();
    std::fs::write(&cut, lines[..lines.len() - 3].join("\n") + "\n").unwrap();
    let o = keel(&["verify", "--file", cut.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("truncated"), "{}", text(&o));

    let c = rusqlite::Connection::open(store).unwrap();
    let seq: i64 = c
        .query_row(
            "SELECT seq FROM events WHERE run_id=?1 AND kind='step.done' ORDER BY seq LIMIT 1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    c.execute(
        "UPDATE events SET data='{\"forged\":true}' WHERE seq=?1",
        [seq],
    )
    .unwrap();
    drop(c);
    let o = keel(&["--store", store, "verify", &id, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["runs"][0]["problem"], "edited", "{v}");
    assert_eq!(v["runs"][0]["seq"], seq, "{v}");
    let o = keel(&["--store", store, "verify", &id]);
    assert!(
        text(&o).contains(&format!("BROKEN  run {id}: edited at event {seq}")),
        "{}",
        text(&o)
    );
}

/// `keel prune`: a bad age, date or status is a usage error that changes
/// nothing; a dry run lists without removing; an export folder that
/// cannot be made keeps every run; a prune with `--export` removes the
/// finished runs (never the one still waiting), and the store and every
/// exported file verify afterwards.
#[test]
fn prune_removes_only_finished_runs_and_what_remains_and_its_exports_verify() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = config(dir.path()) else {
        return;
    };
    let cfg = cfg.to_str().unwrap();
    let store = dir.path().join("keel.db");
    let store = store.to_str().unwrap();
    let ids = || -> Vec<String> {
        let o = keel(&["--store", store, "runs", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    let mut failed = Vec::new();
    for _ in 0..2 {
        assert_eq!(
            keel(&["run", "--config", cfg, "--goal", "x"]).status.code(),
            Some(3)
        );
        let id = ids()[0].clone();
        keel(&["--store", store, "approve", &id]);
        assert_eq!(
            keel(&["--store", store, "resume", &id]).status.code(),
            Some(4)
        );
        failed.push(id);
    }
    assert_eq!(
        keel(&["run", "--config", cfg, "--goal", "x"]).status.code(),
        Some(3)
    );
    let waiting = ids()[0].clone();

    for (bad, says) in [
        (vec!["--finished-before", "yesterday"], "neither an age"),
        (vec!["--finished-before", "2026-02-30"], "neither an age"),
        (
            vec!["--finished-before", "0s", "--status", "running"],
            "has not finished",
        ),
        (
            vec!["--finished-before", "0s", "--status", "done"],
            "--status",
        ),
    ] {
        let mut args = vec!["--store", store, "prune"];
        args.extend(bad);
        let o = keel(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
    let o = keel(&[
        "--store",
        store,
        "prune",
        "--finished-before",
        "0s",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let listed: Vec<&str> = lines.iter().filter_map(|l| l["run_id"].as_str()).collect();
    assert_eq!(
        listed,
        failed.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(lines.last().unwrap()["runs"], 2, "{lines:?}");
    assert_eq!(ids().len(), 3, "a dry run removes nothing");

    let blocked = dir.path().join("a-file");
    std::fs::write(&blocked, "x").unwrap();
    let o = keel(&[
        "--store",
        store,
        "prune",
        "--finished-before",
        "0s",
        "--export",
        blocked.join("sub").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("export folder"), "{}", text(&o));
    assert_eq!(
        ids().len(),
        3,
        "nothing is pruned when exports cannot be written"
    );

    let out = dir.path().join("exports");
    let o = keel(&[
        "--store",
        store,
        "prune",
        "--finished-before",
        "0s",
        "--export",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("pruned 2 run(s)"), "{}", text(&o));
    assert_eq!(ids(), vec![waiting.clone()]);
    let o = keel(&["--store", store, "verify", "--all"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for id in &failed {
        let f = out.join(format!("{id}.jsonl"));
        let o = keel(&["verify", "--file", f.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let o = keel(&["--store", store, "show", id]);
        assert_ne!(o.status.code(), Some(0), "{id} is gone: {}", text(&o));
    }
}
