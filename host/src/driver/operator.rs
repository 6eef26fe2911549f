//! What operators and lease takers do to a run, each written once as a
//! transition with its compare-and-set, so that every store engine commits
//! the same rules: cancel, approve or deny, take a lease.
//!
//! Cancelling:
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

use crate::store::{Expect, NewEvent, RunStore, StoreError, Transition};
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
    let closed = close_pending(approvals, who, now, &mut events);
    let settled: Vec<Step> = steps
        .last()
        .and_then(|last| settle_cancelled(last, who, now, &mut events))
        .into_iter()
        .collect();
    events.push(NewEvent::new(
        EventKind::RunCancelled,
        None,
        json!({ "by": who, "was": run.status, "reason": "operator_cancelled" }),
    ));
    Transition {
        expect: Expect {
            status: run.status,
            owner: run.lease_owner.clone(),
            pending_approval: None,
        },
        run: next,
        steps: settled,
        approvals: closed,
        events,
        model_calls: vec![],
    }
}

/// Closes every pending approval of a run `who` cancels, with its event.
fn close_pending(
    approvals: &[Approval],
    who: &str,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Vec<Approval> {
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
    closed
}

/// The run's last step `last` as a cancel by `who` leaves it, when the
/// cancel changes it, with its event.
fn settle_cancelled(last: &Step, who: &str, now: i64, events: &mut Vec<NewEvent>) -> Option<Step> {
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
            Some(s)
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
            Some(s)
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
            Some(s)
        }
        StepState::Done | StepState::Interrupted => None,
    }
}

/// How often a rule reads again when the run moved on between its read and
/// its write (a step committed meanwhile), before it gives up.
const ATTEMPTS: usize = 20;

/// Whether an attempt of a rule lost its compare-and-set and may be read
/// and tried again (at most [`ATTEMPTS`] times in all).
fn again<T>(r: &Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Conflict { .. }))
}

/// Runs `attempt` (read, build the transition, commit) again while its
/// commit loses the compare-and-set, at most `ATTEMPTS` times; then
/// `gave_up`. (The async rules loop the same way, without a closure, so
/// that their futures stay `Send`.)
pub fn retried_sync<T>(
    gave_up: StoreError,
    mut attempt: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    for _ in 0..ATTEMPTS {
        match attempt() {
            Err(StoreError::Conflict { .. }) => continue,
            done => return done,
        }
    }
    Err(gave_up)
}

/// Cancels a run through `store`: reads it, builds [`cancel_transition`]
/// and commits it, reading again if the run moved on meanwhile (the
/// compare-and-set is on its status and lease owner). A terminal run is
/// refused.
pub async fn cancel_in(
    store: &dyn RunStore,
    run_id: &str,
    who: &str,
    now: i64,
) -> Result<Run, StoreError> {
    for _ in 0..ATTEMPTS {
        let run = store.run(run_id).await?;
        refuse_terminal(&run)?;
        let steps = store.steps(run_id).await?;
        let approvals = store.approvals(run_id).await?;
        let t = cancel_transition(&run, &steps, &approvals, who, now);
        let r = store.commit(t).await;
        if !again(&r) {
            return Ok(r?.run);
        }
    }
    Err(kept_changing(run_id))
}

/// [`cancel_in`] on a SQLite store held directly.
pub fn cancel(
    store: &mut crate::store::Store,
    run_id: &str,
    who: &str,
    now: i64,
) -> Result<Run, StoreError> {
    retried_sync(kept_changing(run_id), || {
        let run = store.run(run_id)?;
        refuse_terminal(&run)?;
        let steps = store.load_steps(run_id)?;
        let approvals = store.load_approvals(run_id)?;
        let t = cancel_transition(&run, &steps, &approvals, who, now);
        Ok(store.commit(t)?.run)
    })
}

fn refuse_terminal(run: &Run) -> Result<(), StoreError> {
    if run.status.is_terminal() {
        return Err(StoreError::Refused(format!(
            "run {} is already {}",
            run.id, run.status
        )));
    }
    Ok(())
}

fn kept_changing(run_id: &str) -> StoreError {
    StoreError::Refused(format!(
        "run {run_id} kept changing while it was being cancelled; try again"
    ))
}

/// The transition that records an operator's decision on approval `a` of
/// `run`: it must be pending and unexpired, and the run waiting for it.
/// The run stays paused; `resume` acts on the decision. Its
/// compare-and-set includes the approval still being pending, so two
/// operators deciding at once cannot both succeed.
pub fn decision_transition(
    run: &Run,
    a: &Approval,
    approve: bool,
    who: &str,
    note: Option<&str>,
    now: i64,
) -> Result<Transition, StoreError> {
    if a.status != ApprovalStatus::Pending {
        return Err(StoreError::Refused(format!(
            "approval {} is not pending: it is {}",
            a.id, a.status
        )));
    }
    if a.expires_at.is_some_and(|exp| exp <= now) {
        return Err(StoreError::Refused(format!(
            "approval {} expired; resume the run to record the expiry",
            a.id
        )));
    }
    if run.status != RunStatus::WaitingForApproval {
        return Err(StoreError::Refused(format!(
            "run {} is {}, not waiting for approval",
            run.id, run.status
        )));
    }
    let mut decided = a.clone();
    decided.status = if approve {
        ApprovalStatus::Approved
    } else {
        ApprovalStatus::Denied
    };
    decided.decided_by = Some(who.to_string());
    decided.note = note.map(str::to_string);
    decided.decided_at = Some(now);
    let kind = if approve {
        EventKind::ApprovalApproved
    } else {
        EventKind::ApprovalDenied
    };
    let mut next = run.clone();
    next.updated_at = now;
    Ok(Transition {
        expect: Expect {
            status: run.status,
            owner: run.lease_owner.clone(),
            pending_approval: Some(a.id.clone()),
        },
        run: next,
        steps: vec![],
        approvals: vec![decided],
        events: vec![NewEvent::new(
            kind,
            Some(a.step_index),
            json!({ "approval": a.id, "by": who, "note": note }),
        )],
        model_calls: vec![],
    })
}

/// Records an operator's decision through `store` (see
/// [`decision_transition`]) and returns the decided approval.
pub async fn decide_in(
    store: &dyn RunStore,
    approval_id: &str,
    approve: bool,
    who: &str,
    note: Option<&str>,
    now: i64,
) -> Result<Approval, StoreError> {
    let a = store.approval(approval_id).await?;
    let run = store.run(&a.run_id).await?;
    let t = decision_transition(&run, &a, approve, who, note, now)?;
    let done = store
        .commit(t)
        .await
        .map_err(|e| decided_meanwhile(approval_id, e))?;
    Ok(done.approvals.into_iter().next().unwrap_or(a))
}

/// A decision's compare-and-set failed: someone else decided, or the run
/// moved on.
pub fn decided_meanwhile(approval_id: &str, e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict { .. } => StoreError::Refused(format!(
            "approval {approval_id} was decided or its run changed meanwhile; look again"
        )),
        e => e,
    }
}

/// The transition that gives `run`'s lease to `owner` until `now + ttl_ms`.
/// A lease that is free, expired, or held by a process of this host that
/// is gone is taken; one held elsewhere only with `take_over` (the
/// operator who says its holder is gone). Every taking from another owner
/// is journaled (`lease.taken_over`, with why).
pub fn lease_transition(
    run: &Run,
    owner: &str,
    now: i64,
    ttl_ms: i64,
    take_over: Option<&str>,
) -> Result<Transition, StoreError> {
    if run.status.is_terminal() {
        return Err(StoreError::Terminal {
            run_id: run.id.clone(),
            status: run.status,
        });
    }
    let mut events = Vec::new();
    match (&run.lease_owner, run.lease_expires) {
        (Some(o), Some(exp)) if o != owner && exp > now => {
            let why = match take_over {
                Some(by) => json!({ "why": "operator", "by": by }),
                None if crate::store::lease::holder_gone(o) => json!({ "why": "holder_gone" }),
                None => {
                    return Err(StoreError::Leased {
                        run_id: run.id.clone(),
                        owner: o.clone(),
                        expires: exp,
                    })
                }
            };
            let mut why = why;
            why["from"] = json!(o);
            why["to"] = json!(owner);
            why["expires_at"] = json!(exp);
            events.push(NewEvent::new(EventKind::LeaseTakenOver, None, why));
        }
        (Some(o), _) if o != owner => events.push(NewEvent::new(
            EventKind::LeaseTakenOver,
            None,
            json!({ "from": o, "to": owner, "why": "expired", "expired_at": run.lease_expires }),
        )),
        _ => {}
    }
    let mut next = run.clone();
    next.lease_owner = Some(owner.to_string());
    next.lease_expires = Some(now + ttl_ms);
    next.updated_at = now;
    Ok(Transition {
        expect: Expect {
            status: run.status,
            owner: run.lease_owner.clone(),
            pending_approval: None,
        },
        run: next,
        steps: vec![],
        approvals: vec![],
        events,
        model_calls: vec![],
    })
}

/// Takes `run_id`'s lease through `store` (see [`lease_transition`]).
pub async fn take_lease_in(
    store: &dyn RunStore,
    run_id: &str,
    owner: &str,
    now: i64,
    ttl_ms: i64,
    take_over: Option<&str>,
) -> Result<Run, StoreError> {
    // A conflict means the run moved on since it was read (another taker
    // won, or a step committed): read again, and the rules say what now.
    for _ in 0..ATTEMPTS {
        let run = store.run(run_id).await?;
        let t = lease_transition(&run, owner, now, ttl_ms, take_over)?;
        let r = store.commit(t).await;
        if !again(&r) {
            return Ok(r?.run);
        }
    }
    Err(lease_changed(run_id))
}

/// The lease kept moving between the reads and the writes.
pub fn lease_changed(run_id: &str) -> StoreError {
    StoreError::Refused(format!("run {run_id}: lease changed while taking it"))
}
