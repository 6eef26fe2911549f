//! `keel bench fanout`: the fan-out load test from the command line.

use super::exit;
use crate::bench::fanout::{self, FanoutOptions, StoreMode};
use crate::bench::serve::{self, ServeBenchOptions};
use crate::store::Durability;
use anyhow::{anyhow, bail, Context};
use clap::Subcommand;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Drive many durable runs at once against a stub model: each run has
    /// its own wasm agent (agent-llm) and policy (policy-rules), makes two
    /// model calls of --latency each and one tool call, and journals every
    /// transition. Prints throughput, mean latency, p90, p99, peak RSS,
    /// journal records per run, and Keel's CPU per run beside its floor's:
    /// the same rows committed straight to the same engine and the same
    /// plugin instantiations and calls, without the loop (measured after
    /// the runs, SQLite stores only).
    Fanout {
        #[arg(long, default_value_t = 20_000)]
        runs: u64,
        /// Runs kept in flight at once.
        #[arg(long, default_value_t = 5_000)]
        concurrency: u64,
        #[command(flatten)]
        load: LoadArgs,
        /// The store file to create (default: a fresh file in a temporary
        /// directory, removed afterwards). Must not exist.
        #[arg(long)]
        db: Option<PathBuf>,
        /// Measure only the floor (one run is driven and recorded first).
        #[arg(long, conflicts_with = "no_floor")]
        floor: bool,
        /// Do not measure the floor after the runs.
        #[arg(long)]
        no_floor: bool,
        /// Run the fan-out (and its floor) once per concurrency in this
        /// comma-separated list, instead of once at --concurrency, and
        /// report the series: how CPU per run grows with the runs in flight.
        #[arg(long, value_delimiter = ',', conflicts_with_all = ["floor", "db"])]
        sweep: Vec<u64>,
    },
    /// Run `keel serve` in this process on a loopback port and load it
    /// through its HTTP API: --runs runs submitted with POST /api/runs and
    /// driven by the server (--concurrency at once) with the fan-out's
    /// plugins and model, the first --sse-clients of them followed over
    /// event streams; then --approvals runs that pause, each approved with
    /// one request at a time. Prints runs/s beside the fan-out's with the
    /// same runs and concurrency (measured first, in this process), the
    /// approve requests' latency, and the time from a transition's commit
    /// to its event reaching a stream client.
    Serve {
        #[arg(long, default_value_t = 10_000)]
        runs: u64,
        /// The server's max_runs: runs driven at once (the fan-out beside
        /// it keeps as many in flight). At most 3,300: each may hold three
        /// instances, of 8.7 GB of address space each.
        #[arg(long, default_value_t = 3_000)]
        concurrency: u64,
        #[command(flatten)]
        load: LoadArgs,
        /// Event streams held open while the runs are driven, one run each.
        #[arg(long, default_value_t = 1_000)]
        sse_clients: usize,
        /// Runs that pause for an approval, answered through the API (at
        /// most 1,100).
        #[arg(long, default_value_t = 1_000)]
        approvals: usize,
        /// Connections submitting runs at once.
        #[arg(long, default_value_t = 32)]
        submitters: usize,
        /// Do not measure the fan-out beside it.
        #[arg(long)]
        no_fanout: bool,
    },
    /// The retention soak: the fan-out's runs created and finished in
    /// rounds on a durable SQLite file, the finished ones pruned after
    /// each round but the last --keep-rounds, as `[retention]` does in
    /// `keel serve`. Prints the store's size every --report-every runs,
    /// to show that it levels off (with --no-prune: how it grows).
    Soak {
        #[arg(long, default_value_t = 100_000)]
        runs: u64,
        /// Runs created and finished between two prunes.
        #[arg(long, default_value_t = 5_000)]
        round: u64,
        /// Runs kept in flight at once.
        #[arg(long, default_value_t = 500)]
        concurrency: u64,
        /// Rounds of finished runs a prune keeps.
        #[arg(long, default_value_t = 1)]
        keep_rounds: u64,
        /// Never prune: the same load, to compare the growth.
        #[arg(long)]
        no_prune: bool,
        #[arg(long, default_value_t = 10_000)]
        report_every: u64,
        #[command(flatten)]
        load: LoadArgs,
        /// The store file to create (default: a fresh file in a temporary
        /// directory, removed afterwards). Must not exist.
        #[arg(long)]
        db: Option<PathBuf>,
    },
}

/// What both benches take: the model, the store, the plugins, the report.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Time of each model call: `50ms`, `1s`, `0`.
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    latency: Duration,
    /// Journal to a private in-memory SQLite database instead of a file.
    #[arg(long)]
    memory: bool,
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
    /// Trace every run to this OTLP/HTTP collector (its base URL), as
    /// `[telemetry]` does; the exporter's CPU is counted with the runs'.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
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
/// `postgres://` URL journals there (the database must exist; its tables
/// are created if needed, and runs already in it are left alone); a file
/// path is taken as the fan-out's `--db`.
pub async fn run(cmd: BenchCommand, store_url: Option<String>) -> anyhow::Result<i32> {
    match cmd {
        BenchCommand::Fanout {
            runs,
            concurrency,
            load,
            db,
            floor,
            no_floor,
            sweep,
        } => {
            if !sweep.is_empty() {
                return run_sweep(&load, runs, &sweep, !no_floor, store_url).await;
            }
            let tmp = tempdir()?;
            let store = store_mode(&load, db, store_url, &tmp.0.join("fanout.db"))?;
            let mut opts = fanout_options(&load, runs, concurrency, store)?;
            if floor {
                if matches!(opts.store, StoreMode::Postgres(_)) {
                    bail!("--floor is measured on SQLite stores only (a file or --memory)");
                }
                let f = fanout::floor_only(&opts).await?;
                let text = format!(
                    "fan-out floor: {} runs, {} pairs live, {} runs a commit, store {}\n\
                     \x20 CPU per run        {:.0} µs (wasm {:.0}, store {:.0})\n\
                     \x20 per run            {:.0} writes, {:.0} journal records, {:.0} plugin calls\n\
                     \x20 wall               {:.3} s",
                    f.runs,
                    f.live_pairs,
                    f.runs_per_commit,
                    if load.memory { "in-memory" } else { "file" },
                    f.cpu_us_per_run,
                    f.wasm_cpu_us_per_run,
                    f.store_cpu_us_per_run,
                    f.writes_per_run,
                    f.journal_records_per_run,
                    f.plugin_calls_per_run,
                    f.wall_s,
                );
                emit(&load, &f, text)?;
                return Ok(0);
            }
            opts.floor = !no_floor;
            let report = fanout::run(&opts).await?;
            emit(&load, &report, report.human())?;
            Ok(done(report.failed, report.runs))
        }
        BenchCommand::Soak {
            runs,
            round,
            concurrency,
            keep_rounds,
            no_prune,
            report_every,
            load,
            db,
        } => {
            let tmp = tempdir()?;
            let store = store_mode(&load, db, store_url, &tmp.0.join("soak.db"))?;
            let opts = crate::bench::soak::SoakOptions {
                fanout: fanout_options(&load, runs, concurrency, store)?,
                round,
                keep_rounds,
                prune: !no_prune,
                report_every,
            };
            let report = crate::bench::soak::run(&opts).await?;
            emit(&load, &report, report.human())?;
            Ok(done(report.failed, runs))
        }
        BenchCommand::Serve {
            runs,
            concurrency,
            load,
            sse_clients,
            approvals,
            submitters,
            no_fanout,
        } => {
            let tmp = tempdir()?;
            let fanout = if no_fanout {
                None
            } else {
                let store = store_mode(&load, None, store_url.clone(), &tmp.0.join("fanout.db"))?;
                let r = fanout::run(&fanout_options(&load, runs, concurrency, store)?).await?;
                eprintln!("{}", r.human());
                Some(r)
            };
            let store = store_mode(&load, None, store_url, &tmp.0.join("serve.db"))?;
            let f = fanout_options(&load, runs, concurrency, store)?;
            let opts = ServeBenchOptions {
                runs,
                max_runs: usize::try_from(concurrency)?,
                latency: load.latency,
                store: f.store,
                echo: load.plugins.join("tool-echo-rust.wasm"),
                agent: f.agent,
                policy: f.policy,
                cache_dir: f.cache_dir,
                work: tmp.0.clone(),
                sse_clients,
                approvals,
                submitters,
            };
            if !opts.echo.exists() {
                bail!("{}: no such component (build the plugins with `make plugins`, or pass --plugins)", opts.echo.display());
            }
            let report = serve::run(&opts).await?;
            let mut text = report.human();
            if let Some(f) = &fanout {
                text.push_str(&format!(
                    "\n  beside the fan-out      {:.0} runs/s through the API against {:.0} runs/s ({:.0}%); CPU per run {:.0} against {:.0} µs",
                    report.throughput_runs_per_s,
                    f.throughput_runs_per_s,
                    100.0 * report.throughput_runs_per_s / f.throughput_runs_per_s.max(1e-9),
                    report.cpu_us_per_run,
                    f.cpu_us_per_run,
                ));
            }
            let both = serde_json::json!({ "serve": report, "fanout": fanout });
            emit(&load, &both, text)?;
            Ok(done(report.failed, report.runs))
        }
    }
}

/// The fan-out at each concurrency of `sweep`, each on a fresh store.
async fn run_sweep(
    load: &LoadArgs,
    runs: u64,
    sweep: &[u64],
    floor: bool,
    store_url: Option<String>,
) -> anyhow::Result<i32> {
    const MAX_POINTS: usize = 16;
    if sweep.len() > MAX_POINTS {
        bail!("--sweep takes at most {MAX_POINTS} concurrencies");
    }
    let tmp = tempdir()?;
    let mut reports = Vec::new();
    for (i, &c) in sweep.iter().enumerate() {
        let store = store_mode(
            load,
            None,
            store_url.clone(),
            &tmp.0.join(format!("fanout-{i}.db")),
        )?;
        let mut opts = fanout_options(load, runs, c, store)?;
        opts.floor = floor;
        let r = fanout::run(&opts).await?;
        eprintln!("{}", r.human());
        reports.push(r);
    }
    let first = reports[0].cpu_us_per_run.max(f64::MIN_POSITIVE);
    let mut text = String::from("in flight   CPU per run   against the first   floor   ratio\n");
    for r in &reports {
        text.push_str(&format!(
            "{:>9}   {:>8.0} µs   {:>17.2}   {:>5}   {:>5}\n",
            r.concurrency,
            r.cpu_us_per_run,
            r.cpu_us_per_run / first,
            r.floor_cpu_us_per_run
                .map_or("-".into(), |f| format!("{f:.0}")),
            r.floor_ratio.map_or("-".into(), |f| format!("{f:.2}")),
        ));
    }
    let growth: Vec<f64> = reports.iter().map(|r| r.cpu_us_per_run / first).collect();
    let json = serde_json::json!({ "sweep": reports, "cpu_per_run_against_first": growth });
    emit(load, &json, text.trim_end().to_string())?;
    let failed = reports.iter().map(|r| r.failed).sum();
    Ok(done(failed, reports.iter().map(|r| r.runs).sum()))
}

fn fanout_options(
    load: &LoadArgs,
    runs: u64,
    concurrency: u64,
    store: StoreMode,
) -> anyhow::Result<FanoutOptions> {
    let agent = load
        .agent
        .clone()
        .unwrap_or_else(|| load.plugins.join("agent-llm-rust.wasm"));
    let policy = load
        .policy
        .clone()
        .unwrap_or_else(|| load.plugins.join("policy-rules-rust.wasm"));
    for p in [&agent, &policy] {
        if !p.exists() {
            bail!(
                "{}: no such component (build the plugins with `make plugins`, or pass --plugins)",
                p.display()
            );
        }
    }
    Ok(FanoutOptions {
        runs,
        concurrency,
        latency: load.latency,
        store,
        agent,
        policy,
        cache_dir: Some(load.cache_dir.clone()),
        floor: false,
        otlp_endpoint: load.otlp_endpoint.clone(),
    })
}

/// Where a bench journals: `--memory`, a PostgreSQL URL, `--db`, or a
/// fresh file at `fresh`.
fn store_mode(
    load: &LoadArgs,
    db: Option<PathBuf>,
    store_url: Option<String>,
    fresh: &std::path::Path,
) -> anyhow::Result<StoreMode> {
    let memory = load.memory;
    if memory && db.is_some() {
        bail!("--memory and --db exclude each other");
    }
    if memory && load.sync.is_some() {
        bail!("--sync applies to a store file; an in-memory store is never synced");
    }
    let sync = match load.sync.as_deref().unwrap_or("full") {
        "full" => Durability::Full,
        "normal" => Durability::Normal,
        other => bail!("--sync: {other:?} is not full or normal"),
    };
    let mut db = db;
    match store_url.map(|s| crate::store::Location::parse(&s)) {
        Some(crate::store::Location::Postgres(u)) => {
            if memory || db.is_some() || load.sync.is_some() {
                bail!("--store postgres://… excludes --memory, --db and --sync");
            }
            return Ok(StoreMode::Postgres(u));
        }
        Some(crate::store::Location::File(p)) => {
            if memory || db.is_some() {
                bail!("--store (or KEEL_STORE) names a file: pass it as --db, or unset it with --memory");
            }
            db = Some(p);
        }
        None => {}
    }
    Ok(if memory {
        StoreMode::Memory
    } else {
        StoreMode::Durable {
            path: db.unwrap_or_else(|| fresh.to_path_buf()),
            sync,
        }
    })
}

/// Prints a report (and writes its JSON where `--json` says).
fn emit(load: &LoadArgs, report: &impl serde::Serialize, human: String) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    match load.json.as_deref() {
        Some(p) if p.as_os_str() == "-" => println!("{text}"),
        Some(p) => {
            std::fs::write(p, format!("{text}\n"))
                .with_context(|| format!("writing {}", p.display()))?;
            println!("{human}");
        }
        None => println!("{human}"),
    }
    Ok(())
}

fn done(failed: u64, runs: u64) -> i32 {
    if failed == 0 {
        exit::OK
    } else {
        eprintln!("error: {failed} of {runs} runs did not complete");
        exit::RUN_FAILED
    }
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
