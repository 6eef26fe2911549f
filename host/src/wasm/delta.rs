//! Per-instance memory of what a plugin has already been handed, so that
//! each call carries only what changed.

use super::bindings::wit;
use super::convert;
use crate::consumer::RunView;
use crate::types::ApprovalStatus;
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
    /// The delta from what the instance holds to `view`; the tracker then
    /// assumes the instance holds `view`. Cost: O(steps) integer compares,
    /// O(changed) conversions and copies.
    pub fn delta(&mut self, view: RunView<'_>) -> wit::ViewDelta {
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
                steps.push(convert::step_out(s));
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
                approvals.push(convert::approval_out(a));
                self.approvals.insert(a.id.clone(), a.status);
            }
        }
        wit::ViewDelta {
            reset,
            run: convert::run_out(view.run, view.run.step_count),
            steps,
            approvals,
        }
    }

    /// The instance may not hold what was last handed (its call failed):
    /// the next call starts with a reset.
    pub fn invalidate(&mut self) {
        self.started = false;
    }
}
