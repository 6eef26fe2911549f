//! The TOML config of the `keel` binary: store, engine, model provider,
//! agent, policy, tools and run limits. Unknown keys and wrong types are
//! errors that name the file, the line and the key.

mod assemble;

pub use assemble::{assemble, assemble_with_progress, Assembly, ToolSource};

use crate::types::Limits;
use crate::wasm::PluginLimits;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A parsed `keel.toml`: the store, engine, model, plugins, tools and limits
/// that runs started with it use.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The store: a SQLite file, relative to the config file, or a
    /// `postgres://` URL.
    #[serde(default = "default_store")]
    pub store: String,
    /// The `[engine]` section: how the wasm engine pools, caches and bounds
    /// plugin instances.
    #[serde(default)]
    pub engine: EngineConfig,
    /// The `[model]` section: the provider that answers the agent's model calls
    /// (default: `stub`).
    #[serde(default)]
    pub model: ModelConfig,
    /// The `[limits]` section: each run's bounds on steps, failures, model calls,
    /// tokens and time.
    #[serde(default)]
    pub limits: Limits,
    /// The `[agent]` section: the component that decides each step (required).
    pub agent: PluginConfig,
    /// The `[policy]` section: the component that judges each tool call
    /// (required).
    pub policy: PluginConfig,
    /// The `[[tools]]` entries: wasm components or MCP servers whose tools the
    /// agent may call (none by default).
    #[serde(default)]
    pub tools: Vec<ToolConfig>,
    /// How `keel serve` serves, when started with this config.
    #[serde(default)]
    pub serve: ServeConfig,
    /// What `keel serve` prunes, and how often (none without it).
    #[serde(default)]
    pub retention: Option<RetentionConfig>,
    /// Where runs' traces go (OpenTelemetry over OTLP/HTTP), if anywhere.
    #[serde(default)]
    pub telemetry: Option<crate::telemetry::TelemetryConfig>,
    /// Where the file was read from; relative paths are resolved against its folder.
    #[serde(skip)]
    pub path: PathBuf,
}

/// The `[serve]` section: `keel serve`'s listener, its operators and the
/// configs clients may start runs with.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Address to listen on (default `127.0.0.1:8700`; `--listen` overrides).
    pub listen: Option<String>,
    /// Runs driven at once (default: 64 per core; `--max-runs` overrides).
    pub max_runs: Option<usize>,
    /// The operators' tokens (`NAME ROLE SHA256` lines), relative to this
    /// file. Without it the server listens on loopback only.
    pub tokens_file: Option<PathBuf>,
    /// More configs clients may start runs with, by name, relative to this
    /// file (this config itself is `default`).
    pub configs: std::collections::BTreeMap<String, PathBuf>,
    /// The largest request body in bytes (default: the goal limit + 64 KiB).
    pub max_body_bytes: Option<usize>,
    /// A run's lease in ms: how soon after a server dies another takes its
    /// runs over (default 30 000).
    pub lease_ms: Option<u64>,
    /// How long a connection may take to send a request's headers, and
    /// stay idle between requests, in ms (default 10 000).
    pub header_timeout_ms: Option<u64>,
}

/// The `[retention]` section: `keel serve` removes finished runs older
/// than `finished_before` every `every`, as `keel prune` would.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// How long a run is kept after it finished: `30d`, `12h`, `90m`.
    pub finished_before: String,
    /// Only runs with these statuses (default: every finished status).
    #[serde(default)]
    pub status: Vec<crate::types::RunStatus>,
    /// Export each run here (relative to this file) before removing it.
    pub export_dir: Option<PathBuf>,
    /// How often to prune (default `1h`; the first time is at start).
    #[serde(default = "default_retention_every")]
    pub every: String,
}

fn default_retention_every() -> String {
    "1h".to_string()
}

fn default_store() -> String {
    "keel.db".to_string()
}

/// The `[engine]` section: how the process's wasm engine allocates, caches
/// and bounds plugin instances.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Compiled components are cached here (relative to the config file).
    pub cache_dir: Option<PathBuf>,
    /// Use the pooling instance allocator, which instantiates from reused
    /// slots (default `true`).
    pub pooling: bool,
    /// Instances the pool holds at once, agents, policies and running tools
    /// together (default 1000).
    pub max_instances: u32,
    /// Wasm stack per call in bytes (engine-wide).
    pub max_wasm_stack: usize,
    /// The largest linear memory of any instance, in bytes: each pool slot
    /// reserves this much address space (plugins' `memory_bytes` above it
    /// are clamped to it).
    pub max_memory_bytes: usize,
    /// Map components' initial memories copy-on-write (one memory mapping
    /// more per instance; `false` copies them in, which small components
    /// do as fast and which lets thousands of instances live under
    /// `vm.max_map_count`).
    pub cow_images: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_dir: Some(PathBuf::from(".keel/cache")),
            pooling: true,
            max_instances: 1000,
            max_wasm_stack: 1 << 20,
            max_memory_bytes: crate::wasm::EngineOptions::default().max_memory_bytes,
            cow_images: true,
        }
    }
}

/// The `[model]` section, chosen by its `provider` key: `stub`, `openai` or
/// `replay`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, tag = "provider", rename_all = "lowercase")]
pub enum ModelConfig {
    /// Deterministic answers after `latency_ms`.
    Stub {
        /// How long each answer takes, in ms (default 0).
        #[serde(default)]
        latency_ms: u64,
        /// The text of the final answer (default `done`).
        #[serde(default = "default_answer")]
        answer: String,
        /// A tool call to answer with `times` times before the final answer.
        tool_call: Option<StubToolCall>,
    },
    /// An OpenAI-compatible chat-completions server.
    Openai {
        /// The server's URL up to and including `/v1`, e.g.
        /// `http://127.0.0.1:8080/v1`.
        base_url: String,
        /// The model name sent with every request.
        model: String,
        /// The name of the environment variable holding the API key; the key
        /// itself is never written to the config or the store.
        api_key_env: Option<String>,
        /// How long one attempt may take.
        #[serde(default = "default_timeout")]
        timeout_ms: u64,
        /// Retries of a transient error (refused connection, timeout, 429,
        /// 5xx) after the first attempt, at most.
        #[serde(default = "default_retries")]
        max_retries: u32,
        /// No retry starts later than this after the first attempt.
        #[serde(default = "default_retry_window")]
        retry_window_ms: u64,
        /// A stricter server's rules: `max_tokens_field`, `tool_call_ids`.
        #[serde(default)]
        profile: crate::model::openai::Profile,
        /// The largest response body read from the server, in bytes (default
        /// 4 MiB).
        #[serde(default = "default_max_response")]
        max_response_bytes: usize,
    },
    /// Recorded responses keyed by canonical request, replayed in order.
    ///
    /// With `record` (an `openai` or `stub` table), calls go there instead
    /// and every exchange is appended to `file`.
    Replay {
        /// The recording (relative to the config file): replayed from, or appended
        /// to when `record` is set.
        file: PathBuf,
        /// The provider to record from; without it the file is replayed.
        record: Option<Box<ModelConfig>>,
    },
}

/// The stub model's tool call: `{ tool = "echo", arguments = { q = 1 }, times = 1 }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StubToolCall {
    /// The name of the tool to call.
    pub tool: String,
    /// The call's arguments as a JSON object (default `{}`).
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
    /// Answers with the call while the conversation holds fewer tool results.
    #[serde(default = "one")]
    pub times: usize,
}

fn one() -> usize {
    1
}

fn default_answer() -> String {
    "done".into()
}
fn default_timeout() -> u64 {
    60_000
}
fn default_retries() -> u32 {
    6
}
fn default_retry_window() -> u64 {
    120_000
}
fn default_max_response() -> usize {
    4 << 20
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig::Stub {
            latency_ms: 0,
            answer: default_answer(),
            tool_call: None,
        }
    }
}

/// The `[agent]` or `[policy]` section: the component, its expected hash,
/// its own config and its limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Path of the component (relative to the config file).
    pub component: PathBuf,
    /// Refuse to run unless the component's sha256 is this.
    pub sha256: Option<String>,
    /// The plugin's own config, handed to its `init` as JSON.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// This plugin's per-call bounds on fuel, time, memory, output and logs.
    #[serde(default)]
    pub limits: PluginLimits,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// One `[[tools]]` entry: a wasm component or an MCP server, with what its
/// tools are granted, their effects and their approval rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// A wasm component (relative to the config file); exactly one of
    /// `component` and `mcp`.
    pub component: Option<PathBuf>,
    /// An MCP server whose tools this entry exposes.
    pub mcp: Option<McpSource>,
    /// For `mcp`: `sha256:HEX` over the exposed tools' canonical schemas
    /// (`keel mcp inspect` prints it); required.
    pub pin: Option<String>,
    /// For `mcp`: the server's tools the run may use (none unless listed,
    /// so that a server cannot add tools behind the operator's back).
    #[serde(default)]
    pub expose: Vec<String>,
    /// For `mcp`: what a pin that does not match does: `fail` the run (at
    /// start, or at the call) or `drop` the tools that changed.
    #[serde(default)]
    pub on_pin_mismatch: PinMismatch,
    /// For `component`: refuse to run unless the component's sha256 is this.
    pub sha256: Option<String>,
    /// For `component`: the tool's own config, handed to its `init` as JSON
    /// (default `{}`).
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// Per-call bounds on the tool; an `mcp` entry uses `deadline_ms` and
    /// `max_output_bytes`.
    #[serde(default)]
    pub limits: PluginLimits,
    /// Keep one instance for the whole run instead of a fresh one per call.
    #[serde(default)]
    pub stateful: bool,
    /// For `component`: the WASI capabilities the tool gets (none by default).
    #[serde(default)]
    pub grant: Grant,
    /// The effect of named tools of this component, whatever its `specs()`
    /// claim (`{ fs_write = "destructive" }`): the policy judges, and crash
    /// recovery trusts, this instead of the tool's own word.
    #[serde(default)]
    pub effect: std::collections::BTreeMap<String, crate::types::Effect>,
    /// Tools of this component whose every call waits for an operator's
    /// approval, even when the policy allows it.
    #[serde(default)]
    pub require_approval: Vec<String>,
}

/// Where an MCP server is: a command to start (stdio) or a URL
/// (streamable HTTP).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSource {
    /// The program and its arguments: a bare name is looked up on `PATH`,
    /// a relative path is relative to the config file.
    #[serde(default)]
    pub command: Vec<String>,
    /// Variables the server gets besides `PATH`, `HOME`, `LANG`, `TMPDIR`
    /// and `USER` (nothing else of Keel's environment is passed).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// The server's working directory (relative to the config file).
    pub cwd: Option<PathBuf>,
    /// A streamable-HTTP endpoint, `http://host:port/mcp`.
    pub url: Option<String>,
    /// How long the server may take to start and list its tools, in ms.
    #[serde(default = "default_mcp_start")]
    pub start_timeout_ms: u64,
}

fn default_mcp_start() -> u64 {
    60_000
}

/// What a pin mismatch does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinMismatch {
    /// The default: the run fails, at start (exit 2, nothing run) or at the
    /// call of a tool that changed.
    #[default]
    Fail,
    /// The tools that changed are left out and the run goes on without them.
    Drop,
}

/// The WASI capabilities a tool gets. Nothing unless named here.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Host directories the tool may open, each seen at a guest path.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// Environment variables passed through by name.
    #[serde(default)]
    pub env: Vec<String>,
    /// Whether the tool may use the network: TCP connect and listen, UDP and
    /// name lookup (default `false`).
    #[serde(default)]
    pub network: bool,
}

/// One directory granted to a tool: `{ host = "w", guest = "/workspace",
/// mode = "rw" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// A directory on the host (relative to the config file).
    pub host: PathBuf,
    /// Where the tool sees it.
    pub guest: String,
    /// Whether the tool may only read the directory (`ro`, the default) or
    /// also write to it (`rw`).
    #[serde(default)]
    pub mode: DirMode,
}

/// What a tool may do in a granted directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirMode {
    /// Read only (the default).
    #[default]
    Ro,
    /// Read and write.
    Rw,
}

/// A config that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the config")]
    Read {
        /// The config file's path.
        path: String,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key or a wrong type, or
    /// fails a check of its values.
    #[error("{path}: {message}")]
    Invalid {
        /// The config file's path.
        path: String,
        /// What is wrong, and where when the TOML parser says.
        message: String,
    },
}

impl Config {
    /// Reads the config file at `path`, then parses and checks it.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses and checks `text` as the config file at `path`, against whose
    /// folder its relative paths are resolved.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let p = path.display().to_string();
        let mut cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: p.clone(),
            message: e.to_string(),
        })?;
        cfg.path = path.to_path_buf();
        cfg.check()
            .map_err(|message| ConfigError::Invalid { path: p, message })?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), String> {
        for (i, t) in self.tools.iter().enumerate() {
            check_tool_source(i, t)?;
            for d in &t.grant.dirs {
                if !d.guest.starts_with('/') {
                    return Err(format!(
                        "tools[{i}].grant.dirs: guest path {:?} must be absolute",
                        d.guest
                    ));
                }
            }
        }
        for (what, sha) in std::iter::once(("agent", &self.agent.sha256))
            .chain(std::iter::once(("policy", &self.policy.sha256)))
            .chain(self.tools.iter().map(|t| ("tools[].sha256", &t.sha256)))
        {
            if let Some(s) = sha {
                if s.len() != 64 || !s.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(format!("{what}.sha256: {s:?} is not 64 hex digits"));
                }
            }
        }
        Ok(())
    }

    /// The `[[tools]]` entries that are MCP servers, with their index.
    pub fn mcp_tools(&self) -> impl Iterator<Item = (usize, &ToolConfig, &McpSource)> {
        self.tools
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.mcp.as_ref().map(|m| (i, t, m)))
    }

    /// `p` resolved against the config file's folder.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        }
    }

    /// Where the store is: a SQLite file resolved against the config
    /// file's folder, or a PostgreSQL URL as written.
    pub fn store_location(&self) -> crate::store::Location {
        match crate::store::Location::parse(&self.store) {
            crate::store::Location::File(p) => crate::store::Location::File(self.resolve(&p)),
            pg => pg,
        }
    }
}

/// One `[[tools]]` entry names exactly one source, and an MCP entry
/// only what applies to a server.
fn check_tool_source(i: usize, t: &ToolConfig) -> Result<(), String> {
    let Some(m) = &t.mcp else {
        if t.component.is_none() {
            return Err(format!(
                "tools[{i}]: names neither a `component` nor an `mcp` server"
            ));
        }
        for (key, set) in [
            ("pin", t.pin.is_some()),
            ("expose", !t.expose.is_empty()),
            ("on_pin_mismatch", t.on_pin_mismatch != PinMismatch::Fail),
        ] {
            if set {
                return Err(format!(
                    "tools[{i}].{key}: only an `mcp` server takes it (a component is pinned by `sha256`)"
                ));
            }
        }
        return Ok(());
    };
    let refuse = |key: &str| {
        Err(format!(
            "tools[{i}].{key}: an `mcp` server does not take it (it is not a wasm component)"
        ))
    };
    if t.component.is_some() {
        return refuse("component");
    }
    if t.sha256.is_some() {
        return refuse("sha256");
    }
    if t.stateful {
        return refuse("stateful");
    }
    if !t.grant.dirs.is_empty() || !t.grant.env.is_empty() || t.grant.network {
        return refuse("grant");
    }
    if t.config.as_object().is_some_and(|o| !o.is_empty()) {
        return refuse("config");
    }
    match (m.command.is_empty(), &m.url) {
        (true, None) => {
            return Err(format!(
                "tools[{i}].mcp: names neither a `command` (stdio) nor a `url` (streamable HTTP)"
            ))
        }
        (false, Some(_)) => {
            return Err(format!(
                "tools[{i}].mcp: names both a `command` and a `url`; a server is one or the other"
            ))
        }
        (false, None) => {
            if m.command[0].trim().is_empty() {
                return Err(format!("tools[{i}].mcp.command: the program name is empty"));
            }
            if m.command.iter().any(|a| a.contains('\0')) {
                return Err(format!(
                    "tools[{i}].mcp.command: an argument holds a NUL byte"
                ));
            }
        }
        (true, Some(u)) => {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(format!(
                    "tools[{i}].mcp.url: {u:?} is not an http:// or https:// URL"
                ));
            }
            if !m.env.is_empty() || m.cwd.is_some() {
                return Err(format!(
                    "tools[{i}].mcp: `env` and `cwd` are for a `command`; a `url` server runs elsewhere"
                ));
            }
        }
    }
    match &t.pin {
        None => {
            return Err(format!(
                "tools[{i}].pin: an `mcp` server needs a pin (`keel mcp inspect` prints it)"
            ))
        }
        Some(p) => crate::tools::mcp::parse_pin(p).map_err(|e| format!("tools[{i}].pin: {e}"))?,
    };
    let mut seen = std::collections::BTreeSet::new();
    for name in &t.expose {
        if !seen.insert(name) {
            return Err(format!("tools[{i}].expose: {name:?} is listed twice"));
        }
    }
    for key in t.effect.keys().chain(&t.require_approval) {
        if !t.expose.contains(key) {
            return Err(format!(
                "tools[{i}]: {key:?} has an effect or an approval rule but is not in `expose`"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
store = "k.db"
[agent]
component = "a.wasm"
config = { script = [] }
[policy]
component = "p.wasm"
[[tools]]
component = "t.wasm"
grant = { dirs = [{ host = "w", guest = "/workspace", mode = "rw" }] }
"#;

    #[test]
    fn a_valid_config_parses_and_resolves_paths() {
        let c = Config::parse(OK, Path::new("/etc/keel/keel.toml")).unwrap();
        assert_eq!(
            c.store_location(),
            crate::store::Location::File(PathBuf::from("/etc/keel/k.db"))
        );
        assert_eq!(c.tools[0].grant.dirs[0].mode, DirMode::Rw);
        assert!(matches!(c.model, ModelConfig::Stub { .. }));
    }

    #[test]
    fn an_openai_model_takes_its_retry_window_and_profile() {
        let text = OK.replace(
            "store = \"k.db\"",
            "store = \"k.db\"\n[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\nretry_window_ms = 5000\nprofile = { max_tokens_field = \"max_completion_tokens\", tool_call_ids = \"alphanumeric9\" }",
        );
        let c = Config::parse(&text, Path::new("x.toml")).unwrap();
        let ModelConfig::Openai {
            retry_window_ms,
            max_retries,
            profile,
            ..
        } = c.model
        else {
            panic!("{:?}", c.model)
        };
        assert_eq!((retry_window_ms, max_retries), (5000, 6));
        assert_eq!(
            profile.max_tokens_field,
            crate::model::openai::MaxTokensField::MaxCompletionTokens
        );
        assert_eq!(
            profile.tool_call_ids,
            crate::model::openai::ToolCallIds::Alphanumeric9
        );
        let bad = text.replace("alphanumeric9", "uuid");
        assert!(Config::parse(&bad, Path::new("x.toml"))
            .unwrap_err()
            .to_string()
            .contains("unknown variant `uuid`"));
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_file_line_and_key() {
        let bad = OK.replace("[policy]", "[policy]\ncomponnet = 1");
        let e = Config::parse(&bad, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.toml:"), "{e}");
        assert!(e.contains("line 7") && e.contains("componnet"), "{e}");
        let bad = OK.replace(
            "store = \"k.db\"",
            "store = \"k.db\"\n[limits]\nmax_steps = \"ten\"",
        );
        let e = Config::parse(&bad, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_steps") && e.contains("line 4"), "{e}");
        let bad = OK.replace("/workspace", "workspace");
        assert!(Config::parse(&bad, Path::new("x.toml"))
            .unwrap_err()
            .to_string()
            .contains("must be absolute"));
    }
}

#[cfg(test)]
mod mcp_tests {
    use super::*;

    const BASE: &str = "[agent]\ncomponent = \"a.wasm\"\n[policy]\ncomponent = \"p.wasm\"\n";
    const PIN: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn parse(tool: &str) -> Result<Config, String> {
        Config::parse(&format!("{BASE}[[tools]]\n{tool}"), Path::new("k.toml"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_server_entry_parses_with_its_pin_exposed_tools_and_effects() {
        let c = parse(&format!(
            "mcp = {{ command = [\"npx\", \"-y\", \"srv\"], env = {{ A = \"1\" }}, cwd = \"d\" }}\npin = \"{PIN}\"\nexpose = [\"read\", \"write\"]\neffect = {{ read = \"read-only\" }}\nrequire_approval = [\"write\"]\non_pin_mismatch = \"drop\""
        ))
        .unwrap();
        let t = &c.tools[0];
        assert_eq!(t.mcp.as_ref().unwrap().command, ["npx", "-y", "srv"]);
        assert_eq!(t.on_pin_mismatch, PinMismatch::Drop);
        assert_eq!(c.mcp_tools().count(), 1);
        let c = parse(&format!(
            "mcp = {{ url = \"http://127.0.0.1:9/mcp\" }}\npin = \"{PIN}\"\nexpose = [\"x\"]"
        ))
        .unwrap();
        assert!(c.tools[0].component.is_none());
    }

    #[test]
    fn a_server_entry_that_cannot_be_right_is_refused_saying_which_key() {
        let cmd = "mcp = { command = [\"srv\"] }\n";
        for (tool, says) in [
            (format!("{cmd}expose = [\"x\"]"), "needs a pin"),
            (
                format!("{cmd}pin = \"md5:1\"\nexpose = [\"x\"]"),
                "tools[0].pin",
            ),
            (
                format!("mcp = {{ }}\npin = \"{PIN}\""),
                "neither a `command`",
            ),
            (
                format!("mcp = {{ command = [\"s\"], url = \"http://h/mcp\" }}\npin = \"{PIN}\""),
                "both a `command` and a `url`",
            ),
            (
                format!("mcp = {{ command = [\" \"] }}\npin = \"{PIN}\""),
                "program name is empty",
            ),
            (
                format!("mcp = {{ url = \"ftp://h/mcp\" }}\npin = \"{PIN}\""),
                "not an http",
            ),
            (
                format!("mcp = {{ url = \"http://h/mcp\", cwd = \"d\" }}\npin = \"{PIN}\""),
                "`env` and `cwd` are for a `command`",
            ),
            (
                format!("{cmd}pin = \"{PIN}\"\ncomponent = \"t.wasm\""),
                "tools[0].component",
            ),
            (
                format!("{cmd}pin = \"{PIN}\"\nstateful = true"),
                "tools[0].stateful",
            ),
            (
                format!("{cmd}pin = \"{PIN}\"\ngrant = {{ network = true }}"),
                "tools[0].grant",
            ),
            (
                format!("{cmd}pin = \"{PIN}\"\nexpose = [\"x\", \"x\"]"),
                "listed twice",
            ),
            (
                format!("{cmd}pin = \"{PIN}\"\nexpose = [\"x\"]\neffect = {{ y = \"read-only\" }}"),
                "\"y\" has an effect",
            ),
            (
                format!("component = \"t.wasm\"\npin = \"{PIN}\""),
                "only an `mcp` server takes it",
            ),
            (
                "sha256 = \"ab\"".to_string(),
                "neither a `component` nor an `mcp`",
            ),
        ] {
            let e = parse(&tool).unwrap_err();
            assert!(e.contains(says), "{tool}: {e} should say {says:?}");
        }
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    #[test]
    fn the_example_configs_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for f in ["examples/quickstart/keel.toml", "examples/llm/keel.toml"] {
            let c = Config::load(&root.join(f)).unwrap_or_else(|e| panic!("{e}"));
            assert!(c.tools.len() == 1, "{f}");
        }
    }
}
