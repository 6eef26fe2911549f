//! OpenTelemetry traces: a run paused for an approval and resumed in a
//! second process reaches a real receiver (Arize Phoenix, started by
//! `scripts/phoenix.sh`) as one trace whose spans, read back through
//! Phoenix's own API, match the journal; and a collector that refuses,
//! hangs or answers 500 never blocks or fails a run, and is logged once
//! per interval, not once per span.

use crate::common;

use common::wasm::plugin_path;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn keel(store: &Path, args: &[&str]) -> Output {
    common::keel_bin()
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("KEEL_STORE")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    common::output_text(o)
}

/// Phoenix's base URL, started once per test binary.
fn phoenix() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/phoenix.sh");
        let out = std::process::Command::new(script)
            .arg("start")
            .output()
            .expect("running scripts/phoenix.sh start");
        assert!(
            out.status.success(),
            "scripts/phoenix.sh start failed (Phoenix is part of the test suite; scripts/setup.sh --test installs it): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// agent-llm over the stub model: one write (which the policy sends to an
/// operator), then the answer; `[telemetry]` pointing at `endpoint`.
fn config(dir: &Path, endpoint: &str, model: &str) -> Option<PathBuf> {
    let agent = plugin_path("agent-llm-rust.wasm")?;
    let policy = plugin_path("policy-rules-rust.wasm")?;
    let fs = plugin_path("tool-fs-rust.wasm")?;
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let text = format!(
        r#"
[engine]
cache_dir = "{cache}"
[model]
provider = "stub"
{model}
[agent]
component = "{agent}"
[policy]
component = "{policy}"
[policy.config]
rules = [
  {{ tool = "fs_read", action = "allow" }},
  {{ effect = ["local-mutation", "remote-mutation", "destructive"], action = "require-approval", reason = "writes need an operator" }},
]
[[tools]]
component = "{fs}"
config = {{ root = "/workspace" }}
grant = {{ dirs = [{{ host = "{work}", guest = "/workspace", mode = "rw" }}] }}
[telemetry]
otlp_endpoint = "{endpoint}"
"#,
        cache = common::wasm::test_cache().display(),
        agent = agent.display(),
        policy = policy.display(),
        fs = fs.display(),
        work = work.display(),
    );
    let path = dir.join("keel.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

const ONE_WRITE: &str =
    r#"tool_call = { tool = "fs_write", arguments = { path = "a.txt", content = "x" } }"#;

fn get_json(url: &str) -> serde_json::Value {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let r = common::http::request(host.parse().unwrap(), "GET", path, None, &[], None);
    serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null)
}

/// The spans of `trace` in Phoenix, once its run span is there (30 s at
/// most).
fn trace_spans(url: &str, trace: &str) -> Vec<serde_json::Value> {
    let since = Instant::now();
    loop {
        let v = get_json(&format!(
            "{url}/v1/projects/default/spans?trace_id={trace}&limit=100"
        ));
        let spans = v["data"].as_array().cloned().unwrap_or_default();
        if spans
            .iter()
            .any(|s| s["name"].as_str().unwrap_or("").starts_with("invoke_agent"))
        {
            return spans;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "no run span reached Phoenix: {v}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn attr<'a>(span: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    &span["attributes"][key]
}

#[test]
fn a_run_resumed_after_its_approval_reaches_phoenix_as_one_trace_that_matches_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let url = phoenix();
    let Some(cfg) = config(dir.path(), url, ONE_WRITE) else {
        return;
    };
    let cfg = cfg.to_str().unwrap();
    let store = dir.path().join("keel.db");
    let o = keel(&store, &["run", "-c", cfg, "-g", "write a.txt", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let runs: serde_json::Value =
        serde_json::from_slice(&keel(&store, &["runs", "--json"]).stdout).unwrap();
    let id = runs[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        keel(&store, &["approve", &id, "--by", "ops"]).status.code(),
        Some(0)
    );
    let o = keel(&store, &["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // The trace id is stored with the run.
    let shown: serde_json::Value =
        serde_json::from_slice(&keel(&store, &["show", &id, "--json"]).stdout).unwrap();
    let meta: serde_json::Value =
        serde_json::from_str(shown["run"]["meta"].as_str().unwrap()).unwrap();
    let trace = meta["trace_id"]
        .as_str()
        .expect("a trace id in the run's meta")
        .to_string();
    assert_eq!(trace.len(), 32);

    // Read back through Phoenix's API once the run's own span is there.
    let spans = trace_spans(url, &trace);
    let named = |prefix: &str| -> Vec<&serde_json::Value> {
        spans
            .iter()
            .filter(|s| s["name"].as_str().unwrap_or("") == prefix)
            .collect()
    };
    let root = named("invoke_agent agent-llm-rust");
    assert_eq!(root.len(), 1, "one run span: {spans:#?}");
    let root = root[0];
    let root_id = root["context"]["span_id"].as_str().unwrap();
    assert!(root["parent_id"].is_null(), "{root}");
    assert_eq!(root["status_code"], "OK", "{root}");
    assert_eq!(root["span_kind"], "AGENT", "{root}");
    assert_eq!(attr(root, "gen_ai.conversation.id"), id.as_str());
    for s in &spans {
        assert_eq!(s["context"]["trace_id"], trace.as_str(), "{s}");
        assert_eq!(attr(s, "gen_ai.conversation.id"), id.as_str(), "{s}");
        if s != root {
            assert_eq!(
                s["parent_id"], root_id,
                "every span is a child of the run's: {s}"
            );
        }
    }

    // Model calls: as many as the journal holds, with its token counts.
    let c = rusqlite::Connection::open(&store).unwrap();
    let (calls, input, output): (i64, i64, i64) = c
        .query_row(
            "SELECT count(*), sum(prompt_tokens), sum(completion_tokens) FROM model_calls WHERE run_id=?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let chats = named("chat stub");
    assert_eq!(chats.len() as i64, calls, "{spans:#?}");
    assert_eq!(calls, 2);
    let sum = |key: &str| -> i64 { chats.iter().map(|s| attr(s, key).as_i64().unwrap()).sum() };
    assert_eq!(sum("gen_ai.usage.input_tokens"), input);
    assert_eq!(sum("gen_ai.usage.output_tokens"), output);
    for s in &chats {
        // Phoenix reads a GenAI chat span as a model call.
        assert_eq!(s["span_kind"], "LLM", "{s}");
        assert_eq!(attr(s, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(s, "gen_ai.provider.name"), "stub");
        assert_eq!(attr(s, "gen_ai.request.model"), "stub");
    }

    // The tool call ran once, after the wait for the operator; the steps'
    // plugin calls are there, in the first process and the second.
    let tools = named("execute_tool fs_write");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    assert_eq!(attr(tools[0], "gen_ai.tool.name"), "fs_write");
    assert_eq!(tools[0]["span_kind"], "TOOL", "{}", tools[0]);
    assert!(attr(tools[0], "gen_ai.tool.call.id").as_str().is_some());
    let waits = named("await_approval fs_write");
    assert_eq!(waits.len(), 1, "{spans:#?}");
    assert_eq!(attr(waits[0], "keel.approval.status"), "approved");
    assert_eq!(attr(waits[0], "keel.approval.decided_by"), "ops");
    let steps: i64 = c
        .query_row("SELECT count(*) FROM steps WHERE run_id=?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(
        named("decide agent-llm-rust").len() as i64,
        steps,
        "{spans:#?}"
    );
    let evaluated = named("evaluate policy-rules-rust");
    assert_eq!(evaluated.len(), 1, "{spans:#?}");
    assert_eq!(
        attr(evaluated[0], "keel.policy.verdict"),
        "require_approval"
    );
}

/// A listener that accepts and then does `serve` with each connection.
fn collector(serve: fn(std::net::TcpStream)) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || serve(c));
        }
    });
    format!("http://{addr}")
}

fn answer_500(mut c: std::net::TcpStream) {
    let mut buf = [0u8; 65536];
    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = c.read(&mut buf);
    let _ = c.write_all(
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\nconnection: close\r\n\r\noops",
    );
}

fn hang(c: std::net::TcpStream) {
    std::thread::sleep(Duration::from_secs(120));
    drop(c);
}

#[test]
fn a_collector_that_refuses_hangs_or_fails_never_blocks_or_fails_a_run() {
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    // Six model calls of 300 ms each: several export rounds in one run.
    let slow = r#"latency_ms = 300
tool_call = { tool = "fs_write", arguments = { path = "a.txt", content = "x" }, times = 6 }
[limits]
max_identical_calls = 0"#;
    for (what, endpoint, says) in [
        ("refused", refused, Some("cannot send spans")),
        ("answering 500", collector(answer_500), Some("answered 500")),
        ("hanging", collector(hang), None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let Some(cfg) = config(dir.path(), &endpoint, slow) else {
            return;
        };
        let text_cfg = std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("action = \"require-approval\"", "action = \"allow\"");
        std::fs::write(&cfg, text_cfg).unwrap();
        let store = dir.path().join("keel.db");
        let t0 = Instant::now();
        let o = keel(&store, &["run", "-c", cfg.to_str().unwrap(), "-g", "write"]);
        let took = t0.elapsed();
        assert_eq!(o.status.code(), Some(0), "{what}: {}", text(&o));
        // 1.8 s of model calls, up to 5 s of flushing at exit, and slack.
        assert!(took < Duration::from_secs(15), "{what}: took {took:?}");
        let warnings = String::from_utf8_lossy(&o.stderr)
            .lines()
            .filter(|l| l.contains("telemetry:"))
            .count();
        if let Some(says) = says {
            assert!(text(&o).contains(says), "{what}: {}", text(&o));
            assert_eq!(
                warnings,
                1,
                "{what}: logged once, not per span or export: {}",
                text(&o)
            );
        }
        let c = rusqlite::Connection::open(&store).unwrap();
        let calls: i64 = c
            .query_row("SELECT count(*) FROM model_calls", [], |r| r.get(0))
            .unwrap();
        assert_eq!(calls, 7, "{what}");
    }

    // An endpoint that is not a URL is refused before anything runs.
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = config(dir.path(), "ftp://nowhere", ONE_WRITE) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let o = keel(&store, &["run", "-c", cfg.to_str().unwrap(), "-g", "write"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("otlp_endpoint"), "{}", text(&o));
    assert!(!store.exists(), "nothing was stored");
}

/// `keel serve` traces the runs it drives: a run submitted through the API
/// and approved through it reaches Phoenix as one trace under its run
/// span, with its model calls and tool call.
#[test]
fn a_run_driven_by_keel_serve_reaches_phoenix_as_one_trace() {
    let dir = tempfile::tempdir().unwrap();
    let url = phoenix();
    let Some(cfg) = config(dir.path(), url, ONE_WRITE) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let srv =
        common::http::ServeProcess::start(store.to_str().unwrap(), &["-c", cfg.to_str().unwrap()]);
    let r = srv.post("/api/runs", None, r#"{"goal":"write a.txt"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let run = r.json();
    let id = run["id"].as_str().unwrap().to_string();
    let meta: serde_json::Value = serde_json::from_str(run["meta"].as_str().unwrap()).unwrap();
    let trace = meta["trace_id"]
        .as_str()
        .expect("a trace id in the run's meta")
        .to_string();
    let since = Instant::now();
    let approval = loop {
        let a = srv.get("/api/approvals?status=pending", None).json();
        if let Some(a) = a["approvals"]
            .as_array()
            .and_then(|l| l.iter().find(|a| a["run_id"] == id.as_str()))
        {
            break a["id"].as_str().unwrap().to_string();
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "no approval: {a}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let r = srv.post(
        &format!("/api/approvals/{approval}/approve"),
        None,
        r#"{"note":"ok"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let spans = trace_spans(url, &trace);
    srv.terminate();
    let count = |name: &str| spans.iter().filter(|s| s["name"] == name).count();
    assert_eq!(count("invoke_agent agent-llm-rust"), 1, "{spans:#?}");
    assert_eq!(count("chat stub"), 2, "{spans:#?}");
    assert_eq!(count("execute_tool fs_write"), 1, "{spans:#?}");
    assert_eq!(count("await_approval fs_write"), 1, "{spans:#?}");
    let root = spans
        .iter()
        .find(|s| s["name"] == "invoke_agent agent-llm-rust")
        .unwrap();
    for s in &spans {
        if s != root {
            assert_eq!(s["parent_id"], root["context"]["span_id"], "{s}");
        }
        assert_eq!(attr(s, "gen_ai.conversation.id"), id.as_str(), "{s}");
    }
}
