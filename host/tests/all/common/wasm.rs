//! Built plugins and one shared engine for the wasm tests.
#![allow(dead_code)]

use keel::wasm::{EngineOptions, Plugin, WasmHost, World};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Where `make plugins` put the components.
pub fn plugins_dir() -> PathBuf {
    std::env::var_os("KEEL_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"))
}

/// The path of a built plugin, or `None` (the test skips) when it was not
/// built. Under `CI=true` a missing plugin fails the test instead.
pub fn plugin_path(file: &str) -> Option<PathBuf> {
    let p = plugins_dir().join(file);
    if p.exists() {
        return Some(p);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "{} is missing: `make plugins` must build every plugin under CI",
            p.display()
        );
    }
    eprintln!("skipping: {} not built (run `make plugins`)", p.display());
    None
}

/// The compile cache every test shares, so that each component is
/// compiled once per checkout.
pub fn test_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/keel-test-cache")
}

pub fn host() -> Arc<WasmHost> {
    static HOST: OnceLock<Arc<WasmHost>> = OnceLock::new();
    HOST.get_or_init(|| {
        let cache = test_cache();
        WasmHost::new(EngineOptions {
            cache_dir: Some(cache),
            max_instances: 200,
            ..EngineOptions::default()
        })
        .unwrap()
    })
    .clone()
}

/// Loads (once per process) a built plugin for a world.
pub fn plugin(file: &str, world: World) -> Option<Arc<Plugin>> {
    static LOADED: OnceLock<Mutex<HashMap<(String, World), Arc<Plugin>>>> = OnceLock::new();
    let path = plugin_path(file)?;
    let map = LOADED.get_or_init(Default::default);
    // Hold the lock while compiling so that one test compiles, the rest wait.
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = m.get(&(file.to_string(), world)) {
        return Some(p.clone());
    }
    let p = host()
        .load(&path, world, None)
        .unwrap_or_else(|e| panic!("{e}"));
    m.insert((file.to_string(), world), p.clone());
    Some(p)
}

/// Writes `dir/file`: a config of agent-llm with the echo tool, which the
/// policy allows, and `model` as the body of its `[model]` table; `None`
/// when the plugins are not built.
#[allow(dead_code)]
pub fn llm_echo_config(dir: &std::path::Path, file: &str, model: &str) -> Option<PathBuf> {
    let agent = plugin_path("agent-llm-rust.wasm")?;
    let policy = plugin_path("policy-rules-rust.wasm")?;
    let echo = plugin_path("tool-echo-rust.wasm")?;
    let cfg = format!(
        r#"store = "keel.db"
[engine]
cache_dir = "{cache}"
[model]
{model}
[agent]
component = "{agent}"
[policy]
component = "{policy}"
config = {{ rules = [ {{ tool = "echo", action = "allow" }} ] }}
[[tools]]
component = "{echo}"
"#,
        cache = test_cache().display(),
        agent = agent.display(),
        policy = policy.display(),
        echo = echo.display(),
    );
    let p = dir.join(file);
    std::fs::write(&p, cfg).unwrap();
    Some(p)
}

/// A quickstart-like config in `dir`: a scripted agent writes a file (an
/// approval first) and reads it back. `more` is appended (a `[serve]`
/// section, say).
pub fn quickstart_config(dir: &Path, more: &str) -> Option<PathBuf> {
    let agent = plugin_path("agent-scripted-rust.wasm")?;
    let policy = plugin_path("policy-rules-rust.wasm")?;
    let fs = plugin_path("tool-fs-rust.wasm")?;
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let text = format!(
        r#"
[engine]
cache_dir = "{cache}"
[model]
provider = "stub"
[agent]
component = "{agent}"
[agent.config]
script = [
  {{ call = {{ tool = "fs_write", arguments = {{ path = "hello.txt", content = "hi" }} }} }},
  {{ call = {{ tool = "fs_read", arguments = {{ path = "hello.txt" }} }} }},
  {{ complete = {{ wrote = "hello.txt" }} }},
]
[policy]
component = "{policy}"
[policy.config]
rules = [
  {{ tool = "fs_read", action = "allow" }},
  {{ effect = ["local-mutation", "remote-mutation", "destructive"], action = "require-approval", reason = "writes need an operator" }},
]
[[tools]]
component = "{fs}"
config = {{ root = "/workspace" }}
grant = {{ dirs = [{{ host = "{work}", guest = "/workspace", mode = "rw" }}] }}
"#,
        cache = dir.join("cache").display(),
        agent = agent.display(),
        policy = policy.display(),
        fs = fs.display(),
        work = work.display(),
    ) + more;
    let path = dir.join("keel.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}
