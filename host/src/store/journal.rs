//! A run's whole stored record as its rows hold it, for `keel verify` and
//! `keel export`: the columns as text, not decoded, so that what is
//! checked is exactly what is stored.

use super::encode::{ApprovalRow, StepRow};
use super::StoredModelCall;
use crate::types::Run;

/// One run's rows, read in one snapshot of the store.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Journal {
    pub run: Run,
    /// The run row's `limits` column as stored.
    pub limits: String,
    pub steps: Vec<StepRow>,
    pub approvals: Vec<ApprovalRow>,
    /// Its events in the order of their numbers.
    pub events: Vec<ChainedEvent>,
    pub model_calls: Vec<StoredModelCall>,
}

/// One stored event with its place in the run's hash chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChainedEvent {
    /// Its number in the whole journal.
    pub seq: i64,
    /// Its position in the run's chain; `None` when the row has none.
    pub pos: Option<i64>,
    pub step_index: Option<i64>,
    pub kind: String,
    /// JSON text, as stored.
    pub data: String,
    pub at: i64,
    /// The seals of its transition's rows, on a transition's last event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seals: Option<String>,
    pub hash: Option<String>,
}
