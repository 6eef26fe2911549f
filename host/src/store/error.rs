//! Errors callers of the store match on.

use crate::types::RunStatus;

/// Why a store operation failed; callers match on the variant to decide
/// whether to retry, refuse or report.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file at the path is not a SQLite database or is damaged, so
    /// nothing can be read from it.
    #[error("{path}: not a SQLite database, or the file is corrupt ({detail})")]
    Corrupt {
        /// The store's path as given.
        path: String,
        /// SQLite's message about the file.
        detail: String,
    },
    /// Another application's database: Keel adds nothing to it.
    #[error("{path}: {what} that is not a Keel store ({detail}); name an empty or Keel database")]
    Foreign {
        /// The store's location as given (a path or a URL).
        path: String,
        /// "a SQLite database", "a PostgreSQL database".
        what: &'static str,
        /// What shows it is not Keel's, such as its SQLite application id.
        detail: String,
    },
    #[error("{path}: schema version {found} is newer than this keel understands ({supported}); upgrade keel")]
    /// The schema was written by a newer Keel; this binary must not read or
    /// change it, so upgrade Keel.
    TooNew {
        /// The store's location as given.
        path: String,
        /// The schema version the store holds.
        found: i64,
        /// The newest schema version this binary understands.
        supported: i64,
    },
    /// The path cannot hold a store: a directory, a read-only file system,
    /// no permission, a missing folder.
    #[error("{path}: cannot open the store: {why}")]
    Unusable {
        /// The store's location as given.
        path: String,
        /// Why it cannot be used, in words for the operator.
        why: String,
    },
    /// No file at the path: nothing was ever stored there.
    #[error("no Keel store at {path}: name one with --store PATH or KEEL_STORE")]
    Missing {
        /// The path that was looked at.
        path: String,
    },
    /// The database exists but holds no Keel schema yet, and a read-only
    /// open does not create one; run a command that writes first.
    #[error("{path}: the store was never initialised; run a command that writes (such as `keel run`) first")]
    Uninitialised {
        /// The store's location as given.
        path: String,
    },
    /// Another writer held the SQLite database for longer than the busy
    /// timeout; nothing was written, and the operation may be tried again.
    #[error("the database is locked by another writer (waited {waited_ms} ms)")]
    Locked {
        /// How long the store waited for the lock, in milliseconds.
        waited_ms: u64,
    },
    /// The disk (or the database's space) ran out; the transaction was
    /// rolled back and nothing was written.
    #[error("the disk is full: the transition was rolled back and nothing was written")]
    DiskFull,
    /// A write was asked of a store opened for reading only, or of a
    /// database that refuses writes; nothing was written.
    #[error("the store was opened read-only")]
    ReadOnly,
    /// The database refused a write to this login (a read-only role).
    #[error("{0}")]
    NotPermitted(String),
    /// The database cannot be reached, or the connection was lost (mid-
    /// transaction: the transaction is rolled back by the server, unless
    /// the loss came with its commit, which is then unknown until read).
    #[error("the database is unavailable: {detail}; the run stops here and can be resumed once the database is back")]
    Unavailable {
        /// What the driver or server said about the failure.
        detail: String,
    },
    /// No run has the given id (the payload).
    #[error("run {0} not found")]
    RunNotFound(String),
    /// No approval has the given id (the payload).
    #[error("approval {0} not found")]
    ApprovalNotFound(String),
    /// A compare-and-set failed: the run is no longer in the state the writer
    /// expected (cancelled by an operator, or its lease taken over).
    #[error("run {run_id} changed under this writer: it is {status} (lease owner {owner:?})")]
    Conflict {
        /// The run whose row changed.
        run_id: String,
        /// The status the run row holds now.
        status: RunStatus,
        /// The lease owner the run row holds now, if any.
        owner: Option<String>,
    },
    /// Another process holds a live lease on the run, so this one may not
    /// drive it; wait for the lease to expire or take it over explicitly.
    #[error("run {run_id} is leased by {owner} until {expires} (ms since epoch)")]
    Leased {
        /// The leased run.
        run_id: String,
        /// The lease's current holder.
        owner: String,
        /// When the lease runs out (ms since the epoch).
        expires: i64,
    },
    /// The run has ended; its state is final and nobody may drive it.
    #[error("run {run_id} is {status}: its state is final")]
    Terminal {
        /// The run that has ended.
        run_id: String,
        /// Its final status (completed, failed or cancelled).
        status: RunStatus,
    },
    /// The request was turned down by a rule of the store or of an
    /// operator action (such as pruning a run that has not finished); the
    /// payload says why.
    #[error("{0}")]
    Refused(String),
    /// A stored row (or one about to be written) does not decode into its
    /// type; the payload names the row and the column.
    #[error("stored row is not valid: {0}")]
    BadRow(String),
    /// Any other error of the engine underneath, with its source.
    #[error("{engine}: {source}")]
    Backend {
        /// The engine that failed: `sqlite` or `postgres`.
        engine: &'static str,
        /// The engine's own error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
