//! `tool-fs`: read, write and list files inside the one directory the host
//! grants it. See ../README.md.

use keel_guest::args;
use keel_guest::config;
use keel_guest::prelude::*;
use serde::Deserialize;
use std::path::{Component, Path, PathBuf};

pub struct Fs {
    root: PathBuf,
    max_read_bytes: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArg {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArg {
    path: String,
    content: String,
    #[serde(default)]
    append: bool,
}

const READ_SCHEMA: &str = r#"{"type":"object","properties":{"path":{"type":"string","description":"file path relative to the granted directory"}},"required":["path"],"additionalProperties":false}"#;
const LIST_SCHEMA: &str = r#"{"type":"object","properties":{"path":{"type":"string","description":"directory path relative to the granted directory; \".\" for the top"}},"required":["path"],"additionalProperties":false}"#;
const WRITE_SCHEMA: &str = r#"{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"},"append":{"type":"boolean"}},"required":["path","content"],"additionalProperties":false}"#;

impl Fs {
    /// Resolves a relative path inside the root; rejects absolute paths and
    /// `..`. (The WASI grant enforces the boundary anyway; this gives a clear
    /// error first.)
    fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let p = Path::new(path);
        let mut out = self.root.clone();
        for c in p.components() {
            match c {
                Component::Normal(s) => out.push(s),
                Component::CurDir => {}
                _ => {
                    return Err(format!(
                        "path {path:?}: only relative paths without \"..\" are allowed"
                    ))
                }
            }
        }
        Ok(out)
    }

    fn read(&self, a: PathArg) -> Result<String, String> {
        let p = self.resolve(&a.path)?;
        let meta = std::fs::metadata(&p).map_err(|e| format!("{}: {e}", a.path))?;
        if meta.len() > self.max_read_bytes {
            return Err(format!(
                "{}: {} bytes is more than max_read_bytes ({})",
                a.path,
                meta.len(),
                self.max_read_bytes
            ));
        }
        let content = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", a.path))?;
        Ok(serde_json::json!({ "path": a.path, "content": content }).to_string())
    }

    fn write(&self, a: WriteArg) -> Result<String, String> {
        use std::io::Write;
        let p = self.resolve(&a.path)?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(a.append)
            .truncate(!a.append)
            .open(&p)
            .map_err(|e| format!("{}: {e}", a.path))?;
        f.write_all(a.content.as_bytes())
            .map_err(|e| format!("{}: {e}", a.path))?;
        Ok(
            serde_json::json!({ "path": a.path, "bytes": a.content.len(), "appended": a.append })
                .to_string(),
        )
    }

    fn list(&self, a: PathArg) -> Result<String, String> {
        let p = self.resolve(&a.path)?;
        let mut entries = Vec::new();
        for e in std::fs::read_dir(&p).map_err(|e| format!("{}: {e}", a.path))? {
            let e = e.map_err(|e| format!("{}: {e}", a.path))?;
            let kind = match e.file_type() {
                Ok(t) if t.is_dir() => "dir",
                Ok(t) if t.is_file() => "file",
                _ => "other",
            };
            entries
                .push(serde_json::json!({ "name": e.file_name().to_string_lossy(), "kind": kind }));
        }
        entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok(serde_json::json!({ "path": a.path, "entries": entries }).to_string())
    }
}

impl Tool for Fs {
    fn init(text: &str) -> Result<Self, String> {
        let mut c = config::parse(text)?;
        let root = c.opt_str("root")?.unwrap_or_else(|| "/workspace".into());
        if !root.starts_with('/') {
            return Err(format!(
                "{}: must be the absolute guest path of a granted directory",
                c.key_path("root")
            ));
        }
        let max_read_bytes = c.opt_u64("max_read_bytes")?.unwrap_or(1 << 20);
        c.finish()?;
        Ok(Fs {
            root: PathBuf::from(root),
            max_read_bytes,
        })
    }

    fn specs(&self) -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "fs_read".into(),
                description: "Read a UTF-8 text file.".into(),
                parameters: READ_SCHEMA.into(),
                effect: Effect::ReadOnly,
            },
            ToolSpec {
                name: "fs_write".into(),
                description: "Write (or append to) a UTF-8 text file, creating it if needed."
                    .into(),
                parameters: WRITE_SCHEMA.into(),
                effect: Effect::LocalMutation,
            },
            ToolSpec {
                name: "fs_list".into(),
                description: "List a directory.".into(),
                parameters: LIST_SCHEMA.into(),
                effect: Effect::ReadOnly,
            },
        ]
    }

    fn call(&mut self, name: &str, arguments: &str) -> Result<String, String> {
        match name {
            "fs_read" => self.read(args::decode(arguments)?),
            "fs_write" => self.write(args::decode(arguments)?),
            "fs_list" => self.list(args::decode(arguments)?),
            _ => Err(format!("unknown tool {name:?}")),
        }
    }
}

keel_guest::export_tool!(Fs);
