//! Load harnesses run by `keel bench`: they drive real runs (wasm plugins,
//! the real store) many at a time and report what the runtime adds.

pub mod fanout;
pub mod floor;
pub mod serve;
pub mod soak;

/// The process's peak resident set size in bytes (`VmHWM`), when the OS
/// reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Starts the peak resident set size afresh from the current one (Linux's
/// `clear_refs`), so that a second load in one process reports its own.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The `q` quantile (0..=1) of sorted samples, by nearest rank.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// User plus system CPU time of the process so far, in seconds (0 where
/// the OS does not say).
pub fn cpu_seconds() -> f64 {
    stat_cpu_seconds("/proc/self/stat")
}

/// The process's CPU time so far, in seconds, to the nanosecond where
/// [`cpu_seconds`] counts scheduler ticks: for spans of milliseconds.
pub fn cpu_seconds_fine() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill in.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } != 0 {
        return cpu_seconds();
    }
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Time so far of the process's threads named `name`, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadTimes {
    /// On a CPU.
    pub cpu_s: f64,
    /// Ready to run, waiting for a CPU (0 where the kernel does not say).
    pub runnable_s: f64,
}

impl std::ops::Sub for ThreadTimes {
    type Output = ThreadTimes;
    fn sub(self, o: ThreadTimes) -> ThreadTimes {
        ThreadTimes {
            cpu_s: self.cpu_s - o.cpu_s,
            runnable_s: self.runnable_s - o.runnable_s,
        }
    }
}

/// [`ThreadTimes`] of the threads named `name` (zero where the OS does not
/// say), from `/proc/self/task/*/schedstat`, or `stat` where the kernel
/// keeps no scheduler statistics.
pub fn thread_times(name: &str) -> ThreadTimes {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return ThreadTimes::default();
    };
    // Linux keeps the first 15 bytes of a thread's name.
    let name = &name.as_bytes()[..name.len().min(15)];
    let mut sum = ThreadTimes::default();
    for t in tasks.flatten() {
        if !std::fs::read(t.path().join("comm")).is_ok_and(|c| c.trim_ascii_end() == name) {
            continue;
        }
        let sched = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        let ns: Vec<f64> = sched
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        match ns[..] {
            [cpu, waited, ..] => {
                sum.cpu_s += cpu / 1e9;
                sum.runnable_s += waited / 1e9;
            }
            _ => sum.cpu_s += stat_cpu_seconds(t.path().join("stat")),
        }
    }
    sum
}

/// CPU time so far, in seconds, of every process on this machine named
/// `name` (such as `postgres`: a server's backends), counting those of
/// its children that ended (`cutime`, `cstime`), so that a backend that
/// exits meanwhile is not lost.
pub fn processes_cpu_seconds(name: &str) -> f64 {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut sum = 0.0;
    for p in procs.flatten() {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if !std::fs::read(p.path().join("comm"))
            .is_ok_and(|c| c.trim_ascii_end() == name.as_bytes())
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(p.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        sum += (ticks(11) + ticks(12) + ticks(13) + ticks(14)) / 100.0;
    }
    sum
}

/// utime + stime from a `/proc/.../stat` file.
fn stat_cpu_seconds(path: impl AsRef<std::path::Path>) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
