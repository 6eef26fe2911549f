//! `tool-echo`: answers with its arguments. For tests, demos and benchmarks.

use keel_guest::config;
use keel_guest::prelude::*;
use serde_json::Value;

pub struct Echo {
    name: String,
    pad_bytes: usize,
}

impl Tool for Echo {
    fn init(text: &str) -> Result<Self, String> {
        let mut c = config::parse(text)?;
        let name = c.opt_str("name")?.unwrap_or_else(|| "echo".into());
        let pad_bytes = c.opt_u64("pad_bytes")?.unwrap_or(0);
        if pad_bytes > 16 << 20 {
            return Err(format!("{}: at most 16777216", c.key_path("pad_bytes")));
        }
        c.finish()?;
        Ok(Echo {
            name,
            pad_bytes: pad_bytes as usize,
        })
    }

    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: self.name.clone(),
            description: "Returns its arguments unchanged (and a padding string when configured)."
                .into(),
            parameters: r#"{"type":"object"}"#.into(),
            effect: Effect::ReadOnly,
        }]
    }

    fn call(&mut self, name: &str, arguments: &str) -> Result<String, String> {
        if name != self.name {
            return Err(format!("unknown tool {name:?}"));
        }
        if self.pad_bytes == 0 {
            return Ok(arguments.to_string());
        }
        let args: Value = serde_json::from_str(arguments).map_err(|e| format!("arguments: {e}"))?;
        Ok(serde_json::json!({ "echo": args, "pad": "x".repeat(self.pad_bytes) }).to_string())
    }
}

keel_guest::export_tool!(Echo);
