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
//! * [`serve`]: `keel serve`, the HTTP API and the page.
//!
//! The commands of the `keel` binary, its load harnesses (`keel bench`),
//! `keel plugin new` and `keel plugin test` live in the binary, not here.

#![warn(missing_docs)]

pub mod audit;
pub mod config;
pub mod consumer;
pub mod driver;
pub mod model;
pub mod render;
pub mod retention;
pub mod serve;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod types;
pub mod wasm;

pub use consumer::{Agent, ConsumerError, FnTool, Policy, RunView, ToolError, ToolProvider};
pub use driver::{Consumers, ConsumersBuilder, DriverError, Outcome, Runtime};
pub use store::{Durability, Store, StoreError, StoreHandle};
pub use tools::ToolSet;
pub use types::{
    canonical_json, Approval, ApprovalKind, ApprovalRequest, ApprovalStatus, Decision, Effect,
    EventKind, Limits, Observation, ObservationKind, Run, RunReason, RunStatus, Step, StepState,
    ToolCall, ToolSpec, Verdict, DEFAULT_RUN_DEADLINE_MS, MAX_GOAL_BYTES,
};

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
