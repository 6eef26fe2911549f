//! What this process made claimable: the API tells the claimer each run it
//! submitted or whose approval it answered, so that the claimer takes
//! those runs by id at once instead of searching the store for them.

use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// The most run ids kept between two claims; past it the claimer searches
/// the store instead, which finds every one of them.
pub const MAX_KEPT: usize = 4_096;

/// Runs made claimable since the claimer last looked, and its wake-up.
#[derive(Default)]
pub struct Work {
    wake: Notify,
    made: Mutex<Made>,
}

#[derive(Default)]
struct Made {
    ids: Vec<String>,
    /// More were made than kept: only a search finds them all.
    overflowed: bool,
}

/// What the claimer is to look at next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// These runs, by id (none: nothing new).
    Runs(Vec<String>),
    /// The store's whole queue: more was made than could be kept.
    Search,
}

impl Work {
    /// An empty queue, shared by the API and the claimer.
    pub fn new() -> Arc<Work> {
        Arc::new(Work::default())
    }

    fn made(&self) -> MutexGuard<'_, Made> {
        self.made.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `run_id` may be claimed now; wakes the claimer.
    pub fn add(&self, run_id: &str) {
        {
            let mut m = self.made();
            if m.ids.len() < MAX_KEPT {
                m.ids.push(run_id.to_string());
            } else {
                m.overflowed = true;
            }
        }
        self.wake.notify_one();
    }

    /// Up to `n` of the runs made claimable, oldest first; the rest stay.
    pub fn take(&self, n: usize) -> Next {
        let mut m = self.made();
        if m.overflowed {
            return Next::Search;
        }
        let n = n.min(m.ids.len());
        Next::Runs(m.ids.drain(..n).collect())
    }

    /// Forgets every run made so far: the search about to start finds each
    /// of them that still needs a driver.
    pub fn searching(&self) {
        let mut m = self.made();
        m.ids.clear();
        m.overflowed = false;
    }

    /// Resolves when a run was added since the last time it resolved.
    pub async fn added(&self) {
        self.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_come_back_oldest_first_and_an_overflow_asks_for_a_search() {
        let w = Work::new();
        for id in ["a", "b", "c"] {
            w.add(id);
        }
        assert_eq!(w.take(2), Next::Runs(vec!["a".into(), "b".into()]));
        assert_eq!(w.take(5), Next::Runs(vec!["c".into()]));
        assert_eq!(w.take(5), Next::Runs(vec![]));
        for i in 0..=MAX_KEPT {
            w.add(&format!("r{i}"));
        }
        assert_eq!(w.take(1), Next::Search);
        w.searching();
        assert_eq!(w.take(1), Next::Runs(vec![]));
    }
}
