//! One connection to PostgreSQL with its prepared statements, a small pool
//! of them for reads, and the server's errors as the store's.

use crate::store::StoreError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Parameters as tokio-postgres takes them.
pub(super) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// The client configuration for `url`; `shown` is the URL without its
/// password, for errors.
pub(super) fn config(url: &str, shown: &str) -> Result<Config, StoreError> {
    let mut cfg: Config = url.parse().map_err(|e| StoreError::Unusable {
        path: shown.to_string(),
        why: format!("not a valid PostgreSQL URL: {e}"),
    })?;
    if cfg.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
        return Err(StoreError::Unusable {
            path: shown.to_string(),
            why: "sslmode=require: Keel connects without TLS (over loopback or a unix socket); \
                  drop sslmode or set sslmode=disable"
                .into(),
        });
    }
    if cfg.get_user().is_none() {
        return Err(StoreError::Unusable {
            path: shown.to_string(),
            why: "the URL names no user (postgres://USER:PASSWORD@HOST:PORT/DATABASE)".into(),
        });
    }
    cfg.application_name("keel")
        .connect_timeout(CONNECT_TIMEOUT);
    Ok(cfg)
}

/// A connection and the statements prepared on it.
pub(super) struct Conn {
    client: Client,
    stmts: Mutex<HashMap<&'static str, Statement>>,
}

/// Connects; a failure says what the server or the network said.
pub(super) async fn connect(cfg: &Config, shown: &str) -> Result<Conn, StoreError> {
    let (client, connection) = cfg.connect(NoTls).await.map_err(|e| open_error(shown, e))?;
    // The connection object does the socket's work; it ends when the
    // client is dropped or the server goes away.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(Conn {
        client,
        stmts: Mutex::new(HashMap::new()),
    })
}

impl Conn {
    /// `sql` prepared on this connection (once).
    pub(super) async fn stmt(&self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(s) = self.cached(sql) {
            return Ok(s);
        }
        let s = self.client.prepare(sql).await.map_err(classify)?;
        self.stmts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sql, s.clone());
        Ok(s)
    }

    fn cached(&self, sql: &'static str) -> Option<Statement> {
        self.stmts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sql)
            .cloned()
    }

    pub(super) async fn query(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        let s = self.stmt(sql).await?;
        self.client.query(&s, params).await.map_err(classify)
    }

    pub(super) async fn execute(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<u64, StoreError> {
        let s = self.stmt(sql).await?;
        self.client.execute(&s, params).await.map_err(classify)
    }

    /// Statements without parameters (`BEGIN`, `COMMIT`, migrations).
    pub(super) async fn batch(&self, sql: &str) -> Result<(), StoreError> {
        self.client.batch_execute(sql).await.map_err(classify)
    }

    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// The server's and the network's errors as the store's.
pub(super) fn classify(e: tokio_postgres::Error) -> StoreError {
    if e.is_closed() {
        return StoreError::Unavailable {
            detail: "the connection to PostgreSQL was closed".into(),
        };
    }
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let message = db.message().to_string();
        return match code {
            "42501" => StoreError::NotPermitted(format!(
                "PostgreSQL refused the write: {message} (a read-only role cannot write: \
                 use the role that owns Keel's tables)"
            )),
            "25006" => StoreError::ReadOnly,
            "53100" => StoreError::DiskFull,
            "53300" | "57P01" | "57P02" | "57P03" => StoreError::Unavailable {
                detail: format!("PostgreSQL: {message}"),
            },
            c if c.starts_with("08") => StoreError::Unavailable {
                detail: format!("PostgreSQL: {message}"),
            },
            _ => StoreError::Backend {
                engine: "postgres",
                source: Box::new(e),
            },
        };
    }
    if std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) {
        return StoreError::Unavailable {
            detail: format!("PostgreSQL: {e}"),
        };
    }
    StoreError::Backend {
        engine: "postgres",
        source: Box::new(e),
    }
}

/// A failure to connect, said for the operator who named the server.
fn open_error(shown: &str, e: tokio_postgres::Error) -> StoreError {
    let why = match e.as_db_error() {
        Some(db) => match db.code().code() {
            "28P01" | "28000" => format!("the server refused the login: {}", db.message()),
            "3D000" => db.message().to_string(),
            _ => format!("the server refused the connection: {}", db.message()),
        },
        None => {
            let mut why = format!("cannot connect: {e}");
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                why.push_str(&format!(": {c}"));
                cause = c.source();
            }
            why
        }
    };
    StoreError::Unusable {
        path: shown.to_string(),
        why,
    }
}

/// A few connections for reads and small writes (heartbeats, claims),
/// opened as needed and kept while they work.
pub(super) struct Pool {
    cfg: Config,
    shown: String,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
}

/// A connection taken from the [`Pool`]; it goes back when dropped, unless
/// it was closed.
pub(super) struct Pooled<'p> {
    pool: &'p Pool,
    conn: Option<Conn>,
    _permit: OwnedSemaphorePermit,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        // Set from creation until drop.
        self.conn
            .as_ref()
            .expect("a pooled connection is present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            if !c.is_closed() {
                self.pool
                    .idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(c);
            }
        }
    }
}

impl Pool {
    pub(super) fn new(cfg: Config, shown: String, size: usize, first: Conn) -> Pool {
        Pool {
            cfg,
            shown,
            idle: Mutex::new(vec![first]),
            permits: Arc::new(Semaphore::new(size.max(1))),
        }
    }

    pub(super) async fn get(&self) -> Result<Pooled<'_>, StoreError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Refused("the store was closed".into()))?;
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match idle {
            Some(c) if !c.is_closed() => c,
            _ => connect(&self.cfg, &self.shown)
                .await
                .map_err(|e| StoreError::Unavailable {
                    detail: e.to_string(),
                })?,
        };
        Ok(Pooled {
            pool: self,
            conn: Some(conn),
            _permit: permit,
        })
    }

    pub(super) fn shown(&self) -> &str {
        &self.shown
    }
}
