//! The rules of a run as pure functions. Each takes the run as its loop
//! holds it ([`At`]: the run row, its steps and approvals, the time) and
//! what a consumer or an operator answered, and returns the write that
//! follows ([`Write`]). No store, no clock, no consumer call happens in
//! here: the loop awaits the consumer, applies a rule and commits what it
//! returns. [`TABLE`] lists every rule with the states it moves between;
//! the tests exercise each row.

mod pause;
mod run;
mod step;
#[cfg(test)]
mod tests;

pub(crate) use pause::{answered, approval_of, interrupt, Answer, Interrupt};
pub(crate) use run::{create, fail_at, limit, park, start_next, start_step, unpark};
pub(crate) use step::{decide, decided_call, executed, judge, Decided};

use crate::store::NewEvent;
use crate::types::*;
use serde_json::json;

/// The run as a loop holds it at `now`: what every rule reads.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub run: &'a Run,
    pub steps: &'a [Step],
    pub approvals: &'a [Approval],
    pub now: i64,
    /// How long the lease that each write renews lasts.
    pub lease_ttl_ms: i64,
}

impl At<'_> {
    /// The run row as the next write leaves it: touched at `now`, its
    /// lease renewed.
    pub(crate) fn next_run(&self) -> Run {
        let mut run = self.run.clone();
        run.updated_at = self.now;
        run.lease_expires = Some(self.now + self.lease_ttl_ms);
        run
    }

    fn step(&self, i: u32) -> Step {
        self.steps[i as usize].clone()
    }
}

/// One write of a run: its next row, the steps and approvals it changes,
/// and the events it records, in order.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub run: Run,
    pub steps: Vec<Step>,
    pub approvals: Vec<Approval>,
    pub events: Vec<NewEvent>,
}

impl Write {
    fn of(run: Run, steps: Vec<Step>, events: Vec<NewEvent>) -> Write {
        Write {
            run,
            steps,
            approvals: vec![],
            events,
        }
    }
}

/// What a rule that asks an operator needs from outside: the new
/// approval's id and the schema pin of the tool it is for.
pub(crate) struct Ask {
    pub id: String,
    pub tool_pin: Option<String>,
}

/// The rules, by name, as [`TABLE`] lists them.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Rule {
    Create,
    Start,
    Decide,
    Judge,
    Execute,
    Finish,
    Interrupt,
    Approve,
    Deny,
    Expire,
    Cancel,
    Limit,
    Park,
    Unpark,
}

/// One row of the table: `rule`, given `input`, moves the run's last step
/// from `from` (none: the run has no step yet) to `to`, and the run to
/// `run`, recording `events` in this order.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Row {
    pub rule: Rule,
    pub input: &'static str,
    pub from: Option<StepState>,
    pub to: Option<StepState>,
    pub run: RunStatus,
    pub events: &'static [EventKind],
}

macro_rules! row {
    ($rule:ident, $input:literal, $from:expr, $to:expr, $run:ident, [$($e:ident),*]) => {
        Row {
            rule: Rule::$rule,
            input: $input,
            from: $from,
            to: $to,
            run: RunStatus::$run,
            events: &[$(EventKind::$e),*],
        }
    };
}

use StepState::{AwaitingApproval as Awaiting, Decided as Dec, Done, Executing as Exec};
use StepState::{Interrupted as Int, Started};

/// Every transition of a run, the loop's and the operator's.
#[rustfmt::skip]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const TABLE: &[Row] = &[
    row!(Create, "within limits", None, Some(Started), Running, [RunStarted, StepStarted]),
    row!(Create, "no step allowed", None, None, Running, [RunStarted]),
    row!(Start, "next step", Some(Done), Some(Started), Running, [StepStarted]),
    row!(Decide, "complete", Some(Started), Some(Done), Completed, [StepDecided, StepDone, RunCompleted]),
    row!(Decide, "fail", Some(Started), Some(Done), Failed, [StepDecided, StepDone, RunFailed]),
    row!(Decide, "invalid", Some(Started), Some(Done), Running, [StepDecided, StepDone]),
    row!(Decide, "invalid, too often", Some(Started), Some(Done), Failed, [StepDecided, StepDone, RunFailed]),
    row!(Decide, "valid call", Some(Started), Some(Dec), Running, [StepDecided]),
    row!(Judge, "allow", Some(Dec), Some(Exec), Running, [StepVerdict, StepExecuting]),
    row!(Judge, "allow, approval required by config", Some(Dec), Some(Awaiting), WaitingForApproval, [StepVerdict, ApprovalRequested, RunPaused]),
    row!(Judge, "deny", Some(Dec), Some(Done), Running, [StepVerdict, StepDone]),
    row!(Judge, "require approval", Some(Dec), Some(Awaiting), WaitingForApproval, [StepVerdict, ApprovalRequested, RunPaused]),
    row!(Judge, "abort", Some(Dec), Some(Done), Failed, [StepVerdict, StepDone, RunFailed]),
    row!(Judge, "policy error", Some(Dec), Some(Done), Failed, [StepDone, RunFailed]),
    row!(Execute, "result", Some(Exec), Some(Done), Running, [StepDone]),
    row!(Execute, "tool error", Some(Exec), Some(Done), Running, [StepDone]),
    row!(Execute, "fatal tool error", Some(Exec), Some(Done), Failed, [StepDone, RunFailed]),
    row!(Execute, "same call and result too often", Some(Exec), Some(Done), Failed, [StepDone, RunFailed]),
    row!(Finish, "agent error", Some(Started), Some(Done), Failed, [StepDone, RunFailed]),
    row!(Interrupt, "safe to retry", Some(Exec), Some(Int), Running, [StepInterrupted]),
    row!(Interrupt, "side effect", Some(Exec), Some(Int), WaitingForApproval, [StepInterrupted, ApprovalRequested, RunPaused]),
    row!(Approve, "approved", Some(Awaiting), Some(Exec), Running, [RunResumed, StepExecuting]),
    row!(Approve, "approved, tool pin changed", Some(Awaiting), Some(Done), Running, [RunResumed, StepDone]),
    row!(Deny, "denied", Some(Awaiting), Some(Done), Running, [RunResumed, StepDone]),
    row!(Expire, "expired while pending", Some(Awaiting), Some(Done), Running, [ApprovalExpired, StepDone]),
    row!(Cancel, "while executing", Some(Exec), Some(Int), Cancelled, [StepInterrupted, RunCancelled]),
    row!(Cancel, "while waiting", Some(Awaiting), Some(Done), Cancelled, [ApprovalCancelled, StepDone, RunCancelled]),
    row!(Limit, "max steps", Some(Done), Some(Done), Failed, [RunFailed]),
    row!(Park, "model outage", Some(Started), Some(Started), Parked, [RunParked]),
    row!(Unpark, "resumed", Some(Started), Some(Started), Running, [RunResumed]),
];

/// A new approval of step `i` for `call`, bound to the run's chain head
/// and the tool's pin.
fn new_approval(
    at: At,
    i: u32,
    kind: ApprovalKind,
    call: ToolCall,
    reason: String,
    presentation: String,
    ask: Ask,
) -> Approval {
    let chain_head = Some(at.run.chain_head.clone());
    let hash = super::approval_hash(
        kind,
        &call,
        &reason,
        &presentation,
        chain_head.as_deref(),
        ask.tool_pin.as_deref(),
    );
    Approval {
        id: ask.id,
        run_id: at.run.id.clone(),
        step_index: i,
        kind,
        status: ApprovalStatus::Pending,
        call,
        reason,
        presentation,
        hash,
        created_at: at.now,
        expires_at: at.run.limits.approval_ttl_ms.map(|t| at.now + t as i64),
        decided_by: None,
        note: None,
        decided_at: None,
        chain_head,
        tool_pin: ask.tool_pin,
    }
}

/// The two events that pause the run on approval `a`: asked, paused.
fn pause_events(a: &Approval, asked: serde_json::Value) -> [NewEvent; 2] {
    let i = Some(a.step_index);
    [
        NewEvent::new(EventKind::ApprovalRequested, i, asked),
        NewEvent::new(EventKind::RunPaused, i, json!({ "approval": a.id })),
    ]
}

/// Finishes step `s` at `now` with `obs`.
fn finish(s: &mut Step, obs: Observation, now: i64) {
    s.version += 1;
    s.state = StepState::Done;
    s.observation = Some(obs);
    s.updated_at = now;
}

/// The `step.done` event of a step that was just finished.
pub(crate) fn done_event(s: &Step) -> NewEvent {
    NewEvent::new(
        EventKind::StepDone,
        Some(s.index),
        json!({ "observation": s.observation }),
    )
}

/// Ends `run` as failed for `reason`, saying `msg`, with its event.
fn fail(run: &mut Run, events: &mut Vec<NewEvent>, reason: RunReason, msg: &str) {
    run.status = RunStatus::Failed;
    run.reason = Some(reason);
    run.result = Some(json!({ "error": msg }).to_string());
    events.push(NewEvent::new(
        EventKind::RunFailed,
        None,
        json!({ "reason": reason, "error": msg }),
    ));
}

/// Ends `run` in the same write when it failed too often in a row.
fn limit_failures(run: &mut Run, events: &mut Vec<NewEvent>) {
    let max = run.limits.max_consecutive_failures;
    if max > 0 && run.consecutive_failures >= max && !run.status.is_terminal() {
        let msg = format!("{} consecutive failed steps", run.consecutive_failures);
        fail(run, events, RunReason::LimitConsecutiveFailures, &msg);
    }
}

/// Marks step `s` done with `obs`, in a write that already counted its
/// new version.
fn close(s: &mut Step, obs: Observation) {
    s.state = StepState::Done;
    s.observation = Some(obs);
}
