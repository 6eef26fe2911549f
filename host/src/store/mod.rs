//! The durable store's boundary: the vocabulary every engine writes and
//! reads (transitions with their compare-and-set, events, model calls), and
//! the errors callers match on. It depends on nothing but `types`.
//!
//! Every state transition of a run is one transaction that also inserts its
//! events, and every write is a compare-and-set on the run's status and lease
//! owner. Two engines implement it: [`sqlite`] (one file in WAL mode) and
//! [`postgres`] (a database many Keel processes share); [`open`] picks one
//! from a location, a file path or a `postgres://` URL.

pub mod chain;
pub mod encode;
mod error;
mod journal;
pub mod lease;
mod location;
mod observed;
pub mod postgres;
pub mod sqlite;

pub use encode::{ApprovalRow, Prepared, StepRow, Write, Written};
pub use error::StoreError;
pub use journal::{ChainedEvent, Journal};
pub use location::{open, open_reader, Location, OpenOptions};
pub use observed::{CommitObserver, Observed};
pub use sqlite::{
    Durability, ReadOnlyStore, Store, StoreHandle, BUSY_TIMEOUT_MS, CURRENT_VERSION, MIGRATIONS,
    WAL_CHECKPOINT_PAGES, WRITER_THREAD,
};

use crate::types::*;
// What a run records, written here but made by the loop and its consumers.
pub use crate::types::{ModelCallRecord, NewEvent};

/// Which runs a claim looks at ([`RunStore::claim`], [`RunStore::claim_runs`]).
pub(crate) enum Wanted<'a> {
    /// The first this many that need a driver, oldest first.
    Any(u32),
    /// These, each if it needs a driver.
    Runs(&'a [String]),
}

/// One state transition of one run: the run's new row, the steps and
/// approvals it writes, and its events. `expect` is the compare-and-set.
#[derive(Debug, Clone)]
pub struct Transition {
    /// What the run row must still say for the transition to apply.
    pub expect: Expect,
    /// The run row as the transition leaves it.
    pub run: Run,
    /// The steps it inserts or rewrites.
    pub steps: Vec<Step>,
    /// The approvals it inserts or rewrites.
    pub approvals: Vec<Approval>,
    /// The events it appends to the run's journal.
    pub events: Vec<NewEvent>,
    /// Model calls made since the previous transition, recorded with it.
    pub model_calls: Vec<ModelCallRecord>,
}

/// One model call as stored, for operators' reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredModelCall {
    /// The step the call was made for.
    pub step_index: u32,
    /// The name of the model provider called.
    pub provider: String,
    /// Tokens in the prompt, as the provider counted them.
    pub prompt_tokens: u32,
    /// Tokens in the completion, as the provider counted them.
    pub completion_tokens: u32,
    /// `ok`, `error` or `refused_limit`.
    pub outcome: String,
    /// What went wrong, as text.
    pub error: Option<String>,
    /// How long the call took, in milliseconds.
    pub latency_ms: i64,
    /// When it was recorded (ms since the epoch).
    pub at: i64,
}

/// What the run row must still say for a transition to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    /// The status the run must still have.
    pub status: RunStatus,
    /// The lease owner that must hold the run (`None`: nobody may hold it).
    pub owner: Option<String>,
    /// An approval of the run that must still be pending (an operator's
    /// decision: two operators deciding at once cannot both succeed).
    pub pending_approval: Option<String>,
}

/// What a committed transition wrote, decoded from the bound columns.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The run row as written.
    pub run: Run,
    /// The steps written.
    pub steps: Vec<Step>,
    /// The approvals written.
    pub approvals: Vec<Approval>,
    /// The events written, with their sequence numbers.
    pub events: Vec<Event>,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Its number in the whole journal; later events have larger numbers.
    pub seq: i64,
    /// The run it belongs to.
    pub run_id: String,
    /// The step it is about, if any.
    pub step_index: Option<u32>,
    /// As stored: an [`EventKind`]'s spelling, or one a newer Keel wrote.
    pub kind: std::borrow::Cow<'static, str>,
    /// JSON text.
    pub data: String,
    /// When it was written (ms since the epoch).
    pub at: i64,
}

/// Which runs to list, newest first: a page of the runs with `status`
/// (any if `None`) whose goal contains `goal_contains`, created before the
/// run `before` (the last run of the previous page).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs with this status; any status if `None`.
    pub status: Option<RunStatus>,
    /// The most runs to return.
    pub limit: u32,
    /// The id of the last run of the previous page; `None` for the first page.
    pub before: Option<String>,
    /// Only runs whose goal contains this text; any goal if `None`.
    pub goal_contains: Option<String>,
}

/// Which finished runs retention may remove: runs whose status is one of
/// `statuses` (terminal ones only) and that last changed before
/// `before`, oldest first, after the run `after` (`(updated_at, id)` of the
/// last one of the previous page), at most `limit`.
///
/// The run holding the store's newest event is never among them: SQLite
/// numbers an event one above the largest number present, so deleting
/// the newest event would hand its number out again, and a reader
/// following the journal from that number would miss what comes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Only runs last changed before this time (ms since the epoch).
    pub before: i64,
    /// The statuses to select; only terminal ones ever qualify.
    pub statuses: Vec<RunStatus>,
    /// `(updated_at, id)` of the previous page's last run; `None` for the first
    /// page.
    pub after: Option<(i64, String)>,
    /// The most runs to return in one page (at least 1).
    pub limit: u32,
}

impl Finished {
    /// Runs in `statuses` (every terminal status when empty) that
    /// finished before `before`; refuses a status that is not terminal.
    pub fn new(before: i64, statuses: &[RunStatus], limit: u32) -> Result<Finished, StoreError> {
        if let Some(s) = statuses.iter().find(|s| !s.is_terminal()) {
            return Err(StoreError::Refused(format!(
                "a run that is {s} has not finished: only completed, failed and cancelled runs can be pruned"
            )));
        }
        let mut statuses = if statuses.is_empty() {
            vec![
                RunStatus::Completed,
                RunStatus::Failed,
                RunStatus::Cancelled,
            ]
        } else {
            statuses.to_vec()
        };
        statuses.sort_by_key(|s| s.as_str());
        statuses.dedup();
        Ok(Finished {
            before,
            statuses,
            after: None,
            limit: limit.max(1),
        })
    }

    /// The statuses' spellings, terminal ones only (the engines bind them
    /// as the `$STATUSES` of [`FINISHED_SQL`]).
    pub fn status_names(&self) -> Vec<&'static str> {
        self.statuses
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str())
            .collect()
    }
}

/// [`Finished`] as a SQL condition over a `runs` row: `$STATUSES` is a
/// subquery yielding the statuses, `$BEFORE` the time (each engine
/// substitutes its own). A run that has not finished never qualifies,
/// whatever the statuses say.
pub const FINISHED_SQL: &str = "runs.status IN ('completed', 'failed', 'cancelled')
  AND runs.status IN $STATUSES AND runs.updated_at < $BEFORE
  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = runs.id
                    AND e.seq = (SELECT max(seq) FROM events))";

/// A finished run to delete, as it was read: it is deleted only if its
/// journal still has `chain_len` events (what an export wrote).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doomed {
    /// The run's id.
    pub id: String,
    /// How many events its journal held when it was read; it must hold as
    /// many still to be deleted.
    pub chain_len: u64,
}

/// Operators' reads of a store: runs, their steps, approvals, journal and
/// model calls. Read-only handles implement only this.
#[async_trait::async_trait]
pub trait RunReader: Send + Sync {
    /// The run, or `None` when there is no such run.
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError>;
    /// A page of runs, newest first ([`RunQuery`]).
    async fn find_runs(&self, q: &RunQuery) -> Result<Vec<Run>, StoreError>;
    /// Approvals of every run with `status` (any if `None`), oldest first,
    /// at most `limit`.
    async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<Approval>, StoreError>;
    /// How many runs are in each status (statuses with none are left out).
    async fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError>;
    /// The number of the newest event in the journal (0 when it is empty).
    async fn last_event_seq(&self) -> Result<i64, StoreError>;
    /// A run's steps in the order of their index.
    async fn steps(&self, run_id: &str) -> Result<Vec<Step>, StoreError>;
    /// A run's approvals, oldest first.
    async fn approvals(&self, run_id: &str) -> Result<Vec<Approval>, StoreError>;
    /// A run's steps and approvals together, as a loop needs them to
    /// resume it: one trip to the store where the engine allows it.
    async fn history(&self, run_id: &str) -> Result<(Vec<Step>, Vec<Approval>), StoreError> {
        Ok((self.steps(run_id).await?, self.approvals(run_id).await?))
    }
    /// The approval with `id`, or [`StoreError::ApprovalNotFound`].
    async fn approval(&self, id: &str) -> Result<Approval, StoreError>;
    /// Events numbered above `after`, oldest first, of one run or all.
    async fn events_after(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError>;
    /// A run's model calls (every attempt), in order.
    async fn model_calls(&self, run_id: &str) -> Result<Vec<StoredModelCall>, StoreError>;
    /// How many events the journal holds, every run's.
    async fn count_events(&self) -> Result<u64, StoreError>;
    /// The run's rows as stored, read in one snapshot ([`Journal`]), or
    /// [`StoreError::RunNotFound`].
    async fn journal(&self, run_id: &str) -> Result<Journal, StoreError>;
    /// Finished runs retention may remove ([`Finished`]).
    async fn finished_runs(&self, q: &Finished) -> Result<Vec<Run>, StoreError>;

    /// The newest runs first, at most `limit`, with `status` if given.
    async fn list_runs(
        &self,
        status: Option<RunStatus>,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError> {
        self.find_runs(&RunQuery {
            status,
            limit,
            ..RunQuery::default()
        })
        .await
    }

    /// The run, or [`StoreError::RunNotFound`].
    async fn run(&self, id: &str) -> Result<Run, StoreError> {
        self.get_run(id)
            .await?
            .ok_or_else(|| StoreError::RunNotFound(id.to_string()))
    }
}

/// A store that loops write to: runs created and moved on by transitions,
/// each a compare-and-set committed with its events, and the leases that
/// say which process drives a run. The driver reaches a store only through
/// this. Taking a lease, cancelling and deciding approvals are transitions
/// too, built once above the engines (`driver::operator`).
#[async_trait::async_trait]
pub trait RunStore: RunReader {
    /// Inserts a new run with its first steps and events.
    async fn create_run(
        &self,
        run: Run,
        steps: Vec<Step>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError>;
    /// Commits one transition, or fails with [`StoreError::Conflict`] when
    /// its expectation no longer holds (nothing is written then).
    async fn commit(&self, t: Transition) -> Result<Committed, StoreError>;
    /// Extends `owner`'s lease; `false` when it no longer holds it.
    async fn heartbeat(
        &self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Gives `owner`'s lease back, if it still holds it.
    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError>;
    /// Claims up to `limit` runs that need a driver ([`claimable`]): finds
    /// them and commits `rule`'s transition for each (the claimer's lease,
    /// built by `driver::operator`) in one transaction, so that no run is
    /// handed to two claimers. A run for which `rule` refuses is skipped.
    /// PostgreSQL passes over rows another claimer holds locked.
    async fn claim(&self, now: i64, limit: u32, rule: ClaimRule) -> Result<Vec<Run>, StoreError>;
    /// [`RunStore::claim`] for the runs `ids` names only (the ones this
    /// process just made claimable): each that is claimable now is taken,
    /// the others (gone, leased, still waiting) are passed over. A lookup
    /// by id, where `claim` searches every run that may need a driver.
    async fn claim_runs(
        &self,
        now: i64,
        ids: &[String],
        rule: ClaimRule,
    ) -> Result<Vec<Run>, StoreError>;
    /// Deletes each of `runs` with everything it owns (steps, approvals,
    /// events, model calls), in one transaction, if it is still one of the
    /// runs `q` selects and its journal is still as long as it was read.
    /// Returns the ids deleted; a run that no longer qualifies is left.
    async fn delete_runs(&self, runs: &[Doomed], q: &Finished) -> Result<Vec<String>, StoreError>;
    /// What the store's writer has done so far (group commit).
    fn writer_stats(&self) -> WriterStats {
        WriterStats::default()
    }
}

/// The transition a claimer commits for a run it found (its lease).
pub type ClaimRule = std::sync::Arc<dyn Fn(&Run) -> Result<Transition, StoreError> + Send + Sync>;

/// Whether a run needs a driver at `now`: it is running or parked past its
/// time to retry, or waits for an approval that was answered or expired,
/// and nobody holds a live lease on it. Engines select by the same rule in
/// SQL (`CLAIMABLE_SQL`); this is its meaning.
pub fn claimable(run: &Run, approvals: &[Approval], now: i64) -> bool {
    let free = run.lease_expires.is_none_or(|e| e <= now) || run.lease_owner.is_none();
    let wants = match run.status {
        RunStatus::Running => true,
        RunStatus::Parked => run.retry_at.is_none_or(|t| t <= now),
        RunStatus::WaitingForApproval => !approvals
            .iter()
            .any(|a| a.status == ApprovalStatus::Pending && a.expires_at.is_none_or(|e| e > now)),
        _ => false,
    };
    free && wants
}

/// [`claimable`] as a SQL condition over a `runs` row, with the time as
/// parameter `$NOW` (each engine substitutes its placeholder).
pub const CLAIMABLE_SQL: &str =
    "(runs.lease_owner IS NULL OR runs.lease_expires IS NULL OR runs.lease_expires <= $NOW)
  AND (runs.status = 'running'
    OR (runs.status = 'parked' AND (runs.retry_at IS NULL OR runs.retry_at <= $NOW))
    OR (runs.status = 'waiting_for_approval' AND NOT EXISTS (
          SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.status = 'pending'
            AND (a.expires_at IS NULL OR a.expires_at > $NOW))))";

/// What a store's writer has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transitions committed (each its own compare-and-set).
    pub transitions: u64,
    /// Transactions that carried them (one sync each).
    pub transactions: u64,
    /// Of those transactions, the ones a caller committed on its own thread
    /// because the store was idle (SQLite).
    pub inline: u64,
    /// Wall time the writer spent on its jobs (statements, commits, the
    /// syncs it waited for), as against waiting for work. Next to a load's
    /// wall time it says how close the one writer is to being what limits
    /// throughput.
    pub busy: std::time::Duration,
}
