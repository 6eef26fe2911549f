//! `agent-scripted`: plays a fixed script of decisions. See ../README.md.

use keel_guest::config::{self, Obj};
use keel_guest::prelude::*;
use serde::Deserialize;
use serde_json::Value;

pub struct Scripted {
    script: Vec<Decision>,
}

impl Scripted {
    /// Reads a config. A valid one is read straight into decisions; only an
    /// invalid one is read again, key by key, for an error that names the
    /// key. The two readings accept the same configs and give the same
    /// script (the tests below hold them to it); the first is several times
    /// cheaper, which shows in a run's set-up with a long script.
    pub fn parse(text: &str) -> Result<Scripted, String> {
        match serde_json::from_str::<Typed>(text) {
            Ok(typed) => Ok(typed.into_script()),
            Err(_) => Scripted::parse_by_key(text),
        }
    }

    /// The key-by-key reading, with the errors README.md lists.
    fn parse_by_key(text: &str) -> Result<Scripted, String> {
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

/// The config as a typed value: what [`Scripted::parse`] reads first.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Typed {
    script: Vec<TypedEntry>,
}

#[derive(Deserialize)]
enum TypedEntry {
    #[serde(rename = "call")]
    Call(TypedCall),
    #[serde(rename = "complete")]
    Complete(Value),
    #[serde(rename = "fail")]
    Fail(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TypedCall {
    tool: String,
    #[serde(default = "empty_object")]
    arguments: Value,
}

/// `value` as compact JSON text, serialized straight into the string. Its
/// `Display` gives the same text through the formatting machinery, which
/// made a 400-entry script's set-up about a fifth slower.
fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl Typed {
    fn into_script(self) -> Scripted {
        let script = self
            .script
            .into_iter()
            .map(|entry| match entry {
                TypedEntry::Call(c) => Decision::Call(ToolCall {
                    tool: c.tool,
                    arguments: compact(&c.arguments),
                }),
                TypedEntry::Complete(v) => Decision::Complete(compact(&v)),
                TypedEntry::Fail(s) => Decision::Fail(s),
            })
            .collect();
        Scripted { script }
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
                arguments: compact(&arguments),
            }))
        }
        "complete" => Ok(Decision::Complete(compact(&value))),
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

    /// Both readings of a valid config give the same script, so which one
    /// read it never shows.
    #[test]
    fn the_typed_reading_agrees_with_the_key_by_key_one() {
        let valid = [
            r#"{"script":[]}"#,
            r#"{"script":[{"call":{"tool":"echo","arguments":{"b":[1,{"y":2,"x":null}],"a":"\u00e9"}}}]}"#,
            r#"{"script":[{"call":{"tool":"echo"}},{"call":{"tool":"e","arguments":null}}]}"#,
            r#"{"script":[{"complete":null},{"complete":{"ok":true}},{"fail":"no"}]}"#,
            r#" { "script" : [ { "call" : { "arguments" : [ 1 , 2 ] , "tool" : "t" } } ] } "#,
        ];
        for text in valid {
            let typed = serde_json::from_str::<Typed>(text)
                .unwrap_or_else(|e| panic!("{text}: {e}"))
                .into_script();
            let by_key = Scripted::parse_by_key(text).unwrap();
            assert_eq!(typed.script, by_key.script, "{text}");
        }
        // What the key-by-key reading accepts and the typed one does not
        // (a repeated key: the last one counts) still reads.
        let repeated = r#"{"script":[{"fail":"a"}],"script":[{"fail":"b"}]}"#;
        assert!(serde_json::from_str::<Typed>(repeated).is_err());
        assert_eq!(
            Scripted::parse(repeated).unwrap().script,
            vec![Decision::Fail("b".into())]
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
