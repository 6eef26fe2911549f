//! The host's model client, for agents.

use crate::{ModelError, ModelRequest, ModelResponse};

/// Asks the host's model provider for a completion. The host counts the call
/// and its tokens against the run's limits; past them it returns
/// `ModelError::LimitExceeded`.
pub fn complete(request: &ModelRequest) -> Result<ModelResponse, ModelError> {
    crate::bindings::agent::keel::plugin::model::complete(request)
}
