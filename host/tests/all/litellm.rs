//! `keel run` and `keel resume` with `agent-llm` against LiteLLM's proxy, a
//! real OpenAI-compatible server no one here wrote, serving LiteLLM's mock
//! replies, mock tool calls and mock errors (chosen per request by
//! `litellm/keel_mock.py`). `scripts/setup.sh --test` installs the proxy as
//! `target/tools/litellm` (`KEEL_LITELLM` names another); without it the
//! tests skip, and under `CI=true` they fail.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "sk-keel-test-0123456789abcdef";

fn litellm_bin() -> Option<PathBuf> {
    let p = std::env::var_os("KEEL_LITELLM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/litellm")
        });
    if p.exists() {
        return Some(p);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "{} is missing: `scripts/setup.sh --test` installs LiteLLM's proxy, and CI must test against it",
            p.display()
        );
    }
    eprintln!(
        "skipped: {} is missing (scripts/setup.sh --test)",
        p.display()
    );
    None
}

/// A LiteLLM proxy on 127.0.0.1, killed when dropped.
struct Proxy {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl Proxy {
    fn start(bin: PathBuf) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/litellm");
        for f in ["config.yaml", "keel_mock.py"] {
            std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut p = Proxy {
            bin,
            dir,
            port,
            child: None,
        };
        p.up();
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("proxy.log")).unwrap_or_default()
    }

    /// Starts the proxy (again) on its port and waits until it answers.
    fn up(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("proxy.log"))
            .unwrap();
        let child = Command::new(&self.bin)
            .args(["--config", "config.yaml", "--host", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .current_dir(self.dir.path())
            // The model price list ships with LiteLLM; never fetch it.
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(180) {
            if self.alive() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "LiteLLM's proxy exited ({status}) before it answered:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("LiteLLM's proxy did not answer in 180 s:\n{}", self.log());
    }

    fn alive(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let req = "GET /health/liveliness HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n";
        if s.write_all(req.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200")
    }

    /// SIGKILL: the proxy is gone at once, its connections reset.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// agent-llm with `echo`, allowed by the policy, on `model` of the proxy:
/// three retries within `window_ms`.
fn config(dir: &Path, base_url: &str, model: &str, window_ms: u64) -> Option<PathBuf> {
    common::wasm::llm_echo_config(
        dir,
        &format!("{model}.toml"),
        &format!(
            r#"provider = "openai"
base_url = "{base_url}"
model = "{model}"
api_key_env = "KEEL_TEST_LITELLM_KEY"
timeout_ms = 20000
max_retries = 3
retry_window_ms = {window_ms}"#
        ),
    )
}

fn keel(dir: &Path) -> Command {
    let mut c = common::keel_bin();
    c.current_dir(dir).env("KEEL_TEST_LITELLM_KEY", KEY);
    c
}

fn run(dir: &Path, cfg: &Path, goal: &str) -> Output {
    keel(dir)
        .args(["run", "--config", cfg.to_str().unwrap(), "--goal", goal])
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    common::output_text(o)
}

/// `keel show ID --json`.
fn show(dir: &Path, id: &str) -> serde_json::Value {
    let o = keel(dir)
        .args(["--store", "keel.db", "show", id, "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

/// The id of the run whose goal is `goal`.
fn run_id(dir: &Path, goal: &str) -> String {
    let o = keel(dir)
        .args(["--store", "keel.db", "runs", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|r| r["goal"] == goal)
        .unwrap_or_else(|| panic!("no run for {goal}: {v}"))["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn outcomes(v: &serde_json::Value) -> Vec<String> {
    v["model_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["outcome"].as_str().unwrap().to_string())
        .collect()
}

/// The run completed with the echo's answer, its one tool call run once.
fn completed_with_the_echo(v: &serde_json::Value) {
    assert_eq!(v["run"]["status"], "completed", "{v}");
    assert_eq!(v["run"]["result"], "\"the echo said {\\\"x\\\":1}\"", "{v}");
    assert_eq!(v["run"]["consecutive_failures"], 0, "{v}");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "a tool step and the answer: {v}");
    assert_eq!(steps[0]["decision"]["call"]["tool"], "echo", "{v}");
    assert_eq!(steps[0]["observation"]["kind"], "tool_result", "{v}");
}

#[test]
fn through_litellm_runs_call_tools_and_complete_across_429s_and_500_bursts() {
    let Some(bin) = litellm_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(bin);
    let d = dir.path();

    // A tool call, then the answer.
    let Some(cfg) = config(d, &proxy.base_url(), "scripted", 60_000) else {
        return;
    };
    let o = run(d, &cfg, "echo plain");
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o), proxy.log());
    let v = show(d, &run_id(d, "echo plain"));
    completed_with_the_echo(&v);
    assert_eq!(outcomes(&v), ["ok", "ok"]);
    assert_eq!(v["run"]["tokens"], 60, "LiteLLM's usage is charged: {v}");

    // Each request is refused once with 429 and Retry-After: 2 (which the
    // proxy passes on as llm_provider-retry-after); backoff alone would
    // wait under half a second.
    let cfg = config(d, &proxy.base_url(), "rate-limited", 60_000).unwrap();
    let started = Instant::now();
    let o = run(d, &cfg, "echo rate limited");
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o), proxy.log());
    let v = show(d, &run_id(d, "echo rate limited"));
    completed_with_the_echo(&v);
    assert_eq!(outcomes(&v), ["error", "ok", "error", "ok"]);
    assert!(
        v["model_calls"][0]["error"]
            .as_str()
            .unwrap()
            .contains("429"),
        "{v}"
    );
    assert!(
        took >= Duration::from_secs(4),
        "both retries waited 2 s: {took:?}"
    );
    assert_eq!(
        v["run"]["model_calls"], 2,
        "refused attempts are not charged: {v}"
    );

    // Two 500s per request: a burst inside the window costs the run nothing.
    let cfg = config(d, &proxy.base_url(), "burst", 60_000).unwrap();
    let o = run(d, &cfg, "echo burst");
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o), proxy.log());
    let v = show(d, &run_id(d, "echo burst"));
    completed_with_the_echo(&v);
    assert_eq!(
        outcomes(&v),
        ["error", "error", "ok", "error", "error", "ok"]
    );
    assert!(
        v["model_calls"][0]["error"]
            .as_str()
            .unwrap()
            .starts_with("transient: the model server answered 500"),
        "{v}"
    );
    assert_eq!(v["run"]["model_calls"], 2, "{v}");
}

#[test]
fn through_litellm_an_outage_parks_runs_and_resume_completes_them() {
    let Some(bin) = litellm_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = Proxy::start(bin);
    let d = dir.path();
    let Some(slow) = config(d, &proxy.base_url(), "slow", 3_000) else {
        return;
    };
    let scripted = config(d, &proxy.base_url(), "scripted", 3_000).unwrap();

    // The proxy is killed while it works on a call: the reset connection
    // and the refused retries outlast the 3 s window, and the run parks.
    let child = keel(d)
        .args([
            "run",
            "--config",
            slow.to_str().unwrap(),
            "--goal",
            "echo killed",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !proxy.log().contains("keel_mock: slow request, attempt 1") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the call never reached the proxy:\n{}",
            proxy.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.kill();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        text(&o).contains("parked (model_unavailable)"),
        "{}",
        text(&o)
    );
    let killed = run_id(d, "echo killed");

    // A run started while the proxy is down parks too.
    let o = run(d, &scripted, "echo while down");
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    let down = run_id(d, "echo while down");
    for id in [&killed, &down] {
        let v = show(d, id);
        assert_eq!(v["run"]["status"], "parked", "{v}");
        assert_eq!(v["run"]["reason"], "model_unavailable", "{v}");
        assert!(v["run"]["retry_at"].as_i64().is_some(), "{v}");
        assert_eq!(v["run"]["consecutive_failures"], 0, "{v}");
        assert_eq!(v["run"]["model_calls"], 0, "{v}");
        assert_eq!(v["steps"].as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v["steps"][0]["state"], "started", "{v}");
        assert!(outcomes(&v).iter().all(|o| o == "error"), "{v}");
    }

    // The proxy is back: both runs resume and complete.
    proxy.up();
    for id in [&killed, &down] {
        let o = keel(d)
            .args(["--store", "keel.db", "resume", id])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o), proxy.log());
        let v = show(d, id);
        completed_with_the_echo(&v);
        assert_eq!(v["run"]["retry_at"], serde_json::Value::Null, "{v}");
    }
}
