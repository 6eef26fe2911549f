//! Steps of every shape a run can hold, for the tests of each mapping
//! (store rows, WIT values, the render, JSON): a mapping that drops or
//! confuses a variant fails its round trip on one of these.

use super::*;

/// One step per state, decision, verdict and observation kind, with and
/// without a validated call.
pub fn every_kind_of_step() -> Vec<Step> {
    let call = |tool: &str, args: &str| ToolCall {
        tool: tool.into(),
        arguments: args.into(),
    };
    let observed = |kind, content: &str| {
        Some(Observation {
            kind,
            content: content.into(),
        })
    };
    let base = |index: u32, state| Step {
        version: 1 + index,
        state,
        started_at: 1_700_000_000_000 + i64::from(index),
        updated_at: 1_700_000_000_500 + i64::from(index),
        ..Step::started(index, 0)
    };
    let decided = |index, state, tool: &str, effect| Step {
        decision: Some(Decision::Call(call(tool, r#"{ "path" : "a" }"#))),
        call: Some(call(tool, r#"{"path":"a"}"#)),
        effect: Some(effect),
        ..base(index, state)
    };
    vec![
        base(0, StepState::Started),
        decided(1, StepState::Decided, "fs_read", Effect::ReadOnly),
        Step {
            verdict: Some(Verdict::RequireApproval(ApprovalRequest {
                reason: "writes outside the workspace".into(),
                presentation: r#"{"step":2,"effect":"local-mutation"}"#.into(),
            })),
            ..decided(
                2,
                StepState::AwaitingApproval,
                "fs_write",
                Effect::LocalMutation,
            )
        },
        Step {
            verdict: Some(Verdict::Allow),
            ..decided(3, StepState::Executing, "http_post", Effect::RemoteMutation)
        },
        Step {
            verdict: Some(Verdict::Allow),
            observation: observed(ObservationKind::ToolResult, r#"{"bytes":12}"#),
            ..decided(4, StepState::Done, "fs_read", Effect::Idempotent)
        },
        Step {
            verdict: Some(Verdict::Allow),
            observation: observed(ObservationKind::ToolError, r#"{"error":"é, not found"}"#),
            ..decided(5, StepState::Done, "fs_read", Effect::ReadOnly)
        },
        Step {
            verdict: Some(Verdict::Deny("destroys data".into())),
            observation: observed(ObservationKind::Denied, r#""destroys data""#),
            ..decided(6, StepState::Done, "rm", Effect::Destructive)
        },
        Step {
            verdict: Some(Verdict::Abort("the run went wrong".into())),
            ..decided(7, StepState::Interrupted, "rm", Effect::Destructive)
        },
        Step {
            decision: Some(Decision::Invalid("no tool named \"fs_del\"".into())),
            observation: observed(
                ObservationKind::InvalidDecision,
                r#"{"error":"unknown tool"}"#,
            ),
            ..base(8, StepState::Done)
        },
        Step {
            decision: Some(Decision::Fail("cannot reach the goal".into())),
            observation: observed(ObservationKind::Final, r#""cannot reach the goal""#),
            ..base(9, StepState::Done)
        },
        Step {
            decision: Some(Decision::Complete(r#"{"answer":42}"#.into())),
            observation: observed(ObservationKind::Final, r#"{"answer":42}"#),
            ..base(10, StepState::Done)
        },
    ]
}

#[test]
fn the_samples_cover_every_variant() {
    use std::collections::HashSet;
    let steps = every_kind_of_step();
    let states: HashSet<_> = steps.iter().map(|s| s.state).collect();
    assert_eq!(states.len(), StepState::ALL.len());
    let kinds: HashSet<_> = steps
        .iter()
        .filter_map(|s| s.observation.as_ref().map(|o| o.kind))
        .collect();
    assert_eq!(kinds.len(), ObservationKind::ALL.len());
    let effects: HashSet<_> = steps.iter().filter_map(|s| s.effect).collect();
    assert_eq!(effects.len(), Effect::ALL.len());
    let decisions: HashSet<_> = steps
        .iter()
        .filter_map(|s| s.decision.as_ref().map(std::mem::discriminant))
        .collect();
    assert_eq!(decisions.len(), 4);
    let verdicts: HashSet<_> = steps
        .iter()
        .filter_map(|s| s.verdict.as_ref().map(std::mem::discriminant))
        .collect();
    assert_eq!(verdicts.len(), 4);
}
