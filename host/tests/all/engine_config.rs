//! The wasm engine is configured as Keel relies on: what bounds a plugin
//! (fuel, epochs, the stack, the pool's slots and memory cap) and what its
//! costs were measured with (pooling, slot resets, Cranelift at speed,
//! signal-based traps). A wasmtime upgrade or a cargo feature unification
//! that changes any of it fails here, not silently in a benchmark or, worse,
//! in a plugin that is no longer bounded.

use keel::wasm::{EngineOptions, WasmHost};
use wasmtime::{Enabled, OptLevel, Strategy, WasmFeatures};

fn host(opts: EngineOptions) -> std::sync::Arc<WasmHost> {
    WasmHost::new(opts).expect("the wasm engine starts")
}

#[test]
fn every_plugin_is_bounded_by_fuel_epochs_and_its_stack() {
    let opts = EngineOptions {
        max_instances: 64,
        ..EngineOptions::default()
    };
    let (stack, h) = (opts.max_wasm_stack, host(opts));
    let e = h.engine();
    assert!(e.get_consume_fuel(), "fuel metering is off");
    assert!(e.get_epoch_interruption(), "epoch deadlines are off");
    assert_eq!(e.get_max_wasm_stack(), stack);
    // Async calls run on a fiber with the wasm stack and room for the host.
    assert_eq!(e.get_async_stack_size(), stack + (1 << 20));
    // Out-of-bounds accesses and stack overflows trap through signals and
    // guard pages, as the hostile-plugin tests and the call costs assume.
    assert!(e.get_signals_based_traps());
    assert!(e.get_memory_guard_size() > 0);
}

#[test]
fn the_pool_is_sized_and_reset_as_measured() {
    let opts = EngineOptions {
        max_instances: 64,
        max_memory_bytes: 64 << 20,
        keep_resident_bytes: 16 << 20,
        cow_images: false,
        ..EngineOptions::default()
    };
    let h = host(opts);
    let e = h.engine();
    let pool = e
        .get_pooling_config()
        .expect("the pooling allocator is configured");
    // A slot per instance and an eighth more (see `WasmHost::new`).
    assert_eq!(pool.get_total_component_instances(), 72);
    assert_eq!(pool.get_total_stacks(), 72);
    assert_eq!(pool.get_total_memories(), 128);
    // A plugin's memory cap cannot exceed its slot.
    assert_eq!(pool.get_max_memory_size(), 64 << 20);
    // Freed slots are reset in place, at once.
    assert_eq!(pool.get_decommit_batch_size(), 1);
    assert_eq!(pool.get_pagemap_scan(), Enabled::Auto);
    assert_eq!(pool.get_memory_keep_resident(), 16 << 20);
    assert!(!e.get_memory_init_cow());
    assert!(e.pooling_allocator_metrics().is_some());

    let on_demand = host(EngineOptions {
        pooling: false,
        ..EngineOptions::default()
    });
    assert!(on_demand.engine().get_pooling_config().is_none());
    assert!(on_demand.engine().get_memory_init_cow());
}

#[test]
fn plugins_are_compiled_natively_by_cranelift_for_speed() {
    let h = host(EngineOptions {
        max_instances: 8,
        ..EngineOptions::default()
    });
    let e = h.engine();
    assert_eq!(e.get_strategy(), Some(Strategy::Cranelift));
    assert!(!e.is_pulley(), "plugins would be interpreted");
    assert!(matches!(e.get_cranelift_opt_level(), Some(OptLevel::Speed)));
    assert!(e.get_parallel_compilation());
    let f = e.get_wasm_features();
    assert!(f.contains(WasmFeatures::COMPONENT_MODEL));
    // Wasmtime's own debugging aids cost at every call and stay off.
    assert!(!e.get_guest_debug());
    assert!(!e.get_debug_info());
    assert!(!e.get_async_stack_zeroing());
}
