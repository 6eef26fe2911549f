//! Typed tool arguments.

use serde::de::DeserializeOwned;

/// Decodes a tool's JSON arguments into `T`, with an error that says what is
/// wrong (for example `arguments: missing field `path` at line 1 column 2`).
pub fn decode<T: DeserializeOwned>(arguments: &str) -> Result<T, String> {
    serde_json::from_str(arguments).map_err(|e| format!("arguments: {e}"))
}

/// Encodes a value as compact JSON text for a result or a decision.
pub fn encode<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string(value).map_err(|e| format!("cannot encode JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Write {
        path: String,
        #[serde(default)]
        append: bool,
    }

    #[test]
    fn decodes_typed_arguments() {
        let w: Write = decode(r#"{"path":"a.txt"}"#).unwrap();
        assert_eq!(
            w,
            Write {
                path: "a.txt".into(),
                append: false
            }
        );
    }

    #[test]
    fn reports_missing_and_unknown_fields() {
        let e = decode::<Write>(r#"{}"#).unwrap_err();
        assert!(e.contains("missing field `path`"), "{e}");
        let e = decode::<Write>(r#"{"path":"a","mode":1}"#).unwrap_err();
        assert!(e.contains("unknown field `mode`"), "{e}");
        let e = decode::<Write>("not json").unwrap_err();
        assert!(e.starts_with("arguments:"), "{e}");
    }
}
