//! Schema and migrations, versioned with `PRAGMA user_version`.

/// `PRAGMA application_id` of a Keel store ("KEEL"), to tell a Keel database
/// from someone else's SQLite file.
pub const APPLICATION_ID: i64 = 0x4B45_454C;

/// Migrations in order; migration `i` moves `user_version` from `i` to `i+1`.
pub const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE runs (
    id                   TEXT PRIMARY KEY,
    goal                 TEXT NOT NULL,
    status               TEXT NOT NULL,
    reason               TEXT,
    result               TEXT,
    limits               TEXT NOT NULL,
    meta                 TEXT NOT NULL,
    step_count           INTEGER NOT NULL,
    model_calls          INTEGER NOT NULL,
    tokens               INTEGER NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    lease_owner          TEXT,
    lease_expires        INTEGER,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
);
CREATE INDEX runs_status ON runs(status);

CREATE TABLE steps (
    run_id      TEXT NOT NULL REFERENCES runs(id),
    idx         INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    state       TEXT NOT NULL,
    decision    TEXT,
    call_tool   TEXT,
    call_args   TEXT,
    effect      TEXT,
    verdict     TEXT,
    obs_kind    TEXT,
    obs_content TEXT,
    started_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;

CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES runs(id),
    step_idx     INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    tool         TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    reason       TEXT NOT NULL,
    presentation TEXT NOT NULL,
    hash         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    decided_by   TEXT,
    note         TEXT,
    decided_at   INTEGER
);
CREATE INDEX approvals_run ON approvals(run_id, created_at);

CREATE TABLE events (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id   TEXT NOT NULL,
    step_idx INTEGER,
    kind     TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       INTEGER NOT NULL
);
CREATE INDEX events_run ON events(run_id, seq);

CREATE TABLE model_calls (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id            TEXT NOT NULL,
    step_idx          INTEGER NOT NULL,
    provider          TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    outcome           TEXT NOT NULL,
    error             TEXT,
    latency_ms        INTEGER NOT NULL,
    at                INTEGER NOT NULL
);
CREATE INDEX model_calls_run ON model_calls(run_id, id);
"#,
    // 2: events and model calls are numbered by their rowid alone. Keel never
    // deletes either, so the largest number plus one is always new, as
    // AUTOINCREMENT made sure at the price of reading and rewriting its
    // counter row with every insert: about a fifth of an event's insert.
    r#"
CREATE TABLE events_v2 (
    seq      INTEGER PRIMARY KEY,
    run_id   TEXT NOT NULL,
    step_idx INTEGER,
    kind     TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       INTEGER NOT NULL
);
INSERT INTO events_v2 (seq, run_id, step_idx, kind, data, at)
    SELECT seq, run_id, step_idx, kind, data, at FROM events ORDER BY seq;
DROP TABLE events;
ALTER TABLE events_v2 RENAME TO events;
CREATE INDEX events_run ON events(run_id, seq);

CREATE TABLE model_calls_v2 (
    id                INTEGER PRIMARY KEY,
    run_id            TEXT NOT NULL,
    step_idx          INTEGER NOT NULL,
    provider          TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    outcome           TEXT NOT NULL,
    error             TEXT,
    latency_ms        INTEGER NOT NULL,
    at                INTEGER NOT NULL
);
INSERT INTO model_calls_v2 (id, run_id, step_idx, provider, prompt_tokens, completion_tokens, outcome, error, latency_ms, at)
    SELECT id, run_id, step_idx, provider, prompt_tokens, completion_tokens, outcome, error, latency_ms, at
    FROM model_calls ORDER BY id;
DROP TABLE model_calls;
ALTER TABLE model_calls_v2 RENAME TO model_calls;
CREATE INDEX model_calls_run ON model_calls(run_id, id);
"#,
    // 3: a parked run's time to try again.
    r#"
ALTER TABLE runs ADD COLUMN retry_at INTEGER;
"#,
    // 4: claims look up the runs whose lease is free by an index, instead
    // of reading every running run (a server claims many times a second).
    r#"
CREATE INDEX runs_claim ON runs(status, (CASE WHEN lease_owner IS NULL THEN 0 ELSE COALESCE(lease_expires, 0) END));
"#,
    // 5: the journal's hash chain (`store::chain`). Events written before
    // it are linked by `chain::backfill` in the same transaction.
    r#"
ALTER TABLE runs ADD COLUMN chain_len INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN chain_head TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN pos INTEGER;
ALTER TABLE events ADD COLUMN seals TEXT;
ALTER TABLE events ADD COLUMN hash TEXT;
ALTER TABLE approvals ADD COLUMN chain_head TEXT;
"#,
    // 6: the pin of an MCP tool's schemas an approval was given for.
    r#"
ALTER TABLE approvals ADD COLUMN tool_pin TEXT;
"#,
];

/// The migration that adds the chain: events before it are linked then.
pub const CHAIN_MIGRATION: usize = 4;

/// The schema version this binary writes.
pub const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;
