//! `keel serve`: the service's command line, signals and start-up checks.

use super::exit;
use super::run_cmd::{location, opening};
use crate::config::Config;
use crate::serve::{HttpOptions, RunConfig, ServeOptions, Tokens, Web, DEFAULT_CONFIG};
use crate::store::OpenOptions;
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where `keel serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The config whose store to serve (its `store`; --store or KEEL_STORE
    /// override it) and whose `[serve]` section applies. Runs started
    /// through the API use it; runs use the config they were started with.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Address for the HTTP API and the page (default: the config's
    /// `[serve] listen`, else 127.0.0.1:8700; port 0 picks a free one).
    /// Any address but loopback needs a tokens file.
    #[arg(long)]
    listen: Option<String>,
    /// Runs driven at once; the rest wait in the store (default: 64 per core).
    #[arg(long)]
    max_runs: Option<usize>,
    /// Seconds a stop waits for live runs to reach a step boundary.
    #[arg(long, default_value_t = 30)]
    grace: u64,
}

pub async fn serve(args: ServeArgs, store_flag: Option<String>) -> anyhow::Result<i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let cfg = args.config.as_deref().map(Config::load).transpose()?;
    let section = cfg.as_ref().map(|c| c.serve.clone()).unwrap_or_default();
    let loc = location(store_flag, cfg.as_ref());
    let mut opts = ServeOptions {
        grace: std::time::Duration::from_secs(args.grace),
        ..Default::default()
    };
    if let Some(ms) = section.lease_ms {
        if ms < 300 {
            bail!("[serve] lease_ms must be at least 300");
        }
        opts.lease = std::time::Duration::from_millis(ms);
    }
    if let Some(c) = &cfg {
        opts.telemetry = super::run_cmd::telemetry(c)?;
        opts.retention = crate::retention::Schedule::from_config(c)
            .map_err(|e| anyhow::anyhow!("{}: {e}", c.path.display()))?;
    }
    if let Some(n) = args.max_runs.or(section.max_runs) {
        if n == 0 {
            bail!("--max-runs must be at least 1");
        }
        opts.max_runs = n;
    }
    let listen = args
        .listen
        .or(section.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.into());
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("--listen {listen:?} is not an address such as 127.0.0.1:8700"))?;
    let tokens = match (&cfg, &section.tokens_file) {
        (Some(c), Some(f)) => Some(Tokens::load(&c.resolve(f))?),
        _ => None,
    };
    if tokens.is_none() && !addr.ip().is_loopback() {
        bail!("refusing to listen on {addr} without a tokens file: set `[serve] tokens_file` in the config, or listen on 127.0.0.1");
    }
    let configs = match &cfg {
        Some(c) => run_configs(c, args.config.as_deref().unwrap_or(Path::new("")))?,
        None => BTreeMap::new(),
    };
    // Commits never on a tokio worker: they answer requests and feed
    // event streams, which must not wait on a sync.
    let open = OpenOptions {
        inline_commits: false,
        ..OpenOptions::default()
    };
    let store = opening(&loc, crate::store::open(&loc, open).await)?;
    let reader = opening(&loc, crate::store::open_reader(&loc).await)?;
    crate::serve::raise_fd_limit();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;

    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (now_tx, now_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("keel serve: stopping (a second signal exits at once)");
        let _ = stop_tx.send(());
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = now_tx.send(());
    });
    tracing::info!(store = %loc, max_runs = opts.max_runs, listen = %bound, "serving");
    if let Some(r) = &opts.retention {
        tracing::info!(
            keep_ms = r.keep.as_millis() as u64,
            every_ms = r.every.as_millis() as u64,
            "pruning runs that finished more than keep_ms ago, every every_ms"
        );
    }
    eprintln!(
        "keel serve: serving {loc} ({} runs at once); listening on http://{bound}; SIGTERM or SIGINT stops",
        opts.max_runs
    );
    let web = Web {
        listener,
        http: HttpOptions {
            header_timeout: section.header_timeout_ms.map_or(
                HttpOptions::default().header_timeout,
                std::time::Duration::from_millis,
            ),
            ..HttpOptions::default()
        },
        tokens,
        configs,
        max_body: section
            .max_body_bytes
            .unwrap_or(crate::serve::DEFAULT_MAX_BODY),
    };
    let report = crate::serve::run(
        store,
        reader,
        opts,
        Some(web),
        async {
            let _ = stop_rx.await;
        },
        async {
            if now_rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        },
    )
    .await;
    eprintln!(
        "keel serve: stopped after driving {} runs; {} left live (resumable)",
        report.driven, report.left_live
    );
    Ok(exit::OK)
}

/// The configs clients may start runs with: the server's own as
/// `default`, and those its `[serve.configs]` names, each loaded now so
/// that a mistake stops the server at start, not a client's run.
fn run_configs(cfg: &Config, path: &Path) -> anyhow::Result<BTreeMap<String, RunConfig>> {
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out = BTreeMap::new();
    out.insert(
        DEFAULT_CONFIG.to_string(),
        RunConfig {
            path: abs(path),
            limits: cfg.limits.clone(),
        },
    );
    for (name, p) in &cfg.serve.configs {
        if name == DEFAULT_CONFIG {
            bail!(
                "[serve.configs] cannot name a config `{DEFAULT_CONFIG}`: that is the server's own"
            );
        }
        let p = cfg.resolve(p);
        let other = Config::load(&p).with_context(|| format!("[serve.configs] {name}"))?;
        out.insert(
            name.clone(),
            RunConfig {
                path: abs(&p),
                limits: other.limits,
            },
        );
    }
    Ok(out)
}
