//! `agent-scripted`: plays a fixed script of decisions. See ../README.md.

use keel_guest::config::{self, Obj};
use keel_guest::prelude::*;
use serde_json::Value;

pub struct Scripted {
    script: Vec<Decision>,
}

impl Scripted {
    pub fn parse(text: &str) -> Result<Scripted, String> {
        let mut root = config::parse(text)?;
        let mut script = Vec::new();
        for (path, value) in root.req_array("script")? {
            script.push(parse_entry(path, value)?);
        }
        root.finish()?;
        Ok(Scripted { script })
    }

    /// The decision for a view with `decided` decided steps.
    pub fn next(&self, decided: usize) -> Decision {
        match self.script.get(decided) {
            Some(d) => d.clone(),
            None => Decision::Fail(format!(
                "script exhausted after {} decisions",
                self.script.len()
            )),
        }
    }
}

fn parse_entry(path: String, value: Value) -> Result<Decision, String> {
    let shape = || format!("{path}: expected an object with exactly one of call, complete, fail");
    let Value::Object(map) = value else {
        return Err(shape());
    };
    if map.len() != 1 {
        return Err(shape());
    }
    let Some((key, value)) = map.into_iter().next() else {
        return Err(shape());
    };
    let path = format!("{path}.{key}");
    match key.as_str() {
        "call" => {
            let mut call = Obj::new(path, value)?;
            let tool = call.req_str("tool")?;
            let arguments = call
                .take("arguments")
                .unwrap_or_else(|| Value::Object(Default::default()));
            call.finish()?;
            Ok(Decision::Call(ToolCall {
                tool,
                arguments: arguments.to_string(),
            }))
        }
        "complete" => Ok(Decision::Complete(value.to_string())),
        "fail" => match value {
            Value::String(s) => Ok(Decision::Fail(s)),
            _ => Err(format!("{path}: expected a string")),
        },
        _ => Err(shape()),
    }
}

impl Agent for Scripted {
    fn init(config: &str, _tools: Vec<ToolSpec>) -> Result<Self, String> {
        Scripted::parse(config)
    }
    fn decide(&mut self, view: &View) -> Result<Decision, String> {
        Ok(self.next(view.decided_steps()))
    }
}

keel_guest::export_agent!(Scripted);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plays_in_order_then_fails() {
        let s = Scripted::parse(
            r#"{"script":[{"call":{"tool":"echo","arguments":{"b":1,"a":2}}},{"complete":{"ok":true}}]}"#,
        )
        .unwrap();
        assert_eq!(
            s.next(0),
            Decision::Call(ToolCall {
                tool: "echo".into(),
                arguments: r#"{"a":2,"b":1}"#.into()
            })
        );
        assert_eq!(s.next(1), Decision::Complete(r#"{"ok":true}"#.into()));
        assert_eq!(
            s.next(2),
            Decision::Fail("script exhausted after 2 decisions".into())
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = |c: &str| Scripted::parse(c).err().unwrap();
        assert_eq!(e(r#"{"scrip":[]}"#), "config.script: missing");
        assert_eq!(e(r#"{"script":[],"x":1}"#), r#"config: unknown key "x""#);
        assert_eq!(
            e(r#"{"script":[{"call":{}}]}"#),
            "config.script[0].call.tool: missing"
        );
        assert_eq!(
            e(r#"{"script":[{"call":{"tool":"a","args":{}}}]}"#),
            r#"config.script[0].call: unknown key "args""#
        );
        assert_eq!(
            e(r#"{"script":[{"fail":1}]}"#),
            "config.script[0].fail: expected a string"
        );
        assert_eq!(
            e(r#"{"script":[{}]}"#),
            "config.script[0]: expected an object with exactly one of call, complete, fail"
        );
    }
}
