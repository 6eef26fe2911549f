//! Fault injection for the crash tests: abort the process right after a
//! named durable point. Compiled in only with the `fault-injection`
//! feature (the tests turn it on); without it every hook is a no-op the
//! compiler removes, and `KEEL_TEST_CRASH_AT` is never read.

/// Where to crash, read once per [`crate::Runtime`] from
/// `KEEL_TEST_CRASH_AT` (`step.executing@2` is the second write with a
/// `step.executing` event; `tool.ran` is right after a tool returned).
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    #[cfg(feature = "fault-injection")]
    at: Option<String>,
}

impl Faults {
    #[cfg(feature = "fault-injection")]
    pub(crate) fn from_env() -> Faults {
        Faults {
            at: std::env::var("KEEL_TEST_CRASH_AT").ok(),
        }
    }

    #[cfg(not(feature = "fault-injection"))]
    pub(crate) fn from_env() -> Faults {
        Faults {}
    }

    /// Whether a crash point is set, so the loop collects the names of
    /// what it commits only then.
    #[inline]
    pub(crate) fn armed(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.at.is_some();
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    /// Aborts if `points` (the event kinds of a write just committed)
    /// hold the named point for the n-th time in this process. A write
    /// that finishes a step and starts the next is a crash point of both.
    #[inline]
    pub(crate) fn after_commit(&self, points: &[&str]) {
        #[cfg(feature = "fault-injection")]
        if let Some(spec) = &self.at {
            use std::sync::atomic::{AtomicU32, Ordering};
            static SEEN: AtomicU32 = AtomicU32::new(0);
            let (name, nth) = spec
                .split_once('@')
                .map(|(n, k)| (n, k.parse().unwrap_or(1)))
                .unwrap_or((spec.as_str(), 1));
            if points.contains(&name) && SEEN.fetch_add(1, Ordering::SeqCst) + 1 == nth {
                std::process::abort();
            }
        }
        #[cfg(not(feature = "fault-injection"))]
        let _ = points;
    }

    /// Aborts right after a tool returned, before its result is written.
    #[inline]
    pub(crate) fn after_tool(&self) {
        #[cfg(feature = "fault-injection")]
        if self.at.as_deref() == Some("tool.ran") {
            std::process::abort();
        }
    }
}
