//! The model providers against a real HTTP server on loopback that speaks
//! the chat-completions protocol (a small server in this file), and the
//! replay provider.

use crate::common;

use keel::model::*;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

enum Reply {
    Json(u16, String),
    /// A status, one extra header line, a body.
    WithHeader(u16, &'static str, String),
    Raw(String),
    Hang(Duration),
}

/// A chat-completions server on 127.0.0.1 that answers from a script and
/// keeps the request bodies it received.
struct Server {
    url: String,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
}

fn server(script: Vec<Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let bodies = Arc::new(Mutex::new(vec![]));
    let b2 = bodies.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            let mut line = String::new();
            let mut first = true;
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if first {
                    assert!(line.starts_with("POST /v1/chat/completions"), "{line}");
                    first = false;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            b2.lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null));
            let reply = script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Reply::Json(500, "{}".into()));
            let (status, header, text) = match reply {
                Reply::Json(s, t) => (s, "", t),
                Reply::WithHeader(s, h, t) => (s, h, t),
                Reply::Raw(t) => (200, "", t),
                Reply::Hang(d) => {
                    std::thread::sleep(d);
                    (200, "", "{}".into())
                }
            };
            let header = if header.is_empty() {
                String::new()
            } else {
                format!("{header}\r\n")
            };
            let _ = write!(conn, "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{header}content-length: {}\r\nconnection: close\r\n\r\n{text}", text.len());
        }
    });
    Server { url, bodies }
}

fn answer(content: &str) -> String {
    serde_json::json!({ "choices": [{ "message": { "role": "assistant", "content": content }, "finish_reason": "stop" }],
                        "usage": { "prompt_tokens": 11, "completion_tokens": 3 } })
    .to_string()
}

fn tool_call(name: &str, args: &str) -> String {
    serde_json::json!({ "choices": [{ "message": { "role": "assistant", "content": null,
        "tool_calls": [{ "id": "c1", "type": "function", "function": { "name": name, "arguments": args } }] },
        "finish_reason": "tool_calls" }], "usage": { "prompt_tokens": 20, "completion_tokens": 5 } })
    .to_string()
}

fn provider(url: &str, retries: u32, timeout_ms: u64) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new(OpenAiSettings {
        base_url: url.into(),
        model: "test-model".into(),
        api_key: Some("sk-test".into()),
        timeout: Duration::from_millis(timeout_ms),
        max_retries: retries,
        retry_window: Duration::from_secs(60),
        max_response_bytes: 64 << 10,
        profile: Default::default(),
    }))
}

fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![Message {
            role: Role::User,
            content: "hi".into(),
            tool_calls: vec![],
            tool_call_id: None,
        }],
        tools: vec![keel::ToolSpec {
            name: "fs_read".into(),
            description: "read".into(),
            parameters: r#"{"type":"object"}"#.into(),
            effect: keel::Effect::ReadOnly,
        }],
        max_tokens: Some(50),
        temperature: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_tool_calls_and_usage_over_http() {
    let s = server(vec![
        Reply::Json(200, tool_call("fs_read", r#"{"path":"a"}"#)),
        Reply::Json(200, answer("all done")),
    ]);
    let p = provider(&s.url, 0, 2_000);
    let r = p.complete(&request()).await.unwrap();
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.message.tool_calls[0].name, "fs_read");
    assert_eq!(r.message.tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert_eq!((r.prompt_tokens, r.completion_tokens), (20, 5));
    let r = p.complete(&request()).await.unwrap();
    assert_eq!(r.message.content, "all done");
    let body = s.bodies.lock().unwrap()[0].clone();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["tools"][0]["function"]["name"], "fs_read");
    assert_eq!(body["max_tokens"], 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_are_retried_recorded_and_only_answers_charged() {
    let s = server(vec![
        Reply::Json(503, "{\"error\":\"busy\"}".into()),
        Reply::Json(200, answer("ok")),
    ]);
    let gate = ModelGate::new(provider(&s.url, 2, 2_000));
    gate.arm(0, 0, 0, 10, 1_000_000);
    let r = gate.complete(&request()).await.unwrap();
    assert_eq!(r.message.content, "ok");
    let d = gate.drain();
    assert_eq!(d.calls, 1, "the failed attempt is not charged");
    assert_eq!(
        d.records.iter().map(|r| r.outcome).collect::<Vec<_>>(),
        vec!["error", "ok"]
    );
    assert_eq!(d.tokens, 14);
    let error = d.records[0].error.as_deref().unwrap();
    assert!(
        error.starts_with("transient: the model server answered 503"),
        "a readable message, not a Debug string: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_after_its_retry_after_and_retries_stop_at_the_window() {
    let s = server(vec![
        Reply::WithHeader(429, "retry-after: 2", "{\"error\":\"slow down\"}".into()),
        Reply::Json(200, answer("ok")),
    ]);
    let gate = ModelGate::new(provider(&s.url, 3, 2_000));
    gate.arm(0, 0, 0, 10, 1_000_000);
    let started = std::time::Instant::now();
    let r = gate.complete(&request()).await.unwrap();
    assert_eq!(r.message.content, "ok");
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "the retry waited for Retry-After: {:?}",
        started.elapsed()
    );
    // A window shorter than the server's Retry-After: no retry at all.
    let s = server(vec![Reply::WithHeader(503, "retry-after: 30", "{}".into())]);
    let p = Arc::new(OpenAiProvider::new(OpenAiSettings {
        base_url: s.url.clone(),
        model: "m".into(),
        api_key: None,
        timeout: Duration::from_secs(2),
        max_retries: 5,
        retry_window: Duration::from_secs(5),
        max_response_bytes: 64 << 10,
        profile: Default::default(),
    }));
    let gate = ModelGate::new(p);
    gate.arm(0, 0, 0, 10, 1_000_000);
    let e = gate.complete(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Transient(m) if m.contains("gave up after 1 attempts")),
        "{e:?}"
    );
    let outage = gate
        .take_outage()
        .expect("an outage, for the loop to park the run");
    assert_eq!(outage.attempts, 1, "no retry past the window");
    assert!(outage.retry_in >= Duration::from_secs(30), "{outage:?}");
    let d = gate.drain();
    assert_eq!(d.records.len(), 1, "the attempt is recorded");
    assert_eq!(d.calls, 0, "failed attempts are not charged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_hangs_refusals_and_huge_bodies_are_clear_errors() {
    let s = server(vec![
        Reply::Raw("<html>not json</html>".into()),
        Reply::Hang(Duration::from_millis(1500)),
        Reply::Json(401, "{\"error\":\"bad key\"}".into()),
        Reply::Json(200, format!("{{\"pad\":\"{}\"}}", "x".repeat(100 << 10))),
        Reply::Json(200, "{\"choices\":[]}".into()),
    ]);
    let p = provider(&s.url, 0, 400);
    let e = p.complete(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Permanent(m) if m.contains("not JSON")),
        "{e:?}"
    );
    let started = std::time::Instant::now();
    let e = p.complete(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Transient(m) if m.contains("did not answer in time")),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "the timeout cut the hang short"
    );
    std::thread::sleep(Duration::from_millis(1200)); // let the hanging reply drain
    let e = p.complete(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Permanent(m) if m.contains("401")),
        "{e:?}"
    );
    let e = p.complete(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Permanent(m) if m.contains("larger than")),
        "{e:?}"
    );
    let e = p.complete(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Permanent(m) if m.contains("no choices")),
        "{e:?}"
    );
    // Nobody listening at all is transient.
    let dead = provider("http://127.0.0.1:9/v1", 0, 400);
    assert!(matches!(
        dead.complete(&request()).await.unwrap_err(),
        ModelError::Transient(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_returns_recorded_responses_in_order_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rec.jsonl");
    let s = server(vec![
        Reply::Json(200, answer("first")),
        Reply::Json(200, answer("second")),
    ]);
    let rec = ReplayProvider::recording(provider(&s.url, 0, 2_000), file.clone());
    assert_eq!(
        rec.complete(&request()).await.unwrap().message.content,
        "first"
    );
    assert_eq!(
        rec.complete(&request()).await.unwrap().message.content,
        "second"
    );
    let replay = ReplayProvider::replay(&file).unwrap();
    assert_eq!(
        replay.complete(&request()).await.unwrap().message.content,
        "first"
    );
    assert_eq!(
        replay.complete(&request()).await.unwrap().message.content,
        "second"
    );
    let e = replay.complete(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Permanent(m) if m.contains("no recorded response")),
        "{e:?}"
    );
    let mut other = request();
    other.messages[0].content = "something else".into();
    assert!(ReplayProvider::replay(&file)
        .unwrap()
        .complete(&other)
        .await
        .is_err());
    assert_eq!(
        s.bodies.lock().unwrap().len(),
        2,
        "replay never touched the server"
    );
}

/// agent-llm with the echo tool and an allow-echo policy, its model calls
/// through `gate`; `None` when the plugins are not built.
async fn llm_consumers(gate: ModelGate) -> Option<keel::Consumers> {
    use common::wasm::*;
    use keel::wasm::{PluginLimits, ToolCaps, WasmAgent, WasmPolicy, WasmTools, World};
    use keel::*;
    let (Some(agent), Some(policy), Some(echo)) = (
        plugin("agent-llm-rust.wasm", World::Agent),
        plugin("policy-rules-rust.wasm", World::Policy),
        plugin("tool-echo-rust.wasm", World::Tool),
    ) else {
        return None;
    };
    let mut tools = ToolSet::new();
    tools
        .add(Arc::new(
            WasmTools::new(
                host(),
                echo,
                "{}",
                PluginLimits::default(),
                ToolCaps::default(),
                false,
                None,
            )
            .await
            .unwrap(),
        ))
        .unwrap();
    let wiring = ConsumersBuilder::with_gate(gate);
    let a = WasmAgent::new(
        &host(),
        &agent,
        r#"{"window":5}"#,
        tools.specs(),
        &PluginLimits::default(),
        &wiring,
    )
    .await
    .unwrap();
    let p = WasmPolicy::new(
        &host(),
        &policy,
        r#"{"rules":[{"tool":"echo","action":"allow"}]}"#,
        &PluginLimits::default(),
        &wiring,
    )
    .await
    .unwrap();
    Some(wiring.build(Box::new(a), Box::new(p), tools))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_llm_drives_a_run_through_the_openai_provider() {
    use keel::*;
    let s = server(vec![
        Reply::Json(200, tool_call("echo", r#"{"x":1}"#)),
        Reply::Json(200, tool_call("echo", "{not json")),
        Reply::Json(200, answer("the echo said x=1")),
    ]);
    let gate = ModelGate::new(provider(&s.url, 0, 5_000));
    let Some(consumers) = llm_consumers(gate).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rt = common::runtime(&dir.path().join("keel.db"));
    let out = rt
        .start("echo x", Limits::default(), "{}", consumers)
        .await
        .unwrap();
    assert_eq!(out.run.status, RunStatus::Completed, "{:?}", out.run);
    assert_eq!(out.run.result.as_deref(), Some("\"the echo said x=1\""));
    assert_eq!(out.run.model_calls, 3);
    assert_eq!(out.run.tokens, 20 + 5 + 20 + 5 + 11 + 3);
    let store = Store::open_read_only(&dir.path().join("keel.db")).unwrap();
    let steps = store.load_steps(&out.run.id).unwrap();
    assert_eq!(
        steps[1].observation.as_ref().unwrap().kind,
        ObservationKind::InvalidDecision,
        "malformed arguments are an invalid decision"
    );
    assert_eq!(store.model_call_count(&out.run.id).unwrap(), 3);
    // The model saw the tool's answer under the synthesized call id.
    let last = s.bodies.lock().unwrap()[2].clone();
    let msgs = last["messages"].as_array().unwrap();
    assert!(
        msgs.iter().any(|m| m["role"] == "tool"
            && m["tool_call_id"] == "call_0"
            && m["content"] == "{\"x\":1}"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_parks_the_run_without_charging_it_and_resume_continues_it() {
    use keel::*;
    // A tool call, then the server is down (503 with a body) through the
    // one retry; after the resume it is back.
    let s = server(vec![
        Reply::Json(200, tool_call("echo", r#"{"x":1}"#)),
        Reply::Json(503, "{\"error\":\"SECRET-BODY overloaded\"}".into()),
        Reply::WithHeader(
            503,
            "retry-after: 1",
            "{\"error\":\"SECRET-BODY overloaded\"}".into(),
        ),
        Reply::Json(200, answer("the echo said x=1")),
    ]);
    let Some(consumers) = llm_consumers(ModelGate::new(provider(&s.url, 1, 5_000))).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let rt = common::runtime(&db);
    let limits = Limits {
        max_model_calls: 2,
        ..Limits::default()
    };
    let out = rt.start("echo x", limits, "{}", consumers).await.unwrap();
    let run = &out.run;
    assert_eq!(run.status, RunStatus::Parked, "{run:?}");
    assert_eq!(run.reason.map(|r| r.as_str()), Some("model_unavailable"));
    assert!(
        run.result.as_deref().unwrap_or("").contains("503"),
        "{run:?}"
    );
    let retry_at = run.retry_at.expect("a parked run says when to retry");
    assert!(
        retry_at >= run.updated_at + 1_000,
        "Retry-After is honoured"
    );
    assert_eq!(run.lease_owner, None, "the lease is given back");
    assert_eq!(
        run.consecutive_failures, 0,
        "an outage is not the agent's failure"
    );
    assert_eq!(run.model_calls, 1, "the outage's attempts are not charged");
    let store = Store::open_read_only(&db).unwrap();
    let steps = store.load_steps(&run.id).unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(
        steps[1].state,
        StepState::Started,
        "the step is decided again"
    );
    assert!(steps[1].decision.is_none());
    assert_eq!(
        store.model_call_count(&run.id).unwrap(),
        3,
        "every attempt is recorded"
    );
    let events = store.events_after(Some(&run.id), 0, 1_000).unwrap();
    let called: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "model.called")
        .map(|e| e.data.as_str())
        .collect();
    assert_eq!(called.len(), 3, "the journal has an event per model call");
    assert!(called[0].contains("\"outcome\":\"ok\""), "{}", called[0]);
    assert!(
        called[1].contains("\"outcome\":\"error\"") && called[1].contains("503"),
        "{}",
        called[1]
    );
    let parked = events
        .iter()
        .find(|e| e.kind == "run.parked")
        .expect("run.parked");
    assert!(parked.data.contains("503"), "{}", parked.data);
    drop(store);

    // Resumed with the server back: the run completes, and with a call
    // limit of 2 that it would have passed had the outage been charged.
    let Some(consumers) = llm_consumers(ModelGate::new(provider(&s.url, 1, 5_000))).await else {
        return;
    };
    let out = rt.resume(&run.id, consumers).await.unwrap();
    assert_eq!(out.run.status, RunStatus::Completed, "{:?}", out.run);
    assert_eq!(out.run.retry_at, None);
    assert_eq!(out.run.model_calls, 2);
    let bodies = s.bodies.lock().unwrap();
    assert_eq!(bodies.len(), 4);
    assert!(
        !bodies[3].to_string().contains("SECRET-BODY"),
        "the server's error never reaches the model: {}",
        bodies[3]
    );
    let store = Store::open_read_only(&db).unwrap();
    let kinds: Vec<String> = store
        .events_after(Some(&out.run.id), 0, 1_000)
        .unwrap()
        .into_iter()
        .map(|e| e.kind.into_owned())
        .collect();
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap_or(usize::MAX);
    assert!(
        at("run.parked") < at("run.resumed") && at("run.resumed") < at("run.completed"),
        "{kinds:?}"
    ); // The agent's call comes before its decision in the journal.
    let last_call = kinds.iter().rposition(|k| k == "model.called").unwrap();
    let last_decision = kinds.iter().rposition(|k| k == "step.decided").unwrap();
    assert!(last_call < last_decision, "{kinds:?}");
}
