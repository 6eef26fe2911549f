//! Reading SQLite rows into the engine-neutral row images
//! ([`crate::store::encode`]) and values.

use crate::store::encode::{ApprovalRow, StepRow};
use crate::store::{Event, StoreError};
use crate::types::*;
use rusqlite::Row;

pub const STEP_COLUMNS: &str = "run_id, idx, version, state, decision, call_tool, call_args, effect, verdict, obs_kind, obs_content, started_at, updated_at";

impl StepRow {
    /// Reads a row selected with `STEP_COLUMNS`, in that order.
    pub fn read(row: &Row<'_>) -> rusqlite::Result<StepRow> {
        Ok(StepRow {
            run_id: row.get(0)?,
            idx: row.get(1)?,
            version: row.get(2)?,
            state: row.get(3)?,
            decision: row.get(4)?,
            call_tool: row.get(5)?,
            call_args: row.get(6)?,
            effect: row.get(7)?,
            verdict: row.get(8)?,
            obs_kind: row.get(9)?,
            obs_content: row.get(10)?,
            started_at: row.get(11)?,
            updated_at: row.get(12)?,
        })
    }
}

pub const APPROVAL_COLUMNS: &str = "id, run_id, step_idx, kind, status, tool, arguments, reason, presentation, hash, created_at, expires_at, decided_by, note, decided_at, chain_head, tool_pin";

impl ApprovalRow {
    /// Reads a row selected with `APPROVAL_COLUMNS`, in that order.
    pub fn read(row: &Row<'_>) -> rusqlite::Result<ApprovalRow> {
        Ok(ApprovalRow {
            id: row.get(0)?,
            run_id: row.get(1)?,
            step_idx: row.get(2)?,
            kind: row.get(3)?,
            status: row.get(4)?,
            tool: row.get(5)?,
            arguments: row.get(6)?,
            reason: row.get(7)?,
            presentation: row.get(8)?,
            hash: row.get(9)?,
            created_at: row.get(10)?,
            expires_at: row.get(11)?,
            decided_by: row.get(12)?,
            note: row.get(13)?,
            decided_at: row.get(14)?,
            chain_head: row.get(15)?,
            tool_pin: row.get(16)?,
        })
    }
}

pub const RUN_COLUMNS: &str = "id, goal, status, reason, result, limits, meta, step_count, model_calls, tokens, consecutive_failures, lease_owner, lease_expires, created_at, updated_at, retry_at, chain_len, chain_head";

pub fn read_run(row: &Row<'_>) -> Result<Run, StoreError> {
    let id: String = row.get(0)?;
    let bad = |what: &str, e: String| StoreError::BadRow(format!("run {id}: {what}: {e}"));
    let status: String = row.get(2)?;
    let limits: String = row.get(5)?;
    Ok(Run {
        goal: row.get(1)?,
        status: status.parse().map_err(|e| bad("status", e))?,
        reason: row
            .get::<_, Option<String>>(3)?
            .map(|r| r.parse())
            .transpose()
            .map_err(|e| bad("reason", e))?,
        result: row.get(4)?,
        limits: serde_json::from_str(&limits).map_err(|e| bad("limits", e.to_string()))?,
        meta: row.get(6)?,
        step_count: row.get(7)?,
        model_calls: row.get(8)?,
        tokens: row.get::<_, i64>(9)? as u64,
        consecutive_failures: row.get(10)?,
        lease_owner: row.get(11)?,
        lease_expires: row.get(12)?,
        created_at: row.get(13)?,
        updated_at: row.get(14)?,
        retry_at: row.get(15)?,
        chain_len: row.get::<_, i64>(16)? as u64,
        chain_head: row.get(17)?,
        id: id.clone(),
    })
}

pub fn read_event(row: &Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        seq: row.get(0)?,
        run_id: row.get(1)?,
        step_index: row.get::<_, Option<i64>>(2)?.map(|i| i as u32),
        kind: row.get(3)?,
        data: row.get(4)?,
        at: row.get(5)?,
    })
}
