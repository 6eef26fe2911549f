//! Validates tool arguments against the tool's JSON Schema.
//!
//! Supported keywords (the subset tool authors use for arguments objects):
//! `type` (a name or a list), `properties`, `required`,
//! `additionalProperties` (boolean or schema), `items`, `enum`, `const`,
//! `minimum`, `maximum`, `minLength`, `maxLength`, `minItems`, `maxItems`,
//! `anyOf`, `allOf`. Other keywords are accepted and not checked, as JSON
//! Schema itself does with unknown keywords; `description` and `default` are
//! annotations.

use serde_json::Value;

/// `Ok` or the first violation, with the JSON path of the offending value.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "arguments")
}

fn type_ok(name: &str, v: &Value) -> bool {
    match name {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => {
            v.as_i64().is_some()
                || v.as_u64().is_some()
                || v.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn check(schema: &Value, v: &Value, path: &str) -> Result<(), String> {
    let s = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{path}: not allowed")),
        Value::Object(s) => s,
        _ => return Ok(()),
    };
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(name) => type_ok(name, v),
            Value::Array(names) => names
                .iter()
                .filter_map(Value::as_str)
                .any(|n| type_ok(n, v)),
            _ => true,
        };
        if !ok {
            return Err(format!("{path}: expected {t}, got {}", kind(v)));
        }
    }
    if let Some(Value::Array(options)) = s.get("enum") {
        if !options.contains(v) {
            return Err(format!(
                "{path}: must be one of {}",
                Value::Array(options.clone())
            ));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            return Err(format!("{path}: must be {c}"));
        }
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
            if n < min {
                return Err(format!("{path}: {n} is less than the minimum {min}"));
            }
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
            if n > max {
                return Err(format!("{path}: {n} is more than the maximum {max}"));
            }
        }
    }
    if let Value::String(text) = v {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64) {
            if len < min {
                return Err(format!("{path}: shorter than {min} characters"));
            }
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
            if len > max {
                return Err(format!("{path}: longer than {max} characters"));
            }
        }
    }
    if let Value::Array(items) = v {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
            if (items.len() as u64) < min {
                return Err(format!("{path}: fewer than {min} items"));
            }
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64) {
            if items.len() as u64 > max {
                return Err(format!("{path}: more than {max} items"));
            }
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                check(item_schema, item, &format!("{path}[{i}]"))?;
            }
        }
    }
    if let Value::Object(obj) = v {
        if let Some(Value::Array(required)) = s.get("required") {
            for key in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(key) {
                    return Err(format!("{path}.{key}: required"));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (key, value) in obj {
            let sub = format!("{path}.{key}");
            match props.and_then(|p| p.get(key)) {
                Some(prop) => check(prop, value, &sub)?,
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => return Err(format!("{sub}: unknown property")),
                    Some(extra @ Value::Object(_)) => check(extra, value, &sub)?,
                    _ => {}
                },
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for sub in all {
            check(sub, v, path)?;
        }
    }
    if let Some(Value::Array(any)) = s.get("anyOf") {
        if !any.iter().any(|sub| check(sub, v, path).is_ok()) {
            return Err(format!("{path}: matches none of the allowed shapes"));
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn object_rules() {
        let s = json!({"type":"object","properties":{"path":{"type":"string","minLength":1},"n":{"type":"integer","minimum":0}},
                       "required":["path"],"additionalProperties":false});
        assert!(validate(&s, &json!({"path":"a","n":2})).is_ok());
        assert_eq!(
            validate(&s, &json!({})).unwrap_err(),
            "arguments.path: required"
        );
        assert_eq!(
            validate(&s, &json!({"path":"a","x":1})).unwrap_err(),
            "arguments.x: unknown property"
        );
        assert!(validate(&s, &json!({"path":""}))
            .unwrap_err()
            .contains("shorter"));
        assert!(validate(&s, &json!({"path":"a","n":-1}))
            .unwrap_err()
            .contains("minimum"));
        assert!(validate(&s, &json!({"path":3}))
            .unwrap_err()
            .contains("expected \"string\""));
        assert!(validate(&s, &json!([1])).is_err());
    }

    #[test]
    fn arrays_enums_and_combinators() {
        let s = json!({"type":"array","items":{"enum":["a","b"]},"maxItems":2});
        assert!(validate(&s, &json!(["a", "b"])).is_ok());
        assert_eq!(
            validate(&s, &json!(["c"])).unwrap_err(),
            "arguments[0]: must be one of [\"a\",\"b\"]"
        );
        assert!(validate(&s, &json!(["a", "a", "a"])).is_err());
        let any = json!({"anyOf":[{"type":"string"},{"type":"integer"}]});
        assert!(validate(&any, &json!(3)).is_ok());
        assert!(validate(&any, &json!(true)).is_err());
    }
}
