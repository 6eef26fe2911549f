//! An agent that misbehaves on purpose. Its config picks how:
//! `{"mode": "...", "after": N}` behaves well (calls `echo`) for N decisions,
//! then does the chosen harm on every later one.

use keel_guest::model;
use keel_guest::prelude::*;
use keel_guest::{config, FinishReason, Message, ModelRequest, Role};

struct Hostile {
    mode: String,
    after: usize,
}

impl Agent for Hostile {
    fn init(text: &str, _tools: Vec<ToolSpec>) -> Result<Self, String> {
        let mut c = config::parse(text)?;
        let mode = c.req_str("mode")?;
        let after = c.opt_u64("after")?.unwrap_or(0) as usize;
        c.finish()?;
        if mode == "trap-in-init" {
            panic!("hostile agent: trap in init");
        }
        Ok(Hostile { mode, after })
    }

    fn decide(&mut self, view: &View) -> Result<Decision, String> {
        if view.decided_steps() < self.after {
            return Ok(Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: format!("{{\"i\":{}}}", view.decided_steps()),
            }));
        }
        match self.mode.as_str() {
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
            "recurse" => Ok(Decision::Fail(format!("{}", recurse(std::hint::black_box(1))))),
            "trap" => panic!("hostile agent: deliberate panic"),
            "bad-json" => Ok(Decision::Complete("{not json".into())),
            "bad-args" => Ok(Decision::Call(ToolCall { tool: "echo".into(), arguments: "[1,".into() })),
            "unknown-tool" => Ok(Decision::Call(ToolCall { tool: "no_such_tool".into(), arguments: "{}".into() })),
            "huge-string" => Ok(Decision::Fail("x".repeat(100 << 20))),
            "log-flood" => {
                for i in 0..100_000 {
                    keel_guest::info!("flood line {i}");
                }
                Ok(Decision::Complete("\"flooded\"".into()))
            }
            "model-flood" => {
                for _ in 0..1000 {
                    let req = ModelRequest {
                        messages: vec![Message { role: Role::User, content: "hi".into(), tool_calls: vec![], tool_call_id: None }],
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

fn recurse(n: u64) -> u64 {
    let buf = std::hint::black_box([n; 64]);
    if buf[3] == 0 {
        return 0;
    }
    recurse(n + 1) + buf[7]
}

keel_guest::export_agent!(Hostile);
