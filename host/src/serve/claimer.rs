//! The claimer: a long-running driver that claims every run that
//! needs one (submitted, approved or expired, parked past its retry time,
//! left by a process that died) and drives it with the consumers of the
//! config recorded with the run, at most `max_runs` at once, until told to
//! stop.

use super::work::{Next, Work};
use crate::config::{assemble, Assembly, Config};
use crate::driver::{DriverError, Runtime};
use crate::types::{Run, RunStatus};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Runs driven at once; the rest wait in the store.
    pub max_runs: usize,
    /// How often an idle server looks for work.
    pub poll: Duration,
    /// How long a stop waits for live runs to reach their end or pause.
    pub grace: Duration,
    /// A run's lease: how long after this server dies another takes its
    /// runs over (renewed every third of it while the server lives).
    pub lease: Duration,
    /// Finished runs pruned on a schedule (`[retention]`), if any.
    pub retention: Option<crate::retention::Schedule>,
    /// Where runs' traces go, if anywhere.
    pub telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_runs: default_max_runs(),
            poll: Duration::from_millis(200),
            grace: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            retention: None,
            telemetry: None,
        }
    }
}

/// Runs at once by default: enough to keep the cores busy while most runs
/// wait on a model, few enough for the memory of one plugin set each.
pub fn default_max_runs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) * 64
}

/// What a server did, for its last log line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServeReport {
    /// Runs claimed and driven.
    pub driven: u64,
    /// Runs still live when the server stopped (resumable: their lease
    /// runs out and another server claims them).
    pub left_live: usize,
}

/// A server over one runtime.
pub struct Server {
    rt: Runtime,
    opts: ServeOptions,
    /// Plugins compiled once per config file.
    assemblies: HashMap<PathBuf, Arc<Assembly>>,
    /// The runs this process made claimable (submitted them, answered
    /// their approval): the server claims them at once, by id, instead of
    /// finding them at its next poll.
    work: Arc<Work>,
}

impl Server {
    /// A server that drives `rt`'s runs as `opts` says; it claims only at each poll until given [`Server::woken_by`].
    pub fn new(rt: Runtime, opts: ServeOptions) -> Server {
        Server {
            rt,
            opts,
            assemblies: HashMap::new(),
            work: Work::new(),
        }
    }

    /// Claims each run added to `work` as soon as it is added, as well as
    /// whatever each poll finds.
    pub fn woken_by(mut self, work: Arc<Work>) -> Server {
        self.work = work;
        self
    }

    /// Claims and drives runs until `stop` resolves; then claims no more
    /// and waits up to the grace time for the live runs, or until `now`
    /// resolves (a second signal).
    pub async fn serve(
        mut self,
        stop: impl Future<Output = ()>,
        now: impl Future<Output = ()>,
    ) -> ServeReport {
        let mut live: JoinSet<()> = JoinSet::new();
        let mut report = ServeReport::default();
        let work = self.work.clone();
        tokio::pin!(stop);
        // Whether the store may hold claimable runs not yet asked for: at
        // start, after a search that filled every slot it was offered, and
        // at every poll (other processes' work, expired leases and
        // approvals, retry times). The runs this process made claimable
        // come by id from `work` and need no search. A run ending frees a
        // slot but makes nothing claimable, so it alone does not send the
        // search to the store.
        let mut look = true;
        let mut next_poll = tokio::time::Instant::now() + self.opts.poll;
        loop {
            while live.try_join_next().is_some() {}
            let free = self.opts.max_runs.saturating_sub(live.len());
            let mut claimed = Vec::new();
            let mut made = Vec::new();
            if free > 0 && !look {
                match work.take(free) {
                    Next::Runs(ids) => made = ids,
                    Next::Search => look = true,
                }
            }
            if free > 0 && look {
                // The search finds every run made so far that still
                // needs a driver.
                work.searching();
                let asked = u32::try_from(free).unwrap_or(u32::MAX);
                match self.rt.claim(asked).await {
                    Ok(runs) => {
                        look = runs.len() >= asked as usize;
                        claimed = runs;
                    }
                    Err(e) => {
                        look = false;
                        tracing::warn!(error = %e, "claiming runs failed; trying again at the next poll")
                    }
                }
            } else if !made.is_empty() {
                match self.rt.claim_runs(&made).await {
                    Ok(runs) => claimed = runs,
                    Err(e) => {
                        // A search finds them.
                        look = true;
                        tracing::warn!(error = %e, "claiming runs failed; trying again at the next poll")
                    }
                }
            }
            for run in claimed {
                report.driven += 1;
                match self.assembly_for(&run) {
                    Ok(asm) => {
                        let rt = self.rt.clone();
                        live.spawn(drive(rt, asm, run));
                    }
                    // The run keeps its lease until it runs out: then it is
                    // claimed and tried again, not in a tight loop.
                    Err(e) => tracing::error!(run = %run.id, error = %format!("{e:#}"),
                        "cannot load the run's config; it is tried again when its lease runs out"),
                }
            }
            tokio::select! {
                () = &mut stop => break,
                _ = live.join_next(), if !live.is_empty() => {}
                () = tokio::time::sleep_until(next_poll) => {
                    look = true;
                    next_poll = tokio::time::Instant::now() + self.opts.poll;
                }
                () = work.added() => {}
            }
        }
        // Each live run stops at its next step boundary and gives its
        // lease back; another server (or this one, started again) claims it.
        self.rt.stop_at_next_step();
        tracing::info!(
            live = live.len(),
            "stopping: no more claims; live runs stop at their next step"
        );
        let waited = async { while live.join_next().await.is_some() {} };
        tokio::select! {
            () = waited => {}
            () = tokio::time::sleep(self.opts.grace) => {}
            () = now => {}
        }
        report.left_live = live.len();
        live.abort_all();
        report
    }

    fn assembly_for(&mut self, run: &Run) -> anyhow::Result<Arc<Assembly>> {
        let meta: serde_json::Value = serde_json::from_str(&run.meta).unwrap_or_default();
        let Some(path) = meta["config"].as_str() else {
            anyhow::bail!("run {} has no recorded config", run.id);
        };
        let path = PathBuf::from(path);
        if let Some(a) = self.assemblies.get(&path) {
            return Ok(a.clone());
        }
        let asm = Arc::new(load(&path)?);
        self.assemblies.insert(path, asm.clone());
        Ok(asm)
    }
}

fn load(path: &Path) -> anyhow::Result<Assembly> {
    let cfg = Config::load(path)?;
    assemble(&cfg)
}

async fn drive(rt: Runtime, asm: Arc<Assembly>, run: Run) {
    let consumers = match asm.consumers().await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(run = %run.id, error = %format!("{e:#}"), "cannot instantiate the run's plugins");
            return;
        }
    };
    tracing::info!(run = %run.id, status = %run.status.as_str(), "driving");
    match rt.drive_claimed(&run, consumers).await {
        Ok(out) => match out.run.status {
            RunStatus::Running => tracing::info!(
                run = %out.run.id,
                steps = out.run.step_count,
                "left at a step boundary for the next server"
            ),
            RunStatus::WaitingForApproval => tracing::info!(
                run = %out.run.id,
                approval = %out.pending.as_ref().map_or("", |a| a.id.as_str()),
                "paused for an approval"
            ),
            s => tracing::info!(run = %out.run.id, status = %s.as_str(),
                reason = %out.run.reason.map_or("", |r| r.as_str()), "run stopped"),
        },
        Err(DriverError::Store(e)) => {
            tracing::warn!(run = %run.id, error = %e, "the run stopped on a store error; it is claimed again later")
        }
        Err(e) => tracing::warn!(run = %run.id, error = %e, "the run stopped"),
    }
}
