//! The PostgreSQL engine: a database that many Keel processes share.
//!
//! Writes go through one writer task per process, which owns a connection
//! and commits whatever has queued as one transaction (group commit: one
//! WAL flush for many runs' transitions, each still its own
//! compare-and-set, see `apply`). Reads, heartbeats and claims use a
//! small pool of other connections. A lost connection fails the writes in
//! flight with [`StoreError::Unavailable`] (the server rolls back what was
//! not committed); the next write connects again.

mod apply;
mod conn;
mod rows;
mod schema;

pub use schema::{CURRENT_VERSION, MIGRATIONS};

use super::encode::{Prepared, Write, Written};
use super::{
    ClaimRule, Committed, Event, NewEvent, RunReader, RunStore, StoreError, StoredModelCall,
    Transition, Wanted, WriterStats,
};
use crate::types::*;
use conn::{Conn, Pool};
use rows::{read_approval, read_event, read_model_call, read_run, read_step};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// The most transitions committed together.
const MAX_GROUP: usize = 512;

/// Writer tasks, each with its connection, taking groups from one queue:
/// while one group waits on the server (its statements, its commit's
/// flush), the next is sent on the other connection.
pub const WRITERS: usize = 2;

/// Connections for reads, heartbeats and claims, besides the writers'.
const POOL_SIZE: usize = 4;

static GET_RUN: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {} FROM runs WHERE id = $1", rows::RUN_COLUMNS));
static LIST_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM runs WHERE ($1::text IS NULL OR status = $1)
           AND ($3::text IS NULL OR (created_at, id) <
                (SELECT b.created_at, b.id FROM runs b WHERE b.id = $3))
           AND ($4::text IS NULL OR strpos(goal, $4) > 0)
         ORDER BY created_at DESC, id DESC LIMIT $2",
        rows::RUN_COLUMNS
    )
});
/// [`super::FINISHED_SQL`] with the statuses as a `text[]` at `$1` and
/// the time at `$2`.
static FINISHED: LazyLock<String> = LazyLock::new(|| {
    super::FINISHED_SQL
        .replace("$STATUSES", "(SELECT unnest($1::text[]))")
        .replace("$BEFORE", "$2")
});
static FINISHED_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM runs WHERE {}
           AND ($3::bigint IS NULL OR (runs.updated_at, runs.id) > ($3, $4::text))
         ORDER BY runs.updated_at, runs.id LIMIT $5",
        rows::RUN_COLUMNS,
        FINISHED.as_str()
    )
});
/// The runs of a prune that still qualify, locked until its deletes commit.
static DOOMED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT runs.id FROM runs
           JOIN unnest($3::text[], $4::bigint[]) AS d(id, len)
             ON runs.id = d.id AND runs.chain_len = d.len
         WHERE {} FOR UPDATE OF runs",
        FINISHED.as_str()
    )
});
static STEPS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM steps WHERE run_id = $1 ORDER BY idx",
        rows::STEP_COLUMNS
    )
});
static APPROVALS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM approvals WHERE run_id = $1 ORDER BY created_at, id",
        rows::APPROVAL_COLUMNS
    )
});
static LIST_APPROVALS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM approvals WHERE ($1::text IS NULL OR status = $1)
         ORDER BY created_at, id LIMIT $2",
        rows::APPROVAL_COLUMNS
    )
});
static APPROVAL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM approvals WHERE id = $1",
        rows::APPROVAL_COLUMNS
    )
});
const EVENTS_OF_RUN: &str = "SELECT seq, run_id, step_idx, kind, data, at FROM events
     WHERE run_id = $2 AND seq > $1 ORDER BY seq LIMIT $3";
const EVENTS_OF_ALL: &str = "SELECT seq, run_id, step_idx, kind, data, at FROM events
     WHERE seq > $1 ORDER BY seq LIMIT $2";
const CHAINED_EVENTS: &str = "SELECT seq, pos, step_idx, kind, data, at, seals, hash
     FROM events WHERE run_id = $1 ORDER BY seq";
const MODEL_CALLS: &str = "SELECT step_idx, provider, prompt_tokens, completion_tokens,
        outcome, error, latency_ms, at FROM model_calls WHERE run_id = $1 ORDER BY id";
const HEARTBEAT: &str = "UPDATE runs SET lease_expires = $3 WHERE id = $1 AND lease_owner = $2";
const RELEASE: &str =
    "UPDATE runs SET lease_owner = NULL, lease_expires = NULL WHERE id = $1 AND lease_owner = $2";
/// Runs that need a driver, locked for the claim; rows another claimer
/// holds are passed over (`SKIP LOCKED`), so claimers do not queue.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM runs WHERE {} ORDER BY updated_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
        rows::RUN_COLUMNS,
        super::CLAIMABLE_SQL.replace("$NOW", "$1")
    )
});

/// [`CLAIM`] for the runs whose ids are `$2` only.
static CLAIM_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM runs WHERE id = ANY($2) AND {} FOR UPDATE SKIP LOCKED",
        rows::RUN_COLUMNS,
        super::CLAIMABLE_SQL.replace("$NOW", "$1")
    )
});

/// A PostgreSQL store: cloneable, shared by the runs of a process.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// `None` when opened for reading only.
    writer: Option<mpsc::UnboundedSender<Job>>,
    counters: Arc<Counters>,
}

type Reply = oneshot::Sender<(Box<Prepared>, Result<Written, StoreError>)>;

struct Job(Box<Prepared>, Reply);

#[derive(Default)]
struct Counters {
    transitions: AtomicU64,
    transactions: AtomicU64,
    busy_ns: AtomicU64,
}

impl PgStore {
    /// Connects to the database at `url`. A writer creates or migrates
    /// Keel's tables and checks that its role may write them; a reader
    /// (`writable` false) only checks that the database is Keel's, at a
    /// version it can read. Errors name the server without the password.
    pub async fn open(url: &str, writable: bool) -> Result<PgStore, StoreError> {
        let shown = super::location::redact_url(url);
        let cfg = conn::config(url, &shown)?;
        let first = conn::connect(&cfg, &shown).await?;
        if writable {
            schema::migrate(&first, &shown).await?;
        } else {
            schema::check_readable(&first, &shown).await?;
        }
        let counters = Arc::new(Counters::default());
        let writer = writable.then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            for _ in 0..WRITERS {
                tokio::spawn(writer(
                    cfg.clone(),
                    shown.clone(),
                    rx.clone(),
                    counters.clone(),
                ));
            }
            tx
        });
        Ok(PgStore {
            inner: Arc::new(Inner {
                pool: Pool::new(cfg, shown, POOL_SIZE, first),
                writer,
                counters,
            }),
        })
    }

    /// The database's URL without its password.
    pub fn location(&self) -> &str {
        self.inner.pool.shown()
    }

    async fn write(&self, w: Write) -> Result<Committed, StoreError> {
        let tx = self.inner.writer.as_ref().ok_or(StoreError::ReadOnly)?;
        let w = Prepared::new(w)?;
        let (reply, rx) = oneshot::channel();
        tx.send(Job(Box::new(w), reply))
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))?;
        let (w, written) = rx
            .await
            .map_err(|_| StoreError::Refused("the store writer has stopped".into()))?;
        Ok(w.committed(written?))
    }
}

/// A writer task: takes whatever has queued (up to [`MAX_GROUP`]) and
/// commits it as one transaction, connecting again after a loss. The
/// writes of one run never travel in two groups at once (a run's loop
/// waits for each commit); an operator's write racing a loop's is settled
/// by the row lock and the compare-and-set, and event numbers follow
/// commit order whichever writer commits first.
async fn writer(
    cfg: tokio_postgres::Config,
    shown: String,
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
    counters: Arc<Counters>,
) {
    let mut conn: Option<Conn> = None;
    let mut group: Vec<Job> = Vec::new();
    loop {
        {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else { break };
            group.push(first);
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(j) => group.push(j),
                    Err(_) => break,
                }
            }
        }
        let woke = Instant::now();
        if let Err(e) = begun(&mut conn, &cfg, &shown).await {
            let detail = match e {
                StoreError::Unavailable { detail } => detail,
                e => e.to_string(),
            };
            for Job(w, reply) in group.drain(..) {
                let err = StoreError::Unavailable {
                    detail: detail.clone(),
                };
                let _ = reply.send((w, Err(err)));
            }
            continue;
        }
        let Some(c) = conn.as_ref() else { continue };
        let ws: Vec<&Prepared> = group.iter().map(|Job(w, _)| &**w).collect();
        let results = apply::write_group(c, &ws).await;
        drop(ws);
        counters.transactions.fetch_add(1, Ordering::Relaxed);
        counters
            .transitions
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        match results {
            Ok(results) => {
                for (r, Job(w, reply)) in results.into_iter().zip(group.drain(..)) {
                    let _ = reply.send((w, r));
                }
            }
            Err(e) => {
                for Job(w, reply) in group.drain(..) {
                    let _ = reply.send((w, Err(same_error(&e))));
                }
            }
        }
        let busy = u64::try_from(woke.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counters.busy_ns.fetch_add(busy, Ordering::Relaxed);
    }
}

/// A connection with a transaction begun on it. A connection that died
/// while idle (the server restarted, a proxy dropped it) fails at `BEGIN`,
/// before anything of the group was sent: it is replaced once, so that a
/// restart between two writes costs no run anything.
async fn begun(
    conn: &mut Option<Conn>,
    cfg: &tokio_postgres::Config,
    shown: &str,
) -> Result<(), StoreError> {
    if let Some(c) = conn.as_ref().filter(|c| !c.is_closed()) {
        if apply::begin(c).await.is_ok() {
            return Ok(());
        }
    }
    *conn = None;
    let c = conn::connect(cfg, shown).await?;
    apply::begin(&c).await?;
    *conn = Some(c);
    Ok(())
}

/// The error every member of a failed group gets.
fn same_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable { detail } => StoreError::Unavailable {
            detail: detail.clone(),
        },
        StoreError::DiskFull => StoreError::DiskFull,
        StoreError::ReadOnly => StoreError::ReadOnly,
        StoreError::NotPermitted(m) => StoreError::NotPermitted(m.clone()),
        other => StoreError::Refused(format!("group commit failed: {other}")),
    }
}

#[async_trait::async_trait]
impl RunReader for PgStore {
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c.query(GET_RUN.as_str(), &[&id]).await?;
        rows.first().map(read_run).transpose()
    }
    async fn find_runs(&self, q: &super::RunQuery) -> Result<Vec<Run>, StoreError> {
        let c = self.inner.pool.get().await?;
        let status = q.status.map(|s| s.as_str());
        let rows = c
            .query(
                LIST_RUNS.as_str(),
                &[&status, &i64::from(q.limit), &q.before, &q.goal_contains],
            )
            .await?;
        rows.iter().map(read_run).collect()
    }
    async fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<Approval>, StoreError> {
        let c = self.inner.pool.get().await?;
        let status = status.map(|s| s.as_str());
        let rows = c
            .query(LIST_APPROVALS.as_str(), &[&status, &i64::from(limit)])
            .await?;
        rows.iter().map(read_approval).collect()
    }
    async fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c
            .query("SELECT status, count(*) FROM runs GROUP BY status", &[])
            .await?;
        let bad = |e: tokio_postgres::Error| StoreError::BadRow(e.to_string());
        let mut out = Vec::new();
        for r in &rows {
            let status: String = r.try_get(0).map_err(bad)?;
            let n: i64 = r.try_get(1).map_err(bad)?;
            out.push((status.parse().map_err(StoreError::BadRow)?, n as u64));
        }
        Ok(out)
    }
    async fn last_event_seq(&self) -> Result<i64, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c
            .query("SELECT COALESCE(MAX(seq), 0)::bigint FROM events", &[])
            .await?;
        rows.first()
            .map_or(Ok(0), |r| r.try_get(0))
            .map_err(|e| StoreError::BadRow(e.to_string()))
    }
    async fn steps(&self, run_id: &str) -> Result<Vec<Step>, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c.query(STEPS.as_str(), &[&run_id]).await?;
        rows.iter().map(read_step).collect()
    }
    async fn approvals(&self, run_id: &str) -> Result<Vec<Approval>, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c.query(APPROVALS.as_str(), &[&run_id]).await?;
        rows.iter().map(read_approval).collect()
    }
    async fn approval(&self, id: &str) -> Result<Approval, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c.query(APPROVAL.as_str(), &[&id]).await?;
        match rows.first() {
            Some(r) => read_approval(r),
            None => Err(StoreError::ApprovalNotFound(id.to_string())),
        }
    }
    async fn events_after(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let c = self.inner.pool.get().await?;
        let limit = i64::from(limit);
        let rows = match run_id {
            Some(id) => c.query(EVENTS_OF_RUN, &[&after, &id, &limit]).await?,
            None => c.query(EVENTS_OF_ALL, &[&after, &limit]).await?,
        };
        rows.iter().map(read_event).collect()
    }
    async fn model_calls(&self, run_id: &str) -> Result<Vec<StoredModelCall>, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c.query(MODEL_CALLS, &[&run_id]).await?;
        rows.iter().map(read_model_call).collect()
    }
    async fn finished_runs(&self, q: &super::Finished) -> Result<Vec<Run>, StoreError> {
        let c = self.inner.pool.get().await?;
        let (at, id) = match &q.after {
            Some((at, id)) => (Some(*at), Some(id.as_str())),
            None => (None, None),
        };
        let rows = c
            .query(
                FINISHED_RUNS.as_str(),
                &[&q.status_names(), &q.before, &at, &id, &i64::from(q.limit)],
            )
            .await?;
        rows.iter().map(read_run).collect()
    }
    async fn journal(&self, run_id: &str) -> Result<super::Journal, StoreError> {
        let c = self.inner.pool.get().await?;
        // One snapshot for every read, so that the run row's chain and
        // the events agree while writers go on.
        c.batch("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let read = journal_in(&c, run_id).await;
        let end = c
            .batch(if read.is_ok() { "COMMIT" } else { "ROLLBACK" })
            .await;
        let j = read?;
        end?;
        Ok(j)
    }
    async fn count_events(&self) -> Result<u64, StoreError> {
        let c = self.inner.pool.get().await?;
        let rows = c.query("SELECT count(*) FROM events", &[]).await?;
        let n: i64 = rows
            .first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| StoreError::BadRow(e.to_string()))?
            .unwrap_or(0);
        Ok(n as u64)
    }
}

/// A run's rows on `c`, inside the caller's transaction.
async fn journal_in(c: &Conn, run_id: &str) -> Result<super::Journal, StoreError> {
    let bad = |e: tokio_postgres::Error| StoreError::BadRow(e.to_string());
    let rows = c.query(GET_RUN.as_str(), &[&run_id]).await?;
    let run = match rows.first() {
        Some(r) => read_run(r)?,
        None => return Err(StoreError::RunNotFound(run_id.to_string())),
    };
    let rows = c
        .query("SELECT limits FROM runs WHERE id = $1", &[&run_id])
        .await?;
    let limits: String = match rows.first() {
        Some(r) => r.try_get(0).map_err(bad)?,
        None => return Err(StoreError::RunNotFound(run_id.to_string())),
    };
    let steps = c.query(STEPS.as_str(), &[&run_id]).await?;
    let approvals = c.query(APPROVALS.as_str(), &[&run_id]).await?;
    let events = c.query(CHAINED_EVENTS, &[&run_id]).await?;
    let calls = c.query(MODEL_CALLS, &[&run_id]).await?;
    Ok(super::Journal {
        run,
        limits,
        steps: steps
            .iter()
            .map(rows::read_step_row)
            .collect::<Result<_, _>>()?,
        approvals: approvals
            .iter()
            .map(rows::read_approval_row)
            .collect::<Result<_, _>>()?,
        events: events
            .iter()
            .map(rows::read_chained_event)
            .collect::<Result<_, _>>()?,
        model_calls: calls
            .iter()
            .map(read_model_call)
            .collect::<Result<_, _>>()?,
    })
}

#[async_trait::async_trait]
impl RunStore for PgStore {
    async fn create_run(
        &self,
        run: Run,
        steps: Vec<Step>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError> {
        self.write(Write::Create { run, steps, events }).await
    }
    async fn commit(&self, t: Transition) -> Result<Committed, StoreError> {
        self.write(Write::Transition(t)).await
    }
    async fn heartbeat(
        &self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        if self.inner.writer.is_none() {
            return Err(StoreError::ReadOnly);
        }
        let c = self.inner.pool.get().await?;
        let n = c
            .execute(HEARTBEAT, &[&run_id, &owner, &(now + ttl_ms)])
            .await?;
        Ok(n == 1)
    }
    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        if self.inner.writer.is_none() {
            return Err(StoreError::ReadOnly);
        }
        let c = self.inner.pool.get().await?;
        c.execute(RELEASE, &[&run_id, &owner]).await?;
        Ok(())
    }
    async fn claim(&self, now: i64, limit: u32, rule: ClaimRule) -> Result<Vec<Run>, StoreError> {
        self.claim_where(now, Wanted::Any(limit), &rule).await
    }
    async fn claim_runs(
        &self,
        now: i64,
        ids: &[String],
        rule: ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        self.claim_where(now, Wanted::Runs(ids), &rule).await
    }
    async fn delete_runs(
        &self,
        runs: &[super::Doomed],
        q: &super::Finished,
    ) -> Result<Vec<String>, StoreError> {
        if self.inner.writer.is_none() {
            return Err(StoreError::ReadOnly);
        }
        let c = self.inner.pool.get().await?;
        c.batch("BEGIN").await?;
        let done = delete_locked(&c, runs, q).await;
        match done {
            Ok(ids) => {
                c.batch("COMMIT").await?;
                Ok(ids)
            }
            Err(e) => {
                let _ = c.batch("ROLLBACK").await;
                Err(e)
            }
        }
    }
    fn writer_stats(&self) -> WriterStats {
        let c = &self.inner.counters;
        WriterStats {
            transitions: c.transitions.load(Ordering::Relaxed),
            transactions: c.transactions.load(Ordering::Relaxed),
            inline: 0,
            busy: std::time::Duration::from_nanos(c.busy_ns.load(Ordering::Relaxed)),
        }
    }
}

impl PgStore {
    /// One claim's transaction ([`RunStore::claim`], [`RunStore::claim_runs`]).
    async fn claim_where(
        &self,
        now: i64,
        wanted: Wanted<'_>,
        rule: &ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        if self.inner.writer.is_none() {
            return Err(StoreError::ReadOnly);
        }
        let c = self.inner.pool.get().await?;
        // A claim moves only leases: its commit need not wait for the
        // server's WAL flush. The claimed run's first transition waits for
        // a flush that covers the claim too, before the run does anything
        // that lasts; a server crash that loses the claim fails that
        // transition's compare-and-set instead (`docs/guarantees.md`).
        c.batch("BEGIN; SET LOCAL synchronous_commit = off").await?;
        let done = claim_locked(&c, now, wanted, rule).await;
        match done {
            Ok(runs) => {
                c.batch("COMMIT").await?;
                Ok(runs)
            }
            Err(e) => {
                let _ = c.batch("ROLLBACK").await;
                Err(e)
            }
        }
    }
}

/// Inside a prune's transaction: lock the runs that still qualify, then
/// delete what each owns and the run itself.
async fn delete_locked(
    c: &Conn,
    runs: &[super::Doomed],
    q: &super::Finished,
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<&str> = runs.iter().map(|d| d.id.as_str()).collect();
    let lens: Vec<i64> = runs.iter().map(|d| d.chain_len as i64).collect();
    let rows = c
        .query(
            DOOMED.as_str(),
            &[&q.status_names(), &q.before, &ids, &lens],
        )
        .await?;
    let doomed = rows
        .iter()
        .map(|r| r.try_get::<_, String>(0))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::BadRow(e.to_string()))?;
    if doomed.is_empty() {
        return Ok(doomed);
    }
    for sql in [
        "DELETE FROM events WHERE run_id = ANY($1)",
        "DELETE FROM model_calls WHERE run_id = ANY($1)",
        "DELETE FROM approvals WHERE run_id = ANY($1)",
        "DELETE FROM steps WHERE run_id = ANY($1)",
        "DELETE FROM runs WHERE id = ANY($1)",
    ] {
        c.execute(sql, &[&doomed]).await?;
    }
    Ok(doomed)
}

/// Inside the claim's transaction: lock the runs that need a driver
/// (passing over those another claimer holds), and commit the rule's
/// transition for each with the group's statements.
async fn claim_locked(
    c: &Conn,
    now: i64,
    wanted: Wanted<'_>,
    rule: &ClaimRule,
) -> Result<Vec<Run>, StoreError> {
    let rows = match wanted {
        Wanted::Any(limit) => c.query(CLAIM.as_str(), &[&now, &i64::from(limit)]).await?,
        Wanted::Runs(ids) => c.query(CLAIM_RUNS.as_str(), &[&now, &ids]).await?,
    };
    let mut prepared = Vec::new();
    for r in &rows {
        let run = read_run(r)?;
        if let Ok(t) = rule(&run) {
            prepared.push(Prepared::new(Write::Transition(t))?);
        }
    }
    let refs: Vec<&Prepared> = prepared.iter().collect();
    let results = apply::apply(c, &refs).await?;
    let mut claimed = Vec::new();
    for (p, r) in prepared.into_iter().zip(results) {
        if let Ok(w) = r {
            claimed.push(p.committed(w).run);
        }
    }
    Ok(claimed)
}
