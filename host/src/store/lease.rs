//! Who holds a lease, and whether that holder is provably gone.
//!
//! A lease owner is `ID@HOST:PID:START`: a random id, the host name, and
//! the process id with the process's start time (clock ticks since boot,
//! from `/proc/PID/stat`), so that a reused pid is not mistaken for the
//! holder. A lease whose holder ran on this host and whose process no
//! longer exists (or is another process with the same pid) can be taken at
//! once instead of waiting for it to expire. Anything that cannot be
//! proved gone (another host, no `/proc`, an owner without a tag) is
//! treated as alive: the lease then runs out on its own.

use std::sync::OnceLock;

/// `HOST:PID:START` of this process.
pub fn process_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        format!(
            "{}:{pid}:{}",
            host_name(),
            start_time(pid).unwrap_or_default()
        )
    })
}

/// A lease owner id for this process: `id` tagged with [`process_tag`].
pub fn owner_id(id: &str) -> String {
    format!("{id}@{}", process_tag())
}

/// Whether the process that holds `owner` provably no longer runs.
pub fn holder_gone(owner: &str) -> bool {
    let Some((_, tag)) = owner.rsplit_once('@') else {
        return false;
    };
    let mut parts = tag.rsplitn(3, ':');
    let (Some(start), Some(pid), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    if host != host_name() || !std::path::Path::new("/proc/self/stat").exists() {
        return false;
    }
    match start_time(pid) {
        None => true,                          // no such process
        Some(now) => now.to_string() != start, // the pid was reused
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty() && !h.contains('@'))
        .unwrap_or_else(|| "localhost".into())
}

/// Field 22 of `/proc/PID/stat`: when the process started.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_finished_child_is_gone() {
        assert!(!holder_gone(&owner_id("lease_a")));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_time(pid);
        child.wait().unwrap();
        let tag = format!("lease_b@{}:{pid}:{}", host_name(), start.unwrap_or(1));
        assert!(holder_gone(&tag));
        // Another host, or an owner without a tag, is never provably gone.
        assert!(!holder_gone(&format!("lease_c@elsewhere:{pid}:1")));
        assert!(!holder_gone("lease_d"));
        // The same pid with another start time is a reused pid.
        let me = std::process::id();
        assert!(holder_gone(&format!("lease_e@{}:{me}:1", host_name())));
    }
}
