//! `keel plugin new`: writes a self-contained plugin folder for one world
//! and one language, built on that language's guest SDK.
//!
//! The folder holds a trivial but real plugin (an agent that completes with
//! its goal, a policy that allows read-only calls and asks for approval
//! otherwise, a tool that echoes), a unit test in the language's own runner,
//! a README, `build.sh` (builds the component, prints its path last),
//! `test.sh`, and `cases.json` for `keel plugin test`. Scripts find the SDK through the Keel checkout named when the
//! folder was written; `KEEL_ROOT` overrides it.

use crate::wasm::World;
use std::path::{Path, PathBuf};

/// The languages a plugin can be scaffolded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
    C,
}

impl Lang {
    #[cfg(test)]
    const ALL: [Lang; 4] = [Lang::Rust, Lang::Python, Lang::Js, Lang::C];

    #[cfg(test)]
    fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::C => "c",
        }
    }

    fn display(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
            Lang::C => "C",
        }
    }

    fn sdk(self) -> &'static str {
        match self {
            Lang::Rust => "guest-sdk",
            Lang::Python => "guest-sdk/python",
            Lang::Js => "guest-sdk/js",
            Lang::C => "guest-sdk/c",
        }
    }
}

/// Why a folder was not written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error("{0} exists and is not empty; nothing was written (pick a new folder)")]
    NotEmpty(PathBuf),
    #[error("{0} exists and is not a folder")]
    NotAFolder(PathBuf),
    #[error("{0} is not a Keel checkout (no wit/keel.wit and guest-sdk/); set KEEL_ROOT to one")]
    NoCheckout(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ScaffoldError + '_ {
    move |source| ScaffoldError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One file of a scaffold: where it goes, its template, whether it runs.
struct File {
    path: &'static str,
    template: &'static str,
    executable: bool,
}

const fn file(path: &'static str, template: &'static str) -> File {
    File {
        path,
        template,
        executable: false,
    }
}

const fn script(path: &'static str, template: &'static str) -> File {
    File {
        path,
        template,
        executable: true,
    }
}

macro_rules! t {
    ($p:literal) => {
        include_str!(concat!("templates/", $p))
    };
}

/// `(agent, policy, tool)` variants of one file.
fn by_world(
    world: World,
    agent: &'static str,
    policy: &'static str,
    tool: &'static str,
) -> &'static str {
    match world {
        World::Agent => agent,
        World::Policy => policy,
        World::Tool => tool,
    }
}

fn files(lang: Lang, world: World) -> Vec<File> {
    let w = |a, p, t| by_world(world, a, p, t);
    let mut out = vec![
        file("README.md", t!("README.md")),
        file(
            "cases.json",
            w(
                t!("cases.agent.json"),
                t!("cases.policy.json"),
                t!("cases.tool.json"),
            ),
        ),
    ];
    match lang {
        Lang::Rust => out.extend([
            file("Cargo.toml", t!("rust/Cargo.toml")),
            file(
                "src/lib.rs",
                w(
                    t!("rust/lib.agent.rs"),
                    t!("rust/lib.policy.rs"),
                    t!("rust/lib.tool.rs"),
                ),
            ),
            script("build.sh", t!("rust/build.sh")),
            script("test.sh", t!("rust/test.sh")),
        ]),
        Lang::Python => out.extend([
            file("app.py", t!("python/app.py")),
            file(
                "plugin.py",
                w(
                    t!("python/plugin.agent.py"),
                    t!("python/plugin.policy.py"),
                    t!("python/plugin.tool.py"),
                ),
            ),
            file(
                "test_plugin.py",
                w(
                    t!("python/test_plugin.agent.py"),
                    t!("python/test_plugin.policy.py"),
                    t!("python/test_plugin.tool.py"),
                ),
            ),
            script("build.sh", t!("python/build.sh")),
            script("test.sh", t!("python/test.sh")),
        ]),
        Lang::Js => out.extend([
            file("package.json", t!("js/package.json")),
            file("plugin.js", t!("js/plugin.js")),
            file(
                "logic.js",
                w(
                    t!("js/logic.agent.js"),
                    t!("js/logic.policy.js"),
                    t!("js/logic.tool.js"),
                ),
            ),
            file(
                "logic.test.js",
                w(
                    t!("js/logic.test.agent.js"),
                    t!("js/logic.test.policy.js"),
                    t!("js/logic.test.tool.js"),
                ),
            ),
            script("build.sh", t!("js/build.sh")),
            script("test.sh", t!("js/test.sh")),
        ]),
        Lang::C => out.extend([
            file(
                "plugin.c",
                w(
                    t!("c/plugin.agent.c"),
                    t!("c/plugin.policy.c"),
                    t!("c/plugin.tool.c"),
                ),
            ),
            file(
                "test_plugin.c",
                w(
                    t!("c/test_plugin.agent.c"),
                    t!("c/test_plugin.policy.c"),
                    t!("c/test_plugin.tool.c"),
                ),
            ),
            script("build.sh", t!("c/build.sh")),
            script("test.sh", t!("c/test.sh")),
        ]),
    }
    out
}

/// A package name from the folder's name: lowercase ASCII letters, digits
/// and `-`, starting with a letter (cargo, npm and the C symbols all accept it).
pub fn package_name(dir: &Path) -> String {
    let raw = dir
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut name = String::new();
    for c in raw.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else if !name.ends_with('-') && !name.is_empty() {
            name.push('-');
        }
    }
    let name = name.trim_end_matches('-').to_string();
    match name.chars().next() {
        Some(c) if c.is_ascii_alphabetic() => name,
        Some(_) => format!("plugin-{name}"),
        None => "plugin".into(),
    }
}

/// The checkout `keel plugin new` points scaffolds at: `KEEL_ROOT`, else the
/// one this binary was built from.
pub fn default_root() -> PathBuf {
    std::env::var_os("KEEL_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

fn what(world: World) -> &'static str {
    match world {
        World::Agent => "an agent that completes the run with its goal.",
        World::Policy => {
            "a policy that allows read-only calls and asks an operator about every other one."
        }
        World::Tool => "a tool component with one tool, `echo`, that answers with its arguments.",
    }
}

fn notes(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "- `Cargo.lock` is copied from the checkout on the first build, so the SDK's\n  dependencies stay at the versions Keel pins.\n",
        Lang::Python => "- `plugin.py` holds the logic, `app.py` binds it for componentize-py.\n",
        Lang::Js => "- `logic.js` holds the logic, `plugin.js` is the component entry;\n  `keel-guest` is a link to the SDK's source (`test.sh` recreates it).\n",
        Lang::C => "- `plugin.c` defines the world's functions; `keel_guest.c` comes from the SDK\n  at build time (`-DKEEL_WORLD_*` picks the world).\n",
    }
}

fn config_snippet(world: World, component: &str) -> String {
    match world {
        World::Agent => format!("[agent]\ncomponent = \"{component}\""),
        World::Policy => format!("[policy]\ncomponent = \"{component}\""),
        World::Tool => format!("[[tools]]\ncomponent = \"{component}\""),
    }
}

fn render(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (key, value) in vars {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    out
}

/// Writes the scaffold into `dir` (created if missing; refused when it holds
/// anything) and returns the files written, in order.
pub fn write(
    dir: &Path,
    world: World,
    lang: Lang,
    root: &Path,
) -> Result<Vec<PathBuf>, ScaffoldError> {
    let root = root
        .canonicalize()
        .map_err(|_| ScaffoldError::NoCheckout(root.to_path_buf()))?;
    if !root.join("wit/keel.wit").is_file() || !root.join(lang.sdk()).is_dir() {
        return Err(ScaffoldError::NoCheckout(root));
    }
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(ScaffoldError::NotAFolder(dir.to_path_buf())),
        Ok(_) => {
            if std::fs::read_dir(dir).map_err(io(dir))?.next().is_some() {
                return Err(ScaffoldError::NotEmpty(dir.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        Err(e) => return Err(io(dir)(e)),
    }
    let name = package_name(dir);
    let world_name = world.as_str();
    let title = {
        let mut c = world_name.chars();
        c.next()
            .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
            .unwrap_or_default()
    };
    let component = dir
        .canonicalize()
        .map_err(io(dir))?
        .join("build")
        .join(format!("{name}.wasm"));
    let vars: Vec<(&str, String)> = vec![
        ("name", name.clone()),
        ("crate", name.replace('-', "_")),
        ("world", world_name.into()),
        ("World", title),
        (
            "exports",
            crate::wasm::inspect::world_exports(world).join(", "),
        ),
        ("keel_root", root.display().to_string()),
        ("language", lang.display().into()),
        ("sdk", lang.sdk().into()),
        ("what", what(world).into()),
        ("notes", notes(lang).into()),
        (
            "config",
            config_snippet(world, &component.display().to_string()),
        ),
    ];
    let mut written = vec![];
    for f in files(lang, world) {
        let path = dir.join(f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, render(f.template, &vars)).map_err(io(&path))?;
        if f.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(io(&path))?;
        }
        written.push(path);
    }
    if lang == Lang::Js {
        let link = dir.join("keel-guest");
        std::os::unix::fs::symlink(root.join("guest-sdk/js/src"), &link).map_err(io(&link))?;
        written.push(link);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_are_safe_for_every_toolchain() {
        assert_eq!(package_name(Path::new("/x/My Policy")), "my-policy");
        assert_eq!(package_name(Path::new("2fast")), "plugin-2fast");
        assert_eq!(package_name(Path::new("a__b--c.")), "a-b-c");
        assert_eq!(package_name(Path::new("ü")), "plugin");
    }

    #[test]
    fn every_placeholder_is_filled() {
        let vars: Vec<(&str, String)> = [
            "name",
            "crate",
            "world",
            "World",
            "exports",
            "keel_root",
            "language",
            "sdk",
            "what",
            "notes",
            "config",
        ]
        .iter()
        .map(|k| (*k, "x".to_string()))
        .collect();
        for lang in Lang::ALL {
            for world in [World::Agent, World::Policy, World::Tool] {
                for f in files(lang, world) {
                    let out = render(f.template, &vars);
                    assert!(
                        !out.contains("{{"),
                        "{} {world} {}: unfilled placeholder",
                        lang.as_str(),
                        f.path
                    );
                }
            }
        }
    }
}
