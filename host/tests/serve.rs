//! `keel serve` and `keel submit`: a server picks up submitted runs, and
//! runs whose approval an operator answered, with no `keel resume`; it
//! stops on SIGTERM. On both engines.

mod common;

use common::engine::TestStore;
use common::wasm::plugin_path;
use common::*;
use keel::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

on_both_engines!(a_server_drives_submitted_runs_and_acts_on_approvals_and_stops_on_sigterm);

/// A quickstart-like config in `dir`: a scripted agent writes a file (an
/// approval first) and reads it back.
fn config(dir: &Path) -> Option<PathBuf> {
    let agent = plugin_path("agent-scripted-rust.wasm")?;
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
[agent]
component = "{agent}"
[agent.config]
script = [
  {{ call = {{ tool = "fs_write", arguments = {{ path = "hello.txt", content = "hi" }} }} }},
  {{ call = {{ tool = "fs_read", arguments = {{ path = "hello.txt" }} }} }},
  {{ complete = {{ wrote = "hello.txt" }} }},
]
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
"#,
        cache = dir.join("cache").display(),
        agent = agent.display(),
        policy = policy.display(),
        fs = fs.display(),
        work = work.display(),
    );
    let path = dir.join("keel.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

/// The server's process, killed if the test ends without stopping it.
struct Server(std::process::Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn keel(s: &TestStore, args: &[&str]) -> std::process::Output {
    keel_bin()
        .args(["--store", &s.location])
        .args(args)
        .env_remove("KEEL_STORE")
        .output()
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
    let Some(cfg) = config(dir.path()) else {
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
        let o = keel(&s, &["submit", "-c", cfg, "-g", &format!("write {i}")]);
        assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
        ids.push(String::from_utf8(o.stdout).unwrap().trim().to_string());
    }
    let store = s.open().await;
    assert_eq!(
        store.list_runs(None, 100).await.unwrap().len(),
        4,
        "only the four"
    );

    let mut server = Server(
        keel_bin()
            .args([
                "--store",
                &s.location,
                "--log",
                "info",
                "serve",
                "--max-runs",
                "2",
            ])
            .env_remove("KEEL_STORE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );

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
            .map(|e| format!("{} {}", e.kind.as_str(), e.data))
            .collect();
        let writes = kinds
            .iter()
            .filter(|k| k.starts_with("step.executing") && k.contains("fs_write"))
            .count();
        assert_eq!(writes, 1, "the approved write ran once: {kinds:#?}");
        assert!(store.run(id).await.unwrap().lease_owner.is_none());
    }

    // SIGTERM: it stops claiming and exits 0.
    let pid = server.0.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let since = Instant::now();
    let status = loop {
        if let Some(st) = server.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the server did not stop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut err = String::new();
    std::io::Read::read_to_string(server.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("stopped after driving"), "{err}");
    assert!(
        !err.contains("\u{1b}["),
        "no colour codes in a log that is not a terminal"
    );
}
