//! The rules against [`TABLE`]: every row is applied to a run in its
//! `from` state, with no store, no clock and no runtime, and must leave
//! the run as the row says. Then a test per rule for what the table does
//! not show.

use super::*;
use crate::consumer::{ConsumerError, ToolError, TrapKind};
use crate::driver::operator::cancel_transition;
use crate::model::Outage;

const NOW: i64 = 1_000_000;
const TTL: i64 = 30_000;

/// A run, its steps and approvals, as a loop would hold them.
struct Held {
    run: Run,
    steps: Vec<Step>,
    approvals: Vec<Approval>,
}

impl Held {
    fn at(&self) -> At<'_> {
        At {
            run: &self.run,
            steps: &self.steps,
            approvals: &self.approvals,
            now: NOW,
            lease_ttl_ms: TTL,
        }
    }

    fn last(&self) -> &Step {
        self.steps.last().expect("a step")
    }
}

fn call() -> ToolCall {
    ToolCall {
        tool: "echo".into(),
        arguments: r#"{"text":"hi"}"#.into(),
    }
}

fn ask(tool: &str) -> Ask {
    Ask {
        id: format!("appr-{tool}"),
        tool_pin: None,
    }
}

fn request() -> ApprovalRequest {
    ApprovalRequest {
        reason: "a human should look".into(),
        presentation: r#"{"why":"money"}"#.into(),
    }
}

/// A run whose only step (0) is in `state`, with what that state implies:
/// a call once decided, an `allow` or `require_approval` verdict once
/// judged, a pending policy approval while awaiting one.
fn held(state: Option<StepState>, effect: Effect) -> Held {
    let mut run = Run::new("run-1", "goal", Limits::default(), NOW - 10);
    run.lease_owner = Some("me".into());
    let mut h = Held {
        run,
        steps: vec![],
        approvals: vec![],
    };
    let Some(state) = state else { return h };
    h.run.step_count = 1;
    let mut s = Step::started(0, NOW - 10);
    s.state = state;
    if state != StepState::Started {
        s.decision = Some(Decision::Call(call()));
        s.call = Some(call());
        s.effect = Some(effect);
    }
    if matches!(
        state,
        StepState::Executing | StepState::Interrupted | StepState::Done
    ) {
        s.verdict = Some(Verdict::Allow);
    }
    if state == StepState::Done {
        s.observation = Some(Observation {
            kind: ObservationKind::ToolResult,
            content: "{}".into(),
        });
    }
    if state == StepState::AwaitingApproval {
        s.verdict = Some(Verdict::RequireApproval(request()));
        h.run.status = RunStatus::WaitingForApproval;
        h.steps.push(s);
        let r = request();
        let a = new_approval(
            h.at(),
            0,
            ApprovalKind::Policy,
            call(),
            r.reason,
            r.presentation,
            ask("echo"),
        );
        h.approvals.push(a);
        return h;
    }
    h.steps.push(s);
    h
}

fn answer(h: &mut Held, status: ApprovalStatus) {
    let a = &mut h.approvals[0];
    a.status = status;
    a.decided_by = Some("ops".into());
    a.decided_at = Some(NOW - 1);
}

fn held_write(h: &Held, d: Decided) -> Write {
    match d {
        Decided::Hold(s, events) => Write::of(h.at().next_run(), vec![s], events),
        Decided::Write(w) => w,
    }
}

fn from_transition(t: crate::store::Transition) -> Write {
    Write {
        run: t.run,
        steps: t.steps,
        approvals: t.approvals,
        events: t.events,
    }
}

fn outage() -> Outage {
    Outage {
        error: "connection refused".into(),
        attempts: 4,
        retry_in: std::time::Duration::from_secs(30),
    }
}

/// Applies `row`'s rule with its input to a run in its `from` state.
fn apply(row: &Row) -> (Held, Write) {
    use Effect::{ReadOnly, RemoteMutation};
    let mut h = held(row.from, ReadOnly);
    let w =
        match (row.rule, row.input) {
            (Rule::Create, input @ ("within limits" | "no step allowed")) => {
                let mut limits = Limits::default();
                if input == "no step allowed" {
                    limits.max_steps = 0;
                }
                let (run, steps, events) = create(Run::new("run-2", "goal", limits, NOW), NOW);
                Write::of(run, steps, events)
            }
            (Rule::Start, "next step") => start_step(h.at()),
            (Rule::Decide | Rule::Judge | Rule::Execute, _) => apply_step(row, &mut h),
            (Rule::Finish, "agent error") => {
                fail_at(h.at(), 0, RunReason::AgentError, "the agent failed")
            }
            (Rule::Interrupt, input @ ("safe to retry" | "side effect")) => {
                if input == "side effect" {
                    h = held(row.from, RemoteMutation);
                }
                match interrupt(h.at(), 0, ask).expect("a call") {
                    Interrupt::Retry(w) | Interrupt::Ask(w) => w,
                }
            }
            (Rule::Approve | Rule::Deny | Rule::Expire, input) => apply_answer(&mut h, input),
            (Rule::Cancel, "while executing" | "while waiting") => from_transition(
                cancel_transition(&h.run, &h.steps, &h.approvals, "ops", NOW),
            ),
            (Rule::Limit, "max steps") => {
                h.run.limits.max_steps = 1;
                limit(h.at()).expect("the step limit")
            }
            (Rule::Park, "model outage") => park(h.at(), 0, &outage()),
            (Rule::Unpark, "resumed") => {
                h.run.status = RunStatus::Parked;
                h.run.reason = Some(RunReason::ModelUnavailable);
                unpark(h.at())
            }
            (rule, input) => panic!("no scenario for {rule:?} {input:?}"),
        };
    (h, w)
}

/// The step rules' rows: decide, judge, execute.
fn apply_step(row: &Row, h: &mut Held) -> Write {
    use Effect::ReadOnly;
    match (row.rule, row.input) {
        (Rule::Decide, input) => {
            let (decision, checked) = match input {
                "complete" => (Decision::Complete(r#"{"a":1}"#.into()), None),
                "fail" => (Decision::Fail("cannot".into()), None),
                "valid call" => (Decision::Call(call()), Some(Ok((call(), ReadOnly)))),
                "invalid" | "invalid, too often" => {
                    h.run.consecutive_failures = if input == "invalid" { 0 } else { 4 };
                    (Decision::Invalid("garbled".into()), None)
                }
                other => panic!("no decide scenario {other:?}"),
            };
            let d = decide(h.at(), 0, decision, checked);
            held_write(h, d)
        }
        (Rule::Judge, input) => {
            let verdict = match input {
                "allow" | "allow, approval required by config" => Ok(Verdict::Allow),
                "deny" => Ok(Verdict::Deny("no".into())),
                "require approval" => Ok(Verdict::RequireApproval(request())),
                "abort" => Ok(Verdict::Abort("stop".into())),
                "policy error" => Err(ConsumerError::Failed("broken".into())),
                other => panic!("no judge scenario {other:?}"),
            };
            let config = input == "allow, approval required by config";
            judge(h.at(), 0, verdict, config, ask).expect("a decided call")
        }
        (Rule::Execute, input) => {
            let result = match input {
                "result" => Ok("{}".to_string()),
                "tool error" => Err(ToolError::new("boom")),
                "fatal tool error" => Err(ToolError {
                    fatal: true,
                    ..ToolError::new("the schema changed")
                }),
                "same call and result too often" => {
                    *h = same_calls(3);
                    Ok("{}".to_string())
                }
                other => panic!("no execute scenario {other:?}"),
            };
            let i = h.last().index;
            executed(h.at(), i, result)
        }
        (rule, input) => panic!("no step scenario for {rule:?} {input:?}"),
    }
}

/// The rows of an answered approval: approved, denied, expired.
fn apply_answer(h: &mut Held, input: &str) -> Write {
    let mut pin = None;
    match input {
        "approved" => answer(h, ApprovalStatus::Approved),
        "approved, tool pin changed" => {
            answer(h, ApprovalStatus::Approved);
            pin = Some("sha256:new");
        }
        "denied" => answer(h, ApprovalStatus::Denied),
        "expired while pending" => h.approvals[0].expires_at = Some(NOW),
        other => panic!("no approval scenario {other:?}"),
    }
    let a = h.approvals[0].clone();
    match answered(h.at(), &a, pin).expect("an untampered approval") {
        Answer::Execute(w) | Answer::Close(w) => w,
        Answer::Wait => panic!("{input}: the run still waits"),
    }
}

/// A run of `n` steps, each making the same call with the same result,
/// the last one executing.
fn same_calls(n: u32) -> Held {
    let mut h = held(Some(StepState::Done), Effect::ReadOnly);
    for i in 1..n {
        let mut s = h.steps[0].clone();
        s.index = i;
        if i + 1 == n {
            s.state = StepState::Executing;
            s.observation = None;
        }
        h.steps.push(s);
    }
    h.run.step_count = n;
    h
}

/// The last step of `h` once `w` is written.
fn last_after(h: &Held, w: &Write) -> Option<StepState> {
    let mut steps = h.steps.clone();
    for s in &w.steps {
        match steps.get_mut(s.index as usize) {
            Some(slot) => *slot = s.clone(),
            None => steps.push(s.clone()),
        }
    }
    steps.last().map(|s| s.state)
}

#[test]
fn every_row_of_the_table_holds() {
    for row in TABLE {
        let what = format!("{:?} {:?}", row.rule, row.input);
        let (h, w) = apply(row);
        assert_eq!(last_after(&h, &w), row.to, "{what}: the last step");
        assert_eq!(w.run.status, row.run, "{what}: the run");
        let kinds: Vec<EventKind> = w.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, row.events, "{what}: the events");
        for s in &w.steps {
            match h.steps.get(s.index as usize) {
                Some(before) => {
                    assert_eq!(
                        s.version,
                        before.version + 1,
                        "{what}: step {} version",
                        s.index
                    );
                    assert_eq!(s.updated_at, NOW, "{what}: step {} time", s.index);
                }
                None => assert_eq!(s.version, 1, "{what}: a new step"),
            }
        }
        assert_eq!(w.run.updated_at, NOW, "{what}: the run's time");
    }
}

#[test]
fn every_rule_has_a_row() {
    // The match fails to compile when a rule is added without a name here.
    let named = |r: Rule| match r {
        Rule::Create | Rule::Start | Rule::Decide | Rule::Judge | Rule::Execute => r,
        Rule::Finish | Rule::Interrupt | Rule::Approve | Rule::Deny | Rule::Expire => r,
        Rule::Cancel | Rule::Limit | Rule::Park | Rule::Unpark => r,
    };
    use Rule::*;
    let all = [
        Create, Start, Decide, Judge, Execute, Finish, Interrupt, Approve, Deny, Expire, Cancel,
        Limit, Park, Unpark,
    ];
    for r in all.map(named) {
        assert!(
            TABLE.iter().any(|row| row.rule == r),
            "{r:?} has no row in the table"
        );
    }
}

#[test]
fn a_valid_call_is_held_for_its_verdict_with_its_canonical_form() {
    let h = held(Some(StepState::Started), Effect::ReadOnly);
    let canonical = ToolCall {
        tool: "echo".into(),
        arguments: r#"{"text":"hi"}"#.into(),
    };
    let raw = ToolCall {
        tool: "echo".into(),
        arguments: r#"{ "text" : "hi" }"#.into(),
    };
    let checked = Some(Ok((canonical.clone(), Effect::Idempotent)));
    let Decided::Hold(s, events) = decide(h.at(), 0, Decision::Call(raw.clone()), checked) else {
        panic!("a valid call is written with its verdict");
    };
    assert_eq!(s.call, Some(canonical));
    assert_eq!(s.effect, Some(Effect::Idempotent));
    assert_eq!(
        s.decision,
        Some(Decision::Call(raw)),
        "the decision is kept verbatim"
    );
    assert_eq!(events.len(), 1);
}

#[test]
fn a_call_the_tool_table_refuses_is_an_invalid_decision() {
    let h = held(Some(StepState::Started), Effect::ReadOnly);
    let checked = Some(Err("no tool \"nope\"".to_string()));
    let Decided::Write(w) = decide(h.at(), 0, Decision::Call(call()), checked) else {
        panic!("an invalid call is written at once");
    };
    let obs = w.steps[0].observation.as_ref().expect("an observation");
    assert_eq!(obs.kind, ObservationKind::InvalidDecision);
    assert!(obs.content.contains("no tool"), "{}", obs.content);
    assert_eq!(w.run.consecutive_failures, 1);
}

#[test]
fn a_completion_that_is_not_json_is_invalid_and_the_run_goes_on() {
    let h = held(Some(StepState::Started), Effect::ReadOnly);
    let w = held_write(
        &h,
        decide(h.at(), 0, Decision::Complete("{oops".into()), None),
    );
    assert_eq!(w.run.status, RunStatus::Running);
    assert_eq!(
        w.steps[0].observation.as_ref().map(|o| o.kind),
        Some(ObservationKind::InvalidDecision)
    );
}

#[test]
fn an_approval_presentation_that_is_not_json_fails_the_run_as_a_policy_error() {
    let h = held(Some(StepState::Decided), Effect::ReadOnly);
    let bad = ApprovalRequest {
        reason: "r".into(),
        presentation: "not json".into(),
    };
    let w = judge(h.at(), 0, Ok(Verdict::RequireApproval(bad)), false, ask).expect("a call");
    assert_eq!(w.run.status, RunStatus::Failed);
    assert_eq!(w.run.reason, Some(RunReason::PolicyError));
    assert!(w.approvals.is_empty());
}

#[test]
fn a_trapped_policy_fails_the_run_as_trapped() {
    let h = held(Some(StepState::Decided), Effect::ReadOnly);
    let trap = ConsumerError::Trapped {
        kind: TrapKind::OutOfFuel,
        message: "out of fuel".into(),
    };
    let w = judge(h.at(), 0, Err(trap), false, ask).expect("a call");
    assert_eq!(w.run.reason, Some(RunReason::PolicyTrapped));
}

#[test]
fn judging_a_step_without_a_call_is_refused() {
    let h = held(Some(StepState::Started), Effect::ReadOnly);
    assert!(matches!(
        judge(h.at(), 0, Ok(Verdict::Allow), false, ask),
        Err(crate::driver::DriverError::Invalid(_))
    ));
}

#[test]
fn a_required_approval_is_bound_to_the_call_and_approving_it_executes_the_call() {
    let mut h = held(Some(StepState::Decided), Effect::ReadOnly);
    h.run.limits.approval_ttl_ms = Some(60_000);
    let w = judge(
        h.at(),
        0,
        Ok(Verdict::RequireApproval(request())),
        false,
        ask,
    )
    .expect("a call");
    let mut a = w.approvals[0].clone();
    assert_eq!(
        (a.id.as_str(), a.expires_at),
        ("appr-echo", Some(NOW + 60_000))
    );
    assert_eq!(a.chain_head.as_deref(), Some(h.run.chain_head.as_str()));
    h.steps = w.steps;
    a.status = ApprovalStatus::Approved;
    match answered(h.at(), &a, None).expect("untampered") {
        Answer::Execute(w) => assert_eq!(w.steps[0].state, StepState::Executing),
        _ => panic!("an approved call runs"),
    }
    // The same approval, its reason edited after the operator saw it.
    a.reason = "something else".into();
    assert!(matches!(
        answered(h.at(), &a, None),
        Err(crate::driver::DriverError::Tampered { .. })
    ));
}

#[test]
fn an_approved_call_whose_step_changed_is_refused_as_tampered() {
    let mut h = held(Some(StepState::AwaitingApproval), Effect::ReadOnly);
    answer(&mut h, ApprovalStatus::Approved);
    h.steps[0].call = Some(ToolCall {
        tool: "echo".into(),
        arguments: r#"{"text":"rm -rf"}"#.into(),
    });
    let a = h.approvals[0].clone();
    assert!(matches!(
        answered(h.at(), &a, None),
        Err(crate::driver::DriverError::Tampered { .. })
    ));
}

#[test]
fn a_pending_unexpired_approval_keeps_the_run_waiting() {
    let h = held(Some(StepState::AwaitingApproval), Effect::ReadOnly);
    let a = h.approvals[0].clone();
    assert!(matches!(answered(h.at(), &a, None), Ok(Answer::Wait)));
}

#[test]
fn a_denial_says_who_denied_and_counts_as_a_failure() {
    let mut h = held(Some(StepState::AwaitingApproval), Effect::ReadOnly);
    answer(&mut h, ApprovalStatus::Denied);
    h.approvals[0].note = Some("too risky".into());
    let a = h.approvals[0].clone();
    let Ok(Answer::Close(w)) = answered(h.at(), &a, None) else {
        panic!("a denial closes the step");
    };
    let obs = w.steps[0].observation.as_ref().expect("an observation");
    assert!(
        obs.content.contains("denied by ops: too risky"),
        "{}",
        obs.content
    );
    assert_eq!(w.run.consecutive_failures, 1);
}

#[test]
fn an_expired_approval_is_closed_as_expired() {
    let mut h = held(Some(StepState::AwaitingApproval), Effect::ReadOnly);
    h.approvals[0].expires_at = Some(NOW - 5);
    let a = h.approvals[0].clone();
    let Ok(Answer::Close(w)) = answered(h.at(), &a, None) else {
        panic!("an expired approval closes the step");
    };
    assert_eq!(w.approvals[0].status, ApprovalStatus::Expired);
    assert_eq!(w.approvals[0].decided_at, Some(NOW));
}

#[test]
fn an_interrupted_side_effect_asks_once_and_a_retry_does_not_mark_twice() {
    let h = held(Some(StepState::Interrupted), Effect::Destructive);
    let Ok(Interrupt::Ask(w)) = interrupt(h.at(), 0, ask) else {
        panic!("a side effect asks");
    };
    assert_eq!(w.approvals[0].kind, ApprovalKind::InterruptedSideEffect);
    // Already marked interrupted: no second `step.interrupted`.
    assert_eq!(w.events.len(), 2);
    let h = held(Some(StepState::Interrupted), Effect::Idempotent);
    let Ok(Interrupt::Retry(w)) = interrupt(h.at(), 0, ask) else {
        panic!("an idempotent tool runs again");
    };
    assert!(w.events.is_empty());
}

#[test]
fn a_good_result_resets_the_failure_count_and_a_result_not_json_is_a_tool_error() {
    let mut h = held(Some(StepState::Executing), Effect::ReadOnly);
    h.run.consecutive_failures = 3;
    assert_eq!(
        executed(h.at(), 0, Ok("[1]".into()))
            .run
            .consecutive_failures,
        0
    );
    let w = executed(h.at(), 0, Ok("nope".into()));
    assert_eq!(w.run.consecutive_failures, 4);
    assert_eq!(
        w.steps[0].observation.as_ref().map(|o| o.kind),
        Some(ObservationKind::ToolError)
    );
}

#[test]
fn identical_calls_end_the_run_only_at_the_limit() {
    let h = same_calls(2);
    assert_eq!(
        executed(h.at(), 1, Ok("{}".into())).run.status,
        RunStatus::Running
    );
    let h = same_calls(3);
    let w = executed(h.at(), 2, Ok("{}".into()));
    assert_eq!(w.run.reason, Some(RunReason::LimitIdenticalCalls));
    // A different result breaks the series.
    assert_eq!(
        executed(h.at(), 2, Ok("[]".into())).run.status,
        RunStatus::Running
    );
}

#[test]
fn finishing_the_last_step_starts_the_next_in_the_same_write_within_limits() {
    let h = held(Some(StepState::Executing), Effect::ReadOnly);
    let mut w = executed(h.at(), 0, Ok("{}".into()));
    start_next(&mut w.run, &mut w.steps, &mut w.events);
    assert_eq!((w.run.step_count, w.steps.len()), (2, 2));
    assert_eq!(w.steps[1].state, StepState::Started);
    let mut h = held(Some(StepState::Executing), Effect::ReadOnly);
    h.run.limits.max_steps = 1;
    let mut w = executed(h.at(), 0, Ok("{}".into()));
    start_next(&mut w.run, &mut w.steps, &mut w.events);
    assert_eq!(w.steps.len(), 1, "the step limit starts no step");
}

#[test]
fn every_write_renews_the_lease() {
    let h = held(Some(StepState::Started), Effect::ReadOnly);
    let w = start_step(h.at());
    assert_eq!(w.run.lease_expires, Some(NOW + TTL));
    assert_eq!(w.run.lease_owner.as_deref(), Some("me"));
}

#[test]
fn a_parked_run_says_when_to_try_again_and_unparking_clears_it() {
    let h = held(Some(StepState::Started), Effect::ReadOnly);
    let w = park(h.at(), 0, &outage());
    assert_eq!(w.run.retry_at, Some(NOW + 30_000));
    assert_eq!(w.run.reason, Some(RunReason::ModelUnavailable));
    assert!(w.steps.is_empty(), "nothing is charged to the step");
    let h = Held { run: w.run, ..h };
    let w = unpark(h.at());
    assert_eq!(
        (w.run.reason, w.run.retry_at, w.run.result),
        (None, None, None)
    );
}

#[test]
fn the_deadline_is_a_limit() {
    let mut h = held(Some(StepState::Done), Effect::ReadOnly);
    h.run.limits.deadline_ms = Some(5);
    let w = limit(h.at()).expect("the deadline passed");
    assert_eq!(w.run.reason, Some(RunReason::LimitDeadline));
    h.run.limits.deadline_ms = Some(1_000);
    assert!(limit(h.at()).is_none());
}

#[test]
fn too_many_failures_in_a_row_end_the_run_in_the_same_write() {
    let mut h = held(Some(StepState::Decided), Effect::ReadOnly);
    h.run.consecutive_failures = 4;
    let w = judge(h.at(), 0, Ok(Verdict::Deny("no".into())), false, ask).expect("a call");
    assert_eq!(w.run.reason, Some(RunReason::LimitConsecutiveFailures));
    h.run.limits.max_consecutive_failures = 0;
    let w = judge(h.at(), 0, Ok(Verdict::Deny("no".into())), false, ask).expect("a call");
    assert_eq!(w.run.status, RunStatus::Running, "0 means no limit");
}
