//! {{name}}: a tool component with one tool, `echo`, that answers with its
//! arguments.

use keel_guest::config;
use keel_guest::prelude::*;

pub struct Echo;

impl Tool for Echo {
    fn init(text: &str) -> Result<Self, String> {
        // No keys yet: the strict reader refuses any, naming it.
        config::parse(text)?.finish()?;
        Ok(Echo)
    }

    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo".into(),
            description: "Answers with its arguments.".into(),
            parameters: r#"{"type":"object"}"#.into(),
            effect: Effect::ReadOnly,
        }]
    }

    fn call(&mut self, name: &str, arguments: &str) -> Result<String, String> {
        if name != "echo" {
            return Err(format!("unknown tool {name:?}"));
        }
        Ok(arguments.to_string())
    }
}

keel_guest::export_tool!(Echo);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_its_arguments() {
        let mut tool = Echo::init("").expect("empty config");
        assert_eq!(tool.specs()[0].name, "echo");
        assert_eq!(tool.call("echo", r#"{"a":1}"#).as_deref(), Ok(r#"{"a":1}"#));
        assert!(tool.call("other", "{}").is_err());
    }
}
