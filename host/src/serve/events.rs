//! Live events for API clients: one task follows the store's journal (woken
//! by this process's commits, and polling for other processes') and hands
//! each new event to the clients of its run only, through a bounded
//! broadcast per followed run. A client that falls behind is not waited
//! for: it reads what it missed from the store, so a slow client holds no
//! memory of its own and slows no one, and a client is woken only by its
//! own run's events, however many others are followed.

use crate::store::{Event, RunReader, StoreError};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, Notify};

/// Events of one run kept for its clients that are behind; past this they
/// reread the store.
const BACKLOG: usize = 256;
/// Events read from the store at a time.
const PAGE: u32 = 512;

/// The journal follower's fan-out point.
pub struct Hub {
    /// One channel per run that has clients; removed with its last client.
    runs: Mutex<HashMap<String, broadcast::Sender<Arc<Event>>>>,
    wake: Notify,
    clients: AtomicUsize,
    rereads: AtomicU64,
}

impl Hub {
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub {
            runs: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            clients: AtomicUsize::new(0),
            rereads: AtomicU64::new(0),
        })
    }

    /// Says that events were committed here: the follower reads at once.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Live clients of the stream.
    pub fn clients(&self) -> usize {
        self.clients.load(Relaxed)
    }

    /// How often a client fell more than a backlog behind its run and
    /// read what it missed from the store.
    pub fn rereads(&self) -> u64 {
        self.rereads.load(Relaxed)
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, broadcast::Sender<Arc<Event>>>> {
        // The map holds no invariant a panic could break halfway.
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn subscribe(&self, run_id: &str) -> broadcast::Receiver<Arc<Event>> {
        let mut runs = self.runs();
        match runs.get(run_id) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(BACKLOG);
                runs.insert(run_id.to_string(), tx);
                rx
            }
        }
    }

    /// Forgets a run's channel once its last client has gone.
    fn unsubscribe(&self, run_id: &str) {
        let mut runs = self.runs();
        if runs.get(run_id).is_some_and(|tx| tx.receiver_count() == 0) {
            runs.remove(run_id);
        }
    }

    /// Hands a page of events to their runs' clients.
    fn publish(&self, page: Vec<Event>) {
        let runs = self.runs();
        if runs.is_empty() {
            return;
        }
        for e in page {
            if let Some(tx) = runs.get(&e.run_id) {
                let _ = tx.send(Arc::new(e));
            }
        }
    }

    /// Follows the journal from its current end until the task is dropped;
    /// `poll` bounds how late another process's events arrive.
    pub async fn follow(self: Arc<Self>, reader: Arc<dyn RunReader>, poll: Duration) {
        let mut last = loop {
            match reader.last_event_seq().await {
                Ok(seq) => break seq,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the journal's end failed; trying again");
                    tokio::time::sleep(poll).await;
                }
            }
        };
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(poll) => {}
            }
            loop {
                match reader.events_after(None, last, PAGE).await {
                    Ok(page) => {
                        let full = page.len() == PAGE as usize;
                        if let Some(e) = page.last() {
                            last = e.seq;
                        }
                        page.iter().for_each(log_event);
                        self.publish(page);
                        if !full {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "following the journal failed; trying again");
                        break;
                    }
                }
            }
        }
    }
}

/// One log line per event, as it is committed (any process's).
fn log_event(e: &Event) {
    tracing::info!(run = %e.run_id, seq = e.seq, step = ?e.step_index, kind = %e.kind, "event");
}

/// Whether an event is the last of its run.
pub fn ends_run(kind: &str) -> bool {
    matches!(kind, "run.completed" | "run.failed" | "run.cancelled")
}

/// An event as the API shows it: its data as JSON, not text.
pub fn to_json(e: &Event) -> serde_json::Value {
    let data = serde_json::from_str::<serde_json::Value>(&e.data)
        .unwrap_or_else(|_| serde_json::Value::String(e.data.clone()));
    serde_json::json!({
        "seq": e.seq,
        "run_id": e.run_id,
        "step_index": e.step_index,
        "kind": e.kind,
        "data": data,
        "at": e.at,
    })
}

/// One client's view of one run's events: every event above `last` once,
/// in order, ending after the event that ends the run.
pub struct Follow {
    hub: Arc<Hub>,
    reader: Arc<dyn RunReader>,
    run_id: String,
    last: i64,
    /// `None` when the run had ended: the store holds all there is.
    rx: Option<broadcast::Receiver<Arc<Event>>>,
    queue: VecDeque<Event>,
    caught_up: bool,
    /// The run had ended when the client came: stop once the store is read.
    ended: bool,
    done: bool,
}

impl Follow {
    /// Subscribes first, then reads the store: nothing committed in between
    /// is missed, and what comes twice is skipped by its number.
    pub fn new(
        hub: &Arc<Hub>,
        reader: Arc<dyn RunReader>,
        run_id: &str,
        after: i64,
        ended: bool,
    ) -> Follow {
        hub.clients.fetch_add(1, Relaxed);
        Follow {
            hub: hub.clone(),
            rx: (!ended).then(|| hub.subscribe(run_id)),
            reader,
            run_id: run_id.to_string(),
            last: after,
            queue: VecDeque::new(),
            caught_up: false,
            ended,
            done: false,
        }
    }

    /// The next event, or `None` when the run has ended (or the store
    /// cannot be read: the client reconnects with `Last-Event-ID`).
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if self.done {
                return None;
            }
            if let Some(e) = self.queue.pop_front() {
                if e.seq <= self.last {
                    continue;
                }
                self.last = e.seq;
                self.done = ends_run(&e.kind);
                return Some(e);
            }
            if !self.caught_up {
                match self.read_store().await {
                    Ok(()) => continue,
                    Err(e) => {
                        tracing::warn!(run = %self.run_id, error = %e, "an event stream could not read the store; it ends");
                        return None;
                    }
                }
            }
            let Some(rx) = self.rx.as_mut().filter(|_| !self.ended) else {
                return None;
            };
            match rx.recv().await {
                Ok(e) if e.seq > self.last => self.queue.push_back((*e).clone()),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.hub.rereads.fetch_add(1, Relaxed);
                    self.caught_up = false;
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    async fn read_store(&mut self) -> Result<(), StoreError> {
        let page = self
            .reader
            .events_after(Some(&self.run_id), self.last, PAGE)
            .await?;
        self.caught_up = page.len() < PAGE as usize;
        self.queue.extend(page);
        Ok(())
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.hub.clients.fetch_sub(1, Relaxed);
        if self.rx.take().is_some() {
            self.hub.unsubscribe(&self.run_id);
        }
    }
}
