//! Embedding Keel in a Rust program: open a store, register one native tool
//! beside a wasm agent and a wasm policy, start a run, handle its approval in
//! code, resume and print the result.
//!
//! Run it after `make plugins`:
//!     cargo run -p keel-embed-example -- [PLUGINS_DIR]

use anyhow::Context;
use keel::model::StubProvider;
use keel::wasm::{EngineOptions, PluginLimits, WasmAgent, WasmHost, WasmPolicy, World};
use keel::*;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

/// The host program's own capability, offered to the agent as a tool.
fn inventory_tool() -> Arc<dyn ToolProvider> {
    let spec = ToolSpec {
        name: "reserve_stock".into(),
        description: "Reserve units of an item in the warehouse.".into(),
        parameters: r#"{"type":"object","properties":{"item":{"type":"string"},"units":{"type":"integer","minimum":1}},"required":["item","units"],"additionalProperties":false}"#.into(),
        effect: Effect::RemoteMutation,
    };
    Arc::new(FnTool::new(spec, |args| {
        let units = args["units"].as_i64().unwrap_or(0);
        Ok(json!({ "reserved": units, "item": args["item"], "left": 100 - units }))
    }))
}

async fn consumers(host: &WasmHost, plugins: &std::path::Path) -> anyhow::Result<Consumers> {
    let agent = host.load(
        &plugins.join("agent-scripted-rust.wasm"),
        World::Agent,
        None,
    )?;
    let policy = host.load(&plugins.join("policy-rules-rust.wasm"), World::Policy, None)?;
    let mut tools = ToolSet::new();
    tools.add(inventory_tool()).map_err(anyhow::Error::msg)?;
    let script = json!({ "script": [
        { "call": { "tool": "reserve_stock", "arguments": { "item": "widget", "units": 3 } } },
        { "complete": { "reserved": 3 } },
    ]});
    let rules = json!({ "rules": [
        { "effect": "remote-mutation", "action": "require-approval", "reason": "reservations need sign-off" },
    ]});
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::default()));
    let a = WasmAgent::new(
        host,
        &agent,
        &script.to_string(),
        tools.specs(),
        &PluginLimits::default(),
        &wiring,
    )
    .await?;
    let p = WasmPolicy::new(
        host,
        &policy,
        &rules.to_string(),
        &PluginLimits::default(),
        &wiring,
    )
    .await?;
    Ok(wiring.build(Box::new(a), Box::new(p), tools))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let plugins = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/plugins"));
    let dir = std::env::temp_dir().join(format!("keel-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // The store: a SQLite file here; KEEL_STORE may name another file or
    // a postgres:// URL. The runtime reaches it only through `RunStore`.
    let location = std::env::var("KEEL_STORE")
        .map(|s| keel::store::Location::parse(&s))
        .unwrap_or_else(|_| keel::store::Location::File(dir.join("keel.db")));

    let host = WasmHost::new(EngineOptions {
        cache_dir: Some(dir.join("cache")),
        ..EngineOptions::default()
    })?;
    let store = keel::store::open(&location, keel::store::OpenOptions::default())
        .await
        .with_context(|| format!("opening the store {location}"))?;
    let runtime = Runtime::on(store);

    let out = runtime
        .start(
            "reserve three widgets",
            Limits::default(),
            "{}",
            consumers(&host, &plugins).await?,
        )
        .await?;
    let approval = out
        .pending
        .context("the policy should have asked for approval")?;
    println!(
        "paused: {} wants {} {} ({})",
        out.run.id, approval.call.tool, approval.call.arguments, approval.reason
    );

    // The program decides itself, through the operator's API as `keel
    // approve` does.
    let op = runtime.operator();
    let units: i64 = serde_json::from_str::<serde_json::Value>(&approval.call.arguments)?["units"]
        .as_i64()
        .unwrap_or(0);
    let note = Some("under the limit of 10");
    if units <= 10 {
        op.approve(&approval.id, "embed-example", note).await?;
    } else {
        op.deny(&approval.id, "embed-example", note).await?;
    }

    let done = runtime
        .resume(&out.run.id, consumers(&host, &plugins).await?)
        .await?;
    println!(
        "run {} {}: {}",
        done.run.id,
        done.run.status,
        done.run.result.as_deref().unwrap_or("null")
    );
    for s in op.show(&done.run.id).await?.steps {
        if let Some(o) = s.observation {
            println!("  step {}: {} {}", s.index, o.kind, o.content);
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    anyhow::ensure!(
        done.run.status == RunStatus::Completed,
        "the run did not complete"
    );
    Ok(())
}
