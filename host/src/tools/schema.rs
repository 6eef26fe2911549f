//! Validates tool arguments against the tool's JSON Schema.
//!
//! Supported keywords (the subset tool authors use for arguments objects):
//! `type` (a name or a list), `properties`, `required`,
//! `additionalProperties` (boolean or schema), `items`, `enum`, `const`,
//! `minimum`, `maximum`, `minLength`, `maxLength`, `minItems`, `maxItems`,
//! `anyOf`, `allOf`. Other keywords are accepted and not checked, as JSON
//! Schema itself does with unknown keywords; `description` and `default` are
//! annotations.

use crate::types::ToolSpec;
use serde_json::Value;

/// What the host accepts from a tool's `specs()`: whatever a plugin hands
/// over is bounded in size, and its schema in depth and size, so that the
/// host's own work on it (parsing, validating every call, rendering it for
/// the model) stays bounded too.
pub struct SpecBounds;

impl SpecBounds {
    /// Tools one provider may declare.
    pub const MAX_TOOLS: usize = 128;
    /// Bytes of a tool's name.
    pub const MAX_NAME_BYTES: usize = 128;
    /// Bytes of a tool's description.
    pub const MAX_DESCRIPTION_BYTES: usize = 16 << 10;
    /// Bytes of a tool's parameters schema, as JSON text.
    pub const MAX_SCHEMA_BYTES: usize = 64 << 10;
    /// Nesting of a schema (objects and arrays within each other).
    pub const MAX_SCHEMA_DEPTH: usize = 32;
    /// Schema checks one call's validation may make: enough for a
    /// 100,000-element array against a simple item schema, far short of
    /// what nested `anyOf` can make of a large argument.
    pub const VALIDATION_BUDGET: u64 = 250_000;
}

/// Refuses a provider's specs over [`SpecBounds`], naming the tool and
/// the bound.
pub fn check_specs(specs: &[ToolSpec]) -> Result<(), String> {
    if specs.len() > SpecBounds::MAX_TOOLS {
        return Err(format!(
            "declares {} tools, over the limit of {}",
            specs.len(),
            SpecBounds::MAX_TOOLS
        ));
    }
    for s in specs {
        let over = |what: &str, len: usize, max: usize| {
            Err(format!(
                "tool {:?}: its {what} is {len} bytes, over the limit of {max}",
                keel_vocab::render::cap(&s.name, 64)
            ))
        };
        if s.name.is_empty() {
            return Err("a tool has an empty name".into());
        }
        if s.name.len() > SpecBounds::MAX_NAME_BYTES {
            return over("name", s.name.len(), SpecBounds::MAX_NAME_BYTES);
        }
        if s.description.len() > SpecBounds::MAX_DESCRIPTION_BYTES {
            return over(
                "description",
                s.description.len(),
                SpecBounds::MAX_DESCRIPTION_BYTES,
            );
        }
        if s.parameters.len() > SpecBounds::MAX_SCHEMA_BYTES {
            return over(
                "parameters schema",
                s.parameters.len(),
                SpecBounds::MAX_SCHEMA_BYTES,
            );
        }
    }
    Ok(())
}

/// Refuses a parsed schema nested deeper than [`SpecBounds::MAX_SCHEMA_DEPTH`].
pub fn check_schema(tool: &str, schema: &Value) -> Result<(), String> {
    fn depth(v: &Value) -> usize {
        match v {
            Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
            Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    let d = depth(schema);
    if d > SpecBounds::MAX_SCHEMA_DEPTH {
        return Err(format!(
            "tool {tool:?}: its parameters schema nests {d} deep, over the limit of {}",
            SpecBounds::MAX_SCHEMA_DEPTH
        ));
    }
    Ok(())
}

/// Checks that `schema` is a JSON Schema as far as its keywords go: each
/// keyword Keel validates, and each one that holds schemas, has the shape
/// the specification gives it. A schema from outside (an MCP server's) is
/// refused at start rather than misread at every call.
pub fn well_formed(schema: &Value) -> Result<(), String> {
    shape(schema, "schema", 0)
}

const TYPE_NAMES: [&str; 7] = [
    "object", "array", "string", "boolean", "null", "number", "integer",
];

fn shape(schema: &Value, path: &str, depth: usize) -> Result<(), String> {
    if depth > SpecBounds::MAX_SCHEMA_DEPTH {
        return Err(format!("{path}: nested too deep"));
    }
    let s = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(s) => s,
        other => {
            return Err(format!(
                "{path}: a schema is an object or a boolean, not {}",
                kind(other)
            ))
        }
    };
    let sub = |key: &str, v: &Value| shape(v, &format!("{path}.{key}"), depth + 1);
    for (key, v) in s {
        let bad = |want: &str| Err(format!("{path}.{key}: must be {want}, not {}", kind(v)));
        match key.as_str() {
            "type" => {
                let names: Vec<&Value> = match v {
                    Value::String(_) => vec![v],
                    Value::Array(a) if !a.is_empty() => a.iter().collect(),
                    _ => return bad("a type name or a non-empty list of them"),
                };
                for n in names {
                    if !n.as_str().is_some_and(|n| TYPE_NAMES.contains(&n)) {
                        return Err(format!("{path}.type: {n} is not a JSON Schema type"));
                    }
                }
            }
            "properties" | "patternProperties" | "$defs" | "definitions" => {
                let Value::Object(m) = v else {
                    return bad("an object of schemas");
                };
                for (name, p) in m {
                    shape(p, &format!("{path}.{key}.{name}"), depth + 1)?;
                }
            }
            "required" => {
                if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                    return bad("a list of property names");
                }
            }
            "enum" => {
                if !v.is_array() {
                    return bad("a list");
                }
            }
            "items" => match v {
                Value::Array(a) => {
                    for (i, p) in a.iter().enumerate() {
                        shape(p, &format!("{path}.items[{i}]"), depth + 1)?;
                    }
                }
                _ => sub(key, v)?,
            },
            "additionalProperties"
            | "not"
            | "contains"
            | "propertyNames"
            | "if"
            | "then"
            | "else"
            | "additionalItems"
            | "unevaluatedProperties"
            | "unevaluatedItems" => sub(key, v)?,
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                let Value::Array(a) = v else {
                    return bad("a list of schemas");
                };
                if a.is_empty() && key != "prefixItems" {
                    return bad("a non-empty list of schemas");
                }
                for (i, p) in a.iter().enumerate() {
                    shape(p, &format!("{path}.{key}[{i}]"), depth + 1)?;
                }
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
                if !v.is_number() {
                    return bad("a number");
                }
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" => {
                if v.as_u64().is_none() {
                    return bad("a non-negative integer");
                }
            }
            "pattern" | "format" | "$ref" | "$schema" | "$id" | "title" | "description" => {
                if !v.is_string() {
                    return bad("a string");
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `Ok` or the first violation, with the JSON path of the offending value.
/// Validation makes at most [`SpecBounds::VALIDATION_BUDGET`] checks; past
/// that the arguments are refused as too costly to validate.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let mut budget = SpecBounds::VALIDATION_BUDGET;
    match check(schema, value, "arguments", &mut budget) {
        Err(e) if budget == 0 => Err(format!(
            "validating them took more than the budget of {} schema checks ({e})",
            SpecBounds::VALIDATION_BUDGET
        )),
        other => other,
    }
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

fn check(schema: &Value, v: &Value, path: &str, budget: &mut u64) -> Result<(), String> {
    if *budget == 0 {
        return Err(format!("{path}: out of budget"));
    }
    *budget -= 1;
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
                check(item_schema, item, &format!("{path}[{i}]"), budget)?;
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
                Some(prop) => check(prop, value, &sub, budget)?,
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => return Err(format!("{sub}: unknown property")),
                    Some(extra @ Value::Object(_)) => check(extra, value, &sub, budget)?,
                    _ => {}
                },
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for sub in all {
            check(sub, v, path, budget)?;
        }
    }
    if let Some(Value::Array(any)) = s.get("anyOf") {
        let mut matched = false;
        for sub in any {
            if check(sub, v, path, budget).is_ok() {
                matched = true;
                break;
            }
            if *budget == 0 {
                return Err(format!("{path}: out of budget"));
            }
        }
        if !matched {
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

    #[test]
    fn well_formed_takes_real_schemas_and_names_what_is_wrong() {
        use serde_json::json;
        for ok in [
            json!({"type": "object", "properties": {"path": {"type": "string", "description": "x"}}, "required": ["path"]}),
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": false, "properties": {"n": {"type": ["number", "null"], "minimum": 0}, "e": {"anyOf": [{"type": "string"}, {"const": 1}]}}, "$defs": {"d": true}}),
            json!(true),
        ] {
            assert_eq!(well_formed(&ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (json!({"type": "objekt"}), "schema.type"),
            (
                json!({"type": "object", "properties": {"p": {"type": "strng"}}}),
                "schema.properties.p.type",
            ),
            (
                json!({"type": "object", "properties": []}),
                "schema.properties: must be an object",
            ),
            (
                json!({"type": "object", "required": "p"}),
                "schema.required",
            ),
            (json!({"anyOf": []}), "non-empty list"),
            (json!({"type": "string", "minLength": -1}), "minLength"),
            (
                json!({"type": "object", "properties": {"p": 3}}),
                "schema.properties.p: a schema is an object or a boolean",
            ),
            (json!([1]), "a schema is an object"),
        ] {
            let e = well_formed(&bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e} should say {says:?}");
        }
    }

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
    fn nested_any_of_over_a_large_array_is_refused_within_its_budget() {
        // 12 levels of two-branch anyOf, each branch failing only at the
        // array's last item: without a budget, 4,096 passes over 100,000
        // items (minutes of CPU).
        let mut schema = json!({"type": "array", "items": {"type": "integer"}});
        for _ in 0..12 {
            schema = json!({"anyOf": [schema.clone(), schema]});
        }
        let mut items: Vec<Value> = (0..100_000).map(|i| json!(i)).collect();
        items.push(json!("not an integer"));
        let started = std::time::Instant::now();
        let err = validate(&schema, &Value::Array(items)).unwrap_err();
        assert!(err.contains("budget"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // A large but simple argument is still validated whole.
        let simple = json!({"type": "array", "items": {"type": "integer"}});
        let ok: Vec<Value> = (0..100_000).map(|i| json!(i)).collect();
        assert!(validate(&simple, &Value::Array(ok)).is_ok());
    }

    #[test]
    fn specs_over_their_bounds_are_refused_naming_the_tool() {
        let spec = |name: &str, description: String, parameters: String| ToolSpec {
            name: name.into(),
            description,
            parameters,
            effect: crate::types::Effect::ReadOnly,
        };
        let huge = spec("big", "x".repeat(64 << 20), "{}".into());
        let err = check_specs(&[huge]).unwrap_err();
        assert!(
            err.contains("\"big\"") && err.contains("description"),
            "{err}"
        );
        let wide = spec(
            "wide",
            String::new(),
            format!("{{\"enum\":[{}0]}}", "0,".repeat(40_000)),
        );
        assert!(check_specs(&[wide])
            .unwrap_err()
            .contains("parameters schema"));
        let mut deep = json!({});
        for _ in 0..40 {
            deep = json!({ "anyOf": [deep] });
        }
        assert!(check_schema("deep", &deep).unwrap_err().contains("nests"));
        let many: Vec<ToolSpec> = (0..200)
            .map(|i| spec(&format!("t{i}"), String::new(), "{}".into()))
            .collect();
        assert!(check_specs(&many).unwrap_err().contains("200 tools"));
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
