//! Keel's integration tests, one binary for all of them, so that a cold
//! `make test` links the host and wasmtime into a test once instead of
//! once per file. Each module is one area; `common` holds what they share.
//!
//! Two suites keep a binary of their own: `alloc_budget` (its counting
//! global allocator would count every other test's allocations) and
//! `pg_restart` (it stops the PostgreSQL cluster the engine tests use;
//! cargo runs test binaries one at a time, so nothing else sees it down).
//!
//! Run one module with `cargo test -p keel --test all MODULE::`.

#[macro_use]
mod common;

mod api;
mod build_hooks;
mod cli;
mod cli_operator;
mod conformance;
mod crash;
mod engine_config;
mod engines;
mod fanout;
mod group_commit;
mod hardening;
mod litellm;
mod loop_native;
mod mcp;
mod model_providers;
mod page;
mod postgres;
mod sandbox;
mod serve;
mod step_cache;
mod store_faults;
mod telemetry;
mod validity;
mod wasm_loop;
