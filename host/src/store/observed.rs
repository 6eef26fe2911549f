//! A store that passes everything on to another and tells an observer
//! what was committed: how `keel serve` counts and times its commits and
//! wakes its event follower, and how a bench learns when each event was
//! committed, without a second copy of the store's methods.

use super::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Told about the writes that pass through an [`Observed`] store.
pub trait CommitObserver: Send + Sync {
    /// A transition or a new run was committed, taking `took`, with the
    /// model calls it recorded.
    fn committed(&self, c: &Committed, took: Duration, calls: &[ModelCallRecord]);
    /// A transition was refused by its compare-and-set.
    fn conflicted(&self) {}
    /// Runs were claimed (their lease transitions committed).
    fn claimed(&self, _runs: &[Run]) {}
    /// A new run is about to be written (before its insert).
    fn creating(&self, _run: &Run, _steps: &[Step], _events: &[NewEvent]) {}
    /// A transition is about to be committed (before its compare-and-set).
    fn committing(&self, _t: &Transition) {}
}

/// `inner`, observed by `observer`.
pub struct Observed<O> {
    inner: Arc<dyn RunStore>,
    observer: O,
}

impl<O: CommitObserver> Observed<O> {
    /// Wraps `inner` so that `observer` is told about the writes that pass
    /// through it.
    pub fn new(inner: Arc<dyn RunStore>, observer: O) -> Observed<O> {
        Observed { inner, observer }
    }

    /// The observer the writes are reported to.
    pub fn observer(&self) -> &O {
        &self.observer
    }
}

#[async_trait::async_trait]
impl<O: CommitObserver> RunReader for Observed<O> {
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        self.inner.get_run(id).await
    }
    async fn find_runs(&self, q: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.inner.find_runs(q).await
    }
    async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<Approval>, StoreError> {
        self.inner.list_approvals(status, limit).await
    }
    async fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        self.inner.count_runs().await
    }
    async fn last_event_seq(&self) -> Result<i64, StoreError> {
        self.inner.last_event_seq().await
    }
    async fn steps(&self, run_id: &str) -> Result<Vec<Step>, StoreError> {
        self.inner.steps(run_id).await
    }
    async fn approvals(&self, run_id: &str) -> Result<Vec<Approval>, StoreError> {
        self.inner.approvals(run_id).await
    }
    async fn history(&self, run_id: &str) -> Result<(Vec<Step>, Vec<Approval>), StoreError> {
        self.inner.history(run_id).await
    }
    async fn approval(&self, id: &str) -> Result<Approval, StoreError> {
        self.inner.approval(id).await
    }
    async fn journal(&self, run_id: &str) -> Result<crate::store::Journal, StoreError> {
        self.inner.journal(run_id).await
    }
    async fn finished_runs(&self, q: &crate::store::Finished) -> Result<Vec<Run>, StoreError> {
        self.inner.finished_runs(q).await
    }
    async fn events_after(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner.events_after(run_id, after, limit).await
    }
    async fn model_calls(&self, run_id: &str) -> Result<Vec<StoredModelCall>, StoreError> {
        self.inner.model_calls(run_id).await
    }
    async fn count_events(&self) -> Result<u64, StoreError> {
        self.inner.count_events().await
    }
}

#[async_trait::async_trait]
impl<O: CommitObserver> RunStore for Observed<O> {
    async fn create_run(
        &self,
        run: Run,
        steps: Vec<Step>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError> {
        self.observer.creating(&run, &steps, &events);
        let t0 = Instant::now();
        let out = self.inner.create_run(run, steps, events).await;
        if let Ok(c) = &out {
            self.observer.committed(c, t0.elapsed(), &[]);
        }
        out
    }
    async fn commit(&self, t: Transition) -> Result<Committed, StoreError> {
        self.observer.committing(&t);
        let calls = if t.model_calls.is_empty() {
            Vec::new()
        } else {
            t.model_calls.clone()
        };
        let t0 = Instant::now();
        let out = self.inner.commit(t).await;
        match &out {
            Ok(c) => self.observer.committed(c, t0.elapsed(), &calls),
            Err(StoreError::Conflict { .. }) => self.observer.conflicted(),
            Err(_) => {}
        }
        out
    }
    async fn heartbeat(
        &self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        self.inner.heartbeat(run_id, owner, now, ttl_ms).await
    }
    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        self.inner.release_lease(run_id, owner).await
    }
    async fn claim(&self, now: i64, limit: u32, rule: ClaimRule) -> Result<Vec<Run>, StoreError> {
        let runs = self.inner.claim(now, limit, rule).await?;
        if !runs.is_empty() {
            self.observer.claimed(&runs);
        }
        Ok(runs)
    }
    async fn claim_runs(
        &self,
        now: i64,
        ids: &[String],
        rule: ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        let runs = self.inner.claim_runs(now, ids, rule).await?;
        if !runs.is_empty() {
            self.observer.claimed(&runs);
        }
        Ok(runs)
    }
    async fn delete_runs(
        &self,
        runs: &[crate::store::Doomed],
        q: &crate::store::Finished,
    ) -> Result<Vec<String>, StoreError> {
        self.inner.delete_runs(runs, q).await
    }
    fn writer_stats(&self) -> WriterStats {
        self.inner.writer_stats()
    }
}
