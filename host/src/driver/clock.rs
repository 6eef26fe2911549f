//! Time and ids, injectable so that tests replay a run exactly.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that advances by `step` on every reading (tests).
pub struct StepClock {
    now: AtomicI64,
    step: i64,
}

impl StepClock {
    pub fn new(start: i64, step: i64) -> StepClock {
        StepClock {
            now: AtomicI64::new(start),
            step,
        }
    }
    /// How many readings were taken.
    pub fn readings(&self, start: i64) -> i64 {
        (self.now.load(Ordering::SeqCst) - start) / self.step.max(1)
    }
}

impl Clock for StepClock {
    fn now_ms(&self) -> i64 {
        self.now.fetch_add(self.step, Ordering::SeqCst)
    }
}

pub trait Ids: Send + Sync {
    /// A new unique id starting with `prefix`.
    fn next(&self, prefix: &str) -> String;
}

/// Random 96-bit ids.
pub struct RandomIds;

impl Ids for RandomIds {
    fn next(&self, prefix: &str) -> String {
        // Six bytes of time, then six random: ids sort by creation, so new
        // rows land at the right edge of the store's indexes.
        let mut b = [0u8; 12];
        let t = SystemClock.now_ms() as u64;
        b[..6].copy_from_slice(&t.to_be_bytes()[2..]);
        if getrandom::fill(&mut b[6..]).is_err() {
            // No entropy source: fall back to time and a counter, still unique
            // within the process.
            static N: AtomicU64 = AtomicU64::new(0);
            let n = N.fetch_add(1, Ordering::SeqCst);
            b[6..].copy_from_slice(&n.to_be_bytes()[2..]);
        }
        format!("{prefix}_{}", hex::encode(b))
    }
}

/// `prefix_1`, `prefix_2`, ... (tests).
pub struct SeqIds(AtomicU64);

impl SeqIds {
    pub fn new() -> SeqIds {
        SeqIds(AtomicU64::new(0))
    }
}

impl Default for SeqIds {
    fn default() -> Self {
        SeqIds::new()
    }
}

impl Ids for SeqIds {
    fn next(&self, prefix: &str) -> String {
        format!("{prefix}_{}", self.0.fetch_add(1, Ordering::SeqCst) + 1)
    }
}
