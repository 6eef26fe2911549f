//! The OTLP exporter's HTTP client: a blocking `ureq` agent, called on the
//! exporter's own thread (no async reactor is needed there), with
//! a timeout on every export. A collector that refuses, hangs or answers
//! an error is logged at most once per interval, with how many exports
//! failed since, never once per span.

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a failing collector is logged at most.
pub const LOG_INTERVAL: Duration = Duration::from_secs(30);

/// The largest collector answer read.
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

#[derive(Debug)]
pub struct BlockingClient {
    agent: ureq::Agent,
    failures: Mutex<Throttled>,
}

/// Counts something worth a warning and says when to log it: at most once
/// per [`LOG_INTERVAL`], with how many happened since the last line.
#[derive(Debug, Default)]
pub(super) struct Throttled {
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl Throttled {
    /// Counts one; `Some(count since the last line)` when a line is due.
    pub fn note(&mut self) -> Option<u64> {
        self.unlogged += 1;
        if self.last_logged.is_some_and(|t| t.elapsed() < LOG_INTERVAL) {
            return None;
        }
        self.last_logged = Some(Instant::now());
        Some(std::mem::take(&mut self.unlogged))
    }
}

impl BlockingClient {
    pub fn new(timeout: Duration) -> BlockingClient {
        BlockingClient {
            agent: ureq::Agent::config_builder()
                .timeout_global(Some(timeout))
                .http_status_as_error(false)
                .build()
                .into(),
            failures: Mutex::new(Throttled::default()),
        }
    }

    /// Logs `what` unless a failure was logged within [`LOG_INTERVAL`].
    fn failed(&self, what: &str) {
        let due = self
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note();
        if let Some(n) = due {
            tracing::warn!(
                failed_exports = n,
                "telemetry: {what}; spans are dropped until the collector answers (logged at most every {} s)",
                LOG_INTERVAL.as_secs()
            );
        }
    }

    fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, String> {
        let (parts, body) = request.into_parts();
        let url = parts.uri.to_string();
        let mut req = self.agent.post(&url);
        for (k, v) in &parts.headers {
            req = req.header(k.as_str(), v.as_bytes());
        }
        let mut resp = req
            .send(body.as_ref())
            .map_err(|e| format!("cannot send spans to {url}: {e}"))?;
        let status = resp.status();
        let answer = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
            .map_err(|e| format!("reading the collector's answer from {url}: {e}"))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&answer);
            let text: String = text.chars().take(200).collect();
            return Err(format!("the collector at {url} answered {status}: {text}"));
        }
        let mut out = Response::new(Bytes::from(answer));
        *out.status_mut() = status;
        Ok(out)
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        self.send(request).map_err(|e| {
            self.failed(&e);
            HttpError::from(e)
        })
    }
}
