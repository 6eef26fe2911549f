//! The cost of crossing the wasm boundary, measured side by side:
//!
//! * `evaluate/keel`: a policy call through Keel (fuel and deadline armed,
//!   delta computed, result converted and size-checked) against
//!   `evaluate/raw`: the same export of the same component called directly
//!   through wasmtime's typed bindings, with nothing armed.
//! * `noop/raw-typed`: a raw typed call of an empty export (a floor).
//! * `decide`: one-step delta against the full view, 400 steps, small and ~8 KiB.
//! * `instantiate`: a policy instance from its `InstancePre`, with `init`.
//! * `import`: a `log` call into the host against a raw import of the same
//!   signature; `import/paired` (printed, not a criterion bench) times
//!   both in alternation and reports the ratio of the medians.
//! * `noop/paired` (printed): a `decide` that does nothing, through Keel,
//!   through its typed function alone, a raw empty export, and the floor:
//!   an empty export on Keel's own engine and store settings, alternated.
//! * `view-handoff`: `decide` handed one step of 64 B to 1 MiB (last: it
//!   sets a byte throughput for the group).
//!
//!     cargo bench -p keel-benches --bench hostcall

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use keel::consumer::{EventSink, RunView};
use keel::model::StubProvider;
use keel::wasm::{EngineOptions, PluginLimits, WasmAgent, WasmHost, WasmPolicy, World};
use keel::ConsumersBuilder;
use keel::*;
use keel_benches::*;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn bench_hostcall(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = plugins_dir();
    let host = WasmHost::new(EngineOptions::default()).unwrap();
    let policy = host
        .load(&dir.join("policy-rules-rust.wasm"), World::Policy, None)
        .unwrap();
    let agent = host
        .load(&dir.join("agent-scripted-rust.wasm"), World::Agent, None)
        .unwrap();
    let rules = r#"{"rules":[{"tool":"echo","action":"allow"}]}"#;
    let run = bench_run(1);
    let call = ToolCall {
        tool: "echo".into(),
        arguments: r#"{"i":1}"#.into(),
    };

    let mut g = c.benchmark_group("hostcall");
    // Keel's path.
    let mut p = rt
        .block_on(WasmPolicy::new(
            &host,
            &policy,
            rules,
            &PluginLimits::default(),
            &ConsumersBuilder::new(Arc::new(StubProvider::default())),
        ))
        .unwrap();
    g.bench_function("evaluate/keel", |b| {
        b.iter(|| {
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
        })
    });
    // The same export of the same instance, called through the typed
    // bindings directly: no fuel or deadline arming, no delta, no conversion.
    let (wcall, weffect, wdelta) = p.raw_parts(
        &call,
        Effect::ReadOnly,
        RunView {
            run: &run,
            steps: &[],
            approvals: &[],
        },
    );
    g.bench_function("evaluate/raw", |b| {
        b.iter(|| {
            rt.block_on(p.evaluate_raw(&wcall, weffect, &wdelta))
                .unwrap()
        })
    });
    g.finish();

    // A raw typed call of an empty export: the floor of any call.
    let mut g = c.benchmark_group("hostcall");
    {
        let engine = wasmtime::Engine::default();
        let (mut store, f) = empty_export(&rt, &engine);
        g.bench_function("noop/raw-typed", |b| {
            b.iter(|| rt.block_on(f.call_async(&mut store, ())).unwrap())
        });
    }

    // decide: one-step delta against the full view.
    for (label, pad) in [("small", 0usize), ("8KiB", 8 << 10)] {
        let steps: Vec<Step> = (0..400).map(|i| done_step(i, pad)).collect();
        let mut a = scripted_agent(&rt, &host, &agent, 500);
        let run = bench_run(401);
        // Hand over 399 steps, then time handing the 400th again and again
        // (the tracker sees a new version each time, so it is re-sent).
        rt.block_on(a.decide(RunView {
            run: &run,
            steps: &steps[..399],
            approvals: &[],
        }))
        .unwrap();
        // The 400th step is left not done: the tracker never compares a
        // done step again (a done step is final), so only a step in
        // progress is re-sent when its version changes. It keeps its
        // observation, so the delta carries the same bytes.
        let mut last = steps[399].clone();
        last.state = StepState::Executing;
        let mut all = steps.clone();
        g.bench_function(
            BenchmarkId::new(format!("decide/one-step-delta/{label}"), 400),
            |b| {
                b.iter(|| {
                    last.version += 1;
                    all[399] = last.clone();
                    rt.block_on(a.decide(RunView {
                        run: &run,
                        steps: &all,
                        approvals: &[],
                    }))
                    .unwrap()
                })
            },
        );
        g.bench_function(
            BenchmarkId::new(format!("decide/full-view/{label}"), 400),
            |b| {
                b.iter(|| {
                    a.forget_view();
                    rt.block_on(a.decide(RunView {
                        run: &run,
                        steps: &steps,
                        approvals: &[],
                    }))
                    .unwrap()
                })
            },
        );
    }

    // Import round trips: an agent whose decide makes N `log` calls into the
    // host (rate limit raised so none is dropped), against a raw component
    // whose export calls a trivial host import N times.
    let hostile = host
        .load(&dir.join("hostile-agent-rust.wasm"), World::Agent, None)
        .unwrap();
    for n in [0u32, 100] {
        let (mut a, sink) = log_agent(&rt, &host, &hostile, n);
        let run = bench_run(1);
        // The loop drains the sink at its next commit; so does the bench,
        // outside the timed call (turning lines into events is the commit's
        // work, not the import's).
        g.bench_function(BenchmarkId::new("import/keel-log", n), |b| {
            b.iter_custom(|iters| {
                let mut timed = std::time::Duration::ZERO;
                for _ in 0..iters {
                    let t = std::time::Instant::now();
                    let d = rt
                        .block_on(a.decide(RunView {
                            run: &run,
                            steps: &[],
                            approvals: &[],
                        }))
                        .unwrap();
                    timed += t.elapsed();
                    std::hint::black_box(d);
                    std::hint::black_box(sink.drain());
                }
                timed
            })
        });
    }
    // Twice: on a default engine, and on one configured as Keel's (fuel
    // and epoch interruption), to tell the boundary's cost from the
    // sandbox's.
    for keel_config in [false, true] {
        let (mut store, f) = raw_import(&rt, keel_config);
        let name = if keel_config {
            "import/raw-fuel-epoch"
        } else {
            "import/raw"
        };
        for n in [0u32, 100] {
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| rt.block_on(f.call_async(&mut store, (n,))).unwrap())
            });
        }
    }

    if paired_selected("import/paired") {
        paired_imports(&rt, &host, &hostile);
    }
    if paired_selected("noop/paired") {
        paired_noop(&rt, &host, &hostile);
    }

    g.bench_function("instantiate/policy-with-init", |b| {
        b.iter(|| {
            rt.block_on(WasmPolicy::new(
                &host,
                &policy,
                rules,
                &PluginLimits::default(),
                &ConsumersBuilder::new(Arc::new(StubProvider::default())),
            ))
            .unwrap()
        })
    });
    // The view handoff by size: one step whose observation is 64 B to
    // 1 MiB, handed to `decide` again and again (a new version each time,
    // so the delta carries it every call).
    {
        let mut a = scripted_agent(&rt, &host, &agent, 4);
        let run = bench_run(2);
        // Versions only grow, across sizes too (the guest refuses older ones).
        let mut version = 4u32;
        for (label, size) in [
            ("64B", 64usize),
            ("1KiB", 1 << 10),
            ("16KiB", 16 << 10),
            ("256KiB", 256 << 10),
            ("1MiB", 1 << 20),
        ] {
            // done_step wraps the padding in ~30 bytes of JSON.
            let mut step = done_step(0, size.saturating_sub(30).max(1));
            // Not done, so that the tracker re-sends it (see decide above).
            step.state = StepState::Executing;
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::new("view-handoff", label), |b| {
                b.iter(|| {
                    version += 1;
                    step.version = version;
                    rt.block_on(a.decide(RunView {
                        run: &run,
                        steps: std::slice::from_ref(&step),
                        approvals: &[],
                    }))
                    .unwrap()
                })
            });
        }
    }
    g.finish();
}

/// agent-scripted playing `calls` echo calls, instantiated for a bench.
fn scripted_agent(
    rt: &tokio::runtime::Runtime,
    host: &WasmHost,
    agent: &keel::wasm::Plugin,
    calls: usize,
) -> WasmAgent {
    let script = serde_json::json!({ "script": (0..calls).map(|i| serde_json::json!({ "call": { "tool": "echo", "arguments": { "i": i } } })).collect::<Vec<_>>() });
    rt.block_on(WasmAgent::new(
        host,
        agent,
        &script.to_string(),
        &[],
        &PluginLimits::default(),
        &ConsumersBuilder::new(Arc::new(StubProvider::default())),
    ))
    .unwrap()
}

/// The test agent in `logs-N` mode: each `decide` makes N `log` calls into
/// the host (rate limit raised so that none is dropped).
fn log_agent(
    rt: &tokio::runtime::Runtime,
    host: &WasmHost,
    hostile: &keel::wasm::Plugin,
    n: u32,
) -> (WasmAgent, Arc<EventSink>) {
    hostile_agent(rt, host, hostile, &format!("logs-{n}"))
}

/// The test agent in `mode`, with its log sink.
fn hostile_agent(
    rt: &tokio::runtime::Runtime,
    host: &WasmHost,
    hostile: &keel::wasm::Plugin,
    mode: &str,
) -> (WasmAgent, Arc<EventSink>) {
    let limits = PluginLimits {
        log_lines_per_call: 1_000,
        ..PluginLimits::default()
    };
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::default()));
    let sink = wiring.events();
    let a = rt
        .block_on(WasmAgent::new(
            host,
            hostile,
            &format!(r#"{{"mode":"{mode}"}}"#),
            &[],
            &limits,
            &wiring,
        ))
        .unwrap();
    (a, sink)
}

/// A raw component whose `run(n)` export calls a host import n times: the
/// same signature as `log` (an enum-sized `u8` and a 4-byte string lowered
/// from the guest's memory), into a host function that only takes the
/// lifted string. With `keel_config`, on an engine with fuel and epoch
/// interruption as Keel's.
fn raw_import(
    rt: &tokio::runtime::Runtime,
    keel_config: bool,
) -> (
    wasmtime::Store<()>,
    wasmtime::component::TypedFunc<(u32,), ()>,
) {
    let mut config = wasmtime::Config::new();
    config
        .consume_fuel(keel_config)
        .epoch_interruption(keel_config);
    let engine = wasmtime::Engine::new(&config).unwrap();
    let wat = r#"(component
        (import "f" (func $f (param "l" u8) (param "m" string)))
        (core module $mem (memory (export "m") 1) (data (i32.const 0) "tick"))
        (core instance $mi (instantiate $mem))
        (alias core export $mi "m" (core memory $memory))
        (core func $fl (canon lower (func $f) (memory $memory)))
        (core module $m
            (import "host" "f" (func $f (param i32 i32 i32)))
            (func (export "run") (param $n i32)
                (block $done (loop $again
                    (br_if $done (i32.eqz (local.get $n)))
                    (call $f (i32.const 1) (i32.const 0) (i32.const 4))
                    (local.set $n (i32.sub (local.get $n) (i32.const 1)))
                    (br $again)))))
        (core instance $h (export "f" (func $fl)))
        (core instance $i (instantiate $m (with "host" (instance $h))))
        (func (export "run") (param "n" u32) (canon lift (core func $i "run"))))"#;
    let component = wasmtime::component::Component::new(&engine, wat).unwrap();
    let mut linker = wasmtime::component::Linker::<()>::new(&engine);
    linker
        .root()
        .func_wrap("f", |_, (l, m): (u8, String)| {
            std::hint::black_box((l, m));
            Ok(())
        })
        .unwrap();
    let mut store = wasmtime::Store::new(&engine, ());
    if keel_config {
        store.set_fuel(u64::MAX).unwrap();
        store.set_epoch_deadline(u64::MAX);
    }
    let instance = rt
        .block_on(linker.instantiate_async(&mut store, &component))
        .unwrap();
    let f = instance
        .get_typed_func::<(u32,), ()>(&mut store, "run")
        .unwrap();
    (store, f)
}

/// The import round trip, Keel against raw, measured pairwise: each round
/// times a call with 100 imports and one with none, on each side, back to
/// back, so that the machine's drift falls on both sides alike. Prints the
/// medians of the per-import costs and their ratio (criterion's separate
/// benches above are seconds apart, and their ratio swings with the drift).
fn paired_imports(rt: &tokio::runtime::Runtime, host: &WasmHost, hostile: &keel::wasm::Plugin) {
    const ROUNDS: usize = 3_000;
    let (mut a0, sink0) = log_agent(rt, host, hostile, 0);
    let (mut a100, sink100) = log_agent(rt, host, hostile, 100);
    let (mut store, f) = raw_import(rt, true);
    let (mut plain, g) = raw_import(rt, false);
    let run = bench_run(1);
    let view = || RunView {
        run: &run,
        steps: &[],
        approvals: &[],
    };
    let mut keel = Vec::with_capacity(ROUNDS);
    let mut raw = Vec::with_capacity(ROUNDS);
    let mut raw_plain = Vec::with_capacity(ROUNDS);
    // Per import, in ns: a call making 100 imports minus one making none.
    let per_import = |with: Duration, without: Duration| {
        (with.as_nanos() as f64 - without.as_nanos() as f64) / 100.0
    };
    for round in 0..ROUNDS + 200 {
        let k100 = timed(|| black_box(rt.block_on(a100.decide(view())).unwrap()));
        let k0 = timed(|| black_box(rt.block_on(a0.decide(view())).unwrap()));
        black_box((sink100.drain(), sink0.drain()));
        let r100 = timed(|| rt.block_on(f.call_async(&mut store, (100,))).unwrap());
        let r0 = timed(|| rt.block_on(f.call_async(&mut store, (0,))).unwrap());
        let p100 = timed(|| rt.block_on(g.call_async(&mut plain, (100,))).unwrap());
        let p0 = timed(|| rt.block_on(g.call_async(&mut plain, (0,))).unwrap());
        if round >= 200 {
            // The first rounds warm caches and the allocator.
            keel.push(per_import(k100, k0));
            raw.push(per_import(r100, r0));
            raw_plain.push(per_import(p100, p0));
        }
    }
    let k = median(&mut keel);
    let r = median(&mut raw);
    let p = median(&mut raw_plain);
    println!(
        "import/paired: per import, medians of {ROUNDS} interleaved rounds: \
         keel {k:.0} ns; raw, default engine {p:.0} ns (keel/raw {:.2}); \
         raw, fuel and epochs {r:.0} ns (keel/raw {:.2})",
        k / p,
        k / r
    );
}

/// A call that does nothing, three ways, measured pairwise: Keel's
/// `decide` of an agent that answers at once (the loop's path: budgets
/// armed, the delta computed, the decision converted and size-checked);
/// the same export of the same instance through its typed function alone,
/// with the same (empty) delta; and a raw empty export on an engine with
/// fuel and epochs, the floor of any call. Prints the medians.
fn paired_noop(rt: &tokio::runtime::Runtime, host: &WasmHost, hostile: &keel::wasm::Plugin) {
    const ROUNDS: usize = 5_000;
    let (mut keel, _sink) = hostile_agent(rt, host, hostile, "noop");
    let (mut same, _sink2) = hostile_agent(rt, host, hostile, "noop");
    let (mut store, f) = raw_import(rt, true);
    let (mut floor_store, floor) = empty_export_on(rt, host);
    let run = bench_run(1);
    let view = || RunView {
        run: &run,
        steps: &[],
        approvals: &[],
    };
    // The SDK's view starts from a reset; the first call hands it over.
    rt.block_on(same.decide(view())).unwrap();
    let (mut k, mut s, mut r, mut fl) = (
        Vec::with_capacity(ROUNDS),
        Vec::with_capacity(ROUNDS),
        Vec::with_capacity(ROUNDS),
        Vec::with_capacity(ROUNDS),
    );
    for round in 0..ROUNDS + 500 {
        let kt = timed(|| black_box(rt.block_on(keel.decide(view())).unwrap()));
        let st = timed(|| black_box(rt.block_on(same.decide_raw(&run)).unwrap().unwrap()));
        let rt0 = timed(|| rt.block_on(f.call_async(&mut store, (0,))).unwrap());
        let ft = timed(|| rt.block_on(floor.call_async(&mut floor_store, ())).unwrap());
        if round >= 500 {
            k.push(kt.as_nanos() as f64);
            s.push(st.as_nanos() as f64);
            r.push(rt0.as_nanos() as f64);
            fl.push(ft.as_nanos() as f64);
        }
    }
    let (k, s, r) = (median(&mut k), median(&mut s), median(&mut r));
    let fl = median(&mut fl);
    println!(
        "noop/paired: a call that does nothing, medians of {ROUNDS} interleaved rounds: \
         keel decide {k:.0} ns; the same export through its typed function {s:.0} ns \
         (keel/typed {:.2}); an empty export, fuel and epochs {r:.0} ns (keel/empty {:.2}); \
         the floor, an empty export on Keel's own engine {fl:.0} ns (keel/floor {:.2})",
        k / s,
        k / r,
        k / fl
    );
}

/// An empty export instantiated on Keel's own engine (its pool, fuel and
/// epochs), in a store with fuel and a deadline as a plugin's has: the
/// floor of any call Keel makes.
fn empty_export_on(
    rt: &tokio::runtime::Runtime,
    host: &WasmHost,
) -> (wasmtime::Store<()>, wasmtime::component::TypedFunc<(), ()>) {
    empty_export(rt, host.engine())
}

/// An empty export instantiated on `engine`, its store given fuel and an
/// epoch deadline where the engine meters them.
fn empty_export(
    rt: &tokio::runtime::Runtime,
    engine: &wasmtime::Engine,
) -> (wasmtime::Store<()>, wasmtime::component::TypedFunc<(), ()>) {
    let wat = r#"(component
        (core module $m (func (export "noop")))
        (core instance $i (instantiate $m))
        (func (export "noop") (canon lift (core func $i "noop"))))"#;
    let component = wasmtime::component::Component::new(engine, wat).unwrap();
    let linker = wasmtime::component::Linker::<()>::new(engine);
    let mut store = wasmtime::Store::new(engine, ());
    if engine.get_consume_fuel() {
        store.set_fuel(u64::MAX / 2).unwrap();
    }
    if engine.get_epoch_interruption() {
        store.set_epoch_deadline(1 << 40);
    }
    let instance = rt
        .block_on(linker.instantiate_async(&mut store, &component))
        .unwrap();
    let f = instance
        .get_typed_func::<(), ()>(&mut store, "noop")
        .unwrap();
    (store, f)
}

fn timed<R>(f: impl FnOnce() -> R) -> Duration {
    let t = Instant::now();
    black_box(f());
    t.elapsed()
}

criterion_group!(benches, bench_hostcall);
criterion_main!(benches);
