//! Per-step time of the loop at 10, 100 and 400 steps, small and ~8 KiB
//! observations, synchronous=FULL and NORMAL, against the bare cost of the
//! step's commits. Criterion reports time per run; divide by n for per step.
//! Before the criterion benches, every run prints three ratios measured in
//! alternation (`step/paired`: a step against its bare commits;
//! `length/paired`: a step of a 400-step run against one of 10-step runs;
//! `wasm/paired`: wasm consumers against native at 400 × 8 KiB), which the
//! machine's drift does not skew the way it skews separate benches.
//! `KEEL_PAIRED=length/paired` (comma-separated prefixes) runs only those.
//!
//!     cargo bench -p keel-benches --bench driver

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use keel::store::{Expect, NewEvent, Transition};
use keel::*;
use keel_benches::*;

fn runtime(sync: Durability) -> (tempfile::TempDir, Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("b.db"), sync).unwrap();
    (dir, Runtime::new(StoreHandle::spawn(store)))
}

fn bench_driver(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    paired_steps(&rt);
    paired_length(&rt);
    let mut g = c.benchmark_group("driver");
    g.sample_size(10);
    // Wasm agent and policy (Rust agent-scripted and policy-rules) against
    // the native ones below, in the same run of the bench.
    let dir = plugins_dir();
    let host = keel::wasm::WasmHost::new(keel::wasm::EngineOptions::default()).unwrap();
    let agent = host
        .load(
            &dir.join("agent-scripted-rust.wasm"),
            keel::wasm::World::Agent,
            None,
        )
        .unwrap();
    let policy = host
        .load(
            &dir.join("policy-rules-rust.wasm"),
            keel::wasm::World::Policy,
            None,
        )
        .unwrap();
    paired_wasm(&rt, &host, &agent, &policy);
    paired_telemetry(&rt, &host, &agent, &policy);
    for sync in [Durability::Full, Durability::Normal] {
        for (label, pad) in [("small", 0usize), ("8KiB", 8 << 10)] {
            for n in [10u32, 400] {
                g.throughput(Throughput::Elements(n as u64));
                g.bench_function(BenchmarkId::new(format!("wasm/{sync:?}/{label}"), n), |b| {
                    let (_dir, runtime) = runtime(sync);
                    let config = script_config(n);
                    b.to_async(&rt).iter(|| async {
                        let c = wasm_consumers(&host, &agent, &policy, &config, pad).await;
                        let out = runtime.start("bench", limits(n), "{}", c).await.unwrap();
                        assert_eq!(out.run.status, RunStatus::Completed);
                    });
                });
                let id = BenchmarkId::new(format!("native-paired/{sync:?}/{label}"), n);
                g.bench_function(id, |b| {
                    let (_dir, runtime) = runtime(sync);
                    b.to_async(&rt).iter(|| async {
                        let out = runtime
                            .start("bench", limits(n), "{}", native_consumers(n, pad))
                            .await
                            .unwrap();
                        assert_eq!(out.run.status, RunStatus::Completed);
                    });
                });
            }
        }
    }
    for sync in [Durability::Full, Durability::Normal] {
        for (label, pad) in [("small", 0usize), ("8KiB", 8 << 10)] {
            for n in [10u32, 100, 400] {
                g.throughput(Throughput::Elements(n as u64));
                let id = BenchmarkId::new(format!("native/{sync:?}/{label}"), n);
                g.bench_function(id, |b| {
                    let (_dir, runtime) = runtime(sync);
                    b.to_async(&rt).iter(|| async {
                        let out = runtime
                            .start("bench", limits(n), "{}", native_consumers(n, pad))
                            .await
                            .unwrap();
                        assert_eq!(out.run.status, RunStatus::Completed);
                    });
                });
            }
        }
        // The floor: the two commits of a step, with the same rows, alone.
        g.throughput(Throughput::Elements(1));
        g.bench_function(
            BenchmarkId::new(format!("bare-commits/{sync:?}"), "step"),
            |b| {
                let dir = tempfile::tempdir().unwrap();
                let mut store = Store::open(dir.path().join("c.db"), sync).unwrap();
                let mut run = bare_run();
                run = store.create_run(&run, vec![]).unwrap().run;
                let mut i = 0u32;
                b.iter(|| {
                    bare_step(&mut store, &mut run, i);
                    i += 1;
                });
            },
        );
    }
    // What a transition pays to reach the store's writer thread and come
    // back, with nothing to write: an empty job through `StoreHandle`.
    g.throughput(Throughput::Elements(1));
    g.bench_function("writer-round-trip", |b| {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("b.db"), Durability::Normal).unwrap();
        let handle = StoreHandle::spawn(store);
        b.to_async(&rt)
            .iter(|| async { handle.with(|_| ()).await.unwrap() });
    });
    g.finish();
}

/// The two commits of step `i`, with the rows and events the loop writes
/// for an allowed call: the decision with its verdict and `executing`,
/// then the result with the next step's start. The floor of a step.
fn bare_step(store: &mut Store, run: &mut Run, i: u32) {
    let [(s1, e1), (s2, e2)] = bare_writes(i, 0);
    bare_commit(store, run, s1, e1);
    run.step_count = i + 2;
    bare_commit(store, run, s2, e2);
}

/// The steps and events of [`bare_step`]'s two writes; the tool's result
/// padded with `pad` bytes.
fn bare_writes(i: u32, pad: usize) -> [(Vec<Step>, Vec<NewEvent>); 2] {
    let call = ToolCall {
        tool: "echo".into(),
        arguments: format!("{{\"i\":{i}}}"),
    };
    let executing = Step {
        index: i,
        version: 3,
        state: StepState::Executing,
        decision: Some(Decision::Call(call.clone())),
        call: Some(call.clone()),
        effect: Some(Effect::ReadOnly),
        verdict: Some(Verdict::Allow),
        observation: None,
        started_at: 0,
        updated_at: 0,
    };
    let observation = Observation {
        kind: ObservationKind::ToolResult,
        content: if pad == 0 {
            call.arguments.clone()
        } else {
            serde_json::json!({ "i": i, "pad": "x".repeat(pad) }).to_string()
        },
    };
    let done = Step {
        version: 4,
        state: StepState::Done,
        observation: Some(observation.clone()),
        ..executing.clone()
    };
    let next = Step::started(i + 1, 0);
    let event = |kind, i, data| NewEvent::new(kind, Some(i), data);
    let decision = serde_json::json!({ "decision": Decision::Call(call.clone()) });
    [
        (
            vec![executing],
            vec![
                event(keel::EventKind::StepDecided, i, decision),
                event(
                    keel::EventKind::StepVerdict,
                    i,
                    serde_json::json!({ "verdict": "allow" }),
                ),
                event(
                    keel::EventKind::StepExecuting,
                    i,
                    serde_json::json!({ "tool": "echo" }),
                ),
            ],
        ),
        (
            vec![done, next],
            vec![
                event(
                    keel::EventKind::StepDone,
                    i,
                    serde_json::json!({ "observation": observation }),
                ),
                event(keel::EventKind::StepStarted, i + 1, serde_json::json!({})),
            ],
        ),
    ]
}

/// The hash chain's own work for [`bare_writes`]' step, in seconds: its
/// five events linked and each write's rows sealed (the events' JSON is
/// encoded beforehand, as the store does without a chain too).
fn chain_cost(pad: usize) -> f64 {
    use keel::store::chain::{link, Link, Seals};
    use keel::store::StepRow;
    const K: usize = 2_000;
    let run = bare_run();
    let writes: Vec<(Vec<StepRow>, Vec<(NewEvent, String)>)> = bare_writes(0, pad)
        .into_iter()
        .map(|(steps, events)| {
            let rows = steps.iter().map(|s| StepRow::encode(&run.id, s)).collect();
            let events = events
                .into_iter()
                .map(|e| {
                    let data = serde_json::to_string(&e.data).unwrap();
                    (e, data)
                })
                .collect();
            (rows, events)
        })
        .collect();
    let t = std::time::Instant::now();
    for k in 0..K {
        let mut head = String::new();
        for (rows, events) in &writes {
            let seals = Seals::of(&run, "{}", rows, &[]);
            for (n, (e, data)) in events.iter().enumerate() {
                head = link(
                    &head,
                    &Link {
                        pos: (k * 5 + n) as i64,
                        run_id: &run.id,
                        step_index: e.step_index.map(i64::from),
                        kind: e.kind.as_str(),
                        data,
                        at: 0,
                        seals: (n + 1 == events.len()).then_some(seals.as_str()),
                    },
                );
            }
        }
        std::hint::black_box(&head);
    }
    t.elapsed().as_secs_f64() / K as f64
}

fn bare_commit(store: &mut Store, run: &mut Run, steps: Vec<Step>, events: Vec<NewEvent>) {
    // The committed row carries the chain the next commit links after.
    *run = store
        .commit(Transition {
            expect: Expect {
                status: RunStatus::Running,
                owner: Some("bench".into()),
                pending_approval: None,
            },
            run: run.clone(),
            steps,
            approvals: vec![],
            events,
            model_calls: vec![],
        })
        .unwrap()
        .run;
}

/// A step against the bare cost of its commits, measured pairwise: each
/// round runs the loop for 100 steps and then makes 100 steps' bare
/// commits on a store of its own, back to back, so that the machine's
/// drift falls on both alike. Prints the median of the rounds' ratios.
fn paired_steps(rt: &tokio::runtime::Runtime) {
    const N: u32 = 100;
    const ROUNDS: usize = 15;
    for sync in [Durability::Full, Durability::Normal] {
        if !paired_selected(&format!("step/paired/{sync:?}")) {
            continue;
        }
        let (_dir, runtime) = runtime(sync);
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("c.db"), sync).unwrap();
        let mut run = bare_run();
        run = store.create_run(&run, vec![]).unwrap().run;
        let mut i = 0u32;
        let mut ratios = Vec::with_capacity(ROUNDS);
        let (mut steps, mut bares) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS + 2 {
            let t = std::time::Instant::now();
            let out = rt
                .block_on(runtime.start("bench", limits(N), "{}", native_consumers(N, 0)))
                .unwrap();
            assert_eq!(out.run.status, RunStatus::Completed);
            let step = t.elapsed().as_secs_f64() / N as f64;
            let t = std::time::Instant::now();
            for _ in 0..N {
                bare_step(&mut store, &mut run, i);
                i += 1;
            }
            let bare = t.elapsed().as_secs_f64() / N as f64;
            if round >= 2 {
                ratios.push(step / bare);
                steps.push(step);
                bares.push(bare);
            }
        }
        let mid = median(&mut ratios); // sorts
        let step = median(&mut steps);
        println!(
            "step/paired/{sync:?}: {N}-step runs against {N} steps' bare commits, \
             medians of {ROUNDS} interleaved rounds: step {:.0} us, bare {:.0} us, \
             ratio {mid:.2} (range {:.2}-{:.2})",
            step * 1e6,
            median(&mut bares) * 1e6,
            ratios[0],
            ratios[ROUNDS - 1]
        );
        let (small, big) = (chain_cost(0), chain_cost(8 << 10));
        println!(
            "chain/{sync:?}: the hash chain's work a step: small {:.1} us ({:.2}% of the step), \
             8 KiB result {:.1} us ({:.2}% of the small step)",
            small * 1e6,
            small / step * 100.0,
            big * 1e6,
            big / step * 100.0
        );
    }
}

/// 400 steps against 10, per step, measured pairwise: each round makes
/// one 400-step run and forty 10-step runs (the same 400 steps), back to
/// back in an order that alternates by round, each kind on a store of its
/// own. In memory too, which tells the loop's own growth from the disk's.
fn paired_length(rt: &tokio::runtime::Runtime) {
    const LONG: u32 = 400;
    const SHORT: u32 = 10;
    const ROUNDS: usize = 15;
    for sync in [Some(Durability::Full), Some(Durability::Normal), None] {
        for (label, pad) in [("small", 0usize), ("8KiB", 8 << 10)] {
            let store_name = sync.map_or("Memory".to_string(), |s| format!("{s:?}"));
            let name = format!("length/paired/{store_name}/{label}");
            if !paired_selected(&name) {
                continue;
            }
            let (_long_dir, long_store) = paired_runtime(sync);
            let (_short_dir, short_store) = paired_runtime(sync);
            let long = || measured_run(rt, &long_store, LONG, || native_consumers(LONG, pad));
            let short = || {
                let mut total = Measured::default();
                for _ in 0..LONG / SHORT {
                    total += measured_run(rt, &short_store, SHORT, || native_consumers(SHORT, pad));
                }
                total
            };
            let (mut ratios, mut longs, mut shorts) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..ROUNDS + 1 {
                let (l, s) = in_turn(round, long, short);
                // The first round warms the stores and the allocator.
                if round >= 1 {
                    ratios.push(l.wall / s.wall);
                    longs.push(l.wall / LONG as f64);
                    shorts.push(s.wall / LONG as f64);
                }
            }
            let mid = median(&mut ratios); // sorts
            println!(
                "{name}: a {LONG}-step run against {n} {SHORT}-step runs, per step, \
                 medians of {ROUNDS} interleaved rounds: {LONG} steps {:.0} us, \
                 {SHORT} steps {:.0} us, ratio {mid:.2} (range {:.2}-{:.2})",
                median(&mut longs) * 1e6,
                median(&mut shorts) * 1e6,
                ratios[0],
                ratios[ROUNDS - 1],
                n = LONG / SHORT,
            );
        }
    }
}

/// Wasm agent and policy against native ones at 400 steps × 8 KiB,
/// measured pairwise: each round runs one of each, back to back, each
/// kind on a store of its own. Prints the median of the rounds' ratios.
fn paired_wasm(
    rt: &tokio::runtime::Runtime,
    host: &keel::wasm::WasmHost,
    agent: &keel::wasm::Plugin,
    policy: &keel::wasm::Plugin,
) {
    const N: u32 = 400;
    const PAD: usize = 8 << 10;
    const ROUNDS: usize = 31;
    let config = script_config(N);
    // `None`: an in-memory store, where no write waits for the disk, so
    // the CPU ratio is the consumers' own cost against the loop's.
    for sync in [Some(Durability::Full), Some(Durability::Normal), None] {
        let name = match sync {
            Some(s) => format!("wasm/paired/{s:?}"),
            None => "wasm/paired/Memory".to_string(),
        };
        if !paired_selected(&name) {
            continue;
        }
        // A store each: one shared store checkpoints its log every so many
        // runs, and with a fixed order those checkpoints kept landing on
        // the same kind of run. The order also alternates by round.
        let (_wasm_dir, wasm_store) = paired_runtime(sync);
        let (_native_dir, native_store) = paired_runtime(sync);
        let mut ratios = Vec::with_capacity(ROUNDS);
        let mut cpu_ratios = Vec::with_capacity(ROUNDS);
        let (mut wasm_faults, mut native_faults) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS + 1 {
            let run_wasm = || {
                measured_run(rt, &wasm_store, N, || {
                    rt.block_on(wasm_consumers(host, agent, policy, &config, PAD))
                })
            };
            let run_native = || measured_run(rt, &native_store, N, || native_consumers(N, PAD));
            let (wasm, native) = in_turn(round, run_wasm, run_native);
            // The first round warms the pool slots; the others reuse them.
            if round >= 1 {
                ratios.push(wasm.wall / native.wall);
                cpu_ratios.push(wasm.cpu / native.cpu);
                wasm_faults.push(wasm.faults as f64);
                native_faults.push(native.faults as f64);
            }
        }
        let mid = median(&mut ratios); // sorts
        let cpu_mid = median(&mut cpu_ratios);
        println!(
            "{name}: {N} steps x 8 KiB, wasm agent and policy against native, \
             median of {ROUNDS} interleaved rounds: ratio {mid:.2} (range {:.2}-{:.2}); \
             CPU time ratio {cpu_mid:.2} (range {:.2}-{:.2}); \
             page faults per run: wasm {}, native {}",
            ratios[0],
            ratios[ROUNDS - 1],
            cpu_ratios[0],
            cpu_ratios[ROUNDS - 1],
            median(&mut wasm_faults),
            median(&mut native_faults),
        );
    }
}

/// A collector for the telemetry bench: it reads each export and answers
/// 200, as a collector on the same host would; its base URL.
fn sink() -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let mut got = Vec::new();
                loop {
                    let n = match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    got.extend_from_slice(&buf[..n]);
                    // One request: its head, then content-length bytes.
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if got.len() < end + 4 + len {
                        continue;
                    }
                    got.drain(..end + 4 + len);
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if c.write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

/// The wasm agent and policy at 400 steps, traced (every step's plugin
/// calls and tool call become spans, exported to [`sink`] over OTLP/HTTP)
/// against the same runs untraced, measured pairwise on stores of their
/// own. Prints the medians of the rounds' wall and CPU ratios.
fn paired_telemetry(
    rt: &tokio::runtime::Runtime,
    host: &keel::wasm::WasmHost,
    agent: &keel::wasm::Plugin,
    policy: &keel::wasm::Plugin,
) {
    const N: u32 = 400;
    const ROUNDS: usize = 15;
    let config = script_config(N);
    let url = sink();
    for sync in [Some(Durability::Full), Some(Durability::Normal), None] {
        let name = match sync {
            Some(s) => format!("telemetry/paired/{s:?}"),
            None => "telemetry/paired/Memory".to_string(),
        };
        if !paired_selected(&name) {
            continue;
        }
        let (_plain_dir, plain) = paired_runtime(sync);
        let (_traced_dir, traced) = paired_runtime(sync);
        let t = std::sync::Arc::new(keel::telemetry::Telemetry::start(&url, "keel-bench").unwrap());
        let traced = traced.with_telemetry(t.clone());
        let (mut ratios, mut cpu_ratios, mut steps) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS + 1 {
            let run = |runtime: &Runtime| {
                measured_run(rt, runtime, N, || {
                    rt.block_on(wasm_consumers(host, agent, policy, &config, 0))
                })
            };
            let (a, b) = in_turn(round, || run(&traced), || run(&plain));
            if round >= 1 {
                ratios.push(a.wall / b.wall);
                cpu_ratios.push(a.cpu / b.cpu);
                steps.push(b.wall / N as f64);
            }
        }
        t.shutdown();
        let mid = median(&mut ratios);
        let cpu_mid = median(&mut cpu_ratios);
        println!(
            "{name}: {N} wasm steps traced (spans exported to a local OTLP/HTTP sink) against untraced, \
             median of {ROUNDS} interleaved rounds: wall ratio {mid:.3} (range {:.3}-{:.3}); \
             CPU time ratio {cpu_mid:.3} (range {:.3}-{:.3}); untraced step {:.0} us",
            ratios[0],
            ratios[ROUNDS - 1],
            cpu_ratios[0],
            cpu_ratios[ROUNDS - 1],
            median(&mut steps) * 1e6,
        );
    }
}

/// Runs `a` and `b` back to back, `a` first in even rounds and `b` first
/// in odd ones, so that neither always runs on the other's leftovers.
fn in_turn<A, B>(round: usize, a: impl FnOnce() -> A, b: impl FnOnce() -> B) -> (A, B) {
    if round % 2 == 0 {
        let a = a();
        (a, b())
    } else {
        let b = b();
        (a(), b)
    }
}

/// What one run of the loop took, its consumers' set-up included.
#[derive(Default)]
struct Measured {
    wall: f64,
    cpu: f64,
    faults: u64,
}

impl std::ops::AddAssign for Measured {
    fn add_assign(&mut self, other: Measured) {
        self.wall += other.wall;
        self.cpu += other.cpu;
        self.faults += other.faults;
    }
}

fn measured_run(
    rt: &tokio::runtime::Runtime,
    runtime: &Runtime,
    n: u32,
    consumers: impl FnOnce() -> Consumers,
) -> Measured {
    let (t, cpu, faults) = (std::time::Instant::now(), process_cpu(), minor_faults());
    let c = consumers();
    let out = rt
        .block_on(runtime.start("bench", limits(n), "{}", c))
        .unwrap();
    assert_eq!(out.run.status, RunStatus::Completed);
    Measured {
        wall: t.elapsed().as_secs_f64(),
        cpu: process_cpu() - cpu,
        faults: minor_faults() - faults,
    }
}

/// A runtime on a store on disk, or (`None`) in memory.
fn paired_runtime(sync: Option<Durability>) -> (Option<tempfile::TempDir>, Runtime) {
    match sync {
        Some(s) => {
            let (dir, rt) = runtime(s);
            (Some(dir), rt)
        }
        None => {
            let store = Store::open_in_memory().unwrap();
            (None, Runtime::new(StoreHandle::spawn(store)))
        }
    }
}

fn bare_run() -> Run {
    let mut r = Run::new("bench", "g", Limits::default(), 0);
    r.lease_owner = Some("bench".into());
    r.lease_expires = Some(i64::MAX);
    r
}

criterion_group!(benches, bench_driver);
criterion_main!(benches);
