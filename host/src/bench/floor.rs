//! The fan-out's floor: the work its runs cannot avoid, done without Keel's
//! loop, tasks and event plumbing, so that Keel's CPU per run can be read
//! against it on any CPU.
//!
//! One run of the fan-out is recorded as it happens (every write it sends
//! to the store, every call it makes on its agent and policy). The floor
//! then does, for as many runs:
//!
//! - the wasm side: each run's agent and policy instantiated (and `init`ed)
//!   with as many pairs live at once as the fan-out keeps in flight, and
//!   the recorded `decide` and `evaluate` calls made on them with the
//!   recorded views, the agent's model calls answered at once;
//! - the store side: the recorded writes, renamed to each run, committed
//!   straight to a fresh store of the same engine and sync mode, in groups
//!   as large as the fan-out's own (one SQLite transaction, one sync each).

use super::fanout::{Bench, StoreMode};
use crate::consumer::{Agent, ConsumerError, Policy, RunView};
use crate::store::{
    CommitObserver, Committed, ModelCallRecord, NewEvent, Store, Transition, Write,
};
use crate::types::{Approval, Decision, Effect, Run, Step, ToolCall, Verdict};
use anyhow::{bail, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the floor measured.
#[derive(Debug, Clone, Serialize)]
pub struct FloorReport {
    pub runs: u64,
    /// Pairs of instances live at once (the fan-out's concurrency).
    pub live_pairs: u64,
    /// Runs whose writes share one SQLite transaction.
    pub runs_per_commit: u64,
    /// The process's CPU per run, both sides.
    pub cpu_us_per_run: f64,
    /// Of that, instantiating the pair and calling it.
    pub wasm_cpu_us_per_run: f64,
    /// Of that, encoding and committing the run's writes.
    pub store_cpu_us_per_run: f64,
    /// Writes (a new run, then its transitions) per run.
    pub writes_per_run: f64,
    /// Journal records written per run (as the fan-out's).
    pub journal_records_per_run: f64,
    /// Plugin calls (`decide`, `evaluate`) per run.
    pub plugin_calls_per_run: f64,
    pub wall_s: f64,
}

/// One call the loop made on a run's consumers, with what it passed.
#[derive(Debug, Clone)]
enum PluginCall {
    Decide(OwnedView),
    Evaluate(ToolCall, Effect, OwnedView),
}

#[derive(Debug, Clone)]
struct OwnedView {
    run: Run,
    steps: Vec<Step>,
    approvals: Vec<Approval>,
}

impl OwnedView {
    fn of(v: RunView<'_>) -> OwnedView {
        OwnedView {
            run: v.run.clone(),
            steps: v.steps.to_vec(),
            approvals: v.approvals.to_vec(),
        }
    }

    fn view(&self) -> RunView<'_> {
        RunView {
            run: &self.run,
            steps: &self.steps,
            approvals: &self.approvals,
        }
    }
}

/// What one run did, recorded by [`Recorder`] and the consumer wrappers.
#[derive(Default)]
pub(crate) struct Recording {
    writes: Mutex<Vec<Write>>,
    calls: Mutex<Vec<PluginCall>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recording {
    /// The agent, recording every `decide`.
    pub(crate) fn agent(self: &Arc<Self>, inner: Box<dyn Agent>) -> Box<dyn Agent> {
        Box::new(RecordingAgent {
            inner,
            rec: self.clone(),
        })
    }

    /// The policy, recording every `evaluate`.
    pub(crate) fn policy(self: &Arc<Self>, inner: Box<dyn Policy>) -> Box<dyn Policy> {
        Box::new(RecordingPolicy {
            inner,
            rec: self.clone(),
        })
    }
}

/// Records the writes that pass through an `Observed` store.
pub(crate) struct Recorder(pub(crate) Arc<Recording>);

impl CommitObserver for Recorder {
    fn committed(&self, _c: &Committed, _took: Duration, _calls: &[ModelCallRecord]) {}
    fn creating(&self, run: &Run, steps: &[Step], events: &[NewEvent]) {
        lock(&self.0.writes).push(Write::Create {
            run: run.clone(),
            steps: steps.to_vec(),
            events: events.to_vec(),
        });
    }
    fn committing(&self, t: &Transition) {
        lock(&self.0.writes).push(Write::Transition(t.clone()));
    }
}

struct RecordingAgent {
    inner: Box<dyn Agent>,
    rec: Arc<Recording>,
}

#[async_trait::async_trait]
impl Agent for RecordingAgent {
    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError> {
        lock(&self.rec.calls).push(PluginCall::Decide(OwnedView::of(view)));
        self.inner.decide(view).await
    }
}

struct RecordingPolicy {
    inner: Box<dyn Policy>,
    rec: Arc<Recording>,
}

#[async_trait::async_trait]
impl Policy for RecordingPolicy {
    async fn evaluate(
        &mut self,
        call: &ToolCall,
        effect: Effect,
        view: RunView<'_>,
    ) -> Result<Verdict, ConsumerError> {
        lock(&self.rec.calls).push(PluginCall::Evaluate(
            call.clone(),
            effect,
            OwnedView::of(view),
        ));
        self.inner.evaluate(call, effect, view).await
    }
}

/// `w`, written for run `id` instead of the recorded one.
fn renamed(w: &Write, id: &str) -> Write {
    let rename_approvals = |a: &mut Vec<Approval>| {
        for ap in a {
            ap.id = format!("{}-{id}", ap.id);
            ap.run_id = id.to_string();
        }
    };
    match w {
        Write::Create { run, steps, events } => {
            let mut run = run.clone();
            run.id = id.to_string();
            Write::Create {
                run,
                steps: steps.clone(),
                events: events.clone(),
            }
        }
        Write::Transition(t) => {
            let mut t = t.clone();
            t.run.id = id.to_string();
            rename_approvals(&mut t.approvals);
            Write::Transition(t)
        }
    }
}

/// Measures the floor of `runs` runs like the recorded one: `live` pairs
/// of instances at once, `group` runs' writes per SQLite transaction, on a
/// fresh store like `store` (SQLite only: a PostgreSQL store's work is in
/// its server).
pub(crate) async fn measure(
    bench: &Bench,
    rec: &Recording,
    store: &StoreMode,
    runs: u64,
    live: u64,
    group: u64,
) -> anyhow::Result<FloorReport> {
    let writes = std::mem::take(&mut *lock(&rec.writes));
    let calls = std::mem::take(&mut *lock(&rec.calls));
    if writes.is_empty() || calls.is_empty() {
        bail!(
            "the recorded run made no writes or no plugin calls: nothing to measure a floor from"
        );
    }
    let path = match store {
        StoreMode::Durable { path, sync } => Some((floor_path(path), *sync)),
        StoreMode::Memory => None,
        StoreMode::Postgres(_) => bail!("the floor is measured on SQLite stores only"),
    };
    let (live, group) = (live.clamp(1, runs.max(1)), group.clamp(1, runs.max(1)));
    let started = Instant::now();

    // The wasm side, first, while no store work competes for the CPU.
    let cpu0 = super::cpu_seconds_fine();
    let answer_at_once = bench.instant_model();
    let mut done = 0;
    while done < runs {
        let n = live.min(runs - done);
        let mut pairs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            pairs.push(bench.consumers_on(answer_at_once.clone()).await?);
        }
        for c in &mut pairs {
            for call in &calls {
                match call {
                    PluginCall::Decide(v) => {
                        // The model's accounting is armed for the step, as
                        // the loop does, and what it counted taken back.
                        let (run, l) = (&v.run, &v.run.limits);
                        let step = v.steps.len() as u32;
                        c.model().arm(
                            step,
                            run.model_calls,
                            run.tokens,
                            l.max_model_calls,
                            l.max_tokens,
                        );
                        c.agent
                            .decide(v.view())
                            .await
                            .context("the floor's decide")?;
                        c.model().drain();
                    }
                    PluginCall::Evaluate(call, e, v) => {
                        c.policy
                            .evaluate(call, *e, v.view())
                            .await
                            .context("the floor's evaluate")?;
                    }
                }
            }
        }
        done += n;
    }
    let wasm_s = super::cpu_seconds_fine() - cpu0;

    // The store side, on a thread of its own as Keel's writer is.
    let writes_per_run = writes.len() as f64;
    let (store_s, kept, events) = tokio::task::spawn_blocking(move || {
        let out = commit_all(path.as_ref(), &writes, runs, group);
        if let Some((p, _)) = &path {
            remove_store_files(p);
        }
        out
    })
    .await
    .context("the floor's store thread panicked")??;
    if kept != runs * writes_per_run as u64 {
        bail!(
            "the floor committed {kept} writes, not the {} it prepared",
            runs * writes_per_run as u64
        );
    }
    let per = |s: f64| s * 1e6 / runs.max(1) as f64;
    Ok(FloorReport {
        runs,
        live_pairs: live,
        runs_per_commit: group,
        cpu_us_per_run: per(wasm_s + store_s),
        wasm_cpu_us_per_run: per(wasm_s),
        store_cpu_us_per_run: per(store_s),
        writes_per_run,
        journal_records_per_run: events as f64 / runs.max(1) as f64,
        plugin_calls_per_run: calls.len() as f64,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Commits every run's writes, `group` runs to a transaction: the runs'
/// first writes together, then their second, and so on (each write's
/// compare-and-set expects the one before it). Returns the process CPU it
/// took (this thread is the only one working meanwhile), the writes
/// committed and the journal records they wrote.
fn commit_all(
    path: Option<&(PathBuf, crate::store::Durability)>,
    writes: &[Write],
    runs: u64,
    group: u64,
) -> anyhow::Result<(f64, u64, u64)> {
    let mut store = match path {
        Some((p, sync)) => {
            if p.exists() {
                bail!("{}: exists; the floor writes a fresh store", p.display());
            }
            Store::open(p, *sync).with_context(|| format!("opening {}", p.display()))?
        }
        None => Store::open_in_memory()?,
    };
    let t0 = super::cpu_seconds_fine();
    let mut committed = 0;
    let mut first = 0;
    while first < runs {
        let ids: Vec<String> = (first..(first + group).min(runs))
            .map(|i| format!("floor-{i:010}"))
            .collect();
        for w in writes {
            let ws = ids.iter().map(|id| renamed(w, id)).collect();
            for r in store.commit_group(ws).context("the floor's group commit")? {
                r.context("a floor write was refused")?;
                committed += 1;
            }
        }
        first += group;
    }
    let cpu = super::cpu_seconds_fine() - t0;
    Ok((cpu, committed, store.count_events()?))
}

/// Where the floor writes its store beside a fan-out's file `p`.
pub(crate) fn floor_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".floor");
    PathBuf::from(s)
}

fn remove_store_files(p: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut s = p.as_os_str().to_owned();
        s.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(s));
    }
}
