//! One writer thread per store. Transitions from every run in the process
//! queue here; the thread commits whatever has queued up as one group (one
//! SQLite transaction, one sync, a savepoint per transition), so many runs
//! share the cost of a sync without giving up their own compare-and-set.

use super::{Committed, Store, StoreError, Transition};
use std::sync::mpsc;
use tokio::sync::oneshot;

/// The most transitions committed together.
const MAX_GROUP: usize = 512;

type Reply = oneshot::Sender<Result<Committed, StoreError>>;

enum Job {
    Commit(Box<Transition>, Reply),
    Call(Box<dyn FnOnce(&mut Store) + Send>),
}

/// A cloneable, async handle on a store owned by its writer thread.
#[derive(Clone)]
pub struct StoreHandle {
    tx: mpsc::Sender<Job>,
}

impl StoreHandle {
    /// Moves `store` onto a new writer thread.
    pub fn spawn(store: Store) -> StoreHandle {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("keel-store-writer".into())
            .spawn(move || writer(store, rx))
            .expect("spawning the store writer thread");
        StoreHandle { tx }
    }

    /// Commits one transition (possibly grouped with other runs').
    pub async fn commit(&self, t: Transition) -> Result<Committed, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Commit(Box::new(t), reply))
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

fn writer(mut store: Store, rx: mpsc::Receiver<Job>) {
    let mut group: Vec<(Transition, Reply)> = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Commit(t, reply) => group.push((*t, reply)),
                Job::Call(f) => {
                    flush(&mut store, &mut group);
                    f(&mut store);
                }
            }
            if group.len() < MAX_GROUP {
                next = rx.try_recv().ok();
            }
        }
        flush(&mut store, &mut group);
    }
}

fn flush(store: &mut Store, group: &mut Vec<(Transition, Reply)>) {
    match group.len() {
        0 => {}
        1 => {
            if let Some((t, reply)) = group.pop() {
                let _ = reply.send(store.commit(t));
            }
        }
        _ => {
            let (ts, replies): (Vec<_>, Vec<_>) = std::mem::take(group).into_iter().unzip();
            match store.commit_group(ts) {
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
