//! Per-instance memory of what a plugin has already been handed, so that
//! each call carries only what changed.

#[cfg(feature = "bench-hooks")]
use super::bindings::wit;
use super::shape::{run, step};
use crate::consumer::RunView;
use crate::types::{Approval, ApprovalStatus, Step, StepState};
use std::collections::HashMap;

/// What one live instance holds of the run.
#[derive(Debug, Default)]
pub struct DeltaTracker {
    started: bool,
    /// The version of each step index handed over.
    steps: Vec<u32>,
    /// How many leading steps were handed over done. A done step is final
    /// (the loop only ever changes the step it is on), so these are not
    /// compared again: a call costs O(steps not yet done), not O(steps),
    /// which under the loop saved reading a cache line per step of the run
    /// on every call. Debug builds still compare them all and panic if a
    /// done step changed.
    settled: usize,
    /// The status of each approval handed over.
    approvals: HashMap<String, ApprovalStatus>,
}

impl DeltaTracker {
    /// The delta from what the instance holds to `view`, borrowing from it;
    /// the tracker then assumes the instance holds `view`. Cost: O(steps)
    /// integer compares at worst, O(steps not done) usually, O(changed)
    /// conversions, no copies.
    pub fn delta<'a>(&mut self, view: RunView<'a>) -> run::ViewDeltaRef<'a> {
        let (reset, steps, approvals) = self.changes(view);
        run::ViewDeltaRef {
            reset,
            run: run::run(view.run, view.run.step_count),
            steps: steps.into_iter().map(step::step).collect(),
            approvals: approvals.into_iter().map(run::approval).collect(),
        }
    }

    /// The same delta as owned WIT values, for calls through the generated
    /// bindings (benchmarks compare the two; `bench-hooks`).
    #[cfg(feature = "bench-hooks")]
    pub fn delta_owned(&mut self, view: RunView<'_>) -> wit::ViewDelta {
        self.delta(view).into()
    }

    /// Whether the instance must reset, and the steps and approvals it does
    /// not hold as they are in `view`; records them as held.
    fn changes<'a>(&mut self, view: RunView<'a>) -> (bool, Vec<&'a Step>, Vec<&'a Approval>) {
        let reset = !self.started || view.steps.len() < self.steps.len();
        if reset {
            self.steps.clear();
            self.approvals.clear();
            self.settled = 0;
            self.started = true;
        }
        debug_assert!(
            view.steps[..self.settled]
                .iter()
                .zip(&self.steps)
                .all(|(s, held)| s.version == *held),
            "a step handed over done has changed"
        );
        let mut steps = Vec::new();
        for s in &view.steps[self.settled..] {
            let i = s.index as usize;
            if self.steps.get(i) != Some(&s.version) {
                steps.push(s);
                if i < self.steps.len() {
                    self.steps[i] = s.version;
                } else {
                    self.steps.push(s.version);
                }
            }
        }
        while view
            .steps
            .get(self.settled)
            .is_some_and(|s| s.state == StepState::Done)
        {
            self.settled += 1;
        }
        let mut approvals = Vec::new();
        for a in view.approvals {
            if self.approvals.get(&a.id) != Some(&a.status) {
                approvals.push(a);
                self.approvals.insert(a.id.clone(), a.status);
            }
        }
        (reset, steps, approvals)
    }

    /// The instance may not hold what was last handed (its call failed):
    /// the next call starts with a reset.
    pub fn invalidate(&mut self) {
        self.started = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Run;

    fn step(index: u32, version: u32, state: StepState) -> Step {
        let mut s = Step::started(index, 0);
        s.version = version;
        s.state = state;
        s
    }

    fn handed(t: &mut DeltaTracker, run: &Run, steps: &[Step]) -> (bool, Vec<(u32, u32)>) {
        let view = RunView {
            run,
            steps,
            approvals: &[],
        };
        let (reset, changed, _) = t.changes(view);
        (
            reset,
            changed.iter().map(|s| (s.index, s.version)).collect(),
        )
    }

    #[test]
    fn only_new_and_changed_steps_are_handed_and_done_ones_are_not_compared_again() {
        let run = Run::new("r", "g", Default::default(), 0);
        let mut t = DeltaTracker::default();
        let mut steps = vec![
            step(0, 3, StepState::Done),
            step(1, 2, StepState::Executing),
        ];
        assert_eq!(handed(&mut t, &run, &steps), (true, vec![(0, 3), (1, 2)]));
        assert_eq!(t.settled, 1);
        assert_eq!(handed(&mut t, &run, &steps), (false, vec![]));
        // The step in progress finishes and a new one starts.
        steps[1] = step(1, 3, StepState::Done);
        steps.push(step(2, 1, StepState::Started));
        assert_eq!(handed(&mut t, &run, &steps), (false, vec![(1, 3), (2, 1)]));
        assert_eq!(t.settled, 2);
        // Fewer steps than held (another run's view, or a resumed one)
        // starts over.
        assert_eq!(handed(&mut t, &run, &steps[..1]), (true, vec![(0, 3)]));
        // So does an invalidated instance.
        t.invalidate();
        assert_eq!(
            handed(&mut t, &run, &steps),
            (true, vec![(0, 3), (1, 3), (2, 1)])
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a step handed over done has changed")]
    fn a_done_step_that_changes_is_caught_in_debug_builds() {
        let run = Run::new("r", "g", Default::default(), 0);
        let mut t = DeltaTracker::default();
        let mut steps = vec![step(0, 3, StepState::Done)];
        handed(&mut t, &run, &steps);
        steps[0].version = 4;
        handed(&mut t, &run, &steps);
    }
}
