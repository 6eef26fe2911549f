//! What a component imports and exports, and whether that fits a world.

use super::World;
use wasmtime::component::Component;
use wasmtime::Engine;

/// The `keel:plugin` interfaces each world may import.
fn keel_imports(world: World) -> &'static [&'static str] {
    match world {
        World::Agent => &[
            "keel:plugin/types@0.1.0",
            "keel:plugin/log@0.1.0",
            "keel:plugin/model@0.1.0",
        ],
        World::Policy | World::Tool => &["keel:plugin/types@0.1.0", "keel:plugin/log@0.1.0"],
    }
}

/// The exports each world must have.
pub fn world_exports(world: World) -> &'static [&'static str] {
    match world {
        World::Agent => &["init", "decide"],
        World::Policy => &["init", "evaluate"],
        World::Tool => &["init", "specs", "call"],
    }
}

/// WASI interface packages any plugin may import. Agents and policies get a
/// WASI context that grants nothing (no files, no environment, no network);
/// tools get exactly what their config grants. Language runtimes import these
/// even when the plugin's code never uses them.
const WASI_PACKAGES: &[&str] = &[
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:sockets/",
];

/// The names of everything the component imports.
pub fn imports(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(n, _)| n.to_string())
        .collect()
}

/// The names of everything the component exports.
pub fn exports(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .exports(engine)
        .map(|(n, _)| n.to_string())
        .collect()
}

/// Which world the exports say a component targets, if any.
pub fn guess_world(engine: &Engine, component: &Component) -> Option<World> {
    let ex = exports(engine, component);
    [World::Tool, World::Policy, World::Agent]
        .into_iter()
        .find(|w| world_exports(*w).iter().all(|e| ex.iter().any(|x| x == e)))
}

/// The version of `keel:plugin` this host provides.
pub const KEEL_PLUGIN_VERSION: &str = "0.1.0";

/// Refuses imports outside the world: a keel interface the world does not
/// have or of another version, a WASI 0.2 interface the host does not
/// provide, or anything that is neither keel nor WASI 0.2.
pub fn check_imports(engine: &Engine, component: &Component, world: World) -> Result<(), String> {
    let allowed = keel_imports(world);
    for name in imports(engine, component) {
        if let Some(rest) = name.strip_prefix("keel:plugin/") {
            let version = rest.split_once('@').map(|(_, v)| v).unwrap_or("");
            if version != KEEL_PLUGIN_VERSION {
                return Err(format!(
                    "imports {name}, built against keel:plugin@{version}, but this host provides keel:plugin@{KEEL_PLUGIN_VERSION}; rebuild it against this host's wit/"
                ));
            }
            if !allowed.contains(&name.as_str()) {
                return Err(format!(
                    "imports {name}, which the {world} world does not provide"
                ));
            }
        } else if name.starts_with("keel:") {
            return Err(format!(
                "imports {name}, which is not a keel:plugin@{KEEL_PLUGIN_VERSION} interface"
            ));
        } else if name.starts_with("wasi:") && name.contains("@0.2.") {
            if !WASI_PACKAGES.iter().any(|p| name.starts_with(p)) {
                return Err(format!(
                    "imports {name}, a WASI 0.2 interface this host does not provide (it provides {})",
                    WASI_PACKAGES
                        .iter()
                        .map(|p| p.trim_end_matches('/'))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        } else {
            return Err(format!(
                "imports {name}, which is neither a keel:plugin interface nor WASI 0.2"
            ));
        }
    }
    let ex = exports(engine, component);
    for e in world_exports(world) {
        if !ex.iter().any(|x| x == e) {
            let hint = guess_world(engine, component)
                .map(|w| format!(" (its exports look like the {w} world)"))
                .unwrap_or_default();
            return Err(format!("has no `{e}` export{hint}"));
        }
    }
    Ok(())
}
