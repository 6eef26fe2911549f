//! The rules of the run as a whole: its creation, its next step, its end,
//! its limits, and setting it aside while its model server is down.

use super::{done_event, finish, At, Write};
use crate::model::Outage;
use crate::store::NewEvent;
use crate::types::*;
use serde_json::json;

/// The new run `run` (its id, goal, limits and meta set) with its first
/// write: its creation, starting step 0 unless a limit forbids it (the
/// loop then ends the run with that reason).
pub(crate) fn create(mut run: Run, now: i64) -> (Run, Vec<Step>, Vec<NewEvent>) {
    let mut events = vec![NewEvent::new(
        EventKind::RunStarted,
        None,
        json!({ "goal": run.goal, "limits": run.limits }),
    )];
    let mut steps = vec![];
    if limit_hit(&run, now).is_none() {
        steps.push(Step::started(0, now));
        run.step_count = 1;
        events.push(NewEvent::new(EventKind::StepStarted, Some(0), json!({})));
    }
    (run, steps, events)
}

/// Starts the run's next step.
pub(crate) fn start_step(at: At) -> Write {
    let i = at.run.step_count;
    let mut run = at.next_run();
    run.step_count += 1;
    let event = NewEvent::new(EventKind::StepStarted, Some(i), json!({}));
    Write::of(run, vec![Step::started(i, at.now)], vec![event])
}

/// When a write finishes the run's last step and the run goes on within
/// its limits, the next step starts in the same write: one write instead
/// of two, with the same rows and events. Nothing happens between the
/// two, so nothing is lost; a crash after it leaves a started step, which
/// the loop takes up as it would after a crash before a decision.
pub(crate) fn start_next(run: &mut Run, steps: &mut Vec<Step>, events: &mut Vec<NewEvent>) {
    let finishes_last = steps
        .iter()
        .any(|s| s.state == StepState::Done && s.index + 1 == run.step_count);
    if !finishes_last
        || run.status != RunStatus::Running
        || limit_hit(run, run.updated_at).is_some()
    {
        return;
    }
    let i = run.step_count;
    run.step_count += 1;
    steps.push(Step::started(i, run.updated_at));
    events.push(NewEvent::new(EventKind::StepStarted, Some(i), json!({})));
}

/// Ends the run as `status` for `reason`, with `result`. `step`, when
/// given, is finished with its observation in the same write; `data` is
/// the end event's (`reason` is added to it).
pub(crate) fn end(
    at: At,
    status: RunStatus,
    reason: RunReason,
    result: Option<String>,
    step: Option<(u32, Observation)>,
    mut data: serde_json::Value,
) -> Write {
    let mut run = at.next_run();
    run.status = status;
    run.reason = Some(reason);
    run.result = result;
    let mut w = Write::of(run, vec![], vec![]);
    if let Some((i, obs)) = step {
        let mut s = at.step(i);
        finish(&mut s, obs, at.now);
        w.events.push(done_event(&s));
        w.steps.push(s);
    }
    let kind = match status {
        RunStatus::Completed => EventKind::RunCompleted,
        RunStatus::Cancelled => EventKind::RunCancelled,
        _ => EventKind::RunFailed,
    };
    if let serde_json::Value::Object(m) = &mut data {
        m.insert("reason".into(), json!(reason));
    }
    w.events.push(NewEvent::new(kind, None, data));
    w
}

/// Fails the run at step `i` with `{"error": message}` as the step's last
/// word.
pub(crate) fn fail_at(at: At, i: u32, reason: RunReason, message: &str) -> Write {
    let obs = Observation::message(ObservationKind::Final, "error", message);
    let result = Some(json!({ "error": message }).to_string());
    let data = json!({ "error": message });
    end(at, RunStatus::Failed, reason, result, Some((i, obs)), data)
}

/// The end of the run when a limit keeps it from starting another step.
pub(crate) fn limit(at: At) -> Option<Write> {
    let (reason, msg) = limit_hit(at.run, at.now)?;
    let result = Some(json!({ "error": msg }).to_string());
    let data = json!({ "error": msg });
    Some(end(at, RunStatus::Failed, reason, result, None, data))
}

/// The limit that keeps `run` from starting another step at `now`, if
/// any: its reason and message.
pub(crate) fn limit_hit(run: &Run, now: i64) -> Option<(RunReason, String)> {
    let l = &run.limits;
    if run.step_count >= l.max_steps {
        Some((
            RunReason::LimitSteps,
            format!("the run reached its limit of {} steps", l.max_steps),
        ))
    } else if l
        .deadline_ms
        .is_some_and(|d| now - run.created_at >= d as i64)
    {
        Some((
            RunReason::LimitDeadline,
            "the run passed its wall-clock deadline".to_string(),
        ))
    } else {
        None
    }
}

/// Sets the run aside while its model server is down (`o`): `parked`,
/// reason `model_unavailable`, with the time to try again. Step `i` stays
/// started, with nothing charged to it.
pub(crate) fn park(at: At, i: u32, o: &Outage) -> Write {
    let retry_at = at.now.saturating_add(o.retry_in.as_millis() as i64);
    let mut run = at.next_run();
    run.status = RunStatus::Parked;
    run.reason = Some(RunReason::ModelUnavailable);
    run.retry_at = Some(retry_at);
    run.result = Some(json!({ "error": o.error }).to_string());
    let event = NewEvent::new(
        EventKind::RunParked,
        Some(i),
        json!({ "reason": "model_unavailable", "error": o.error, "attempts": o.attempts, "retry_at": retry_at }),
    );
    Write::of(run, vec![], vec![event])
}

/// Takes a parked run back up: `running` again, its started step to be
/// decided afresh.
pub(crate) fn unpark(at: At) -> Write {
    let mut run = at.next_run();
    run.status = RunStatus::Running;
    run.reason = None;
    run.result = None;
    run.retry_at = None;
    let event = NewEvent::new(
        EventKind::RunResumed,
        None,
        json!({ "from": "parked", "reason": at.run.reason }),
    );
    Write::of(run, vec![], vec![event])
}
