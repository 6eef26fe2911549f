//! A call's wall-clock deadline, held whatever the guest is doing.
//!
//! Epoch interruption stops wasm code that runs past its deadline, but a
//! guest blocked in a host call (a WASI sleep or poll, a read that waits)
//! runs no wasm code and is never interrupted that way. So every call into
//! a guest is also awaited through [`bounded`], which drops the call once
//! the deadline passes. The deadline is shared between the two, and a host
//! import that should not be charged to the guest (a model call) suspends
//! it while it works.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// "No deadline while a host import works".
const SUSPENDED: u64 = u64::MAX;

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn nanos(at: Instant) -> u64 {
    at.saturating_duration_since(base())
        .as_nanos()
        .min(SUSPENDED as u128 - 1) as u64
}

/// When the current call's time runs out, in nanoseconds since a base
/// instant of the process.
#[derive(Debug)]
pub struct CallDeadline(AtomicU64);

impl CallDeadline {
    /// A deadline that passes `after` from now.
    pub fn new(after: Duration) -> CallDeadline {
        let d = CallDeadline(AtomicU64::new(0));
        d.set_after(after);
        d
    }

    /// The call may run for `after` from now.
    pub fn set_after(&self, after: Duration) {
        self.0
            .store(nanos(Instant::now() + after), Ordering::Relaxed);
    }

    /// Whether the deadline passed (never while suspended).
    pub fn passed(&self) -> bool {
        let at = self.0.load(Ordering::Relaxed);
        at != SUSPENDED && nanos(Instant::now()) >= at
    }

    /// Time left, or `None` while suspended.
    pub fn remaining(&self) -> Option<Duration> {
        let at = self.0.load(Ordering::Relaxed);
        (at != SUSPENDED).then(|| Duration::from_nanos(at.saturating_sub(nanos(Instant::now()))))
    }

    /// Stops the clock for a host import; returns the time that was left.
    pub fn suspend(&self) -> Duration {
        let left = self.remaining().unwrap_or_default();
        self.0.store(SUSPENDED, Ordering::Relaxed);
        left
    }

    /// Starts the clock again with `left` to go.
    pub fn resume(&self, left: Duration) {
        self.set_after(left);
    }
}

/// The call ran past its deadline while blocked outside wasm code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overran;

/// Awaits `call` while `deadline` holds; drops it once it has passed. A
/// call that never waits costs no timer.
pub async fn bounded<F: std::future::Future>(
    deadline: &CallDeadline,
    call: F,
) -> Result<F::Output, Overran> {
    tokio::pin!(call);
    loop {
        let wake = match deadline.remaining() {
            Some(left) if left.is_zero() => return Err(Overran),
            Some(left) => left,
            // A host import is working: look again in a while.
            None => Duration::from_millis(250),
        };
        tokio::select! {
            biased;
            out = &mut call => return Ok(out),
            _ = tokio::time::sleep(wake) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_blocked_call_is_dropped_at_its_deadline_and_a_suspended_one_is_not() {
        let d = CallDeadline::new(Duration::from_millis(30));
        let never = std::future::pending::<()>();
        assert_eq!(bounded(&d, never).await, Err(Overran));

        let d = std::sync::Arc::new(CallDeadline::new(Duration::from_millis(30)));
        let d2 = d.clone();
        let slow_import = async move {
            let left = d2.suspend();
            tokio::time::sleep(Duration::from_millis(100)).await;
            d2.resume(left);
            7
        };
        assert_eq!(bounded(&d, slow_import).await, Ok(7));
        assert!(!d.passed());
    }
}
