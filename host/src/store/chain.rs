//! The journal's hash chain: how an event's hash, a run's first link and a
//! row's seal are computed. Every engine stores what these functions
//! return, and `keel verify` recomputes them from what is stored; the
//! encoding is written out in `docs/journal.md` so that an auditor can
//! recompute a chain without Keel.
//!
//! Each run has its own chain. It starts from [`genesis`], a hash of the
//! run's creation, and each event's hash covers the previous hash and the
//! event's own content, position in the run included ([`link`]). The last
//! event of a transition also carries the seals of the rows that
//! transition wrote ([`Seals`]), so that a step, approval or run row that
//! was edited afterwards no longer matches its newest seal.

use super::encode::{ApprovalRow, StepRow};
use crate::types::Run;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Names the encoding; it is the first thing every hash covers.
pub const CHAIN_VERSION: &str = "keel.chain.v1";

/// A SHA-256 over a sequence of typed, length-prefixed fields, so that no
/// two different sequences of fields feed it the same bytes.
struct Fields(Sha256);

impl Fields {
    fn new(domain: &str) -> Fields {
        let mut f = Fields(Sha256::new());
        f.text(CHAIN_VERSION);
        f.text(domain);
        f
    }

    fn text(&mut self, s: &str) {
        self.0.update([b'T']);
        self.0.update((s.len() as u64).to_le_bytes());
        self.0.update(s.as_bytes());
    }

    fn opt_text(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.text(s),
            None => self.0.update([b'N']),
        }
    }

    fn int(&mut self, i: i64) {
        self.0.update([b'I']);
        self.0.update(i.to_le_bytes());
    }

    fn opt_int(&mut self, i: Option<i64>) {
        match i {
            Some(i) => self.int(i),
            None => self.0.update([b'N']),
        }
    }

    fn finish(self) -> String {
        let mut out = String::with_capacity(64);
        self.finish_into(&mut out);
        out
    }

    /// Appends the hash, in hex, to `out`.
    fn finish_into(self, out: &mut String) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for b in self.0.finalize() {
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
}

/// The hash a run's chain starts from: its id, goal and creation time.
pub fn genesis(run_id: &str, goal: &str, created_at: i64) -> String {
    let mut f = Fields::new("genesis");
    f.text(run_id);
    f.text(goal);
    f.int(created_at);
    f.finish()
}

/// One event as the chain covers it: every column but its global number.
#[derive(Debug, Clone, Copy)]
pub struct Link<'a> {
    /// 1 for a run's first event, one more for each next.
    pub pos: i64,
    /// The run whose chain the event is in.
    pub run_id: &'a str,
    /// The step the event is about, if any (its `step_idx` column).
    pub step_index: Option<i64>,
    /// The event's kind as stored, such as `step.started`.
    pub kind: &'a str,
    /// The event's data as stored (JSON text).
    pub data: &'a str,
    /// When the event was written (ms since the epoch).
    pub at: i64,
    /// The seals the event carries, as stored, if any.
    pub seals: Option<&'a str>,
}

/// The hash of `l`, following the hash `prev`.
pub fn link(prev: &str, l: &Link<'_>) -> String {
    let mut f = Fields::new("event");
    f.text(prev);
    f.int(l.pos);
    f.text(l.run_id);
    f.opt_int(l.step_index);
    f.text(l.kind);
    f.text(l.data);
    f.int(l.at);
    f.opt_text(l.seals);
    f.finish()
}

/// The seal of a step row: every column.
pub fn step_seal(r: &StepRow) -> String {
    step_fields(r).finish()
}

fn step_fields(r: &StepRow) -> Fields {
    let mut f = Fields::new("step");
    f.text(&r.run_id);
    f.int(r.idx);
    f.int(r.version);
    f.text(&r.state);
    f.opt_text(r.decision.as_deref());
    f.opt_text(r.call_tool.as_deref());
    f.opt_text(r.call_args.as_deref());
    f.opt_text(r.effect.as_deref());
    f.opt_text(r.verdict.as_deref());
    f.opt_text(r.obs_kind.as_deref());
    f.opt_text(r.obs_content.as_deref());
    f.int(r.started_at);
    f.int(r.updated_at);
    f
}

/// The seal of an approval row: every column.
pub fn approval_seal(r: &ApprovalRow) -> String {
    approval_fields(r).finish()
}

fn approval_fields(r: &ApprovalRow) -> Fields {
    let mut f = Fields::new("approval");
    f.text(&r.id);
    f.text(&r.run_id);
    f.int(r.step_idx);
    f.text(&r.kind);
    f.text(&r.status);
    f.text(&r.tool);
    f.text(&r.arguments);
    f.text(&r.reason);
    f.text(&r.presentation);
    f.text(&r.hash);
    f.int(r.created_at);
    f.opt_int(r.expires_at);
    f.opt_text(r.decided_by.as_deref());
    f.opt_text(r.note.as_deref());
    f.opt_int(r.decided_at);
    f.opt_text(r.chain_head.as_deref());
    f
}

/// The seal of a run row: what its transitions decide. The lease columns
/// and `updated_at` are left out (a heartbeat moves them without an
/// event), and so is the chain itself, which is checked on its own.
/// `limits` is the column's text.
pub fn run_seal(run: &Run, limits: &str) -> String {
    run_fields(run, limits).finish()
}

fn run_fields(run: &Run, limits: &str) -> Fields {
    let mut f = Fields::new("run");
    f.text(&run.id);
    f.text(&run.goal);
    f.text(run.status.as_str());
    f.opt_text(run.reason.map(|r| r.as_str()));
    f.opt_text(run.result.as_deref());
    f.text(limits);
    f.text(&run.meta);
    f.int(run.step_count.into());
    f.int(run.model_calls.into());
    f.int(i64::try_from(run.tokens).unwrap_or(i64::MAX));
    f.int(run.consecutive_failures.into());
    f.int(run.created_at);
    f.opt_int(run.retry_at);
    f
}

/// The seals of the rows one transition wrote, carried by its last event.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Seals {
    /// The run row's seal ([`run_seal`]).
    pub run: String,
    /// Step rows by index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<u32, String>,
    /// Approval rows by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approvals: BTreeMap<String, String>,
}

impl Seals {
    /// The seals of `run`, `steps` and `approvals`, as text for an event.
    ///
    /// Written straight into one string, in the form [`Seals`] reads
    /// back (a write seals a few rows per step, and every step writes).
    /// A write naming one step twice seals its last version, as it stores
    /// it.
    pub fn of(run: &Run, limits: &str, steps: &[StepRow], approvals: &[ApprovalRow]) -> String {
        use std::fmt::Write;
        let mut out = String::with_capacity(96 + 80 * (steps.len() + approvals.len()));
        out.push_str("{\"run\":\"");
        run_fields(run, limits).finish_into(&mut out);
        out.push('"');
        let last = |i: usize| !steps[i + 1..].iter().any(|r| r.idx == steps[i].idx);
        let mut first = true;
        for (_, r) in steps.iter().enumerate().filter(|&(i, _)| last(i)) {
            out.push_str(if first { ",\"steps\":{" } else { "," });
            first = false;
            let _ = write!(out, "\"{}\":\"", r.idx);
            step_fields(r).finish_into(&mut out);
            out.push('"');
        }
        if !first {
            out.push('}');
        }
        if !approvals.is_empty() {
            out.push_str(",\"approvals\":{");
            for (i, r) in approvals.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&super::encode::json(&r.id));
                out.push_str(":\"");
                approval_fields(r).finish_into(&mut out);
                out.push('"');
            }
            out.push('}');
        }
        out.push('}');
        out
    }
}

/// What linking a run's events written before the chain gives: each
/// event's position, seals and hash by its number, and the run row's new
/// chain length and head.
#[derive(Debug, Clone, PartialEq)]
pub struct Backfill {
    /// For each event: its number (`seq`), its position in the chain, the seals it
    /// carries (the last event only) and its hash.
    pub events: Vec<(i64, i64, Option<String>, String)>,
    /// The run row's new `chain_len`: how many events were linked.
    pub len: u64,
    /// The run row's new `chain_head`: the last event's hash, or the run's
    /// [`genesis`] when it has no events.
    pub head: String,
}

/// Links `j`'s events into a chain as a store migrated to the chain does
/// for runs written before it: in the order of their numbers, the last one
/// sealing the rows as they are now. `None` when the run is linked already.
pub fn backfill(j: &super::Journal) -> Option<Backfill> {
    if j.run.chain_len > 0 || j.events.iter().any(|e| e.pos.is_some()) {
        return None;
    }
    let mut head = genesis(&j.run.id, &j.run.goal, j.run.created_at);
    let n = j.events.len();
    let mut out = Vec::with_capacity(n);
    for (i, e) in j.events.iter().enumerate() {
        let pos = i as i64 + 1;
        let seals = (i + 1 == n).then(|| Seals::of(&j.run, &j.limits, &j.steps, &j.approvals));
        head = link(
            &head,
            &Link {
                pos,
                run_id: &j.run.id,
                step_index: e.step_index,
                kind: &e.kind,
                data: &e.data,
                at: e.at,
                seals: seals.as_deref(),
            },
        );
        out.push((e.seq, pos, seals, head.clone()));
    }
    Some(Backfill {
        events: out,
        len: n as u64,
        head,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(data: &str) -> Link<'_> {
        Link {
            pos: 1,
            run_id: "run-1",
            step_index: Some(0),
            kind: "step.started",
            data,
            at: 5,
            seals: None,
        }
    }

    #[test]
    fn every_field_of_an_event_moves_its_hash() {
        let g = genesis("run-1", "goal", 1);
        let base = link(&g, &l("{}"));
        assert_eq!(base, link(&g, &l("{}")), "the hash is a function");
        let variants = [
            Link { pos: 2, ..l("{}") },
            Link {
                run_id: "run-2",
                ..l("{}")
            },
            Link {
                step_index: None,
                ..l("{}")
            },
            Link {
                kind: "step.done",
                ..l("{}")
            },
            l("{ }"),
            Link { at: 6, ..l("{}") },
            Link {
                seals: Some(""),
                ..l("{}")
            },
        ];
        for v in &variants {
            assert_ne!(link(&g, v), base, "{v:?}");
        }
        assert_ne!(link(&genesis("run-1", "goal", 2), &l("{}")), base);
    }

    #[test]
    fn seals_written_by_hand_read_back_as_the_rows_seals() {
        let run = Run::new("run-\"1", "g", Default::default(), 1);
        let step = |idx, version| StepRow {
            version,
            ..StepRow::encode("run-1", &crate::types::Step::started(idx, 0))
        };
        let rows = [step(0, 1), step(1, 1), step(0, 2)];
        let text = Seals::of(&run, "{}", &rows, &[]);
        let back: Seals = serde_json::from_str(&text).unwrap();
        assert_eq!(back.run, run_seal(&run, "{}"));
        assert_eq!(back.steps.len(), 2);
        assert_eq!(back.steps[&0], step_seal(&rows[2]), "the last version");
        assert_eq!(back.steps[&1], step_seal(&rows[1]));
        assert!(back.approvals.is_empty());
        let only_run: Seals = serde_json::from_str(&Seals::of(&run, "{}", &[], &[])).unwrap();
        assert!(only_run.steps.is_empty());
    }

    #[test]
    fn fields_are_length_prefixed_so_boundaries_cannot_shift() {
        let a = Link {
            run_id: "ab",
            kind: "c",
            ..l("{}")
        };
        let b = Link {
            run_id: "a",
            kind: "bc",
            ..l("{}")
        };
        assert_ne!(link("x", &a), link("x", &b));
    }
}
