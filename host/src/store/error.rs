//! Errors callers of the store match on.

use crate::types::RunStatus;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: not a SQLite database, or the file is corrupt ({detail})")]
    Corrupt { path: String, detail: String },
    /// Another application's database: Keel adds nothing to it.
    #[error("{path}: {what} that is not a Keel store ({detail}); name an empty or Keel database")]
    Foreign {
        path: String,
        /// "a SQLite database", "a PostgreSQL database".
        what: &'static str,
        detail: String,
    },
    #[error("{path}: schema version {found} is newer than this keel understands ({supported}); upgrade keel")]
    TooNew {
        path: String,
        found: i64,
        supported: i64,
    },
    /// The path cannot hold a store: a directory, a read-only file system,
    /// no permission, a missing folder.
    #[error("{path}: cannot open the store: {why}")]
    Unusable { path: String, why: String },
    /// No file at the path: nothing was ever stored there.
    #[error("no Keel store at {path}: name one with --store PATH or KEEL_STORE")]
    Missing { path: String },
    #[error("{path}: the store was never initialised; run a command that writes (such as `keel run`) first")]
    Uninitialised { path: String },
    #[error("the database is locked by another writer (waited {waited_ms} ms)")]
    Locked { waited_ms: u64 },
    #[error("the disk is full: the transition was rolled back and nothing was written")]
    DiskFull,
    #[error("the store was opened read-only")]
    ReadOnly,
    /// The database refused a write to this login (a read-only role).
    #[error("{0}")]
    NotPermitted(String),
    /// The database cannot be reached, or the connection was lost (mid-
    /// transaction: the transaction is rolled back by the server, unless
    /// the loss came with its commit, which is then unknown until read).
    #[error("the database is unavailable: {detail}; the run stops here and can be resumed once the database is back")]
    Unavailable { detail: String },
    #[error("run {0} not found")]
    RunNotFound(String),
    #[error("approval {0} not found")]
    ApprovalNotFound(String),
    /// A compare-and-set failed: the run is no longer in the state the writer
    /// expected (cancelled by an operator, or its lease taken over).
    #[error("run {run_id} changed under this writer: it is {status} (lease owner {owner:?})")]
    Conflict {
        run_id: String,
        status: RunStatus,
        owner: Option<String>,
    },
    #[error("run {run_id} is leased by {owner} until {expires} (ms since epoch)")]
    Leased {
        run_id: String,
        owner: String,
        expires: i64,
    },
    /// The run has ended; its state is final and nobody may drive it.
    #[error("run {run_id} is {status}: its state is final")]
    Terminal { run_id: String, status: RunStatus },
    #[error("{0}")]
    Refused(String),
    #[error("stored row is not valid: {0}")]
    BadRow(String),
    /// Any other error of the engine underneath, with its source.
    #[error("{engine}: {source}")]
    Backend {
        engine: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
