//! Keel: a durable agent runtime and WebAssembly plugin host.
//!
//! * [`store`]: the SQLite store (schema, transitions, leases).
//! * [`driver`]: the agent loop and its state machine.
//! * [`consumer`]: the traits the loop drives (agent, policy, tools).
//! * [`wasm`]: plugins as sandboxed WebAssembly components.
//! * [`model`]: model providers and per-run accounting.
//! * [`tools`]: the run's tool table and argument validation.
//! * [`render`]: a run as chat messages for a model.
//! * [`config`]: the TOML config of the `keel` binary.
//! * [`bench`]: load harnesses behind `keel bench`.

pub mod audit;
pub mod bench;
pub mod cli;
pub mod config;
pub mod consumer;
pub mod driver;
pub mod model;
pub mod plugin_test;
pub mod render;
pub mod retention;
pub mod scaffold;
pub mod serve;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod types;
pub mod wasm;

pub use consumer::{Agent, ConsumerError, FnTool, Policy, RunView, ToolError, ToolProvider};
pub use driver::{Consumers, DriverError, Outcome, Runtime};
pub use store::{Store, StoreError, StoreHandle, Sync};
pub use tools::ToolSet;

/// The test and benchmark hooks compiled into this build (the crate's
/// `fault-injection`, `test-hooks` and `bench-hooks` features): empty in
/// the `keel` an operator builds, all three under `cargo test`.
pub const BUILD_HOOKS: &[&str] = &[
    #[cfg(feature = "fault-injection")]
    "fault-injection",
    #[cfg(feature = "test-hooks")]
    "test-hooks",
    #[cfg(feature = "bench-hooks")]
    "bench-hooks",
];
pub use types::*;
