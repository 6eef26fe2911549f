//! Where a store lives, and opening it: a file path is a SQLite store, a
//! `postgres://` (or `postgresql://`) URL a PostgreSQL one. A location is
//! shown with its password replaced by `***`, everywhere: in output, logs
//! and errors.

use super::postgres::PgStore;
use super::sqlite::{Durability, ReadOnlyStore, Store, StoreHandle};
use super::{RunReader, RunStore, StoreError};
use std::path::PathBuf;
use std::sync::Arc;

/// A store's location.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file.
    File(PathBuf),
    /// A PostgreSQL database, by its URL (password included: never shown).
    Postgres(String),
}

impl Location {
    /// A URL with a `postgres` scheme is a PostgreSQL database; anything
    /// else a file path.
    pub fn parse(s: &str) -> Location {
        let lower = s.trim_start().to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Location::Postgres(s.trim().to_string())
        } else {
            Location::File(PathBuf::from(s))
        }
    }

    /// The location as it may be shown: the password replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            Location::File(p) => p.display().to_string(),
            Location::Postgres(url) => redact_url(url),
        }
    }

    /// The engine's name, for reports.
    pub fn engine(&self) -> &'static str {
        match self {
            Location::File(_) => "sqlite",
            Location::Postgres(_) => "postgres",
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Location({})", self.redacted())
    }
}

/// `url` with the password of its user-info and of a `password=` query
/// parameter replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                let start = rest_start + colon + 1;
                out.replace_range(start..rest_start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// How a writer opens its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// How SQLite syncs commits (PostgreSQL follows its server's settings).
    pub sync: Durability,
    /// Create a SQLite file that does not exist yet (`keel run`); without
    /// it a missing file is [`StoreError::Missing`]. A PostgreSQL database
    /// must exist; its tables are created on first use either way.
    pub create: bool,
    /// Let a write commit on its caller's thread while the SQLite writer
    /// is idle (saves a thread hop for `keel run`); `keel serve` turns it
    /// off so that its async workers never wait on a sync.
    pub inline_commits: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            sync: Durability::Full,
            create: true,
            inline_commits: true,
        }
    }
}

/// Opens the store at `loc` for writing, creating and migrating its schema
/// as needed, behind the engine-neutral [`RunStore`].
pub async fn open(loc: &Location, opts: OpenOptions) -> Result<Arc<dyn RunStore>, StoreError> {
    match loc {
        Location::File(p) => {
            if !opts.create && !p.exists() {
                return Err(StoreError::Missing {
                    path: p.display().to_string(),
                });
            }
            let store = Store::open(p, opts.sync)?;
            Ok(Arc::new(StoreHandle::spawn_with(
                store,
                opts.inline_commits,
            )))
        }
        Location::Postgres(url) => Ok(Arc::new(PgStore::open(url, true).await?)),
    }
}

/// Opens the store at `loc` for reading only: never creates, migrates or
/// writes (a PostgreSQL login may then be a read-only role).
pub async fn open_reader(loc: &Location) -> Result<Arc<dyn RunReader>, StoreError> {
    match loc {
        Location::File(p) => Ok(Arc::new(ReadOnlyStore::open(p)?)),
        Location::Postgres(url) => Ok(Arc::new(PgStore::open(url, false).await?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_postgres_and_passwords_never_shown() {
        let l = Location::parse("postgres://keel:s3cret@127.0.0.1:5432/keel?sslmode=disable");
        assert_eq!(l.engine(), "postgres");
        assert_eq!(
            l.redacted(),
            "postgres://keel:***@127.0.0.1:5432/keel?sslmode=disable"
        );
        assert!(!format!("{l} {l:?}").contains("s3cret"));
        let q = Location::parse("postgresql://keel@h/db?password=s3cret&port=1");
        assert_eq!(q.redacted(), "postgresql://keel@h/db?password=***&port=1");
        // An @ in the password (as typed, unescaped) is hidden too.
        let at = Location::parse("postgres://u:p@ss@h/db");
        assert_eq!(at.redacted(), "postgres://u:***@h/db");
        assert_eq!(Location::parse("keel.db"), Location::File("keel.db".into()));
        assert_eq!(Location::parse("/tmp/x.db").engine(), "sqlite");
    }
}
