//! {{name}}: an agent that completes the run with its goal.
//!
//! Replace `decide` with your own logic: look at `view.steps()` (what was
//! decided and observed so far) and return the next `Decision`.

use keel_guest::config;
use keel_guest::prelude::*;

pub struct GoalAgent {
    tools: Vec<ToolSpec>,
}

impl Agent for GoalAgent {
    fn init(text: &str, tools: Vec<ToolSpec>) -> Result<Self, String> {
        // No keys yet: the strict reader refuses any, naming it.
        config::parse(text)?.finish()?;
        Ok(GoalAgent { tools })
    }

    fn decide(&mut self, view: &View) -> Result<Decision, String> {
        let result = serde_json::json!({ "goal": view.goal(), "tools": self.tools.len() });
        Ok(Decision::Complete(result.to_string()))
    }
}

keel_guest::export_agent!(GoalAgent);

#[cfg(test)]
mod tests {
    use super::*;
    use keel_guest::ViewDelta;

    fn view(goal: &str) -> View {
        let mut view = View::default();
        let run = RunInfo {
            id: "r1".into(),
            goal: goal.into(),
            status: RunStatus::Running,
            step_count: 1,
            model_calls: 0,
            tokens: 0,
        };
        view.apply(ViewDelta { reset: true, run, steps: vec![], approvals: vec![] })
            .expect("a reset applies");
        view
    }

    #[test]
    fn completes_with_the_goal() {
        let mut agent = GoalAgent::init("", vec![]).expect("empty config");
        let decision = agent.decide(&view("say hi")).expect("decides");
        assert_eq!(decision, Decision::Complete(r#"{"goal":"say hi","tools":0}"#.into()));
    }

    #[test]
    fn an_unknown_key_is_refused() {
        assert_eq!(GoalAgent::init(r#"{"x":1}"#, vec![]).err().as_deref(), Some(r#"config: unknown key "x""#));
    }
}
