//! `keel serve`'s HTTP API, from outside: a real server process on a
//! loopback port, spoken to over TCP. Tokens and roles, starting a run,
//! answering its approval, the live event stream, paging, metrics, and
//! every kind of bad request with its documented status.

use crate::common;

use common::engine::TestStore;
use common::http::{follow_events, request, tokens_file, wait_for, ServeProcess};
use common::wasm::quickstart_config;
use common::*;
use std::path::Path;
use std::time::Duration;

on_both_engines!(
    operators_start_runs_answer_approvals_and_follow_events_over_http,
    bad_requests_get_their_documented_status_and_change_nothing,
);

const OPERATOR: &str = "op-token-for-alice";
const VIEWER: &str = "view-token-for-bob";

/// A tokens file: alice operates, bob views.
fn tokens(dir: &Path) -> String {
    tokens_file(
        dir,
        &[("alice", "operator", OPERATOR), ("bob", "viewer", VIEWER)],
    )
}

/// Raises this process's open-file limit to its hard limit; returns how
/// many connections (at most `want`) it can hold open beside its other files.
fn idle_connections_allowed(want: usize) -> usize {
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    let hard = unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        l.rlim_max as usize
    };
    let n = want.min(hard.saturating_sub(512));
    if n < want {
        eprintln!("the open-file limit ({hard}) allows {n} idle connections, not {want}");
    }
    n
}

async fn operators_start_runs_answer_approvals_and_follow_events_over_http(s: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let Some(cfg) = quickstart_config(
        dir.path(),
        &format!("[serve]\ntokens_file = \"{tokens}\"\n"),
    ) else {
        return;
    };
    let srv = ServeProcess::start(&s.location, &["-c", cfg.to_str().unwrap()]);
    let (op, view) = (Some(OPERATOR), Some(VIEWER));

    // Health needs no token; everything else does, and a viewer only reads.
    let r = srv.get("/healthz", None);
    assert_eq!((r.status, r.json()["ok"].as_bool()), (200, Some(true)));
    let r = srv.get("/api/runs", None);
    assert_eq!((r.status, r.code().as_str()), (401, "unauthorized"));
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert_eq!(srv.get("/api/runs", Some("op-token-for-alicE")).status, 401);
    assert_eq!(srv.get("/metrics", None).status, 401);
    let r = srv.post("/api/runs", view, r#"{"goal":"write hello.txt"}"#);
    assert_eq!((r.status, r.code().as_str()), (403, "forbidden"));

    // An operator starts a run; the server drives it to its approval.
    let r = srv.post(
        "/api/runs",
        op,
        r#"{"goal":"write hello.txt and read it back"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let run = r.json();
    let id = run["id"].as_str().unwrap().to_string();
    assert_eq!(run["status"], "running");
    assert!(run["meta"]
        .as_str()
        .unwrap()
        .contains("\"submitted_by\":\"alice\""));

    // A viewer follows the run's events from the start, live.
    let addr = srv.addr;
    let path = format!("/api/runs/{id}/events");
    let live = {
        let path = path.clone();
        std::thread::spawn(move || follow_events(addr, &path, Some(VIEWER), None))
    };

    let approval = wait_for("the approval", || {
        let r = srv.get("/api/approvals?status=pending", view);
        assert_eq!(r.status, 200, "{}", r.body);
        let list = r.json()["approvals"].as_array().unwrap().clone();
        list.into_iter().find(|a| a["run_id"] == id.as_str())
    });
    let aid = approval["id"].as_str().unwrap().to_string();
    let hash = approval["hash"].as_str().unwrap().to_string();
    assert_eq!(approval["call"]["tool"], "fs_write");
    assert_eq!(approval["reason"], "writes need an operator");

    // A viewer may not answer; an altered approval is refused; a good
    // answer records the token's name and the note.
    let approve = format!("/api/approvals/{aid}/approve");
    let r = srv.post(&approve, view, "{}");
    assert_eq!(r.status, 403);
    let r = srv.post(
        &approve,
        op,
        &format!(r#"{{"note":"fine","hash":"{}"}}"#, "0".repeat(64)),
    );
    assert_eq!((r.status, r.code().as_str()), (409, "stale"), "{}", r.body);
    let r = srv.post(
        &approve,
        op,
        &format!(r#"{{"note":"writing hello.txt is fine","hash":"{hash}"}}"#),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let a = r.json();
    assert_eq!(
        (a["status"].as_str(), a["decided_by"].as_str()),
        (Some("approved"), Some("alice"))
    );
    assert_eq!(a["note"], "writing hello.txt is fine");
    let r = srv.post(&approve, op, "{}");
    assert_eq!((r.status, r.code().as_str()), (409, "not_pending"));
    let r = srv.post(&format!("/api/approvals/{aid}/deny"), op, "{}");
    assert_eq!((r.status, r.code().as_str()), (409, "not_pending"));

    // The stream ends with the run: every event once, in order, the same
    // as the journal.
    let streamed = live.join().unwrap();
    let journal = srv.get(&path, view).json()["events"]
        .as_array()
        .unwrap()
        .clone();
    let seqs: Vec<String> = journal.iter().map(|e| e["seq"].to_string()).collect();
    let got: Vec<String> = streamed.iter().map(|e| e.id.clone().unwrap()).collect();
    assert_eq!(got, seqs, "the stream's events are the journal's");
    assert_eq!(
        streamed.first().unwrap().event.as_deref(),
        Some("run.started")
    );
    assert_eq!(
        streamed.last().unwrap().event.as_deref(),
        Some("run.completed")
    );
    let last: serde_json::Value = serde_json::from_str(&streamed.last().unwrap().data).unwrap();
    assert_eq!(last["run_id"], id.as_str());
    assert!(streamed
        .iter()
        .any(|e| e.event.as_deref() == Some("approval.approved")));

    // Reconnecting with Last-Event-ID gets only what came after it.
    let third = got[2].clone();
    let rest = follow_events(addr, &path, view, Some(&third));
    let rest_ids: Vec<String> = rest.iter().map(|e| e.id.clone().unwrap()).collect();
    assert_eq!(rest_ids, got[3..].to_vec());
    let after = follow_events(
        addr,
        &format!("{path}?after={}", got[got.len() - 2]),
        view,
        None,
    );
    assert_eq!(after.len(), 1);

    // The run as `keel show --json` prints it.
    let detail = srv.get(&format!("/api/runs/{id}"), view).json();
    assert_eq!(detail["run"]["status"], "completed");
    assert_eq!(detail["approvals"][0]["decided_by"], "alice");
    assert_eq!(detail["steps"].as_array().unwrap().len(), 3);
    let shown = keel_bin()
        .args(["--store", &s.location, "show", &id, "--json"])
        .env_remove("KEEL_STORE")
        .output()
        .unwrap();
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["run"], detail["run"]);
    assert_eq!(shown["approvals"], detail["approvals"]);

    // Cancelling a finished run is refused.
    let r = srv.post(&format!("/api/runs/{id}/cancel"), op, "");
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "conflict"),
        "{}",
        r.body
    );

    // More runs, paged newest first, by status and goal.
    let mut ids = vec![id.clone()];
    for i in 0..4 {
        let r = srv.post("/api/runs", op, &format!(r#"{{"goal":"page {i}"}}"#));
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let newest = ids[4].clone();
    let r = srv.post(&format!("/api/runs/{newest}/cancel"), op, "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["status"], "cancelled");
    let detail = srv.get(&format!("/api/runs/{newest}"), view).json();
    assert!(detail["run"]["result"]
        .as_str()
        .unwrap()
        .contains("cancelled by alice"));
    let mut seen = Vec::new();
    let mut url = "/api/runs?limit=2".to_string();
    loop {
        let page = srv.get(&url, view).json();
        for r in page["runs"].as_array().unwrap() {
            seen.push(r["id"].as_str().unwrap().to_string());
        }
        match page["next_before"].as_str() {
            Some(b) => url = format!("/api/runs?limit=2&before={b}"),
            None => break,
        }
    }
    let mut want = ids.clone();
    want.reverse();
    assert_eq!(seen, want, "pages cover every run once, newest first");
    let found = srv.get("/api/runs?q=hello.txt", view).json();
    assert_eq!(found["runs"].as_array().unwrap().len(), 1);
    let cancelled = srv.get("/api/runs?status=cancelled", view).json();
    assert_eq!(cancelled["runs"][0]["id"], newest.as_str());

    // Metrics: runs by status from the store, this process's counters.
    let m = srv.get("/metrics", view);
    assert_eq!(m.status, 200);
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    assert!(
        m.body.contains("keel_runs{status=\"completed\"} 1\n"),
        "{}",
        m.body
    );
    assert!(
        m.body.contains("keel_runs{status=\"cancelled\"} 1\n"),
        "{}",
        m.body
    );
    let transitions: u64 = m
        .body
        .lines()
        .find_map(|l| l.strip_prefix("keel_transitions_committed_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(transitions >= 10, "{transitions}");
    assert!(m.body.contains("keel_commit_duration_seconds_count"));
    assert!(m
        .body
        .contains("keel_plugin_traps_total{kind=\"out_of_fuel\"} 0"));

    let log = srv.terminate();
    assert!(
        log.contains("kind=run.completed"),
        "one log line per event: {log}"
    );
}

async fn bad_requests_get_their_documented_status_and_change_nothing(s: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = quickstart_config(
        dir.path(),
        "[serve]\nmax_body_bytes = 2000000\nheader_timeout_ms = 1500\n",
    ) else {
        return;
    };
    let cfg = cfg.to_str().unwrap().to_string();

    // No tokens file: loopback only.
    let o = keel_bin()
        .args([
            "--store",
            &s.location,
            "serve",
            "-c",
            &cfg,
            "--listen",
            "0.0.0.0:0",
        ])
        .env_remove("KEEL_STORE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("without a tokens file"),
        "{}",
        output_text(&o)
    );

    let srv = ServeProcess::start(&s.location, &["-c", &cfg, "--log-format", "json"]);
    let store = s.open().await;
    let before = store.count_events().await.unwrap();
    let check = |method: &str, path: &str, body: Option<&str>, status: u16, code: &str| {
        let r = srv.call(method, path, None, body);
        assert_eq!(
            (r.status, r.code().as_str()),
            (status, code),
            "{method} {path}: {}",
            r.body
        );
    };
    check("POST", "/api/runs", Some("{\"goal\": "), 400, "bad_request");
    check("POST", "/api/runs", Some("[1,2]"), 400, "bad_request");
    check(
        "POST",
        "/api/runs",
        Some(r#"{"goal":"x","budget":3}"#),
        400,
        "bad_request",
    );
    check(
        "POST",
        "/api/runs",
        Some(r#"{"goal":"   "}"#),
        400,
        "bad_request",
    );
    check(
        "POST",
        "/api/runs",
        Some(r#"{"goal":"x","config":"nope"}"#),
        400,
        "bad_request",
    );
    let big = format!(
        r#"{{"goal":"{}"}}"#,
        "g".repeat(keel::types::MAX_GOAL_BYTES + 1)
    );
    check("POST", "/api/runs", Some(&big), 400, "bad_request");
    let huge = format!(r#"{{"goal":"{}"}}"#, "g".repeat(2_000_001));
    check("POST", "/api/runs", Some(&huge), 413, "too_large");
    check("GET", "/api/runs/run_nope", None, 404, "not_found");
    check("GET", "/api/runs/run_nope/events", None, 404, "not_found");
    check(
        "POST",
        "/api/runs/run_nope/cancel",
        Some("{}"),
        404,
        "not_found",
    );
    check(
        "POST",
        "/api/approvals/apr_nope/approve",
        Some("{}"),
        404,
        "not_found",
    );
    check(
        "POST",
        "/api/approvals/apr_nope/deny",
        Some(r#"{"note":"x","extra":1}"#),
        400,
        "bad_request",
    );
    let long_note = format!(
        r#"{{"note":"{}"}}"#,
        "n".repeat(keel::serve::MAX_NOTE_BYTES + 1)
    );
    check(
        "POST",
        "/api/approvals/apr_nope/approve",
        Some(&long_note),
        400,
        "bad_request",
    );
    check("GET", "/api/runs?status=sleeping", None, 400, "bad_request");
    check("GET", "/api/runs?limit=0", None, 400, "bad_request");
    check("GET", "/api/runs?limit=100000", None, 400, "bad_request");
    check("GET", "/api/runs?limit=ten", None, 400, "bad_request");
    check("GET", "/api/runs?before=run_nope", None, 400, "bad_request");
    check("GET", "/api/runs?color=red", None, 400, "bad_request");
    check(
        "GET",
        "/api/approvals?status=maybe",
        None,
        400,
        "bad_request",
    );
    check("GET", "/api/nothing", None, 404, "not_found");
    check("DELETE", "/api/runs", None, 405, "method_not_allowed");
    let r = request(
        srv.addr,
        "GET",
        "/api/runs/x/events",
        None,
        &[("Last-Event-ID", "abc")],
        None,
    );
    assert_eq!(r.status, 404, "an unknown run first");
    assert_eq!(
        store.count_events().await.unwrap(),
        before,
        "no bad request wrote anything"
    );
    assert!(store.list_runs(None, 10).await.unwrap().is_empty());

    let log = srv.terminate();
    assert!(!log.contains("panicked"), "{log}");
    let json_lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        json_lines
            .iter()
            .any(|l| l["fields"]["message"] == "serving"),
        "--log-format json writes JSON lines: {log}"
    );
}

/// Idle connections cost the server nothing for long (engine-free: one store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_connections_are_closed_and_keep_no_one_out() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = quickstart_config(dir.path(), "[serve]\nheader_timeout_ms = 1500\n") else {
        return;
    };
    let store = dir.path().join("keel.db");
    let srv = ServeProcess::start(store.to_str().unwrap(), &["-c", cfg.to_str().unwrap()]);
    // Ten thousand idle connections are closed after the header timeout
    // and keep no one else out.
    let n = idle_connections_allowed(10_000);
    let idle: Vec<std::net::TcpStream> = (0..n)
        .map(|_| std::net::TcpStream::connect(srv.addr).unwrap())
        .collect();
    let r = srv.get("/healthz", None);
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(3000));
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0u8; 256];
        let n = match std::io::Read::read(&mut c, &mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("an idle connection is still open after the header timeout")
            }
            Err(_) => 0, // reset: closed
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            n == 0 || text.starts_with("HTTP/1.1 408"),
            "an idle connection got {text:?}"
        );
    }
    let r = srv.get("/healthz", None);
    assert_eq!(r.status, 200);
    let log = srv.terminate();
    assert!(!log.contains("panicked"), "{log}");
}

/// A config in `dir` whose run makes `steps` echo calls, each answered
/// with `pad` bytes of padding, then completes: many large events.
fn many_events_config(dir: &Path, steps: usize, pad: usize) -> Option<std::path::PathBuf> {
    let agent = common::wasm::plugin_path("agent-scripted-rust.wasm")?;
    let policy = common::wasm::plugin_path("policy-rules-rust.wasm")?;
    let echo = common::wasm::plugin_path("tool-echo-rust.wasm")?;
    let script: Vec<String> = (0..steps)
        .map(|i| format!("{{ call = {{ tool = \"echo\", arguments = {{ i = {i} }} }} }}"))
        .chain(std::iter::once(
            "{ complete = { done = true } }".to_string(),
        ))
        .collect();
    let text = format!(
        r#"[engine]
cache_dir = "{cache}"
[limits]
max_steps = {max}
[agent]
component = "{agent}"
config = {{ script = [ {script} ] }}
[policy]
component = "{policy}"
config = {{ rules = [ {{ tool = "echo", action = "allow" }} ] }}
[[tools]]
component = "{echo}"
config = {{ pad_bytes = {pad} }}
"#,
        cache = dir.join("cache").display(),
        max = steps + 10,
        agent = agent.display(),
        policy = policy.display(),
        echo = echo.display(),
        script = script.join(", "),
    );
    let path = dir.join("keel.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

/// A TCP connection to `addr` whose receive buffer is as small as the
/// kernel allows, so that a client that does not read stalls the server's
/// writes at once.
fn small_window_connect(addr: std::net::SocketAddr) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(v4) = addr else {
        panic!("the server listens on IPv4 loopback")
    };
    // SAFETY: a new socket is configured, connected, and then owned by the
    // TcpStream; every pointer passed points at a live local of the size given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 4096;
        assert_eq!(
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ),
            0
        );
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(v4.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        assert_eq!(
            libc::connect(
                fd,
                &sin as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            0
        );
        std::net::TcpStream::from_raw_fd(fd)
    }
}

/// A counter or gauge from `/metrics`.
fn metric(srv: &ServeProcess, name: &str) -> u64 {
    let r = srv.get("/metrics", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("/metrics has no {name}: {}", r.body))
}

/// A client that never reads its event stream holds no memory of its own
/// in the server and slows no one: the server keeps a bounded backlog per
/// run, and the slow client, once it reads, gets what it missed from the
/// store, every event once and in order (engine-free: one store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_stream_is_served_from_the_store_and_slows_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cfg) = many_events_config(dir.path(), 300, 16 * 1024) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let srv = ServeProcess::start(store.to_str().unwrap(), &["-c", cfg.to_str().unwrap()]);
    let r = srv.post("/api/runs", None, r#"{"goal":"many large events"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let path = format!("/api/runs/{id}/events");

    // The slow client asks for the stream and then reads nothing.
    let mut slow = small_window_connect(srv.addr);
    let sse = [("Accept", "text/event-stream")];
    common::http::send(&mut slow, srv.addr, "GET", &path, None, &sse, None);
    wait_for("the slow client's stream", || {
        (metric(&srv, "keel_event_stream_clients") >= 1).then_some(())
    });

    // Another client follows the same run to its end meanwhile.
    let fast = follow_events(srv.addr, &path, None, None);
    let mut journal = Vec::new();
    loop {
        let after = journal.last().cloned().unwrap_or_else(|| "0".to_string());
        let page = srv
            .get(&format!("{path}?after={after}&limit=500"), None)
            .json()["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].to_string())
            .collect::<Vec<_>>();
        if page.is_empty() {
            break;
        }
        journal.extend(page);
    }
    let ids = |evs: &[common::http::SseEvent]| -> Vec<String> {
        evs.iter().map(|e| e.id.clone().unwrap()).collect()
    };
    assert!(journal.len() > 1500, "{} events", journal.len());
    assert_eq!(
        ids(&fast),
        journal,
        "the reading client got every event, in order"
    );
    assert_eq!(fast.last().unwrap().event.as_deref(), Some("run.completed"));

    // Now the slow client reads: every event once, in order, the ones it
    // fell behind on read from the store rather than held for it.
    let slow = common::http::sse_events(&common::http::answer(slow));
    assert_eq!(
        ids(&slow),
        journal,
        "the slow client got every event, in order"
    );
    let rereads = metric(&srv, "keel_event_stream_rereads_total");
    assert!(
        rereads >= 1,
        "the slow client was served from the server's memory, not from the store"
    );
    let log = srv.terminate();
    assert!(!log.contains("panicked"), "{log}");
}
