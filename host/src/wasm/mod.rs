//! Plugins as sandboxed WebAssembly components.
//!
//! One [`WasmHost`] per process owns the `wasmtime::Engine` (pooling
//! allocator, copy-on-write memory images, epoch interruption driven by a
//! ticker thread, fuel), the linkers of the three worlds and the compile
//! cache. Loading a plugin checks its hash pin, compiles it (or loads it
//! from the cache) and checks that it targets the world it is used for.
//! Each run gets its own agent and policy instances ([`WasmAgent`],
//! [`WasmPolicy`]); tools get a fresh instance per call ([`WasmTools`]).

pub(crate) mod bindings;
pub mod cache;
pub mod deadline;
mod delta;
pub mod inspect;
mod instances;
pub mod limits;
mod links;
mod lower;
pub(crate) mod shape;
mod state;

pub use cache::CacheOutcome;
pub use instances::{ToolCaps, WasmAgent, WasmPolicy, WasmTools};
pub use limits::PluginLimits;
pub use state::HostState;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// The world a component targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum World {
    /// An agent, which decides each step of a run.
    Agent,
    /// A policy, which evaluates what the agent decided.
    Policy,
    /// A tool, instantiated afresh for each call.
    Tool,
}

impl World {
    /// The world's lowercase name, as written in config and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            World::Agent => "agent",
            World::Policy => "policy",
            World::Tool => "tool",
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a plugin cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The component file could not be read.
    #[error("{path}: cannot read the component")]
    Io {
        /// The file that could not be read.
        path: String,
        /// The underlying read error.
        source: std::io::Error,
    },
    /// The file's sha256 differs from the one pinned in the config.
    #[error("{path}: sha256 is {actual}, but the config pins {expected}; refusing to run it")]
    PinMismatch {
        /// The file or name the bytes came from.
        path: String,
        /// The sha256 the config pins, in hex.
        expected: String,
        /// The sha256 of the bytes actually read, in hex.
        actual: String,
    },
    /// The bytes are not a component, or could not be compiled or given a memory image.
    #[error("{path}: not a WebAssembly component ({detail})")]
    NotAComponent {
        /// The file or name the bytes came from.
        path: String,
        /// What is wrong with the bytes.
        detail: String,
    },
    /// The component's imports or exports do not match the world it is loaded for.
    #[error("{path}: does not fit the {world} world: {detail}")]
    WrongWorld {
        /// The file or name the bytes came from.
        path: String,
        /// The world the component was expected to target.
        world: World,
        /// What does not match.
        detail: String,
    },
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Use the pooling instance allocator (fast instantiation from reused slots).
    pub pooling: bool,
    /// Instances the pool can hold at once (agents + policies + running tools).
    pub max_instances: u32,
    /// Largest linear memory a pooled instance can have, in bytes. Plugin
    /// memory caps above this are clamped to it.
    pub max_memory_bytes: usize,
    /// Directory of the on-disk compile cache; `None` compiles every time without storing.
    pub cache_dir: Option<PathBuf>,
    /// Map each component's initial memory copy-on-write from one shared
    /// image (fast for components with large data, such as Python and
    /// JavaScript ones) instead of copying it in at instantiation (cheaper
    /// for small images, and one memory mapping fewer per instance where
    /// `vm.max_map_count` is the limit).
    pub cow_images: bool,
    /// Wasm stack per call, in bytes (engine-wide).
    pub max_wasm_stack: usize,
    /// How often the epoch ticks; deadlines are checked at this granularity.
    pub epoch_tick: Duration,
    /// How much of a freed instance's linear memory stays mapped for the
    /// next instance in its pool slot: the pages it dirtied in this range
    /// are reset in place (found with `PAGEMAP_SCAN` where the kernel has
    /// it), pages beyond it go back to the kernel. A run's agent and policy
    /// grow their memory by every step they are handed; pages kept here
    /// are not faulted in again by the next run. Resident memory never
    /// exceeds what instances actually dirtied.
    pub keep_resident_bytes: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            pooling: true,
            max_instances: 1000,
            max_memory_bytes: 1 << 30,
            cache_dir: None,
            cow_images: true,
            max_wasm_stack: 1 << 20,
            epoch_tick: Duration::from_millis(5),
            keep_resident_bytes: 16 << 20,
        }
    }
}

/// A loaded, checked component, ready to instantiate.
pub struct Plugin {
    /// The path or name it was loaded under, used in messages.
    pub name: String,
    /// The world it was checked against.
    pub world: World,
    /// The sha256 of the component's bytes, in lowercase hex.
    pub sha256: String,
    /// The size of the component's bytes, in bytes.
    pub size: usize,
    /// Whether it was loaded from the compile cache or compiled.
    pub cache: CacheOutcome,
    pub(crate) pre: PluginPre,
    /// An agent's or a policy's exports, found once (none for a tool).
    pub(crate) exports: Option<lower::Exports>,
}

pub(crate) enum PluginPre {
    Agent(bindings::agent::AgentPre<HostState>),
    Policy(bindings::policy::PolicyPre<HostState>),
    Tool(bindings::tool::ToolPre<HostState>),
}

/// Refuses what is not a component, with the same words wherever a file is
/// read (`run`, `plugin inspect`, `check`, `compile`): a core module is told
/// how to become a component.
pub fn require_component(name: &str, bytes: &[u8]) -> Result<(), PluginError> {
    if wasmparser::Parser::is_component(bytes) {
        return Ok(());
    }
    let detail = if wasmparser::Parser::is_core_wasm(bytes) {
        "it is a core wasm module; turn it into a component (wasm-tools component new, or build for wasm32-wasip2)".to_string()
    } else {
        "no component header".to_string()
    };
    Err(PluginError::NotAComponent {
        path: name.into(),
        detail,
    })
}

/// The process's wasm engine and everything that goes with it.
pub struct WasmHost {
    engine: Engine,
    opts: EngineOptions,
    agent_linker: Linker<HostState>,
    policy_linker: Linker<HostState>,
    tool_linker: Linker<HostState>,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for WasmHost {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl WasmHost {
    /// Builds the engine and linkers from `opts` and starts the thread that ticks the epoch.
    pub fn new(opts: EngineOptions) -> anyhow::Result<Arc<WasmHost>> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.consume_fuel(true);
        config.max_wasm_stack(opts.max_wasm_stack);
        config.async_stack_size(opts.max_wasm_stack + (1 << 20));
        config.memory_init_cow(opts.cow_images);
        // `KEEL_PERFMAP=1` writes /tmp/perf-PID.map, so that `perf report`
        // names the plugins' compiled functions instead of bare addresses.
        if std::env::var_os("KEEL_PERFMAP").is_some_and(|v| v == "1") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        if opts.pooling {
            let mut pool = PoolingAllocationConfig::new();
            let n = opts.max_instances.max(8);
            // The pools whose slots match instances one to one get an
            // eighth more. Their free slots are split between per-CPU
            // shards, and a thread that finds its own shard full probes the
            // others one lock at a time: with only a handful free, a thread
            // preempted between two probes while another takes the last
            // free slots of the second shard fails to allocate, although
            // slots were freed meanwhile (seen once in the fan-out: 1 run
            // of 20,000 refused "maximum concurrent limit of 10016 for
            // fibers", while at most 10,000 stacks were ever live). These
            // slots are small; memories, at several GiB of address space
            // each, already have twice as many slots as instances.
            let roomy = n + n / 8;
            pool.total_component_instances(roomy);
            pool.total_core_instances(n * 4);
            pool.total_memories(n * 2);
            pool.total_tables(n * 4);
            // A store keeps its last call's stack for the next call: one
            // stack per live instance.
            pool.total_stacks(roomy);
            pool.max_memory_size(opts.max_memory_bytes);
            pool.max_memories_per_module(2);
            pool.max_tables_per_module(4);
            pool.table_elements(200_000);
            pool.max_core_instance_size(8 << 20);
            pool.max_component_instance_size(4 << 20);
            pool.max_unused_warm_slots(n / 4);
            // Reset a freed slot by rewriting only its dirty pages (found with
            // the PAGEMAP_SCAN ioctl where the kernel has it) instead of
            // madvise, which flushes every core's TLB.
            pool.pagemap_scan(wasmtime::Enabled::Auto);
            pool.linear_memory_keep_resident(opts.keep_resident_bytes);
            pool.table_keep_resident(64 << 10);
            // Return each freed slot at once. A batch would hold the slot
            // back until 64 others had been freed (a scan always queues a
            // region, if only an empty one), so that the next run's
            // instance got a cold slot and faulted in every page again:
            // 1,600 faults, ~8 µs a step, in a 400-step run at 8 KiB.
            pool.decommit_batch_size(1);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config)?;
        let mut agent_linker = Linker::new(&engine);
        let mut policy_linker = Linker::new(&engine);
        let mut tool_linker = Linker::new(&engine);
        for l in [&mut agent_linker, &mut policy_linker, &mut tool_linker] {
            wasmtime_wasi::p2::add_to_linker_async(l)?;
        }
        // Only tools are ever granted a directory.
        links::refuse_escaping_links(&mut tool_linker)?;
        use wasmtime::component::HasSelf;
        bindings::agent::Agent::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut agent_linker,
            |s| s,
        )?;
        bindings::policy::Policy::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut policy_linker,
            |s| s,
        )?;
        bindings::tool::Tool::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut tool_linker,
            |s| s,
        )?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (e, stop, tick) = (engine.weak(), ticker_stop.clone(), opts.epoch_tick);
        std::thread::Builder::new()
            .name("keel-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    match e.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        Ok(Arc::new(WasmHost {
            engine,
            opts,
            agent_linker,
            policy_linker,
            tool_linker,
            ticker_stop,
        }))
    }

    /// The wasmtime engine all plugins are compiled and run with.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The settings the engine was built with.
    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// Reads, pins, compiles (or loads from the cache) and checks a plugin.
    pub fn load(
        &self,
        path: &Path,
        world: World,
        pin: Option<&str>,
    ) -> Result<Arc<Plugin>, PluginError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| PluginError::Io {
            path: p.clone(),
            source,
        })?;
        self.load_bytes(&p, &bytes, world, pin)
    }

    /// Like [`WasmHost::load`], for bytes already in memory; `name` stands for the path in messages.
    pub fn load_bytes(
        &self,
        name: &str,
        bytes: &[u8],
        world: World,
        pin: Option<&str>,
    ) -> Result<Arc<Plugin>, PluginError> {
        let sha256 = cache::sha256_hex(bytes);
        if let Some(expected) = pin {
            if !expected.eq_ignore_ascii_case(&sha256) {
                return Err(PluginError::PinMismatch {
                    path: name.into(),
                    expected: expected.into(),
                    actual: sha256,
                });
            }
        }
        require_component(name, bytes)?;
        let (component, outcome) =
            cache::load_or_compile(&self.engine, self.opts.cache_dir.as_deref(), &sha256, bytes)
                .map_err(|e| PluginError::NotAComponent {
                    path: name.into(),
                    detail: format!("{e:#}"),
                })?;
        memory_image(&component).map_err(|e| PluginError::NotAComponent {
            path: name.into(),
            detail: format!("cannot build its memory image: {e:#}"),
        })?;
        let pre = self
            .prepare(&component, world)
            .map_err(|detail| PluginError::WrongWorld {
                path: name.into(),
                world,
                detail,
            })?;
        let main = match world {
            World::Agent => Some("decide"),
            World::Policy => Some("evaluate"),
            World::Tool => None,
        };
        let exports = main
            .map(|main| lower::Exports::find(&component, main))
            .transpose()
            .map_err(|detail| PluginError::WrongWorld {
                path: name.into(),
                world,
                detail,
            })?;
        Ok(Arc::new(Plugin {
            name: name.into(),
            world,
            sha256,
            size: bytes.len(),
            cache: outcome,
            pre,
            exports,
        }))
    }

    /// Whether `component` fits `world`: exactly the checks [`WasmHost::load`]
    /// makes (imports, exports and their types), or why not.
    pub fn fits(&self, component: &Component, world: World) -> Result<(), String> {
        self.prepare(component, world)?;
        if world != World::Tool {
            let main = if world == World::Agent {
                "decide"
            } else {
                "evaluate"
            };
            lower::Exports::find(component, main)?;
        }
        Ok(())
    }

    fn prepare(&self, component: &Component, world: World) -> Result<PluginPre, String> {
        inspect::check_imports(&self.engine, component, world)?;
        let err = |e: wasmtime::Error| format!("{e:#}");
        Ok(match world {
            World::Agent => PluginPre::Agent(
                bindings::agent::AgentPre::new(
                    self.agent_linker.instantiate_pre(component).map_err(err)?,
                )
                .map_err(err)?,
            ),
            World::Policy => PluginPre::Policy(
                bindings::policy::PolicyPre::new(
                    self.policy_linker.instantiate_pre(component).map_err(err)?,
                )
                .map_err(err)?,
            ),
            World::Tool => PluginPre::Tool(
                bindings::tool::ToolPre::new(
                    self.tool_linker.instantiate_pre(component).map_err(err)?,
                )
                .map_err(err)?,
            ),
        })
    }
}

/// Builds the copy-on-write image every instance's memory starts from, at
/// load rather than at the first instantiate. On Linux it is a sealed memfd,
/// and the kernel can refuse the seal for a moment (`EBUSY` while a page of
/// the fresh file is still referenced from another CPU), so a refusal is
/// tried again a few times before the load fails.
fn memory_image(component: &wasmtime::component::Component) -> anyhow::Result<()> {
    let mut wait = std::time::Duration::from_millis(5);
    for _ in 0..5 {
        if component.initialize_copy_on_write_image().is_ok() {
            return Ok(());
        }
        std::thread::sleep(wait);
        wait *= 2;
    }
    Ok(component.initialize_copy_on_write_image()?)
}
