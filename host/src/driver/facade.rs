//! The operator's API: list and show runs, read their journals, approve,
//! deny and cancel, on any store engine. The CLI and embedders use this
//! and never reach a store's connection themselves; the rules it commits
//! are `driver::operator`'s.

use super::clock::{Clock, SystemClock};
use super::operator::{cancel_in, decide_in};
use crate::store::{Event, RunReader, RunStore, StoreError, StoredModelCall};
use crate::types::*;
use std::sync::Arc;

/// Everything stored about one run, as `keel show` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunDetail {
    /// The run's current record.
    pub run: Run,
    /// The run's steps, as the store returns them.
    pub steps: Vec<Step>,
    /// Every approval the run asked for, whatever its status.
    pub approvals: Vec<Approval>,
    /// The model calls made during the run, every attempt, in order.
    pub model_calls: Vec<StoredModelCall>,
}

/// Reads, and with a writable store decisions and cancels.
#[derive(Clone)]
pub struct Operator {
    reader: Arc<dyn RunReader>,
    store: Option<Arc<dyn RunStore>>,
    clock: Arc<dyn Clock>,
}

impl Operator {
    /// An operator that only reads (a read-only store): writes are
    /// refused with [`StoreError::ReadOnly`].
    pub fn reading(reader: Arc<dyn RunReader>) -> Operator {
        Operator {
            reader,
            store: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// An operator that reads and writes `store`.
    pub fn writing(store: Arc<dyn RunStore>) -> Operator {
        Operator {
            reader: store.clone(),
            store: Some(store),
            clock: Arc::new(SystemClock),
        }
    }

    /// Uses `clock` instead of the wall clock to time decisions and cancels.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Operator {
        self.clock = clock;
        self
    }

    fn store(&self) -> Result<&dyn RunStore, StoreError> {
        self.store.as_deref().ok_or(StoreError::ReadOnly)
    }

    /// The newest runs first, at most `limit`, with `status` if given.
    pub async fn runs(
        &self,
        status: Option<RunStatus>,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError> {
        self.reader.list_runs(status, limit).await
    }

    /// The run with id `run_id`, or [`StoreError::RunNotFound`].
    pub async fn run(&self, run_id: &str) -> Result<Run, StoreError> {
        self.reader.run(run_id).await
    }

    /// The run with its steps, approvals and model calls.
    pub async fn show(&self, run_id: &str) -> Result<RunDetail, StoreError> {
        Ok(RunDetail {
            run: self.reader.run(run_id).await?,
            steps: self.reader.steps(run_id).await?,
            approvals: self.reader.approvals(run_id).await?,
            model_calls: self.reader.model_calls(run_id).await?,
        })
    }

    /// The run's pending approval, if it waits for one.
    pub async fn pending_approval(&self, run_id: &str) -> Result<Option<Approval>, StoreError> {
        Ok(self
            .reader
            .approvals(run_id)
            .await?
            .into_iter()
            .rev()
            .find(|a| a.status == ApprovalStatus::Pending))
    }

    /// Events numbered above `after`, oldest first, of one run or of all.
    pub async fn events(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        self.reader.events_after(run_id, after, limit).await
    }

    /// Approves `id`: an approval's id, or the id of a run with exactly one
    /// pending approval. The run stays paused until it is resumed.
    pub async fn approve(
        &self,
        id: &str,
        who: &str,
        note: Option<&str>,
    ) -> Result<Approval, StoreError> {
        self.decide(id, true, who, note).await
    }

    /// Denies `id` (as [`Operator::approve`]).
    pub async fn deny(
        &self,
        id: &str,
        who: &str,
        note: Option<&str>,
    ) -> Result<Approval, StoreError> {
        self.decide(id, false, who, note).await
    }

    async fn decide(
        &self,
        id: &str,
        approve: bool,
        who: &str,
        note: Option<&str>,
    ) -> Result<Approval, StoreError> {
        let store = self.store()?;
        let approval_id = match self.reader.get_run(id).await? {
            None => id.to_string(),
            Some(_) => {
                let pending: Vec<Approval> = self
                    .reader
                    .approvals(id)
                    .await?
                    .into_iter()
                    .filter(|a| a.status == ApprovalStatus::Pending)
                    .collect();
                match pending.as_slice() {
                    [a] => a.id.clone(),
                    [] => {
                        return Err(StoreError::Refused(format!(
                            "run {id} has no pending approval"
                        )))
                    }
                    _ => {
                        return Err(StoreError::Refused(format!(
                            "run {id} has several pending approvals; name one"
                        )))
                    }
                }
            }
        };
        decide_in(store, &approval_id, approve, who, note, self.clock.now_ms()).await
    }

    /// Cancels the run on behalf of `who` (see `driver::operator`).
    pub async fn cancel(&self, run_id: &str, who: &str) -> Result<Run, StoreError> {
        cancel_in(self.store()?, run_id, who, self.clock.now_ms()).await
    }
}
