//! The HTTP listener: accepts connections up to a cap, closes those that
//! send no request headers in time (idle or slow clients hold nothing for
//! long), and serves each with the API's router.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How the listener treats connections.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Connections open at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, also
    /// between the requests of a kept-alive connection.
    pub header_timeout: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_connections: 16_384,
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves `app` on `listener` until `stop` resolves; then closes every
/// connection (event streams included: their clients reconnect with
/// `Last-Event-ID`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: HttpOptions,
    stop: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let mut conns = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            () = &mut stop => break,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (tcp, _) = tokio::select! {
            () = &mut stop => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let svc = TowerToHyperService::new(app.clone());
        let timeout = opts.header_timeout;
        while conns.try_join_next().is_some() {}
        conns.spawn(async move {
            let _permit = permit;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .serve_connection(TokioIo::new(tcp), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "a connection ended with an error");
            }
        });
    }
    conns.abort_all();
}

/// Raises this process's open-file limit to its hard limit, so that the
/// connection cap, not the descriptor limit, bounds clients.
pub fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}
