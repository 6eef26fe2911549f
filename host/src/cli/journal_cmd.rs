//! `keel verify` and `keel export`: the journal's audits.

use super::exit;
use super::run_cmd::store_reader;
use crate::audit::{self, export, Break, Verified};
use crate::store::StoreError;
use anyhow::{anyhow, Context};
use std::io::Write;
use std::path::PathBuf;

pub const VERIFY_EXIT_CODES: &str = "Exit codes:
  0  every journal checked holds
  1  a journal does not hold (the run, the event and what is wrong are printed),
     or an export file was edited, truncated or is not an export
  2  usage or input error (no such run, no such store or file)";

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The runs to check.
    #[arg(required_unless_present_any = ["all", "file"])]
    pub run_ids: Vec<String>,
    /// Check every run in the store.
    #[arg(long, conflicts_with = "run_ids")]
    pub all: bool,
    /// Check an exported run (`keel export`) instead of the store.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["run_ids", "all"])]
    pub file: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The run to export.
    pub run_id: String,
    /// The file to write (refused if it exists).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub async fn verify(args: VerifyArgs, store: Option<String>) -> anyhow::Result<i32> {
    let results: Vec<Result<Verified, Break>> = match &args.file {
        Some(path) => {
            let f =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            match export::read(std::io::BufReader::new(f)) {
                Ok(j) => vec![audit::verify(&j)],
                Err(export::ExportError::Io(e)) => {
                    return Err(anyhow!(e).context(format!("reading {}", path.display())))
                }
                Err(e) => {
                    return report_unreadable(&args, path, &e.to_string());
                }
            }
        }
        None => {
            let reader = store_reader(store).await?;
            let ids = if args.all {
                audit::all_run_ids(reader.as_ref()).await?
            } else {
                args.run_ids.clone()
            };
            let mut out = Vec::with_capacity(ids.len());
            for id in &ids {
                match reader.journal(id).await {
                    Ok(j) => out.push(audit::verify(&j)),
                    Err(e @ StoreError::RunNotFound(_)) => return Err(e.into()),
                    Err(e) => return Err(anyhow!(e).context(format!("reading run {id}"))),
                }
            }
            out
        }
    };
    let broken = results.iter().filter(|r| r.is_err()).count();
    if args.json {
        let runs: Vec<serde_json::Value> = results
            .iter()
            .map(|r| match r {
                Ok(v) => serde_json::json!({
                    "run_id": v.run_id, "ok": true, "events": v.events, "head": v.head,
                }),
                Err(b) => serde_json::json!({
                    "run_id": b.run_id, "ok": false, "problem": b.problem,
                    "seq": b.seq, "pos": b.pos, "detail": b.detail,
                }),
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "ok": broken == 0, "runs": runs, "broken": broken })
        );
    } else {
        let mut out = std::io::stdout().lock();
        for r in &results {
            match r {
                Ok(v) => writeln!(
                    out,
                    "ok      {}  {} events, head {}",
                    v.run_id, v.events, v.head
                )?,
                Err(b) => writeln!(out, "BROKEN  {b}")?,
            }
        }
        writeln!(out, "{} run(s) checked, {} broken", results.len(), broken)?;
    }
    Ok(if broken == 0 { exit::OK } else { exit::REFUSED })
}

/// An export file that cannot be read back as one: it does not hold.
fn report_unreadable(args: &VerifyArgs, path: &std::path::Path, why: &str) -> anyhow::Result<i32> {
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "ok": false, "broken": 1,
                "file": path.display().to_string(), "problem": "unreadable", "detail": why,
            })
        );
    } else {
        println!("BROKEN  {}: {why}", path.display());
    }
    Ok(exit::REFUSED)
}

pub async fn export(args: ExportArgs, store: Option<String>) -> anyhow::Result<i32> {
    if args.out.exists() {
        return Err(anyhow!(
            "{} exists: name a new file (nothing was written)",
            args.out.display()
        ));
    }
    let reader = store_reader(store).await?;
    let j = reader.journal(&args.run_id).await?;
    export::write_file(&j, &args.out).with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!(
        "run {}: {} events, {} steps, {} approvals written to {} (head {})",
        j.run.id,
        j.events.len(),
        j.steps.len(),
        j.approvals.len(),
        args.out.display(),
        j.run.chain_head
    );
    Ok(exit::OK)
}
