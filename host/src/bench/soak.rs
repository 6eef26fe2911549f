//! The retention soak: the fan-out's runs (wasm agent and policy, stub
//! model, every transition journaled to a durable SQLite file) created
//! and finished in rounds, with the finished runs pruned after each round
//! but the last `keep_rounds`' worth, as `[retention]` would. It records
//! the store's size as the runs add up, to show that it levels off.

use super::fanout::{drive, prepare, FanoutOptions, StoreMode};
use crate::driver::{Clock, SystemClock};
use crate::retention::{prune, Prune};
use anyhow::{bail, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// The fan-out's options; `runs` is the soak's total, the store must
    /// be a durable SQLite file.
    pub fanout: FanoutOptions,
    /// Runs created and finished between two prunes.
    pub round: u64,
    /// Rounds of finished runs kept (0: prune every finished run).
    pub keep_rounds: u64,
    /// Whether to prune at all (without it the soak shows the growth).
    pub prune: bool,
    /// Record the size every this many runs (and after the last round).
    pub report_every: u64,
}

/// The store at one point of the soak.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Runs created and finished so far.
    pub runs: u64,
    /// Runs left in the store.
    pub live_runs: u64,
    pub events: u64,
    /// The database as its pages count it (what the file holds once the
    /// write-ahead log is checkpointed into it), in bytes.
    pub size_bytes: u64,
    /// The database file and its write-ahead log, in bytes, as they stand
    /// (the file grows only at checkpoints; the log is reused, never cut).
    pub db_bytes: u64,
    pub wal_bytes: u64,
    /// Pages of the database file that are free for reuse.
    pub free_pages: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub store: String,
    pub round: u64,
    pub keep_rounds: u64,
    pub prune: bool,
    pub failed: u64,
    pub pruned: u64,
    pub wall_s: f64,
    pub samples: Vec<Sample>,
}

impl SoakReport {
    pub fn human(&self) -> String {
        let mut s = format!(
            "retention soak on {}: rounds of {} runs, {}; {} runs pruned, {} failed, {:.1} s\n{:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            self.store,
            self.round,
            if self.prune {
                format!("pruned after each round, keeping {} round(s)", self.keep_rounds)
            } else {
                "no pruning".into()
            },
            self.pruned,
            self.failed,
            self.wall_s,
            "runs",
            "in store",
            "events",
            "size MiB",
            "file MiB",
            "wal MiB",
            "free pages"
        );
        for x in &self.samples {
            s.push_str(&format!(
                "{:>9} {:>9} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10}\n",
                x.runs,
                x.live_runs,
                x.events,
                x.size_bytes as f64 / (1 << 20) as f64,
                x.db_bytes as f64 / (1 << 20) as f64,
                x.wal_bytes as f64 / (1 << 20) as f64,
                x.free_pages
            ));
        }
        s
    }
}

pub async fn run(opts: &SoakOptions) -> anyhow::Result<SoakReport> {
    let StoreMode::Durable { path, .. } = &opts.fanout.store else {
        bail!("the soak measures a SQLite file: give it --db PATH (not PostgreSQL or memory)");
    };
    if opts.round == 0 || opts.report_every == 0 {
        bail!("--round and --report-every must be at least 1");
    }
    let path = path.clone();
    let mut fan = opts.fanout.clone();
    fan.concurrency = fan.concurrency.min(opts.round);
    let p = prepare(&fan, false).await?;
    let started = std::time::Instant::now();
    let mut done = 0;
    let mut failed = 0;
    let mut pruned = 0;
    let mut next_report = opts.report_every;
    // When each round ended: what a prune keeps is the rounds after one.
    let mut ended: Vec<i64> = Vec::new();
    let mut samples = Vec::new();
    while done < opts.fanout.runs {
        let n = opts.round.min(opts.fanout.runs - done);
        let (_, f, first) = drive(&p.bench, &p.runtime, &p.limits, p.concurrency.min(n), n).await?;
        if let Some(e) = first {
            tracing::warn!("{f} runs of a round did not complete; the first: {e}");
        }
        failed += f;
        done += n;
        ended.push(SystemClock.now_ms());
        if opts.prune {
            let kept = opts.keep_rounds as usize;
            if ended.len() > kept {
                let before = ended[ended.len() - 1 - kept] + 1;
                let sum = prune(
                    p.store.as_ref(),
                    Some(p.store.as_ref()),
                    &Prune {
                        finished_before: before,
                        statuses: vec![],
                        export_dir: None,
                    },
                    |_| {},
                )
                .await
                .context("pruning")?;
                pruned += sum.runs;
            }
        }
        if done >= next_report || done >= opts.fanout.runs {
            samples.push(sample(&p, &path, done).await?);
            while next_report <= done {
                next_report += opts.report_every;
            }
        }
    }
    Ok(SoakReport {
        store: p.label,
        round: opts.round,
        keep_rounds: opts.keep_rounds,
        prune: opts.prune,
        failed,
        pruned,
        wall_s: started.elapsed().as_secs_f64(),
        samples,
    })
}

async fn sample(p: &super::fanout::Prepared, path: &Path, runs: u64) -> anyhow::Result<Sample> {
    let counts = p.store.count_runs().await?;
    let live_runs = counts.iter().map(|(_, n)| n).sum();
    let events = p.store.count_events().await?;
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let c = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("reading {}", path.display()))?;
    let pragma = |name: &str| {
        c.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))
            .map_or(0, |n| n.max(0) as u64)
    };
    let free_pages = pragma("freelist_count");
    let size_bytes = pragma("page_count") * pragma("page_size");
    Ok(Sample {
        runs,
        live_runs,
        events,
        size_bytes,
        db_bytes: size(path.to_path_buf()),
        wal_bytes: size(PathBuf::from(wal)),
        free_pages,
    })
}
