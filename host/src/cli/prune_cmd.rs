//! `keel prune`: retention run once ([`crate::retention`]).

use super::exit;
use super::output::utc;
use super::run_cmd::{store_reader, store_writer};
use crate::driver::{Clock, SystemClock};
use crate::retention::{self, Prune};
use crate::types::RunStatus;
use anyhow::anyhow;
use std::io::Write;
use std::path::PathBuf;

pub const PRUNE_EXIT_CODES: &str = "Exit codes:
  0  the runs selected were pruned (or, with --dry-run, listed); none is not an error
  1  refused: an export failed (that run and the ones after it were kept)
  2  usage or input error (a bad age, date or status; no such store)";

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Runs that finished before this: an age (30d, 12h, 90m, 2w) or a UTC
    /// date (2026-11-01, 2026-11-01T12:00:00Z).
    #[arg(long, value_name = "AGE|DATE")]
    pub finished_before: String,
    /// Only runs with these statuses (default: completed,failed,cancelled).
    #[arg(long, value_delimiter = ',', value_name = "STATUS,...")]
    pub status: Vec<String>,
    /// Export each run to DIR/RUN_ID.jsonl (checkable with `keel verify
    /// --file`) before removing it.
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// List what would be removed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print each run and the summary as JSON lines.
    #[arg(long)]
    pub json: bool,
}

pub async fn prune(args: PruneArgs, store: Option<String>) -> anyhow::Result<i32> {
    let before = match retention::cutoff(&args.finished_before, SystemClock.now_ms()) {
        Ok(t) => t,
        Err(e) => return usage(&format!("--finished-before: {e}")),
    };
    let mut statuses = Vec::new();
    for s in &args.status {
        match s.trim().parse::<RunStatus>() {
            Ok(st) if st.is_terminal() => statuses.push(st),
            Ok(st) => {
                return usage(&format!(
                    "--status {st}: a run that is {st} has not finished; only completed, failed and cancelled runs can be pruned"
                ))
            }
            Err(e) => return usage(&format!("--status: {e}")),
        }
    }
    let p = Prune {
        finished_before: before,
        statuses,
        export_dir: args.export.clone(),
    };
    let (json, dry) = (args.json, args.dry_run);
    let mut out = std::io::stdout().lock();
    let mut failed_write = None;
    let mut each = |r: &retention::PrunedRun| {
        let line = if json {
            serde_json::json!({
                "run_id": r.id, "status": r.status, "finished_at": r.finished_at,
                "events": r.events, "export": r.export, "dry_run": dry,
            })
            .to_string()
        } else {
            format!(
                "{}  {}  {:<9}  finished {}  {} events{}",
                if dry { "would prune" } else { "pruned" },
                r.id,
                r.status,
                utc(r.finished_at),
                r.events,
                r.export
                    .as_ref()
                    .map(|f| format!(", exported to {}", f.display()))
                    .unwrap_or_default()
            )
        };
        if let Err(e) = writeln!(out, "{line}") {
            failed_write.get_or_insert(e);
        }
    };
    let done = if dry {
        let reader = store_reader(store).await?;
        retention::prune(reader.as_ref(), None, &p, &mut each).await
    } else {
        let w = store_writer(store).await?;
        retention::prune(w.as_ref(), Some(w.as_ref()), &p, &mut each).await
    };
    if let Some(e) = failed_write {
        return Err(anyhow!(e).context("writing to standard output"));
    }
    let sum = match done {
        Ok(sum) => sum,
        Err(e @ retention::PruneError::Export { .. }) => {
            eprintln!("error: {e}");
            return Ok(exit::REFUSED);
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "summary": true, "dry_run": dry, "runs": sum.runs,
                "events": sum.events, "skipped": sum.skipped,
                "finished_before": before,
            })
        )?;
    } else {
        writeln!(
            out,
            "{} {} run(s) with {} events that finished before {}{}",
            if dry { "would prune" } else { "pruned" },
            sum.runs,
            sum.events,
            utc(before),
            if sum.skipped > 0 {
                format!(" ({} left: they changed meanwhile)", sum.skipped)
            } else {
                String::new()
            }
        )?;
    }
    Ok(exit::OK)
}

fn usage(msg: &str) -> anyhow::Result<i32> {
    eprintln!("error: {msg}");
    Ok(exit::USAGE)
}
