//! One writer thread per store. Writes from every run in the process queue
//! here; the thread commits whatever has queued up as one group (one SQLite
//! transaction, one sync; see [`Store::commit_group`]), so many runs share
//! the cost of a sync without giving up their own compare-and-set.

use super::{Committed, NewEvent, Prepared, Store, StoreError, Transition, Write};
use crate::types::Run;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use tokio::sync::oneshot;

/// The most transitions committed together.
const MAX_GROUP: usize = 512;

type Reply = oneshot::Sender<Result<Committed, StoreError>>;

enum Job {
    Commit(Box<Prepared>, Reply),
    Call(Box<dyn FnOnce(&mut Store) + Send>),
}

/// A cloneable, async handle on a store owned by its writer thread.
#[derive(Clone)]
pub struct StoreHandle {
    tx: mpsc::Sender<Job>,
    stats: Arc<Counters>,
}

/// What the writer thread has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transitions committed (each its own compare-and-set).
    pub transitions: u64,
    /// SQLite transactions that carried them (one sync each).
    pub transactions: u64,
}

#[derive(Default)]
struct Counters {
    transitions: AtomicU64,
    transactions: AtomicU64,
}

impl StoreHandle {
    /// Moves `store` onto a new writer thread.
    pub fn spawn(store: Store) -> StoreHandle {
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(Counters::default());
        let counters = stats.clone();
        std::thread::Builder::new()
            .name("keel-store-writer".into())
            .spawn(move || writer(store, rx, &counters))
            .expect("spawning the store writer thread");
        StoreHandle { tx, stats }
    }

    pub fn stats(&self) -> WriterStats {
        WriterStats {
            transitions: self.stats.transitions.load(Ordering::Relaxed),
            transactions: self.stats.transactions.load(Ordering::Relaxed),
        }
    }

    /// Commits one transition (possibly grouped with other runs').
    pub async fn commit(&self, t: Transition) -> Result<Committed, StoreError> {
        self.write(Write::Transition(t)).await
    }

    /// Inserts a new run (possibly grouped with other runs' writes).
    pub async fn create_run(
        &self,
        run: Run,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError> {
        self.write(Write::Create { run, events }).await
    }

    async fn write(&self, w: Write) -> Result<Committed, StoreError> {
        // Encode here, on the caller's thread: the writer is shared.
        let w = Prepared::new(w);
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Commit(Box::new(w), reply))
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))?
    }

    /// Runs `f` on the writer thread, in order with the queued commits.
    pub async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> R + Send + 'static,
    ) -> Result<R, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Call(Box::new(move |s| {
                let _ = reply.send(f(s));
            })))
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))
    }
}

fn writer(mut store: Store, rx: mpsc::Receiver<Job>, stats: &Counters) {
    let mut group: Vec<(Prepared, Reply)> = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Commit(t, reply) => group.push((*t, reply)),
                Job::Call(f) => {
                    flush(&mut store, &mut group, stats);
                    f(&mut store);
                }
            }
            if group.len() < MAX_GROUP {
                next = rx.try_recv().ok();
            }
        }
        flush(&mut store, &mut group, stats);
    }
}

fn flush(store: &mut Store, group: &mut Vec<(Prepared, Reply)>, stats: &Counters) {
    if group.is_empty() {
        return;
    }
    stats.transactions.fetch_add(1, Ordering::Relaxed);
    stats
        .transitions
        .fetch_add(group.len() as u64, Ordering::Relaxed);
    let (ws, replies): (Vec<_>, Vec<_>) = std::mem::take(group).into_iter().unzip();
    match store.commit_prepared(ws) {
        Ok(results) => {
            for (r, reply) in results.into_iter().zip(replies) {
                let _ = reply.send(r);
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(same_error(&e)));
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
