//! Who may call the API: tokens from the file `[serve] tokens_file` names,
//! one per line as `NAME ROLE SHA256` (the hex sha256 of the token, never
//! the token), `#` starting a comment. A request's bearer token is hashed
//! and compared with every line in constant time.

use sha2::{Digest, Sha256};
use std::path::Path;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads, starts runs, approves, denies and cancels.
    Operator,
    /// Reads only.
    Viewer,
}

/// The caller of a request, as recorded in `by`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Caller {
    /// The token's name from the tokens file, or [`LOCAL_OPERATOR`] without one.
    pub name: String,
    /// What the caller may do.
    pub role: Role,
}

/// The operators a server knows, or none (loopback only, no tokens).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<(String, Role, [u8; 32])>,
}

/// The name recorded for callers of a server without a tokens file.
pub const LOCAL_OPERATOR: &str = "local";

/// The longest token considered (longer ones are refused unhashed).
const MAX_TOKEN_BYTES: usize = 4096;

/// Why a tokens file could not be loaded: unreadable, malformed, or naming no token.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {why}")]
pub struct TokensFileError {
    /// The tokens file.
    pub path: String,
    /// The 1-based line at fault, or 0 when the file as a whole is.
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

impl Tokens {
    /// Reads a tokens file; every mistake names its line.
    pub fn load(path: &Path) -> Result<Tokens, TokensFileError> {
        let err = |line, why: String| TokensFileError {
            path: path.display().to_string(),
            line,
            why,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| err(0, format!("cannot read: {e}")))?;
        let tokens = Tokens::parse(&text).map_err(|(line, why)| err(line, why))?;
        if tokens.entries.is_empty() {
            return Err(err(
                0,
                "names no token; a server with a tokens file needs at least one".into(),
            ));
        }
        Ok(tokens)
    }

    /// Parses the text of a tokens file; errors carry their line number.
    pub fn parse(text: &str) -> Result<Tokens, (usize, String)> {
        let mut entries = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, role, hash] = fields.as_slice() else {
                return Err((n, "expected `NAME ROLE SHA256`".into()));
            };
            let role = match *role {
                "operator" => Role::Operator,
                "viewer" => Role::Viewer,
                other => {
                    return Err((
                        n,
                        format!("role {other:?} is neither `operator` nor `viewer`"),
                    ))
                }
            };
            let mut digest = [0u8; 32];
            hex::decode_to_slice(hash, &mut digest).map_err(|_| {
                (
                    n,
                    "the third field must be 64 hex digits: the token's sha256".to_string(),
                )
            })?;
            if entries.iter().any(|(e, _, _)| e == name) {
                return Err((n, format!("the name {name:?} appears twice")));
            }
            entries.push((name.to_string(), role, digest));
        }
        Ok(Tokens { entries })
    }

    /// Whether it holds no token, as a parsed file of comments only or [`Tokens::default`] does.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The caller a bearer token belongs to. Every line is compared, each
    /// in constant time, so that the time taken says nothing of the match.
    pub fn check(&self, token: &str) -> Option<Caller> {
        if token.len() > MAX_TOKEN_BYTES {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (name, role, want) in &self.entries {
            if same(&digest, want) {
                found = Some(Caller {
                    name: name.clone(),
                    role: *role,
                });
            }
        }
        found
    }
}

/// Compares two digests without stopping at the first difference.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str, role: &str, token: &str) -> String {
        format!(
            "{name} {role} {}\n",
            hex::encode(Sha256::digest(token.as_bytes()))
        )
    }

    #[test]
    fn tokens_are_matched_by_their_hash_and_carry_their_role() {
        let text = format!(
            "# operators\n{}{}  \n",
            line("alice", "operator", "s3cret"),
            line("bob", "viewer", "look")
        );
        let t = Tokens::parse(&text).unwrap();
        assert_eq!(
            t.check("s3cret").unwrap(),
            Caller {
                name: "alice".into(),
                role: Role::Operator
            }
        );
        assert_eq!(t.check("look").unwrap().role, Role::Viewer);
        assert!(t.check("s3cre").is_none());
        assert!(t.check("").is_none());
        let hash = hex::encode(Sha256::digest(b"s3cret"));
        assert!(t.check(&hash).is_none(), "the hash itself is not a token");
    }

    #[test]
    fn a_bad_line_is_named() {
        assert_eq!(Tokens::parse("a operator\n").unwrap_err().0, 1);
        assert_eq!(Tokens::parse("\n\na admin 00\n").unwrap_err().0, 3);
        assert!(Tokens::parse("a viewer xyz\n")
            .unwrap_err()
            .1
            .contains("64 hex"));
        let dup = format!("{}{}", line("a", "viewer", "x"), line("a", "operator", "y"));
        assert!(Tokens::parse(&dup).unwrap_err().1.contains("twice"));
    }
}
