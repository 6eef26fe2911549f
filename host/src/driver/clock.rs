//! Time and ids, injectable so that tests replay a run exactly.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Where the driver reads the current time from.
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
    /// A clock whose first reading is `start` ms, each later one `step` ms more.
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

/// Where the driver gets new run, lease and approval ids from.
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
        b[6..].copy_from_slice(&random_u64().to_be_bytes()[2..]);
        let mut hex = [0u8; 24];
        // 12 bytes always fit 24 digits; hex digits are always UTF-8.
        let _ = hex::encode_to_slice(b, &mut hex);
        let mut id = String::with_capacity(prefix.len() + 1 + hex.len());
        id.push_str(prefix);
        id.push('_');
        id.push_str(std::str::from_utf8(&hex).unwrap_or_default());
        id
    }
}

/// A random number from a per-thread generator seeded once from the OS.
///
/// An id used to cost a `getrandom` system call, two a run. SplitMix64 over
/// a random seed gives distinct values within a thread; seeds differ between
/// threads and processes.
fn random_u64() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    STATE.with(|state| {
        let s = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

fn seed() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_ok() {
        return u64::from_ne_bytes(b);
    }
    // No entropy source: the time, the thread and a process-wide counter
    // still give each thread its own sequence.
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ u64::from(std::process::id()).rotate_left(32)
        ^ N.fetch_add(1, Ordering::SeqCst)
            .wrapping_mul(0xff51_afd7_ed55_8ccd)
}

/// `prefix_1`, `prefix_2`, ... (tests).
pub struct SeqIds(AtomicU64);

impl SeqIds {
    /// A generator whose first id ends in `_1`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn random_ids_are_distinct_across_threads_and_shaped_prefix_underscore_24_hex() {
        let ids: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..20_000)
                            .map(|_| RandomIds.next("run"))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("id thread"))
                .collect()
        });
        let distinct: HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        for id in &ids {
            let hex = id.strip_prefix("run_").expect("prefix");
            assert_eq!(hex.len(), 24, "{id}");
            assert!(
                hex.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
                "{id}"
            );
        }
    }

    #[test]
    fn random_ids_begin_with_the_creation_time() {
        let before = SystemClock.now_ms() as u64;
        let id = RandomIds.next("lease");
        let after = SystemClock.now_ms() as u64;
        let t =
            u64::from_str_radix(&id["lease_".len().."lease_".len() + 12], 16).expect("hex time");
        assert!(
            (before & 0xffff_ffff_ffff..=after & 0xffff_ffff_ffff).contains(&t),
            "{id}"
        );
    }
}
