//! Reassembles the run from the deltas the host sends.

use crate::{Approval, RunInfo, Step, ViewDelta};
use std::fmt;

/// The whole run as the host has stored it, rebuilt inside the plugin from
/// the deltas of successive calls. User code gets it read-only.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct View {
    run: Option<RunInfo>,
    steps: Vec<Step>,
    approvals: Vec<Approval>,
    /// How many of `steps` carry a decision, kept up to date by `apply` so
    /// that agents asking every call do not walk the whole run.
    decided: usize,
}

/// A delta that cannot be applied to the view held so far. The view is left
/// as it was before the delta, and the plugin reports the error to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaError {
    /// The first delta an instance receives must have `reset` set.
    NoReset,
    /// A step's index leaves a gap after the steps held so far.
    Gap { index: u32, held: u32 },
    /// A step came back with a version not newer than the one held.
    StaleVersion { index: u32, version: u32, held: u32 },
}

impl fmt::Display for DeltaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeltaError::NoReset => write!(f, "view delta: the first delta did not reset the view"),
            DeltaError::Gap { index, held } => write!(
                f,
                "view delta: step {index} arrived while only {held} steps are held"
            ),
            DeltaError::StaleVersion { index, version, held } => write!(
                f,
                "view delta: step {index} arrived with version {version}, not newer than the held version {held}"
            ),
        }
    }
}

impl std::error::Error for DeltaError {}

impl View {
    /// Applies one delta: clear on `reset`, then replace steps by index and
    /// approvals by id. On error nothing is changed.
    pub fn apply(&mut self, delta: ViewDelta) -> Result<(), DeltaError> {
        if self.run.is_none() && !delta.reset {
            return Err(DeltaError::NoReset);
        }
        let mut held = if delta.reset {
            0
        } else {
            self.steps.len() as u32
        };
        // Check everything before changing anything.
        for step in &delta.steps {
            if step.index > held {
                return Err(DeltaError::Gap {
                    index: step.index,
                    held,
                });
            }
            if step.index == held {
                held += 1;
            } else if !delta.reset {
                let old = &self.steps[step.index as usize];
                if step.version <= old.version {
                    return Err(DeltaError::StaleVersion {
                        index: step.index,
                        version: step.version,
                        held: old.version,
                    });
                }
            }
        }
        if delta.reset {
            self.steps.clear();
            self.approvals.clear();
            self.decided = 0;
        }
        for step in delta.steps {
            let i = step.index as usize;
            self.decided += usize::from(step.decision.is_some());
            if i == self.steps.len() {
                self.steps.push(step);
            } else {
                let old = std::mem::replace(&mut self.steps[i], step);
                self.decided -= usize::from(old.decision.is_some());
            }
        }
        for approval in delta.approvals {
            match self.approvals.iter_mut().find(|a| a.id == approval.id) {
                Some(slot) => *slot = approval,
                None => self.approvals.push(approval),
            }
        }
        self.run = Some(delta.run);
        Ok(())
    }

    /// The run's id, goal, status and counters. `None` only before the first
    /// delta was applied.
    pub fn run(&self) -> Option<&RunInfo> {
        self.run.as_ref()
    }

    /// The run's goal ("" before the first delta).
    pub fn goal(&self) -> &str {
        self.run.as_ref().map(|r| r.goal.as_str()).unwrap_or("")
    }

    /// Every step before the one being worked on, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Every approval of the run, in the order they were created.
    pub fn approvals(&self) -> &[Approval] {
        &self.approvals
    }

    /// Number of steps that carry a decision.
    pub fn decided_steps(&self) -> usize {
        self.decided
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decision, Observation, ObservationKind, RunStatus, StepState, ToolCall};

    fn run(step_count: u32) -> RunInfo {
        RunInfo {
            id: "r1".into(),
            goal: "g".into(),
            status: RunStatus::Running,
            step_count,
            model_calls: 0,
            tokens: 0,
        }
    }

    fn step(index: u32, version: u32, state: StepState) -> Step {
        Step {
            index,
            version,
            state,
            decision: Some(Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: format!("{{\"i\":{index}}}"),
            })),
            verdict: None,
            observation: (state == StepState::Done).then(|| Observation {
                kind: ObservationKind::ToolResult,
                content: "{}".into(),
            }),
        }
    }

    fn delta(reset: bool, steps: Vec<Step>) -> ViewDelta {
        ViewDelta {
            reset,
            run: run(steps.len() as u32),
            steps,
            approvals: vec![],
        }
    }

    #[test]
    fn reset_then_upserts_rebuild_the_whole_run() {
        let mut v = View::default();
        v.apply(delta(
            true,
            vec![step(0, 1, StepState::Done), step(1, 1, StepState::Decided)],
        ))
        .unwrap();
        v.apply(delta(
            false,
            vec![step(1, 2, StepState::Done), step(2, 1, StepState::Done)],
        ))
        .unwrap();
        assert_eq!(v.steps().len(), 3);
        assert_eq!(v.steps()[1].state, StepState::Done);
        assert_eq!(v.steps()[1].version, 2);
        assert_eq!(v.decided_steps(), 3);
    }

    #[test]
    fn decided_steps_follows_replacements_and_resets() {
        let undecided = |index, version| Step {
            decision: None,
            ..step(index, version, StepState::Started)
        };
        let mut v = View::default();
        v.apply(delta(
            true,
            vec![step(0, 1, StepState::Done), undecided(1, 1)],
        ))
        .unwrap();
        assert_eq!(v.decided_steps(), 1);
        v.apply(delta(false, vec![step(1, 2, StepState::Decided)]))
            .unwrap();
        assert_eq!(v.decided_steps(), 2);
        // A failed delta changes nothing, the count included.
        assert!(v.apply(delta(false, vec![undecided(1, 2)])).is_err());
        assert_eq!(v.decided_steps(), 2);
        v.apply(delta(true, vec![undecided(0, 1)])).unwrap();
        assert_eq!(v.decided_steps(), 0);
        assert_eq!(
            v.decided_steps(),
            v.steps().iter().filter(|s| s.decision.is_some()).count()
        );
    }

    #[test]
    fn reset_drops_what_was_held() {
        let mut v = View::default();
        v.apply(delta(
            true,
            vec![step(0, 1, StepState::Done), step(1, 1, StepState::Done)],
        ))
        .unwrap();
        v.apply(delta(true, vec![step(0, 3, StepState::Done)]))
            .unwrap();
        assert_eq!(v.steps().len(), 1);
        assert_eq!(v.steps()[0].version, 3);
    }

    #[test]
    fn first_delta_without_reset_is_an_error_not_a_panic() {
        let mut v = View::default();
        assert_eq!(v.apply(delta(false, vec![])), Err(DeltaError::NoReset));
        assert!(v.run().is_none());
    }

    #[test]
    fn a_gap_is_reported_and_nothing_changes() {
        let mut v = View::default();
        v.apply(delta(true, vec![step(0, 1, StepState::Done)]))
            .unwrap();
        let before = v.clone();
        let err = v.apply(delta(
            false,
            vec![step(1, 1, StepState::Done), step(5, 1, StepState::Done)],
        ));
        assert_eq!(err, Err(DeltaError::Gap { index: 5, held: 2 }));
        assert_eq!(v, before);
        assert!(err.unwrap_err().to_string().contains("step 5"));
    }

    #[test]
    fn a_stale_version_is_reported() {
        let mut v = View::default();
        v.apply(delta(true, vec![step(0, 2, StepState::Done)]))
            .unwrap();
        assert_eq!(
            v.apply(delta(false, vec![step(0, 2, StepState::Done)])),
            Err(DeltaError::StaleVersion {
                index: 0,
                version: 2,
                held: 2
            })
        );
    }

    #[test]
    fn approvals_are_replaced_by_id() {
        use crate::{Approval, ApprovalKind, ApprovalStatus};
        let a = |status| Approval {
            id: "a1".into(),
            step_index: 0,
            kind: ApprovalKind::Policy,
            status,
            call: ToolCall {
                tool: "t".into(),
                arguments: "{}".into(),
            },
            reason: "r".into(),
            decided_by: None,
            note: None,
        };
        let mut v = View::default();
        let mut d = delta(true, vec![]);
        d.approvals = vec![a(ApprovalStatus::Pending)];
        v.apply(d).unwrap();
        let mut d = delta(false, vec![]);
        d.approvals = vec![a(ApprovalStatus::Approved)];
        v.apply(d).unwrap();
        assert_eq!(v.approvals().len(), 1);
        assert_eq!(v.approvals()[0].status, ApprovalStatus::Approved);
    }
}
