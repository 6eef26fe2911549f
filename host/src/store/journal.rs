//! A run's whole stored record as its rows hold it, for `keel verify` and
//! `keel export`: the columns as text, not decoded, so that what is
//! checked is exactly what is stored.

use super::encode::{ApprovalRow, StepRow};
use super::StoredModelCall;
use crate::types::Run;

/// One run's rows, read in one snapshot of the store.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Journal {
    /// The run row, decoded.
    pub run: Run,
    /// The run row's `limits` column as stored.
    pub limits: String,
    /// Its step rows in the order of their index.
    pub steps: Vec<StepRow>,
    /// Its approval rows, oldest first.
    pub approvals: Vec<ApprovalRow>,
    /// Its events in the order of their numbers.
    pub events: Vec<ChainedEvent>,
    /// Its model calls, in the order they were recorded.
    pub model_calls: Vec<StoredModelCall>,
}

/// One stored event with its place in the run's hash chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChainedEvent {
    /// Its number in the whole journal.
    pub seq: i64,
    /// Its position in the run's chain; `None` when the row has none.
    pub pos: Option<i64>,
    /// The step it is about, if any (the `step_idx` column).
    pub step_index: Option<i64>,
    /// Its kind as stored, such as `step.started`.
    pub kind: String,
    /// JSON text, as stored.
    pub data: String,
    /// When it was written (ms since the epoch).
    pub at: i64,
    /// The seals of its transition's rows, on a transition's last event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seals: Option<String>,
    /// Its chain hash as stored; `None` when the row has none.
    pub hash: Option<String>,
}
