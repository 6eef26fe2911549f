//! The fan-out load test: many durable runs in flight in one process, each
//! waiting on a slow model, as in reference scenario 001.
//!
//! Every run is real: a wasm agent (`agent-llm`) and a wasm policy
//! (`policy-rules`) instantiated for it alone, a stub model that answers
//! after `latency` (first with a tool call, then with a final answer: two
//! model calls per run), a native `echo` tool, and every transition
//! committed to the store. A fixed number of runs is kept in flight (a
//! closed loop), so the mean run latency is concurrency ÷ throughput by
//! Little's law; the measured latencies give p50, p90 and p99.

use super::floor::{FloorReport, Recorder, Recording};
use crate::driver::{Consumers, ConsumersBuilder, Runtime};
use crate::model::StubProvider;
use crate::store::{Durability, Observed, RunStore, Store, StoreHandle};
use crate::tools::ToolSet;
use crate::types::{Effect, Limits, RunStatus, ToolSpec};
use crate::wasm::{EngineOptions, Plugin, PluginLimits, WasmAgent, WasmHost, WasmPolicy, World};
use crate::FnTool;
use anyhow::{bail, Context};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the runs are journaled.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreMode {
    /// A SQLite file (WAL) with this sync mode; removed afterwards unless kept.
    Durable { path: PathBuf, sync: Durability },
    /// A private in-memory SQLite database: the same code, no disk.
    Memory,
    /// A PostgreSQL database (its URL), shared with whatever else uses it.
    Postgres(String),
}

#[derive(Debug, Clone)]
pub struct FanoutOptions {
    pub runs: u64,
    pub concurrency: u64,
    /// How long each model call takes.
    pub latency: Duration,
    pub store: StoreMode,
    pub agent: PathBuf,
    pub policy: PathBuf,
    /// The compile cache (the components load from it after the first time).
    pub cache_dir: Option<PathBuf>,
    /// Whether the floor ([`super::floor`]) is measured beside the runs.
    pub floor: bool,
    /// Trace the runs to this collector ([`crate::telemetry`]).
    pub otlp_endpoint: Option<String>,
}

/// What one fan-out run measured.
#[derive(Debug, Clone, Serialize)]
pub struct FanoutReport {
    pub runs: u64,
    pub concurrency: u64,
    pub latency_ms: f64,
    pub store: String,
    pub completed: u64,
    pub failed: u64,
    pub wall_s: f64,
    pub throughput_runs_per_s: f64,
    /// concurrency ÷ throughput (Little's law).
    pub mean_latency_ms: f64,
    /// The mean of the measured run latencies (a check on the line above).
    pub measured_mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub peak_rss_mib: f64,
    /// Events (the run's journal) written per run.
    pub journal_records_per_run: f64,
    /// Store transitions (each its own compare-and-set) per run.
    pub transitions_per_run: f64,
    /// Transitions per SQLite transaction, i.e. per sync (group commit).
    pub transitions_per_commit: f64,
    /// CPU time of the process (user + system) over the wall time.
    pub cpu_s: f64,
    /// The process's CPU time per run.
    pub cpu_us_per_run: f64,
    /// Of that, the store writer thread's (SQLite statements, commits;
    /// PostgreSQL's writer is a task on the workers: 0).
    pub writer_cpu_us_per_run: f64,
    /// CPU of the PostgreSQL server's processes on this machine per run
    /// (0 for SQLite, which runs inside Keel's process).
    pub server_cpu_us_per_run: f64,
    /// Share of the wall time the writer thread was busy on groups,
    /// including the syncs it waited for. Near 100%, the one writer is
    /// what limits throughput. On PostgreSQL, summed over its writer
    /// tasks (up to 100% each).
    pub writer_busy_pct: f64,
    /// Of the wall time, the share the writer thread was ready to run but
    /// waited for a CPU (the workers had both).
    pub writer_runnable_pct: f64,
    /// The floor's CPU per run, measured after the runs in this process
    /// (none on PostgreSQL, or when not asked for).
    pub floor_cpu_us_per_run: Option<f64>,
    /// `cpu_us_per_run` ÷ `floor_cpu_us_per_run`: the headline figure.
    pub floor_ratio: Option<f64>,
    pub floor: Option<super::floor::FloorReport>,
}

impl FanoutReport {
    /// The report as lines for a terminal.
    pub fn human(&self) -> String {
        // On PostgreSQL the writer is a task on the runtime (its CPU is
        // Keel's, not a thread's), and the server's CPU is counted apart.
        let (cpu_line, writer_line) = if self.store.starts_with("postgres") {
            (
                format!(
                    "{:.0} µs in Keel + {:.0} µs in the database server = {:.0} µs",
                    self.cpu_us_per_run,
                    self.server_cpu_us_per_run,
                    self.cpu_us_per_run + self.server_cpu_us_per_run
                ),
                format!(
                    "busy {:.0}% of the wall time, summed over its {} writer tasks",
                    self.writer_busy_pct,
                    crate::store::postgres::WRITERS
                ),
            )
        } else {
            (
                format!(
                    "{:.0} µs, of which the store writer thread {:.0} µs",
                    self.cpu_us_per_run, self.writer_cpu_us_per_run
                ),
                format!(
                    "busy {:.0}% of the wall time; ready to run but without a CPU {:.0}%",
                    self.writer_busy_pct, self.writer_runnable_pct
                ),
            )
        };
        format!(
            "fan-out: {runs} runs, {conc} in flight, model latency {lat} ms, 2 model calls per run, store {store}\n\
             \x20 completed {done}, failed {failed}\n\
             \x20 wall               {wall:.3} s   (cpu {cpu:.2} s)\n\
             \x20 throughput         {tp:.0} runs/s\n\
             \x20 mean latency       {mean:.1} ms   (concurrency / throughput; measured mean {mm:.1} ms)\n\
             \x20 p50 / p90 / p99    {p50:.1} / {p90:.1} / {p99:.1} ms   (max {max:.1} ms)\n\
             \x20 peak RSS           {rss:.0} MiB\n\
             \x20 CPU per run        {cpu_line}\n\
             \x20 store writer       {writer_line}\n\
             \x20 journal records    {jr:.1} per run   ({tr:.1} transitions per run, {tc:.1} per commit){floor}",
            runs = self.runs,
            conc = self.concurrency,
            lat = self.latency_ms,
            store = self.store,
            done = self.completed,
            failed = self.failed,
            wall = self.wall_s,
            cpu = self.cpu_s,
            tp = self.throughput_runs_per_s,
            mean = self.mean_latency_ms,
            mm = self.measured_mean_ms,
            p50 = self.p50_ms,
            p90 = self.p90_ms,
            p99 = self.p99_ms,
            max = self.max_ms,
            rss = self.peak_rss_mib,
            jr = self.journal_records_per_run,
            tr = self.transitions_per_run,
            tc = self.transitions_per_commit,
            floor = match &self.floor {
                Some(f) => format!(
                    "\n  floor              {:.0} µs CPU per run (wasm {:.0}, store {:.0}): Keel is {:.2}× its floor",
                    f.cpu_us_per_run,
                    f.wasm_cpu_us_per_run,
                    f.store_cpu_us_per_run,
                    self.floor_ratio.unwrap_or(0.0)
                ),
                None => String::new(),
            },
        )
    }
}

const POLICY_RULES: &str = r#"{"rules":[{"tool":"echo","action":"allow"}]}"#;

fn echo_tool() -> Arc<dyn crate::ToolProvider> {
    let spec = ToolSpec {
        name: "echo".into(),
        description: "Answers with its arguments.".into(),
        parameters: r#"{"type":"object"}"#.into(),
        effect: Effect::ReadOnly,
    };
    Arc::new(FnTool::new(spec, Ok))
}

/// Everything shared by the runs of one fan-out.
pub(crate) struct Bench {
    host: Arc<WasmHost>,
    agent: Arc<Plugin>,
    policy: Arc<Plugin>,
    gate_provider: Arc<StubProvider>,
    tools: ToolSet,
    limits: PluginLimits,
}

impl Bench {
    async fn consumers(&self) -> anyhow::Result<Consumers> {
        self.consumers_on(self.gate_provider.clone()).await
    }

    /// The runs' model, answering at once.
    pub(crate) fn instant_model(&self) -> Arc<StubProvider> {
        Arc::new(StubProvider {
            latency: Duration::ZERO,
            ..(*self.gate_provider).clone()
        })
    }

    /// A run's consumers, instantiated, the agent's model `model`.
    pub(crate) async fn consumers_on(&self, model: Arc<StubProvider>) -> anyhow::Result<Consumers> {
        let wiring = ConsumersBuilder::new(model);
        let agent = WasmAgent::new(
            &self.host,
            &self.agent,
            "{}",
            self.tools.specs(),
            &self.limits,
            &wiring,
        )
        .await
        .context("instantiating the agent")?;
        let policy = WasmPolicy::new(
            &self.host,
            &self.policy,
            POLICY_RULES,
            &self.limits,
            &wiring,
        )
        .await
        .context("instantiating the policy")?;
        Ok(wiring.build(Box::new(agent), Box::new(policy), self.tools.clone()))
    }
}

/// Refuses, with the fix, a concurrency whose instances would need more
/// memory mappings than Linux allows the process: each pooled instance maps
/// its memory and its stack with guard regions, about 4.3 mappings measured
/// at 5,000 runs in flight.
pub(crate) fn check_map_count(instances: u32) -> anyhow::Result<()> {
    let Some(limit) = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    else {
        return Ok(());
    };
    let needed = instances as u64 * 9 / 2 + 2_000;
    if needed > limit {
        bail!(
            "--concurrency needs about {needed} memory mappings, more than vm.max_map_count ({limit}); \
             lower --concurrency or raise the limit (sysctl -w vm.max_map_count={})",
            needed.next_power_of_two()
        );
    }
    Ok(())
}

/// Opens the fresh store a bench journals to, and names it for the report;
/// `inline` as [`crate::store::OpenOptions::inline_commits`].
pub(crate) async fn open_store(
    mode: &StoreMode,
    inline: bool,
) -> anyhow::Result<(Arc<dyn RunStore>, String)> {
    Ok(match mode {
        StoreMode::Durable { path, sync } => {
            if path.exists() {
                bail!(
                    "{}: exists; the fan-out writes a fresh store (remove it or pass another --db)",
                    path.display()
                );
            }
            let store =
                Store::open(path, *sync).with_context(|| format!("opening {}", path.display()))?;
            (
                Arc::new(StoreHandle::spawn_with(store, inline)),
                format!("sqlite {sync:?} ({})", path.display()),
            )
        }
        StoreMode::Memory => (
            Arc::new(StoreHandle::spawn_with(Store::open_in_memory()?, inline)),
            "sqlite in-memory".to_string(),
        ),
        StoreMode::Postgres(url) => {
            let store = crate::store::postgres::PgStore::open(url, true)
                .await
                .context("opening the PostgreSQL store")?;
            let label = format!("postgres ({})", store.location());
            (Arc::new(store), label)
        }
    })
}

/// What a fan-out and its floor share: the plugins, the store, one run
/// done and recorded.
pub(super) struct Prepared {
    pub(super) bench: Arc<Bench>,
    pub(super) store: Arc<dyn RunStore>,
    pub(super) label: String,
    pub(super) runtime: Runtime,
    pub(super) limits: Limits,
    pub(super) concurrency: u64,
    pub(super) recording: Arc<Recording>,
}

pub(super) async fn prepare(opts: &FanoutOptions, floor: bool) -> anyhow::Result<Prepared> {
    if opts.runs == 0 || opts.concurrency == 0 {
        bail!("--runs and --concurrency must be at least 1");
    }
    let concurrency = opts.concurrency.min(opts.runs);
    if let (true, StoreMode::Durable { path, .. }) = (floor, &opts.store) {
        let floor = super::floor::floor_path(path);
        if floor.exists() {
            bail!(
                "{}: exists; the floor writes a fresh store there (remove it)",
                floor.display()
            );
        }
    }
    // Each run in flight holds an agent and a policy instance.
    let max_instances = u32::try_from(concurrency * 2 + 16)
        .context("--concurrency is too large for the instance pool")?;
    check_map_count(max_instances)?;
    let host = WasmHost::new(EngineOptions {
        max_instances,
        max_memory_bytes: 64 << 20,
        // Both components' initial memories are a few KiB: copying them in
        // costs nothing measurable (BENCHMARKS.md), and saves a memory
        // mapping per instance, of which Linux allows 65530 by default.
        cow_images: false,
        cache_dir: opts.cache_dir.clone(),
        ..EngineOptions::default()
    })
    .context("starting the wasm engine")?;
    let agent = host
        .load(&opts.agent, World::Agent, None)
        .context("loading the agent (agent-llm)")?;
    let policy = host
        .load(&opts.policy, World::Policy, None)
        .context("loading the policy (policy-rules)")?;
    let mut tools = ToolSet::new();
    tools
        .add(echo_tool())
        .map_err(|e| anyhow::anyhow!("adding the echo tool: {e}"))?;
    let bench = Arc::new(Bench {
        host,
        agent,
        policy,
        gate_provider: Arc::new(StubProvider {
            latency: opts.latency,
            tool_call: Some(("echo".into(), r#"{"q":"fan-out"}"#.into())),
            calls_before_answer: 1,
            answer: "done".into(),
        }),
        tools,
        limits: PluginLimits {
            memory_bytes: 64 << 20,
            ..PluginLimits::default()
        },
    });

    let (store, label) = open_store(&opts.store, true).await?;
    let runtime = Runtime::on(store.clone());
    let runtime = match &opts.otlp_endpoint {
        Some(url) => runtime.with_telemetry(Arc::new(
            crate::telemetry::Telemetry::start(url, "keel-bench").context("--otlp-endpoint")?,
        )),
        None => runtime,
    };
    let limits = Limits {
        max_steps: 4,
        ..Limits::default()
    };

    // Warm up: one run, so the first real run does not pay for lazy set-up.
    // It is recorded (its writes, its plugin calls) for the floor.
    let recording = Arc::new(Recording::default());
    let recorded = Runtime::on(Arc::new(Observed::new(
        store.clone(),
        Recorder(recording.clone()),
    )));
    let mut c = bench.consumers().await?;
    c.agent = recording.agent(c.agent);
    c.policy = recording.policy(c.policy);
    let out = recorded.start("warm-up", limits.clone(), "{}", c).await?;
    if out.run.status != RunStatus::Completed {
        bail!(
            "the warm-up run ended {} ({})",
            out.run.status,
            out.run.reason.map(|r| r.as_str()).unwrap_or("-")
        );
    }
    Ok(Prepared {
        bench,
        store,
        label,
        runtime,
        limits,
        concurrency,
        recording,
    })
}

/// Only the floor of a fan-out with `opts` (`keel bench fanout --floor`):
/// one run done and recorded, then the floor of `opts.runs` like it, with
/// as many runs to a commit as the fan-out can group.
/// Drives `total` runs, `concurrency` at once, each with its own plugins:
/// returns each run's latency (ms), how many did not complete, and the
/// first of those's error.
pub(super) async fn drive(
    bench: &Arc<Bench>,
    runtime: &Runtime,
    limits: &Limits,
    concurrency: u64,
    total: u64,
) -> anyhow::Result<(Vec<f64>, u64, Option<String>)> {
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (bench, runtime, next, failed) =
            (bench.clone(), runtime.clone(), next.clone(), failed.clone());
        let limits = limits.clone();
        workers.spawn(async move {
            let mut latencies = Vec::new();
            let mut first_error = None;
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let t0 = Instant::now();
                let outcome = match bench.consumers().await {
                    Ok(c) => runtime
                        .start("fan-out", limits.clone(), "{}", c)
                        .await
                        .map_err(anyhow::Error::from),
                    Err(e) => Err(e),
                };
                latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
                match outcome {
                    Ok(o) if o.run.status == RunStatus::Completed => {}
                    Ok(o) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        first_error.get_or_insert(format!(
                            "run {} ended {}: {}",
                            o.run.id,
                            o.run.status,
                            o.run.reason.map(|r| r.as_str()).unwrap_or("-")
                        ));
                    }
                    Err(e) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        first_error.get_or_insert(format!("{e:#}"));
                    }
                }
            }
            (latencies, first_error)
        });
    }
    let mut latencies = Vec::with_capacity(total as usize);
    let mut first_error = None;
    while let Some(joined) = workers.join_next().await {
        let (l, e) = joined.context("a fan-out worker panicked")?;
        latencies.extend(l);
        if first_error.is_none() {
            first_error = e;
        }
    }
    Ok((latencies, failed.load(Ordering::Relaxed), first_error))
}

pub async fn floor_only(opts: &FanoutOptions) -> anyhow::Result<FloorReport> {
    let p = prepare(opts, true).await?;
    let group = p.concurrency.min(crate::store::sqlite::MAX_GROUP as u64);
    super::floor::measure(
        &p.bench,
        &p.recording,
        &opts.store,
        opts.runs,
        p.concurrency,
        group,
    )
    .await
}

/// Runs the fan-out and measures it, then its floor when asked. Call from
/// a multi-threaded tokio runtime: the runs are spread over its workers.
pub async fn run(opts: &FanoutOptions) -> anyhow::Result<FanoutReport> {
    let Prepared {
        bench,
        store,
        label,
        runtime,
        limits,
        concurrency,
        recording,
    } = prepare(opts, opts.floor).await?;
    let before = store.writer_stats();
    let events_before = store.count_events().await?;
    let server0 = super::processes_cpu_seconds("postgres");

    let cpu0 = super::cpu_seconds();
    let writer0 = super::thread_times(crate::store::WRITER_THREAD);
    let started = Instant::now();
    let (mut latencies, failed, first_error) =
        drive(&bench, &runtime, &limits, concurrency, opts.runs).await?;
    // The spans still queued are exported inside the measured time.
    if let Some(t) = runtime.telemetry().cloned() {
        t.finish().await;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu_s = super::cpu_seconds() - cpu0;
    let writer = super::thread_times(crate::store::WRITER_THREAD) - writer0;
    let after = store.writer_stats();
    let server_cpu_s = match opts.store {
        StoreMode::Postgres(_) => super::processes_cpu_seconds("postgres") - server0,
        _ => 0.0,
    };
    if let Some(e) = &first_error {
        tracing::warn!("{failed} runs did not complete; the first: {e}");
    }

    let runs = latencies.len() as u64;
    let events = store.count_events().await? - events_before;
    let total_runs = runs as f64;
    latencies.sort_by(f64::total_cmp);
    let transitions = (after.transitions - before.transitions) as f64;
    let transactions = (after.transactions - before.transactions).max(1) as f64;
    let throughput = runs as f64 / wall;
    let cpu_us_per_run = cpu_s * 1e6 / runs.max(1) as f64;
    // The runs' peak, before the floor's instances add their own.
    let peak_rss_mib = super::peak_rss_bytes().unwrap_or(0) as f64 / (1 << 20) as f64;
    let floor = match (&opts.store, opts.floor) {
        (StoreMode::Postgres(_), _) | (_, false) => None,
        _ => {
            // As many runs to a commit as Keel's own groups had writes.
            let group = (transitions / transactions).round().max(1.0) as u64;
            let f =
                super::floor::measure(&bench, &recording, &opts.store, runs, concurrency, group)
                    .await
                    .context("measuring the floor")?;
            Some(f)
        }
    };
    Ok(FanoutReport {
        runs,
        concurrency,
        latency_ms: opts.latency.as_secs_f64() * 1000.0,
        store: label,
        completed: runs - failed,
        failed,
        wall_s: wall,
        throughput_runs_per_s: throughput,
        mean_latency_ms: concurrency as f64 / throughput * 1000.0,
        measured_mean_ms: latencies.iter().sum::<f64>() / runs.max(1) as f64,
        p50_ms: super::quantile(&latencies, 0.50),
        p90_ms: super::quantile(&latencies, 0.90),
        p99_ms: super::quantile(&latencies, 0.99),
        max_ms: latencies.last().copied().unwrap_or(0.0),
        peak_rss_mib,
        journal_records_per_run: events as f64 / total_runs,
        transitions_per_run: transitions / runs.max(1) as f64,
        transitions_per_commit: transitions / transactions,
        cpu_s,
        cpu_us_per_run,
        writer_cpu_us_per_run: writer.cpu_s * 1e6 / runs.max(1) as f64,
        server_cpu_us_per_run: server_cpu_s * 1e6 / runs.max(1) as f64,
        writer_busy_pct: (after.busy - before.busy).as_secs_f64() * 100.0 / wall,
        writer_runnable_pct: writer.runnable_s * 100.0 / wall,
        floor_cpu_us_per_run: floor.as_ref().map(|f| f.cpu_us_per_run),
        floor_ratio: floor
            .as_ref()
            .map(|f| cpu_us_per_run / f.cpu_us_per_run.max(f64::MIN_POSITIVE)),
        floor,
    })
}
