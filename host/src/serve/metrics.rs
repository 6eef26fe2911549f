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
    pub fn render(&self, runs: &[(RunStatus, u64)], hub: &super::events::Hub) -> String {
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
        let _ = writeln!(out, "keel_event_stream_clients {}", hub.clients());
        head(
            &mut out,
            "keel_event_stream_rereads_total",
            "counter",
            "Times an event-stream client fell a backlog behind and read what it missed from the store.",
        );
        let _ = writeln!(out, "keel_event_stream_rereads_total {}", hub.rereads());
        out
    }
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// What `keel serve` observes of its store's commits: it counts and times
/// them, and wakes the event follower after every commit of this process.
pub struct Meter {
    pub metrics: Arc<Metrics>,
    pub hub: Arc<super::events::Hub>,
}

/// The store `keel serve` drives runs through.
pub type Metered = Observed<Meter>;

impl CommitObserver for Meter {
    fn committed(&self, _c: &Committed, took: std::time::Duration, calls: &[ModelCallRecord]) {
        self.metrics.committed(took, calls);
        self.hub.wake();
    }
    fn conflicted(&self) {
        self.metrics.conflicts.fetch_add(1, Relaxed);
    }
    fn claimed(&self, _runs: &[Run]) {
        self.hub.wake();
    }
}
