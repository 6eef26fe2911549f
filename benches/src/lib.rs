//! Scenarios shared by the benchmarks: the n-step run of reference
//! scenario 000 (n−1 allowed tool calls with distinct arguments, then
//! complete; the tool answers with its arguments or with ~8 KiB of JSON),
//! with native or wasm consumers.

use async_trait::async_trait;
use keel::consumer::EventSink;
use keel::model::{ModelGate, StubProvider};
use keel::*;
use std::sync::Arc;

/// Calls `echo` with `{"i": k}` for k < n−1, then completes.
pub struct CountingAgent {
    pub n: u32,
}

#[async_trait]
impl Agent for CountingAgent {
    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError> {
        let k = view.steps.len() as u32;
        Ok(if k + 1 >= self.n {
            Decision::Complete("true".into())
        } else {
            Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: format!("{{\"i\":{k}}}"),
            })
        })
    }
}

pub struct AllowAll;

#[async_trait]
impl Policy for AllowAll {
    async fn evaluate(
        &mut self,
        _: &ToolCall,
        _: Effect,
        _: RunView<'_>,
    ) -> Result<Verdict, ConsumerError> {
        Ok(Verdict::Allow)
    }
}

/// The echo tool; with `pad` it answers with ~8 KiB of JSON.
pub fn echo_tool(pad: usize) -> Arc<dyn ToolProvider> {
    let spec = ToolSpec {
        name: "echo".into(),
        description: "echo".into(),
        parameters: r#"{"type":"object"}"#.into(),
        effect: Effect::ReadOnly,
    };
    let padding = "x".repeat(pad);
    Arc::new(FnTool::new(spec, move |args| {
        Ok(if padding.is_empty() {
            args
        } else {
            serde_json::json!({ "echo": args, "pad": padding })
        })
    }))
}

pub fn native_consumers(n: u32, pad: usize) -> Consumers {
    let mut tools = ToolSet::new();
    let _ = tools.add(echo_tool(pad));
    Consumers::new(
        Box::new(CountingAgent { n }),
        Box::new(AllowAll),
        tools,
        Arc::new(ModelGate::new(Arc::new(StubProvider::default()))),
        Arc::new(EventSink::default()),
    )
}

pub fn limits(n: u32) -> Limits {
    Limits {
        max_steps: n + 1,
        max_identical_calls: 0,
        ..Limits::default()
    }
}
