//! Reading PostgreSQL rows into the engine-neutral row images and values.

use crate::store::encode::{ApprovalRow, StepRow};
use crate::store::{Event, StoreError, StoredModelCall};
use crate::types::*;
use tokio_postgres::Row;

pub const RUN_COLUMNS: &str = "id, goal, status, reason, result, limits, meta, step_count, model_calls, tokens, consecutive_failures, lease_owner, lease_expires, created_at, updated_at, retry_at, chain_len, chain_head";
pub const STEP_COLUMNS: &str = "run_id, idx, version, state, decision, call_tool, call_args, effect, verdict, obs_kind, obs_content, started_at, updated_at";
pub const APPROVAL_COLUMNS: &str = "id, run_id, step_idx, kind, status, tool, arguments, reason, presentation, hash, created_at, expires_at, decided_by, note, decided_at, chain_head, tool_pin";

fn bad(e: tokio_postgres::Error) -> StoreError {
    StoreError::BadRow(e.to_string())
}

fn count(row: &Row, i: usize, what: &str, id: &str) -> Result<u32, StoreError> {
    let n: i64 = row.try_get(i).map_err(bad)?;
    u32::try_from(n).map_err(|e| StoreError::BadRow(format!("run {id}: {what}: {e}")))
}

pub fn read_run(row: &Row) -> Result<Run, StoreError> {
    let id: String = row.try_get(0).map_err(bad)?;
    let b = |what: &str, e: String| StoreError::BadRow(format!("run {id}: {what}: {e}"));
    let status: String = row.try_get(2).map_err(bad)?;
    let reason: Option<String> = row.try_get(3).map_err(bad)?;
    let limits: String = row.try_get(5).map_err(bad)?;
    let tokens: i64 = row.try_get(9).map_err(bad)?;
    let chain_len: i64 = row.try_get(16).map_err(bad)?;
    Ok(Run {
        goal: row.try_get(1).map_err(bad)?,
        status: status.parse().map_err(|e| b("status", e))?,
        reason: reason
            .map(|r| r.parse())
            .transpose()
            .map_err(|e| b("reason", e))?,
        result: row.try_get(4).map_err(bad)?,
        limits: serde_json::from_str(&limits).map_err(|e| b("limits", e.to_string()))?,
        meta: row.try_get(6).map_err(bad)?,
        step_count: count(row, 7, "step_count", &id)?,
        model_calls: count(row, 8, "model_calls", &id)?,
        tokens: u64::try_from(tokens).map_err(|e| b("tokens", e.to_string()))?,
        consecutive_failures: count(row, 10, "consecutive_failures", &id)?,
        lease_owner: row.try_get(11).map_err(bad)?,
        lease_expires: row.try_get(12).map_err(bad)?,
        created_at: row.try_get(13).map_err(bad)?,
        updated_at: row.try_get(14).map_err(bad)?,
        retry_at: row.try_get(15).map_err(bad)?,
        chain_len: u64::try_from(chain_len).map_err(|e| b("chain_len", e.to_string()))?,
        chain_head: row.try_get(17).map_err(bad)?,
        id: id.clone(),
    })
}

pub fn read_step(row: &Row) -> Result<Step, StoreError> {
    read_step_row(row)?.decode()
}

pub fn read_approval(row: &Row) -> Result<Approval, StoreError> {
    read_approval_row(row)?.decode()
}

pub fn read_step_row(row: &Row) -> Result<StepRow, StoreError> {
    Ok(StepRow {
        run_id: row.try_get(0).map_err(bad)?,
        idx: row.try_get(1).map_err(bad)?,
        version: row.try_get(2).map_err(bad)?,
        state: row.try_get(3).map_err(bad)?,
        decision: row.try_get(4).map_err(bad)?,
        call_tool: row.try_get(5).map_err(bad)?,
        call_args: row.try_get(6).map_err(bad)?,
        effect: row.try_get(7).map_err(bad)?,
        verdict: row.try_get(8).map_err(bad)?,
        obs_kind: row.try_get(9).map_err(bad)?,
        obs_content: row.try_get(10).map_err(bad)?,
        started_at: row.try_get(11).map_err(bad)?,
        updated_at: row.try_get(12).map_err(bad)?,
    })
}

pub fn read_approval_row(row: &Row) -> Result<ApprovalRow, StoreError> {
    Ok(ApprovalRow {
        id: row.try_get(0).map_err(bad)?,
        run_id: row.try_get(1).map_err(bad)?,
        step_idx: row.try_get(2).map_err(bad)?,
        kind: row.try_get(3).map_err(bad)?,
        status: row.try_get(4).map_err(bad)?,
        tool: row.try_get(5).map_err(bad)?,
        arguments: row.try_get(6).map_err(bad)?,
        reason: row.try_get(7).map_err(bad)?,
        presentation: row.try_get(8).map_err(bad)?,
        hash: row.try_get(9).map_err(bad)?,
        created_at: row.try_get(10).map_err(bad)?,
        expires_at: row.try_get(11).map_err(bad)?,
        decided_by: row.try_get(12).map_err(bad)?,
        note: row.try_get(13).map_err(bad)?,
        decided_at: row.try_get(14).map_err(bad)?,
        chain_head: row.try_get(15).map_err(bad)?,
        tool_pin: row.try_get(16).map_err(bad)?,
    })
}

/// An event row of `SELECT seq, pos, step_idx, kind, data, at, seals, hash`.
pub fn read_chained_event(row: &Row) -> Result<crate::store::ChainedEvent, StoreError> {
    Ok(crate::store::ChainedEvent {
        seq: row.try_get(0).map_err(bad)?,
        pos: row.try_get(1).map_err(bad)?,
        step_index: row.try_get(2).map_err(bad)?,
        kind: row.try_get(3).map_err(bad)?,
        data: row.try_get(4).map_err(bad)?,
        at: row.try_get(5).map_err(bad)?,
        seals: row.try_get(6).map_err(bad)?,
        hash: row.try_get(7).map_err(bad)?,
    })
}

pub fn read_event(row: &Row) -> Result<Event, StoreError> {
    let step: Option<i64> = row.try_get(2).map_err(bad)?;
    Ok(Event {
        seq: row.try_get(0).map_err(bad)?,
        run_id: row.try_get(1).map_err(bad)?,
        step_index: step
            .map(u32::try_from)
            .transpose()
            .map_err(|e| StoreError::BadRow(format!("event step: {e}")))?,
        kind: row.try_get::<_, String>(3).map_err(bad)?.into(),
        data: row.try_get(4).map_err(bad)?,
        at: row.try_get(5).map_err(bad)?,
    })
}

pub fn read_model_call(row: &Row) -> Result<StoredModelCall, StoreError> {
    let n = |i: usize| -> Result<u32, StoreError> {
        let v: i64 = row.try_get(i).map_err(bad)?;
        u32::try_from(v).map_err(|e| StoreError::BadRow(format!("model call: {e}")))
    };
    Ok(StoredModelCall {
        step_index: n(0)?,
        provider: row.try_get(1).map_err(bad)?,
        prompt_tokens: n(2)?,
        completion_tokens: n(3)?,
        outcome: row.try_get(4).map_err(bad)?,
        error: row.try_get(5).map_err(bad)?,
        latency_ms: row.try_get(6).map_err(bad)?,
        at: row.try_get(7).map_err(bad)?,
    })
}
