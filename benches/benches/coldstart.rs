//! Cold start of the same plugin (policy-rules) built from Rust, C, Python
//! and JavaScript: compile, load from the compile cache, instantiate from
//! the `InstancePre` with `init` (from the pooling allocator's reused slots,
//! and on demand, each instance's memory mapped afresh), and the first call.
//!
//!     cargo bench -p keel-benches --bench coldstart

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use keel::consumer::{EventSink, RunView};
use keel::wasm::{cache, EngineOptions, PluginLimits, WasmHost, WasmPolicy, World};
use keel::*;
use keel_benches::*;
use std::sync::Arc;
use std::time::Duration;

fn bench_coldstart(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = plugins_dir();
    let cache_dir = tempfile::tempdir().unwrap();
    let host = WasmHost::new(EngineOptions {
        cache_dir: Some(cache_dir.path().to_path_buf()),
        ..EngineOptions::default()
    })
    .unwrap();
    let on_demand = WasmHost::new(EngineOptions {
        pooling: false,
        cache_dir: Some(cache_dir.path().to_path_buf()),
        ..EngineOptions::default()
    })
    .unwrap();
    let rules = r#"{"rules":[{"tool":"echo","action":"allow"}]}"#;
    let run = bench_run(1);
    let call = ToolCall {
        tool: "echo".into(),
        arguments: "{}".into(),
    };
    let mut g = c.benchmark_group("coldstart");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(2));
    for lang in ["rust", "c", "py", "js"] {
        let file = dir.join(format!("policy-rules-{lang}.wasm"));
        let bytes = std::fs::read(&file).unwrap();
        let sha = cache::sha256_hex(&bytes);
        eprintln!("policy-rules-{lang}: {} bytes", bytes.len());
        g.bench_function(BenchmarkId::new("compile", lang), |b| {
            b.iter(|| wasmtime::component::Component::new(host.engine(), &bytes).unwrap())
        });
        cache::load_or_compile(host.engine(), Some(cache_dir.path()), &sha, &bytes).unwrap();
        g.bench_function(BenchmarkId::new("load-from-cache", lang), |b| {
            b.iter(|| {
                let (_, outcome) =
                    cache::load_or_compile(host.engine(), Some(cache_dir.path()), &sha, &bytes)
                        .unwrap();
                assert_eq!(outcome, cache::CacheOutcome::Hit);
            })
        });
        let plugin = host.load(&file, World::Policy, None).unwrap();
        let plugin_on_demand = on_demand.load(&file, World::Policy, None).unwrap();
        for (alloc, host, plugin) in [
            ("pooled", &host, &plugin),
            ("on-demand", &on_demand, &plugin_on_demand),
        ] {
            let id = BenchmarkId::new(format!("instantiate-and-init/{alloc}"), lang);
            g.bench_function(id, |b| {
                b.iter(|| {
                    rt.block_on(WasmPolicy::new(
                        host,
                        plugin,
                        rules,
                        &PluginLimits::default(),
                        Arc::new(EventSink::default()),
                    ))
                    .unwrap()
                })
            });
        }
        g.bench_function(BenchmarkId::new("first-call", lang), |b| {
            b.iter_batched(
                || {
                    rt.block_on(WasmPolicy::new(
                        &host,
                        &plugin,
                        rules,
                        &PluginLimits::default(),
                        Arc::new(EventSink::default()),
                    ))
                    .unwrap()
                },
                |mut p| {
                    rt.block_on(p.evaluate(
                        &call,
                        Effect::ReadOnly,
                        RunView {
                            run: &run,
                            steps: &[],
                            approvals: &[],
                        },
                    ))
                    .unwrap()
                },
                criterion::BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench_coldstart);
criterion_main!(benches);
