//! MCP servers as tools, end to end through the `keel` binary, against
//! servers no one here wrote: `@modelcontextprotocol/server-filesystem`
//! and `@modelcontextprotocol/server-everything` (installed by
//! `scripts/setup.sh --test` into scripts/mcp), and a fault server built on
//! the `mcp` package's own server API (tests/mcp/fault_server.py, run by
//! the Python of the virtualenv `target/tools/mcp-venv`). Without them the tests skip;
//! under `CI=true` they fail.

use crate::common;

use common::http::ServeProcess;

use common::wasm::{plugin_path, test_cache};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A file the tests need, or `None` (skip) when setup did not install it;
/// under `CI=true` a panic.
fn needed(p: PathBuf, what: &str) -> Option<PathBuf> {
    if p.exists() {
        return Some(p);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "{} is missing: `scripts/setup.sh --test` installs {what}, and CI must test against it",
            p.display()
        );
    }
    eprintln!(
        "skipped: {} is missing (scripts/setup.sh --test)",
        p.display()
    );
    None
}

fn npm_server(bin: &str) -> Option<String> {
    needed(
        root().join("scripts/mcp/node_modules/.bin").join(bin),
        "the npm MCP servers",
    )
    .map(|p| p.display().to_string())
}

/// The command of the fault server in `mode` ("" for none).
fn fault_server(mode: &str) -> Option<Vec<String>> {
    let py = needed(
        root().join("target/tools/mcp-venv/bin/python"),
        "the mcp package",
    )?;
    let script = root().join("host/tests/mcp/fault_server.py");
    let mut c = vec![py.display().to_string(), script.display().to_string()];
    if !mode.is_empty() {
        c.push(mode.to_string());
    }
    Some(c)
}

fn keel(args: &[&str]) -> Output {
    common::keel_bin().args(args).output().unwrap()
}

fn keel_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = common::keel_bin();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    common::output_text(o)
}

fn toml_list(items: &[String]) -> String {
    let q: Vec<String> = items
        .iter()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect();
    format!("[{}]", q.join(", "))
}

/// `keel mcp inspect --json` of `command`, pinning `expose`, its snapshot
/// kept where the tests' runs look.
fn inspect(command: &[String], expose: &[&str]) -> Value {
    let cache = test_cache();
    let mut args = vec![
        "mcp".to_string(),
        "inspect".into(),
        "--json".into(),
        "--cache-dir".into(),
        cache.display().to_string(),
    ];
    if !expose.is_empty() {
        args.push(format!("--expose={}", expose.join(",")));
    }
    args.push("--".into());
    args.extend(command.iter().cloned());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = keel(&a);
    assert_eq!(o.status.code(), Some(0), "inspect: {}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A `[[tools]]` block for a stdio server.
fn server_block(command: &[String], expose: &[&str], pin: &str, more: &str) -> String {
    server_block_env(command, &[], expose, pin, more)
}

/// [`server_block`] with `env` given to the server.
fn server_block_env(
    command: &[String],
    env: &[(&str, &str)],
    expose: &[&str],
    pin: &str,
    more: &str,
) -> String {
    let e: Vec<String> = expose.iter().map(|s| s.to_string()).collect();
    let vars: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k} = {}", serde_json::to_string(v).unwrap()))
        .collect();
    format!(
        "[[tools]]\nmcp = {{ env = {{ {} }}, command = {} }}\nexpose = {}\npin = \"{pin}\"\n{more}\n",
        vars.join(", "),
        toml_list(command),
        toml_list(&e)
    )
}

/// Submits a run of `cfg` to the store a `keel serve` drives and waits
/// until `n` runs have completed.
fn submit_and_wait(store: &str, cfg: &Path, n: usize) {
    let o = keel(&[
        "--store",
        store,
        "submit",
        "--config",
        cfg.to_str().unwrap(),
        "--goal",
        "g",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    common::http::wait_for("the run to complete", || {
        let o = keel(&["--store", store, "runs", "--json"]);
        let runs: Value = serde_json::from_slice(&o.stdout).ok()?;
        let done = runs
            .as_array()?
            .iter()
            .filter(|r| r["status"] == "completed")
            .count();
        (done == n).then_some(())
    });
}

/// The distinct pids the fault server wrote to `file`.
fn pids_in(file: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A config in `dir`: the scripted agent makes `script`'s calls (TOML
/// entries), the rules policy applies `rules`, and `tools` are the
/// `[[tools]]` blocks. The compile cache (where the pinned snapshots are
/// kept too) is the one every test shares.
fn config(dir: &Path, script: &str, rules: &str, tools: &str) -> Option<PathBuf> {
    let agent = plugin_path("agent-scripted-rust.wasm")?;
    let policy = plugin_path("policy-rules-rust.wasm")?;
    let cfg = format!(
        r#"store = "keel.db"
[engine]
cache_dir = "{cache}"
[limits]
max_consecutive_failures = 20
[agent]
component = "{agent}"
config = {{ script = [ {script} ] }}
[policy]
component = "{policy}"
config = {{ rules = [ {rules} ] }}
{tools}
"#,
        cache = test_cache().display(),
        agent = agent.display(),
        policy = policy.display(),
    );
    let p = dir.join("keel.toml");
    std::fs::write(&p, cfg).unwrap();
    Some(p)
}

const ALLOW_ALL: &str = r#"{ effect = ["read-only", "idempotent", "local-mutation", "remote-mutation", "destructive"], action = "allow" }"#;

/// `keel run --json`: the exit code and the last line (the outcome).
fn run(cfg: &Path, env: &[(&str, &str)]) -> (Option<i32>, Value, String) {
    let o = keel_env(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--goal",
            "g",
            "--json",
        ],
        env,
    );
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (o.status.code(), last, text(&o))
}

fn show(dir: &Path, run: &str) -> Value {
    let db = dir.join("keel.db");
    let o = keel(&["--store", db.to_str().unwrap(), "show", run, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Each step's tool and observation content, in order.
fn observations(shown: &Value) -> Vec<(String, String, String)> {
    shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s["call"].is_null())
        .map(|s| {
            (
                s["call"]["tool"].as_str().unwrap_or("").to_string(),
                s["observation"]["kind"].as_str().unwrap_or("").to_string(),
                s["observation"]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

fn runs_in(dir: &Path) -> usize {
    let db = dir.join("keel.db");
    if !db.exists() {
        return 0;
    }
    let o = keel(&["--store", db.to_str().unwrap(), "runs", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    v.as_array().map_or(0, Vec::len)
}

#[test]
fn the_filesystem_server_reads_writes_and_lists_with_the_write_approved() {
    let Some(fs_bin) = npm_server("mcp-server-filesystem") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("before.txt"), "was here").unwrap();
    let data = std::fs::canonicalize(&data).unwrap();
    // A relative program path is relative to the config file.
    std::fs::create_dir_all(dir.path().join("bin")).unwrap();
    std::os::unix::fs::symlink(&fs_bin, dir.path().join("bin/fs-server")).unwrap();
    let command = vec!["bin/fs-server".to_string(), data.display().to_string()];
    let inspected = vec![fs_bin, data.display().to_string()];
    let expose = ["list_directory", "read_text_file", "write_file"];
    let found = inspect(&inspected, &expose);
    let pin = found["pin"].as_str().unwrap();
    let note = data.join("note.txt");
    let script = format!(
        r#"{{ call = {{ tool = "write_file", arguments = {{ path = "{n}", content = "written by a Keel run" }} }} }},
           {{ call = {{ tool = "read_text_file", arguments = {{ path = "{n}" }} }} }},
           {{ call = {{ tool = "list_directory", arguments = {{ path = "{d}" }} }} }},
           {{ complete = {{ ok = true }} }}"#,
        n = note.display(),
        d = data.display()
    );
    let rules = r#"{ effect = "read-only", action = "allow" }, { effect = "destructive", action = "require-approval", reason = "writes need an operator" }"#;
    let tools = server_block(
        &command,
        &expose,
        pin,
        r#"effect = { list_directory = "read-only", read_text_file = "read-only" }"#,
    );
    let Some(cfg) = config(dir.path(), &script, rules, &tools) else {
        return;
    };
    let (code, out, all) = run(&cfg, &[]);
    assert_eq!(code, Some(3), "the write waits for an approval: {all}");
    assert!(!note.exists(), "nothing is written before the approval");
    let run_id = out["run"]["id"].as_str().unwrap().to_string();
    let db = dir.path().join("keel.db");
    let store = db.to_str().unwrap();
    let o = keel(&["--store", store, "approve", &run_id, "--by", "ops"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = keel(&["--store", store, "resume", &run_id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "written by a Keel run"
    );
    let obs = observations(&show(dir.path(), &run_id));
    assert_eq!(obs.len(), 3, "{obs:?}");
    assert!(obs.iter().all(|(_, k, _)| k == "tool_result"), "{obs:?}");
    assert!(obs[1].2.contains("written by a Keel run"), "{obs:?}");
    assert!(
        obs[2].2.contains("note.txt") && obs[2].2.contains("before.txt"),
        "{obs:?}"
    );
}

#[test]
fn the_everything_server_echoes_adds_runs_long_and_notifies() {
    let Some(bin) = npm_server("mcp-server-everything") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = vec![bin];
    let expose = [
        "echo",
        "get-env",
        "get-structured-content",
        "get-sum",
        "toggle-simulated-logging",
        "trigger-long-running-operation",
    ];
    let found = inspect(&command, &expose);
    let script = r#"{ call = { tool = "echo", arguments = { message = "hello from keel" } } },
        { call = { tool = "get-sum", arguments = { a = 2, b = 3 } } },
        { call = { tool = "toggle-simulated-logging", arguments = {} } },
        { call = { tool = "trigger-long-running-operation", arguments = { duration = 2, steps = 4 } } },
        { call = { tool = "get-structured-content", arguments = { location = "New York" } } },
        { call = { tool = "get-env", arguments = {} } },
        { complete = { ok = true } }"#;
    let tools = server_block_env(
        &command,
        &[("KEEL_GREETING", "configured")],
        &expose,
        found["pin"].as_str().unwrap(),
        "",
    );
    let Some(cfg) = config(dir.path(), script, ALLOW_ALL, &tools) else {
        return;
    };
    let (code, out, all) = run(&cfg, &[("KEEL_TEST_SECRET", "do-not-pass-me")]);
    assert_eq!(code, Some(0), "{all}");
    let obs = observations(&show(dir.path(), out["run"]["id"].as_str().unwrap()));
    assert!(obs.iter().all(|(_, k, _)| k == "tool_result"), "{obs:?}");
    assert!(obs[0].2.contains("hello from keel"), "{obs:?}");
    assert!(obs[1].2.contains('5'), "{obs:?}");
    assert!(
        obs[3].2.contains("completed"),
        "the long call finished: {obs:?}"
    );
    assert!(
        obs[4].2.contains("structuredContent"),
        "structured content is kept: {obs:?}"
    );
    assert!(
        obs[5].2.contains("KEEL_GREETING") && obs[5].2.contains("configured"),
        "the configured variable reaches the server: {obs:?}"
    );
    assert!(
        !obs[5].2.contains("do-not-pass-me"),
        "Keel's own environment does not: {obs:?}"
    );
}

#[test]
fn a_streamable_http_server_is_used_by_url() {
    let Some(bin) = npm_server("mcp-server-everything") else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let url = format!("http://127.0.0.1:{port}/mcp");
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed().as_secs() < 60,
            "the HTTP server did not listen"
        );
        if let Ok(Some(s)) = server.try_wait() {
            panic!("the HTTP server exited: {s}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _server = Kill(server);
    let dir = tempfile::tempdir().unwrap();
    let cache = test_cache().display().to_string();
    let o = keel(&[
        "mcp",
        "inspect",
        "--json",
        "--cache-dir",
        &cache,
        "--expose=echo",
        "--url",
        &url,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let found: Value = serde_json::from_slice(&o.stdout).unwrap();
    let tools = format!(
        "[[tools]]\nmcp = {{ url = \"{url}\" }}\nexpose = [\"echo\"]\npin = \"{}\"\n",
        found["pin"].as_str().unwrap()
    );
    let script =
        r#"{ call = { tool = "echo", arguments = { message = "over http" } } }, { complete = 1 }"#;
    let Some(cfg) = config(dir.path(), script, ALLOW_ALL, &tools) else {
        return;
    };
    let (code, out, all) = run(&cfg, &[]);
    assert_eq!(code, Some(0), "{all}");
    let obs = observations(&show(dir.path(), out["run"]["id"].as_str().unwrap()));
    assert!(obs[0].2.contains("over http"), "{obs:?}");
}

#[test]
fn a_crash_a_hang_garbage_and_a_flood_fail_only_their_call() {
    let Some(command) = fault_server("") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let expose = ["crash", "echo", "flood", "garbage", "hang"];
    let found = inspect(&command, &expose);
    let echo = |n: u32| {
        format!(r#"{{ call = {{ tool = "echo", arguments = {{ text = "alive {n}" }} }} }}"#)
    };
    let script = format!(
        r#"{{ call = {{ tool = "crash", arguments = {{}} }} }}, {},
           {{ call = {{ tool = "hang", arguments = {{}} }} }}, {},
           {{ call = {{ tool = "garbage", arguments = {{}} }} }}, {},
           {{ call = {{ tool = "flood", arguments = {{}} }} }}, {},
           {{ complete = 1 }}"#,
        echo(1),
        echo(2),
        echo(3),
        echo(4)
    );
    let tools = server_block(
        &command,
        &expose,
        found["pin"].as_str().unwrap(),
        // Room for a restart: the server's Python start alone takes about
        // a second on an idle machine, and the deadline covers it.
        "limits = { deadline_ms = 5000 }",
    );
    let Some(cfg) = config(dir.path(), &script, ALLOW_ALL, &tools) else {
        return;
    };
    let (code, out, all) = run(&cfg, &[]);
    assert_eq!(code, Some(0), "{all}");
    let obs = observations(&show(dir.path(), out["run"]["id"].as_str().unwrap()));
    assert_eq!(obs.len(), 8, "{obs:?}");
    let failed = |i: usize, why: &str| {
        assert_eq!(obs[i].1, "tool_error", "{:?}", obs[i]);
        assert!(obs[i].2.contains(why), "{:?} should say {why:?}", obs[i]);
        assert!(
            obs[i].2.contains("started again"),
            "{:?} says what happens next",
            obs[i]
        );
    };
    failed(0, "closed the connection");
    assert!(
        obs[0].2.contains("crashing on purpose"),
        "the crash quotes the server's stderr: {:?}",
        obs[0]
    );
    failed(2, "no answer within 5000 ms");
    failed(4, "not JSON-RPC");
    assert!(
        obs[4].2.contains("this is not JSON-RPC at all"),
        "{:?}",
        obs[4]
    );
    failed(6, "more than 1000 notifications");
    for (i, n) in [(1, 1), (3, 2), (5, 3), (7, 4)] {
        assert_eq!(
            obs[i].1, "tool_result",
            "restarted for the next call: {:?}",
            obs[i]
        );
        assert!(obs[i].2.contains(&format!("alive {n}")), "{:?}", obs[i]);
    }
}

#[test]
fn a_schema_that_changes_between_two_calls_is_refused() {
    let Some(command) = fault_server("") else {
        return;
    };
    for mode in ["fail", "drop"] {
        let dir = tempfile::tempdir().unwrap();
        let expose = ["echo", "mutate"];
        let found = inspect(&command, &expose);
        let script = r#"{ call = { tool = "echo", arguments = { text = "first" } } },
            { call = { tool = "mutate", arguments = {} } },
            { call = { tool = "echo", arguments = { text = "second" } } },
            { complete = 1 }"#;
        let tools = server_block(
            &command,
            &expose,
            found["pin"].as_str().unwrap(),
            &format!("on_pin_mismatch = \"{mode}\""),
        );
        let Some(cfg) = config(dir.path(), script, ALLOW_ALL, &tools) else {
            return;
        };
        let (code, out, all) = run(&cfg, &[]);
        let obs = observations(&show(dir.path(), out["run"]["id"].as_str().unwrap()));
        assert_eq!(obs[0].1, "tool_result", "{obs:?}");
        assert_eq!(obs[2].1, "tool_error", "{mode}: {obs:?}");
        assert!(
            obs[2]
                .2
                .contains("\\\"echo\\\" changed since its pin was checked")
                && obs[2].2.contains("its description changed"),
            "{mode}: names the tool and the change: {obs:?}"
        );
        if mode == "fail" {
            assert_eq!(code, Some(4), "{all}");
            assert_eq!(out["run"]["status"], "failed", "{out}");
            assert_eq!(out["run"]["reason"], "tool_changed", "{out}");
        } else {
            assert_eq!(code, Some(0), "the run goes on without it: {all}");
        }
    }
}

#[test]
fn after_a_crash_an_idempotent_call_is_retried_and_a_destructive_one_waits() {
    let Some(command) = fault_server("") else {
        return;
    };
    for (effect, retried) in [("idempotent", true), ("", false)] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("count.log");
        let expose = ["count"];
        let found = inspect(&command, &expose);
        let script =
            r#"{ call = { tool = "count", arguments = { text = "once" } } }, { complete = 1 }"#;
        let effect_line = if effect.is_empty() {
            String::new()
        } else {
            format!("effect = {{ count = \"{effect}\" }}")
        };
        // The server is told where to count through its configured env.
        let log_path = log.display().to_string();
        let tools = server_block_env(
            &command,
            &[("FAULT_LOG", &log_path)],
            &expose,
            found["pin"].as_str().unwrap(),
            &effect_line,
        );
        let Some(cfg) = config(dir.path(), script, ALLOW_ALL, &tools) else {
            return;
        };
        let (code, _, all) = run(&cfg, &[("KEEL_TEST_CRASH_AT", "tool.ran")]);
        assert_ne!(code, Some(0), "the process aborted after the call: {all}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "once\n");
        let db = dir.path().join("keel.db");
        let o = keel(&["--store", db.to_str().unwrap(), "runs", "--json"]);
        let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
        let run_id = runs[0]["id"].as_str().unwrap().to_string();
        let o = keel(&["--store", db.to_str().unwrap(), "resume", &run_id]);
        let calls = std::fs::read_to_string(&log).unwrap();
        if retried {
            assert_eq!(o.status.code(), Some(0), "{}", text(&o));
            assert_eq!(calls, "once\nonce\n", "retried once");
        } else {
            assert_eq!(
                o.status.code(),
                Some(3),
                "waits for an operator: {}",
                text(&o)
            );
            assert_eq!(calls, "once\n", "not run again");
            let shown = show(dir.path(), &run_id);
            assert_eq!(shown["approvals"][0]["kind"], "interrupted_side_effect");
        }
    }
}

/// Each bad input: exit 2 at start, an error naming the server (and the
/// tool), and no run in the store.
#[test]
fn bad_servers_and_pins_are_refused_at_start_with_nothing_run() {
    let Some(good) = fault_server("") else {
        return;
    };
    let Some(rugged) = fault_server("--rug-pulled") else {
        return;
    };
    let Some(empty) = fault_server("--no-tools") else {
        return;
    };
    let Some(bad) = fault_server("--bad-schema") else {
        return;
    };
    let Some(dead) = fault_server("--die-at-start") else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let zero = format!("sha256:{}", "0".repeat(64));
    let echo_pin = || {
        inspect(&good, &["echo"])["pin"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cases: Vec<(&str, Box<dyn Fn(&Path) -> String>, Vec<&str>)> = vec![
        (
            "wrong pin",
            Box::new(|_: &Path| server_block(&rugged, &["echo"], &echo_pin(), "")),
            vec![
                "tools[0]",
                "pin does not match",
                "tool \"echo\": its description changed",
            ],
        ),
        (
            "wrong pin, no snapshot",
            Box::new(|_: &Path| server_block(&good, &["echo"], &zero, "")),
            vec!["tools[0]", "pin does not match", "keel mcp inspect"],
        ),
        (
            "no tools",
            Box::new(|_: &Path| server_block(&empty, &["echo"], &zero, "")),
            vec!["tools[0]", "lists no tools"],
        ),
        (
            "unknown exposed tool",
            Box::new(|_: &Path| server_block(&good, &["echo", "teleport"], &zero, "")),
            vec![
                "tools[0]",
                "\"teleport\"",
                "not one the server lists",
                "echo",
            ],
        ),
        (
            "nothing exposed",
            Box::new(|_: &Path| server_block(&good, &[], &zero, "")),
            vec!["tools[0]", "no tool is exposed", "expose"],
        ),
        (
            "two tools with one name",
            Box::new(|_: &Path| {
                let pin = echo_pin();
                format!(
                    "{}{}",
                    server_block(&good, &["echo"], &pin, ""),
                    server_block(&good, &["echo"], &pin, "")
                )
            }),
            vec!["tools[1]", "two tools are named \"echo\""],
        ),
        (
            "a program that is not there",
            Box::new(|_: &Path| {
                server_block(&["/nonexistent/mcp-server".to_string()], &["x"], &zero, "")
            }),
            vec!["tools[0]", "cannot be started", "/nonexistent/mcp-server"],
        ),
        (
            "an empty program name",
            Box::new(|_: &Path| server_block(&["".to_string()], &["x"], &zero, "")),
            vec!["tools[0].mcp.command", "empty"],
        ),
        (
            "a server that dies at start",
            Box::new(|_: &Path| server_block(&dead, &["x"], &zero, "")),
            vec![
                "tools[0]",
                "handshake",
                "cannot open its database (on purpose)",
            ],
        ),
        (
            "an unreachable URL",
            Box::new(|_: &Path| {
                format!("[[tools]]\nmcp = {{ url = \"http://127.0.0.1:1/mcp\", start_timeout_ms = 5000 }}\nexpose = [\"x\"]\npin = \"{zero}\"\n")
            }),
            vec!["tools[0]", "http://127.0.0.1:1/mcp", "handshake"],
        ),
        (
            "a schema that is not JSON Schema",
            Box::new(|_: &Path| {
                server_block(&bad, &["broken"], &zero, "on_pin_mismatch = \"drop\"")
            }),
            vec!["tools[0]", "\"broken\"", "not a valid JSON Schema", "strng"],
        ),
        (
            "a malformed pin",
            Box::new(|_: &Path| server_block(&good, &["echo"], "md5:abc", "")),
            vec!["tools[0].pin", "sha256:"],
        ),
    ];
    let script = r#"{ call = { tool = "echo", arguments = { text = "x" } } }, { complete = 1 }"#;
    for (what, tools, says) in cases {
        let dir = scratch.path().join(what.replace([' ', ','], "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let Some(cfg) = config(&dir, script, ALLOW_ALL, &tools(&dir)) else {
            return;
        };
        let (code, _, all) = run(&cfg, &[]);
        assert_eq!(code, Some(2), "{what}: {all}");
        for s in says {
            assert!(all.contains(s), "{what}: should say {s:?}: {all}");
        }
        assert_eq!(runs_in(&dir), 0, "{what}: nothing was run");
    }
}

/// An approval is given for the schemas pinned when it was asked for: if
/// the operator re-pins the server to changed schemas before resuming, the
/// approved call is not run on it.
#[test]
fn an_approval_given_for_one_schema_is_not_used_for_another() {
    let Some(good) = fault_server("") else {
        return;
    };
    let Some(rugged) = fault_server("--rug-pulled") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("count.log");
    let expose = ["count", "echo"];
    let log_path = log.display().to_string();
    let with_log = |command: &[String], pin: &str| {
        server_block_env(command, &[("FAULT_LOG", &log_path)], &expose, pin, "")
    };
    let before = inspect(&good, &expose)["pin"].as_str().unwrap().to_string();
    let after = inspect(&rugged, &expose)["pin"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(before, after);
    let script =
        r#"{ call = { tool = "count", arguments = { text = "approved" } } }, { complete = 1 }"#;
    let rules =
        r#"{ tool = "count", action = "require-approval", reason = "counting needs an operator" }"#;
    let Some(cfg) = config(dir.path(), script, rules, &with_log(&good, &before)) else {
        return;
    };
    let (code, out, all) = run(&cfg, &[]);
    assert_eq!(code, Some(3), "{all}");
    assert_eq!(out["pending"]["tool_pin"], before.as_str(), "{out}");
    let run_id = out["run"]["id"].as_str().unwrap().to_string();
    let db = dir.path().join("keel.db");
    let store = db.to_str().unwrap();
    let o = keel(&["--store", store, "approve", &run_id, "--by", "ops"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The server changed, and the operator pinned the new schemas.
    let Some(cfg) = config(dir.path(), script, rules, &with_log(&rugged, &after)) else {
        return;
    };
    let o = keel(&[
        "--store",
        store,
        "resume",
        &run_id,
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !log.exists(),
        "the approved call did not run on other schemas"
    );
    let obs = observations(&show(dir.path(), &run_id));
    assert_eq!(obs[0].1, "denied", "{obs:?}");
    assert!(
        obs[0].2.contains(&before) && obs[0].2.contains(&after),
        "{obs:?}"
    );
    let o = keel(&["--store", store, "verify", &run_id]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the journal and the approval still verify: {}",
        text(&o)
    );
}

/// `keel serve` drives runs with MCP tools, and its runs share one server
/// process (one handshake, not one per run).
#[test]
fn keel_serve_drives_runs_that_share_one_server_process() {
    let Some(good) = fault_server("") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("count.log");
    let pids = dir.path().join("pids.log");
    let expose = ["count"];
    let pin = inspect(&good, &expose)["pin"].as_str().unwrap().to_string();
    let (log_path, pids_path) = (log.display().to_string(), pids.display().to_string());
    let tools = server_block_env(
        &good,
        &[("FAULT_LOG", &log_path), ("FAULT_PIDS", &pids_path)],
        &expose,
        &pin,
        "effect = { count = \"idempotent\" }",
    );
    let script =
        r#"{ call = { tool = "count", arguments = { text = "served" } } }, { complete = 1 }"#;
    let Some(cfg) = config(dir.path(), script, ALLOW_ALL, &tools) else {
        return;
    };
    let db = dir.path().join("keel.db");
    let store = db.to_str().unwrap();
    // One run after another: each run's start finds the server already up.
    let server = ServeProcess::start(store, &["--config", cfg.to_str().unwrap()]);
    for n in 1..=3 {
        submit_and_wait(store, &cfg, n);
    }
    let log_text = server.terminate();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "served\nserved\nserved\n",
        "{log_text}"
    );
    let seen = pids_in(&pids);
    assert_eq!(
        seen.len(),
        1,
        "one server process for the three runs: {seen:?}"
    );
}

/// A server that exits between two runs of `keel serve` (idle, no call
/// in flight) is started again for the next run instead of failing it.
#[test]
fn a_server_that_exits_while_idle_is_started_again_for_the_next_run() {
    let Some(good) = fault_server("") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids.log");
    let expose = ["quit"];
    let pin = inspect(&good, &expose)["pin"].as_str().unwrap().to_string();
    let pids_path = pids.display().to_string();
    let tools = server_block_env(&good, &[("FAULT_PIDS", &pids_path)], &expose, &pin, "");
    let script = r#"{ call = { tool = "quit", arguments = {} } }, { complete = 1 }"#;
    let Some(cfg) = config(dir.path(), script, ALLOW_ALL, &tools) else {
        return;
    };
    let db = dir.path().join("keel.db");
    let store = db.to_str().unwrap();
    let server = ServeProcess::start(store, &["--config", cfg.to_str().unwrap()]);
    for n in 1..=2 {
        submit_and_wait(store, &cfg, n);
        // The server exits 50 ms after answering.
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let log = server.terminate();
    let seen = pids_in(&pids);
    assert_eq!(
        seen.len(),
        2,
        "a fresh server for the second run: {seen:?} {log}"
    );
}
