//! The durable store's boundary: the vocabulary every engine writes and
//! reads (transitions with their compare-and-set, events, model calls), and
//! the errors callers match on. It depends on nothing but `types`.
//!
//! Every state transition of a run is one transaction that also inserts its
//! events, and every write is a compare-and-set on the run's status and lease
//! owner. [`sqlite`] is the engine today: one file in WAL mode.

mod error;
pub mod lease;
pub mod sqlite;

pub use error::StoreError;
pub use sqlite::{
    ApprovalRow, Prepared, StepRow, Store, StoreHandle, Sync, Write, WriterStats, Written,
    BUSY_TIMEOUT_MS, CURRENT_VERSION, MIGRATIONS, WAL_CHECKPOINT_PAGES, WRITER_THREAD,
};

use crate::types::*;

/// An event about to be inserted with its transition.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub step_index: Option<u32>,
    pub kind: EventKind,
    pub data: serde_json::Value,
}

impl NewEvent {
    pub fn new(kind: EventKind, step_index: Option<u32>, data: serde_json::Value) -> NewEvent {
        NewEvent {
            step_index,
            kind,
            data,
        }
    }
}

/// One state transition of one run: the run's new row, the steps and
/// approvals it writes, and its events. `expect` is the compare-and-set.
#[derive(Debug, Clone)]
pub struct Transition {
    pub expect: Expect,
    pub run: Run,
    pub steps: Vec<Step>,
    pub approvals: Vec<Approval>,
    pub events: Vec<NewEvent>,
    /// Model calls made since the previous transition, recorded with it.
    pub model_calls: Vec<ModelCallRecord>,
}

/// One call to the model provider, as accounted.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCallRecord {
    pub step_index: u32,
    pub provider: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// `ok`, `error` or `refused_limit`.
    pub outcome: &'static str,
    pub error: Option<String>,
    pub latency_ms: u64,
}

/// One model call as stored, for operators' reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoredModelCall {
    pub step_index: u32,
    pub provider: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// `ok`, `error` or `refused_limit`.
    pub outcome: String,
    /// What went wrong, as text.
    pub error: Option<String>,
    pub latency_ms: i64,
    /// When it was recorded (ms since the epoch).
    pub at: i64,
}

/// What the run row must still say for a transition to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub status: RunStatus,
    /// The lease owner that must hold the run (`None`: nobody may hold it).
    pub owner: Option<String>,
}

/// What a committed transition wrote, decoded from the bound columns.
#[derive(Debug, Clone)]
pub struct Committed {
    pub run: Run,
    pub steps: Vec<Step>,
    pub approvals: Vec<Approval>,
    pub events: Vec<Event>,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    pub seq: i64,
    pub run_id: String,
    pub step_index: Option<u32>,
    /// As stored: an [`EventKind`]'s spelling, or one a newer Keel wrote.
    pub kind: String,
    /// JSON text.
    pub data: String,
    pub at: i64,
}
