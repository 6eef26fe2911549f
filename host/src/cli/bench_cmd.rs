//! `keel bench fanout`: the fan-out load test from the command line.

use super::exit;
use crate::bench::fanout::{self, FanoutOptions, StoreMode};
use crate::store::Sync;
use anyhow::{anyhow, bail, Context};
use clap::Subcommand;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Drive many durable runs at once against a stub model: each run has
    /// its own wasm agent (agent-llm) and policy (policy-rules), makes two
    /// model calls of --latency each and one tool call, and journals every
    /// transition. Prints throughput, mean latency, p90, p99, peak RSS and
    /// journal records per run.
    Fanout {
        #[arg(long, default_value_t = 20_000)]
        runs: u64,
        /// Runs kept in flight at once.
        #[arg(long, default_value_t = 5_000)]
        concurrency: u64,
        /// Time of each model call: `50ms`, `1s`, `0`.
        #[arg(long, default_value = "50ms", value_parser = parse_duration)]
        latency: Duration,
        /// Journal to a private in-memory SQLite database instead of a file.
        #[arg(long)]
        memory: bool,
        /// The store file to create (default: a fresh file in a temporary
        /// directory, removed afterwards). Must not exist.
        #[arg(long)]
        db: Option<PathBuf>,
        /// `full` (every commit synced; the default) or `normal`. For a file store only.
        #[arg(long)]
        sync: Option<String>,
        /// Where `make plugins` put the components.
        #[arg(long, default_value = "target/plugins")]
        plugins: PathBuf,
        /// The agent component (default: <plugins>/agent-llm-rust.wasm).
        #[arg(long)]
        agent: Option<PathBuf>,
        /// The policy component (default: <plugins>/policy-rules-rust.wasm).
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The compile cache.
        #[arg(long, default_value = ".keel/cache")]
        cache_dir: PathBuf,
        /// Also write the report as JSON to this file (`-`: standard output only JSON).
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "ms"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 50ms or 1s"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n * 1000.0,
        "us" | "µs" => n / 1000.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s or us)")),
    };
    if !ms.is_finite() || ms < 0.0 || ms > 3_600_000.0 {
        return Err(format!("{s:?} is out of range (0 to 1 hour)"));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// Runs a bench. `store` is the global `--store` (or `KEEL_STORE`): a
/// `postgres://` URL journals the fan-out there (the database must exist;
/// its tables are created if needed, and runs already in it are left
/// alone); a file path is taken as `--db`.
pub async fn run(cmd: BenchCommand, store_url: Option<String>) -> anyhow::Result<i32> {
    let BenchCommand::Fanout {
        runs,
        concurrency,
        latency,
        memory,
        db,
        sync,
        plugins,
        agent,
        policy,
        cache_dir,
        json,
    } = cmd;
    if memory && db.is_some() {
        bail!("--memory and --db exclude each other");
    }
    if memory && sync.is_some() {
        bail!("--sync applies to a store file; an in-memory store is never synced");
    }
    let sync_given = sync.is_some();
    let sync = match sync.as_deref().unwrap_or("full") {
        "full" => Sync::Full,
        "normal" => Sync::Normal,
        other => bail!("--sync: {other:?} is not full or normal"),
    };
    let tmp;
    let mut db = db;
    let mut pg = None;
    match store_url.map(|s| crate::store::Location::parse(&s)) {
        Some(crate::store::Location::Postgres(u)) => {
            if memory || db.is_some() || sync_given {
                bail!("--store postgres://… excludes --memory, --db and --sync");
            }
            pg = Some(u);
        }
        Some(crate::store::Location::File(p)) => {
            if memory || db.is_some() {
                bail!("--store (or KEEL_STORE) names a file: pass it as --db, or unset it with --memory");
            }
            db = Some(p);
        }
        None => {}
    }
    let store = if let Some(url) = pg {
        StoreMode::Postgres(url)
    } else if memory {
        StoreMode::Memory
    } else {
        let path = match db {
            Some(p) => p,
            None => {
                tmp = tempdir()?;
                tmp.0.join("fanout.db")
            }
        };
        StoreMode::Durable { path, sync }
    };
    let agent = agent.unwrap_or_else(|| plugins.join("agent-llm-rust.wasm"));
    let policy = policy.unwrap_or_else(|| plugins.join("policy-rules-rust.wasm"));
    for p in [&agent, &policy] {
        if !p.exists() {
            bail!(
                "{}: no such component (build the plugins with `make plugins`, or pass --plugins)",
                p.display()
            );
        }
    }
    let opts = FanoutOptions {
        runs,
        concurrency,
        latency,
        store,
        agent,
        policy,
        cache_dir: Some(cache_dir),
    };
    let report = fanout::run(&opts).await?;
    let text = serde_json::to_string_pretty(&report)?;
    match json.as_deref() {
        Some(p) if p.as_os_str() == "-" => println!("{text}"),
        Some(p) => {
            std::fs::write(p, format!("{text}\n"))
                .with_context(|| format!("writing {}", p.display()))?;
            println!("{}", report.human());
        }
        None => println!("{}", report.human()),
    }
    Ok(if report.failed == 0 {
        exit::OK
    } else {
        eprintln!(
            "error: {} of {} runs did not complete",
            report.failed, report.runs
        );
        exit::RUN_FAILED
    })
}

/// A temporary directory removed on drop (std has none).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> anyhow::Result<TempDir> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| anyhow!("random: {e}"))?;
    let dir = std::env::temp_dir().join(format!("keel-fanout-{}", hex::encode(bytes)));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(TempDir(dir))
}
