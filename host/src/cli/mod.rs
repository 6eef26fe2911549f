//! The `keel` command line: start, watch, approve, deny, cancel and resume
//! runs, and inspect plugins.

mod bench_cmd;
mod journal_cmd;
mod mcp_cmd;
mod output;
mod plugin_cmd;
mod prune_cmd;
mod run_cmd;
mod serve_cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Exit codes, documented in `--help`.
pub mod exit {
    /// The command did what it was asked (a run completed).
    pub const OK: i32 = 0;
    /// Refused: the operation does not apply (the run is terminal, the
    /// approval is not pending, the lease is held elsewhere).
    pub const REFUSED: i32 = 1;
    /// Usage or input error: bad flags, a missing or invalid file.
    pub const USAGE: i32 = 2;
    /// The run paused and waits for an approval.
    pub const PAUSED: i32 = 3;
    /// The run ended failed or cancelled.
    pub const RUN_FAILED: i32 = 4;
    /// The run is parked: its model server stayed down through the
    /// retries; `keel resume` continues it.
    pub const PARKED: i32 = 5;
}

const EXIT_CODES: &str = "Exit codes:
  0  done (for run and resume: the run completed)
  1  refused (the run is terminal, the approval is not pending, the run is leased elsewhere)
  2  usage or input error (bad flags, missing or invalid file, corrupt store)
  3  the run is paused, waiting for an approval (see `keel approve`)
  4  the run ended failed or cancelled
  5  the run is parked: its model server stayed unavailable (see `keel resume`)";

/// `keel --version`: the version, and the test hooks built in (none in
/// the binary `cargo build -p keel` makes).
fn long_version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let hooks = match crate::BUILD_HOOKS {
            [] => "none".to_string(),
            h => h.join(", "),
        };
        format!("{}\ntest hooks: {hooks}", env!("CARGO_PKG_VERSION"))
    })
}

/// Keel: durable agent runs with sandboxed WebAssembly plugins.
#[derive(Parser, Debug)]
#[command(name = "keel", version, long_version = long_version(), after_help = EXIT_CODES)]
pub struct Cli {
    /// The store to read or write: a SQLite file or a `postgres://` URL
    /// (default: the config's `store`, else ./keel.db).
    #[arg(long, global = true, env = "KEEL_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// Log level for keel's own diagnostics on stderr (error, warn, info,
    /// debug; default: info for `serve`, warn otherwise).
    #[arg(long, global = true, env = "KEEL_LOG")]
    pub log: Option<String>,
    /// How log lines are written: `text`, or `json` (one object a line).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// A run's goal, given inline or read from a file.
#[derive(Debug, clap::Args)]
pub struct GoalArgs {
    /// What the run should achieve; handed to the agent (at most 1 MiB).
    #[arg(
        long,
        short,
        required_unless_present = "goal_file",
        conflicts_with = "goal_file"
    )]
    pub goal: Option<String>,
    /// Read the goal from this file instead (`-`: standard input), at most 1 MiB.
    #[arg(long, value_name = "FILE")]
    pub goal_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start a run from a config and a goal; stream its events until it
    /// completes, fails or pauses for approval.
    #[command(after_help = EXIT_CODES)]
    Run {
        /// The TOML config (store, model, agent, policy, tools, limits).
        #[arg(long, short)]
        config: PathBuf,
        #[command(flatten)]
        goal: GoalArgs,
        /// Print events and the outcome as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Store a run for a server (`keel serve`) to pick up; print its id.
    #[command(after_help = EXIT_CODES)]
    Submit {
        /// The TOML config the server drives the run with (checked now).
        #[arg(long, short)]
        config: PathBuf,
        #[command(flatten)]
        goal: GoalArgs,
        /// Who submits it, recorded with the run as `submitted_by` (as the
        /// API records a token's name).
        #[arg(long, default_value_t = whoami())]
        by: String,
        /// Print the stored run as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run as a service: claim and drive every run that needs a driver
    /// (submitted, approved, expired, parked past its retry time, or left
    /// by a process that died), each with the config it was started with,
    /// and serve the HTTP API and the operators' page (docs/api.md) until
    /// SIGTERM or SIGINT. A stop closes the API, claims no more runs and
    /// lets each live one stop at its next step boundary, its lease given
    /// back (up to --grace); a second signal exits at once, and the runs
    /// stay resumable.
    #[command(after_help = EXIT_CODES)]
    Serve(serve_cmd::ServeArgs),
    /// Drive a paused or interrupted run on: apply an operator's answer,
    /// recover a step interrupted by a crash, or continue.
    #[command(after_help = EXIT_CODES)]
    Resume {
        /// The run to drive on.
        run_id: String,
        /// The config to rebuild the consumers from (default: the one the run started with).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Take the run's lease at once although another process holds it
        /// (say so only when you know that process is gone). Recorded in
        /// the run's `lease.taken_over` event with --by. Without it, a lease
        /// held by a process of this host that no longer runs is taken at
        /// once, and any other waits for its expiry (30 s).
        #[arg(long)]
        take_over: bool,
        /// Who takes the lease over (recorded with --take-over).
        #[arg(long, default_value_t = whoami())]
        by: String,
        #[arg(long)]
        json: bool,
    },
    /// List runs, newest first.
    Runs {
        /// Only runs with this status (running, waiting_for_approval, parked, completed, failed, cancelled).
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Show one run: its status, steps and approvals.
    Show {
        /// The run to show.
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a run's events (or every run's), optionally following new ones.
    Events {
        /// Only this run's events (default: every run's).
        run_id: Option<String>,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Keep printing events as they commit, until the run ends (Ctrl-C to stop).
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// Approve a pending approval (by its id, or by the id of the run that waits).
    /// The run stays paused until `keel resume` executes exactly the approved call.
    #[command(after_help = EXIT_CODES)]
    Approve {
        /// The approval's id (`appr_…`), or the id of the run that waits for it.
        id: String,
        /// Who approves (recorded with the approval).
        #[arg(long, default_value_t = whoami())]
        by: String,
        /// Why, in a few words (recorded with the approval and shown to the agent on denial).
        #[arg(long)]
        note: Option<String>,
    },
    /// Deny a pending approval. Final: the agent sees the denial on resume.
    #[command(after_help = EXIT_CODES)]
    Deny {
        /// The approval's id (`appr_…`), or the id of the run that waits for it.
        id: String,
        #[arg(long, default_value_t = whoami())]
        by: String,
        /// Why, in a few words (the agent sees it on resume).
        #[arg(long)]
        note: Option<String>,
    },
    /// Cancel a run from any process; a live loop stops at its next write.
    #[command(after_help = EXIT_CODES)]
    Cancel {
        /// The run to cancel.
        run_id: String,
        #[arg(long, default_value_t = whoami())]
        by: String,
    },
    /// Check runs' journals against their hash chains: every event in its
    /// place and unedited, and every run, step and approval row equal to
    /// what its events sealed. Reports the first break of each run.
    #[command(after_help = journal_cmd::VERIFY_EXIT_CODES)]
    Verify(journal_cmd::VerifyArgs),
    /// Write one run (its row, steps, approvals, events with their hashes,
    /// model calls) as JSON Lines, checkable with `keel verify --file`.
    #[command(after_help = EXIT_CODES)]
    Export(journal_cmd::ExportArgs),
    /// Remove finished runs (completed, failed, cancelled) with everything
    /// they own, optionally exporting each first; never a run that has not
    /// finished. What remains still verifies. The run holding the store's
    /// newest event is kept until another event is written (its number must
    /// not be handed out again).
    #[command(after_help = prune_cmd::PRUNE_EXIT_CODES)]
    Prune(prune_cmd::PruneArgs),
    /// Inspect, check and precompile plugin components.
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
    /// Inspect MCP servers, to use their tools in a config.
    #[command(subcommand)]
    Mcp(mcp_cmd::McpCommand),
    /// Load tests of the runtime (see BENCHMARKS.md).
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
}

fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| "operator".into())
}

/// Parses the command line, runs the command and returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
        }
    };
    let level = cli.log.clone().unwrap_or_else(|| {
        // rmcp logs, at error, what Keel reports itself with context.
        if matches!(cli.command, Command::Serve(_)) {
            "info,rmcp=off"
        } else {
            "warn,rmcp=off"
        }
        .to_string()
    });
    let filter = tracing_subscriber::EnvFilter::try_new(&level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match cli.log_format {
        LogFormat::Json => logs.json().try_init(),
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return exit::USAGE;
        }
    };
    match rt.block_on(run_cmd::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            // An error may quote what a plugin or a model wrote.
            eprintln!("error: {}", output::safe_lines(&format!("{e:#}")));
            classify(&e)
        }
    }
}

/// The exit code for an error.
fn classify(e: &anyhow::Error) -> i32 {
    use crate::store::StoreError;
    for cause in e.chain() {
        if let Some(se) = cause.downcast_ref::<StoreError>() {
            return match se {
                StoreError::Refused(_)
                | StoreError::Terminal { .. }
                | StoreError::Leased { .. }
                | StoreError::Conflict { .. }
                | StoreError::Locked { .. } => exit::REFUSED,
                _ => exit::USAGE,
            };
        }
        if let Some(de) = cause.downcast_ref::<crate::driver::DriverError>() {
            return match de {
                crate::driver::DriverError::Terminal(..)
                | crate::driver::DriverError::Tampered { .. } => exit::REFUSED,
                crate::driver::DriverError::Store(
                    StoreError::Refused(_)
                    | StoreError::Terminal { .. }
                    | StoreError::Leased { .. }
                    | StoreError::Locked { .. },
                ) => exit::REFUSED,
                _ => exit::USAGE,
            };
        }
    }
    exit::USAGE
}
