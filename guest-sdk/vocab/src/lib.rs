//! The vocabulary a Keel host and its plugins share, free of either side.
//!
//! The host (`keel`) and the Rust guest SDK (`keel-guest`) both depend on
//! this crate, and it depends on neither: no wit-bindgen, no wasmtime, no
//! store. It holds
//!
//! * [`Effect`] and [`ObservationKind`], with the one spelling configs, the
//!   store and JSON use;
//! * the model vocabulary ([`model`]): messages, requests, responses and
//!   errors as a provider sees them;
//! * the prompt render ([`render`]): a run's steps as chat messages, by the
//!   rules every Keel agent follows, native or plugin.
//!
//! Each side maps its own boundary types (the WIT values on the guest, the
//! stored rows on the host) to these in one place.

#![warn(missing_docs)]

#[macro_use]
mod spelled;

pub mod model;
pub mod render;

pub use model::{
    FinishReason, Message, ModelError, ModelRequest, ModelResponse, ModelToolCall, Role, ToolSpec,
};

spelled_enum! {
    /// What running a tool may do to the world, from harmless to
    /// irreversible. Policies judge calls by it and recovery decides by it
    /// whether an interrupted call may run again.
    pub enum Effect {
        /// Reads only; running it twice changes nothing.
        ReadOnly = "read-only",
        /// Changes the world, but running it again has no further effect.
        Idempotent = "idempotent",
        /// Changes files or state on this machine.
        LocalMutation = "local-mutation",
        /// Changes something on another system.
        RemoteMutation = "remote-mutation",
        /// Destroys something that cannot be brought back.
        Destructive = "destructive",
    }
}

impl Effect {
    /// May a call with this effect run again after a crash interrupted it?
    pub fn safe_to_retry(self) -> bool {
        matches!(self, Effect::ReadOnly | Effect::Idempotent)
    }
}

spelled_enum! {
    /// What a step's observation is: how the step's decision ended.
    pub enum ObservationKind {
        /// The tool ran and returned this result.
        ToolResult = "tool_result",
        /// The tool ran and failed with this error.
        ToolError = "tool_error",
        /// The policy or an operator refused the call.
        Denied = "denied",
        /// The agent's decision could not be used (unknown tool, bad
        /// arguments).
        InvalidDecision = "invalid_decision",
        /// The run's final answer.
        Final = "final",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_back_to_its_value() {
        for e in Effect::ALL {
            assert_eq!(e.as_str().parse::<Effect>(), Ok(*e));
        }
        for k in ObservationKind::ALL {
            assert_eq!(k.as_str().parse::<ObservationKind>(), Ok(*k));
        }
        assert!("readonly".parse::<Effect>().is_err());
    }

    #[test]
    fn only_harmless_effects_are_retried() {
        let retried: Vec<_> = Effect::ALL.iter().filter(|e| e.safe_to_retry()).collect();
        assert_eq!(retried, [&Effect::ReadOnly, &Effect::Idempotent]);
    }
}
