//! SQLite's errors as the store's: busy and locked, a full disk, a
//! read-only file; anything else is a `Backend` error with its source.

use crate::store::StoreError;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode;
        if let rusqlite::Error::SqliteFailure(f, _) = &e {
            match f.code {
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                    return StoreError::Locked {
                        waited_ms: super::BUSY_TIMEOUT_MS,
                    }
                }
                ErrorCode::DiskFull => return StoreError::DiskFull,
                ErrorCode::ReadOnly => return StoreError::ReadOnly,
                _ => {}
            }
        }
        StoreError::Backend {
            engine: "sqlite",
            source: Box::new(e),
        }
    }
}
