//! Builds a run's consumers from a config: loads and checks the
//! components, instantiates the agent and the policy for the run, and puts
//! the tools in a table.

use super::{Config, DirMode, McpSource, ModelConfig, ToolConfig};
use crate::consumer::ToolProvider;
use crate::driver::{Consumers, ConsumersBuilder};
use crate::model::{ModelProvider, OpenAiProvider, OpenAiSettings, ReplayProvider, StubProvider};
use crate::tools::mcp::{Endpoint, McpServer, McpTools, ServerSpec};
use crate::tools::ToolSet;
use crate::types::ToolSpec;
use crate::wasm::{
    EngineOptions, Plugin, ToolCaps, WasmAgent, WasmHost, WasmPolicy, WasmTools, World,
};
use anyhow::{anyhow, Context};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Everything loaded from a config, ready to build consumers for runs.
pub struct Assembly {
    /// The process's wasm engine, shared by every run.
    pub host: Arc<WasmHost>,
    /// The agent component, loaded and checked.
    pub agent: Arc<Plugin>,
    /// The policy component, loaded and checked.
    pub policy: Arc<Plugin>,
    /// One per `[[tools]]` entry, in order.
    pub tools: Vec<ToolSource>,
    /// Where the runs' model calls go.
    pub provider: Arc<dyn ModelProvider>,
    /// The config this was assembled from.
    pub config: Config,
    /// Each wasm tool's specs, by `[[tools]]` index, once a first run has
    /// loaded them: later runs make no instance just to ask again.
    tool_specs: Vec<OnceLock<Vec<ToolSpec>>>,
}

/// Where a `[[tools]]` entry's tools come from.
pub enum ToolSource {
    /// A wasm component, instantiated per call (or once per run when
    /// `stateful`).
    Wasm(Arc<Plugin>),
    /// Started when the first run starts, shared by the runs after it.
    Mcp(Arc<McpServer>),
}

/// Loads every component of `config` (compiling or reading the cache) and
/// the model provider.
pub fn assemble(config: &Config) -> anyhow::Result<Assembly> {
    assemble_with_progress(config, &|_| {})
}

/// [`assemble`], telling `progress` about each component before and after
/// it loads (a first load compiles: seconds for Python and JavaScript).
pub fn assemble_with_progress(
    config: &Config,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Assembly> {
    let host = WasmHost::new(EngineOptions {
        pooling: config.engine.pooling,
        max_instances: config.engine.max_instances,
        cache_dir: config.engine.cache_dir.as_ref().map(|d| config.resolve(d)),
        max_wasm_stack: config.engine.max_wasm_stack,
        max_memory_bytes: config.engine.max_memory_bytes,
        cow_images: config.engine.cow_images,
        ..EngineOptions::default()
    })
    .context("starting the wasm engine")?;
    let load = |what: &str, p: &std::path::Path, world: World, sha: &Option<String>| {
        let path = config.resolve(p);
        progress(&format!("{what}: loading {}", path.display()));
        let started = std::time::Instant::now();
        let plugin = host
            .load(&path, world, sha.as_deref())
            .with_context(|| format!("{what} plugin"))?;
        let how = match plugin.cache {
            crate::wasm::CacheOutcome::Hit => "from the compile cache",
            crate::wasm::CacheOutcome::Compiled => "compiled",
            crate::wasm::CacheOutcome::Replaced => "recompiled (the cache entry was bad)",
        };
        progress(&format!("{what}: {how} in {:.2?}", started.elapsed()));
        Ok::<_, anyhow::Error>(plugin)
    };
    let agent = load(
        "agent",
        &config.agent.component,
        World::Agent,
        &config.agent.sha256,
    )?;
    let policy = load(
        "policy",
        &config.policy.component,
        World::Policy,
        &config.policy.sha256,
    )?;
    let mut tools = Vec::new();
    for (i, t) in config.tools.iter().enumerate() {
        tools.push(match (&t.component, &t.mcp) {
            (Some(c), _) => {
                ToolSource::Wasm(load(&format!("tools[{i}]"), c, World::Tool, &t.sha256)?)
            }
            (None, Some(m)) => ToolSource::Mcp(Arc::new(McpServer::new(mcp_spec(config, i, t, m)))),
            (None, None) => return Err(anyhow!("tools[{i}] names no component and no server")),
        });
    }
    let provider = provider(config, &config.model)?;
    Ok(Assembly {
        host,
        agent,
        policy,
        tools,
        provider,
        config: config.clone(),
        tool_specs: config.tools.iter().map(|_| OnceLock::new()).collect(),
    })
}

impl Assembly {
    /// Fresh consumers for one run: its own agent and policy instances.
    pub async fn consumers(&self) -> anyhow::Result<Consumers> {
        let cfg = &self.config;
        let wiring = ConsumersBuilder::new(self.provider.clone());
        let mut set = ToolSet::new();
        for (i, (source, t)) in self.tools.iter().zip(&cfg.tools).enumerate() {
            let plugin = match source {
                ToolSource::Wasm(p) => p,
                ToolSource::Mcp(server) => {
                    add_mcp(&mut set, server, i, t, cfg).await?;
                    continue;
                }
            };
            let mut caps = ToolCaps {
                network: t.grant.network,
                ..ToolCaps::default()
            };
            for d in &t.grant.dirs {
                let host_dir = cfg.resolve(&d.host);
                std::fs::create_dir_all(&host_dir).with_context(|| {
                    format!("creating the granted directory {}", host_dir.display())
                })?;
                caps.dirs
                    .push((host_dir, d.guest.clone(), d.mode == DirMode::Rw));
            }
            for name in &t.grant.env {
                if let Ok(v) = std::env::var(name) {
                    caps.env.push((name.clone(), v));
                }
            }
            let slot = self.tool_specs.get(i);
            let known = slot.and_then(|s| s.get()).cloned();
            let loaded = known.is_none();
            let tools = WasmTools::with_known_specs(
                self.host.clone(),
                plugin.clone(),
                &t.config.to_string(),
                t.limits.clone(),
                caps,
                t.stateful,
                Some(wiring.events()),
                known,
            )
            .await
            .with_context(|| format!("starting tool {}", plugin.name))?;
            if let (true, Some(slot)) = (loaded, slot) {
                let _ = slot.set(tools.specs());
            }
            let names: Vec<String> = tools.specs().into_iter().map(|s| s.name).collect();
            set.add(Arc::new(tools))
                .map_err(|e| anyhow!("{}: {e}", plugin.name))?;
            let not_ours = |key: &str, name: &str| {
                anyhow!(
                    "{}: tools[{i}].{key} names {name:?}, which {} does not declare (it declares: {})",
                    cfg.path.display(),
                    plugin.name,
                    names.join(", ")
                )
            };
            for (name, effect) in &t.effect {
                if !names.contains(name) {
                    return Err(not_ours("effect", name));
                }
                set.pin_effect(name, *effect).map_err(|e| anyhow!(e))?;
            }
            for name in &t.require_approval {
                if !names.contains(name) {
                    return Err(not_ours("require_approval", name));
                }
                set.require_approval(name).map_err(|e| anyhow!(e))?;
            }
        }
        if speaks_openai(&cfg.model) {
            for t in set.specs() {
                if !crate::model::openai_tool_name_ok(&t.name) {
                    return Err(anyhow!(
                        "{}: the tool {:?} cannot be offered to an OpenAI-compatible model: its name must match ^[a-zA-Z0-9_-]{{1,64}}$",
                        cfg.path.display(),
                        keel_vocab::render::cap(&t.name, 80)
                    ));
                }
            }
        }
        let agent = WasmAgent::new(
            &self.host,
            &self.agent,
            &cfg.agent.config.to_string(),
            set.specs(),
            &cfg.agent.limits,
            &wiring,
        )
        .await
        .with_context(|| format!("starting the agent {}", self.agent.name))?;
        let policy = WasmPolicy::new(
            &self.host,
            &self.policy,
            &cfg.policy.config.to_string(),
            &cfg.policy.limits,
            &wiring,
        )
        .await
        .with_context(|| format!("starting the policy {}", self.policy.name))?;
        Ok(wiring.build(Box::new(agent), Box::new(policy), set))
    }
}

/// The server of `[[tools]]` entry `i`, as its config describes it.
fn mcp_spec(config: &Config, i: usize, t: &ToolConfig, m: &McpSource) -> ServerSpec {
    let endpoint = match &m.url {
        Some(url) => Endpoint::Http { url: url.clone() },
        None => Endpoint::Stdio {
            command: resolve_program(config, &m.command),
            env: m.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cwd: m.cwd.as_ref().map(|d| config.resolve(d)),
        },
    };
    ServerSpec {
        label: format!("tools[{i}] ({endpoint})"),
        endpoint,
        expose: t.expose.clone(),
        pin: t.pin.clone().unwrap_or_default(),
        on_mismatch: t.on_pin_mismatch,
        deadline: Duration::from_millis(t.limits.deadline_ms),
        max_output_bytes: t.limits.max_output_bytes,
        start_timeout: Duration::from_millis(m.start_timeout_ms),
        snapshots: config
            .engine
            .cache_dir
            .as_ref()
            .map(|d| config.resolve(d).join("mcp")),
    }
}

/// `command` with a relative program path (`bin/server`, not `npx`)
/// resolved against the config file's folder, as every path in a config is.
fn resolve_program(config: &Config, command: &[String]) -> Vec<String> {
    let mut out = command.to_vec();
    if let Some(p) = out.first_mut() {
        if p.contains('/') && !std::path::Path::new(p.as_str()).is_absolute() {
            *p = config
                .resolve(std::path::Path::new(p.as_str()))
                .display()
                .to_string();
        }
    }
    out
}

/// Starts (or reuses) an MCP server for a run, checks its pin, and adds
/// its exposed tools with the config's effects and approval rules.
async fn add_mcp(
    set: &mut ToolSet,
    server: &Arc<McpServer>,
    i: usize,
    t: &ToolConfig,
    cfg: &Config,
) -> anyhow::Result<()> {
    let started = server
        .start()
        .await
        .with_context(|| format!("{}: tools[{i}]", cfg.path.display()))?;
    // Logged at warn, which `keel run` and `keel serve` both show.
    for line in &started.dropped {
        tracing::warn!("{}", keel_vocab::render::cap(line, 2000));
    }
    let names: Vec<String> = started.specs.iter().map(|s| s.name.clone()).collect();
    let tools = McpTools::new(server.clone(), started.specs);
    set.add(Arc::new(tools))
        .map_err(|e| anyhow!("{}: {}: {e}", cfg.path.display(), server.label()))?;
    for name in &names {
        set.set_pin(name, &started.pin).map_err(|e| anyhow!(e))?;
        if let Some(effect) = t.effect.get(name) {
            set.pin_effect(name, *effect).map_err(|e| anyhow!(e))?;
        }
        if t.require_approval.contains(name) {
            set.require_approval(name).map_err(|e| anyhow!(e))?;
        }
    }
    Ok(())
}

/// Whether the run's model calls reach an OpenAI-compatible server.
fn speaks_openai(m: &ModelConfig) -> bool {
    match m {
        ModelConfig::Openai { .. } => true,
        ModelConfig::Replay {
            record: Some(up), ..
        } => speaks_openai(up),
        _ => false,
    }
}

/// The model provider a `[model]` table describes.
fn provider(config: &Config, m: &ModelConfig) -> anyhow::Result<Arc<dyn ModelProvider>> {
    Ok(match m {
        ModelConfig::Stub {
            latency_ms,
            answer,
            tool_call,
        } => Arc::new(StubProvider {
            latency: Duration::from_millis(*latency_ms),
            answer: answer.clone(),
            tool_call: tool_call
                .as_ref()
                .map(|c| (c.tool.clone(), c.arguments.to_string())),
            calls_before_answer: tool_call.as_ref().map_or(0, |c| c.times),
        }),
        ModelConfig::Openai {
            base_url,
            model,
            api_key_env,
            timeout_ms,
            max_retries,
            retry_window_ms,
            max_response_bytes,
            profile,
        } => {
            let api_key = match api_key_env {
                None => None,
                Some(var) => Some(std::env::var(var).map_err(|_| {
                    anyhow!(
                        "{}: model.api_key_env names {var}, which is not set in the environment",
                        config.path.display()
                    )
                })?),
            };
            Arc::new(OpenAiProvider::new(OpenAiSettings {
                base_url: base_url.clone(),
                model: model.clone(),
                api_key,
                timeout: Duration::from_millis(*timeout_ms),
                max_retries: *max_retries,
                retry_window: Duration::from_millis(*retry_window_ms),
                profile: *profile,
                max_response_bytes: *max_response_bytes,
            }))
        }
        ModelConfig::Replay { file, record } => {
            let file = config.resolve(file);
            match record {
                Some(upstream) => {
                    Arc::new(ReplayProvider::recording(provider(config, upstream)?, file))
                }
                None => {
                    Arc::new(ReplayProvider::replay(&file).map_err(|e| anyhow!("model.file: {e}"))?)
                }
            }
        }
    })
}
