//! Cold start of the same plugins built from each language: policy-rules
//! (Rust, C, Python, JavaScript) and agent-scripted (Rust, Python,
//! JavaScript). Compile, load from the compile cache, instantiate from the
//! `InstancePre` with `init` (from the pooling allocator's reused slots, and
//! on demand, each instance's memory mapped afresh), the first call, and the
//! next call once the instance holds a run of eight steps (its delta carries
//! one new step).
//!
//!     cargo bench -p keel-benches --bench coldstart
//!
//! `KEEL_COLDSTART_BEFORE=DIR` adds rows for builds of the same plugins kept
//! in DIR (`<plugin>-<lang>.wasm`, labelled `<lang>-before`), to compare
//! two builds in one run. `KEEL_COLDSTART_COMPILE=0` skips the compile bench
//! (10 samples of a 15 s compile each for Python and JavaScript) and prints
//! the one compile that fills the cache instead.

use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use keel::consumer::{Agent, Policy, RunView};
use keel::model::StubProvider;
use keel::wasm::{
    cache, EngineOptions, Plugin, PluginLimits, WasmAgent, WasmHost, WasmPolicy, World,
};
use keel::ConsumersBuilder;
use keel::*;
use keel_benches::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RULES: &str = r#"{"rules":[{"tool":"echo","action":"allow"}]}"#;
/// Steps the instance has seen before the timed call.
const HELD: u32 = 8;

/// The builds to compare: (label, file).
fn builds(plugin: &str, langs: &[&str]) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = langs
        .iter()
        .map(|l| {
            (
                l.to_string(),
                plugins_dir().join(format!("{plugin}-{l}.wasm")),
            )
        })
        .collect();
    if let Some(before) = std::env::var_os("KEEL_COLDSTART_BEFORE") {
        for l in langs {
            let f = PathBuf::from(&before).join(format!("{plugin}-{l}.wasm"));
            if f.is_file() {
                out.push((format!("{l}-before"), f));
            }
        }
    }
    out
}

fn compile_and_cache(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    host: &WasmHost,
    cache_dir: &std::path::Path,
    name: &str,
    label: &str,
    bytes: &[u8],
) {
    let sha = cache::sha256_hex(bytes);
    if std::env::var("KEEL_COLDSTART_COMPILE").as_deref() != Ok("0") {
        g.bench_function(BenchmarkId::new(format!("{name}/compile"), label), |b| {
            b.iter(|| wasmtime::component::Component::new(host.engine(), bytes).unwrap())
        });
    }
    let started = Instant::now();
    cache::load_or_compile(host.engine(), Some(cache_dir), &sha, bytes).unwrap();
    eprintln!(
        "{name}-{label}: {} bytes, first compile {:.2?}",
        bytes.len(),
        started.elapsed()
    );
    g.bench_function(
        BenchmarkId::new(format!("{name}/load-from-cache"), label),
        |b| {
            b.iter(|| {
                let (_, outcome) =
                    cache::load_or_compile(host.engine(), Some(cache_dir), &sha, bytes).unwrap();
                assert_eq!(outcome, cache::CacheOutcome::Hit);
            })
        },
    );
}

fn bench_coldstart(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
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
    let call = ToolCall {
        tool: "echo".into(),
        arguments: "{}".into(),
    };
    let steps: Vec<Step> = (0..=HELD).map(|i| done_step(i, 0)).collect();
    let (held_run, next_run, first_run) = (bench_run(HELD + 1), bench_run(HELD + 2), bench_run(1));
    let held = &steps[..HELD as usize];
    let held_view = || RunView {
        run: &held_run,
        steps: held,
        approvals: &[],
    };
    let next_view = || RunView {
        run: &next_run,
        steps: &steps,
        approvals: &[],
    };
    let first_view = || RunView {
        run: &first_run,
        steps: &[],
        approvals: &[],
    };
    let mut g = c.benchmark_group("coldstart");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(2));

    let new_policy = |host: &WasmHost, plugin: &Plugin| {
        rt.block_on(WasmPolicy::new(
            host,
            plugin,
            RULES,
            &PluginLimits::default(),
            &ConsumersBuilder::new(Arc::new(StubProvider::default())),
        ))
        .unwrap()
    };
    for (label, file) in builds("policy-rules", &["rust", "c", "py", "js"]) {
        let bytes = std::fs::read(&file).unwrap();
        compile_and_cache(
            &mut g,
            &host,
            cache_dir.path(),
            "policy-rules",
            &label,
            &bytes,
        );
        let plugin = host.load(&file, World::Policy, None).unwrap();
        let plugin_on_demand = on_demand.load(&file, World::Policy, None).unwrap();
        for (alloc, h, p) in [
            ("pooled", &host, &plugin),
            ("on-demand", &on_demand, &plugin_on_demand),
        ] {
            let id = BenchmarkId::new(format!("policy-rules/instantiate-and-init/{alloc}"), &label);
            g.bench_function(id, |b| b.iter(|| new_policy(h, p)));
        }
        g.bench_function(BenchmarkId::new("policy-rules/first-call", &label), |b| {
            b.iter_batched(
                || new_policy(&host, &plugin),
                |mut p| {
                    rt.block_on(p.evaluate(&call, Effect::ReadOnly, first_view()))
                        .unwrap()
                },
                criterion::BatchSize::PerIteration,
            )
        });
        g.bench_function(
            BenchmarkId::new("policy-rules/one-step-delta", &label),
            |b| {
                b.iter_batched(
                    || {
                        let mut p = new_policy(&host, &plugin);
                        rt.block_on(p.evaluate(&call, Effect::ReadOnly, held_view()))
                            .unwrap();
                        p
                    },
                    |mut p| {
                        rt.block_on(p.evaluate(&call, Effect::ReadOnly, next_view()))
                            .unwrap()
                    },
                    criterion::BatchSize::PerIteration,
                )
            },
        );
    }

    let script = script_config(HELD + 4);
    let new_agent = |plugin: &Plugin| {
        rt.block_on(WasmAgent::new(
            &host,
            plugin,
            &script,
            &[],
            &PluginLimits::default(),
            &ConsumersBuilder::new(Arc::new(StubProvider::default())),
        ))
        .unwrap()
    };
    for (label, file) in builds("agent-scripted", &["rust", "py", "js"]) {
        let bytes = std::fs::read(&file).unwrap();
        compile_and_cache(
            &mut g,
            &host,
            cache_dir.path(),
            "agent-scripted",
            &label,
            &bytes,
        );
        let plugin = host.load(&file, World::Agent, None).unwrap();
        g.bench_function(
            BenchmarkId::new("agent-scripted/instantiate-and-init/pooled", &label),
            |b| b.iter(|| new_agent(&plugin)),
        );
        g.bench_function(BenchmarkId::new("agent-scripted/first-call", &label), |b| {
            b.iter_batched(
                || new_agent(&plugin),
                |mut a| rt.block_on(a.decide(first_view())).unwrap(),
                criterion::BatchSize::PerIteration,
            )
        });
        g.bench_function(
            BenchmarkId::new("agent-scripted/one-step-delta", &label),
            |b| {
                b.iter_batched(
                    || {
                        let mut a = new_agent(&plugin);
                        rt.block_on(a.decide(held_view())).unwrap();
                        a
                    },
                    |mut a| rt.block_on(a.decide(next_view())).unwrap(),
                    criterion::BatchSize::PerIteration,
                )
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench_coldstart);
criterion_main!(benches);
