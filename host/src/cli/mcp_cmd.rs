//! `keel mcp inspect`: what an MCP server offers, and the `[[tools]]`
//! block that pins it.

use super::exit;
use crate::tools::mcp::{self, Endpoint, Snapshot};
use crate::types::Effect;
use anyhow::anyhow;
use clap::Subcommand;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Start a server (`-- COMMAND ARGS...`, or `--url`), list its tools
    /// with their schemas and annotations, and print the `[[tools]]` block
    /// to paste, pin included.
    Inspect {
        /// A streamable-HTTP server instead of a command.
        #[arg(long)]
        url: Option<String>,
        /// Pin only these tools (comma-separated; default: every tool).
        #[arg(long, value_delimiter = ',')]
        expose: Vec<String>,
        /// How long the server may take to start and list its tools, in ms.
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
        /// Keep the pinned schemas here, so that a run can later say what
        /// changed if the pin stops matching (a config's
        /// `engine.cache_dir`, `mcp` inside it, is where runs look).
        #[arg(long, default_value = ".keel/cache")]
        cache_dir: PathBuf,
        #[arg(long)]
        json: bool,
        /// The server's program and arguments.
        #[arg(last = true)]
        command: Vec<String>,
    },
}

pub async fn run(cmd: McpCommand) -> anyhow::Result<i32> {
    let McpCommand::Inspect {
        url,
        expose,
        timeout_ms,
        cache_dir,
        json,
        command,
    } = cmd;
    let endpoint = match (url, command.is_empty()) {
        (Some(_), false) => return Err(anyhow!("give a command after `--` or a --url, not both")),
        (None, true) => return Err(anyhow!("give the server's command after `--`, or a --url")),
        (Some(url), true) => Endpoint::Http { url },
        (None, false) => Endpoint::Stdio {
            command: command.clone(),
            env: vec![],
            cwd: None,
        },
    };
    let found = mcp::inspect(&endpoint, Duration::from_millis(timeout_ms)).await?;
    if found.tools.is_empty() {
        return Err(anyhow!("{endpoint}: it lists no tools"));
    }
    let names: Vec<String> = if expose.is_empty() {
        found.tools.keys().cloned().collect()
    } else {
        expose
    };
    let mut exposed = Snapshot::new();
    for n in &names {
        let e = found.tools.get(n).ok_or_else(|| {
            let all: Vec<&str> = found.tools.keys().map(String::as_str).collect();
            anyhow!(
                "--expose names {n:?}, which {endpoint} does not list (it lists: {})",
                all.join(", ")
            )
        })?;
        exposed.insert(n.clone(), e.clone());
    }
    mcp::SnapshotDir(cache_dir.join("mcp")).keep(&exposed);
    let pin = mcp::pin_of(&exposed);
    let problems: Vec<String> = exposed
        .iter()
        .filter_map(|(n, e)| mcp::check_input_schema(n, &e["inputSchema"]).err())
        .collect();
    if json {
        let out = json!({
            "server": found.server,
            "protocol": found.protocol,
            "tools": found.tools.values().collect::<Vec<_>>(),
            "expose": names,
            "pin": pin,
            "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!(
            "{}",
            human(&found, &endpoint, &exposed, &pin, &command, &problems)
        );
    }
    Ok(if problems.is_empty() {
        exit::OK
    } else {
        exit::USAGE
    })
}

/// The listing and the block, as text.
fn human(
    found: &mcp::Inspection,
    endpoint: &Endpoint,
    exposed: &Snapshot,
    pin: &str,
    command: &[String],
    problems: &[String],
) -> String {
    use std::fmt::Write;
    let safe = |s: &str| super::output::safe_lines(s);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "server: {} (protocol {})",
        safe(&found.server),
        found.protocol
    );
    for (name, e) in &found.tools {
        let _ = writeln!(out, "\ntool {}", safe(name));
        if let Some(d) = e["description"].as_str() {
            let _ = writeln!(out, "  description: {}", safe(d));
        }
        if !e["annotations"].is_null() {
            let _ = writeln!(out, "  annotations: {}", e["annotations"]);
        }
        let _ = writeln!(out, "  input schema: {}", e["inputSchema"]);
        if !e["outputSchema"].is_null() {
            let _ = writeln!(out, "  output schema: {}", e["outputSchema"]);
        }
    }
    for p in problems {
        let _ = writeln!(out, "\nproblem: {}", safe(p));
    }
    let quoted = |items: &mut dyn Iterator<Item = &String>| {
        items
            .map(|s| serde_json::to_string(s).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let source = match endpoint {
        Endpoint::Http { url } => format!("{{ url = {} }}", quoted(&mut std::iter::once(url))),
        Endpoint::Stdio { .. } => format!("{{ command = [{}] }}", quoted(&mut command.iter())),
    };
    let _ = writeln!(
        out,
        "\n# paste into the config; the pin covers exactly the tools in `expose`"
    );
    let _ = writeln!(out, "[[tools]]\nmcp = {source}");
    let _ = writeln!(out, "expose = [{}]", quoted(&mut exposed.keys()));
    let _ = writeln!(out, "pin = \"{pin}\"");
    let effects: Vec<String> = exposed
        .iter()
        .map(|(n, e)| {
            format!(
                "{} = \"{}\"",
                serde_json::to_string(n).unwrap_or_default(),
                hinted_effect(&e["annotations"]).as_str()
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "# from the server's hints, which Keel does not trust: check each; a tool left out is destructive"
    );
    let _ = writeln!(out, "effect = {{ {} }}", effects.join(", "));
    out
}

/// The effect a server's annotations suggest.
fn hinted_effect(a: &Value) -> Effect {
    let hint = |k: &str| a.get(k).and_then(Value::as_bool);
    if hint("readOnlyHint") == Some(true) {
        Effect::ReadOnly
    } else if hint("destructiveHint") == Some(false) && hint("idempotentHint") == Some(true) {
        Effect::Idempotent
    } else if hint("destructiveHint") == Some(false) {
        if hint("openWorldHint") == Some(false) {
            Effect::LocalMutation
        } else {
            Effect::RemoteMutation
        }
    } else {
        Effect::Destructive
    }
}
