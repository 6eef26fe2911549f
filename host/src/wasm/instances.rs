//! Live plugin instances behind the loop's consumer traits.

#[cfg(feature = "bench-hooks")]
use super::bindings::policy;
use super::bindings::{tool, wit};
use super::deadline::{CallDeadline, Overran};
use super::limits::{classify, PluginLimits};
use super::shape::{effect, step};
use super::{delta::DeltaTracker, lower, HostState, Plugin, PluginPre, WasmHost};
use crate::consumer::{
    Agent, ConsumerError, EventSink, Policy, RunView, ToolError, ToolProvider, TrapKind,
};
use crate::driver::ConsumersBuilder;
use crate::types::*;
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

/// A store for one instance, with its limits wired in.
fn new_store(
    host: &WasmHost,
    plugin: &Plugin,
    limits: &PluginLimits,
    wasi: WasiCtxBuilder,
) -> Store<HostState> {
    let mut limits = limits.clone();
    limits.memory_bytes = limits.memory_bytes.min(host.options().max_memory_bytes);
    let mut store = Store::new(host.engine(), HostState::new(&plugin.name, &limits, wasi));
    store.limiter(|s| &mut s.limits);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|ctx| {
        if ctx.data().deadline.passed() {
            Ok(UpdateDeadline::Interrupt)
        } else {
            // Let other runs on this thread make progress, then go on.
            Ok(UpdateDeadline::Yield(1))
        }
    });
    store
}

/// Sets the per-call budgets.
fn arm(store: &mut Store<HostState>) -> Result<(), ConsumerError> {
    let fuel = store.data().plugin_limits.fuel;
    store
        .set_fuel(fuel)
        .map_err(|e| ConsumerError::Failed(format!("cannot set fuel: {e}")))?;
    store.data_mut().arm();
    Ok(())
}

/// Lifts the fuel and deadline budgets for the benches' raw calls, which
/// arm nothing per call (once: a raw call never lowers them back).
#[cfg(feature = "bench-hooks")]
fn unbudgeted(store: &mut Store<HostState>) -> wasmtime::Result<()> {
    if store.get_fuel().unwrap_or(0) < 1 << 40 {
        store.set_fuel(u64::MAX / 2)?;
        store
            .data()
            .deadline
            .set_after(std::time::Duration::from_secs(1 << 30));
    }
    Ok(())
}

/// Awaits a call into the guest held to its wall-clock deadline, also
/// while the guest is blocked in a host call (see [`super::deadline`]). A
/// call dropped there ends as a deadline trap.
async fn bounded<T>(
    deadline: Arc<CallDeadline>,
    call: impl std::future::Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    match super::deadline::bounded(&deadline, call).await {
        Ok(out) => out,
        Err(Overran) => Err(wasmtime::Error::from(wasmtime::Trap::Interrupt)),
    }
}

fn deadline(store: &Store<HostState>) -> Arc<CallDeadline> {
    store.data().deadline.clone()
}

fn trapped(store: &Store<HostState>, e: &wasmtime::Error) -> ConsumerError {
    let (kind, message) = classify(e, &store.data().stderr_text());
    kind.count();
    ConsumerError::Trapped {
        kind,
        message: format!("{}: {message}", store.data().plugin),
    }
}

fn too_big(store: &Store<HostState>, what: &str, len: usize) -> Option<ConsumerError> {
    let max = store.data().plugin_limits.max_output_bytes;
    (len > max).then(|| {
        TrapKind::BadOutput.count();
        ConsumerError::Trapped {
            kind: TrapKind::BadOutput,
            message: format!(
                "{}: {what} of {len} bytes exceeds the plugin's output limit of {max} bytes",
                store.data().plugin
            ),
        }
    })
}

fn decision_size(d: &Decision) -> usize {
    match d {
        Decision::Call(c) => c.tool.len() + c.arguments.len(),
        Decision::Complete(s) | Decision::Fail(s) | Decision::Invalid(s) => s.len(),
    }
}

fn verdict_size(v: &Verdict) -> usize {
    match v {
        Verdict::Allow => 0,
        Verdict::Deny(s) | Verdict::Abort(s) => s.len(),
        Verdict::RequireApproval(a) => a.reason.len() + a.presentation.len(),
    }
}

/// The exports of an agent or policy plugin.
fn exports(plugin: &Plugin) -> Result<&lower::Exports, ConsumerError> {
    plugin.exports.as_ref().ok_or_else(|| {
        ConsumerError::Failed(format!(
            "{} is a {} plugin, not an agent or a policy",
            plugin.name, plugin.world
        ))
    })
}

fn no_capabilities() -> WasiCtxBuilder {
    WasiCtxBuilder::new()
}

/// An agent component serving one run.
pub struct WasmAgent {
    store: Store<HostState>,
    decide: lower::Decide,
    tracker: DeltaTracker,
    dead: Option<ConsumerError>,
}

impl WasmAgent {
    /// Instantiates `plugin` for one run and calls its `init`.
    pub async fn new(
        host: &WasmHost,
        plugin: &Plugin,
        config: &str,
        tools: &[ToolSpec],
        limits: &PluginLimits,
        run: &ConsumersBuilder,
    ) -> Result<WasmAgent, ConsumerError> {
        let PluginPre::Agent(pre) = &plugin.pre else {
            return Err(ConsumerError::Failed(format!(
                "{} is a {} plugin, not an agent",
                plugin.name, plugin.world
            )));
        };
        let mut store = new_store(host, plugin, limits, no_capabilities());
        store.data_mut().model = Some(run.model());
        store.data_mut().sink = Some(run.events());
        arm(&mut store)?;
        let instance = pre
            .instance_pre()
            .instantiate_async(&mut store)
            .await
            .map_err(|e| trapped(&store, &e))?;
        let (init, decide) = exports(plugin)?
            .agent(&mut store, &instance)
            .map_err(|e| ConsumerError::Failed(format!("{}: {e}", plugin.name)))?;
        let specs: Vec<_> = tools.iter().map(effect::tool_spec_out).collect();
        arm(&mut store)?;
        let init = bounded(deadline(&store), init.call(&mut store, config, &specs)).await;
        store.data_mut().report_dropped_logs();
        match init {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => {
                return Err(ConsumerError::Failed(format!(
                    "{}: init: {msg}",
                    plugin.name
                )))
            }
            Err(e) => return Err(trapped(&store, &e)),
        }
        Ok(WasmAgent {
            store,
            decide,
            tracker: DeltaTracker::default(),
            dead: None,
        })
    }
}

impl WasmAgent {
    /// Calls `decide` with an empty delta of `run` (not a reset, no steps,
    /// no approvals) through the same typed export and nothing else: no
    /// budgets armed, no tracker, no conversion or size check. Only for
    /// measuring what Keel adds to a call.
    #[cfg(feature = "bench-hooks")]
    pub async fn decide_raw(
        &mut self,
        run: &Run,
    ) -> wasmtime::Result<Result<wit::Decision, String>> {
        unbudgeted(&mut self.store)?;
        let delta = super::shape::run::ViewDeltaRef {
            reset: false,
            run: super::shape::run::run(run, run.step_count),
            steps: Vec::new(),
            approvals: Vec::new(),
        };
        self.decide.call(&mut self.store, delta).await
    }

    /// Makes the next call hand over the whole view again, as to a new
    /// instance (benchmarks compare this with a one-step delta).
    #[cfg(feature = "bench-hooks")]
    pub fn forget_view(&mut self) {
        self.tracker.invalidate();
    }
}

#[async_trait]
impl Agent for WasmAgent {
    fn name(&self) -> &str {
        plugin_stem(&self.store.data().plugin)
    }

    async fn decide(&mut self, view: RunView<'_>) -> Result<Decision, ConsumerError> {
        if let Some(e) = &self.dead {
            return Err(e.clone());
        }
        let delta = self.tracker.delta(view);
        self.store.data_mut().step = Some(view.run.step_count.saturating_sub(1));
        arm(&mut self.store)?;
        let called = bounded(
            deadline(&self.store),
            self.decide.call(&mut self.store, delta),
        )
        .await;
        self.store.data_mut().report_dropped_logs();
        let result = match called {
            Ok(Ok(d)) => {
                let d = step::decision_in(d);
                match too_big(&self.store, "the decision", decision_size(&d)) {
                    Some(e) => Err(e),
                    None => Ok(d),
                }
            }
            Ok(Err(msg)) => Err(ConsumerError::Failed(msg)),
            Err(e) => Err(trapped(&self.store, &e)),
        };
        if let Err(e) = &result {
            self.tracker.invalidate();
            if matches!(e, ConsumerError::Trapped { .. }) {
                self.dead = Some(e.clone());
            }
        }
        result
    }
}

/// A policy component serving one run.
pub struct WasmPolicy {
    store: Store<HostState>,
    /// For the raw bindings of `evaluate_raw`.
    #[cfg(feature = "bench-hooks")]
    instance: wasmtime::component::Instance,
    /// The generated bindings, made by the first `evaluate_raw`.
    #[cfg(feature = "bench-hooks")]
    raw: Option<policy::Policy>,
    evaluate: lower::Evaluate,
    /// The policy chose at `init` to see the run's info alone: its deltas
    /// carry no steps and no approvals.
    call_only: bool,
    tracker: DeltaTracker,
    dead: Option<ConsumerError>,
}

impl WasmPolicy {
    /// Instantiates `plugin` for one run and calls its `init`.
    pub async fn new(
        host: &WasmHost,
        plugin: &Plugin,
        config: &str,
        limits: &PluginLimits,
        run: &ConsumersBuilder,
    ) -> Result<WasmPolicy, ConsumerError> {
        let PluginPre::Policy(pre) = &plugin.pre else {
            return Err(ConsumerError::Failed(format!(
                "{} is a {} plugin, not a policy",
                plugin.name, plugin.world
            )));
        };
        let mut store = new_store(host, plugin, limits, no_capabilities());
        store.data_mut().sink = Some(run.events());
        arm(&mut store)?;
        let instance = pre
            .instance_pre()
            .instantiate_async(&mut store)
            .await
            .map_err(|e| trapped(&store, &e))?;
        let (init, evaluate) = exports(plugin)?
            .policy(&mut store, &instance)
            .map_err(|e| ConsumerError::Failed(format!("{}: {e}", plugin.name)))?;
        arm(&mut store)?;
        let init = bounded(deadline(&store), init.call(&mut store, config)).await;
        store.data_mut().report_dropped_logs();
        let view = match init {
            Ok(Ok(view)) => view,
            Ok(Err(msg)) => {
                return Err(ConsumerError::Failed(format!(
                    "{}: init: {msg}",
                    plugin.name
                )))
            }
            Err(e) => return Err(trapped(&store, &e)),
        };
        Ok(WasmPolicy {
            store,
            #[cfg(feature = "bench-hooks")]
            instance,
            #[cfg(feature = "bench-hooks")]
            raw: None,
            evaluate,
            call_only: view == wit::PolicyView::CallOnly,
            tracker: DeltaTracker::default(),
            dead: None,
        })
    }
}

impl WasmPolicy {
    /// The arguments of a raw `evaluate` (benchmarks).
    #[cfg(feature = "bench-hooks")]
    pub fn raw_parts(
        &mut self,
        call: &ToolCall,
        effect: Effect,
        view: RunView<'_>,
    ) -> (wit::ToolCall, wit::Effect, wit::ViewDelta) {
        let view = self.scoped(view);
        (
            wit::ToolCall::from(step::call(call)),
            effect::effect_out(effect),
            self.tracker.delta_owned(view),
        )
    }

    /// Whether the policy is handed the run's steps and approvals: it
    /// chose at `init` between the full view and the call alone.
    pub fn sees_steps(&self) -> bool {
        !self.call_only
    }

    /// What of `view` the policy asked to see.
    fn scoped<'a>(&self, view: RunView<'a>) -> RunView<'a> {
        if self.call_only {
            RunView {
                steps: &[],
                approvals: &[],
                ..view
            }
        } else {
            view
        }
    }

    /// Calls the export through the typed bindings alone: no budgets armed,
    /// no conversion, no checks. Only for measuring what Keel adds.
    #[cfg(feature = "bench-hooks")]
    pub async fn evaluate_raw(
        &mut self,
        call: &wit::ToolCall,
        effect: wit::Effect,
        delta: &wit::ViewDelta,
    ) -> wasmtime::Result<Result<wit::Verdict, String>> {
        unbudgeted(&mut self.store)?;
        let raw = match self.raw.take() {
            Some(raw) => raw,
            None => policy::Policy::new(&mut self.store, &self.instance)?,
        };
        let out = raw
            .call_evaluate(&mut self.store, call, effect, delta)
            .await;
        self.raw = Some(raw);
        out
    }
}

#[async_trait]
impl Policy for WasmPolicy {
    fn name(&self) -> &str {
        plugin_stem(&self.store.data().plugin)
    }

    async fn evaluate(
        &mut self,
        call: &ToolCall,
        effect: Effect,
        view: RunView<'_>,
    ) -> Result<Verdict, ConsumerError> {
        if let Some(e) = &self.dead {
            return Err(e.clone());
        }
        let view = self.scoped(view);
        let delta = self.tracker.delta(view);
        self.store.data_mut().step = Some(view.run.step_count.saturating_sub(1));
        arm(&mut self.store)?;
        let called = bounded(
            deadline(&self.store),
            self.evaluate.call(
                &mut self.store,
                step::call(call),
                effect::effect_out(effect),
                delta,
            ),
        )
        .await;
        self.store.data_mut().report_dropped_logs();
        let result = match called {
            Ok(Ok(v)) => {
                let v = step::verdict_in(v);
                match too_big(&self.store, "the verdict", verdict_size(&v)) {
                    Some(e) => Err(e),
                    None => Ok(v),
                }
            }
            Ok(Err(msg)) => Err(ConsumerError::Failed(msg)),
            Err(e) => Err(trapped(&self.store, &e)),
        };
        if let Err(e) = &result {
            self.tracker.invalidate();
            if matches!(e, ConsumerError::Trapped { .. }) {
                self.dead = Some(e.clone());
            }
        }
        result
    }
}

/// The WASI capabilities a tool's config grants.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCaps {
    /// (host directory, guest path, writable)
    pub dirs: Vec<(PathBuf, String, bool)>,
    /// Environment variables passed by name, with their values.
    pub env: Vec<(String, String)>,
    /// Outbound TCP/UDP and name lookup.
    pub network: bool,
}

impl ToolCaps {
    fn builder(&self) -> Result<WasiCtxBuilder, String> {
        let mut b = WasiCtxBuilder::new();
        for (host, guest, writable) in &self.dirs {
            let perms = if *writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            b.preopened_dir(host, guest, perms)
                .map_err(|e| format!("cannot grant {}: {e}", host.display()))?;
        }
        for (k, v) in &self.env {
            b.env(k, v);
        }
        if self.network {
            // TCP and UDP are off by default in WASI contexts: the grant
            // turns on each, for any address, with name lookup.
            b.inherit_network()
                .allow_tcp(true)
                .allow_udp(true)
                .allow_ip_name_lookup(true);
        }
        Ok(b)
    }
}

/// A tool component. Each call gets a fresh instance (initialised with the
/// tool's config), so no state survives from one call to the next unless the
/// tool is declared stateful, in which case one instance serves the run.
pub struct WasmTools {
    host: Arc<WasmHost>,
    plugin: Arc<Plugin>,
    config: String,
    limits: PluginLimits,
    caps: ToolCaps,
    specs: Vec<ToolSpec>,
    sink: Option<Arc<EventSink>>,
    stateful: Option<tokio::sync::Mutex<Option<(Store<HostState>, tool::Tool)>>>,
}

impl WasmTools {
    /// Loads the tool's specs through a first instance.
    pub async fn new(
        host: Arc<WasmHost>,
        plugin: Arc<Plugin>,
        config: &str,
        limits: PluginLimits,
        caps: ToolCaps,
        stateful: bool,
        sink: Option<Arc<EventSink>>,
    ) -> Result<WasmTools, ConsumerError> {
        Self::with_known_specs(host, plugin, config, limits, caps, stateful, sink, None).await
    }

    /// [`WasmTools::new`], with the specs taken from `known` when given (an
    /// earlier instance's [`WasmTools::specs`] for the same plugin and
    /// config): then no instance is made until the first call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn with_known_specs(
        host: Arc<WasmHost>,
        plugin: Arc<Plugin>,
        config: &str,
        limits: PluginLimits,
        caps: ToolCaps,
        stateful: bool,
        sink: Option<Arc<EventSink>>,
        known: Option<Vec<ToolSpec>>,
    ) -> Result<WasmTools, ConsumerError> {
        let mut t = WasmTools {
            host,
            plugin,
            config: config.to_string(),
            limits,
            caps,
            specs: vec![],
            sink,
            stateful: stateful.then(|| tokio::sync::Mutex::new(None)),
        };
        if let Some(specs) = known {
            t.specs = specs;
            return Ok(t);
        }
        let (mut store, bindings) = t.instance().await?;
        arm(&mut store)?;
        let specs = bounded(deadline(&store), bindings.call_specs(&mut store)).await;
        store.data_mut().report_dropped_logs();
        let specs = specs.map_err(|e| trapped(&store, &e))?;
        let size: usize = specs
            .iter()
            .map(|s| s.name.len() + s.description.len() + s.parameters.len())
            .sum();
        if let Some(e) = too_big(&store, "the tool specs", size) {
            return Err(e);
        }
        t.specs = specs.into_iter().map(effect::tool_spec_in).collect();
        if let Some(slot) = &t.stateful {
            *slot.lock().await = Some((store, bindings));
        }
        Ok(t)
    }

    async fn instance(&self) -> Result<(Store<HostState>, tool::Tool), ConsumerError> {
        let PluginPre::Tool(pre) = &self.plugin.pre else {
            return Err(ConsumerError::Failed(format!(
                "{} is a {} plugin, not a tool",
                self.plugin.name, self.plugin.world
            )));
        };
        let wasi = self.caps.builder().map_err(ConsumerError::Failed)?;
        let mut store = new_store(&self.host, &self.plugin, &self.limits, wasi);
        store.data_mut().sink = self.sink.clone();
        arm(&mut store)?;
        let bindings = pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| trapped(&store, &e))?;
        arm(&mut store)?;
        let init = bounded(
            deadline(&store),
            bindings.call_init(&mut store, &self.config),
        )
        .await;
        store.data_mut().report_dropped_logs();
        match init {
            Ok(Ok(())) => Ok((store, bindings)),
            Ok(Err(msg)) => Err(ConsumerError::Failed(format!(
                "{}: init: {msg}",
                self.plugin.name
            ))),
            Err(e) => Err(trapped(&store, &e)),
        }
    }

    async fn call_on(
        store: &mut Store<HostState>,
        bindings: &tool::Tool,
        name: &str,
        arguments: &str,
    ) -> Result<String, ToolError> {
        let as_tool_error = |e: ConsumerError| match e {
            ConsumerError::Trapped { kind, message } => ToolError {
                message,
                trap: Some(kind),
                fatal: false,
            },
            other => ToolError::new(other.to_string()),
        };
        arm(store).map_err(as_tool_error)?;
        let (name, arguments) = (name.to_string(), arguments.to_string());
        let called = bounded(
            deadline(store),
            bindings.call_call(&mut *store, &name, &arguments),
        )
        .await;
        store.data_mut().report_dropped_logs();
        match called {
            Ok(Ok(out)) => match too_big(store, "the result", out.len()) {
                Some(e) => Err(as_tool_error(e)),
                None => Ok(out),
            },
            Ok(Err(msg)) => Err(ToolError::new(msg)),
            Err(e) => Err(as_tool_error(trapped(store, &e))),
        }
    }
}

#[async_trait]
impl ToolProvider for WasmTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    async fn call(&self, name: &str, arguments: &str) -> Result<String, ToolError> {
        if let Some(slot) = &self.stateful {
            let mut guard = slot.lock().await;
            if guard.is_none() {
                *guard = Some(
                    self.instance()
                        .await
                        .map_err(|e| ToolError::new(e.to_string()))?,
                );
            }
            let Some((store, bindings)) = guard.as_mut() else {
                return Err(ToolError::new("no instance"));
            };
            let r = Self::call_on(store, bindings, name, arguments).await;
            if r.as_ref().is_err_and(|e| e.trap.is_some()) {
                *guard = None; // a trapped instance is never used again
            }
            return r;
        }
        let (mut store, bindings) = self.instance().await.map_err(|e| match e {
            ConsumerError::Trapped { kind, message } => ToolError {
                message,
                trap: Some(kind),
                fatal: false,
            },
            other => ToolError::new(other.to_string()),
        })?;
        Self::call_on(&mut store, &bindings, name, arguments).await
    }
}

/// A plugin's name as traces show it: its file's stem
/// (`agent-llm-rust` for `target/plugins/agent-llm-rust.wasm`).
fn plugin_stem(plugin: &str) -> &str {
    std::path::Path::new(plugin)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(plugin)
}
