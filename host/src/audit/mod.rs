//! Audits of the journal: checking runs against their hash chains
//! (`keel verify`) and exporting a run so that it can be checked without
//! the store (`keel export`, `keel verify --file`).

pub mod export;
mod verify;

pub use verify::{verify, Break, Problem, Verified};

use crate::store::{RunQuery, RunReader, StoreError};

/// Every run's id in `reader`, newest first.
pub async fn all_run_ids(reader: &dyn RunReader) -> Result<Vec<String>, StoreError> {
    let mut ids = Vec::new();
    let mut before = None;
    loop {
        let page = reader
            .find_runs(&RunQuery {
                limit: 500,
                before: before.clone(),
                ..RunQuery::default()
            })
            .await?;
        let Some(last) = page.last() else {
            return Ok(ids);
        };
        before = Some(last.id.clone());
        ids.extend(page.into_iter().map(|r| r.id));
    }
}
