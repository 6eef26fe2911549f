//! The commands that touch runs.

use super::output::{print_event, print_outcome, print_run_detail, print_runs};
use super::{exit, Cli, Command};
use crate::config::{assemble_with_progress, Config};
use crate::driver::{Outcome, Runtime};
use crate::store::{Store, StoreHandle};
use crate::types::RunStatus;
use anyhow::{anyhow, Context};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An operation that does not apply to the run as it is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let store_flag = cli.store.clone();
    match cli.command {
        Command::Run { config, goal, json } => run(&config, store_flag, &goal, json).await,
        Command::Resume {
            run_id,
            config,
            json,
        } => resume(&run_id, config, store_flag, json).await,
        Command::Runs {
            status,
            limit,
            json,
        } => {
            let store = open_read(store_flag)?;
            let status = status
                .map(|s| s.parse::<RunStatus>().map_err(|e| anyhow!("--status: {e}")))
                .transpose()?;
            print_runs(&store.list_runs(status, limit)?, &store, json)?;
            Ok(exit::OK)
        }
        Command::Show { run_id, json } => {
            let store = open_read(store_flag)?;
            let run = store.run(&run_id)?;
            print_run_detail(
                &run,
                &store.load_steps(&run_id)?,
                &store.load_approvals(&run_id)?,
                json,
            )?;
            Ok(exit::OK)
        }
        Command::Events {
            run_id,
            after,
            follow,
            json,
        } => events(store_flag, run_id, after, follow, json).await,
        Command::Approve { id, by, note } => decide(store_flag, &id, true, &by, note.as_deref()),
        Command::Deny { id, by, note } => decide(store_flag, &id, false, &by, note.as_deref()),
        Command::Cancel { run_id, by } => {
            let mut store = open_write(store_flag)?;
            let run = store.cancel(&run_id, &by, now()).map_err(refusal)?;
            println!(
                "run {} cancelled (was running or paused; a live loop stops at its next write)",
                run.id
            );
            Ok(exit::OK)
        }
        Command::Plugin(cmd) => super::plugin_cmd::run(cmd).await,
        Command::Bench(cmd) => super::bench_cmd::run(cmd).await,
    }
}

fn refusal(e: crate::store::StoreError) -> anyhow::Error {
    anyhow::Error::new(e)
}

fn now() -> i64 {
    crate::driver::Clock::now_ms(&crate::driver::SystemClock)
}

fn store_path(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(|| PathBuf::from("keel.db"))
}

fn open_read(flag: Option<PathBuf>) -> anyhow::Result<Store> {
    let p = store_path(flag);
    Store::open_read_only(&p).with_context(|| format!("opening the store {}", p.display()))
}

fn open_write(flag: Option<PathBuf>) -> anyhow::Result<Store> {
    let p = store_path(flag);
    if !p.exists() {
        return Err(anyhow!(
            "{}: no such store (start a run first, or pass --store)",
            p.display()
        ));
    }
    Store::open(&p, crate::store::Sync::Full)
        .with_context(|| format!("opening the store {}", p.display()))
}

fn decide(
    flag: Option<PathBuf>,
    id: &str,
    approve: bool,
    by: &str,
    note: Option<&str>,
) -> anyhow::Result<i32> {
    let mut store = open_write(flag)?;
    // Accept the id of the waiting run as well as the approval's.
    let approval_id = if store.get_run(id)?.is_some() {
        let pending: Vec<_> = store
            .load_approvals(id)?
            .into_iter()
            .filter(|a| a.status == crate::types::ApprovalStatus::Pending)
            .collect();
        match pending.as_slice() {
            [a] => a.id.clone(),
            [] => {
                return Err(anyhow!(Refused(format!(
                    "run {id} has no pending approval"
                ))))
            }
            _ => {
                return Err(anyhow!(Refused(format!(
                    "run {id} has several pending approvals; name one"
                ))))
            }
        }
    } else {
        id.to_string()
    };
    let a = store.decide_approval(&approval_id, approve, by, note, now())?;
    let verb = if approve { "approved" } else { "denied" };
    println!(
        "approval {} {verb} by {by}: {} {}",
        a.id, a.call.tool, a.call.arguments
    );
    println!("resume the run to act on it: keel resume {}", a.run_id);
    Ok(exit::OK)
}

fn exit_for(o: &Outcome) -> i32 {
    match o.run.status {
        RunStatus::Completed => exit::OK,
        RunStatus::WaitingForApproval => exit::PAUSED,
        RunStatus::Failed | RunStatus::Cancelled => exit::RUN_FAILED,
        RunStatus::Running => exit::REFUSED,
    }
}

fn runtime(cfg: &Config, store_flag: Option<PathBuf>, json: bool) -> anyhow::Result<Runtime> {
    let path = store_flag.unwrap_or_else(|| cfg.store_path());
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    let store = Store::open(&path, crate::store::Sync::Full)
        .with_context(|| format!("opening the store {}", path.display()))?;
    Ok(Runtime::new(StoreHandle::spawn(store))
        .with_observer(Arc::new(move |e| print_event(e, json))))
}

async fn run(
    config: &Path,
    store_flag: Option<PathBuf>,
    goal: &str,
    json: bool,
) -> anyhow::Result<i32> {
    let cfg = Config::load(config)?;
    let asm = assemble_with_progress(&cfg, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    let rt = runtime(&cfg, store_flag, json)?;
    let consumers = asm.consumers().await?;
    let abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let meta = serde_json::json!({ "config": abs.display().to_string() }).to_string();
    let out = rt.start(goal, cfg.limits.clone(), &meta, consumers).await?;
    print_outcome(&out, json);
    Ok(exit_for(&out))
}

async fn resume(
    run_id: &str,
    config: Option<PathBuf>,
    store_flag: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<i32> {
    let config = match config {
        Some(c) => c,
        None => {
            let store = open_read(store_flag.clone())?;
            let run = store.run(run_id)?;
            let meta: serde_json::Value = serde_json::from_str(&run.meta).unwrap_or_default();
            PathBuf::from(
                meta["config"]
                    .as_str()
                    .ok_or_else(|| anyhow!("run {run_id} has no recorded config; pass --config"))?,
            )
        }
    };
    let cfg = Config::load(&config)?;
    let asm = assemble_with_progress(&cfg, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    let rt = runtime(&cfg, store_flag, json)?;
    let out = rt.resume(run_id, asm.consumers().await?).await?;
    print_outcome(&out, json);
    Ok(exit_for(&out))
}

async fn events(
    flag: Option<PathBuf>,
    run_id: Option<String>,
    mut after: i64,
    follow: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let store = open_read(flag)?;
    loop {
        let batch = store.events_after(run_id.as_deref(), after, 1000)?;
        for e in &batch {
            print_event(e, json);
            after = e.seq;
        }
        if !follow {
            return Ok(exit::OK);
        }
        if batch.is_empty() {
            if let Some(id) = &run_id {
                let st = store.run(id)?.status;
                if st.is_terminal() {
                    return Ok(exit::OK);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                _ = tokio::signal::ctrl_c() => return Ok(exit::OK),
            }
        }
    }
}
