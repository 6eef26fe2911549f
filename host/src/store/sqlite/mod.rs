//! The SQLite engine: one file in WAL mode.
//!
//! Every state transition of a run is one transaction that also inserts its
//! events, and every write is a compare-and-set on the run's status and lease
//! owner. Writers sync every commit (`synchronous=FULL` by default). Operator
//! tools open the file read-only: that never migrates and never writes.

mod apply;
mod errors;
mod reader;
mod rows;
mod schema;
mod writer;

pub use reader::ReadOnlyStore;
pub use schema::{CURRENT_VERSION, MIGRATIONS};
pub use writer::{StoreHandle, MAX_GROUP, WRITER_THREAD};

use super::encode::{ApprovalRow, Prepared, StepRow, Write, Written};
use super::{Committed, Event, NewEvent, StoreError, StoredModelCall, Transition, Wanted};
use crate::types::*;
use rows::{read_event, read_run, APPROVAL_COLUMNS, RUN_COLUMNS, STEP_COLUMNS};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

/// How long a writer waits for another writer's lock before giving up.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;

/// WAL pages (4 KiB each: 64 MiB) after which a commit copies the log back
/// into the database file. SQLite's default, 1,000 pages, checkpointed
/// every ~160 runs of the fan-out: each checkpoint copies every page the
/// log holds and syncs the file, and a run's pages are rewritten many
/// times between two checkpoints. Fewer, larger checkpoints copy each page
/// once for many commits: 6-7% off the fan-out's wall time
/// (BENCHMARKS.md). The price is a log of up to this size on disk, read
/// once when a store is opened after a crash.
pub const WAL_CHECKPOINT_PAGES: u32 = 16_000;

/// How commits reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is synced: a transition that returned survives power loss.
    #[default]
    Full,
    /// WAL default: survives a crash of the process, may lose the last
    /// commits on power loss. Only for benchmarks and tests.
    Normal,
}

/// A handle on the store file.
pub struct Store {
    conn: Connection,
    path: String,
    read_only: bool,
    /// How this connection's commits reach the disk, as opened.
    sync: Durability,
}

/// Keeps each prepared statement's first plan (SQLite's query planner
/// stability guarantee). Without it, SQLite compiles a statement again
/// after every new binding of a value its plan could depend on (`run_id =
/// ?1` on an index, `LIMIT ?3`), which defeats the statement cache: a
/// cached statement is parsed and planned on each execution. Keel's
/// statements have one good plan whatever the values.
fn plan_once(conn: &Connection) -> Result<(), StoreError> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

impl Store {
    /// Opens (creating and migrating as needed) a store for writing.
    pub fn open(path: impl AsRef<Path>, sync: Durability) -> Result<Store, StoreError> {
        let p = path.as_ref();
        let path_s = p.display().to_string();
        probe_writable(p)?;
        let conn = Connection::open_with_flags(
            p,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify_open(&path_s, e))?;
        let mut store = Store {
            conn,
            path: path_s,
            read_only: false,
            sync,
        };
        // Processes opening a new store at once contend for the switch to
        // WAL and for the migration, and SQLite answers some of those
        // contentions with an immediate "busy" that no busy handler waits
        // out: try again, within the same time a writer waits for a lock.
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match store.configure_writer(sync).and_then(|()| store.migrate()) {
                Err(StoreError::Locked { .. })
                    if started.elapsed() < Duration::from_millis(BUSY_TIMEOUT_MS) =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => return other.map(|()| store),
            }
        }
    }

    /// A private in-memory store (tests, benchmarks, the fan-out comparison).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory()?;
        plan_once(&conn)?;
        let mut store = Store {
            conn,
            path: ":memory:".into(),
            read_only: false,
            sync: Durability::Normal,
        };
        store
            .conn
            .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
        store.migrate()?;
        Ok(store)
    }

    /// Opens an existing store for reading only: never creates, migrates or
    /// writes. A store with a newer schema is still readable if it can be
    /// decoded, but a foreign or corrupt file is refused.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let p = path.as_ref();
        let path_s = p.display().to_string();
        if !p.exists() {
            return Err(StoreError::Missing { path: path_s });
        }
        if p.is_dir() {
            return Err(StoreError::Unusable {
                path: path_s,
                why: "it is a directory, not a store file".into(),
            });
        }
        let conn = Connection::open_with_flags(
            p,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify_open(&path_s, e))?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
        plan_once(&conn)?;
        let store = Store {
            conn,
            path: path_s,
            read_only: true,
            sync: Durability::Full,
        };
        let (app, version) = store.identity()?;
        if version == 0 {
            return Err(StoreError::Uninitialised {
                path: store.path.clone(),
            });
        }
        if app != schema::APPLICATION_ID {
            return Err(StoreError::Foreign {
                path: store.path.clone(),
                what: "a SQLite database",
                detail: format!("application id {app:#x}"),
            });
        }
        if version > CURRENT_VERSION {
            return Err(StoreError::TooNew {
                path: store.path.clone(),
                found: version,
                supported: CURRENT_VERSION,
            });
        }
        if version < CURRENT_VERSION {
            return Err(StoreError::Unusable {
                path: store.path.clone(),
                why: format!(
                    "its schema is version {version} and this keel reads version {CURRENT_VERSION}; \
                     a command that writes (such as `keel serve` or `keel resume`) migrates it"
                ),
            });
        }
        Ok(store)
    }

    /// The path the store was opened at, as given (`:memory:` for an in-memory
    /// store).
    pub fn path(&self) -> &str {
        &self.path
    }

    fn configure_writer(&mut self, sync: Durability) -> Result<(), StoreError> {
        self.conn
            .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
        plan_once(&self.conn)?;
        // The first statement that reads the file tells a corrupt file apart.
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| classify_open(&self.path, e))?;
        if mode != "wal" && self.path != ":memory:" {
            return Err(StoreError::Refused(format!(
                "{}: cannot switch to WAL mode (got {mode})",
                self.path
            )));
        }
        let sync = match sync {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        self.conn.execute_batch(&format!(
            "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON;
             PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES};
             PRAGMA journal_size_limit={};",
            WAL_CHECKPOINT_PAGES as u64 * 4096
        ))?;
        self.conn.set_prepared_statement_cache_capacity(64);
        Ok(())
    }

    fn identity(&self) -> Result<(i64, i64), StoreError> {
        let app: i64 = self
            .conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| classify_open(&self.path, e))?;
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        Ok((app, version))
    }

    /// Creates or migrates the schema. The version is read inside the
    /// write transaction that migrates, so that processes opening a new
    /// store at once serialise on its lock: the first migrates, the others
    /// then read the version it wrote and find nothing to do.
    fn migrate(&mut self) -> Result<(), StoreError> {
        let (_, version) = self.identity()?;
        if version == CURRENT_VERSION {
            return self.check_identity();
        }
        // Unchecked, so that the backfill can read through `self` inside it.
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
        let app: i64 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > CURRENT_VERSION {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
                supported: CURRENT_VERSION,
            });
        }
        let has_tables: i64 =
            tx.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if app != schema::APPLICATION_ID && (version != 0 || has_tables != 0) {
            return Err(StoreError::Foreign {
                path: self.path.clone(),
                what: "a SQLite database",
                detail: format!("application id {app:#x}"),
            });
        }
        if version == CURRENT_VERSION {
            return Ok(()); // another process migrated it meanwhile
        }
        for (i, m) in schema::MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(m)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        }
        // Linked once every migration is in: the backfill reads the
        // journal as this version reads it.
        if version > 0 && (version as usize) <= schema::CHAIN_MIGRATION {
            self.backfill_chain()?;
        }
        tx.pragma_update(None, "application_id", schema::APPLICATION_ID)?;
        tx.commit()?;
        Ok(())
    }

    /// A store already at the current version must still be Keel's.
    fn check_identity(&self) -> Result<(), StoreError> {
        let (app, _) = self.identity()?;
        if app != schema::APPLICATION_ID {
            return Err(StoreError::Foreign {
                path: self.path.clone(),
                what: "a SQLite database",
                detail: format!("application id {app:#x}"),
            });
        }
        Ok(())
    }

    fn writable(&self) -> Result<(), StoreError> {
        if self.read_only {
            Err(StoreError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Inserts a new run (status `running`, leased to `run.lease_owner`) with
    /// its `run.started` event.
    pub fn create_run(
        &mut self,
        run: &Run,
        events: Vec<NewEvent>,
    ) -> Result<Committed, StoreError> {
        self.commit_prepared_one(Prepared::new(Write::Create {
            run: run.clone(),
            steps: vec![],
            events,
        })?)
    }

    /// Applies one transition in its own transaction.
    pub fn commit(&mut self, t: Transition) -> Result<Committed, StoreError> {
        self.commit_prepared_one(Prepared::new(Write::Transition(t))?)
    }

    /// Applies many runs' writes in one transaction (group commit): one
    /// sync covers them all, and each keeps its own compare-and-set. A
    /// write's first statement is its compare-and-set (or, for a new run,
    /// its insert), so a write that fails there has written nothing and the
    /// others go on. Should a write fail later, part-way through, the group
    /// is rolled back and committed again one write per transaction, so
    /// that only the faulty write fails.
    pub fn commit_group(
        &mut self,
        ws: Vec<Write>,
    ) -> Result<Vec<Result<Committed, StoreError>>, StoreError> {
        let prepared: Vec<Result<Prepared, StoreError>> =
            ws.into_iter().map(Prepared::new).collect();
        let ready: Vec<&Prepared> = prepared.iter().filter_map(|p| p.as_ref().ok()).collect();
        let mut written = self.write_group(&ready)?.into_iter();
        Ok(prepared
            .into_iter()
            .map(|p| {
                let p = p?;
                let w = written.next().ok_or_else(|| {
                    StoreError::Refused("a group write returned too few results".into())
                })??;
                Ok(p.committed(w))
            })
            .collect())
    }

    /// The statements of a group commit ([`Store::commit_group`]), without
    /// building the results (the writer thread leaves that to each caller).
    pub(crate) fn write_group(
        &mut self,
        ws: &[&Prepared],
    ) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
        self.writable()?;
        match self.try_group(ws) {
            Ok(out) => Ok(out),
            Err(_) => Ok(ws.iter().map(|w| self.write_one(w)).collect()),
        }
    }

    fn try_group(
        &mut self,
        ws: &[&Prepared],
    ) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut out = Vec::with_capacity(ws.len());
        {
            let mut stmts = apply::Statements::new(&tx);
            for w in ws {
                match stmts.write(w) {
                    Ok(c) => out.push(Ok(c)),
                    Err(e) if apply::nothing_written(&w.write, &e) => out.push(Err(e)),
                    Err(e) => return Err(e), // dropping `tx` rolls the group back
                }
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Commits one prepared write in its own transaction.
    fn commit_prepared_one(&mut self, w: Prepared) -> Result<Committed, StoreError> {
        let written = self.write_prepared_one(&w)?;
        Ok(w.committed(written))
    }

    /// The statements of [`Store::commit_prepared_one`].
    pub(crate) fn write_prepared_one(&mut self, w: &Prepared) -> Result<Written, StoreError> {
        self.writable()?;
        self.write_one(w)
    }

    fn write_one(&mut self, w: &Prepared) -> Result<Written, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let done = apply::Statements::new(&tx).write(w)?;
        tx.commit()?;
        Ok(done)
    }

    /// The run with `id`, or `None` when there is no such run.
    pub fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id=?1"))?;
        let mut rows = stmt.query([id])?;
        match rows.next()? {
            Some(r) => Ok(Some(read_run(r)?)),
            None => Ok(None),
        }
    }

    /// The run with `id`, or [`StoreError::RunNotFound`].
    pub fn run(&self, id: &str) -> Result<Run, StoreError> {
        self.get_run(id)?
            .ok_or_else(|| StoreError::RunNotFound(id.to_string()))
    }

    /// Runs, newest first.
    pub fn list_runs(&self, status: Option<RunStatus>, limit: u32) -> Result<Vec<Run>, StoreError> {
        self.find_runs(&crate::store::RunQuery {
            status,
            limit,
            ..Default::default()
        })
    }

    /// A page of runs, newest first (see [`crate::store::RunQuery`]).
    pub fn find_runs(&self, q: &crate::store::RunQuery) -> Result<Vec<Run>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR status=?1)
               AND (?3 IS NULL OR (created_at, id) < (SELECT b.created_at, b.id FROM runs b WHERE b.id=?3))
               AND (?4 IS NULL OR instr(goal, ?4) > 0)
             ORDER BY created_at DESC, id DESC LIMIT ?2"
        ))?;
        let mut rows = stmt.query(params![
            q.status.map(|s| s.as_str()),
            q.limit,
            q.before,
            q.goal_contains
        ])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(read_run(r)?);
        }
        Ok(out)
    }

    /// Approvals of every run with `status` (any if `None`), oldest first.
    pub fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<Approval>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE (?1 IS NULL OR status=?1)
             ORDER BY created_at, id LIMIT ?2"
        ))?;
        let rows = stmt.query_map(
            params![status.map(|s| s.as_str()), limit],
            ApprovalRow::read,
        )?;
        rows.map(|r| r.map_err(StoreError::from).and_then(|r| r.decode()))
            .collect()
    }

    /// How many runs are in each status.
    pub fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT status, count(*) FROM runs GROUP BY status")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        let mut out = Vec::new();
        for r in rows {
            let (status, n) = r?;
            let status: RunStatus = status.parse().map_err(StoreError::BadRow)?;
            out.push((status, n as u64));
        }
        Ok(out)
    }

    /// The newest event's number (0 when there is none).
    pub fn last_event_seq(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM events", [], |r| r.get(0))?)
    }

    /// A run's step rows as stored, undecoded, in the order of their index.
    pub fn step_rows(&self, run_id: &str) -> Result<Vec<StepRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {STEP_COLUMNS} FROM steps WHERE run_id=?1 ORDER BY idx"
        ))?;
        let rows = stmt.query_map([run_id], StepRow::read)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// A run's steps in the order of their index, decoded from their rows.
    pub fn load_steps(&self, run_id: &str) -> Result<Vec<Step>, StoreError> {
        self.step_rows(run_id)?
            .iter()
            .map(StepRow::decode)
            .collect()
    }

    /// A run's approval rows as stored, undecoded, oldest first.
    pub fn approval_rows(&self, run_id: &str) -> Result<Vec<ApprovalRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id=?1 ORDER BY created_at, id"
        ))?;
        let rows = stmt.query_map([run_id], ApprovalRow::read)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// A run's approvals, oldest first, decoded from their rows.
    pub fn load_approvals(&self, run_id: &str) -> Result<Vec<Approval>, StoreError> {
        self.approval_rows(run_id)?
            .iter()
            .map(ApprovalRow::decode)
            .collect()
    }

    /// The approval with `id`, or [`StoreError::ApprovalNotFound`].
    pub fn approval(&self, id: &str) -> Result<Approval, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id=?1"
        ))?;
        let row = stmt.query_row([id], ApprovalRow::read).optional()?;
        row.ok_or_else(|| StoreError::ApprovalNotFound(id.to_string()))?
            .decode()
    }

    /// Events with a sequence number above `after`, oldest first; all runs'
    /// when `run_id` is `None`. Followers poll this.
    pub fn events_after(
        &self,
        run_id: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        // Two statements, so that one run's events are found through its
        // index (`run_id IS NULL OR ...` would read every later event).
        let mut stmt = match run_id {
            Some(_) => self.conn.prepare_cached(
                "SELECT seq, run_id, step_idx, kind, data, at FROM events
                 WHERE run_id = ?2 AND seq > ?1 ORDER BY seq LIMIT ?3",
            )?,
            None => self.conn.prepare_cached(
                "SELECT seq, run_id, step_idx, kind, data, at FROM events
                 WHERE seq > ?1 AND ?2 IS NULL ORDER BY seq LIMIT ?3",
            )?,
        };
        let rows = stmt.query_map(params![after, run_id, limit], read_event)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// A run's model calls (every attempt, refused ones included), in order.
    pub fn model_calls(&self, run_id: &str) -> Result<Vec<StoredModelCall>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT step_idx, provider, prompt_tokens, completion_tokens, outcome, error, latency_ms, at
             FROM model_calls WHERE run_id=?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(StoredModelCall {
                step_index: r.get(0)?,
                provider: r.get(1)?,
                prompt_tokens: r.get(2)?,
                completion_tokens: r.get(3)?,
                outcome: r.get(4)?,
                error: r.get(5)?,
                latency_ms: r.get(6)?,
                at: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The run's rows as stored, in one read transaction
    /// ([`crate::store::Journal`]).
    pub fn journal(&self, run_id: &str) -> Result<crate::store::Journal, StoreError> {
        // A deferred transaction that only reads: one snapshot, rolled
        // back when dropped.
        let tx = self.conn.unchecked_transaction()?;
        let j = self.journal_rows(run_id);
        drop(tx);
        j
    }

    /// [`Store::journal`] inside the caller's transaction.
    fn journal_rows(&self, run_id: &str) -> Result<crate::store::Journal, StoreError> {
        let tx = &self.conn;
        let run = self
            .get_run(run_id)?
            .ok_or_else(|| StoreError::RunNotFound(run_id.to_string()))?;
        let limits: String =
            tx.query_row("SELECT limits FROM runs WHERE id=?1", [run_id], |r| {
                r.get(0)
            })?;
        let mut stmt = tx.prepare_cached(
            "SELECT seq, pos, step_idx, kind, data, at, seals, hash FROM events
             WHERE run_id=?1 ORDER BY seq",
        )?;
        let events = stmt
            .query_map([run_id], |r| {
                Ok(crate::store::ChainedEvent {
                    seq: r.get(0)?,
                    pos: r.get(1)?,
                    step_index: r.get(2)?,
                    kind: r.get(3)?,
                    data: r.get(4)?,
                    at: r.get(5)?,
                    seals: r.get(6)?,
                    hash: r.get(7)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        drop(stmt);
        let j = crate::store::Journal {
            run,
            limits,
            steps: self.step_rows(run_id)?,
            approvals: self.approval_rows(run_id)?,
            events,
            model_calls: self.model_calls(run_id)?,
        };
        Ok(j)
    }

    /// Links the events of runs written before the chain existed
    /// ([`crate::store::chain::backfill`]), inside the migration's
    /// transaction.
    fn backfill_chain(&self) -> Result<(), StoreError> {
        let ids: Vec<String> = {
            let mut stmt = self.conn.prepare("SELECT id FROM runs ORDER BY id")?;
            let ids = stmt.query_map([], |r| r.get(0))?;
            ids.collect::<Result<_, _>>()?
        };
        for id in ids {
            let Some(b) = crate::store::chain::backfill(&self.journal_rows(&id)?) else {
                continue;
            };
            let mut stmt = self
                .conn
                .prepare_cached("UPDATE events SET pos=?2, seals=?3, hash=?4 WHERE seq=?1")?;
            for (seq, pos, seals, hash) in &b.events {
                stmt.execute(params![seq, pos, seals, hash])?;
            }
            self.conn.execute(
                "UPDATE runs SET chain_len=?2, chain_head=?3 WHERE id=?1",
                params![id, b.len as i64, b.head],
            )?;
        }
        Ok(())
    }

    /// How many events the journal holds.
    pub fn count_events(&self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// Finished runs retention may remove ([`crate::store::Finished`]).
    pub fn finished_runs(&self, q: &crate::store::Finished) -> Result<Vec<Run>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE {}
               AND (?3 IS NULL OR (runs.updated_at, runs.id) > (?3, ?4))
             ORDER BY runs.updated_at, runs.id LIMIT ?5",
            finished_sql("?1", "?2")
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let (at, id) = match &q.after {
            Some((at, id)) => (Some(*at), Some(id.as_str())),
            None => (None, None),
        };
        let statuses = serde_json::to_string(&q.status_names()).unwrap_or_default();
        let mut rows = stmt.query(params![statuses, q.before, at, id, q.limit])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(read_run(r)?);
        }
        Ok(out)
    }

    /// Deletes finished runs with everything they own, in one transaction
    /// ([`crate::store::RunStore::delete_runs`]).
    pub fn delete_runs(
        &mut self,
        runs: &[crate::store::Doomed],
        q: &crate::store::Finished,
    ) -> Result<Vec<String>, StoreError> {
        self.writable()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut deleted = Vec::new();
        {
            let check = format!(
                "SELECT 1 FROM runs WHERE runs.id = ?3 AND runs.chain_len = ?4 AND {}",
                finished_sql("?1", "?2")
            );
            let mut check = tx.prepare_cached(&check)?;
            let statuses = serde_json::to_string(&q.status_names()).unwrap_or_default();
            for d in runs {
                let found = check
                    .query_row(
                        params![statuses, q.before, d.id, d.chain_len as i64],
                        |_| Ok(()),
                    )
                    .optional()?;
                if found.is_none() {
                    continue;
                }
                for sql in [
                    "DELETE FROM events WHERE run_id = ?1",
                    "DELETE FROM model_calls WHERE run_id = ?1",
                    "DELETE FROM approvals WHERE run_id = ?1",
                    "DELETE FROM steps WHERE run_id = ?1",
                    "DELETE FROM runs WHERE id = ?1",
                ] {
                    tx.prepare_cached(sql)?.execute([&d.id])?;
                }
                deleted.push(d.id.clone());
            }
        }
        tx.commit()?;
        Ok(deleted)
    }

    /// Claims up to `limit` runs that need a driver, committing `rule`'s
    /// transition for each in one transaction (see
    /// [`crate::store::RunStore::claim`]); SQLite's write lock keeps other
    /// claimers out meanwhile.
    pub fn claim(
        &mut self,
        now: i64,
        limit: u32,
        rule: &crate::store::ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        self.writable()?;
        self.lease_only(|s| s.claim_in_tx(now, Wanted::Any(limit), rule))
    }

    /// [`Store::claim`] for the runs `ids` names only (see
    /// [`crate::store::RunStore::claim_runs`]).
    pub fn claim_runs(
        &mut self,
        now: i64,
        ids: &[String],
        rule: &crate::store::ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        self.writable()?;
        self.lease_only(|s| s.claim_in_tx(now, Wanted::Runs(ids), rule))
    }

    fn claim_in_tx(
        &mut self,
        now: i64,
        wanted: Wanted<'_>,
        rule: &crate::store::ClaimRule,
    ) -> Result<Vec<Run>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let claimable = crate::store::CLAIMABLE_SQL.replace("$NOW", "?1");
        let mut found = Vec::new();
        match wanted {
            Wanted::Any(limit) => {
                // The first two conditions follow from CLAIMABLE_SQL and
                // are spelled as the `runs_claim` index is, so that only
                // runs whose lease is free are read.
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM runs
                     WHERE status IN ('running', 'parked', 'waiting_for_approval')
                       AND (CASE WHEN lease_owner IS NULL THEN 0 ELSE COALESCE(lease_expires, 0) END) <= ?1
                       AND {claimable}
                     ORDER BY updated_at, id LIMIT ?2"
                );
                let mut stmt = tx.prepare_cached(&sql)?;
                let mut rows = stmt.query(params![now, limit])?;
                while let Some(r) = rows.next()? {
                    found.push(read_run(r)?);
                }
            }
            Wanted::Runs(ids) => {
                let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?2 AND {claimable}");
                let mut stmt = tx.prepare_cached(&sql)?;
                let mut seen = std::collections::HashSet::new();
                for id in ids.iter().filter(|id| seen.insert(id.as_str())) {
                    if let Some(run) = stmt
                        .query_row(params![now, id], |r| Ok(read_run(r)))
                        .optional()?
                    {
                        found.push(run?);
                    }
                }
            }
        }
        let mut claimed = Vec::new();
        {
            let mut stmts = apply::Statements::new(&tx);
            for run in found {
                let Ok(t) = rule(&run) else { continue };
                let p = Prepared::new(Write::Transition(t))?;
                let written = stmts.write(&p)?;
                claimed.push(p.committed(written).run);
            }
        }
        tx.commit()?;
        Ok(claimed)
    }

    /// Runs `write`, a transaction that moves only leases (and may record
    /// a lease's take-over), without syncing its commit: a crash of the
    /// process keeps a WAL commit, and the run's next transition, which
    /// comes before anything the run does that lasts, syncs the log and
    /// this commit with it. Only a power loss can undo the lease, and it
    /// also ends every process that held it (`docs/guarantees.md`).
    fn lease_only<R>(
        &mut self,
        write: impl FnOnce(&mut Store) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        if self.sync == Durability::Normal {
            return write(self);
        }
        // SQLite changes the setting between transactions only.
        self.conn.execute_batch("PRAGMA synchronous=NORMAL")?;
        let out = write(self);
        let restored = self.conn.execute_batch("PRAGMA synchronous=FULL");
        let out = out?;
        restored?;
        Ok(out)
    }

    /// Number of model calls recorded for a run.
    pub fn model_call_count(&self, run_id: &str) -> Result<u32, StoreError> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM model_calls WHERE run_id=?1",
            [run_id],
            |r| r.get(0),
        )?)
    }

    /// Takes the run's lease for `owner` if nobody holds it, it is `owner`'s,
    /// or it expired (recorded as a `lease.taken_over` event).
    pub fn acquire_lease(
        &mut self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<Run, StoreError> {
        self.acquire_lease_as(run_id, owner, now, ttl_ms, None)
    }

    /// [`Store::acquire_lease`], also taking a live lease at once when its
    /// holder is provably gone (a process of this host that no longer
    /// runs), or when `take_over` names the operator who forces it. Either
    /// is recorded in the `lease.taken_over` event with why and by whom. A
    /// terminal run's lease is never taken: its state is final.
    pub fn acquire_lease_as(
        &mut self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
        take_over: Option<&str>,
    ) -> Result<Run, StoreError> {
        self.writable()?;
        use crate::driver::operator::{lease_changed, lease_transition, retried_sync};
        // A conflict means another writer moved the run on since the read:
        // read again, and the rules say what now.
        retried_sync(lease_changed(run_id), || {
            let run = self.run(run_id)?;
            let t = lease_transition(&run, owner, now, ttl_ms, take_over)?;
            Ok(self.commit(t)?.run)
        })
    }

    /// Extends `owner`'s lease. `false` when it no longer holds it.
    pub fn heartbeat(
        &mut self,
        run_id: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        self.writable()?;
        let n = self.lease_only(|s| {
            Ok(s.conn
                .prepare_cached("UPDATE runs SET lease_expires=?3 WHERE id=?1 AND lease_owner=?2")?
                .execute(params![run_id, owner, now + ttl_ms])?)
        })?;
        Ok(n == 1)
    }

    /// Gives the lease up (the loop returns: paused, finished or stopped).
    pub fn release_lease(&mut self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        self.writable()?;
        self.lease_only(|s| {
            s.conn
                .prepare_cached("UPDATE runs SET lease_owner=NULL, lease_expires=NULL WHERE id=?1 AND lease_owner=?2")?
                .execute(params![run_id, owner])?;
            Ok(())
        })
    }

    /// Cancels a run from any process, settling the step it is in and
    /// closing its pending approvals in the same transaction (the rules are
    /// [`crate::driver::operator`]'s). A live loop stops at once, or when
    /// its executing tool returns, and records that tool's result.
    pub fn cancel(&mut self, run_id: &str, who: &str, now: i64) -> Result<Run, StoreError> {
        self.writable()?;
        crate::driver::operator::cancel(self, run_id, who, now)
    }

    /// Records an operator's approval or denial of a pending approval. The
    /// run is left paused; `resume` acts on it.
    pub fn decide_approval(
        &mut self,
        approval_id: &str,
        approve: bool,
        who: &str,
        note: Option<&str>,
        now: i64,
    ) -> Result<Approval, StoreError> {
        use crate::driver::operator::{decided_meanwhile, decision_transition};
        self.writable()?;
        let a = self.approval(approval_id)?;
        let run = self.run(&a.run_id)?;
        let t = decision_transition(&run, &a, approve, who, note, now)?;
        let done = self
            .commit(t)
            .map_err(|e| decided_meanwhile(approval_id, e))?;
        Ok(done.approvals.into_iter().next().unwrap_or(a))
    }

    /// Pending approvals of every run, oldest first.
    pub fn pending_approvals(&self) -> Result<Vec<Approval>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status='pending' ORDER BY created_at, id"
        ))?;
        let rows = stmt.query_map([], ApprovalRow::read)?;
        rows.map(|r| r.map_err(StoreError::from).and_then(|r| r.decode()))
            .collect()
    }

    /// Direct access for tests that tamper with rows (`test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// Says why `p` cannot be a writable store before SQLite tries: SQLite
/// reports a directory, a read-only mount and a permission problem alike
/// ("unable to open database file"), or silently opens a read-only file
/// read-only. Creating the file here is what SQLite would do next.
fn probe_writable(p: &Path) -> Result<(), StoreError> {
    let unusable = |why: String| StoreError::Unusable {
        path: p.display().to_string(),
        why,
    };
    if p.is_dir() {
        return Err(unusable("it is a directory, not a store file".into()));
    }
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p);
    match opened {
        Ok(_) => Ok(()),
        Err(e) => Err(unusable(match e.kind() {
            std::io::ErrorKind::PermissionDenied => "permission denied".into(),
            std::io::ErrorKind::ReadOnlyFilesystem => "it is on a read-only file system".into(),
            std::io::ErrorKind::NotFound => "its folder does not exist".into(),
            std::io::ErrorKind::IsADirectory => "it is a directory, not a store file".into(),
            _ => e.to_string(),
        })),
    }
}

fn classify_open(path: &str, e: rusqlite::Error) -> StoreError {
    use rusqlite::ffi::ErrorCode;
    if let rusqlite::Error::SqliteFailure(f, msg) = &e {
        match f.code {
            ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => {
                return StoreError::Corrupt {
                    path: path.to_string(),
                    detail: msg.clone().unwrap_or_default(),
                }
            }
            ErrorCode::CannotOpen => {
                return StoreError::Refused(format!(
                    "{path}: cannot open ({})",
                    msg.clone().unwrap_or_default()
                ))
            }
            _ => {}
        }
    }
    StoreError::from(e)
}

/// [`crate::store::FINISHED_SQL`] with SQLite's placeholders: the statuses
/// bound as a JSON array at `statuses`, the time at `before`.
fn finished_sql(statuses: &str, before: &str) -> String {
    crate::store::FINISHED_SQL
        .replace(
            "$STATUSES",
            &format!("(SELECT value FROM json_each({statuses}))"),
        )
        .replace("$BEFORE", before)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Limits;

    /// How often the connection's live statements were compiled again.
    fn recompiled(conn: &Connection) -> i32 {
        let mut total = 0;
        // SAFETY: the handle is this connection's, used on this thread
        // while the connection lives; the statements are only inspected.
        unsafe {
            let db = conn.handle();
            let mut s = rusqlite::ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
            while !s.is_null() {
                total += rusqlite::ffi::sqlite3_stmt_status(
                    s,
                    rusqlite::ffi::SQLITE_STMTSTATUS_REPREPARE,
                    0,
                );
                s = rusqlite::ffi::sqlite3_next_stmt(db, s);
            }
        }
        total
    }

    fn work(store: &mut Store) {
        for i in 0..6 {
            let id = format!("run_{i}");
            let run = Run::new(&id, "g", Limits::default(), 1_000 + i);
            store.create_run(&run, vec![]).unwrap();
            let owner = format!("host-{i}");
            store.acquire_lease(&id, &owner, 2_000 + i, 30_000).unwrap();
            assert!(store.heartbeat(&id, &owner, 3_000 + i, 30_000).unwrap());
            store.step_rows(&id).unwrap();
            store.load_approvals(&id).unwrap();
            store.events_after(Some(&id), i, 100 + i as u32).unwrap();
            store.events_after(None, i, 100 + i as u32).unwrap();
            store.list_runs(None, 10 + i as u32).unwrap();
            store.run(&id).unwrap();
            store.release_lease(&id, &owner).unwrap();
        }
    }

    #[test]
    fn a_cached_statement_is_compiled_once_whatever_values_are_bound_to_it() {
        let mut mem = Store::open_in_memory().unwrap();
        work(&mut mem);
        assert_eq!(recompiled(&mem.conn), 0, "in memory");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.db");
        let mut file = Store::open(&path, Durability::Normal).unwrap();
        work(&mut file);
        assert_eq!(recompiled(&file.conn), 0, "the writer's connection");
        let reader = Store::open_read_only(&path).unwrap();
        for i in 0..6 {
            reader.step_rows(&format!("run_{i}")).unwrap();
            reader
                .events_after(Some(&format!("run_{i}")), 0, 50 + i)
                .unwrap();
        }
        assert_eq!(recompiled(&reader.conn), 0, "a reader's connection");
    }

    /// SQLite's `synchronous` setting on the writer's connection (2: FULL).
    fn synchronous(store: &Store) -> i64 {
        store
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn lease_only_writes_leave_every_later_commit_synced() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("k.db"), Durability::Full).unwrap();
        assert_eq!(synchronous(&store), 2);
        for i in 0..3 {
            let run = Run::new(&format!("run_{i}"), "g", Limits::default(), 1_000 + i);
            store.create_run(&run, vec![]).unwrap();
        }
        let rule: crate::store::ClaimRule = std::sync::Arc::new(|run: &Run| {
            crate::driver::operator::lease_transition(run, "host-1", 2_000, 30_000, None)
        });
        let claimed = store.claim(2_000, 2, &rule).unwrap();
        assert_eq!(claimed.len(), 2);
        assert_eq!(synchronous(&store), 2, "after a claim");
        assert!(store.heartbeat("run_0", "host-1", 3_000, 30_000).unwrap());
        assert_eq!(synchronous(&store), 2, "after a heartbeat");
        store.release_lease("run_0", "host-1").unwrap();
        assert_eq!(synchronous(&store), 2, "after a release");
        // A claim that finds nothing to take still sets it back.
        store.claim(2_000, 0, &rule).unwrap();
        assert_eq!(synchronous(&store), 2, "after an empty claim");
    }
}
