//! Rows as every engine binds them, and writes prepared for binding.
//! Writes bind a row image; after commit the loop decodes the very image
//! it bound with the same code a fresh load uses, so its cached copy always
//! equals what a reload would return. Nothing here knows an engine.

use super::{chain, Committed, Event, NewEvent, StoreError, Transition};
use crate::types::*;

/// The columns of one `steps` row.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepRow {
    /// `run_id`: the id of the run the step belongs to.
    pub run_id: String,
    /// `idx`: the step's index in its run, from 0.
    pub idx: i64,
    /// `version`: 1 when the step starts, one more with each change to it.
    pub version: i64,
    /// `state`: the step's state, spelled (`started`, `awaiting_approval`, ...).
    pub state: String,
    /// `decision`: the agent's decision as JSON text, once it has decided.
    pub decision: Option<String>,
    /// `call_tool`: the validated call's tool; set exactly when `call_args` is.
    pub call_tool: Option<String>,
    /// `call_args`: the validated call's arguments as canonical JSON text; set
    /// exactly when `call_tool` is.
    pub call_args: Option<String>,
    /// `effect`: the called tool's effect, spelled (such as `local-mutation`).
    pub effect: Option<String>,
    /// `verdict`: the policy's verdict on the call as JSON text.
    pub verdict: Option<String>,
    /// `obs_kind`: the observation's kind, spelled (such as `denied`); set exactly
    /// when `obs_content` is.
    pub obs_kind: Option<String>,
    /// `obs_content`: the observation's content as JSON text; set exactly when
    /// `obs_kind` is.
    pub obs_content: Option<String>,
    /// `started_at`: when the step started (ms since the epoch).
    pub started_at: i64,
    /// `updated_at`: when the step last changed (ms since the epoch).
    pub updated_at: i64,
}

impl StepRow {
    /// The row that stores step `s` of run `run_id`.
    pub fn encode(run_id: &str, s: &Step) -> StepRow {
        StepRow {
            run_id: run_id.to_string(),
            idx: s.index as i64,
            version: s.version as i64,
            state: s.state.as_str().to_string(),
            decision: s.decision.as_ref().map(json),
            call_tool: s.call.as_ref().map(|c| c.tool.clone()),
            call_args: s.call.as_ref().map(|c| c.arguments.clone()),
            effect: s.effect.map(|e| e.as_str().to_string()),
            verdict: s.verdict.as_ref().map(json),
            obs_kind: s.observation.as_ref().map(|o| o.kind.as_str().to_string()),
            obs_content: s.observation.as_ref().map(|o| o.content.clone()),
            started_at: s.started_at,
            updated_at: s.updated_at,
        }
    }

    /// The step this row stores; [`StoreError::BadRow`] when a column does not
    /// parse or only half of a column pair is set.
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ApprovalRow {
    /// `id`: the approval's id.
    pub id: String,
    /// `run_id`: the id of the run that asked for it.
    pub run_id: String,
    /// `step_idx`: the index of the step that waits on it.
    pub step_idx: i64,
    /// `kind`: why it was asked for, spelled (`policy` or `interrupted_side_effect`).
    pub kind: String,
    /// `status`: spelled (`pending`, `approved`, `denied`, `expired` or `cancelled`).
    pub status: String,
    /// `tool`: the tool the call waiting for approval would run.
    pub tool: String,
    /// `arguments`: that call's arguments as canonical JSON text.
    pub arguments: String,
    /// `reason`: why approval is needed, as plain text.
    pub reason: String,
    /// `presentation`: JSON text shown to the operator beside the call.
    pub presentation: String,
    /// `hash`: the SHA-256 over exactly what the operator is shown.
    pub hash: String,
    /// `created_at`: when approval was asked for (ms since the epoch).
    pub created_at: i64,
    /// `expires_at`: when a pending approval expires (ms since the epoch); `None`
    /// when it never does.
    pub expires_at: Option<i64>,
    /// `decided_by`: who decided it; `None` until it is decided.
    pub decided_by: Option<String>,
    /// `note`: the note the decider left with the decision, if any.
    pub note: Option<String>,
    /// `decided_at`: when it was decided (ms since the epoch); `None` until then.
    pub decided_at: Option<i64>,
    /// `chain_head`: the run's chain head when approval was asked for; `None` for
    /// approvals asked for before the chain existed.
    pub chain_head: Option<String>,
    /// `tool_pin`: for an MCP tool, the pin of its server's tools when approval
    /// was asked for; `None` otherwise.
    #[serde(default)]
    pub tool_pin: Option<String>,
}

impl ApprovalRow {
    /// The row that stores `a`.
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
            chain_head: a.chain_head.clone(),
            tool_pin: a.tool_pin.clone(),
        }
    }

    /// The approval this row stores; [`StoreError::BadRow`] when a column does
    /// not parse.
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
            chain_head: self.chain_head.clone(),
            tool_pin: self.tool_pin.clone(),
        })
    }
}

/// An event whose data is already JSON text, linked into its run's chain.
#[derive(Debug, Clone)]
pub struct EncodedEvent {
    /// The step the event is about, if any.
    pub step_index: Option<u32>,
    /// The event kind's spelling, such as `step.started`.
    pub kind: &'static str,
    /// The event's data as JSON text.
    pub data: String,
    /// Its position in the run's chain (1 for the first event).
    pub pos: i64,
    /// The seals of the transition's rows, on its last event only.
    pub seals: Option<String>,
    /// Its hash ([`chain::link`]).
    pub hash: String,
}

/// Links `events` after (`len`, `head`): their positions and hashes.
fn link_all(
    events: &mut [EncodedEvent],
    run_id: &str,
    at: i64,
    len: i64,
    mut head: String,
) -> String {
    for (i, e) in events.iter_mut().enumerate() {
        e.pos = len + i as i64 + 1;
        e.hash = chain::link(
            &head,
            &chain::Link {
                pos: e.pos,
                run_id,
                step_index: e.step_index.map(i64::from),
                kind: e.kind,
                data: &e.data,
                at,
                seals: e.seals.as_deref(),
            },
        );
        head.clone_from(&e.hash);
    }
    head
}

/// Encodes `events` and links them into the chain after (`len`, `head`),
/// the last carrying `seals`; returns them and the new head.
fn encode(
    events: &[NewEvent],
    run_id: &str,
    at: i64,
    len: u64,
    head: String,
    seals: String,
) -> (Vec<EncodedEvent>, String) {
    let mut seals = Some(seals);
    let n = events.len();
    let mut out: Vec<EncodedEvent> = events
        .iter()
        .enumerate()
        .map(|(i, e)| EncodedEvent {
            step_index: e.step_index,
            kind: e.kind.as_str(),
            // Straight into a byte buffer: `Display` goes through a
            // formatter adapter, twice the cost for the same text.
            data: json(&e.data),
            pos: 0,
            seals: if i + 1 == n { seals.take() } else { None },
            hash: String::new(),
        })
        .collect();
    let head = link_all(&mut out, run_id, at, len as i64, head);
    (out, head)
}

/// A write with its rows and events already encoded. [`super::StoreHandle`]
/// prepares writes on the caller's thread, and turns what the writer
/// reports back into a [`Committed`] there too ([`Prepared::committed`]),
/// so that the writer thread, which every run in the process waits on,
/// only binds and steps statements.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub(crate) write: Write,
    /// The run's limits as JSON.
    pub(crate) limits: String,
    pub(crate) step_rows: Vec<StepRow>,
    pub(crate) approval_rows: Vec<ApprovalRow>,
    pub(crate) events: Vec<EncodedEvent>,
    /// The run's chain length the write expects to find (its
    /// compare-and-set): the run row's before the write's events.
    pub(crate) expect_chain_len: i64,
    /// The rows above, decoded back: what the caller's cache will hold.
    steps: Vec<Step>,
    approvals: Vec<Approval>,
}

impl Prepared {
    /// Encodes `write`, and decodes its rows back before anything is
    /// written, so that a row that would not load again is refused here.
    /// Links its events into the run's chain after the run row's head
    /// (a new run's chain starts at [`chain::genesis`]), seals its rows on
    /// the last one, and moves the run row's head on.
    pub fn new(mut write: Write) -> Result<Prepared, StoreError> {
        let events = match &mut write {
            Write::Create { events, .. } => std::mem::take(events),
            Write::Transition(t) => std::mem::take(&mut t.events),
        };
        let (run, steps, approvals) = match &mut write {
            Write::Create { run, steps, .. } => {
                run.chain_len = 0;
                run.chain_head = chain::genesis(&run.id, &run.goal, run.created_at);
                (run, &steps[..], &[][..])
            }
            Write::Transition(t) => (&mut t.run, &t.steps[..], &t.approvals[..]),
        };
        let limits = limits_json(&run.limits);
        let expect_chain_len = i64::try_from(run.chain_len)
            .map_err(|_| StoreError::BadRow(format!("run {}: chain too long", run.id)))?;
        let step_rows: Vec<StepRow> = steps.iter().map(|s| StepRow::encode(&run.id, s)).collect();
        let approval_rows: Vec<ApprovalRow> = approvals.iter().map(ApprovalRow::encode).collect();
        // A write with no event seals nothing: `keel verify` reports the
        // rows it changed until a later write of them seals them. Keel's
        // loop and operators journal every row they change.
        let seals = if events.is_empty() {
            String::new()
        } else {
            chain::Seals::of(run, &limits, &step_rows, &approval_rows)
        };
        let head = std::mem::take(&mut run.chain_head);
        let (events, head) = encode(&events, &run.id, run.updated_at, run.chain_len, head, seals);
        run.chain_len += events.len() as u64;
        run.chain_head = head;
        Ok(Prepared {
            expect_chain_len,
            limits,
            steps: step_rows
                .iter()
                .map(StepRow::decode)
                .collect::<Result<_, _>>()?,
            approvals: approval_rows
                .iter()
                .map(ApprovalRow::decode)
                .collect::<Result<_, _>>()?,
            step_rows,
            approval_rows,
            events,
            write,
        })
    }

    /// The run row this write stores, its chain moved on.
    pub fn run(&self) -> &Run {
        match &self.write {
            Write::Create { run, .. } => run,
            Write::Transition(t) => &t.run,
        }
    }

    /// This write's events linked after the chain the store holds, (`len`,
    /// `head`), when that is not the one it was prepared from: another
    /// writer's transition of the run came in between (with the status and
    /// owner this one expects). Returns the events and the new head.
    pub(crate) fn relinked(&self, len: i64, head: &str) -> (Vec<EncodedEvent>, String) {
        let run = self.run();
        let mut events = self.events.clone();
        let head = link_all(&mut events, &run.id, run.updated_at, len, head.to_string());
        (events, head)
    }

    /// What this write committed, given what its statements reported.
    pub fn committed(self, written: Written) -> Committed {
        let mut run = match self.write {
            Write::Create { run, .. } => run,
            Write::Transition(t) => t.run,
        };
        if let Some((len, head)) = written.chain {
            run.chain_len = len;
            run.chain_head = head;
        }
        let events = self
            .events
            .into_iter()
            .zip(written.seqs)
            .map(|(e, seq)| Event {
                seq,
                run_id: run.id.clone(),
                step_index: e.step_index,
                kind: std::borrow::Cow::Borrowed(e.kind),
                data: e.data,
                at: run.updated_at,
            })
            .collect();
        Committed {
            run,
            steps: self.steps,
            approvals: self.approvals,
            events,
        }
    }
}

/// `limits` as JSON. A run's limits go with every one of its writes and
/// seldom differ from the thread's previous write's, so the last encoding
/// is kept and reused while they are equal (serializing them was ~0.75%
/// of the fan-out's CPU).
fn limits_json(limits: &Limits) -> String {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Limits, String)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((l, json)) = last.as_ref() {
            if l == limits {
                return json.clone();
            }
        }
        let json = json(limits);
        *last = Some((limits.clone(), json.clone()));
        json
    })
}

/// What a write's statements produced that its caller could not know
/// beforehand: the sequence numbers of its events, in order, and the
/// chain's new length and head when its events were linked again after
/// another writer's (`Prepared::relinked`).
#[derive(Debug)]
pub struct Written {
    pub(crate) seqs: Vec<i64>,
    pub(crate) chain: Option<(u64, String)>,
}

/// A write the store's writer thread may commit in a group with others.
#[derive(Debug, Clone)]
pub enum Write {
    /// A new run, perhaps with its first step started, and its first
    /// events ([`super::Store::create_run`]).
    Create {
        /// The run row to insert; its chain is reset to start from its genesis hash.
        run: Run,
        /// The steps to insert with it.
        steps: Vec<Step>,
        /// Its first events.
        events: Vec<NewEvent>,
    },
    /// A transition of an existing run, committed only if its compare-and-set
    /// still holds.
    Transition(Transition),
}

pub(crate) fn json<T: serde::Serialize>(v: &T) -> String {
    // Serializing these plain enums and strings cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_limits_json_always_matches_the_limits_at_hand() {
        let a = Limits::default();
        let b = Limits {
            max_steps: 7,
            ..Limits::default()
        };
        for l in [&a, &a, &b, &b, &a, &b] {
            assert_eq!(limits_json(l), json(l));
        }
    }

    #[test]
    fn every_kind_of_step_round_trips_through_its_row() {
        for s in crate::types::samples::every_kind_of_step() {
            let row = StepRow::encode("run-1", &s);
            assert_eq!(row.decode().unwrap(), s, "{row:?}");
        }
    }

    #[test]
    fn a_step_row_spells_its_columns_as_the_schema_says() {
        let steps = crate::types::samples::every_kind_of_step();
        let row = StepRow::encode("run-1", &steps[2]);
        assert_eq!(row.state, "awaiting_approval");
        assert_eq!(row.effect.as_deref(), Some("local-mutation"));
        assert_eq!(row.call_args.as_deref(), Some(r#"{"path":"a"}"#));
        let row = StepRow::encode("run-1", &steps[6]);
        assert_eq!(row.obs_kind.as_deref(), Some("denied"));
        // A half-written column pair is refused, not read as nothing.
        let torn = StepRow {
            obs_content: None,
            ..row
        };
        assert!(matches!(torn.decode(), Err(StoreError::BadRow(_))));
    }
}
