//! A read-only SQLite store behind [`RunReader`], for operators' reads:
//! never creates, migrates or writes the file. Each read runs on tokio's
//! blocking pool, off the async threads.

use super::Store;
use crate::store::{Event, RunReader, StoreError, StoredModelCall};
use crate::types::*;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A SQLite store opened read-only, for operators' reads; clones share one
/// connection.
#[derive(Clone)]
pub struct ReadOnlyStore(Arc<Mutex<Store>>);

impl ReadOnlyStore {
    /// Opens the store at `path` read-only ([`Store::open_read_only`]).
    pub fn open(path: impl AsRef<Path>) -> Result<ReadOnlyStore, StoreError> {
        Ok(ReadOnlyStore(Arc::new(Mutex::new(Store::open_read_only(
            path,
        )?))))
    }

    async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let store = self.0.clone();
        tokio::task::spawn_blocking(move || {
            // A panic in a read leaves nothing half-written: reads only.
            let s = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&s)
        })
        .await
        .map_err(|e| StoreError::Refused(format!("a store read failed: {e}")))?
    }
}

#[async_trait::async_trait]
impl RunReader for ReadOnlyStore {
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        let id = id.to_string();
        self.read(move |s| s.get_run(&id)).await
    }
    async fn find_runs(&self, q: &crate::store::RunQuery) -> Result<Vec<Run>, StoreError> {
        let q = q.clone();
        self.read(move |s| s.find_runs(&q)).await
    }
    async fn list_approvals(
        &self,
        status: Option<crate::types::ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<crate::types::Approval>, StoreError> {
        self.read(move |s| s.list_approvals(status, limit)).await
    }
    async fn count_runs(&self) -> Result<Vec<(crate::types::RunStatus, u64)>, StoreError> {
        self.read(move |s| s.count_runs()).await
    }
    async fn last_event_seq(&self) -> Result<i64, StoreError> {
        self.read(move |s| s.last_event_seq()).await
    }
    async fn steps(&self, run_id: &str) -> Result<Vec<Step>, StoreError> {
        let id = run_id.to_string();
        self.read(move |s| s.load_steps(&id)).await
    }
    async fn approvals(&self, run_id: &str) -> Result<Vec<Approval>, StoreError> {
        let id = run_id.to_string();
        self.read(move |s| s.load_approvals(&id)).await
    }
    async fn approval(&self, id: &str) -> Result<Approval, StoreError> {
        let id = id.to_string();
        self.read(move |s| s.approval(&id)).await
    }
    async fn events_after(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let id = run_id.map(str::to_string);
        self.read(move |s| s.events_after(id.as_deref(), after, limit))
            .await
    }
    async fn model_calls(&self, run_id: &str) -> Result<Vec<StoredModelCall>, StoreError> {
        let id = run_id.to_string();
        self.read(move |s| s.model_calls(&id)).await
    }
    async fn count_events(&self) -> Result<u64, StoreError> {
        self.read(|s| s.count_events()).await
    }
    async fn journal(&self, run_id: &str) -> Result<crate::store::Journal, StoreError> {
        let id = run_id.to_string();
        self.read(move |s| s.journal(&id)).await
    }
    async fn finished_runs(&self, q: &crate::store::Finished) -> Result<Vec<Run>, StoreError> {
        let q = q.clone();
        self.read(move |s| s.finished_runs(&q)).await
    }
}
