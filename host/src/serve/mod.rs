//! `keel serve`: Keel as a service. A [`Server`] claims and drives every
//! run that needs a driver; beside it, an HTTP API (`api`) starts runs,
//! answers approvals, cancels, streams events and serves the operators'
//! page, for the callers a tokens file names (`auth`).

mod api;
mod auth;
mod claimer;
mod error;
mod events;
mod http;
mod metrics;
mod page;
mod work;

pub use api::{RunConfig, DEFAULT_CONFIG, MAX_NOTE_BYTES, MAX_PAGE};
pub use auth::{Caller, Role, Tokens, TokensFileError, LOCAL_OPERATOR};
pub use claimer::{default_max_runs, ServeOptions, ServeReport, Server};
pub use error::ApiError;
pub use events::ends_run;
pub use http::{raise_fd_limit, HttpOptions};
pub use metrics::Metrics;
pub use work::Work;

use crate::driver::Runtime;
use crate::store::{RunReader, RunStore};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The largest request body by default: a goal at its limit and room for
/// the JSON around it.
pub const DEFAULT_MAX_BODY: usize = crate::types::MAX_GOAL_BYTES + 64 * 1024;

/// How often the event follower reads the journal for other processes'
/// events (this process's commits wake it at once).
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// The HTTP side of a service.
pub struct Web {
    /// The bound socket the API accepts connections on.
    pub listener: tokio::net::TcpListener,
    /// Connection limits and timeouts of the listener.
    pub http: HttpOptions,
    /// `None`: no tokens file (the listener must be on loopback).
    pub tokens: Option<Tokens>,
    /// Configs clients may start runs with, by name ([`DEFAULT_CONFIG`]
    /// is the server's own).
    pub configs: BTreeMap<String, RunConfig>,
    /// The largest request body accepted, in bytes ([`DEFAULT_MAX_BODY`] by default).
    pub max_body: usize,
}

/// Runs a service on `store` until `stop` resolves: the claimer, and with
/// `web` the API, which reads lists and events from `reader` (the same
/// store, on a connection of its own where the engine allows). Then the
/// API closes, and the claimer stops as [`Server::serve`] says (`now`
/// cuts its grace short).
pub async fn run(
    store: Arc<dyn RunStore>,
    reader: Arc<dyn RunReader>,
    opts: ServeOptions,
    web: Option<Web>,
    stop: impl Future<Output = ()>,
    now: impl Future<Output = ()>,
) -> ServeReport {
    let hub = events::Hub::new();
    let metrics = Arc::new(Metrics::default());
    let metered: Arc<dyn RunStore> = Arc::new(metrics::Metered::new(
        store.clone(),
        metrics::Meter {
            metrics: metrics.clone(),
            hub: hub.clone(),
        },
    ));
    let pruner = opts
        .retention
        .clone()
        .map(|r| tokio::spawn(crate::retention::on_schedule(store.clone(), r)));
    let lease_ms = i64::try_from(opts.lease.as_millis()).unwrap_or(i64::MAX);
    let telemetry = opts.telemetry.clone();
    let rt = Runtime::on(metered).with_lease_ttl_ms(lease_ms);
    let rt = match &telemetry {
        Some(t) => rt.with_telemetry(t.clone()),
        None => rt,
    };
    let follower = tokio::spawn(hub.clone().follow(reader.clone(), FOLLOW_POLL));
    let work = Work::new();
    let (closing, closed) = tokio::sync::watch::channel(false);
    let open_to_all = |w: &Web| {
        w.tokens.is_none() && !w.listener.local_addr().is_ok_and(|a| a.ip().is_loopback())
    };
    if web.as_ref().is_some_and(open_to_all) {
        tracing::error!(
            "refusing to serve the API on a non-loopback address without a tokens file"
        );
    }
    let http = web.filter(|w| !open_to_all(w)).map(|w| {
        let app = api::router(api::Api {
            rt: rt.clone(),
            reader,
            hub: hub.clone(),
            metrics,
            tokens: w.tokens,
            configs: w.configs,
            max_body: w.max_body,
            work: work.clone(),
        });
        let mut closed = closed.clone();
        tokio::spawn(http::serve(w.listener, app, w.http, async move {
            let _ = closed.wait_for(|c| *c).await;
        }))
    });
    let report = Server::new(rt, opts)
        .woken_by(work)
        .serve(
            async {
                stop.await;
                let _ = closing.send(true);
            },
            now,
        )
        .await;
    let _ = closing.send(true);
    if let Some(h) = http {
        let _ = h.await;
    }
    follower.abort();
    if let Some(p) = pruner {
        p.abort();
    }
    if let Some(t) = telemetry {
        t.finish().await;
    }
    report
}
