//! Retention: removing finished runs from a store, each whole (its row,
//! steps, approvals, events and model calls in one transaction), so that a
//! store does not grow without bound and what remains still verifies.
//! `keel prune` runs it once; `[retention]` makes `keel serve` run it on a
//! schedule. A run that has not finished is never touched.

use crate::audit::export;
use crate::store::{Doomed, Finished, RunReader, RunStore, StoreError};
use crate::types::{Run, RunStatus};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How many runs are read, exported and deleted together (one
/// transaction each batch).
pub const BATCH: u32 = 200;

/// What to prune.
#[derive(Debug, Clone)]
pub struct Prune {
    /// Runs that finished (last changed) before this time, in ms since
    /// the epoch.
    pub finished_before: i64,
    /// Only runs with these statuses (every terminal status when empty).
    pub statuses: Vec<RunStatus>,
    /// Export each run here (`RUN_ID.jsonl`, as `keel export` writes it)
    /// before deleting it; a run whose export fails is kept.
    pub export_dir: Option<PathBuf>,
}

/// One run pruned (or, in a dry run, that would be).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PrunedRun {
    /// The run's id.
    pub id: String,
    /// The status it finished with.
    pub status: RunStatus,
    /// When it finished (ms since the epoch).
    pub finished_at: i64,
    /// How many events its journal held.
    pub events: u64,
    /// The file it was exported to.
    pub export: Option<PathBuf>,
}

/// What a prune did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Runs removed (in a dry run: that would be).
    pub runs: u64,
    /// Their events.
    pub events: u64,
    /// Runs listed but left because they changed meanwhile.
    pub skipped: u64,
}

/// Why a prune stopped.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The export folder could not be created, so nothing was pruned.
    #[error("cannot create the export folder {path}: {source}; nothing was pruned")]
    ExportDir {
        /// The folder.
        path: PathBuf,
        /// Why creating it failed.
        source: std::io::Error,
    },
    /// A run could not be exported; it and the runs after it were kept.
    #[error("exporting run {run} to {path}: {source}; it and the runs after it were kept")]
    Export {
        /// The run's id.
        run: String,
        /// The file it was being written to.
        path: PathBuf,
        /// Why writing it failed.
        source: std::io::Error,
    },
}

/// Removes the runs `p` selects from `store`, or with `store` `None` only
/// lists them (a dry run over `reader`). `each` sees every run as it goes.
pub async fn prune(
    reader: &dyn RunReader,
    store: Option<&dyn RunStore>,
    p: &Prune,
    mut each: impl FnMut(&PrunedRun),
) -> Result<Summary, PruneError> {
    let mut q = Finished::new(p.finished_before, &p.statuses, BATCH)?;
    if let (Some(dir), Some(_)) = (&p.export_dir, store) {
        std::fs::create_dir_all(dir).map_err(|source| PruneError::ExportDir {
            path: dir.clone(),
            source,
        })?;
    }
    let mut sum = Summary::default();
    loop {
        let page = reader.finished_runs(&q).await?;
        let Some(last) = page.last() else {
            return Ok(sum);
        };
        q.after = Some((last.updated_at, last.id.clone()));
        let Some(store) = store else {
            for run in &page {
                let r = pruned(run, run.chain_len, None);
                sum.runs += 1;
                sum.events += r.events;
                each(&r);
            }
            continue;
        };
        let mut doomed = Vec::with_capacity(page.len());
        let mut found = Vec::with_capacity(page.len());
        for run in &page {
            let (len, file) = match &p.export_dir {
                Some(dir) => {
                    let (len, file) = export_one(store, dir, &run.id).await?;
                    (len, Some(file))
                }
                None => (run.chain_len, None),
            };
            doomed.push(Doomed {
                id: run.id.clone(),
                chain_len: len,
            });
            found.push(pruned(run, len, file));
        }
        let deleted = store.delete_runs(&doomed, &q).await?;
        for r in &found {
            if deleted.contains(&r.id) {
                sum.runs += 1;
                sum.events += r.events;
                each(r);
            } else {
                sum.skipped += 1;
            }
        }
    }
}

fn pruned(run: &Run, events: u64, export: Option<PathBuf>) -> PrunedRun {
    PrunedRun {
        id: run.id.clone(),
        status: run.status,
        finished_at: run.updated_at,
        events,
        export,
    }
}

/// Exports one run into `dir`; returns its journal's length as exported.
async fn export_one(
    store: &dyn RunStore,
    dir: &Path,
    id: &str,
) -> Result<(u64, PathBuf), PruneError> {
    let j = store.journal(id).await?;
    let path = dir.join(format!("{id}.jsonl"));
    let len = j.run.chain_len;
    let target = path.clone();
    let written = tokio::task::spawn_blocking(move || export::write_file(&j, &target))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    match written {
        Ok(()) => Ok((len, path)),
        Err(source) => Err(PruneError::Export {
            run: id.to_string(),
            path,
            source,
        }),
    }
}

/// Retention on a schedule: what `[retention]` makes `keel serve` do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// How long a run is kept after it finished.
    pub keep: Duration,
    /// Only runs with these statuses (every finished status when empty).
    pub statuses: Vec<RunStatus>,
    /// Export each run here before removing it.
    pub export_dir: Option<PathBuf>,
    /// How often to prune; the first time is at start.
    pub every: Duration,
}

/// The shortest interval a schedule may have.
pub const MIN_EVERY: Duration = Duration::from_millis(100);

impl Schedule {
    /// The `[retention]` section of `cfg`, checked; paths are resolved
    /// against the config's folder.
    pub fn from_config(cfg: &crate::config::Config) -> Result<Option<Schedule>, String> {
        let Some(r) = &cfg.retention else {
            return Ok(None);
        };
        let keep = parse_duration(&r.finished_before)
            .map_err(|e| format!("[retention] finished_before: {e}"))?;
        let every = parse_duration(&r.every).map_err(|e| format!("[retention] every: {e}"))?;
        if every < MIN_EVERY {
            return Err(format!(
                "[retention] every: {:?} is shorter than {} ms",
                r.every,
                MIN_EVERY.as_millis()
            ));
        }
        Finished::new(0, &r.status, 1).map_err(|e| format!("[retention] status: {e}"))?;
        Ok(Some(Schedule {
            keep,
            statuses: r.status.clone(),
            export_dir: r.export_dir.as_ref().map(|d| cfg.resolve(d)),
            every,
        }))
    }

    /// What to prune at `now`.
    pub fn at(&self, now: i64) -> Prune {
        Prune {
            finished_before: now
                .saturating_sub(i64::try_from(self.keep.as_millis()).unwrap_or(i64::MAX)),
            statuses: self.statuses.clone(),
            export_dir: self.export_dir.clone(),
        }
    }
}

/// Prunes `store` by `s` until dropped: at once, then every `s.every`.
/// Each round logs what it removed; a round that fails logs why (once a
/// round) and the next one tries again.
pub async fn on_schedule(store: std::sync::Arc<dyn RunStore>, s: Schedule) {
    use crate::driver::{Clock, SystemClock};
    let mut tick = tokio::time::interval(s.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let p = s.at(SystemClock.now_ms());
        match prune(store.as_ref(), Some(store.as_ref()), &p, |_| {}).await {
            Ok(sum) if sum.runs > 0 || sum.skipped > 0 => tracing::info!(
                runs = sum.runs,
                events = sum.events,
                skipped = sum.skipped,
                finished_before = p.finished_before,
                "pruned finished runs"
            ),
            Ok(_) => tracing::debug!("retention: nothing to prune"),
            Err(e) => {
                tracing::warn!(error = %e, "retention: pruning failed; trying again next round")
            }
        }
    }
}

/// A time given as an age (`30d`, `12h`, `90m`, `45s`, `500ms`, `2w`:
/// that long before `now`) or a UTC date (`2026-11-01`,
/// `2026-11-01T12:00:00Z`), in ms since the epoch.
pub fn cutoff(spec: &str, now: i64) -> Result<i64, String> {
    let spec = spec.trim();
    if let Ok(d) = parse_duration(spec) {
        return Ok(now.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
    }
    parse_date(spec).ok_or_else(|| {
        format!(
            "{spec:?} is neither an age (30d, 12h, 90m, 45s, 2w) nor a UTC date (2026-11-01 or 2026-11-01T12:00:00Z)"
        )
    })
}

/// `30d`, `12h`, `90m`, `45s`, `500ms`, `2w`: a number and a unit.
pub fn parse_duration(spec: &str) -> Result<Duration, String> {
    let spec = spec.trim();
    let split = spec
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{spec:?} has no unit (ms, s, m, h, d or w)"))?;
    let (n, unit) = spec.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{spec:?} does not start with a number"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(format!("{spec:?}: the unit is one of ms, s, m, h, d, w")),
    };
    n.checked_mul(ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{spec:?} is too long"))
}

/// `YYYY-MM-DD`, optionally followed by `THH:MM[:SS]` (or a space) and an
/// optional `Z`, read as UTC.
fn parse_date(spec: &str) -> Option<i64> {
    let spec = spec.strip_suffix('Z').unwrap_or(spec);
    let (date, time) = match spec.find(['T', ' ']) {
        Some(i) => (&spec[..i], Some(&spec[i + 1..])),
        None => (spec, None),
    };
    let mut d = date.split('-');
    let (y, m, day) = (d.next()?, d.next()?, d.next()?);
    if d.next().is_some() || y.len() != 4 || m.len() != 2 || day.len() != 2 {
        return None;
    }
    let (y, m, day): (i64, i64, i64) = (y.parse().ok()?, m.parse().ok()?, day.parse().ok()?);
    if !(1..=12).contains(&m) || day < 1 || day > days_in_month(y, m) {
        return None;
    }
    let secs_of_day = match time {
        None => 0,
        Some(t) => {
            let parts: Vec<&str> = t.split(':').collect();
            if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2) {
                return None;
            }
            let n: Vec<i64> = parts
                .iter()
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            let s = n.get(2).copied().unwrap_or(0);
            if n[0] > 23 || n[1] > 59 || s > 59 {
                return None;
            }
            n[0] * 3600 + n[1] * 60 + s
        }
    };
    Some((days_from_civil(y, m, day) * 86_400 + secs_of_day) * 1000)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of
/// `cli::output::utc`'s conversion).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::{cutoff, parse_duration};
    use std::time::Duration;

    #[test]
    fn ages_and_dates_name_the_same_instants_as_the_cli_prints() {
        let now = 1_796_170_245_123;
        assert_eq!(cutoff("0s", now), Ok(now));
        assert_eq!(cutoff("30d", now), Ok(now - 30 * 86_400_000));
        assert_eq!(cutoff("2w", now), Ok(now - 14 * 86_400_000));
        assert_eq!(cutoff("1970-01-01", now), Ok(0));
        assert_eq!(cutoff("2000-02-29", now), Ok(951_782_400_000));
        assert_eq!(cutoff("2026-12-02T00:10:45Z", now), Ok(1_796_170_245_000));
        assert_eq!(cutoff("2026-12-02 00:10", now), Ok(1_796_170_200_000));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn a_spec_that_is_neither_is_refused_with_what_is_accepted() {
        let now = 1_796_170_245_123;
        for bad in [
            "",
            "30",
            "d",
            "30x",
            "-5d",
            "2026-13-01",
            "2026-02-30",
            "2026-1-01",
            "2026-11-01T25:00",
            "yesterday",
            "99999999999999999999d",
        ] {
            let e = cutoff(bad, now).expect_err(bad);
            assert!(e.contains("neither an age"), "{bad}: {e}");
        }
    }
}
