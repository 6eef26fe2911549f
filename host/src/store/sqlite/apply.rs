//! The statements of a run's writes. A group commit binds and steps one
//! statement per row for every run in the group; [`Statements`] prepares
//! each kind once per group instead of fetching it from the connection's
//! cache (a hash of its text, and a reset and clear on return) per row.

use super::rows::{APPROVAL_COLUMNS, RUN_COLUMNS, STEP_COLUMNS};
use super::{Prepared, Write, Written};
use crate::store::encode::EncodedEvent;
use crate::store::{StoreError, Transition};
use crate::types::{Run, RunReason};
use rusqlite::{params, CachedStatement, Connection, OptionalExtension};
use std::sync::LazyLock;

/// The statements a write may run.
#[derive(Clone, Copy)]
enum Sql {
    InsertRun,
    /// The run row's compare-and-set, when the transition changes its status.
    UpdateRun,
    /// The same when the status stays: it leaves `status` out of the `SET`
    /// list, so SQLite does not rewrite the row's entry in the status index.
    UpdateRunKeepStatus,
    /// A step row the loop created in this transition (`version` 1).
    UpsertStep,
    /// A step row that exists: one seek instead of the upsert's attempted
    /// insert and then its update.
    UpdateStep,
    UpsertApproval,
    InsertModelCall,
    /// The last kind: [`KINDS`] counts up to it.
    InsertEvent,
}

/// How many kinds there are: one statement slot each.
const KINDS: usize = Sql::InsertEvent as usize + 1;

// The text of each statement, put together once.
static INSERT_RUN: LazyLock<String> = LazyLock::new(|| {
    format!("INSERT INTO runs ({RUN_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)")
});
static UPSERT_STEP: LazyLock<String> = LazyLock::new(|| {
    format!("INSERT INTO steps ({STEP_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)
             ON CONFLICT(run_id, idx) DO UPDATE SET version=excluded.version, state=excluded.state,
               decision=excluded.decision, call_tool=excluded.call_tool, call_args=excluded.call_args,
               effect=excluded.effect, verdict=excluded.verdict, obs_kind=excluded.obs_kind,
               obs_content=excluded.obs_content, updated_at=excluded.updated_at")
});
// The same 13 parameters as UPSERT_STEP; ?12, `started_at`, never changes.
const UPDATE_STEP: &str = "UPDATE steps SET version=?3, state=?4, decision=?5, call_tool=?6,
        call_args=?7, effect=?8, verdict=?9, obs_kind=?10, obs_content=?11, updated_at=?13
     WHERE run_id=?1 AND idx=?2";
static UPSERT_APPROVAL: LazyLock<String> = LazyLock::new(|| {
    format!("INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)
             ON CONFLICT(id) DO UPDATE SET status=excluded.status, decided_by=excluded.decided_by,
               note=excluded.note, decided_at=excluded.decided_at")
});

// Both run updates take the same 18 parameters: ?2 is the new status,
// ?13 the expected one. The second is for ?2 = ?13: it checks that, and
// sets every column but the status. ?18 is the chain length the write
// was linked after: when only that misses, the write is linked again
// after the stored head (`Prepared::relinked`) and updated once more.
const UPDATE_RUN: &str =
    "UPDATE runs SET status=?2, reason=?3, result=?4, limits=?5, step_count=?6,
        model_calls=?7, tokens=?8, consecutive_failures=?9, lease_owner=?10, lease_expires=?11,
        updated_at=?12, retry_at=?15, chain_len=?16, chain_head=?17
     WHERE id=?1 AND status=?13 AND lease_owner IS ?14 AND chain_len=?18";
const UPDATE_RUN_KEEP_STATUS: &str =
    "UPDATE runs SET reason=?3, result=?4, limits=?5, step_count=?6,
        model_calls=?7, tokens=?8, consecutive_failures=?9, lease_owner=?10, lease_expires=?11,
        updated_at=?12, retry_at=?15, chain_len=?16, chain_head=?17
     WHERE id=?1 AND status=?13 AND ?2=?13 AND lease_owner IS ?14 AND chain_len=?18";
const INSERT_MODEL_CALL: &str =
    "INSERT INTO model_calls (run_id, step_idx, provider, prompt_tokens,
        completion_tokens, outcome, error, latency_ms, at)
     VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)";
const INSERT_EVENT: &str =
    "INSERT INTO events (run_id, step_idx, kind, data, at, pos, seals, hash) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)";

impl Sql {
    fn text(self) -> &'static str {
        match self {
            Sql::InsertRun => &INSERT_RUN,
            Sql::UpdateRun => UPDATE_RUN,
            Sql::UpdateRunKeepStatus => UPDATE_RUN_KEEP_STATUS,
            Sql::UpsertStep => &UPSERT_STEP,
            Sql::UpdateStep => UPDATE_STEP,
            Sql::UpsertApproval => &UPSERT_APPROVAL,
            Sql::InsertModelCall => INSERT_MODEL_CALL,
            Sql::InsertEvent => INSERT_EVENT,
        }
    }
}

/// The statements of one transaction, each prepared on first use and kept
/// until the transaction's writes are done (they go back to the
/// connection's cache when this is dropped, before the commit).
pub(super) struct Statements<'c> {
    conn: &'c Connection,
    slots: [Option<CachedStatement<'c>>; KINDS],
}

impl<'c> Statements<'c> {
    pub(super) fn new(conn: &'c Connection) -> Statements<'c> {
        Statements {
            conn,
            slots: Default::default(),
        }
    }

    fn get(&mut self, sql: Sql) -> Result<&mut CachedStatement<'c>, StoreError> {
        let slot = &mut self.slots[sql as usize];
        let stmt = match slot.take() {
            Some(stmt) => stmt,
            None => self.conn.prepare_cached(sql.text())?,
        };
        Ok(slot.insert(stmt))
    }

    /// Runs `w`'s statements. Its first is the compare-and-set (or, for a
    /// new run, the insert); see [`nothing_written`].
    pub(super) fn write(&mut self, w: &Prepared) -> Result<Written, StoreError> {
        match &w.write {
            Write::Create { run, .. } => self.insert_run(run, w),
            Write::Transition(t) => self.apply(t, w),
        }
    }

    fn insert_run(&mut self, run: &Run, w: &Prepared) -> Result<Written, StoreError> {
        self.get(Sql::InsertRun)?.execute(params![
            run.id,
            run.goal,
            run.status.as_str(),
            run.reason.map(RunReason::as_str),
            run.result,
            w.limits,
            run.meta,
            run.step_count,
            run.model_calls,
            run.tokens as i64,
            run.consecutive_failures,
            run.lease_owner,
            run.lease_expires,
            run.created_at,
            run.updated_at,
            run.retry_at,
            run.chain_len as i64,
            run.chain_head
        ])?;
        self.write_steps(w)?;
        self.insert_events(&run.id, run.updated_at, &w.events)
    }

    /// `w` holds `t`'s rows and events, encoded (`t.events` is not read).
    fn apply(&mut self, t: &Transition, w: &Prepared) -> Result<Written, StoreError> {
        let run = &t.run;
        // Checked before anything is written, so that a refusal leaves
        // nothing behind (see `nothing_written`).
        if let Some(id) = &t.expect.pending_approval {
            let status: Option<String> = self
                .conn
                .query_row(
                    "SELECT status FROM approvals WHERE id=?1 AND run_id=?2",
                    [id, &run.id],
                    |r| r.get(0),
                )
                .optional()?;
            if status.as_deref() != Some("pending") {
                return Err(self.refusal(&run.id));
            }
        }
        let update = if run.status == t.expect.status {
            Sql::UpdateRunKeepStatus
        } else {
            Sql::UpdateRun
        };
        let mut relinked = None;
        let mut n = self.update_run(
            update,
            t,
            w,
            run.chain_len as i64,
            &run.chain_head,
            w.expect_chain_len,
        )?;
        if n != 1 {
            // Another writer's transition may have moved the chain on
            // with the status and owner this write expects: then its
            // events are linked after the stored head instead.
            let Some((len, head)) = self.chain_if_expected(t)? else {
                return Err(self.refusal(&run.id));
            };
            let (events, new_head) = w.relinked(len, &head);
            let new_len = len + events.len() as i64;
            n = self.update_run(update, t, w, new_len, &new_head, len)?;
            if n != 1 {
                return Err(self.refusal(&run.id));
            }
            relinked = Some((events, new_len as u64, new_head));
        }
        self.write_steps(w)?;
        for row in &w.approval_rows {
            self.get(Sql::UpsertApproval)?.execute(params![
                row.id,
                row.run_id,
                row.step_idx,
                row.kind,
                row.status,
                row.tool,
                row.arguments,
                row.reason,
                row.presentation,
                row.hash,
                row.created_at,
                row.expires_at,
                row.decided_by,
                row.note,
                row.decided_at,
                row.chain_head,
                row.tool_pin
            ])?;
        }
        for m in &t.model_calls {
            self.get(Sql::InsertModelCall)?.execute(params![
                run.id,
                m.step_index,
                m.provider,
                m.prompt_tokens,
                m.completion_tokens,
                m.outcome,
                m.error,
                m.latency_ms as i64,
                run.updated_at
            ])?;
        }
        match relinked {
            None => self.insert_events(&run.id, run.updated_at, &w.events),
            Some((events, len, head)) => {
                let mut written = self.insert_events(&run.id, run.updated_at, &events)?;
                written.chain = Some((len, head));
                Ok(written)
            }
        }
    }

    /// The run row's compare-and-set (`update`), writing the chain's new
    /// `len` and `head` where it still is at `expect_len`.
    fn update_run(
        &mut self,
        update: Sql,
        t: &Transition,
        w: &Prepared,
        len: i64,
        head: &str,
        expect_len: i64,
    ) -> Result<usize, StoreError> {
        let run = &t.run;
        Ok(self.get(update)?.execute(params![
            run.id,
            run.status.as_str(),
            run.reason.map(RunReason::as_str),
            run.result,
            w.limits,
            run.step_count,
            run.model_calls,
            run.tokens as i64,
            run.consecutive_failures,
            run.lease_owner,
            run.lease_expires,
            run.updated_at,
            t.expect.status.as_str(),
            t.expect.owner,
            run.retry_at,
            len,
            head,
            expect_len,
        ])?)
    }

    /// The stored chain (length, head) of `t`'s run when its row has the
    /// status and owner `t` expects (its chain alone moved on).
    fn chain_if_expected(&self, t: &Transition) -> Result<Option<(i64, String)>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT chain_len, chain_head FROM runs WHERE id=?1 AND status=?2 AND lease_owner IS ?3",
                params![t.run.id, t.expect.status.as_str(), t.expect.owner],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// Why a run's compare-and-set matched no row: it is gone, or its
    /// status or owner moved on.
    fn refusal(&self, run_id: &str) -> StoreError {
        let cur = self
            .conn
            .query_row(
                "SELECT status, lease_owner FROM runs WHERE id=?1",
                [run_id],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?)),
            )
            .optional();
        match cur {
            Err(e) => e.into(),
            Ok(None) => StoreError::RunNotFound(run_id.to_string()),
            Ok(Some((status, owner))) => match status.parse() {
                Ok(status) => StoreError::Conflict {
                    run_id: run_id.to_string(),
                    status,
                    owner,
                },
                Err(e) => StoreError::BadRow(e),
            },
        }
    }

    /// `w`'s step rows: a later version of a step updates its row; should
    /// the row be missing all the same, the upsert writes it.
    fn write_steps(&mut self, w: &Prepared) -> Result<(), StoreError> {
        for row in &w.step_rows {
            let p = params![
                row.run_id,
                row.idx,
                row.version,
                row.state,
                row.decision,
                row.call_tool,
                row.call_args,
                row.effect,
                row.verdict,
                row.obs_kind,
                row.obs_content,
                row.started_at,
                row.updated_at
            ];
            let updated = row.version > 1 && self.get(Sql::UpdateStep)?.execute(p)? == 1;
            if !updated {
                self.get(Sql::UpsertStep)?.execute(p)?;
            }
        }
        Ok(())
    }

    /// Inserts `events`; returns their sequence numbers.
    pub(super) fn insert_events(
        &mut self,
        run_id: &str,
        at: i64,
        events: &[EncodedEvent],
    ) -> Result<Written, StoreError> {
        let mut seqs = Vec::with_capacity(events.len());
        if events.is_empty() {
            return Ok(Written { seqs, chain: None });
        }
        let conn = self.conn;
        let stmt = self.get(Sql::InsertEvent)?;
        for e in events {
            stmt.execute(params![
                run_id,
                e.step_index,
                e.kind,
                e.data,
                at,
                e.pos,
                e.seals,
                e.hash
            ])?;
            seqs.push(conn.last_insert_rowid());
        }
        Ok(Written { seqs, chain: None })
    }
}

/// Whether `e` came from `w`'s first statement, which left nothing behind
/// (SQLite undoes a failed statement, and the transaction goes on).
pub(super) fn nothing_written(w: &Write, e: &StoreError) -> bool {
    match (w, e) {
        (Write::Transition(_), StoreError::Conflict { .. } | StoreError::RunNotFound(_)) => true,
        (Write::Create { .. }, StoreError::Backend { source, .. }) => matches!(
            source.downcast_ref::<rusqlite::Error>(),
            Some(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error {
                    code: rusqlite::ffi::ErrorCode::ConstraintViolation,
                    ..
                },
                _,
            ))
        ),
        _ => false,
    }
}
