//! The rules of one step: its decision, its verdict, its tool's result.

use super::{close, done_event, fail, fail_at, finish, limit_failures, new_approval, pause_events};
use super::{Ask, At, Write};
use crate::consumer::{ConsumerError, ToolError};
use crate::driver::DriverError;
use crate::store::NewEvent;
use crate::types::*;
use serde_json::json;

/// What a decision leads to.
pub(crate) enum Decided {
    /// A valid call: the step is decided, and its write waits for the
    /// policy's verdict (the loop holds it and writes both together).
    Hold(Step, Vec<NewEvent>),
    /// Anything else: the step is done (the run may be over); written now.
    Write(Write),
}

/// Step `i` as the agent decided it. `checked` is the tool table's answer
/// on a call: its canonical form and effect, or why it is invalid.
pub(crate) fn decide(
    at: At,
    i: u32,
    decision: Decision,
    checked: Option<Result<(ToolCall, Effect), String>>,
) -> Decided {
    let mut s = at.step(i);
    s.version += 1;
    s.updated_at = at.now;
    let mut run = at.next_run();
    let mut events = vec![NewEvent::new(
        EventKind::StepDecided,
        Some(i),
        json!({ "decision": decision }),
    )];
    let invalid = match (&decision, checked) {
        (Decision::Complete(result), _) => complete(&mut s, &mut run, &mut events, result),
        (Decision::Fail(why), _) => {
            close(
                &mut s,
                Observation::message(ObservationKind::Final, "error", why),
            );
            events.push(done_event(&s));
            fail(&mut run, &mut events, RunReason::AgentFailed, why);
            None
        }
        (Decision::Invalid(why), _) => Some(why.clone()),
        (Decision::Call(_), Some(Ok((canonical, effect)))) => {
            s.effect = Some(effect);
            s.call = Some(canonical);
            s.state = StepState::Decided;
            None
        }
        (Decision::Call(_), Some(Err(why))) => Some(why),
        (Decision::Call(_), None) => Some("the call was not checked against the tool table".into()),
    };
    if let Some(why) = invalid {
        let obs = Observation::message(ObservationKind::InvalidDecision, "error", &why);
        close(&mut s, obs);
        events.push(done_event(&s));
        run.consecutive_failures += 1;
        limit_failures(&mut run, &mut events);
    }
    s.decision = Some(decision);
    if s.state == StepState::Decided {
        return Decided::Hold(s, events);
    }
    Decided::Write(Write::of(run, vec![s], events))
}

/// Step `s` completing the run with `result`, when it is JSON; else why
/// the decision is invalid.
fn complete(
    s: &mut Step,
    run: &mut Run,
    events: &mut Vec<NewEvent>,
    result: &str,
) -> Option<String> {
    let v = match serde_json::from_str::<serde_json::Value>(result) {
        Ok(v) => v,
        Err(e) => return Some(format!("the result of complete is not JSON: {e}")),
    };
    let obs = Observation {
        kind: ObservationKind::Final,
        content: json!({ "result": v }).to_string(),
    };
    close(s, obs);
    run.status = RunStatus::Completed;
    run.reason = Some(RunReason::Completed);
    run.result = Some(canonical_json(&v));
    events.push(done_event(s));
    events.push(NewEvent::new(
        EventKind::RunCompleted,
        None,
        json!({ "reason": "completed", "result": v }),
    ));
    None
}

/// The decided call of step `i` and its effect.
pub(crate) fn decided_call(at: At<'_>, i: u32) -> Result<(&ToolCall, Effect), DriverError> {
    let s = &at.steps[i as usize];
    match (&s.call, s.effect) {
        (Some(call), Some(effect)) => Ok((call, effect)),
        _ => Err(DriverError::Invalid(format!(
            "step {i} is decided without a valid call"
        ))),
    }
}

/// Step `i` as its policy judged it. `config_approval` says the
/// operator's config requires an approval for the tool; `ask` gives what a
/// new approval needs, should there be one.
pub(crate) fn judge(
    at: At,
    i: u32,
    verdict: Result<Verdict, ConsumerError>,
    config_approval: bool,
    ask: impl FnOnce(&str) -> Ask,
) -> Result<Write, DriverError> {
    let call = decided_call(at, i)?.0.clone();
    let verdict = match verdict {
        Ok(Verdict::RequireApproval(r))
            if serde_json::from_str::<serde_json::Value>(&r.presentation).is_err() =>
        {
            Err(ConsumerError::Failed(
                "the approval presentation is not JSON".into(),
            ))
        }
        // The operator's config requires an approval for this tool,
        // whatever the policy allowed.
        Ok(Verdict::Allow) if config_approval => Ok(Verdict::RequireApproval(ApprovalRequest {
            reason: format!(
                "the operator's config requires an approval for every call of {:?}",
                call.tool
            ),
            presentation: json!({ "required_by": "config" }).to_string(),
        })),
        v => v,
    };
    let verdict = match verdict {
        Ok(v) => v,
        Err(e) => {
            let reason = match e {
                ConsumerError::Trapped { .. } => RunReason::PolicyTrapped,
                _ => RunReason::PolicyError,
            };
            return Ok(fail_at(at, i, reason, &e.to_string()));
        }
    };
    Ok(verdict_write(at, i, call, verdict, ask))
}

/// The write of a verdict the policy gave on `call`.
fn verdict_write(
    at: At,
    i: u32,
    call: ToolCall,
    verdict: Verdict,
    ask: impl FnOnce(&str) -> Ask,
) -> Write {
    let mut s = at.step(i);
    s.version += 1;
    s.verdict = Some(verdict.clone());
    s.updated_at = at.now;
    let mut w = Write::of(at.next_run(), vec![], vec![]);
    w.events.push(NewEvent::new(
        EventKind::StepVerdict,
        Some(i),
        json!({ "verdict": verdict }),
    ));
    match verdict {
        Verdict::Allow => {
            s.state = StepState::Executing;
            let data = json!({ "tool": call.tool });
            w.events
                .push(NewEvent::new(EventKind::StepExecuting, Some(i), data));
        }
        Verdict::Deny(reason) => {
            close(
                &mut s,
                Observation::message(ObservationKind::Denied, "reason", &reason),
            );
            w.run.consecutive_failures += 1;
            w.events.push(done_event(&s));
            limit_failures(&mut w.run, &mut w.events);
        }
        Verdict::RequireApproval(req) => {
            s.state = StepState::AwaitingApproval;
            let a = policy_approval(at, i, call, req, ask);
            let arguments =
                serde_json::from_str::<serde_json::Value>(&a.call.arguments).unwrap_or_default();
            let asked = json!({ "approval": a.id, "kind": a.kind, "tool": a.call.tool, "arguments": arguments, "reason": a.reason });
            w.events.extend(pause_events(&a, asked));
            w.run.status = RunStatus::WaitingForApproval;
            w.approvals.push(a);
        }
        Verdict::Abort(reason) => {
            close(
                &mut s,
                Observation::message(ObservationKind::Final, "aborted", &reason),
            );
            w.events.push(done_event(&s));
            fail(&mut w.run, &mut w.events, RunReason::PolicyAbort, &reason);
        }
    }
    w.steps.push(s);
    w
}

/// The approval the policy's request `req` asks for on `call`.
fn policy_approval(
    at: At,
    i: u32,
    call: ToolCall,
    req: ApprovalRequest,
    ask: impl FnOnce(&str) -> Ask,
) -> Approval {
    let ask = ask(&call.tool);
    let kind = ApprovalKind::Policy;
    new_approval(at, i, kind, call, req.reason, req.presentation, ask)
}

/// Step `i` (executing) as its tool's `result` left it: done, with the
/// result or the error as its observation; the run fails on a fatal
/// error or a limit.
pub(crate) fn executed(at: At, i: u32, result: Result<String, ToolError>) -> Write {
    let mut run = at.next_run();
    let mut fatal = None;
    let obs = match result {
        // Checked for being JSON without building it.
        Ok(text) => match serde_json::from_str::<serde::de::IgnoredAny>(&text) {
            Ok(_) => {
                run.consecutive_failures = 0;
                Observation {
                    kind: ObservationKind::ToolResult,
                    content: text,
                }
            }
            Err(e) => {
                run.consecutive_failures += 1;
                let msg = format!("the tool's result is not JSON: {e}");
                Observation::message(ObservationKind::ToolError, "error", &msg)
            }
        },
        Err(e) => {
            run.consecutive_failures += 1;
            if e.fatal {
                fatal = Some(e.to_string());
            }
            Observation::message(ObservationKind::ToolError, "error", &e.to_string())
        }
    };
    let mut s = at.step(i);
    finish(&mut s, obs, at.now);
    let mut events = vec![done_event(&s)];
    if let Some(msg) = fatal {
        fail(&mut run, &mut events, RunReason::ToolChanged, &msg);
    }
    limit_failures(&mut run, &mut events);
    let max_same = run.limits.max_identical_calls;
    if max_same > 0 && !run.status.is_terminal() && identical_run(at.steps, &s) >= max_same {
        let msg = format!("the same call with the same result {max_same} times in a row");
        fail(&mut run, &mut events, RunReason::LimitIdenticalCalls, &msg);
    }
    Write::of(run, vec![s], events)
}

/// How many steps in a row, ending with `last`, made the same call and
/// got the same observation.
fn identical_run(steps: &[Step], last: &Step) -> u32 {
    let same = |prev: &&Step| {
        prev.call == last.call && prev.observation == last.observation && prev.call.is_some()
    };
    1 + steps[..last.index as usize]
        .iter()
        .rev()
        .take_while(same)
        .count() as u32
}
