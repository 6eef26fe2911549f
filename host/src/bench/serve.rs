//! `keel bench serve`: one `keel serve` (the real claimer, API and event
//! streams, on a loopback port) under load from HTTP clients in the same
//! process. Runs are submitted through `POST /api/runs` and driven by the
//! server with the same plugins, stub model and limits as the fan-out;
//! some runs are followed over server-sent event streams while they run,
//! and others pause for an approval that a client answers through the API.
//!
//! Event latency is measured from the moment a transition's commit
//! returned in the server (an [`Observed`] store notes it per event) to
//! the moment the event's bytes reached a client; only events committed
//! after the client's stream had opened count, so the store's replay of
//! older events is not mistaken for a live delivery.

use super::fanout::{open_store, StoreMode};
use crate::serve::{HttpOptions, RunConfig, ServeOptions, Web, DEFAULT_CONFIG, DEFAULT_MAX_BODY};
use crate::store::{CommitObserver, Committed, ModelCallRecord, Observed, RunReader, RunStore};
use crate::types::{ApprovalStatus, Limits};
use anyhow::{anyhow, bail, Context};
use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{header, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to load the server with.
#[derive(Debug, Clone)]
pub struct ServeBenchOptions {
    /// Runs submitted through the API and driven to their end.
    pub runs: u64,
    /// The server's `max_runs`: runs driven at once.
    pub max_runs: usize,
    /// How long each model call takes.
    pub latency: Duration,
    pub store: StoreMode,
    pub agent: PathBuf,
    pub policy: PathBuf,
    /// The echo tool component (`tool-echo`).
    pub echo: PathBuf,
    pub cache_dir: Option<PathBuf>,
    /// A folder for the configs (it must exist).
    pub work: PathBuf,
    /// Event streams held open, each following one run of its own.
    pub sse_clients: usize,
    /// Runs that pause for an approval, each answered through the API.
    pub approvals: usize,
    /// Connections submitting runs at once.
    pub submitters: usize,
}

/// Milliseconds at some quantiles.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Spread {
    pub count: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Spread {
    fn of(mut ms: Vec<f64>) -> Spread {
        ms.sort_by(f64::total_cmp);
        Spread {
            count: ms.len(),
            p50_ms: super::quantile(&ms, 0.50),
            p90_ms: super::quantile(&ms, 0.90),
            p99_ms: super::quantile(&ms, 0.99),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// What one serve bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct ServeBenchReport {
    pub runs: u64,
    pub max_runs: usize,
    pub latency_ms: f64,
    pub store: String,
    pub sse_clients: usize,
    pub completed: u64,
    pub failed: u64,
    /// From the first submission to the commit of the last run's end.
    pub wall_s: f64,
    pub throughput_runs_per_s: f64,
    /// The process's CPU (server and clients) per run, over that time.
    pub cpu_us_per_run: f64,
    /// Of that, the store writer thread's.
    pub writer_cpu_us_per_run: f64,
    /// The HTTP clients' thread's.
    pub clients_cpu_us_per_run: f64,
    pub peak_rss_mib: f64,
    /// `POST /api/runs`, as the submitting clients saw it.
    pub submit: Spread,
    /// Commit to a followed event's arrival, while the runs were driven.
    pub events_under_load: Spread,
    /// `POST /api/approvals/{id}/approve`, one request at a time.
    pub approve: Spread,
    /// Commit to arrival for the approved runs' events.
    pub events_after_approval: Spread,
    /// Times an event-stream client fell behind and reread the store.
    pub stream_rereads: u64,
    /// Store transitions per run while driving (each its own compare-and-set).
    pub transitions_per_run: f64,
    /// Transitions per transaction, i.e. per sync (group commit).
    pub transitions_per_commit: f64,
    /// Of the transactions, the share a caller committed on its own thread
    /// because the store was idle (SQLite).
    pub inline_commit_pct: f64,
}

impl ServeBenchReport {
    /// The report as lines for a terminal.
    pub fn human(&self) -> String {
        let s = |x: &Spread| {
            format!(
                "{:.2} / {:.2} / {:.2} ms  (max {:.2}; {} samples)",
                x.p50_ms, x.p90_ms, x.p99_ms, x.max_ms, x.count
            )
        };
        format!(
            "serve: {runs} runs through the API, {max} at once, model latency {lat} ms, store {store}, {sse} event streams open\n\
             \x20 completed {done}, failed {failed}\n\
             \x20 wall                     {wall:.3} s\n\
             \x20 throughput               {tp:.0} runs/s\n\
             \x20 CPU per run              {cpu:.0} µs (server and clients): writer {wcpu:.0}, clients {ccpu:.0}, the rest (runs, API, streams) {rcpu:.0}\n\
             \x20 peak RSS                 {rss:.0} MiB\n\
             \x20 submit p50 / p90 / p99   {submit}\n\
             \x20 commit → SSE, driving    {ev}\n\
             \x20 approve p50 / p90 / p99  {approve}\n\
             \x20 commit → SSE, approvals  {eva}\n\
             \x20 stream rereads           {rr}\n\
             \x20 store transitions        {tr:.1} per run, {tc:.1} per commit ({inl:.0}% committed inline)",
            runs = self.runs,
            max = self.max_runs,
            lat = self.latency_ms,
            store = self.store,
            sse = self.sse_clients,
            done = self.completed,
            failed = self.failed,
            wall = self.wall_s,
            tp = self.throughput_runs_per_s,
            cpu = self.cpu_us_per_run,
            wcpu = self.writer_cpu_us_per_run,
            ccpu = self.clients_cpu_us_per_run,
            rcpu = self.cpu_us_per_run
                - self.writer_cpu_us_per_run
                - self.clients_cpu_us_per_run,
            rss = self.peak_rss_mib,
            submit = s(&self.submit),
            ev = s(&self.events_under_load),
            approve = s(&self.approve),
            eva = s(&self.events_after_approval),
            rr = self.stream_rereads,
            tr = self.transitions_per_run,
            tc = self.transitions_per_commit,
            inl = self.inline_commit_pct,
        )
    }
}

/// Notes when each event's commit returned, and counts the runs that ended.
#[derive(Default)]
struct CommitClock {
    at: Mutex<HashMap<i64, Instant>>,
    ended: AtomicU64,
    failed: AtomicU64,
    last_end: Mutex<Option<Instant>>,
}

impl CommitObserver for CommitClock {
    fn committed(&self, c: &Committed, _took: Duration, _calls: &[ModelCallRecord]) {
        let now = Instant::now();
        let mut at = self.at.lock().unwrap_or_else(|p| p.into_inner());
        for e in &c.events {
            at.insert(e.seq, now);
            if crate::serve::ends_run(&e.kind) {
                if e.kind != "run.completed" {
                    self.failed.fetch_add(1, Relaxed);
                }
                *self.last_end.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
                self.ended.fetch_add(1, Relaxed);
            }
        }
    }
}

impl CommitClock {
    fn committed_at(&self, seq: i64) -> Option<Instant> {
        self.at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&seq)
            .copied()
    }

    /// Waits until `n` runs have ended in all, or `limit` passes.
    async fn until_ended(&self, n: u64, limit: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        while self.ended.load(Relaxed) < n {
            if t0.elapsed() > limit {
                bail!(
                    "only {} of {n} runs ended within {limit:?}",
                    self.ended.load(Relaxed)
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }
}

/// The most runs the bench drives at once. Each may hold three instances,
/// and each instance's pool slot reserves about 8.7 GB of address space
/// (two memories of 4 GiB and their guards), in one contiguous region of
/// a 47-bit address space that the program's own mappings split: about
/// 10,000 instances fit (the fan-out's 5,000 runs in flight are 10,016).
pub const MAX_RUNS_AT_ONCE: usize = 3_300;

/// The pool's size: each run in flight holds an agent and a policy, and a
/// tool instance while it calls.
fn instances(max_runs: usize) -> u32 {
    u32::try_from(max_runs * 3 + 64).unwrap_or(u32::MAX)
}

/// A config of the fan-out's plugins and model, with the echo tool as a
/// component; `approve` makes the policy ask an operator about every call.
fn write_config(opts: &ServeBenchOptions, name: &str, approve: bool) -> anyhow::Result<PathBuf> {
    let action = if approve {
        r#"action = "require-approval", reason = "the bench approves every call""#
    } else {
        r#"action = "allow""#
    };
    let cache = opts
        .cache_dir
        .as_ref()
        .map(|d| {
            format!(
                "cache_dir = {:?}\n",
                std::path::absolute(d).unwrap_or(d.clone())
            )
        })
        .unwrap_or_default();
    // Each config has its own engine and pool: the approvals' runs are
    // all live at once (paused), the others at most `max_runs`.
    let instances = instances(if approve {
        opts.approvals
    } else {
        opts.max_runs
    });
    let text = format!(
        r#"[engine]
{cache}max_instances = {instances}
max_memory_bytes = {mem}
cow_images = false
[model]
provider = "stub"
latency_ms = {lat}
answer = "done"
tool_call = {{ tool = "echo", arguments = {{ q = "fan-out" }}, times = 1 }}
[limits]
max_steps = 4
[agent]
component = {agent:?}
limits = {{ memory_bytes = {mem} }}
[policy]
component = {policy:?}
limits = {{ memory_bytes = {mem} }}
config = {{ rules = [ {{ tool = "echo", {action} }} ] }}
[[tools]]
component = {echo:?}
limits = {{ memory_bytes = {mem} }}
"#,
        mem = 64 << 20,
        lat = opts.latency.as_millis(),
        agent = abs(&opts.agent),
        policy = abs(&opts.policy),
        echo = abs(&opts.echo),
    );
    let path = opts.work.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn abs(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// One kept-alive HTTP/1.1 connection to the server.
struct Client {
    tx: SendRequest<Full<Bytes>>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Client { tx })
    }

    async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        self.tx.ready().await?;
        Ok(self.tx.send_request(req).await?)
    }

    /// `method path` with a JSON body; the status and the whole answer.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: String,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let resp = self.send(req).await?;
        let status = resp.status();
        Ok((status, resp.into_body().collect().await?.to_bytes()))
    }

    async fn post_json(&mut self, path: &str, body: String) -> anyhow::Result<serde_json::Value> {
        let (status, bytes) = self.call("POST", path, body).await?;
        if !status.is_success() {
            bail!("POST {path}: {status}: {}", String::from_utf8_lossy(&bytes));
        }
        Ok(serde_json::from_slice(&bytes)?)
    }
}

/// What one event-stream client saw: when its stream opened, and when
/// each event (by number) arrived.
struct Followed {
    opened: Instant,
    arrivals: Vec<(i64, Instant)>,
}

/// Follows one run's events until its stream ends.
async fn follow(addr: SocketAddr, run_id: String) -> anyhow::Result<Followed> {
    let mut c = Client::connect(addr).await?;
    let req = Request::get(format!("/api/runs/{run_id}/events"))
        .header(header::HOST, "127.0.0.1")
        .header(header::ACCEPT, "text/event-stream")
        .body(Full::new(Bytes::new()))?;
    let resp = c.send(req).await?;
    let opened = Instant::now();
    if resp.status() != StatusCode::OK {
        bail!("following {run_id}: {}", resp.status());
    }
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut arrivals = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let now = Instant::now();
        buf.extend_from_slice(&data);
        // Complete events end with an empty line.
        while let Some(end) = find(&buf, b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            if let Some(seq) = text
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .and_then(|v| v.trim().parse().ok())
            {
                arrivals.push((seq, now));
            }
        }
    }
    Ok(Followed { opened, arrivals })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Commit-to-arrival times of the events that were committed after their
/// stream opened.
fn event_latencies(clock: &CommitClock, followed: &[Followed]) -> Spread {
    let mut ms = Vec::new();
    for f in followed {
        for (seq, arrived) in &f.arrivals {
            if let Some(c) = clock.committed_at(*seq).filter(|c| *c >= f.opened) {
                ms.push(arrived.saturating_duration_since(c).as_secs_f64() * 1000.0);
            }
        }
    }
    Spread::of(ms)
}

/// Submits `n` runs with `config` over `conns` connections; their ids in
/// order of submission and each request's time. Ids go to `follow` as
/// they come.
async fn submit(
    addr: SocketAddr,
    n: u64,
    conns: usize,
    config: &str,
    follow: tokio::sync::mpsc::UnboundedSender<String>,
) -> anyhow::Result<(Vec<String>, Vec<f64>)> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..conns.max(1) {
        let (next, follow, config) = (next.clone(), follow.clone(), config.to_string());
        tasks.spawn(async move {
            let mut c = Client::connect(addr).await?;
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= n {
                    break;
                }
                let body =
                    serde_json::json!({ "goal": format!("bench run {i}"), "config": config });
                let t0 = Instant::now();
                let run = c.post_json("/api/runs", body.to_string()).await?;
                let took = t0.elapsed().as_secs_f64() * 1000.0;
                let id = run["id"]
                    .as_str()
                    .ok_or_else(|| anyhow!("POST /api/runs answered no id: {run}"))?
                    .to_string();
                let _ = follow.send(id.clone());
                out.push((i, id, took));
            }
            Ok::<_, anyhow::Error>(out)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.context("a submitting client panicked")??);
    }
    all.sort_by_key(|(i, _, _)| *i);
    Ok((
        all.iter().map(|(_, id, _)| id.clone()).collect(),
        all.iter().map(|(_, _, t)| *t).collect(),
    ))
}

/// Opens a stream for each of the first `max` ids that arrive.
fn followers(
    addr: SocketAddr,
    max: usize,
    mut ids: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> tokio::task::JoinHandle<anyhow::Result<Vec<Followed>>> {
    tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        while tasks.len() < max {
            let Some(id) = ids.recv().await else { break };
            tasks.spawn(follow(addr, id));
        }
        drop(ids);
        let mut out = Vec::new();
        while let Some(r) = tasks.join_next().await {
            out.push(r.context("an event-stream client panicked")??);
        }
        Ok(out)
    })
}

/// Runs the bench: starts a server on `opts.store`, loads it, stops it.
pub async fn run(opts: &ServeBenchOptions) -> anyhow::Result<ServeBenchReport> {
    if opts.runs == 0 || opts.max_runs == 0 {
        bail!("--runs and --concurrency must be at least 1");
    }
    if opts.max_runs > MAX_RUNS_AT_ONCE || opts.approvals > MAX_RUNS_AT_ONCE / 3 {
        bail!(
            "--concurrency {} --approvals {}: at most {MAX_RUNS_AT_ONCE} runs at once and {} approvals \
             fit in a process's address space (each run may hold an agent, a policy and a tool \
             instance, and each instance's pool slot reserves about 8.7 GB of address space)",
            opts.max_runs,
            opts.approvals,
            MAX_RUNS_AT_ONCE / 3
        );
    }
    super::fanout::check_map_count(instances(opts.max_runs))?;
    crate::serve::raise_fd_limit();
    let plain = write_config(opts, "bench.toml", false)?;
    let asking = write_config(opts, "approve.toml", true)?;
    let limits = Limits {
        max_steps: 4,
        ..Limits::default()
    };
    let configs = [(DEFAULT_CONFIG, &plain), ("approve", &asking)]
        .into_iter()
        .map(|(name, path)| {
            (
                name.to_string(),
                RunConfig {
                    path: path.clone(),
                    limits: limits.clone(),
                },
            )
        })
        .collect();
    // As `keel serve` opens it: every commit on the writer thread.
    let (inner, label) = open_store(&opts.store, false).await?;
    let clock = Arc::new(Observed::new(inner, CommitClock::default()));
    let store: Arc<dyn RunStore> = clock.clone();
    // As `keel serve` does: reads for the API on a connection of their own
    // (an in-memory database has only the one).
    let reader: Arc<dyn RunReader> = match &opts.store {
        StoreMode::Durable { path, .. } => {
            crate::store::open_reader(&crate::store::Location::File(path.clone())).await?
        }
        StoreMode::Postgres(url) => {
            crate::store::open_reader(&crate::store::Location::Postgres(url.clone())).await?
        }
        StoreMode::Memory => store.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let web = Web {
        listener,
        http: HttpOptions::default(),
        tokens: None,
        configs,
        max_body: DEFAULT_MAX_BODY,
    };
    let serve_opts = ServeOptions {
        max_runs: opts.max_runs,
        ..ServeOptions::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::serve::run(
        store.clone(),
        reader,
        serve_opts,
        Some(web),
        async {
            let _ = stop_rx.await;
        },
        std::future::pending(),
    ));
    // The clients stand for other programs: they run on a thread and a
    // scheduler of their own, not among the server's tasks.
    let outcome = {
        let (opts, clock, label) = (opts.clone(), clock.clone(), label.clone());
        on_own_thread(async move { load(&opts, addr, &clock, &label).await }).await
    };
    let _ = stop_tx.send(());
    let _ = server.await;
    outcome
}

/// The clients' thread's name.
const CLIENT_THREAD: &str = "keel-bench-load";

/// Runs `f` to its end on a new thread with a single-threaded scheduler.
async fn on_own_thread<T: Send + 'static>(
    f: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the clients' scheduler")?;
    let (tell, told) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(CLIENT_THREAD.into())
        .spawn(move || {
            let _ = tell.send(rt.block_on(f));
            rt.shutdown_background();
        })
        .context("starting the clients' thread")?;
    told.await.context("the clients' thread panicked")?
}

async fn load(
    opts: &ServeBenchOptions,
    addr: SocketAddr,
    clock: &Observed<CommitClock>,
    label: &str,
) -> anyhow::Result<ServeBenchReport> {
    let clock_of = clock.observer();
    let limit = Duration::from_secs(600);
    // Warm up: a run of each config, so that loading the plugins is not
    // measured. The server logs why if it cannot drive them.
    let warm_limit = Duration::from_secs(120);
    let mut c = Client::connect(addr).await?;
    for config in [DEFAULT_CONFIG, "approve"] {
        c.post_json(
            "/api/runs",
            serde_json::json!({ "goal": "warm-up", "config": config }).to_string(),
        )
        .await?;
    }
    let warm = pending_approvals(clock, 1, warm_limit)
        .await
        .context("the warm-up runs (the server's log says why)")?;
    c.post_json(&format!("/api/approvals/{}/approve", warm[0]), "{}".into())
        .await?;
    clock_of
        .until_ended(2, warm_limit)
        .await
        .context("the warm-up runs (the server's log says why)")?;
    let ended0 = clock_of.ended.load(Relaxed);
    let failed0 = clock_of.failed.load(Relaxed);
    super::reset_peak_rss();

    // Driving: every run through the API, some followed live.
    let w0 = clock.writer_stats();
    let cpu0 = super::cpu_seconds();
    let threads0 = thread_cpu();
    let rereads0 = stream_rereads(addr).await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let streams = followers(addr, opts.sse_clients, rx);
    let t0 = Instant::now();
    let (_, submit_ms) = submit(addr, opts.runs, opts.submitters, DEFAULT_CONFIG, tx).await?;
    clock_of.until_ended(ended0 + opts.runs, limit).await?;
    let last_end = clock_of
        .last_end
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or_else(Instant::now);
    let wall = last_end.saturating_duration_since(t0).as_secs_f64();
    let cpu_s = super::cpu_seconds() - cpu0;
    let threads = thread_cpu().map2(threads0, |a, b| a - b);
    let w1 = clock.writer_stats();
    let peak_rss = super::peak_rss_bytes().unwrap_or(0);
    let driven = streams
        .await
        .context("the event-stream clients panicked")??;
    let failed = clock_of.failed.load(Relaxed) - failed0;

    // Approvals: runs that pause, each answered by one client in turn
    // while the streams of all of them are open.
    let ended1 = clock_of.ended.load(Relaxed);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let streams = followers(addr, opts.approvals, rx);
    let n = opts.approvals as u64;
    submit(addr, n, opts.submitters, "approve", tx).await?;
    let ids = pending_approvals(clock, opts.approvals, limit).await?;
    // A connection idle past the server's header timeout is closed: a
    // fresh one for the approvals.
    let mut c = Client::connect(addr).await?;
    let mut approve_ms = Vec::with_capacity(ids.len());
    for id in &ids {
        let t = Instant::now();
        let (status, body) = c
            .call(
                "POST",
                &format!("/api/approvals/{id}/approve"),
                r#"{"note":"bench"}"#.into(),
            )
            .await?;
        approve_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if status != StatusCode::OK {
            bail!(
                "approving {id}: {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
    }
    clock_of.until_ended(ended1 + n, limit).await?;
    let approved = streams
        .await
        .context("the event-stream clients panicked")??;
    let rereads = stream_rereads(addr).await? - rereads0;

    let runs = opts.runs;
    Ok(ServeBenchReport {
        runs,
        max_runs: opts.max_runs,
        latency_ms: opts.latency.as_secs_f64() * 1000.0,
        store: label.to_string(),
        sse_clients: opts.sse_clients.min(runs as usize),
        completed: runs - failed.min(runs),
        failed,
        wall_s: wall,
        throughput_runs_per_s: runs as f64 / wall.max(1e-9),
        cpu_us_per_run: cpu_s * 1e6 / runs as f64,
        writer_cpu_us_per_run: threads.writer * 1e6 / runs as f64,
        clients_cpu_us_per_run: threads.clients * 1e6 / runs as f64,
        peak_rss_mib: peak_rss as f64 / (1 << 20) as f64,
        submit: Spread::of(submit_ms),
        events_under_load: event_latencies(clock_of, &driven),
        approve: Spread::of(approve_ms),
        events_after_approval: event_latencies(clock_of, &approved),
        stream_rereads: rereads,
        transitions_per_run: (w1.transitions - w0.transitions) as f64 / runs as f64,
        transitions_per_commit: (w1.transitions - w0.transitions) as f64
            / (w1.transactions - w0.transactions).max(1) as f64,
        inline_commit_pct: 100.0 * (w1.inline - w0.inline) as f64
            / (w1.transactions - w0.transactions).max(1) as f64,
    })
}

/// CPU seconds so far of the threads the report splits out.
#[derive(Clone, Copy)]
struct ThreadCpu {
    writer: f64,
    clients: f64,
}

impl ThreadCpu {
    fn map2(self, o: ThreadCpu, f: impl Fn(f64, f64) -> f64) -> ThreadCpu {
        ThreadCpu {
            writer: f(self.writer, o.writer),
            clients: f(self.clients, o.clients),
        }
    }
}

fn thread_cpu() -> ThreadCpu {
    ThreadCpu {
        writer: super::thread_times(crate::store::WRITER_THREAD).cpu_s,
        clients: super::thread_times(CLIENT_THREAD).cpu_s,
    }
}

/// The ids of `n` pending approvals, once there are that many.
async fn pending_approvals(
    store: &Observed<CommitClock>,
    n: usize,
    limit: Duration,
) -> anyhow::Result<Vec<String>> {
    let t0 = Instant::now();
    loop {
        let pending = store
            .list_approvals(Some(ApprovalStatus::Pending), u32::MAX)
            .await?;
        if pending.len() >= n {
            return Ok(pending.into_iter().map(|a| a.id).collect());
        }
        if t0.elapsed() > limit {
            bail!(
                "only {} of {n} approvals appeared within {limit:?}",
                pending.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server's `keel_event_stream_rereads_total`, read from `/metrics`.
async fn stream_rereads(addr: SocketAddr) -> anyhow::Result<u64> {
    let (status, body) = Client::connect(addr)
        .await?
        .call("GET", "/metrics", String::new())
        .await?;
    if status != StatusCode::OK {
        bail!("GET /metrics: {status}");
    }
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix("keel_event_stream_rereads_total "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("/metrics has no keel_event_stream_rereads_total"))
}
