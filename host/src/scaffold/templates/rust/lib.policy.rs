//! {{name}}: a policy that allows read-only calls and asks an operator
//! about every other one.

use keel_guest::config;
use keel_guest::prelude::*;

pub struct ReadOnly;

impl Policy for ReadOnly {
    fn init(text: &str) -> Result<Self, String> {
        // No keys yet: the strict reader refuses any, naming it.
        config::parse(text)?.finish()?;
        Ok(ReadOnly)
    }

    fn evaluate(&mut self, call: &ToolCall, effect: Effect, _view: &View) -> Result<Verdict, String> {
        if effect == Effect::ReadOnly {
            return Ok(Verdict::Allow);
        }
        Ok(Verdict::RequireApproval(ApprovalRequest {
            reason: format!("{} changes things ({})", call.tool, keel_guest::effect_name(effect)),
            presentation: serde_json::json!({ "tool": call.tool }).to_string(),
        }))
    }

    // Judges each call alone: the host need not send the run's steps.
    fn view(&self) -> PolicyView {
        PolicyView::CallOnly
    }
}

keel_guest::export_policy!(ReadOnly);

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(effect: Effect) -> Verdict {
        let call = ToolCall { tool: "fs_write".into(), arguments: "{}".into() };
        ReadOnly::init("{}").expect("config").evaluate(&call, effect, &View::default()).expect("verdict")
    }

    #[test]
    fn read_only_calls_are_allowed() {
        assert_eq!(judge(Effect::ReadOnly), Verdict::Allow);
    }

    #[test]
    fn other_calls_need_an_operator() {
        for effect in [Effect::Idempotent, Effect::LocalMutation, Effect::RemoteMutation, Effect::Destructive] {
            assert!(matches!(judge(effect), Verdict::RequireApproval(_)), "{effect:?}");
        }
    }

    #[test]
    fn an_unknown_key_is_refused() {
        assert_eq!(ReadOnly::init(r#"{"x":1}"#).err().as_deref(), Some(r#"config: unknown key "x""#));
    }
}
