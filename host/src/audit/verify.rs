//! Checking a run's journal against its hash chain: every event in place
//! and unedited, the run row's head at the last one, every step, approval
//! and run row equal to what its newest transition sealed, and every
//! approval bound to a head of the chain.

use crate::store::chain::{self, Link, Seals};
use crate::store::{ChainedEvent, Journal};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A run whose journal holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// The run's id.
    pub run_id: String,
    /// How many events its chain holds.
    pub events: u64,
    /// The hash of its newest event (what an auditor keeps).
    pub head: String,
}

/// What is wrong where a chain breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// An event's content no longer matches its hash.
    Edited,
    /// Positions are missing from the chain, or its end is gone.
    Deleted,
    /// An event that the chain does not hold: no position, a second event
    /// at one position, or one past the run row's chain.
    Inserted,
    /// Events out of their order in the chain.
    Reordered,
    /// The run row disagrees with its events.
    RunRow,
    /// A step row disagrees with its events.
    StepRow,
    /// An approval row disagrees with its events, or its hash does not
    /// bind it to the call and the chain.
    ApprovalRow,
}

impl Problem {
    /// The problem's snake_case name, as a break's message and JSON give it
    /// (`edited`, `run_row`).
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Edited => "edited",
            Problem::Deleted => "deleted",
            Problem::Inserted => "inserted",
            Problem::Reordered => "reordered",
            Problem::RunRow => "run_row",
            Problem::StepRow => "step_row",
            Problem::ApprovalRow => "approval_row",
        }
    }
}

/// The first place a run's journal does not hold.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("run {run_id}: {}{}: {detail}", problem.as_str(), at(*seq, *pos))]
pub struct Break {
    /// The run whose journal breaks.
    pub run_id: String,
    /// The number of the event where it breaks, if at an event.
    pub seq: Option<i64>,
    /// Its position in the run's chain.
    pub pos: Option<i64>,
    /// What is wrong there.
    pub problem: Problem,
    /// What was found, in words.
    pub detail: String,
}

fn at(seq: Option<i64>, pos: Option<i64>) -> String {
    match (seq, pos) {
        (Some(s), Some(p)) => format!(" at event {s} (position {p})"),
        (Some(s), None) => format!(" at event {s}"),
        (None, Some(p)) => format!(" at position {p}"),
        (None, None) => String::new(),
    }
}

/// Where the newest seal of a row was found.
struct Sealed {
    digest: String,
    seq: i64,
    pos: i64,
}

/// Checks `j`; the first break found, in chain order, if any.
pub fn verify(j: &Journal) -> Result<Verified, Break> {
    let run_id = &j.run.id;
    let brk = |e: Option<&ChainedEvent>, pos: Option<i64>, problem, detail: String| Break {
        run_id: run_id.clone(),
        seq: e.map(|e| e.seq),
        pos: pos.or(e.and_then(|e| e.pos)),
        problem,
        detail,
    };
    let genesis = chain::genesis(run_id, &j.run.goal, j.run.created_at);
    let mut heads: HashMap<String, i64> = HashMap::from([(genesis.clone(), 0)]);
    let mut prev = genesis;
    let mut run_seal: Option<Sealed> = None;
    let mut steps: BTreeMap<u32, Sealed> = BTreeMap::new();
    let mut approvals: BTreeMap<String, Sealed> = BTreeMap::new();
    let mut approval_born: HashMap<String, i64> = HashMap::new();
    for (i, e) in j.events.iter().enumerate() {
        let want = i as i64 + 1;
        let (Some(pos), Some(hash)) = (e.pos, e.hash.as_deref()) else {
            return Err(brk(
                Some(e),
                None,
                Problem::Inserted,
                "the event has no place in the chain (no position or hash): it was written outside Keel".into(),
            ));
        };
        if i as u64 >= j.run.chain_len {
            return Err(brk(
                Some(e),
                None,
                Problem::Inserted,
                format!(
                    "the run row's chain ends at position {}, and this event comes after it",
                    j.run.chain_len
                ),
            ));
        }
        if pos != want {
            let seen_before = j.events[..i].iter().any(|o| o.pos == Some(pos));
            let want_later = j.events[i + 1..].iter().any(|o| o.pos == Some(want));
            let (problem, detail) = if pos < want && seen_before {
                (
                    Problem::Inserted,
                    format!("a second event at position {pos}"),
                )
            } else if pos < want || want_later {
                (
                    Problem::Reordered,
                    format!("position {pos} is stored where position {want} belongs: events were swapped or renumbered"),
                )
            } else {
                (
                    Problem::Deleted,
                    if pos == want + 1 {
                        format!("the event at position {want} is missing")
                    } else {
                        format!("the events at positions {want} to {} are missing", pos - 1)
                    },
                )
            };
            return Err(brk(Some(e), None, problem, detail));
        }
        let h = chain::link(
            &prev,
            &Link {
                pos,
                run_id,
                step_index: e.step_index,
                kind: &e.kind,
                data: &e.data,
                at: e.at,
                seals: e.seals.as_deref(),
            },
        );
        if h != hash {
            return Err(brk(
                Some(e),
                None,
                Problem::Edited,
                format!(
                    "its content ({}) does not match its hash: it was edited, or an earlier event's hash was",
                    e.kind
                ),
            ));
        }
        if let Some(text) = &e.seals {
            let s: Seals = serde_json::from_str(text).map_err(|err| {
                brk(
                    Some(e),
                    None,
                    Problem::Edited,
                    format!("its seals do not parse: {err}"),
                )
            })?;
            let sealed = |digest: String| Sealed {
                digest,
                seq: e.seq,
                pos,
            };
            run_seal = Some(sealed(s.run));
            for (idx, d) in s.steps {
                steps.insert(idx, sealed(d));
            }
            for (id, d) in s.approvals {
                approval_born.entry(id.clone()).or_insert(pos);
                approvals.insert(id, sealed(d));
            }
        }
        heads.insert(h.clone(), pos);
        prev = h;
    }
    let n = j.events.len() as u64;
    if n < j.run.chain_len {
        return Err(brk(
            None,
            Some(n as i64 + 1),
            Problem::Deleted,
            format!(
                "the run row's chain holds {} events and the journal {n}: the last {} were deleted",
                j.run.chain_len,
                j.run.chain_len - n
            ),
        ));
    }
    if prev != j.run.chain_head {
        return Err(brk(
            None,
            None,
            Problem::RunRow,
            "the run row's chain head is not the hash of its last event".into(),
        ));
    }
    check_rows(j, run_seal, &steps, &approvals, &approval_born, &heads).map_err(
        |(s, problem, detail)| Break {
            run_id: run_id.clone(),
            seq: s.as_ref().map(|s| s.0),
            pos: s.as_ref().map(|s| s.1),
            problem,
            detail,
        },
    )?;
    Ok(Verified {
        run_id: run_id.clone(),
        events: n,
        head: prev,
    })
}

type RowBreak = (Option<(i64, i64)>, Problem, String);

/// Each row against its newest seal, and each approval against its hash
/// and the chain head it names.
fn check_rows(
    j: &Journal,
    run_seal: Option<Sealed>,
    steps: &BTreeMap<u32, Sealed>,
    approvals: &BTreeMap<String, Sealed>,
    approval_born: &HashMap<String, i64>,
    heads: &HashMap<String, i64>,
) -> Result<(), RowBreak> {
    let place = |s: &Sealed| Some((s.seq, s.pos));
    if let Some(s) = &run_seal {
        if chain::run_seal(&j.run, &j.limits) != s.digest {
            return Err((
                place(s),
                Problem::RunRow,
                "the run row (status, result, counters, limits or meta) differs from what its last transition sealed".into(),
            ));
        }
    }
    let mut rows = HashSet::new();
    for r in &j.steps {
        let idx = u32::try_from(r.idx).unwrap_or(u32::MAX);
        rows.insert(idx);
        match steps.get(&idx) {
            None => {
                return Err((
                    None,
                    Problem::StepRow,
                    format!(
                        "step {} has no seal in the chain: it was written outside Keel",
                        r.idx
                    ),
                ))
            }
            Some(s) if chain::step_seal(r) != s.digest => {
                return Err((
                    place(s),
                    Problem::StepRow,
                    format!(
                        "step {}'s row (version {}, {}) differs from what this event sealed",
                        r.idx, r.version, r.state
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some((idx, s)) = steps.iter().find(|(i, _)| !rows.contains(i)) {
        return Err((
            place(s),
            Problem::StepRow,
            format!("step {idx} was sealed here but its row is gone"),
        ));
    }
    let mut ids = HashSet::new();
    for r in &j.approvals {
        ids.insert(r.id.as_str());
        let Some(s) = approvals.get(&r.id) else {
            return Err((
                None,
                Problem::ApprovalRow,
                format!(
                    "approval {} has no seal in the chain: it was written outside Keel",
                    r.id
                ),
            ));
        };
        if chain::approval_seal(r) != s.digest {
            return Err((
                place(s),
                Problem::ApprovalRow,
                format!(
                    "approval {}'s row ({}) differs from what this event sealed",
                    r.id, r.status
                ),
            ));
        }
        bound(r, heads, approval_born.get(&r.id).copied()).map_err(|why| {
            (
                place(s),
                Problem::ApprovalRow,
                format!("approval {}: {why}", r.id),
            )
        })?;
    }
    if let Some((id, s)) = approvals.iter().find(|(id, _)| !ids.contains(id.as_str())) {
        return Err((
            place(s),
            Problem::ApprovalRow,
            format!("approval {id} was sealed here but its row is gone"),
        ));
    }
    Ok(())
}

/// Whether approval `r`'s hash covers its call and a chain head that the
/// run had before the approval was asked for (at position `born`).
fn bound(
    r: &crate::store::ApprovalRow,
    heads: &HashMap<String, i64>,
    born: Option<i64>,
) -> Result<(), String> {
    let a = r.decode().map_err(|e| e.to_string())?;
    let hash = crate::driver::approval_hash(
        a.kind,
        &a.call,
        &a.reason,
        &a.presentation,
        a.chain_head.as_deref(),
        a.tool_pin.as_deref(),
    );
    if hash != a.hash {
        return Err(
            "its hash does not cover its call, reason, presentation, chain head and tool pin"
                .into(),
        );
    }
    if let Some(head) = &a.chain_head {
        match (heads.get(head), born) {
            (Some(&p), Some(b)) if p < b => {}
            _ => {
                return Err(
                    "the chain head its hash covers is not one the run had before it was asked for"
                        .into(),
                )
            }
        }
    }
    Ok(())
}
