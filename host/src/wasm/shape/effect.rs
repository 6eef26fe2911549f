//! Effects and tool specs across the wasm boundary.

use crate::types::{Effect, ToolSpec};
use crate::wasm::bindings::wit;

/// An effect as the WIT spells it.
pub fn effect_out(e: Effect) -> wit::Effect {
    match e {
        Effect::ReadOnly => wit::Effect::ReadOnly,
        Effect::Idempotent => wit::Effect::Idempotent,
        Effect::LocalMutation => wit::Effect::LocalMutation,
        Effect::RemoteMutation => wit::Effect::RemoteMutation,
        Effect::Destructive => wit::Effect::Destructive,
    }
}

/// A plugin's effect as the host's.
pub fn effect_in(e: wit::Effect) -> Effect {
    match e {
        wit::Effect::ReadOnly => Effect::ReadOnly,
        wit::Effect::Idempotent => Effect::Idempotent,
        wit::Effect::LocalMutation => Effect::LocalMutation,
        wit::Effect::RemoteMutation => Effect::RemoteMutation,
        wit::Effect::Destructive => Effect::Destructive,
    }
}

/// A tool spec as handed to an agent's `init`.
pub fn tool_spec_out(s: &ToolSpec) -> wit::ToolSpec {
    wit::ToolSpec {
        name: s.name.clone(),
        description: s.description.clone(),
        parameters: s.parameters.clone(),
        effect: effect_out(s.effect),
    }
}

/// A spec a tool plugin or a model request declares, as the host's.
pub fn tool_spec_in(s: wit::ToolSpec) -> ToolSpec {
    ToolSpec {
        name: s.name,
        description: s.description,
        parameters: s.parameters,
        effect: effect_in(s.effect),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_effect_crosses_the_boundary_and_back_unchanged() {
        for e in Effect::ALL {
            assert_eq!(effect_in(effect_out(*e)), *e);
        }
        // Distinct effects stay distinct on the WIT side.
        let out: std::collections::HashSet<_> = Effect::ALL
            .iter()
            .map(|e| format!("{:?}", effect_out(*e)))
            .collect();
        assert_eq!(out.len(), Effect::ALL.len());
    }

    #[test]
    fn a_tool_spec_crosses_the_boundary_and_back_unchanged() {
        for e in Effect::ALL {
            let spec = ToolSpec {
                name: "fs_write".into(),
                description: "Writes a file.".into(),
                parameters: r#"{"type":"object"}"#.into(),
                effect: *e,
            };
            assert_eq!(tool_spec_in(tool_spec_out(&spec)), spec);
        }
    }
}
