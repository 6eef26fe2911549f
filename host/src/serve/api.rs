//! The HTTP API and the page: routes, who may call them, and what each
//! answers (documented with examples in `docs/api.md`).

use super::auth::{Caller, Role, Tokens, LOCAL_OPERATOR};
use super::error::ApiError;
use super::events::{to_json, Follow, Hub};
use super::metrics::Metrics;
use super::page;
use crate::driver::Runtime;
use crate::store::{RunQuery, RunReader, StoreError};
use crate::types::*;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// A config a client may start runs with, by name.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The config file, absolute: recorded with the run for its driver.
    pub path: PathBuf,
    /// The limits every run started with this config gets.
    pub limits: Limits,
}

/// What the API serves from.
pub struct Api {
    pub rt: Runtime,
    /// Where lists, event pages and streams read from: a connection of
    /// their own where the engine allows, so that reads do not queue with
    /// the runs' writes.
    pub reader: Arc<dyn RunReader>,
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    /// `None`: no tokens file; every caller is [`LOCAL_OPERATOR`].
    pub tokens: Option<Tokens>,
    /// Configs runs may be started with; `default` is the server's own.
    pub configs: BTreeMap<String, RunConfig>,
    /// The largest request body, in bytes.
    pub max_body: usize,
    /// Tells this process's claimer of each run a request made claimable.
    pub work: Arc<super::Work>,
}

/// The name of the server's own config among `Api::configs`.
pub const DEFAULT_CONFIG: &str = "default";
/// The longest note an operator may attach, in bytes.
pub const MAX_NOTE_BYTES: usize = 4096;
/// The most items one list answers.
pub const MAX_PAGE: u32 = 500;

type Shared = Arc<Api>;

/// The routes, with authentication and the body limit.
pub fn router(api: Api) -> Router {
    let max_body = api.max_body;
    let api = Arc::new(api);
    let protected = Router::new()
        .route("/api/runs", get(list_runs).post(create_run))
        .route("/api/runs/{id}", get(show_run))
        .route("/api/runs/{id}/events", get(run_events))
        .route("/api/runs/{id}/cancel", post(cancel_run))
        .route("/api/approvals", get(list_approvals))
        .route("/api/approvals/{id}/approve", post(approve))
        .route("/api/approvals/{id}/deny", post(deny))
        .route("/api/me", get(me))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(api.clone(), authenticate));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(page::routes())
        .merge(protected)
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(api)
}

/// Finds the caller from `Authorization: Bearer TOKEN`; a viewer may only read.
async fn authenticate(State(api): State<Shared>, mut req: Request, next: Next) -> Response {
    let caller = match &api.tokens {
        None => Caller {
            name: LOCAL_OPERATOR.into(),
            role: Role::Operator,
        },
        Some(tokens) => {
            let token = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            match token.and_then(|t| tokens.check(t.trim())) {
                Some(c) => c,
                None => {
                    let mut r = ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "send a valid token as `Authorization: Bearer TOKEN`",
                    )
                    .into_response();
                    r.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        header::HeaderValue::from_static("Bearer"),
                    );
                    return r;
                }
            }
        }
    };
    if caller.role == Role::Viewer && req.method() != Method::GET {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("{} is a viewer: it may read, not act", caller.name),
        )
        .into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Parses a JSON body (empty means `{}`), refusing unknown fields.
fn body<T: DeserializeOwned>(b: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let b = b.map_err(|r| {
        let status = r.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, "too_large", "the request body is over the limit")
        } else {
            ApiError::new(status, "bad_request", r.body_text())
        }
    })?;
    let text: &[u8] = if b.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &b
    };
    serde_json::from_slice(text)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid: {e}")))
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

fn json(status: StatusCode, v: impl serde::Serialize) -> Response {
    match serde_json::to_string(&v) {
        Ok(text) => (status, [(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            .into_response(),
    }
}

fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit.unwrap_or(50) {
        0 => Err(ApiError::bad_request("limit must be at least 1")),
        n if n > MAX_PAGE => Err(ApiError::bad_request(format!(
            "limit is at most {MAX_PAGE}"
        ))),
        n => Ok(n),
    }
}

fn parse<T: std::str::FromStr<Err = String>>(
    what: &str,
    v: Option<&str>,
) -> Result<Option<T>, ApiError> {
    v.filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|e| ApiError::bad_request(format!("{what}: {e}")))
        })
        .transpose()
}

async fn healthz(State(api): State<Shared>) -> Response {
    match api.rt.store().last_event_seq().await {
        Ok(_) => json(StatusCode::OK, serde_json::json!({ "ok": true })),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// Who the token belongs to, for the page to offer only what it may do.
async fn me(Extension(caller): Extension<Caller>) -> Response {
    json(StatusCode::OK, caller)
}

async fn metrics(State(api): State<Shared>) -> Result<Response, ApiError> {
    let runs = api.reader.count_runs().await?;
    let text = api.metrics.render(&runs, &api.hub);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    status: Option<String>,
    limit: Option<u32>,
    before: Option<String>,
    q: Option<String>,
}

async fn list_runs(
    State(api): State<Shared>,
    q: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let limit = page_limit(q.limit)?;
    let before = q.before.filter(|b| !b.is_empty());
    if let Some(b) = &before {
        if api.reader.get_run(b).await?.is_none() {
            return Err(ApiError::bad_request(format!("before: no run {b}")));
        }
    }
    let runs = api
        .reader
        .find_runs(&RunQuery {
            status: parse("status", q.status.as_deref())?,
            limit,
            before,
            goal_contains: q.q.filter(|s| !s.is_empty()),
        })
        .await?;
    let next = (runs.len() == limit as usize)
        .then(|| runs.last().map(|r| r.id.clone()))
        .flatten();
    Ok(json(
        StatusCode::OK,
        serde_json::json!({ "runs": runs, "next_before": next }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewRun {
    goal: String,
    config: Option<String>,
}

async fn create_run(
    State(api): State<Shared>,
    Extension(caller): Extension<Caller>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let new: NewRun = body(b)?;
    if new.goal.trim().is_empty() {
        return Err(ApiError::bad_request("goal is empty"));
    }
    if new.goal.len() > MAX_GOAL_BYTES {
        return Err(ApiError::bad_request(format!(
            "goal is {} bytes; the limit is {MAX_GOAL_BYTES}",
            new.goal.len()
        )));
    }
    let name = new.config.as_deref().unwrap_or(DEFAULT_CONFIG);
    let Some(cfg) = api.configs.get(name) else {
        let known: Vec<&str> = api.configs.keys().map(String::as_str).collect();
        return Err(ApiError::bad_request(if known.is_empty() {
            "this server has no config to start runs with (start it with --config)".to_string()
        } else {
            format!(
                "no config named {name:?}; this server knows {}",
                known.join(", ")
            )
        }));
    };
    let meta = serde_json::json!({
        "config": cfg.path.display().to_string(),
        "submitted_by": caller.name,
    })
    .to_string();
    let run = api.rt.submit(&new.goal, cfg.limits.clone(), &meta).await?;
    api.work.add(&run.id);
    Ok(json(StatusCode::CREATED, run))
}

async fn show_run(State(api): State<Shared>, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(json(StatusCode::OK, api.rt.operator().show(&id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<i64>,
    limit: Option<u32>,
}

async fn run_events(
    State(api): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let run = api.reader.run(&id).await?;
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().parse::<i64>())
        .transpose()
        .map_err(|_| ApiError::bad_request("Last-Event-ID must be an event's number"))?;
    let after = last_id.or(q.after).unwrap_or(0);
    if !wants_stream {
        let events = api
            .reader
            .events_after(Some(&id), after, page_limit(q.limit.or(Some(MAX_PAGE)))?)
            .await?;
        let events: Vec<_> = events.iter().map(to_json).collect();
        return Ok(json(
            StatusCode::OK,
            serde_json::json!({ "events": events }),
        ));
    }
    let follow = Follow::new(
        &api.hub,
        api.reader.clone(),
        &id,
        after,
        run.status.is_terminal(),
    );
    let stream = futures_util::stream::unfold(follow, |mut f| async move {
        let e = f.next().await?;
        let sse = axum::response::sse::Event::default()
            .id(e.seq.to_string())
            .event(e.kind.clone())
            .data(to_json(&e).to_string());
        Some((Ok::<_, std::convert::Infallible>(sse), f))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

async fn cancel_run(
    State(api): State<Shared>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Empty {} = body(b)?;
    let run = api.rt.operator().cancel(&id, &caller.name).await?;
    Ok(json(StatusCode::OK, run))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalsQuery {
    status: Option<String>,
    limit: Option<u32>,
}

async fn list_approvals(
    State(api): State<Shared>,
    q: Result<Query<ApprovalsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let status: Option<ApprovalStatus> = parse("status", q.status.as_deref())?;
    let approvals = api
        .reader
        .list_approvals(status, page_limit(q.limit)?)
        .await?;
    let now = crate::driver::Clock::now_ms(&crate::driver::SystemClock);
    Ok(json(
        StatusCode::OK,
        serde_json::json!({ "approvals": approvals, "now": now }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    note: Option<String>,
    /// The approval's hash as the client was shown it: refused if the
    /// approval no longer matches.
    hash: Option<String>,
}

async fn approve(
    State(api): State<Shared>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    decide(api, caller, id, true, b).await
}

async fn deny(
    State(api): State<Shared>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    decide(api, caller, id, false, b).await
}

async fn decide(
    api: Shared,
    caller: Caller,
    id: String,
    approve: bool,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let d: Decision = body(b)?;
    if d.note.as_ref().is_some_and(|n| n.len() > MAX_NOTE_BYTES) {
        return Err(ApiError::bad_request(format!(
            "note is over {MAX_NOTE_BYTES} bytes"
        )));
    }
    let a = api.rt.store().approval(&id).await?;
    if let Some(h) = &d.hash {
        if *h != a.hash {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "stale",
                format!(
                    "approval {id} is not what you were shown (its hash is {}); read it again",
                    a.hash
                ),
            ));
        }
    }
    if a.status != ApprovalStatus::Pending {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_pending",
            format!("approval {id} is {}, not pending", a.status),
        ));
    }
    let op = api.rt.operator();
    let note = d.note.as_deref();
    let out = if approve {
        op.approve(&a.id, &caller.name, note).await
    } else {
        op.deny(&a.id, &caller.name, note).await
    };
    match out {
        Ok(a) => {
            api.work.add(&a.run_id);
            Ok(json(StatusCode::OK, a))
        }
        Err(e @ StoreError::Refused(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_pending",
            e.to_string(),
        )),
        Err(e) => Err(e.into()),
    }
}
