//! What an operator's cancel does to a run, written as one transition.
//!
//! Cancelling ends the run (`cancelled`, `operator_cancelled`) and settles
//! what it was in, in the same transaction, so that nothing is left open:
//!
//! * a step not yet judged (started or decided) ends done, with a final
//!   observation that says it was cancelled: nothing ran;
//! * a step waiting for an approval ends done (`denied`, "cancelled"), and
//!   every pending approval of the run is closed as `cancelled`;
//! * a step whose tool is executing becomes `interrupted`, with an event
//!   saying the effect may or may not have happened. A live loop lets the
//!   tool finish and then records its result on the step (`step.done`,
//!   `settled: true`); a loop that died leaves the step interrupted, which
//!   is exactly what is known about it.
//!
//! A live lease is kept on the cancelled run, so that its holder can settle
//! the executing step and release it; an expired one is cleared.

use crate::store::{Expect, NewEvent, StoreError, Transition};
use crate::types::*;
use serde_json::json;

/// The transition that cancels `run` (not terminal) on behalf of `who`.
pub fn cancel_transition(
    run: &Run,
    steps: &[Step],
    approvals: &[Approval],
    who: &str,
    now: i64,
) -> Transition {
    let mut next = run.clone();
    next.status = RunStatus::Cancelled;
    next.reason = Some(RunReason::OperatorCancelled);
    next.result = Some(json!({ "error": format!("cancelled by {who}") }).to_string());
    next.updated_at = now;
    next.retry_at = None;
    if next.lease_expires.is_none_or(|e| e <= now) {
        next.lease_owner = None;
        next.lease_expires = None;
    }
    let mut events = Vec::new();
    let mut closed = Vec::new();
    for a in approvals
        .iter()
        .filter(|a| a.status == ApprovalStatus::Pending)
    {
        let mut a = a.clone();
        a.status = ApprovalStatus::Cancelled;
        a.decided_by = Some(who.to_string());
        a.note = Some("the run was cancelled".into());
        a.decided_at = Some(now);
        events.push(NewEvent::new(
            EventKind::ApprovalCancelled,
            Some(a.step_index),
            json!({ "approval": a.id, "by": who }),
        ));
        closed.push(a);
    }
    let mut settled = Vec::new();
    if let Some(last) = steps.last() {
        let mut s = last.clone();
        let i = s.index;
        let done = |s: &mut Step, obs: Observation| {
            s.version += 1;
            s.state = StepState::Done;
            s.observation = Some(obs);
            s.updated_at = now;
        };
        match s.state {
            StepState::Started | StepState::Decided => {
                let why = format!("the run was cancelled by {who} before this step ran anything");
                done(
                    &mut s,
                    Observation::message(ObservationKind::Final, "cancelled", &why),
                );
                events.push(NewEvent::new(
                    EventKind::StepDone,
                    Some(i),
                    json!({ "observation": s.observation }),
                ));
                settled.push(s);
            }
            StepState::AwaitingApproval => {
                let why = format!("the run was cancelled by {who} before an operator answered");
                done(
                    &mut s,
                    Observation::message(ObservationKind::Denied, "reason", &why),
                );
                events.push(NewEvent::new(
                    EventKind::StepDone,
                    Some(i),
                    json!({ "observation": s.observation }),
                ));
                settled.push(s);
            }
            StepState::Executing => {
                s.version += 1;
                s.state = StepState::Interrupted;
                s.updated_at = now;
                events.push(NewEvent::new(
                    EventKind::StepInterrupted,
                    Some(i),
                    json!({
                        "tool": s.call.as_ref().map(|c| c.tool.clone()),
                        "effect": s.effect,
                        "why": "the run was cancelled while the tool ran; it may or may not have taken effect, and a live loop records its result when it returns",
                    }),
                ));
                settled.push(s);
            }
            StepState::Done | StepState::Interrupted => {}
        }
    }
    events.push(NewEvent::new(
        EventKind::RunCancelled,
        None,
        json!({ "by": who, "was": run.status, "reason": "operator_cancelled" }),
    ));
    Transition {
        expect: Expect {
            status: run.status,
            owner: run.lease_owner.clone(),
        },
        run: next,
        steps: settled,
        approvals: closed,
        events,
        model_calls: vec![],
    }
}

/// Cancels a run through `store`: reads it, builds [`cancel_transition`]
/// and commits it, reading again if the run moved on meanwhile (the
/// compare-and-set is on its status and lease owner). A terminal run is
/// refused.
pub fn cancel(
    store: &mut crate::store::Store,
    run_id: &str,
    who: &str,
    now: i64,
) -> Result<Run, StoreError> {
    for _ in 0..20 {
        let run = store.run(run_id)?;
        if run.status.is_terminal() {
            return Err(StoreError::Refused(format!(
                "run {run_id} is already {}",
                run.status
            )));
        }
        let steps = store.load_steps(run_id)?;
        let approvals = store.load_approvals(run_id)?;
        match store.commit(cancel_transition(&run, &steps, &approvals, who, now)) {
            Ok(done) => return Ok(done.run),
            Err(StoreError::Conflict { .. }) => continue, // a step moved on: read again
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Refused(format!(
        "run {run_id} kept changing while it was being cancelled; try again"
    )))
}
