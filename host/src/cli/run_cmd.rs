//! The commands that touch runs.

use super::output::{print_event, print_outcome, print_run_detail, print_runs, safe, say};
use super::{exit, Cli, Command};
use crate::config::{assemble_with_progress, Config};
use crate::driver::{Operator, Outcome, Runtime};
use crate::store::{Event, Location, OpenOptions, StoreError};
use crate::types::{RunStatus, MAX_GOAL_BYTES};
use anyhow::{anyhow, Context};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let store_flag = cli.store.clone();
    match cli.command {
        Command::Run { config, goal, json } => {
            let goal = read_goal(goal.goal, goal.goal_file.as_deref())?;
            run(&config, store_flag, &goal, json).await
        }
        Command::Submit {
            config,
            goal,
            by,
            json,
        } => {
            let goal = read_goal(goal.goal, goal.goal_file.as_deref())?;
            submit(&config, store_flag, &goal, &by, json).await
        }
        Command::Serve(args) => super::serve_cmd::serve(args, store_flag).await,
        Command::Resume {
            run_id,
            config,
            take_over,
            by,
            json,
        } => {
            let take_over = take_over.then_some(by);
            resume(&run_id, config, store_flag, take_over, json).await
        }
        Command::Runs {
            status,
            limit,
            json,
        } => {
            let op = reader(store_flag).await?;
            let status = status
                .map(|s| s.parse::<RunStatus>().map_err(|e| anyhow!("--status: {e}")))
                .transpose()?;
            let runs = op.runs(status, limit).await?;
            let mut pending = std::collections::HashMap::new();
            for r in runs
                .iter()
                .filter(|r| r.status == RunStatus::WaitingForApproval)
            {
                if let Some(a) = op.pending_approval(&r.id).await? {
                    pending.insert(r.id.clone(), a.id);
                }
            }
            print_runs(&runs, &pending, json)?;
            if !json && limit > 0 && runs.len() == limit as usize {
                eprintln!("(the newest {limit} runs; --limit N lists more)");
            }
            Ok(exit::OK)
        }
        Command::Show { run_id, json } => {
            let d = reader(store_flag).await?.show(&run_id).await?;
            print_run_detail(&d.run, &d.steps, &d.approvals, &d.model_calls, json)?;
            Ok(exit::OK)
        }
        Command::Events {
            run_id,
            after,
            follow,
            json,
        } => events(store_flag, run_id, after, follow, json).await,
        Command::Approve { id, by, note } => {
            decide(store_flag, &id, true, &by, note.as_deref()).await
        }
        Command::Deny { id, by, note } => {
            decide(store_flag, &id, false, &by, note.as_deref()).await
        }
        Command::Cancel { run_id, by } => {
            let run = writer(store_flag).await?.cancel(&run_id, &by).await?;
            say!(
                "run {} cancelled (was running or paused; a live loop stops at once, or when its tool returns)",
                run.id
            );
            Ok(exit::OK)
        }
        Command::Plugin(cmd) => super::plugin_cmd::run(cmd).await,
        Command::Mcp(cmd) => super::mcp_cmd::run(cmd).await,
        Command::Verify(args) => super::journal_cmd::verify(args, store_flag).await,
        Command::Export(args) => super::journal_cmd::export(args, store_flag).await,
        Command::Prune(args) => super::prune_cmd::prune(args, store_flag).await,
        Command::Bench(cmd) => super::bench_cmd::run(cmd, store_flag).await,
    }
}

/// The store named by `--store`/`KEEL_STORE`, else the config's, else
/// `./keel.db`.
pub(super) fn location(flag: Option<String>, cfg: Option<&Config>) -> Location {
    match (flag, cfg) {
        (Some(f), _) => Location::parse(&f),
        (None, Some(cfg)) => cfg.store_location(),
        (None, None) => Location::File(PathBuf::from("keel.db")),
    }
}

/// `r`'s error, said to be about opening the store at `loc` unless it names
/// the store already.
pub(super) fn opening<T>(loc: &Location, r: Result<T, StoreError>) -> anyhow::Result<T> {
    r.map_err(|e| {
        let shown = loc.redacted();
        if e.to_string().contains(&shown) {
            anyhow::Error::from(e)
        } else {
            anyhow::Error::from(e).context(format!("opening the store {shown}"))
        }
    })
}

/// The error for a store file that does not exist.
fn no_store(p: &Path) -> anyhow::Error {
    anyhow!(
        "no Keel store at {}: name one with --store PATH or KEEL_STORE (a run's store is the `store` of the config it ran with)",
        p.display()
    )
}

/// The operator's API on the store, read-only: never migrates or writes.
async fn reader(flag: Option<String>) -> anyhow::Result<Operator> {
    Ok(Operator::reading(store_reader(flag).await?))
}

/// The store opened read-only: never migrates or writes.
pub(super) async fn store_reader(
    flag: Option<String>,
) -> anyhow::Result<Arc<dyn crate::store::RunReader>> {
    let loc = location(flag, None);
    if let Location::File(p) = &loc {
        if !p.exists() {
            return Err(no_store(p));
        }
    }
    opening(&loc, crate::store::open_reader(&loc).await)
}

/// The operator's API on the store, for decisions and cancels.
async fn writer(flag: Option<String>) -> anyhow::Result<Operator> {
    Ok(Operator::writing(store_writer(flag).await?))
}

/// An existing store opened for writing (migrated if older).
pub(super) async fn store_writer(
    flag: Option<String>,
) -> anyhow::Result<Arc<dyn crate::store::RunStore>> {
    let loc = location(flag, None);
    if let Location::File(p) = &loc {
        if !p.exists() {
            return Err(no_store(p));
        }
    }
    let opts = OpenOptions {
        create: false,
        ..OpenOptions::default()
    };
    opening(&loc, crate::store::open(&loc, opts).await)
}

/// The goal from `--goal` or `--goal-file` (`-`: standard input), at most
/// [`MAX_GOAL_BYTES`] bytes.
fn read_goal(goal: Option<String>, file: Option<&Path>) -> anyhow::Result<String> {
    use std::io::Read;
    let limit = MAX_GOAL_BYTES;
    let text = match (goal, file) {
        (Some(g), _) => g,
        (None, Some(f)) => {
            let mut buf = Vec::new();
            let what = if f == Path::new("-") {
                std::io::stdin()
                    .lock()
                    .take(limit as u64 + 1)
                    .read_to_end(&mut buf)
                    .context("reading the goal from standard input")?;
                "standard input".to_string()
            } else {
                std::fs::File::open(f)
                    .and_then(|h| h.take(limit as u64 + 1).read_to_end(&mut buf))
                    .with_context(|| format!("{}: cannot read the goal file", f.display()))?;
                f.display().to_string()
            };
            String::from_utf8(buf).map_err(|_| anyhow!("{what}: the goal is not UTF-8 text"))?
        }
        (None, None) => return Err(anyhow!("give the goal with --goal or --goal-file")),
    };
    if text.len() > limit {
        return Err(anyhow!(
            "the goal is over the limit of {limit} bytes (1 MiB)"
        ));
    }
    if text.trim().is_empty() {
        return Err(anyhow!("the goal is empty"));
    }
    Ok(text)
}

async fn decide(
    flag: Option<String>,
    id: &str,
    approve: bool,
    by: &str,
    note: Option<&str>,
) -> anyhow::Result<i32> {
    let op = writer(flag).await?;
    let a = if approve {
        op.approve(id, by, note).await?
    } else {
        op.deny(id, by, note).await?
    };
    let verb = if approve { "approved" } else { "denied" };
    say!(
        "approval {} {verb} by {by}: {} {}",
        a.id,
        a.call.tool,
        a.call.arguments
    );
    say!(
        "resume the run to act on it: keel resume {} (a running `keel serve` does it by itself)",
        a.run_id
    );
    Ok(exit::OK)
}

fn exit_for(o: &Outcome) -> i32 {
    match o.run.status {
        RunStatus::Completed => exit::OK,
        RunStatus::WaitingForApproval => exit::PAUSED,
        RunStatus::Parked => exit::PARKED,
        RunStatus::Failed | RunStatus::Cancelled => exit::RUN_FAILED,
        RunStatus::Running => exit::REFUSED,
    }
}

async fn runtime(cfg: &Config, store_flag: Option<String>, json: bool) -> anyhow::Result<Runtime> {
    // A bad [telemetry] is refused before the store is made.
    let telemetry = telemetry(cfg)?;
    let loc = location(store_flag, Some(cfg));
    if let Location::File(path) = &loc {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
        }
    }
    let store = opening(&loc, crate::store::open(&loc, OpenOptions::default()).await)?;
    let rt = Runtime::on(store).with_observer(Arc::new(move |e| print_event(e, json)));
    Ok(match telemetry {
        Some(t) => rt.with_telemetry(t),
        None => rt,
    })
}

/// The config's (or the environment's) exporter, if it names a collector.
pub(super) fn telemetry(cfg: &Config) -> anyhow::Result<Option<Arc<crate::telemetry::Telemetry>>> {
    let t = crate::telemetry::Telemetry::from_config(cfg.telemetry.as_ref())
        .with_context(|| format!("{}", cfg.path.display()))?;
    if let Some(t) = &t {
        tracing::info!(endpoint = t.endpoint(), "exporting traces");
    }
    Ok(t.map(Arc::new))
}

/// Sends the spans still queued (bounded: a dead collector costs at most
/// the flush timeout at exit).
async fn flush(rt: &Runtime) {
    if let Some(t) = rt.telemetry().cloned() {
        t.finish().await;
    }
}

async fn run(
    config: &Path,
    store_flag: Option<String>,
    goal: &str,
    json: bool,
) -> anyhow::Result<i32> {
    let cfg = Config::load(config)?;
    let asm = assemble_with_progress(&cfg, &|line| {
        if !json {
            eprintln!("{}", safe(line));
        }
    })?;
    let rt = runtime(&cfg, store_flag, json).await?;
    let consumers = asm.consumers().await?;
    let abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let meta = serde_json::json!({ "config": abs.display().to_string() }).to_string();
    let out = rt.start(goal, cfg.limits.clone(), &meta, consumers).await;
    flush(&rt).await;
    let out = out?;
    print_outcome(&out, json);
    Ok(exit_for(&out))
}

async fn submit(
    config: &Path,
    store_flag: Option<String>,
    goal: &str,
    by: &str,
    json: bool,
) -> anyhow::Result<i32> {
    let cfg = Config::load(config)?;
    // The plugins are checked now, so that a server does not find out.
    crate::config::assemble(&cfg)?;
    let loc = location(store_flag, Some(&cfg));
    let store = opening(&loc, crate::store::open(&loc, OpenOptions::default()).await)?;
    let abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let meta = serde_json::json!({
        "config": abs.display().to_string(),
        "submitted_by": by,
    })
    .to_string();
    let run = Runtime::on(store)
        .submit(goal, cfg.limits.clone(), &meta)
        .await?;
    if json {
        println!("{}", serde_json::to_string(&run)?);
    } else {
        println!("{}", run.id);
    }
    Ok(exit::OK)
}

async fn resume(
    run_id: &str,
    config: Option<PathBuf>,
    store_flag: Option<String>,
    take_over: Option<String>,
    json: bool,
) -> anyhow::Result<i32> {
    let config = match config {
        Some(c) => c,
        None => {
            let run = reader(store_flag.clone()).await?.run(run_id).await?;
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
            eprintln!("{}", safe(line));
        }
    })?;
    let rt = runtime(&cfg, store_flag, json).await?;
    let consumers = asm.consumers().await?;
    let out = match &take_over {
        Some(by) => rt.resume_taking_over(run_id, consumers, by).await,
        None => rt.resume(run_id, consumers).await,
    };
    flush(&rt).await;
    let out = out?;
    print_outcome(&out, json);
    Ok(exit_for(&out))
}

/// Events per read; a command pages through all of them.
const EVENT_PAGE: u32 = 1000;

async fn events(
    flag: Option<String>,
    run_id: Option<String>,
    mut after: i64,
    follow: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let op = reader(flag).await?;
    if let Some(id) = &run_id {
        op.run(id).await?; // an unknown run is an error, not an empty listing
    }
    let source = Journal {
        op: &op,
        run_id: run_id.as_deref(),
    };
    loop {
        let done = print_events(&source, &mut |e| print_event(e, json), &mut after, follow).await?;
        if done {
            return Ok(exit::OK);
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(exit::OK),
        }
    }
}

/// Where `keel events` reads: a page of events, and whether the run ended.
#[async_trait::async_trait(?Send)]
trait EventSource {
    async fn page(&self, after: i64) -> Result<Vec<Event>, StoreError>;
    async fn ended(&self) -> Result<bool, StoreError>;
}

/// One run's journal, or every run's, through the operator's API.
struct Journal<'a> {
    op: &'a Operator,
    run_id: Option<&'a str>,
}

#[async_trait::async_trait(?Send)]
impl EventSource for Journal<'_> {
    async fn page(&self, after: i64) -> Result<Vec<Event>, StoreError> {
        self.op.events(self.run_id, after, EVENT_PAGE).await
    }
    async fn ended(&self) -> Result<bool, StoreError> {
        match self.run_id {
            Some(id) => Ok(self.op.run(id).await?.status.is_terminal()),
            None => Ok(false), // every run's events: follow until Ctrl-C
        }
    }
}

/// Prints every event after `after` page by page, moving `after` along.
/// Returns whether the listing is complete: always without `follow`; with
/// it, once the run has ended and every event up to and including its
/// terminal one was printed. The status is read before the events: a run's
/// terminal event commits with its status, so a read that follows a
/// terminal status holds it, and nothing is printed twice or skipped.
async fn print_events(
    source: &dyn EventSource,
    print: &mut dyn FnMut(&Event),
    after: &mut i64,
    follow: bool,
) -> Result<bool, StoreError> {
    loop {
        let ended_before = follow && source.ended().await?;
        let batch = source.page(*after).await?;
        for e in &batch {
            print(e);
            *after = e.seq;
        }
        if batch.len() as u32 >= EVENT_PAGE {
            continue; // a full page: there may be more
        }
        return Ok(!follow || ended_before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn ev(seq: i64, kind: &str) -> Event {
        Event {
            seq,
            run_id: "r".into(),
            step_index: None,
            kind: kind.to_string().into(),
            data: "{}".into(),
            at: 0,
        }
    }

    /// The store as a follower sees it: committed events, and a status read
    /// that lets the run end (committing its last events) at the moment
    /// the follower asks, the race that lost them before (`ends_at`: the
    /// status read that ends it; 0: never).
    struct Fake {
        log: RefCell<Vec<Event>>,
        status_reads: RefCell<u32>,
        ends_at: u32,
    }

    #[async_trait::async_trait(?Send)]
    impl EventSource for Fake {
        async fn page(&self, after: i64) -> Result<Vec<Event>, StoreError> {
            Ok(self
                .log
                .borrow()
                .iter()
                .filter(|e| e.seq > after)
                .take(EVENT_PAGE as usize)
                .cloned()
                .collect())
        }
        async fn ended(&self) -> Result<bool, StoreError> {
            let mut n = self.status_reads.borrow_mut();
            *n += 1;
            if self.ends_at == 0 {
                return Ok(false);
            }
            if *n == self.ends_at {
                let mut l = self.log.borrow_mut();
                let len = l.len() as i64;
                l.push(ev(len + 1, "step.done"));
                l.push(ev(len + 2, "run.completed"));
                return Ok(true);
            }
            Ok(*n > self.ends_at)
        }
    }

    fn fake(events: i64, ends_at: u32) -> Fake {
        Fake {
            log: RefCell::new((1..=events).map(|i| ev(i, "plugin.log")).collect()),
            status_reads: RefCell::new(0),
            ends_at,
        }
    }

    #[tokio::test]
    async fn following_prints_every_event_up_to_the_terminal_one_once_in_order() {
        let source = fake(2500, 5);
        let mut printed = Vec::new();
        let mut after = 0;
        let mut rounds = 0;
        loop {
            rounds += 1;
            let done = print_events(&source, &mut |e| printed.push(e.seq), &mut after, true)
                .await
                .unwrap();
            if done {
                break;
            }
            assert!(rounds < 10);
        }
        assert_eq!(printed, (1..=2502).collect::<Vec<i64>>());
    }

    #[tokio::test]
    async fn a_listing_pages_through_every_event() {
        let source = fake(1305, 0);
        let mut printed = Vec::new();
        let mut after = 0;
        let done = print_events(&source, &mut |e| printed.push(e.seq), &mut after, false)
            .await
            .unwrap();
        assert!(done);
        assert_eq!(printed.len(), 1305);
    }
}
