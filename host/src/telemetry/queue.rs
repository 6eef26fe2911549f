//! The bounded queue between the runs and the exporter's thread.
//!
//! A run pushes a [`Record`] under a short lock into a vector whose
//! capacity is kept: pushing never allocates, and the thread is woken only
//! when a batch is full. The thread swaps the vector out for its own empty
//! one, builds the batch's spans, and exports them with the blocking OTLP
//! exporter; a full queue drops spans (counted, logged at most once per
//! interval), so a collector that is slow or down never slows a run.

use super::client::Throttled;
use super::span::Record;
use super::{EXPORT_BATCH, EXPORT_DELAY, LOG_INTERVAL, MAX_QUEUE};
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::{RandomIdGenerator, SpanExporter};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the thread is asked to do besides exporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Keep going.
    No,
    /// Export what is queued, then end.
    Flush,
    /// End now; what is queued is lost.
    Abandon,
}

#[derive(Debug)]
struct Pending {
    spans: Vec<Record>,
    stop: Stop,
    dropped: Throttled,
}

/// The queue, shared by the runs (which push) and the exporter's thread.
#[derive(Debug)]
pub(super) struct Queue {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Queue {
    pub fn new() -> Queue {
        Queue {
            pending: Mutex::new(Pending {
                spans: Vec::with_capacity(MAX_QUEUE),
                stop: Stop::No,
                dropped: Throttled::default(),
            }),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a finished span, or drops it when the queue is full or the
    /// exporter has stopped.
    pub fn push(&self, r: Record) {
        let mut p = self.lock();
        if p.stop != Stop::No {
            return;
        }
        if p.spans.len() >= MAX_QUEUE {
            if let Some(n) = p.dropped.note() {
                tracing::warn!(
                    dropped_spans = n,
                    "telemetry: the export queue is full ({MAX_QUEUE} spans); spans are dropped (logged at most every {} s)",
                    LOG_INTERVAL.as_secs()
                );
            }
            return;
        }
        p.spans.push(r);
        if p.spans.len() == EXPORT_BATCH {
            self.wake.notify_one();
        }
    }

    /// Asks the thread to export what is queued and end.
    pub fn flush(&self) {
        self.ask(Stop::Flush);
    }

    /// Asks the thread to end without exporting.
    pub fn abandon(&self) {
        self.ask(Stop::Abandon);
    }

    fn ask(&self, stop: Stop) {
        let mut p = self.lock();
        if p.stop == Stop::No {
            p.stop = stop;
        }
        self.wake.notify_one();
    }

    /// Waits for a full batch, the export delay, or a stop; takes what is
    /// queued into `into` (empty, its capacity kept) and says whether to
    /// go on afterwards.
    fn take(&self, into: &mut Vec<Record>) -> Stop {
        let mut p = self.lock();
        let until = Instant::now() + EXPORT_DELAY;
        while p.spans.len() < EXPORT_BATCH && p.stop == Stop::No {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            p = self
                .wake
                .wait_timeout(p, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        std::mem::swap(&mut p.spans, into);
        p.stop
    }

    /// The exporter thread's body: until asked to stop, build and export
    /// what was queued, in batches; then shut the exporter down.
    pub fn export_loop<E: SpanExporter>(&self, exporter: E, scope: InstrumentationScope) {
        let ids = RandomIdGenerator::default();
        let mut taken = Vec::with_capacity(MAX_QUEUE);
        loop {
            let stop = self.take(&mut taken);
            if stop == Stop::Abandon {
                return;
            }
            let mut batch = Vec::with_capacity(EXPORT_BATCH.min(taken.len()));
            for r in taken.drain(..) {
                batch.push(r.into_span(&scope, &ids));
                if batch.len() == EXPORT_BATCH {
                    export(&exporter, std::mem::take(&mut batch));
                }
            }
            if !batch.is_empty() {
                export(&exporter, batch);
            }
            if stop == Stop::Flush {
                let _ = exporter.shutdown_with_timeout(Duration::from_secs(1));
                return;
            }
        }
    }
}

/// One export; a failure was logged by the client (once per interval).
fn export<E: SpanExporter>(exporter: &E, batch: Vec<opentelemetry_sdk::trace::SpanData>) {
    let _ = futures_executor::block_on(exporter.export(batch));
}

#[cfg(test)]
mod tests {
    use super::super::span::{RunIds, What};
    use super::*;
    use opentelemetry::trace::{SpanId, TraceId};
    use opentelemetry_sdk::trace::SpanData;
    use std::sync::Arc;
    use std::time::SystemTime;

    /// An exporter that keeps what it is given, batch by batch.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<Vec<SpanData>>>>);

    impl SpanExporter for Kept {
        fn export(
            &self,
            batch: Vec<SpanData>,
        ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send
        {
            self.0.lock().unwrap().push(batch);
            async { Ok(()) }
        }
    }

    fn record(ids: &Arc<RunIds>, step: u32, what: What) -> Record {
        let now = SystemTime::now();
        Record {
            run: ids.clone(),
            start: now,
            end: now,
            step,
            error: None,
            what,
        }
    }

    #[test]
    fn a_full_queue_drops_spans_and_a_flush_exports_every_queued_one_in_bounded_batches() {
        let ids = Arc::new(RunIds {
            trace_id: TraceId::from_bytes([7; 16]),
            span_id: SpanId::from_bytes([9; 8]),
            run_id: Arc::from("run_q"),
            agent: Arc::from("a"),
        });
        let tool: Arc<str> = Arc::from("echo");
        let q = Arc::new(Queue::new());
        // No thread drains it yet: pushes past the bound are dropped.
        for i in 0..MAX_QUEUE as u32 + 100 {
            q.push(record(&ids, i, What::Tool { tool: tool.clone() }));
        }
        let run = What::Run {
            status: crate::types::RunStatus::Completed,
            reason: None,
            steps: 3,
            tokens: 0,
        };
        q.push(record(&ids, 0, run)); // dropped too: the queue is full
        let kept = Kept::default();
        let (q2, k2) = (q.clone(), kept.clone());
        let thread = std::thread::spawn(move || {
            q2.export_loop(k2, InstrumentationScope::builder("keel").build())
        });
        q.flush();
        thread.join().unwrap();
        q.push(record(&ids, 1, What::Tool { tool }));
        let batches = kept.0.lock().unwrap();
        assert!(batches.iter().all(|b| b.len() <= EXPORT_BATCH));
        let spans: Vec<&SpanData> = batches.iter().flatten().collect();
        assert_eq!(
            spans.len(),
            MAX_QUEUE,
            "every queued span, none past the bound"
        );
        for (i, s) in spans.iter().enumerate() {
            assert_eq!(s.name, "execute_tool echo");
            assert_eq!(s.span_context.trace_id(), ids.trace_id);
            assert_eq!(s.parent_span_id, ids.span_id, "a child of the run's span");
            assert_ne!(s.span_context.span_id(), ids.span_id);
            let call = s
                .attributes
                .iter()
                .find(|a| a.key.as_str() == "gen_ai.tool.call.id");
            assert_eq!(
                call.unwrap().value.as_str(),
                format!("run_q:{i}"),
                "in order"
            );
        }
    }

    #[test]
    fn a_runs_own_span_has_the_ids_its_run_gives_it_and_no_parent() {
        let ids = Arc::new(RunIds {
            trace_id: TraceId::from_bytes([1; 16]),
            span_id: SpanId::from_bytes([2; 8]),
            run_id: Arc::from("run_r"),
            agent: Arc::from("agent-llm"),
        });
        let what = What::Run {
            status: crate::types::RunStatus::Failed,
            reason: Some(crate::types::RunReason::LimitSteps),
            steps: 3,
            tokens: 10,
        };
        let scope = InstrumentationScope::builder("keel").build();
        let s = record(&ids, 0, what).into_span(&scope, &RandomIdGenerator::default());
        assert_eq!(s.name, "invoke_agent agent-llm");
        assert_eq!(s.span_context.span_id(), ids.span_id);
        assert_eq!(s.parent_span_id, SpanId::INVALID);
        assert!(matches!(
            s.status,
            opentelemetry::trace::Status::Error { .. }
        ));
        assert_eq!(s.events.len(), 1);
    }
}
