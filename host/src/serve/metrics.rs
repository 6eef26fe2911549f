//! What `/metrics` reports, in Prometheus' text format: runs by status
//! (read from the store), and what this process did: transitions
//! committed and how long each commit took, model calls and tokens,
//! plugin traps by kind, event-stream clients. Commits are timed by
//! [`Metered`], a store that passes everything on to the real one.

use crate::consumer::TrapKind;
use crate::store::*;
use crate::types::*;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Upper bounds of the commit-latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Counters of this process.
#[derive(Default)]
pub struct Metrics {
    transitions: AtomicU64,
    conflicts: AtomicU64,
    commit_buckets: [AtomicU64; BUCKETS.len()],
    commit_count: AtomicU64,
    commit_micros: AtomicU64,
    model_ok: AtomicU64,
    model_error: AtomicU64,
    model_refused: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

impl Metrics {
    fn committed(&self, took: std::time::Duration, calls: &[ModelCallRecord]) {
        let secs = took.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.commit_buckets[i].fetch_add(1, Relaxed);
            }
        }
        self.commit_count.fetch_add(1, Relaxed);
        self.commit_micros
            .fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
        self.transitions.fetch_add(1, Relaxed);
        for c in calls {
            match c.outcome {
                "ok" => &self.model_ok,
                "refused_limit" => &self.model_refused,
                _ => &self.model_error,
            }
            .fetch_add(1, Relaxed);
            self.prompt_tokens
                .fetch_add(u64::from(c.prompt_tokens), Relaxed);
            self.completion_tokens
                .fetch_add(u64::from(c.completion_tokens), Relaxed);
        }
    }

    /// The text `/metrics` answers: `runs` from the store, the rest from
    /// this process.
    pub fn render(&self, runs: &[(RunStatus, u64)], sse_clients: usize) -> String {
        let mut out = String::new();
        head(
            &mut out,
            "keel_runs",
            "gauge",
            "Runs in the store, by status.",
        );
        for s in RunStatus::ALL {
            let n = runs.iter().find(|(r, _)| r == s).map_or(0, |(_, n)| *n);
            let _ = writeln!(out, "keel_runs{{status=\"{s}\"}} {n}");
        }
        head(
            &mut out,
            "keel_transitions_committed_total",
            "counter",
            "Run transitions this process committed.",
        );
        let _ = writeln!(
            out,
            "keel_transitions_committed_total {}",
            self.transitions.load(Relaxed)
        );
        head(
            &mut out,
            "keel_transition_conflicts_total",
            "counter",
            "Transitions refused by their compare-and-set.",
        );
        let _ = writeln!(
            out,
            "keel_transition_conflicts_total {}",
            self.conflicts.load(Relaxed)
        );
        head(
            &mut out,
            "keel_commit_duration_seconds",
            "histogram",
            "Time from handing a transition to the store to its commit.",
        );
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "keel_commit_duration_seconds_bucket{{le=\"{b}\"}} {}",
                self.commit_buckets[i].load(Relaxed)
            );
        }
        let count = self.commit_count.load(Relaxed);
        let _ = writeln!(
            out,
            "keel_commit_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "keel_commit_duration_seconds_sum {}",
            self.commit_micros.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "keel_commit_duration_seconds_count {count}");
        head(
            &mut out,
            "keel_model_calls_total",
            "counter",
            "Model calls recorded, by outcome.",
        );
        for (o, c) in [
            ("ok", &self.model_ok),
            ("error", &self.model_error),
            ("refused_limit", &self.model_refused),
        ] {
            let _ = writeln!(
                out,
                "keel_model_calls_total{{outcome=\"{o}\"}} {}",
                c.load(Relaxed)
            );
        }
        head(
            &mut out,
            "keel_model_tokens_total",
            "counter",
            "Model tokens recorded, by kind.",
        );
        let _ = writeln!(
            out,
            "keel_model_tokens_total{{kind=\"prompt\"}} {}",
            self.prompt_tokens.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "keel_model_tokens_total{{kind=\"completion\"}} {}",
            self.completion_tokens.load(Relaxed)
        );
        head(
            &mut out,
            "keel_plugin_traps_total",
            "counter",
            "Plugin instances that trapped, by kind.",
        );
        for (k, n) in TrapKind::counts() {
            let _ = writeln!(
                out,
                "keel_plugin_traps_total{{kind=\"{}\"}} {n}",
                k.as_str()
            );
        }
        head(
            &mut out,
            "keel_event_stream_clients",
            "gauge",
            "Clients following a run's events.",
        );
        let _ = writeln!(out, "keel_event_stream_clients {sse_clients}");
        out
    }
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A store that counts and times what passes through it, and wakes the
/// event follower after every commit of this process.
pub struct Metered {
    inner: Arc<dyn RunStore>,
    metrics: Arc<Metrics>,
    hub: Arc<super::events::Hub>,
}

impl Metered {
    pub fn new(
        inner: Arc<dyn RunStore>,
        metrics: Arc<Metrics>,
        hub: Arc<super::events::Hub>,
    ) -> Metered {
        Metered {
            inner,
            metrics,
            hub,
        }
    }
}

#[async_trait::async_trait]
impl RunReader for Metered {
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        self.inner.get_run(id).await
    }
    async fn find_runs(&self, q: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.inner.find_runs(q).await
    }
    async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<Approval>, StoreError> {
        self.inner.list_approvals(status, limit).await
    }
    async fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        self.inner.count_runs().await
    }
    async fn last_event_seq(&self) -> Result<i64, StoreError> {
        self.inner.last_event_seq().await
    }
    async fn steps(&self, run_id: &str) -> Result<Vec<Step>, StoreError> {
        self.inner.steps(run_id).await
    }
    async fn approvals(&self, run_id: &str) -> Result<Vec<Approval>, StoreError> {
        self.inner.approvals(run_id).await
    }
    async fn approval(&self, id: &str) -> Result<Approval, StoreError> {
        self.inner.approval(id).await
    }
    async fn events_after(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner.events_after(run_id, after, limit).await
    }
    async fn model_calls(&self, run_id: &str) -> Result<Vec<StoredModelCall>, StoreError> {
        self.inner.model_calls(run_id).await
    }
    async fn count_events(&self) -> Result<u64, StoreError> {
        self.inner.count_events().await
    }
}

#[async_trait::async_trait]
impl RunStore for Metered {
    async fn create_run(
        &self,
        run: Run,
        steps: Vec<Step>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError> {
        let t0 = Instant::now();
        let out = self.inner.create_run(run, steps, events).await;
        if out.is_ok() {
            self.metrics.committed(t0.elapsed(), &[]);
            self.hub.wake();
        }
        out
    }
    async fn commit(&self, t: Transition) -> Result<Committed, StoreError> {
        let calls = t.model_calls.clone();
        let t0 = Instant::now();
        let out = self.inner.commit(t).await;
        match &out {
            Ok(_) => {
                self.metrics.committed(t0.elapsed(), &calls);
                self.hub.wake();
            }
            Err(StoreError::Conflict { .. }) => {
                self.metrics.conflicts.fetch_add(1, Relaxed);
            }
            Err(_) => {}
        }
        out
    }
    async fn heartbeat(
        &self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        self.inner.heartbeat(run_id, owner, now, ttl_ms).await
    }
    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        self.inner.release_lease(run_id, owner).await
    }
    async fn claim(&self, now: i64, limit: u32, rule: ClaimRule) -> Result<Vec<Run>, StoreError> {
        let runs = self.inner.claim(now, limit, rule).await?;
        if !runs.is_empty() {
            self.hub.wake();
        }
        Ok(runs)
    }
    fn writer_stats(&self) -> WriterStats {
        self.inner.writer_stats()
    }
}
