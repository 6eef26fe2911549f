//! The rules around an operator's word: a tool interrupted by a crash,
//! and a paused step once its approval is answered, denied or expired.

use super::{close, done_event, new_approval, pause_events, Ask, At, Write};
use crate::driver::{approval_hash, DriverError};
use crate::store::NewEvent;
use crate::types::*;
use serde_json::json;

/// What to do with a step found executing after a crash.
pub(crate) enum Interrupt {
    /// Its tool is safe to run again: the write marks it interrupted, and
    /// the loop runs the tool again.
    Retry(Write),
    /// A side effect may have happened: the write pauses the run on an
    /// approval to run it again.
    Ask(Write),
}

/// Step `i`, found executing (or interrupted) after a crash: the tool may
/// or may not have run.
pub(crate) fn interrupt(
    at: At,
    i: u32,
    ask: impl FnOnce(&str) -> Ask,
) -> Result<Interrupt, DriverError> {
    let mut s = at.step(i);
    let (Some(call), Some(effect)) = (s.call.clone(), s.effect) else {
        return Err(DriverError::Invalid(format!(
            "step {i} is executing without a call"
        )));
    };
    let mut events = vec![];
    if s.state != StepState::Interrupted {
        s.version += 1;
        s.state = StepState::Interrupted;
        s.updated_at = at.now;
        let data = json!({ "tool": call.tool, "effect": effect });
        events.push(NewEvent::new(EventKind::StepInterrupted, Some(i), data));
    }
    if effect.safe_to_retry() {
        return Ok(Interrupt::Retry(Write::of(at.next_run(), vec![s], events)));
    }
    // A side effect may have happened: never run it again silently.
    let reason = format!(
        "the {} tool {:?} was running when its process stopped; it may or may not have taken effect. Approve to run it again.",
        effect, call.tool
    );
    let presentation = json!({ "step": i, "effect": effect }).to_string();
    let kind = ApprovalKind::InterruptedSideEffect;
    let ask = ask(&call.tool);
    let approval = new_approval(at, i, kind, call, reason, presentation, ask);
    let asked =
        json!({ "approval": approval.id, "kind": approval.kind, "reason": approval.reason });
    events.extend(pause_events(&approval, asked));
    let mut run = at.next_run();
    run.status = RunStatus::WaitingForApproval;
    Ok(Interrupt::Ask(Write {
        run,
        steps: vec![s],
        approvals: vec![approval],
        events,
    }))
}

/// The latest approval of step `i`, which the run waits on.
pub(crate) fn approval_of(at: At<'_>, i: u32) -> Result<&Approval, DriverError> {
    at.approvals
        .iter()
        .rev()
        .find(|a| a.step_index == i)
        .ok_or_else(|| {
            DriverError::Invalid(format!(
                "run {} waits for approval but step {i} has none",
                at.run.id
            ))
        })
}

/// What a paused step's approval leads to.
pub(crate) enum Answer {
    /// Nobody answered yet: the run stays paused.
    Wait,
    /// Approved: the write resumes the run with the step executing, and
    /// the loop runs the tool.
    Execute(Write),
    /// Denied, expired, or approved for a tool that changed since: the
    /// write closes the step and resumes the run.
    Close(Write),
}

/// Paused step `i` as its approval `a` now stands. `now_pin` is the
/// schema pin the tool has now.
pub(crate) fn answered(at: At, a: &Approval, now_pin: Option<&str>) -> Result<Answer, DriverError> {
    let step = at.step(a.step_index);
    match a.status {
        ApprovalStatus::Pending if a.expires_at.is_some_and(|e| e <= at.now) => {
            let mut expired = a.clone();
            expired.status = ApprovalStatus::Expired;
            expired.decided_at = Some(at.now);
            let why = "the approval expired before an operator answered";
            let obs = Observation::message(ObservationKind::Denied, "reason", why);
            let data = json!({ "approval": a.id });
            let w = close_paused(
                at,
                step,
                obs,
                vec![expired],
                EventKind::ApprovalExpired,
                data,
            );
            Ok(Answer::Close(w))
        }
        ApprovalStatus::Pending => Ok(Answer::Wait),
        ApprovalStatus::Expired | ApprovalStatus::Denied | ApprovalStatus::Cancelled => {
            let why = match (&a.decided_by, &a.note) {
                (Some(by), Some(n)) => format!("denied by {by}: {n}"),
                (Some(by), None) => format!("denied by {by}"),
                _ => "the approval expired".to_string(),
            };
            let data = json!({ "approval": a.id, "status": a.status });
            Ok(Answer::Close(deny(at, step, &why, data)))
        }
        ApprovalStatus::Approved => approve(at, a, step, now_pin),
    }
}

/// Paused `step` as approval `a` (approved) leaves it.
fn approve(at: At, a: &Approval, step: Step, now_pin: Option<&str>) -> Result<Answer, DriverError> {
    check_approval(a, &step)?;
    if a.tool_pin.as_deref() != now_pin {
        // Approved for one schema, the tool now has another: the call is
        // not run; the agent may ask again.
        let why = format!(
            "the approval was given for the tool {:?} with its schemas pinned at {}, and they are now {}: the call is not run on it",
            a.call.tool,
            a.tool_pin.as_deref().unwrap_or("(no pin)"),
            now_pin.unwrap_or("(no pin)")
        );
        let data = json!({ "approval": a.id, "status": a.status, "error": why });
        return Ok(Answer::Close(deny(at, step, &why, data)));
    }
    let i = step.index;
    let mut s = step;
    s.version += 1;
    s.state = StepState::Executing;
    s.updated_at = at.now;
    let mut run = at.next_run();
    run.status = RunStatus::Running;
    let events = vec![
        NewEvent::new(
            EventKind::RunResumed,
            Some(i),
            json!({ "approval": a.id, "by": a.decided_by }),
        ),
        NewEvent::new(
            EventKind::StepExecuting,
            Some(i),
            json!({ "tool": a.call.tool }),
        ),
    ];
    Ok(Answer::Execute(Write::of(run, vec![s], events)))
}

/// Refuses an approval whose row or step no longer match its hash.
fn check_approval(a: &Approval, step: &Step) -> Result<(), DriverError> {
    let tampered = |why: &str| DriverError::Tampered {
        id: a.id.clone(),
        why: why.into(),
    };
    let hash = approval_hash(
        a.kind,
        &a.call,
        &a.reason,
        &a.presentation,
        a.chain_head.as_deref(),
        a.tool_pin.as_deref(),
    );
    if hash != a.hash {
        return Err(tampered("its stored call, reason or presentation changed"));
    }
    if step.call.as_ref() != Some(&a.call) {
        return Err(tampered("the step's call differs from the approved call"));
    }
    if a.kind == ApprovalKind::Policy {
        let same = matches!(&step.verdict, Some(Verdict::RequireApproval(r))
            if r.reason == a.reason && r.presentation == a.presentation);
        if !same {
            return Err(tampered(
                "the step's verdict differs from what was approved",
            ));
        }
    }
    Ok(())
}

/// Closes the paused step `s` as denied, saying `why`, and resumes.
fn deny(at: At, s: Step, why: &str, data: serde_json::Value) -> Write {
    let obs = Observation::message(ObservationKind::Denied, "reason", why);
    close_paused(at, s, obs, vec![], EventKind::RunResumed, data)
}

/// Closes the paused step `s` with `obs`, recording `kind` with `data`,
/// and resumes the run; a closed step counts as a failure.
fn close_paused(
    at: At,
    mut s: Step,
    obs: Observation,
    approvals: Vec<Approval>,
    kind: EventKind,
    data: serde_json::Value,
) -> Write {
    let i = s.index;
    s.version += 1;
    s.updated_at = at.now;
    close(&mut s, obs);
    let mut run = at.next_run();
    run.status = RunStatus::Running;
    run.consecutive_failures += 1;
    let events = vec![NewEvent::new(kind, Some(i), data), done_event(&s)];
    Write {
        run,
        steps: vec![s],
        approvals,
        events,
    }
}
