//! Column images of stored rows, and the one decoder that turns them back
//! into values. Writes bind a row image; after commit the loop decodes the
//! very image it bound with the same code a fresh load uses, so its cached
//! copy always equals what a reload would return.

use super::Event;
use crate::store::StoreError;
use crate::types::*;
use rusqlite::Row;

/// The columns of one `steps` row.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    pub run_id: String,
    pub idx: i64,
    pub version: i64,
    pub state: String,
    pub decision: Option<String>,
    pub call_tool: Option<String>,
    pub call_args: Option<String>,
    pub effect: Option<String>,
    pub verdict: Option<String>,
    pub obs_kind: Option<String>,
    pub obs_content: Option<String>,
    pub started_at: i64,
    pub updated_at: i64,
}

pub const STEP_COLUMNS: &str = "run_id, idx, version, state, decision, call_tool, call_args, effect, verdict, obs_kind, obs_content, started_at, updated_at";

impl StepRow {
    pub fn encode(run_id: &str, s: &Step) -> StepRow {
        StepRow {
            run_id: run_id.to_string(),
            idx: s.index as i64,
            version: s.version as i64,
            state: s.state.as_str().to_string(),
            decision: s.decision.as_ref().map(|d| json(d)),
            call_tool: s.call.as_ref().map(|c| c.tool.clone()),
            call_args: s.call.as_ref().map(|c| c.arguments.clone()),
            effect: s.effect.map(|e| e.as_str().to_string()),
            verdict: s.verdict.as_ref().map(|v| json(v)),
            obs_kind: s.observation.as_ref().map(|o| o.kind.as_str().to_string()),
            obs_content: s.observation.as_ref().map(|o| o.content.clone()),
            started_at: s.started_at,
            updated_at: s.updated_at,
        }
    }

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

    pub fn decode(&self) -> Result<Step, StoreError> {
        let bad = |what: &str, e: String| {
            StoreError::BadRow(format!(
                "step {} of run {}: {what}: {e}",
                self.idx, self.run_id
            ))
        };
        let call = match (&self.call_tool, &self.call_args) {
            (Some(t), Some(a)) => Some(ToolCall {
                tool: t.clone(),
                arguments: a.clone(),
            }),
            (None, None) => None,
            _ => return Err(bad("call", "tool and arguments must both be set".into())),
        };
        let observation = match (&self.obs_kind, &self.obs_content) {
            (Some(k), Some(c)) => Some(Observation {
                kind: k.parse().map_err(|e| bad("obs_kind", e))?,
                content: c.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(bad(
                    "observation",
                    "kind and content must both be set".into(),
                ))
            }
        };
        Ok(Step {
            index: u32::try_from(self.idx).map_err(|e| bad("idx", e.to_string()))?,
            version: u32::try_from(self.version).map_err(|e| bad("version", e.to_string()))?,
            state: self.state.parse().map_err(|e| bad("state", e))?,
            decision: self
                .decision
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| bad("decision", e.to_string()))?,
            call,
            effect: self
                .effect
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e| bad("effect", e))?,
            verdict: self
                .verdict
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| bad("verdict", e.to_string()))?,
            observation,
            started_at: self.started_at,
            updated_at: self.updated_at,
        })
    }
}

/// The columns of one `approvals` row.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRow {
    pub id: String,
    pub run_id: String,
    pub step_idx: i64,
    pub kind: String,
    pub status: String,
    pub tool: String,
    pub arguments: String,
    pub reason: String,
    pub presentation: String,
    pub hash: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub decided_by: Option<String>,
    pub note: Option<String>,
    pub decided_at: Option<i64>,
}

pub const APPROVAL_COLUMNS: &str = "id, run_id, step_idx, kind, status, tool, arguments, reason, presentation, hash, created_at, expires_at, decided_by, note, decided_at";

impl ApprovalRow {
    pub fn encode(a: &Approval) -> ApprovalRow {
        ApprovalRow {
            id: a.id.clone(),
            run_id: a.run_id.clone(),
            step_idx: a.step_index as i64,
            kind: a.kind.as_str().to_string(),
            status: a.status.as_str().to_string(),
            tool: a.call.tool.clone(),
            arguments: a.call.arguments.clone(),
            reason: a.reason.clone(),
            presentation: a.presentation.clone(),
            hash: a.hash.clone(),
            created_at: a.created_at,
            expires_at: a.expires_at,
            decided_by: a.decided_by.clone(),
            note: a.note.clone(),
            decided_at: a.decided_at,
        }
    }

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
        })
    }

    pub fn decode(&self) -> Result<Approval, StoreError> {
        let bad = |what: &str, e: String| {
            StoreError::BadRow(format!("approval {}: {what}: {e}", self.id))
        };
        Ok(Approval {
            id: self.id.clone(),
            run_id: self.run_id.clone(),
            step_index: u32::try_from(self.step_idx).map_err(|e| bad("step_idx", e.to_string()))?,
            kind: self.kind.parse().map_err(|e| bad("kind", e))?,
            status: self.status.parse().map_err(|e| bad("status", e))?,
            call: ToolCall {
                tool: self.tool.clone(),
                arguments: self.arguments.clone(),
            },
            reason: self.reason.clone(),
            presentation: self.presentation.clone(),
            hash: self.hash.clone(),
            created_at: self.created_at,
            expires_at: self.expires_at,
            decided_by: self.decided_by.clone(),
            note: self.note.clone(),
            decided_at: self.decided_at,
        })
    }
}

pub const RUN_COLUMNS: &str = "id, goal, status, reason, result, limits, meta, step_count, model_calls, tokens, consecutive_failures, lease_owner, lease_expires, created_at, updated_at, retry_at";

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

pub(crate) fn json<T: serde::Serialize>(v: &T) -> String {
    // Serializing these plain enums and strings cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_string())
}
