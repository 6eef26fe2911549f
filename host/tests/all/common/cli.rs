//! What the tests of the `keel` binary share: running it, reading what it
//! printed, and the quickstart-like config they drive it with.

use super::wasm::{plugin_path, test_cache};
use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs the `keel` binary with `args` and waits for it.
pub fn keel(args: &[&str]) -> Output {
    super::keel_bin().args(args).output().unwrap()
}

/// What a run of the binary printed, both streams.
pub fn text(o: &Output) -> String {
    super::output_text(o)
}

/// A config like the quickstart's, written to `dir/keel.toml`: `agent` runs
/// a script that calls `fs_write` and then ends with `ending` (TOML, for
/// example `complete = 1`); the policy asks for approval of local
/// mutations, giving `reason` when there is one. `None` when a plugin is
/// not built.
pub fn fs_write_config(
    dir: &Path,
    agent: &Path,
    ending: &str,
    reason: Option<&str>,
) -> Option<PathBuf> {
    let policy = plugin_path("policy-rules-rust.wasm")?;
    let fs = plugin_path("tool-fs-rust.wasm")?;
    let reason = reason
        .map(|r| format!(r#", reason = "{r}""#))
        .unwrap_or_default();
    let cfg = format!(
        r#"store = "keel.db"
[engine]
cache_dir = "{cache}"
[agent]
component = "{agent}"
config = {{ script = [ {{ call = {{ tool = "fs_write", arguments = {{ path = "a.txt", content = "x" }} }} }}, {{ {ending} }} ] }}
[policy]
component = "{policy}"
config = {{ rules = [ {{ effect = "local-mutation", action = "require-approval"{reason} }} ] }}
[[tools]]
component = "{fs}"
grant = {{ dirs = [{{ host = "work", guest = "/workspace", mode = "rw" }}] }}
"#,
        cache = test_cache().display(),
        agent = agent.display(),
        policy = policy.display(),
        fs = fs.display(),
    );
    let p = dir.join("keel.toml");
    std::fs::write(&p, cfg).unwrap();
    Some(p)
}
