//! `policy-rules`: ordered rules over tool name, effect class and argument
//! patterns. See ../README.md for the config.

use keel_guest::config::{self, Obj};
use keel_guest::prelude::*;
use keel_guest::{effect_name, parse_effect};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    Allow,
    Deny,
    RequireApproval,
    Abort,
}

fn parse_action(path: &str, s: &str) -> Result<Action, String> {
    Ok(match s {
        "allow" => Action::Allow,
        "deny" => Action::Deny,
        "require-approval" => Action::RequireApproval,
        "abort" => Action::Abort,
        _ => {
            return Err(format!(
                "{path}: {s:?} is not one of allow, deny, require-approval, abort"
            ))
        }
    })
}

#[derive(Debug)]
struct Rule {
    tool: Option<String>,
    effects: Option<Vec<Effect>>,
    args: Vec<(String, String)>,
    action: Action,
    reason: Option<String>,
}

/// The parsed rule set; `evaluate` is a pure function of it.
#[derive(Debug)]
pub struct Rules {
    rules: Vec<Rule>,
    default: Action,
}

impl Rules {
    pub fn parse(text: &str) -> Result<Rules, String> {
        let mut root = config::parse(text)?;
        let mut rules = Vec::new();
        for (path, value) in root.req_array("rules")? {
            rules.push(parse_rule(Obj::new(path, value)?)?);
        }
        let default = match root.opt_str("default")? {
            None => Action::Deny,
            Some(s) => parse_action(&root.key_path("default"), &s)?,
        };
        root.finish()?;
        Ok(Rules { rules, default })
    }

    pub fn evaluate(&self, call: &ToolCall, effect: Effect) -> Verdict {
        // The arguments are parsed only if a rule gets as far as its `args`
        // conditions, and at most once; text that is not JSON matches none.
        let mut args: Option<Option<Value>> = None;
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.matches(call, effect, &mut args) {
                return verdict(
                    rule.action,
                    || {
                        rule.reason
                            .clone()
                            .unwrap_or_else(|| format!("matched rule {i}"))
                    },
                    Value::from(i),
                    &call.tool,
                );
            }
        }
        verdict(
            self.default,
            || "no rule matched".into(),
            Value::Null,
            &call.tool,
        )
    }
}

/// The verdict of `action`; `reason` is built only for the actions that
/// carry one.
fn verdict(action: Action, reason: impl FnOnce() -> String, rule: Value, tool: &str) -> Verdict {
    match action {
        Action::Allow => Verdict::Allow,
        Action::Deny => Verdict::Deny(reason()),
        Action::Abort => Verdict::Abort(reason()),
        Action::RequireApproval => Verdict::RequireApproval(ApprovalRequest {
            reason: reason(),
            presentation: serde_json::json!({ "rule": rule, "tool": tool }).to_string(),
        }),
    }
}

fn parse_rule(mut obj: Obj) -> Result<Rule, String> {
    let tool = obj.opt_str("tool")?;
    let effect_path = obj.key_path("effect");
    let effects = match obj.take("effect") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(vec![effect(&effect_path, &s)?]),
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => out.push(effect(&effect_path, &s)?),
                    _ => {
                        return Err(format!(
                            "{effect_path}: expected a string or a non-empty array of strings"
                        ))
                    }
                }
            }
            Some(out)
        }
        Some(_) => {
            return Err(format!(
                "{effect_path}: expected a string or a non-empty array of strings"
            ))
        }
    };
    let mut args = Vec::new();
    if let Some(a) = obj.opt_obj("args")? {
        for (path, key, value) in a.into_entries() {
            match value {
                Value::String(pattern) => args.push((key, pattern)),
                _ => return Err(format!("{path}: expected a string")),
            }
        }
    }
    let action_path = obj.key_path("action");
    let action = parse_action(&action_path, &obj.req_str("action")?)?;
    let reason = obj.opt_str("reason")?;
    obj.finish()?;
    Ok(Rule {
        tool,
        effects,
        args,
        action,
        reason,
    })
}

fn effect(path: &str, name: &str) -> Result<Effect, String> {
    parse_effect(name).ok_or_else(|| format!("{path}: {name:?} is not an effect class"))
}

impl Rule {
    /// `args` caches the call's parsed arguments across rules.
    fn matches(&self, call: &ToolCall, effect: Effect, args: &mut Option<Option<Value>>) -> bool {
        if let Some(pattern) = &self.tool {
            if !glob(pattern, &call.tool) {
                return false;
            }
        }
        if let Some(effects) = &self.effects {
            if !effects
                .iter()
                .any(|e| effect_name(*e) == effect_name(effect))
            {
                return false;
            }
        }
        if self.args.is_empty() {
            return true;
        }
        let args = args
            .get_or_insert_with(|| serde_json::from_str(&call.arguments).ok())
            .as_ref();
        self.args.iter().all(|(key, pattern)| {
            matches!(args.and_then(|a| a.get(key)), Some(Value::String(s)) if glob(pattern, s))
        })
    }
}

/// `*` matches any run of characters, `?` exactly one; the rest literally.
/// Walks both strings in place (no copies): on a mismatch after a `*`, the
/// `*` takes one more character of the text and matching resumes.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (mut p, mut t) = (pattern, text);
    // The pattern after the last `*` seen, and the text that `*` stops at.
    let mut star: Option<(&str, &str)> = None;
    while let Some(c) = t.chars().next() {
        match p.chars().next() {
            Some('*') => {
                p = &p[1..];
                star = Some((p, t));
            }
            Some(x) if x == '?' || x == c => {
                p = &p[x.len_utf8()..];
                t = &t[c.len_utf8()..];
            }
            _ => {
                let Some((after, at)) = star else {
                    return false;
                };
                let Some(skipped) = at.chars().next() else {
                    return false;
                };
                let at = &at[skipped.len_utf8()..];
                star = Some((after, at));
                (p, t) = (after, at);
            }
        }
    }
    p.chars().all(|c| c == '*')
}

struct RulesPolicy(Rules);

impl Policy for RulesPolicy {
    fn init(config: &str) -> Result<Self, String> {
        Rules::parse(config).map(RulesPolicy)
    }
    fn evaluate(
        &mut self,
        call: &ToolCall,
        effect: Effect,
        _view: &View,
    ) -> Result<Verdict, String> {
        Ok(self.0.evaluate(call, effect))
    }

    /// Rules match the call alone, never the run's history.
    fn view(&self) -> PolicyView {
        PolicyView::CallOnly
    }
}

keel_guest::export_policy!(RulesPolicy);

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str, args: &str) -> ToolCall {
        ToolCall {
            tool: tool.into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn first_match_wins_and_default_denies() {
        let r = Rules::parse(
            r#"{"rules":[{"tool":"fs_read","action":"allow"},
                         {"tool":"fs_*","args":{"path":"secret/*"},"action":"deny","reason":"no"},
                         {"effect":["local-mutation"],"action":"require-approval"}]}"#,
        )
        .unwrap();
        assert_eq!(
            r.evaluate(&call("fs_read", "{}"), Effect::ReadOnly),
            Verdict::Allow
        );
        assert_eq!(
            r.evaluate(
                &call("fs_write", r#"{"path":"secret/k"}"#),
                Effect::LocalMutation
            ),
            Verdict::Deny("no".into())
        );
        match r.evaluate(&call("fs_write", r#"{"path":"a"}"#), Effect::LocalMutation) {
            Verdict::RequireApproval(a) => {
                assert_eq!(a.reason, "matched rule 2");
                assert_eq!(a.presentation, r#"{"rule":2,"tool":"fs_write"}"#);
            }
            v => panic!("{v:?}"),
        }
        assert_eq!(
            r.evaluate(&call("net", "{}"), Effect::RemoteMutation),
            Verdict::Deny("no rule matched".into())
        );
    }

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("a*c", "abbbc"));
        assert!(glob("a?c", "aéc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*/x", "a/b/x"));
        assert!(!glob("a", "ab"));
        assert!(glob("*é?*", "xéy"));
        assert!(!glob("*é?", "xé"));
    }

    /// The glob of the README, by the book: `*` any run, `?` one character.
    fn glob_by_recursion(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|k| glob_by_recursion(rest, &t[k..])),
            Some((c, rest)) => match t.split_first() {
                Some((d, t_rest)) => (*c == '?' || c == d) && glob_by_recursion(rest, t_rest),
                None => false,
            },
        }
    }

    #[test]
    fn glob_agrees_with_the_definition_on_every_short_string() {
        fn all(alphabet: &[char], max: usize) -> Vec<String> {
            let mut out = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last
                    .iter()
                    .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                    .collect();
                out.extend(last.iter().cloned());
            }
            out
        }
        let patterns = all(&['a', 'é', '*', '?'], 4);
        let texts = all(&['a', 'é', 'b'], 4);
        for p in &patterns {
            let pc: Vec<char> = p.chars().collect();
            for t in &texts {
                let tc: Vec<char> = t.chars().collect();
                assert_eq!(
                    glob(p, t),
                    glob_by_recursion(&pc, &tc),
                    "{p:?} against {t:?}"
                );
            }
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = |c: &str| Rules::parse(c).unwrap_err();
        assert_eq!(
            e(r#"{"rules":[{"action":"permit"}]}"#),
            r#"config.rules[0].action: "permit" is not one of allow, deny, require-approval, abort"#
        );
        assert_eq!(
            e(r#"{"rules":[{"tool":"x"}]}"#),
            "config.rules[0].action: missing"
        );
        assert_eq!(e(r#"{"rule":[]}"#), "config.rules: missing");
        assert_eq!(e(r#"{"rules":[],"x":1}"#), r#"config: unknown key "x""#);
        assert_eq!(
            e(r#"{"rules":[{"action":"allow","effect":"write"}]}"#),
            r#"config.rules[0].effect: "write" is not an effect class"#
        );
        assert_eq!(
            e(r#"{"rules":[{"action":"allow","effect":[]}]}"#),
            "config.rules[0].effect: expected a string or a non-empty array of strings"
        );
        assert_eq!(
            e(r#"{"rules":[{"action":"allow","args":{"p":1}}]}"#),
            "config.rules[0].args.p: expected a string"
        );
        assert_eq!(e(r#"{"rules":[3]}"#), "config.rules[0]: expected an object");
        assert_eq!(
            e(r#"{"rules":[],"default":"maybe"}"#),
            r#"config.default: "maybe" is not one of allow, deny, require-approval, abort"#
        );
    }
}
