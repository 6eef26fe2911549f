//! Every built plugin loads with wasmtime, targets the world it claims and
//! imports nothing that world does not allow.

use crate::common;

use common::wasm::*;
use keel::wasm::{inspect, World};

const BUILT: &[(&str, World)] = &[
    ("agent-scripted-rust.wasm", World::Agent),
    ("agent-scripted-py.wasm", World::Agent),
    ("agent-scripted-js.wasm", World::Agent),
    ("agent-llm-rust.wasm", World::Agent),
    ("hostile-agent-rust.wasm", World::Agent),
    ("policy-rules-rust.wasm", World::Policy),
    ("policy-rules-c.wasm", World::Policy),
    ("policy-rules-py.wasm", World::Policy),
    ("policy-rules-js.wasm", World::Policy),
    ("tool-echo-rust.wasm", World::Tool),
    ("tool-fs-rust.wasm", World::Tool),
];

#[test]
fn every_plugin_targets_its_world_and_imports_only_what_it_allows() {
    for (file, world) in BUILT {
        let Some(p) = plugin(file, *world) else {
            continue;
        };
        assert_eq!(p.world, *world);
        for other in [World::Agent, World::Policy, World::Tool] {
            if other != *world {
                let path = plugin_path(file).unwrap();
                let err = host()
                    .load(&path, other, None)
                    .err()
                    .unwrap_or_else(|| panic!("{file} also loaded as {other}"));
                assert!(
                    err.to_string()
                        .contains(&format!("does not fit the {other} world")),
                    "{err}"
                );
            }
        }
    }
}

#[test]
fn a_core_module_or_garbage_is_not_a_component() {
    let h = host();
    let core = wat::parse_str("(module)").unwrap();
    let e = h
        .load_bytes("core.wasm", &core, World::Agent, None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("core wasm module"), "{e}");
    let e = h
        .load_bytes("junk.wasm", b"\0asm\x0d\0\x01\0garbage", World::Agent, None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a WebAssembly component"), "{e}");
}

#[test]
fn an_unprovided_wasi_interface_or_another_keel_version_is_named_as_such() {
    let h = host();
    for (import, says) in [
        (
            "wasi:http/outgoing-handler@0.2.0",
            "a WASI 0.2 interface this host does not provide",
        ),
        (
            "keel:plugin/log@0.2.0",
            "this host provides keel:plugin@0.1.0",
        ),
    ] {
        let wat = format!("(component (import \"{import}\" (instance)))");
        let bytes = wat::parse_str(&wat).unwrap();
        let e = h
            .load_bytes("c.wasm", &bytes, World::Policy, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(says), "{import}: {e}");
    }
}

#[test]
fn a_component_importing_outside_its_world_is_refused() {
    let h = host();
    let wat = r#"(component
        (import "keel:plugin/model@0.1.0" (instance))
        (import "evil:net/raw@1.0.0" (instance))
    )"#;
    let bytes = wat::parse_str(wat).unwrap();
    let e = h
        .load_bytes("evil.wasm", &bytes, World::Policy, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("keel:plugin/model@0.1.0") && e.contains("does not provide"),
        "{e}"
    );
    let e = h
        .load_bytes("evil.wasm", &bytes, World::Agent, None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("evil:net/raw"), "{e}");
}

#[test]
fn a_pinned_hash_that_does_not_match_refuses_to_load() {
    let Some(path) = plugin_path("tool-echo-rust.wasm") else {
        return;
    };
    let e = host()
        .load(&path, World::Tool, Some(&"0".repeat(64)))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("refusing to run it"), "{e}");
    let bytes = std::fs::read(&path).unwrap();
    let sha = keel::wasm::cache::sha256_hex(&bytes);
    assert!(host().load(&path, World::Tool, Some(&sha)).is_ok());
    let _ = inspect::world_exports(World::Tool);
}

#[test]
fn the_compile_cache_serves_warm_starts_and_never_trusts_a_bad_entry() {
    use keel::wasm::{cache, CacheOutcome, EngineOptions, WasmHost};
    let (Some(echo), Some(fs)) = (
        plugin_path("tool-echo-rust.wasm"),
        plugin_path("tool-fs-rust.wasm"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let opts = || EngineOptions {
        cache_dir: Some(dir.path().to_path_buf()),
        pooling: false,
        ..EngineOptions::default()
    };
    let h = WasmHost::new(opts()).unwrap();
    assert_eq!(
        h.load(&echo, World::Tool, None).unwrap().cache,
        CacheOutcome::Compiled
    );
    assert_eq!(
        h.load(&fs, World::Tool, None).unwrap().cache,
        CacheOutcome::Compiled
    );
    // A new process (engine) loads from the cache.
    let h2 = WasmHost::new(opts()).unwrap();
    assert_eq!(
        h2.load(&echo, World::Tool, None).unwrap().cache,
        CacheOutcome::Hit
    );
    let entry = |file: &std::path::Path| {
        cache::entry_path(
            dir.path(),
            &cache::sha256_hex(&std::fs::read(file).unwrap()),
            h2.engine(),
        )
    };
    // A flipped byte: detected, recompiled, replaced.
    let e = entry(&echo);
    let mut bytes = std::fs::read(&e).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(&e, &bytes).unwrap();
    assert_eq!(
        h2.load(&echo, World::Tool, None).unwrap().cache,
        CacheOutcome::Replaced
    );
    assert_eq!(
        h2.load(&echo, World::Tool, None).unwrap().cache,
        CacheOutcome::Hit
    );
    // Truncated.
    std::fs::write(&e, &std::fs::read(&e).unwrap()[..100]).unwrap();
    assert_eq!(
        h2.load(&echo, World::Tool, None).unwrap().cache,
        CacheOutcome::Replaced
    );
    // Foreign: another component's valid entry under this one's name.
    std::fs::copy(entry(&fs), &e).unwrap();
    let p = h2.load(&echo, World::Tool, None).unwrap();
    assert_eq!(
        p.cache,
        CacheOutcome::Replaced,
        "an entry of another component is not loaded"
    );
}
