//! One writer thread per store. Writes from every run in the process queue
//! here; the thread commits whatever has queued up as one group (one SQLite
//! transaction, one sync; see [`Store::commit_group`]), so many runs share
//! the cost of a sync without giving up their own compare-and-set.
//!
//! A write that finds the store idle (nothing queued, nobody committing)
//! does not queue: the caller commits it on its own thread. A run alone
//! then pays its commits and nothing else: no handoff to the writer thread
//! and back, no thread waking from idle after each sync. The price is that
//! the caller's thread (a tokio worker) is blocked for that one commit,
//! which is what the queue would have made it wait for anyway; as soon as
//! two writes meet, they queue and the writer thread groups them.

use super::{Prepared, Store, Write, Written};
use crate::store::{Committed, NewEvent, StoreError, Transition, WriterStats};
use crate::types::{Run, Step};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The writer thread's name (as `/proc` shows it, cut to 15 bytes:
/// `keel-store-writ`).
pub const WRITER_THREAD: &str = "keel-store-writer";

/// The most transitions committed together.
pub const MAX_GROUP: usize = 512;

/// The write goes back to its caller with what the statements reported:
/// the caller builds its [`Committed`] and drops the write, not the writer.
type Reply = oneshot::Sender<(Box<Prepared>, Result<Written, StoreError>)>;

enum Job {
    Commit(Box<Prepared>, Reply),
    Call(Box<dyn FnOnce(&mut Store) + Send>),
}

/// A cloneable, async handle on a store shared by its writer thread and,
/// when the store is idle, the callers themselves.
#[derive(Clone)]
pub struct StoreHandle {
    tx: mpsc::Sender<Job>,
    shared: Arc<Shared>,
}

struct Shared {
    store: Mutex<Store>,
    /// Jobs sent to the writer thread and not yet done by it.
    queued: AtomicUsize,
    counters: Counters,
    /// Whether a caller may commit on its own thread while the writer is
    /// idle ([`StoreHandle::spawn_with`] says why not).
    inline: bool,
}

impl Shared {
    /// The store, even if a panic elsewhere poisoned its lock: every write
    /// is its own SQLite transaction, so a panic cannot leave one half-done.
    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store if it is idle: nothing queued and nobody holding it.
    fn try_idle(&self) -> Option<MutexGuard<'_, Store>> {
        if !self.inline || self.queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        match self.store.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

#[derive(Default)]
struct Counters {
    transitions: AtomicU64,
    transactions: AtomicU64,
    inline: AtomicU64,
    busy_ns: AtomicU64,
}

impl Counters {
    /// One SQLite transaction carrying `transitions` writes.
    fn record(&self, transitions: usize, inline: bool) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.transitions
            .fetch_add(transitions as u64, Ordering::Relaxed);
        if inline {
            self.inline.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl StoreHandle {
    /// Moves `store` onto a new writer thread.
    pub fn spawn(store: Store) -> StoreHandle {
        Self::spawn_with(store, true)
    }

    /// Like [`StoreHandle::spawn`]; with `inline` false every write goes
    /// through the writer thread, even when it is idle: for a process
    /// whose async workers also answer requests and feed event streams
    /// (`keel serve`), which must not wait on a commit's sync.
    pub fn spawn_with(store: Store, inline: bool) -> StoreHandle {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            queued: AtomicUsize::new(0),
            counters: Counters::default(),
            inline,
        });
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || writer(&theirs, rx))
            .expect("spawning the store writer thread");
        StoreHandle { tx, shared }
    }

    /// What the writer has done so far: its counters read now.
    pub fn stats(&self) -> WriterStats {
        let c = &self.shared.counters;
        WriterStats {
            transitions: c.transitions.load(Ordering::Relaxed),
            transactions: c.transactions.load(Ordering::Relaxed),
            inline: c.inline.load(Ordering::Relaxed),
            busy: Duration::from_nanos(c.busy_ns.load(Ordering::Relaxed)),
        }
    }

    /// Commits one transition (possibly grouped with other runs').
    pub async fn commit(&self, t: Transition) -> Result<Committed, StoreError> {
        self.write(Write::Transition(t)).await
    }

    /// Inserts a new run with `steps`, its first (possibly grouped with
    /// other runs' writes).
    pub async fn create_run(
        &self,
        run: Run,
        steps: Vec<Step>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError> {
        self.write(Write::Create { run, steps, events }).await
    }

    async fn write(&self, w: Write) -> Result<Committed, StoreError> {
        // Encode here, on the caller's thread: the writer is shared.
        let w = Prepared::new(w)?;
        if let Some(mut store) = self.shared.try_idle() {
            self.shared.counters.record(1, true);
            let written = store.write_prepared_one(&w);
            drop(store);
            return Ok(w.committed(written?));
        }
        let (reply, rx) = oneshot::channel();
        self.send(Job::Commit(Box::new(w), reply))?;
        let (w, written) = rx
            .await
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))?;
        Ok(w.committed(written?))
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        self.tx.send(job).map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            StoreError::Refused("the store writer has stopped".into())
        })
    }

    /// Runs `f` on the writer thread, after the commits queued with it.
    pub async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> R + Send + 'static,
    ) -> Result<R, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Job::Call(Box::new(move |s| {
            let _ = reply.send(f(s));
        })))?;
        rx.await
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))
    }
}

fn writer(shared: &Shared, rx: mpsc::Receiver<Job>) {
    let stats = &shared.counters;
    let mut group: Vec<(Box<Prepared>, Reply)> = Vec::new();
    let mut calls: Vec<Box<dyn FnOnce(&mut Store) + Send>> = Vec::new();
    while let Ok(first) = rx.recv() {
        let woke = Instant::now();
        let mut store = shared.lock();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(job) = next.take() {
            taken += 1;
            match job {
                Job::Commit(t, reply) => group.push((t, reply)),
                // Reads and the writes of their own (claims, heartbeats)
                // wait for the group that queued around them: a call
                // between two commits would otherwise split their group
                // in two, and each half would pay its own sync. A caller
                // sees its own commits, which it awaited before calling.
                Job::Call(f) => calls.push(f),
            }
            if group.len() < MAX_GROUP && calls.len() < MAX_GROUP {
                next = rx.try_recv().ok();
            }
        }
        flush(&mut store, &mut group, stats);
        for f in calls.drain(..) {
            f(&mut store);
        }
        drop(store);
        let busy = u64::try_from(woke.elapsed().as_nanos()).unwrap_or(u64::MAX);
        stats.busy_ns.fetch_add(busy, Ordering::Relaxed);
        shared.queued.fetch_sub(taken, Ordering::AcqRel);
    }
}

fn flush(store: &mut Store, group: &mut Vec<(Box<Prepared>, Reply)>, stats: &Counters) {
    if group.is_empty() {
        return;
    }
    stats.record(group.len(), false);
    let ws: Vec<&Prepared> = group.iter().map(|(w, _)| &**w).collect();
    let results = store.write_group(&ws);
    drop(ws);
    match results {
        Ok(results) => {
            for (r, (w, reply)) in results.into_iter().zip(group.drain(..)) {
                let _ = reply.send((w, r));
            }
        }
        Err(e) => {
            for (w, reply) in group.drain(..) {
                let _ = reply.send((w, Err(same_error(&e))));
            }
        }
    }
}

/// The error every member of a failed group gets.
fn same_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::DiskFull => StoreError::DiskFull,
        StoreError::Locked { waited_ms } => StoreError::Locked {
            waited_ms: *waited_ms,
        },
        StoreError::ReadOnly => StoreError::ReadOnly,
        other => StoreError::Refused(format!("group commit failed: {other}")),
    }
}

#[async_trait::async_trait]
impl crate::store::RunReader for StoreHandle {
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        let id = id.to_string();
        self.with(move |s| s.get_run(&id)).await?
    }
    async fn find_runs(&self, q: &crate::store::RunQuery) -> Result<Vec<Run>, StoreError> {
        let q = q.clone();
        self.with(move |s| s.find_runs(&q)).await?
    }
    async fn list_approvals(
        &self,
        status: Option<crate::types::ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<crate::types::Approval>, StoreError> {
        self.with(move |s| s.list_approvals(status, limit)).await?
    }
    async fn count_runs(&self) -> Result<Vec<(crate::types::RunStatus, u64)>, StoreError> {
        self.with(move |s| s.count_runs()).await?
    }
    async fn last_event_seq(&self) -> Result<i64, StoreError> {
        self.with(move |s| s.last_event_seq()).await?
    }
    async fn steps(&self, run_id: &str) -> Result<Vec<Step>, StoreError> {
        let id = run_id.to_string();
        self.with(move |s| s.load_steps(&id)).await?
    }
    async fn approvals(&self, run_id: &str) -> Result<Vec<crate::types::Approval>, StoreError> {
        let id = run_id.to_string();
        self.with(move |s| s.load_approvals(&id)).await?
    }
    async fn history(
        &self,
        run_id: &str,
    ) -> Result<(Vec<Step>, Vec<crate::types::Approval>), StoreError> {
        let id = run_id.to_string();
        self.with(move |s| Ok((s.load_steps(&id)?, s.load_approvals(&id)?)))
            .await?
    }
    async fn approval(&self, id: &str) -> Result<crate::types::Approval, StoreError> {
        let id = id.to_string();
        self.with(move |s| s.approval(&id)).await?
    }
    async fn journal(&self, run_id: &str) -> Result<crate::store::Journal, StoreError> {
        let id = run_id.to_string();
        self.with(move |s| s.journal(&id)).await?
    }
    async fn finished_runs(&self, q: &crate::store::Finished) -> Result<Vec<Run>, StoreError> {
        let q = q.clone();
        self.with(move |s| s.finished_runs(&q)).await?
    }
    async fn events_after(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<crate::store::Event>, StoreError> {
        let id = run_id.map(str::to_string);
        self.with(move |s| s.events_after(id.as_deref(), after, limit))
            .await?
    }
    async fn model_calls(
        &self,
        run_id: &str,
    ) -> Result<Vec<crate::store::StoredModelCall>, StoreError> {
        let id = run_id.to_string();
        self.with(move |s| s.model_calls(&id)).await?
    }
    async fn count_events(&self) -> Result<u64, StoreError> {
        self.with(|s| s.count_events()).await?
    }
}

#[async_trait::async_trait]
impl crate::store::RunStore for StoreHandle {
    async fn create_run(
        &self,
        run: Run,
        steps: Vec<Step>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError> {
        StoreHandle::create_run(self, run, steps, events).await
    }
    async fn commit(&self, t: Transition) -> Result<Committed, StoreError> {
        StoreHandle::commit(self, t).await
    }
    async fn heartbeat(
        &self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let (id, o) = (run_id.to_string(), owner.to_string());
        self.with(move |s| s.heartbeat(&id, &o, now, ttl_ms))
            .await?
    }
    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        let (id, o) = (run_id.to_string(), owner.to_string());
        self.with(move |s| s.release_lease(&id, &o)).await?
    }
    async fn claim(
        &self,
        now: i64,
        limit: u32,
        rule: crate::store::ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        self.with(move |s| s.claim(now, limit, &rule)).await?
    }
    async fn claim_runs(
        &self,
        now: i64,
        ids: &[String],
        rule: crate::store::ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        let ids = ids.to_vec();
        self.with(move |s| s.claim_runs(now, &ids, &rule)).await?
    }
    async fn delete_runs(
        &self,
        runs: &[crate::store::Doomed],
        q: &crate::store::Finished,
    ) -> Result<Vec<String>, StoreError> {
        let (runs, q) = (runs.to_vec(), q.clone());
        self.with(move |s| s.delete_runs(&runs, &q)).await?
    }
    fn writer_stats(&self) -> WriterStats {
        self.stats()
    }
}
