//! A test agent. Its config picks a mode:
//! `{"mode": "...", "after": N}` behaves well (calls `echo`) for N decisions,
//! then does the chosen harm on every later one. `{"mode": "mirror",
//! "script": [[tool, {args}], ...]}` plays the script and adds to each call's
//! arguments a summary of the view it reassembled, so tests can compare it
//! with the host's.

use keel_guest::model;
use keel_guest::prelude::*;
use keel_guest::{config, FinishReason, Message, ModelRequest, Role};

struct Hostile {
    mode: String,
    after: usize,
    script: Vec<(String, serde_json::Value)>,
}

/// `index/version/state/decision/observation-kind/observation-bytes` per
/// step, then `|`, then `id=status` per approval.
fn summary(view: &View) -> String {
    let steps: Vec<String> = view
        .steps()
        .iter()
        .map(|s| {
            let state = match s.state {
                StepState::Started => "started",
                StepState::Decided => "decided",
                StepState::AwaitingApproval => "awaiting_approval",
                StepState::Executing => "executing",
                StepState::Done => "done",
                StepState::Interrupted => "interrupted",
            };
            let decision = match &s.decision {
                None => "none",
                Some(Decision::Call(_)) => "call",
                Some(Decision::Complete(_)) => "complete",
                Some(Decision::Fail(_)) => "fail",
                Some(Decision::Invalid(_)) => "invalid",
            };
            let (kind, len) = match &s.observation {
                None => ("none", 0),
                Some(o) => (
                    match o.kind {
                        ObservationKind::ToolResult => "tool_result",
                        ObservationKind::ToolError => "tool_error",
                        ObservationKind::Denied => "denied",
                        ObservationKind::InvalidDecision => "invalid_decision",
                        ObservationKind::Final => "final",
                    },
                    o.content.len(),
                ),
            };
            format!("{}/{}/{state}/{decision}/{kind}/{len}", s.index, s.version)
        })
        .collect();
    let approvals: Vec<String> = view
        .approvals()
        .iter()
        .map(|a| {
            let st = match a.status {
                ApprovalStatus::Pending => "pending",
                ApprovalStatus::Approved => "approved",
                ApprovalStatus::Denied => "denied",
                ApprovalStatus::Expired => "expired",
            };
            format!("{}={st}", a.id)
        })
        .collect();
    format!("{}|{}", steps.join(";"), approvals.join(";"))
}

impl Agent for Hostile {
    fn init(text: &str, _tools: Vec<ToolSpec>) -> Result<Self, String> {
        let mut c = config::parse(text)?;
        let mode = c.req_str("mode")?;
        let after = c.opt_u64("after")?.unwrap_or(0) as usize;
        let mut script = Vec::new();
        for (path, entry) in c.opt_array("script")?.unwrap_or_default() {
            match entry {
                serde_json::Value::Array(pair)
                    if pair.len() == 2 && pair[0].is_string() && pair[1].is_object() =>
                {
                    script.push((
                        pair[0].as_str().unwrap_or_default().to_string(),
                        pair[1].clone(),
                    ))
                }
                _ => return Err(format!("{path}: expected [tool, {{arguments}}]")),
            }
        }
        c.finish()?;
        if mode == "trap-in-init" {
            panic!("hostile agent: trap in init");
        }
        Ok(Hostile {
            mode,
            after,
            script,
        })
    }

    fn decide(&mut self, view: &View) -> Result<Decision, String> {
        if self.mode == "mirror" {
            let Some((tool, args)) = self.script.get(view.decided_steps()) else {
                return Ok(Decision::Complete(
                    serde_json::json!({ "view": summary(view) }).to_string(),
                ));
            };
            let mut args = args.clone();
            args["view"] = serde_json::Value::String(summary(view));
            return Ok(Decision::Call(ToolCall {
                tool: tool.clone(),
                arguments: args.to_string(),
            }));
        }
        if let Some(n) = self.mode.strip_prefix("logs-") {
            // `logs-N`: N host log calls, then a call (import round trips).
            let n: usize = n
                .parse()
                .map_err(|_| format!("config.mode: bad count in {:?}", self.mode))?;
            for _ in 0..n {
                keel_guest::log::log(keel_guest::log::Level::Debug, "tick");
            }
            return Ok(Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: "{}".into(),
            }));
        }
        if view.decided_steps() < self.after {
            return Ok(Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: format!("{{\"i\":{}}}", view.decided_steps()),
            }));
        }
        match self.mode.as_str() {
            // `noop`: answers at once, the cheapest decision there is (the
            // no-op call of the hostcall bench).
            "noop" => Ok(Decision::Complete(String::new())),
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "recurse" => Ok(Decision::Fail(format!(
                "{}",
                recurse(std::hint::black_box(1))
            ))),
            "trap" => panic!("hostile agent: deliberate panic"),
            "bad-json" => Ok(Decision::Complete("{not json".into())),
            "bad-args" => Ok(Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: "[1,".into(),
            })),
            "unknown-tool" => Ok(Decision::Call(ToolCall {
                tool: "no_such_tool".into(),
                arguments: "{}".into(),
            })),
            "huge-string" => Ok(Decision::Fail("x".repeat(100 << 20))),
            "log-flood" => {
                for i in 0..100_000 {
                    keel_guest::info!("flood line {i}");
                }
                Ok(Decision::Complete("\"flooded\"".into()))
            }
            // Blocks in WASI (a monotonic-clock poll), where epoch
            // interruption cannot reach it.
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(30));
                Ok(Decision::Complete("\"woke up\"".into()))
            }
            // Keeps calling the model whatever it answers, refusals included.
            "model-ignore-refusal" => loop {
                let req = ModelRequest {
                    messages: vec![Message {
                        role: Role::User,
                        content: "again".into(),
                        tool_calls: vec![],
                        tool_call_id: None,
                    }],
                    tools: vec![],
                    max_tokens: None,
                    temperature: None,
                };
                let _ = std::hint::black_box(model::complete(&req));
            },
            "model-flood" => {
                for _ in 0..1000 {
                    let req = ModelRequest {
                        messages: vec![Message {
                            role: Role::User,
                            content: "hi".into(),
                            tool_calls: vec![],
                            tool_call_id: None,
                        }],
                        tools: vec![],
                        max_tokens: None,
                        temperature: None,
                    };
                    match model::complete(&req) {
                        Ok(r) if r.finish_reason == FinishReason::Stop => {}
                        Ok(_) => {}
                        Err(e) => return Err(format!("model: {e:?}")),
                    }
                }
                Ok(Decision::Complete("\"never limited\"".into()))
            }
            other => Err(format!("config.mode: unknown mode {other:?}")),
        }
    }
}

/// Recursion that keeps its frames on the wasm stack (nothing spills to the
/// shadow stack in linear memory), so it overflows the engine's stack limit.
fn recurse(n: u64) -> u64 {
    if std::hint::black_box(n) == 0 {
        return 0;
    }
    std::hint::black_box(recurse(n + 1)) ^ n
}

keel_guest::export_agent!(Hostile);
