//! Strict config reading with errors that name the key.
//!
//! Plugins get their config as JSON text. [`Obj`] walks it key by key,
//! remembering the path, so every error reads like
//! `config.rules[2].action: missing`, and [`Obj::finish`] rejects keys the
//! plugin did not ask for.

use serde_json::{Map, Value};

/// Parses config text; the root must be an object. An empty text is `{}`.
pub fn parse(text: &str) -> Result<Obj, String> {
    let value: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(text).map_err(|e| format!("config: invalid JSON: {e}"))?
    };
    Obj::new("config".to_string(), value)
}

/// One JSON object of the config and its path.
#[derive(Debug)]
pub struct Obj {
    path: String,
    map: Map<String, Value>,
}

impl Obj {
    /// Wraps `value`, which must be an object, found at `path`.
    pub fn new(path: String, value: Value) -> Result<Obj, String> {
        match value {
            Value::Object(map) => Ok(Obj { path, map }),
            _ => Err(format!("{path}: expected an object")),
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path of `key` inside this object.
    pub fn key_path(&self, key: &str) -> String {
        join(&self.path, '.', key)
    }

    /// Takes `key` out, if present.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    /// Takes `key` out; absent is an error.
    pub fn require(&mut self, key: &str) -> Result<Value, String> {
        self.take(key)
            .ok_or_else(|| format!("{}: missing", self.key_path(key)))
    }

    pub fn opt_str(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("{}: expected a string", self.key_path(key))),
        }
    }

    pub fn req_str(&mut self, key: &str) -> Result<String, String> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            _ => Err(format!("{}: expected a string", self.key_path(key))),
        }
    }

    pub fn opt_u64(&mut self, key: &str) -> Result<Option<u64>, String> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(_) => Err(format!(
                "{}: expected a non-negative integer",
                self.key_path(key)
            )),
        }
    }

    pub fn opt_bool(&mut self, key: &str) -> Result<Option<bool>, String> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(format!("{}: expected true or false", self.key_path(key))),
        }
    }

    /// Takes the array at `key` (absent: `None`), pairing each element with
    /// its path.
    pub fn opt_array(&mut self, key: &str) -> Result<Option<Vec<(String, Value)>>, String> {
        let path = self.key_path(key);
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => Ok(Some(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| (index_path(&path, i), v))
                    .collect(),
            )),
            Some(_) => Err(format!("{path}: expected an array")),
        }
    }

    pub fn req_array(&mut self, key: &str) -> Result<Vec<(String, Value)>, String> {
        let path = self.key_path(key);
        self.opt_array(key)?
            .ok_or_else(|| format!("{path}: missing"))
    }

    pub fn opt_obj(&mut self, key: &str) -> Result<Option<Obj>, String> {
        let path = self.key_path(key);
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => Obj::new(path, v).map(Some),
        }
    }

    /// Fails on the first key nobody took.
    pub fn finish(self) -> Result<(), String> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(format!("{}: unknown key {:?}", self.path, k)),
        }
    }

    /// The keys still in the object with their values, in key order.
    pub fn into_entries(self) -> impl Iterator<Item = (String, String, Value)> {
        let path = self.path;
        self.map
            .into_iter()
            .map(move |(k, v)| (join(&path, '.', &k), k, v))
    }
}

// Paths are built on every successful read, in every instance's `init`:
// plain concatenation, because `format!` costs a fresh instance several
// times more (its first indirect calls each go through the runtime).

fn join(path: &str, sep: char, key: &str) -> String {
    let mut out = String::with_capacity(path.len() + 1 + key.len());
    out.push_str(path);
    out.push(sep);
    out.push_str(key);
    out
}

/// `path[i]`.
fn index_path(path: &str, i: usize) -> String {
    let mut digits = [0u8; 20];
    let mut n = digits.len();
    let mut rest = i;
    loop {
        n -= 1;
        digits[n] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut out = String::with_capacity(path.len() + digits.len() - n + 2);
    out.push_str(path);
    out.push('[');
    for &d in &digits[n..] {
        out.push(char::from(d));
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path() {
        let mut c = parse(r#"{"rules":[{"action":1}],"extra":true}"#).unwrap();
        let rules = c.req_array("rules").unwrap();
        let (path, v) = rules.into_iter().next().unwrap();
        let mut rule = Obj::new(path, v).unwrap();
        assert_eq!(
            rule.req_str("action").unwrap_err(),
            "config.rules[0].action: expected a string"
        );
        assert_eq!(c.finish().unwrap_err(), "config: unknown key \"extra\"");
    }

    #[test]
    fn paths_of_keys_and_elements() {
        let mut c = parse(r#"{"a":{"b":1},"list":[0,1,2,3,4,5,6,7,8,9,10]}"#).unwrap();
        assert_eq!(c.key_path("x"), "config.x");
        let items = c.req_array("list").unwrap();
        let paths: Vec<&str> = items.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths[0], "config.list[0]");
        assert_eq!(paths[9], "config.list[9]");
        assert_eq!(paths[10], "config.list[10]");
        assert_eq!(index_path("p", 1234567), "p[1234567]");
        let a = c.opt_obj("a").unwrap().unwrap();
        assert_eq!(a.path(), "config.a");
        let e: Vec<_> = a.into_entries().collect();
        assert_eq!(e[0].0, "config.a.b");
    }

    #[test]
    fn missing_invalid_and_empty() {
        let mut c = parse("{}").unwrap();
        assert_eq!(c.req_array("rules").unwrap_err(), "config.rules: missing");
        assert!(parse("{").unwrap_err().starts_with("config: invalid JSON"));
        assert_eq!(parse("[1]").unwrap_err(), "config: expected an object");
        assert!(parse("  ").unwrap().finish().is_ok());
    }
}
