//! The PostgreSQL schema, its migrations keyed on a version kept in
//! `keel_meta`, and the checks that tell a Keel database from another's.

use super::conn::Conn;
use crate::store::StoreError;

/// What `keel_meta.application` says in a Keel database.
const APPLICATION: &str = "keel";

/// Taken (for its transaction) by whoever migrates, so that processes
/// opening a new database at once serialise: the first migrates, the
/// others find nothing to do.
const MIGRATION_LOCK: i64 = 0x4B45_454C_0001;

/// Migrations in order; migration `i` moves the version from `i` to `i+1`.
pub const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE keel_meta (
    application TEXT NOT NULL,
    version     BIGINT NOT NULL
);
INSERT INTO keel_meta (application, version) VALUES ('keel', 0);

CREATE TABLE runs (
    id                   TEXT PRIMARY KEY,
    goal                 TEXT NOT NULL,
    status               TEXT NOT NULL,
    reason               TEXT,
    result               TEXT,
    limits               TEXT NOT NULL,
    meta                 TEXT NOT NULL,
    step_count           BIGINT NOT NULL,
    model_calls          BIGINT NOT NULL,
    tokens               BIGINT NOT NULL,
    consecutive_failures BIGINT NOT NULL,
    lease_owner          TEXT,
    lease_expires        BIGINT,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL,
    retry_at             BIGINT
);
CREATE INDEX runs_status ON runs (status);
CREATE INDEX runs_created ON runs (created_at DESC, id DESC);

CREATE TABLE steps (
    run_id      TEXT NOT NULL REFERENCES runs (id),
    idx         BIGINT NOT NULL,
    version     BIGINT NOT NULL,
    state       TEXT NOT NULL,
    decision    TEXT,
    call_tool   TEXT,
    call_args   TEXT,
    effect      TEXT,
    verdict     TEXT,
    obs_kind    TEXT,
    obs_content TEXT,
    started_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES runs (id),
    step_idx     BIGINT NOT NULL,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    tool         TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    reason       TEXT NOT NULL,
    presentation TEXT NOT NULL,
    hash         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    decided_by   TEXT,
    note         TEXT,
    decided_at   BIGINT
);
CREATE INDEX approvals_run ON approvals (run_id, created_at);

-- Events are numbered from this sequence under a lock held until commit,
-- so that numbers follow commit order (followers read by number).
CREATE SEQUENCE events_seq;
CREATE TABLE events (
    seq      BIGINT PRIMARY KEY,
    run_id   TEXT NOT NULL,
    step_idx BIGINT,
    kind     TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       BIGINT NOT NULL
);
CREATE INDEX events_run ON events (run_id, seq);

CREATE TABLE model_calls (
    id                BIGSERIAL PRIMARY KEY,
    run_id            TEXT NOT NULL,
    step_idx          BIGINT NOT NULL,
    provider          TEXT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    outcome           TEXT NOT NULL,
    error             TEXT,
    latency_ms        BIGINT NOT NULL,
    at                BIGINT NOT NULL
);
CREATE INDEX model_calls_run ON model_calls (run_id, id);
"#,
    // 2: the journal's hash chain (`store::chain`). Events written before
    // it are linked by the backfill in the same transaction.
    r#"
ALTER TABLE runs ADD COLUMN chain_len BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN chain_head TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN pos BIGINT;
ALTER TABLE events ADD COLUMN seals TEXT;
ALTER TABLE events ADD COLUMN hash TEXT;
ALTER TABLE approvals ADD COLUMN chain_head TEXT;
"#,
    // 3: the pin of an MCP tool's schemas an approval was given for.
    r#"
ALTER TABLE approvals ADD COLUMN tool_pin TEXT;
"#,
];

/// The migration that adds the chain: events before it are linked then.
pub const CHAIN_MIGRATION: usize = 1;

/// The schema version this binary writes.
pub const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;

/// What the database holds: Keel's tables at a version, nothing, or
/// another application's tables.
enum Found {
    Keel { version: i64 },
    Empty,
    Foreign(String),
}

async fn found(c: &Conn) -> Result<Found, StoreError> {
    // Read from the catalog itself: `to_regclass` may answer from this
    // session's cache, which still says "no such table" after waiting on
    // the migration lock for another process that has just created it.
    let meta = c
        .query(
            "SELECT EXISTS (SELECT 1 FROM pg_tables
                WHERE schemaname = current_schema() AND tablename = 'keel_meta')",
            &[],
        )
        .await?;
    let has_meta: bool = meta.first().map(|r| r.get(0)).unwrap_or(false);
    if has_meta {
        let rows = c
            .query("SELECT application, version FROM keel_meta", &[])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Found::Foreign("its keel_meta table is empty".into()));
        };
        let app: String = row.try_get(0).map_err(bad)?;
        let version: i64 = row.try_get(1).map_err(bad)?;
        if app != APPLICATION {
            return Ok(Found::Foreign(format!("keel_meta names {app:?}")));
        }
        return Ok(Found::Keel { version });
    }
    let tables = c
        .query(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
            &[],
        )
        .await?;
    let n: i64 = tables.first().map(|r| r.get(0)).unwrap_or(0);
    Ok(if n == 0 {
        Found::Empty
    } else {
        Found::Foreign(format!("it has {n} tables and no keel_meta"))
    })
}

fn bad(e: tokio_postgres::Error) -> StoreError {
    StoreError::BadRow(format!("keel_meta: {e}"))
}

fn foreign(shown: &str, detail: String) -> StoreError {
    StoreError::Foreign {
        path: shown.to_string(),
        what: "a PostgreSQL database",
        detail,
    }
}

fn too_new(shown: &str, found: i64) -> StoreError {
    StoreError::TooNew {
        path: shown.to_string(),
        found,
        supported: CURRENT_VERSION,
    }
}

/// Creates or migrates Keel's tables, under [`MIGRATION_LOCK`], and checks
/// that this login may write them. Refuses another application's
/// database and a newer schema, writing nothing.
pub(super) async fn migrate(c: &Conn, shown: &str) -> Result<(), StoreError> {
    if let Found::Keel { version } = found(c).await? {
        if version == CURRENT_VERSION {
            return check_writable(c).await;
        }
    }
    c.batch("BEGIN").await?;
    let done = migrate_locked(c, shown).await;
    match done {
        Ok(()) => c.batch("COMMIT").await?,
        Err(e) => {
            let _ = c.batch("ROLLBACK").await;
            return Err(e);
        }
    }
    check_writable(c).await
}

async fn migrate_locked(c: &Conn, shown: &str) -> Result<(), StoreError> {
    c.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let version = match found(c).await? {
        Found::Foreign(d) => return Err(foreign(shown, d)),
        Found::Keel { version } if version > CURRENT_VERSION => {
            return Err(too_new(shown, version))
        }
        Found::Keel { version } => version,
        Found::Empty => 0,
    };
    for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        c.batch(m).await?;
        c.execute("UPDATE keel_meta SET version = $1", &[&((i + 1) as i64)])
            .await?;
    }
    // Linked once every migration is in: the backfill reads the journal as
    // this version reads it.
    if version > 0 && (version as usize) <= CHAIN_MIGRATION {
        backfill_chain(c).await?;
    }
    Ok(())
}

/// Links the events of runs written before the chain existed
/// ([`crate::store::chain::backfill`]), inside the migration's transaction.
async fn backfill_chain(c: &Conn) -> Result<(), StoreError> {
    let rows = c.query("SELECT id FROM runs ORDER BY id", &[]).await?;
    let ids: Vec<String> = rows
        .iter()
        .map(|r| r.try_get(0).map_err(bad))
        .collect::<Result<_, _>>()?;
    for id in ids {
        let Some(b) = crate::store::chain::backfill(&super::journal_in(c, &id).await?) else {
            continue;
        };
        for (seq, pos, seals, hash) in &b.events {
            c.execute(
                "UPDATE events SET pos = $2, seals = $3, hash = $4 WHERE seq = $1",
                &[seq, pos, seals, hash],
            )
            .await?;
        }
        c.execute(
            "UPDATE runs SET chain_len = $2, chain_head = $3 WHERE id = $1",
            &[&id, &(b.len as i64), &b.head],
        )
        .await?;
    }
    Ok(())
}

/// A read-only role opened for writing is refused here, before anything.
async fn check_writable(c: &Conn) -> Result<(), StoreError> {
    let rows = c
        .query(
            "SELECT current_user::text, has_table_privilege('runs', 'UPDATE') AND has_table_privilege('events', 'INSERT')",
            &[],
        )
        .await?;
    let (user, may): (String, bool) = match rows.first() {
        Some(r) => (r.try_get(0).map_err(bad)?, r.try_get(1).map_err(bad)?),
        None => return Ok(()),
    };
    if !may {
        return Err(StoreError::NotPermitted(format!(
            "the role {user:?} may not write Keel's tables (a read-only role): \
             writes need the role that owns them"
        )));
    }
    Ok(())
}

/// For a reader: the database must hold Keel's tables at a version this
/// binary can read. Never creates, migrates or writes.
pub(super) async fn check_readable(c: &Conn, shown: &str) -> Result<(), StoreError> {
    match found(c).await? {
        Found::Keel { version } if version > CURRENT_VERSION => Err(too_new(shown, version)),
        Found::Keel { version: 0 } | Found::Empty => Err(StoreError::Uninitialised {
            path: shown.to_string(),
        }),
        Found::Keel { version } if version < CURRENT_VERSION => Err(StoreError::Unusable {
            path: shown.to_string(),
            why: format!(
                "its schema is version {version} and this keel reads version {CURRENT_VERSION}; \
                 a command that writes (such as `keel serve` or `keel resume`) migrates it"
            ),
        }),
        Found::Keel { .. } => Ok(()),
        Found::Foreign(d) => Err(foreign(shown, d)),
    }
}
