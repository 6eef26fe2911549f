//! The run's tools: native providers and wasm components behind one table,
//! with argument validation.

pub mod mcp;
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
    /// Tools the operator requires an approval for, whatever the policy says.
    approval_required: std::collections::HashSet<String>,
    /// MCP tools' pins, which their approvals' hashes cover.
    pins: HashMap<String, String>,
}

/// Why a decision's call cannot run.
#[derive(Debug, Clone, PartialEq)]
pub enum InvalidCall {
    /// No tool of the run has the name the call gives.
    UnknownTool(String),
    /// The arguments are not a JSON object; says why.
    NotJson(String),
    /// The arguments do not match the tool's parameters schema; says why.
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
    /// An empty table.
    pub fn new() -> ToolSet {
        ToolSet::default()
    }

    /// Adds every tool of `provider`. A name already taken, a schema that
    /// is not JSON, or a spec over the bounds of [`schema::SpecBounds`] is
    /// an error.
    pub fn add(&mut self, provider: Arc<dyn ToolProvider>) -> Result<(), String> {
        let specs = provider.specs();
        schema::check_specs(&specs)?;
        for spec in specs {
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
            schema::check_schema(&spec.name, &schema)?;
            self.by_name.insert(
                spec.name.clone(),
                (self.specs.len(), schema, provider.clone()),
            );
            self.specs.push(spec);
        }
        Ok(())
    }

    /// Sets the effect of tool `name`, whatever its provider claims: the
    /// operator's word on what a tool may do is what the policy judges and
    /// what crash recovery trusts.
    pub fn pin_effect(&mut self, name: &str, effect: crate::types::Effect) -> Result<(), String> {
        let i = self.index(name)?;
        self.specs[i].effect = effect;
        Ok(())
    }

    /// Makes every call of tool `name` wait for an operator's approval,
    /// even when the policy allows it.
    pub fn require_approval(&mut self, name: &str) -> Result<(), String> {
        self.index(name)?;
        self.approval_required.insert(name.to_string());
        Ok(())
    }

    /// Records the pin of tool `name`'s schemas (an MCP tool's server pin).
    pub fn set_pin(&mut self, name: &str, pin: &str) -> Result<(), String> {
        self.index(name)?;
        self.pins.insert(name.to_string(), pin.to_string());
        Ok(())
    }

    /// The pin of tool `name`'s schemas, if it has one.
    pub fn pin(&self, name: &str) -> Option<&str> {
        self.pins.get(name).map(String::as_str)
    }

    /// Whether the operator requires an approval for every call of `name`.
    pub fn approval_required(&self, name: &str) -> bool {
        self.approval_required.contains(name)
    }

    fn index(&self, name: &str) -> Result<usize, String> {
        match self.by_name.get(name) {
            Some((i, _, _)) => Ok(*i),
            None => {
                let known: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
                Err(format!(
                    "no tool is named {name:?} (the tools are: {})",
                    known.join(", ")
                ))
            }
        }
    }

    /// Every tool's spec, in the order the tools were added.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The spec of tool `name`, if the run has it.
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
