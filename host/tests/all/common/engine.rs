//! Stores of either engine for the conformance tests: a SQLite file in a
//! temporary folder, or a fresh database on the private PostgreSQL cluster
//! that `scripts/postgres.sh start` runs (started here if it is not; a
//! cluster that cannot start fails the test, it never skips).

use keel::store::{Location, OpenOptions, RunReader, RunStore};
use keel::*;
use std::sync::{Arc, OnceLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// A store made for one test.
pub struct TestStore {
    pub engine: Engine,
    /// A file path or a `postgres://` URL, as `--store` takes it.
    pub location: String,
    /// The PostgreSQL database's name.
    pub database: Option<String>,
    _dir: tempfile::TempDir,
}

/// The cluster's URL for the role `keel` (database `keel`), once per
/// test binary; leftover test databases of earlier runs are dropped then.
pub fn pg_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/postgres.sh");
        let out = std::process::Command::new(script)
            .arg("start")
            .output()
            .expect("running scripts/postgres.sh start");
        assert!(
            out.status.success(),
            "scripts/postgres.sh start failed (PostgreSQL is part of the test suite): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
        std::thread::spawn({
            let url = url.clone();
            move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let c = pg_client(&url).await;
                    let old = c
                        .query(
                            "SELECT datname FROM pg_database WHERE datname LIKE 'keel_t_%'",
                            &[],
                        )
                        .await
                        .unwrap();
                    for r in old {
                        let name: String = r.get(0);
                        // Named keel_t_PID_…: only a gone process's are dropped,
                        // so test binaries run at once leave each other alone.
                        let pid = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
                        if pid.is_some_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
                        {
                            continue;
                        }
                        let _ = c
                            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                            .await;
                    }
                })
            }
        })
        .join()
        .unwrap();
        url
    })
}

/// The URL of the cluster's read-only role.
pub fn pg_reader_url() -> String {
    pg_url();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/postgres.sh");
    let out = std::process::Command::new(script)
        .arg("reader")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `url` with its database replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let cut = base.rfind('/').unwrap();
    format!("{}/{db}{query}", &base[..cut])
}

/// A plain client on `url`, for tests that look at or tamper with rows.
pub async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

impl TestStore {
    pub async fn new(engine: Engine) -> TestStore {
        let dir = tempfile::tempdir().unwrap();
        match engine {
            Engine::Sqlite => TestStore {
                engine,
                location: dir.path().join("keel.db").display().to_string(),
                database: None,
                _dir: dir,
            },
            Engine::Postgres => {
                let base = pg_url();
                let mut bytes = [0u8; 8];
                getrandom::fill(&mut bytes).unwrap();
                let name = format!("keel_t_{}_{}", std::process::id(), hex::encode(bytes));
                let c = pg_client(base).await;
                c.batch_execute(&format!("CREATE DATABASE {name}"))
                    .await
                    .unwrap();
                let url = with_database(base, &name);
                // What scripts/postgres.sh grants in its own database: the
                // read-only role reads what `keel` creates.
                pg_client(&url)
                    .await
                    .batch_execute(
                        "ALTER DEFAULT PRIVILEGES FOR ROLE keel GRANT SELECT ON TABLES TO keel_reader",
                    )
                    .await
                    .unwrap();
                TestStore {
                    engine,
                    location: url,
                    database: Some(name),
                    _dir: dir,
                }
            }
        }
    }

    pub fn loc(&self) -> Location {
        Location::parse(&self.location)
    }

    /// A new handle on the store (its own writer and connections: as
    /// another process would have).
    pub async fn open(&self) -> Arc<dyn RunStore> {
        keel::store::open(&self.loc(), OpenOptions::default())
            .await
            .unwrap()
    }

    /// A new read-only handle on the store (never creates nor writes).
    pub async fn reader(&self) -> Arc<dyn RunReader> {
        keel::store::open_reader(&self.loc()).await.unwrap()
    }

    /// A runtime on a new handle.
    pub async fn runtime(&self) -> Runtime {
        Runtime::on(self.open().await)
    }

    /// Runs `sql` on the store directly, as someone tampering with it.
    pub async fn exec(&self, sql: &str) {
        match self.engine {
            Engine::Sqlite => {
                let c = rusqlite::Connection::open(&self.location).unwrap();
                c.execute_batch(sql).unwrap();
            }
            Engine::Postgres => pg_client(&self.location)
                .await
                .batch_execute(sql)
                .await
                .unwrap(),
        }
    }

    /// The first column of the first row of `sql`, as a number.
    pub async fn number(&self, sql: &str) -> i64 {
        match self.engine {
            Engine::Sqlite => {
                let c = rusqlite::Connection::open(&self.location).unwrap();
                c.query_row(sql, [], |r| r.get(0)).unwrap()
            }
            Engine::Postgres => pg_client(&self.location)
                .await
                .query_one(sql, &[])
                .await
                .unwrap()
                .get(0),
        }
    }
}

/// Every write to a store held back, as another writer holding its lock
/// would hold it, until [`WritesHeld::release`]. Reads go on meanwhile.
pub enum WritesHeld {
    /// A connection in a `BEGIN IMMEDIATE` transaction (the write lock).
    Sqlite(rusqlite::Connection),
    /// A transaction holding `runs` in `SHARE` mode (no row may change).
    Postgres(tokio_postgres::Client),
}

impl WritesHeld {
    /// Lets the held writes go (the holder rolls back).
    pub async fn release(self) {
        match self {
            WritesHeld::Sqlite(c) => c.execute_batch("ROLLBACK").unwrap(),
            WritesHeld::Postgres(c) => c.batch_execute("ROLLBACK").await.unwrap(),
        }
    }
}

impl TestStore {
    /// Holds every write to the store (which must exist) until released.
    pub async fn hold_writes(&self) -> WritesHeld {
        match self.engine {
            Engine::Sqlite => {
                let c = rusqlite::Connection::open(&self.location).unwrap();
                c.execute_batch("BEGIN IMMEDIATE").unwrap();
                WritesHeld::Sqlite(c)
            }
            Engine::Postgres => {
                let c = pg_client(&self.location).await;
                c.batch_execute("BEGIN; LOCK TABLE runs IN SHARE MODE")
                    .await
                    .unwrap();
                WritesHeld::Postgres(c)
            }
        }
    }

    /// Every row of `sql`, each column as its text (`None` for NULL), as
    /// the engine stores it.
    pub async fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        match self.engine {
            Engine::Sqlite => {
                use rusqlite::types::ValueRef;
                let c = rusqlite::Connection::open(&self.location).unwrap();
                let mut stmt = c.prepare(sql).unwrap();
                let n = stmt.column_count();
                stmt.query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            Ok(match r.get_ref(i)? {
                                ValueRef::Null => None,
                                ValueRef::Integer(v) => Some(v.to_string()),
                                ValueRef::Real(v) => Some(v.to_string()),
                                ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into()),
                                ValueRef::Blob(b) => Some(hex::encode(b)),
                            })
                        })
                        .collect()
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
            }
            Engine::Postgres => pg_client(&self.location)
                .await
                .simple_query(sql)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                    }
                    _ => None,
                })
                .collect(),
        }
    }
}

/// The kinds of a run's events, in journal order.
pub async fn event_kinds<R: RunReader + ?Sized>(store: &R, run_id: &str) -> Vec<String> {
    store
        .events_after(Some(run_id), 0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind.into_owned())
        .collect()
}

/// Instantiates each generic test `fn name(store: TestStore)` once per
/// engine: `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let s = $crate::common::engine::TestStore::new($crate::common::engine::Engine::Sqlite).await;
                    super::$name(s).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let s = $crate::common::engine::TestStore::new($crate::common::engine::Engine::Postgres).await;
                    super::$name(s).await
                }
            )*
        }
    };
}
