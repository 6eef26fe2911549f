//! The run's tools: native providers and wasm components behind one table,
//! with argument validation.

pub mod schema;

use crate::consumer::{ToolError, ToolProvider};
use crate::types::{canonical_json, ToolCall, ToolSpec};
use std::collections::HashMap;
use std::sync::Arc;

/// Every tool of a run, by name.
#[derive(Clone, Default)]
pub struct ToolSet {
    specs: Vec<ToolSpec>,
    by_name: HashMap<String, (usize, serde_json::Value, Arc<dyn ToolProvider>)>,
}

/// Why a decision's call cannot run.
#[derive(Debug, Clone, PartialEq)]
pub enum InvalidCall {
    UnknownTool(String),
    NotJson(String),
    Schema(String),
}

impl std::fmt::Display for InvalidCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidCall::UnknownTool(t) => write!(f, "unknown tool {t:?}"),
            InvalidCall::NotJson(e) => write!(f, "arguments are not a JSON object: {e}"),
            InvalidCall::Schema(e) => write!(f, "arguments do not match the tool's schema: {e}"),
        }
    }
}

impl ToolSet {
    pub fn new() -> ToolSet {
        ToolSet::default()
    }

    /// Adds every tool of `provider`. A name already taken or a schema that
    /// is not JSON is an error.
    pub fn add(&mut self, provider: Arc<dyn ToolProvider>) -> Result<(), String> {
        for spec in provider.specs() {
            if self.by_name.contains_key(&spec.name) {
                return Err(format!("two tools are named {:?}", spec.name));
            }
            let schema: serde_json::Value =
                serde_json::from_str(&spec.parameters).map_err(|e| {
                    format!(
                        "tool {:?}: its parameters schema is not JSON: {e}",
                        spec.name
                    )
                })?;
            self.by_name.insert(
                spec.name.clone(),
                (self.specs.len(), schema, provider.clone()),
            );
            self.specs.push(spec);
        }
        Ok(())
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.by_name.get(name).map(|(i, _, _)| &self.specs[*i])
    }

    /// Checks a call and returns it with canonical arguments.
    pub fn validate(&self, call: &ToolCall) -> Result<(ToolCall, &ToolSpec), InvalidCall> {
        let (i, schema, _) = self
            .by_name
            .get(&call.tool)
            .ok_or_else(|| InvalidCall::UnknownTool(call.tool.clone()))?;
        let args: serde_json::Value = serde_json::from_str(&call.arguments)
            .map_err(|e| InvalidCall::NotJson(e.to_string()))?;
        if !args.is_object() {
            return Err(InvalidCall::NotJson("not an object".into()));
        }
        schema::validate(schema, &args).map_err(InvalidCall::Schema)?;
        Ok((
            ToolCall {
                tool: call.tool.clone(),
                arguments: canonical_json(&args),
            },
            &self.specs[*i],
        ))
    }

    /// Runs a validated call.
    pub async fn call(&self, call: &ToolCall) -> Result<String, ToolError> {
        let (_, _, provider) = self
            .by_name
            .get(&call.tool)
            .ok_or_else(|| ToolError::new(format!("unknown tool {:?}", call.tool)))?;
        provider.call(&call.tool, &call.arguments).await
    }
}
