//! Write Keel plugins in Rust.
//!
//! A plugin is a WebAssembly component that targets one world of the
//! `keel:plugin` WIT package. Enable the cargo feature of that world
//! (`agent`, `policy` or `tool`), implement its trait, and call its export
//! macro once:
//!
//! ```ignore
//! use keel_guest::prelude::*;
//!
//! struct AllowAll;
//! impl Policy for AllowAll {
//!     fn init(_config: &str) -> Result<Self, String> { Ok(AllowAll) }
//!     fn evaluate(&mut self, _call: &ToolCall, _effect: Effect, _view: &View) -> Result<Verdict, String> {
//!         Ok(Verdict::Allow)
//!     }
//! }
//! keel_guest::export_policy!(AllowAll);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2`. The host hands agents and
//! policies the run as deltas; the SDK reassembles them into a [`View`] so
//! user code always sees the whole run.

pub mod args;
pub mod config;
pub mod log;
pub mod render;
mod view;

#[cfg(feature = "agent")]
pub mod agent;
#[cfg(feature = "agent")]
pub mod model;
#[cfg(feature = "policy")]
pub mod policy;
#[cfg(feature = "tool")]
pub mod tool;

pub use view::{DeltaError, View};

/// Generated bindings. Plugin code rarely needs them directly: the types are
/// re-exported at the crate root and the traits wrap the exports.
#[doc(hidden)]
pub mod bindings {
    /// The shared `types` and `log` interfaces, generated once so that every
    /// world uses the same Rust types.
    pub mod common {
        wit_bindgen::generate!({
            inline: "package keel:guest-sdk; world common { import keel:plugin/log@0.1.0; }",
            path: "../wit",
            additional_derives: [PartialEq],
            generate_all,
        });
    }

    #[cfg(feature = "agent")]
    pub mod agent {
        wit_bindgen::generate!({
            world: "keel:plugin/agent",
            path: "../wit",
            with: {
                "keel:plugin/types@0.1.0": crate::bindings::common::keel::plugin::types,
                "keel:plugin/log@0.1.0": crate::bindings::common::keel::plugin::log,
                "keel:plugin/model@0.1.0": generate,
            },
            pub_export_macro: true,
            export_macro_name: "__export_agent_world",
            default_bindings_module: "keel_guest::bindings::agent",
        });
    }

    #[cfg(feature = "policy")]
    pub mod policy {
        wit_bindgen::generate!({
            world: "keel:plugin/policy",
            path: "../wit",
            with: {
                "keel:plugin/types@0.1.0": crate::bindings::common::keel::plugin::types,
                "keel:plugin/log@0.1.0": crate::bindings::common::keel::plugin::log,
            },
            pub_export_macro: true,
            export_macro_name: "__export_policy_world",
            default_bindings_module: "keel_guest::bindings::policy",
        });
    }

    #[cfg(feature = "tool")]
    pub mod tool {
        wit_bindgen::generate!({
            world: "keel:plugin/tool",
            path: "../wit",
            with: {
                "keel:plugin/types@0.1.0": crate::bindings::common::keel::plugin::types,
                "keel:plugin/log@0.1.0": crate::bindings::common::keel::plugin::log,
            },
            pub_export_macro: true,
            export_macro_name: "__export_tool_world",
            default_bindings_module: "keel_guest::bindings::tool",
        });
    }
}

pub use bindings::common::keel::plugin::types::{
    Approval, ApprovalKind, ApprovalRequest, ApprovalStatus, Decision, Effect, FinishReason, Json,
    Level, Message, ModelError, ModelRequest, ModelResponse, ModelToolCall, Observation,
    ObservationKind, PolicyView, Role, RunInfo, RunStatus, Step, StepState, ToolCall, ToolSpec,
    Verdict, ViewDelta,
};

#[cfg(feature = "agent")]
pub use agent::Agent;
#[cfg(feature = "policy")]
pub use policy::Policy;
#[cfg(feature = "tool")]
pub use tool::Tool;

/// Everything a plugin usually needs, in one `use`.
pub mod prelude {
    #[cfg(feature = "agent")]
    pub use crate::agent::Agent;
    #[cfg(feature = "policy")]
    pub use crate::policy::Policy;
    #[cfg(feature = "tool")]
    pub use crate::tool::Tool;
    pub use crate::{
        Approval, ApprovalKind, ApprovalRequest, ApprovalStatus, Decision, Effect, Observation,
        ObservationKind, PolicyView, RunInfo, RunStatus, Step, StepState, ToolCall, ToolSpec,
        Verdict, View,
    };
}

/// The WIT name of an effect class (`"read-only"`, `"local-mutation"`, ...),
/// as configs and JSON spell it.
pub fn effect_name(effect: Effect) -> &'static str {
    vocab_effect(effect).as_str()
}

/// The effect class named `name` in WIT spelling, if there is one.
pub fn parse_effect(name: &str) -> Option<Effect> {
    let e: keel_vocab::Effect = name.parse().ok()?;
    Some(match e {
        keel_vocab::Effect::ReadOnly => Effect::ReadOnly,
        keel_vocab::Effect::Idempotent => Effect::Idempotent,
        keel_vocab::Effect::LocalMutation => Effect::LocalMutation,
        keel_vocab::Effect::RemoteMutation => Effect::RemoteMutation,
        keel_vocab::Effect::Destructive => Effect::Destructive,
    })
}

/// The shared vocabulary's effect of a WIT one.
pub fn vocab_effect(effect: Effect) -> keel_vocab::Effect {
    match effect {
        Effect::ReadOnly => keel_vocab::Effect::ReadOnly,
        Effect::Idempotent => keel_vocab::Effect::Idempotent,
        Effect::LocalMutation => keel_vocab::Effect::LocalMutation,
        Effect::RemoteMutation => keel_vocab::Effect::RemoteMutation,
        Effect::Destructive => keel_vocab::Effect::Destructive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effect_names_round_trip_through_the_shared_spelling() {
        let all = [
            Effect::ReadOnly,
            Effect::Idempotent,
            Effect::LocalMutation,
            Effect::RemoteMutation,
            Effect::Destructive,
        ];
        let mapped: Vec<_> = all.iter().map(|e| vocab_effect(*e)).collect();
        assert_eq!(mapped, keel_vocab::Effect::ALL);
        for e in all {
            assert_eq!(parse_effect(effect_name(e)), Some(e));
        }
        assert_eq!(effect_name(Effect::LocalMutation), "local-mutation");
        assert_eq!(parse_effect("local_mutation"), None);
    }
}
