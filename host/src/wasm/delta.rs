//! Per-instance memory of what a plugin has already been handed, so that
//! each call carries only what changed.

use super::bindings::wit;
use super::{convert, lower};
use crate::consumer::RunView;
use crate::types::{Approval, ApprovalStatus, Step};
use std::collections::HashMap;

/// What one live instance holds of the run.
#[derive(Debug, Default)]
pub struct DeltaTracker {
    started: bool,
    /// The version of each step index handed over.
    steps: Vec<u32>,
    /// The status of each approval handed over.
    approvals: HashMap<String, ApprovalStatus>,
}

impl DeltaTracker {
    /// The delta from what the instance holds to `view`, borrowing from it;
    /// the tracker then assumes the instance holds `view`. Cost: O(steps)
    /// integer compares, O(changed) conversions, no copies.
    pub fn delta<'a>(&mut self, view: RunView<'a>) -> lower::ViewDeltaRef<'a> {
        let (reset, steps, approvals) = self.changes(view);
        lower::ViewDeltaRef {
            reset,
            run: lower::run(view.run, view.run.step_count),
            steps: steps.into_iter().map(lower::step).collect(),
            approvals: approvals.into_iter().map(lower::approval).collect(),
        }
    }

    /// The same delta as owned WIT values, for calls through the generated
    /// bindings (benchmarks compare the two).
    pub fn delta_owned(&mut self, view: RunView<'_>) -> wit::ViewDelta {
        let (reset, steps, approvals) = self.changes(view);
        wit::ViewDelta {
            reset,
            run: convert::run_out(view.run, view.run.step_count),
            steps: steps.into_iter().map(convert::step_out).collect(),
            approvals: approvals.into_iter().map(convert::approval_out).collect(),
        }
    }

    /// Whether the instance must reset, and the steps and approvals it does
    /// not hold as they are in `view`; records them as held.
    fn changes<'a>(&mut self, view: RunView<'a>) -> (bool, Vec<&'a Step>, Vec<&'a Approval>) {
        let reset = !self.started || view.steps.len() < self.steps.len();
        if reset {
            self.steps.clear();
            self.approvals.clear();
            self.started = true;
        }
        let mut steps = Vec::new();
        for s in view.steps {
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
