//! Costs a plugin can cause and capabilities it is granted: a guest
//! blocked in WASI is held to its deadline, refused model calls cost the
//! agent and add a bounded amount to the store, dropped log lines are
//! reported, tool specs are bounded, a network grant opens sockets and its
//! absence refuses them, and links out of a granted directory are refused.

use crate::common;

use common::wasm::*;
use common::*;
use keel::model::StubProvider;
use keel::wasm::{PluginLimits, ToolCaps, WasmAgent, WasmPolicy, WasmTools, World};
use keel::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn tmpdb() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keel.db");
    (dir, p)
}

fn allow_all() -> String {
    json!({ "rules": [{ "tool": "*", "action": "allow" }] }).to_string()
}

async fn hostile_tool(
    config: serde_json::Value,
    caps: ToolCaps,
    limits: PluginLimits,
) -> Option<Result<WasmTools, ConsumerError>> {
    let p = plugin("hostile-tool-rust.wasm", World::Tool)?;
    Some(WasmTools::new(host(), p, &config.to_string(), limits, caps, false, None).await)
}

/// Runs the hostile agent in `mode` with a tool set, returning the outcome.
async fn agent_run(
    db: &std::path::Path,
    mode: &str,
    limits: PluginLimits,
    run_limits: Limits,
    set: ToolSet,
) -> Option<Outcome> {
    let agent = plugin("hostile-agent-rust.wasm", World::Agent)?;
    let policy = plugin("policy-rules-rust.wasm", World::Policy)?;
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::new(Duration::ZERO)));
    let a = WasmAgent::new(
        &host(),
        &agent,
        &json!({ "mode": mode }).to_string(),
        set.specs(),
        &limits,
        &wiring,
    )
    .await
    .unwrap();
    let pol = WasmPolicy::new(
        &host(),
        &policy,
        &allow_all(),
        &PluginLimits::default(),
        &wiring,
    )
    .await
    .unwrap();
    let c = wiring.build(Box::new(a), Box::new(pol), set);
    let rt = runtime(db);
    Some(
        tokio::time::timeout(Duration::from_secs(60), rt.start(mode, run_limits, "{}", c))
            .await
            .expect("the run did not end")
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_blocked_in_wasi_is_held_to_its_per_call_deadline() {
    let (_d, db) = tmpdb();
    let tight = PluginLimits {
        deadline_ms: 500,
        ..PluginLimits::default()
    };
    // An agent that sleeps 30 s in one decide.
    let started = std::time::Instant::now();
    let Some(out) = agent_run(
        &db,
        "sleep",
        tight.clone(),
        Limits::default(),
        ToolSet::new(),
    )
    .await
    else {
        return;
    };
    assert_eq!(out.run.status, RunStatus::Failed);
    assert_eq!(out.run.reason.map(|r| r.as_str()), Some("agent_trapped"));
    assert!(
        out.run.result.as_deref().unwrap_or("").contains("deadline"),
        "{:?}",
        out.run.result
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the sleep was not cut short"
    );

    // A tool that sleeps 30 s in one call: its call ends as a tool error.
    let tools = hostile_tool(json!({}), ToolCaps::default(), tight)
        .await
        .unwrap()
        .unwrap();
    let started = std::time::Instant::now();
    let r = tools.call("sleep", r#"{"ms":30000}"#).await;
    let err = r.unwrap_err();
    assert_eq!(err.trap, Some(keel::consumer::TrapKind::Deadline), "{err}");
    assert!(started.elapsed() < Duration::from_secs(25));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_model_limit_end_the_call_and_add_a_bounded_amount_to_the_store() {
    let (_d, db) = tmpdb();
    let limits = PluginLimits {
        deadline_ms: 3_000,
        ..PluginLimits::default()
    };
    let run_limits = Limits {
        max_model_calls: 5,
        ..Limits::default()
    };
    let Some(out) = agent_run(
        &db,
        "model-ignore-refusal",
        limits,
        run_limits,
        ToolSet::new(),
    )
    .await
    else {
        return;
    };
    assert_eq!(out.run.status, RunStatus::Failed);
    assert_eq!(
        out.run.reason.map(|r| r.as_str()),
        Some("limit_model_calls")
    );
    let s = Store::open_read_only(&db).unwrap();
    assert_eq!(
        s.model_call_count(&out.run.id).unwrap(),
        6,
        "five calls and the first refusal are recorded, nothing more"
    );
    assert!(s.events_after(Some(&out.run.id), 0, 1000).unwrap().len() < 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_dropped_past_the_limit_are_counted_in_an_event() {
    let (_d, db) = tmpdb();
    let Some(out) = agent_run(
        &db,
        "log-flood",
        PluginLimits::default(),
        Limits::default(),
        ToolSet::new(),
    )
    .await
    else {
        return;
    };
    assert_eq!(out.run.status, RunStatus::Completed);
    let s = Store::open_read_only(&db).unwrap();
    let dropped: Vec<_> = s
        .events_after(Some(&out.run.id), 0, 10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "plugin.logs_dropped")
        .collect();
    assert_eq!(dropped.len(), 1);
    let data: serde_json::Value = serde_json::from_str(&dropped[0].data).unwrap();
    assert_eq!(data["dropped"], 100_000 - 200);
    assert_eq!(data["limit"], 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_specs_over_their_bounds_are_refused_with_the_reason() {
    for (mode, says) in [
        ("huge-description", "description"),
        ("deep-schema", "parameters schema"),
        ("many", "tools"),
    ] {
        let Some(tools) = hostile_tool(
            json!({ "specs": mode }),
            ToolCaps::default(),
            PluginLimits {
                max_output_bytes: 128 << 20,
                ..PluginLimits::default()
            },
        )
        .await
        else {
            return;
        };
        let tools = tools.unwrap();
        let err = ToolSet::new().add(Arc::new(tools)).unwrap_err();
        assert!(err.contains(says), "{mode}: {err}");
    }
    // The specs as a whole are bounded by the tool's output limit.
    let err = hostile_tool(
        json!({ "specs": "huge-description" }),
        ToolCaps::default(),
        PluginLimits::default(),
    )
    .await
    .unwrap()
    .err()
    .unwrap();
    assert!(err.to_string().contains("output limit"), "{err}");
}

async fn net_call(tools: &WasmTools, kind: &str, addr: &str) -> serde_json::Value {
    let args = json!({ "kind": kind, "addr": addr }).to_string();
    let out = tools.call("net", &args).await.unwrap();
    serde_json::from_str(&out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_grant_opens_tcp_and_udp_and_without_it_each_is_refused() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = listener.local_addr().unwrap().to_string();
    let udp_sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp_sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let udp = udp_sock.local_addr().unwrap().to_string();
    let granted = ToolCaps {
        network: true,
        ..ToolCaps::default()
    };
    let Some(tools) = hostile_tool(json!({}), granted, PluginLimits::default()).await else {
        return;
    };
    let tools = tools.unwrap();
    let accepted = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = String::new();
        conn.read_to_string(&mut got).unwrap();
        got
    });
    let r = net_call(&tools, "tcp-connect", &tcp).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(accepted.join().unwrap(), "hello from a tool\n");
    let r = net_call(&tools, "udp", &udp).await;
    assert_eq!(r["ok"], true, "{r}");
    let mut buf = [0u8; 64];
    let (n, _) = udp_sock.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello from a tool");
    let r = net_call(&tools, "tcp-listen", "127.0.0.1:0").await;
    assert_eq!(r["ok"], true, "{r}");

    let denied = hostile_tool(json!({}), ToolCaps::default(), PluginLimits::default())
        .await
        .unwrap()
        .unwrap();
    for (kind, addr) in [
        ("tcp-connect", tcp.as_str()),
        ("udp", udp.as_str()),
        ("tcp-listen", "127.0.0.1:0"),
    ] {
        let r = net_call(&denied, kind, addr).await;
        assert_eq!(r["ok"], false, "{kind} without the grant: {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_cannot_create_links_that_leave_its_granted_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inside.txt"), "x").unwrap();
    let caps = ToolCaps {
        dirs: vec![(dir.path().to_path_buf(), "/work".into(), true)],
        ..ToolCaps::default()
    };
    let Some(tools) = hostile_tool(json!({}), caps, PluginLimits::default()).await else {
        return;
    };
    let tools = tools.unwrap();
    let link = |target: &str, name: &str| {
        let args = json!({ "target": target, "link": format!("/work/{name}") }).to_string();
        let tools = &tools;
        async move {
            let out = tools.call("symlink", &args).await.unwrap();
            serde_json::from_str::<serde_json::Value>(&out).unwrap()
        }
    };
    for (target, name) in [
        ("../../../etc/passwd", "up"),
        ("/etc/passwd", "absolute"),
        ("sub/../../outside", "sneaky"),
    ] {
        let r = link(target, name).await;
        assert_eq!(r["ok"], false, "{target}: {r}");
        assert!(
            std::fs::symlink_metadata(dir.path().join(name)).is_err(),
            "{target}"
        );
    }
    let r = link("inside.txt", "fine").await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        std::fs::read_link(dir.path().join("fine")).unwrap(),
        std::path::PathBuf::from("inside.txt")
    );
}
