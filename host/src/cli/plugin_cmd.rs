//! `keel plugin inspect|check|compile|new|test`.

use super::exit;
use crate::plugin_test;
use crate::scaffold::{self, Lang, ScaffoldError};
use crate::wasm::{cache, inspect, EngineOptions, WasmHost, World};
use anyhow::{anyhow, Context};
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// Show a component's world, imports, exports, size, sha256 and the
    /// language it was built from, where that can be told.
    Inspect {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check that a component fits a world (agent, policy or tool): exit 0
    /// if it does, 2 with the reason if not.
    Check {
        file: PathBuf,
        #[arg(long)]
        world: String,
    },
    /// Write a new plugin folder for a world and a language, on that
    /// language's SDK: source, a unit test, a README, build.sh and test.sh.
    /// Refuses a folder that is not empty (exit 2).
    New {
        dir: PathBuf,
        #[arg(long, value_enum)]
        world: WorldArg,
        #[arg(long, value_enum)]
        lang: Lang,
    },
    /// Run a component against recorded cases (a view, or a call and its
    /// effect, or a tool call) and compare its answers: exit 0 when all
    /// match, 1 with a diff per mismatch, 2 for a malformed cases file.
    Test {
        file: PathBuf,
        #[arg(long, value_enum)]
        world: WorldArg,
        /// The cases file (JSON; see docs/plugin-test.md).
        #[arg(long)]
        cases: PathBuf,
        /// The compile cache (default: .keel/cache).
        #[arg(long, default_value = ".keel/cache")]
        cache_dir: PathBuf,
    },
    /// Compile components into the cache, so that the next run loads them
    /// in milliseconds.
    Compile {
        files: Vec<PathBuf>,
        /// The compile cache (default: .keel/cache).
        #[arg(long, default_value = ".keel/cache")]
        cache_dir: PathBuf,
    },
}

/// `--world` of `keel plugin new`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum WorldArg {
    Agent,
    Policy,
    Tool,
}

impl From<WorldArg> for World {
    fn from(w: WorldArg) -> World {
        match w {
            WorldArg::Agent => World::Agent,
            WorldArg::Policy => World::Policy,
            WorldArg::Tool => World::Tool,
        }
    }
}

/// A cases file's text, refused past its size bound.
fn read_cases(path: &std::path::Path) -> anyhow::Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut text = String::new();
    f.take(plugin_test::cases::MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > plugin_test::cases::MAX_FILE_BYTES {
        anyhow::bail!("larger than {} bytes", plugin_test::cases::MAX_FILE_BYTES);
    }
    Ok(text)
}

fn parse_world(s: &str) -> anyhow::Result<World> {
    match s {
        "agent" => Ok(World::Agent),
        "policy" => Ok(World::Policy),
        "tool" => Ok(World::Tool),
        _ => Err(anyhow!("--world: {s:?} is not agent, policy or tool")),
    }
}

/// The source language, from the producers section and telltale imports.
fn language(bytes: &[u8]) -> &'static str {
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if has(b"componentize-py") {
        "python"
    } else if has(b"StarlingMonkey") || has(b"componentize-js") || has(b"spidermonkey") {
        "javascript"
    } else if has(b"rustc") {
        "rust"
    } else if has(b"wit-bindgen-c") || has(b"clang") {
        "c"
    } else {
        "unknown"
    }
}

pub async fn run(cmd: PluginCommand) -> anyhow::Result<i32> {
    match cmd {
        PluginCommand::Inspect { file, json } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let host = WasmHost::new(EngineOptions {
                pooling: false,
                ..EngineOptions::default()
            })?;
            crate::wasm::require_component(&file.display().to_string(), &bytes)?;
            let component = wasmtime::component::Component::new(host.engine(), &bytes)
                .map_err(|e| anyhow!("{}: cannot compile: {e:#}", file.display()))?;
            // Exactly what `check` and `run` accept, world by world.
            let fits: Vec<(World, Result<(), String>)> = [World::Agent, World::Policy, World::Tool]
                .into_iter()
                .map(|w| (w, host.fits(&component, w)))
                .collect();
            let worlds: Vec<World> = fits
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(w, _)| *w)
                .collect();
            let world = worlds.first().copied();
            let imports = inspect::imports(host.engine(), &component);
            let exports = inspect::exports(host.engine(), &component);
            let sha = cache::sha256_hex(&bytes);
            let lang = language(&bytes);
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "file": file, "world": world, "worlds": worlds, "size": bytes.len(), "sha256": sha,
                        "language": lang, "imports": imports, "exports": exports,
                        "refusals": fits.iter().filter_map(|(w, r)| r.as_ref().err().map(|e| (w.as_str(), e))).collect::<std::collections::BTreeMap<_, _>>() })
                );
            } else {
                println!("file:     {}", file.display());
                match world {
                    Some(w) => println!("world:    {w}"),
                    None => {
                        println!("world:    none (`keel plugin check` refuses it for every world)");
                        for (w, r) in &fits {
                            if let Err(e) = r {
                                println!("  as {w}: {}", super::output::safe(e));
                            }
                        }
                    }
                }
                println!("language: {lang}");
                println!("size:     {} bytes", bytes.len());
                println!("sha256:   {sha}");
                println!("exports:  {}", exports.join(", "));
                println!("imports:");
                for i in imports {
                    println!("  {i}");
                }
            }
            Ok(exit::OK)
        }
        PluginCommand::Check { file, world } => {
            let world = parse_world(&world)?;
            let host = WasmHost::new(EngineOptions {
                pooling: false,
                ..EngineOptions::default()
            })?;
            host.load(&file, world, None)?;
            println!("{} fits the {world} world", file.display());
            Ok(exit::OK)
        }
        PluginCommand::New { dir, world, lang } => {
            let world = World::from(world);
            match scaffold::write(&dir, world, lang, &scaffold::default_root()) {
                Ok(files) => {
                    for f in &files {
                        println!("wrote {}", f.display());
                    }
                    println!(
                        "next: {0}/test.sh, then {0}/build.sh and keel plugin check <its last line> --world {world}",
                        dir.display()
                    );
                    Ok(exit::OK)
                }
                Err(e @ (ScaffoldError::NotEmpty(_) | ScaffoldError::NotAFolder(_))) => {
                    eprintln!("error: {e}");
                    Ok(exit::USAGE)
                }
                Err(e) => Err(e.into()),
            }
        }
        PluginCommand::Test {
            file,
            world,
            cases,
            cache_dir,
        } => {
            let world = World::from(world);
            let text = match read_cases(&cases) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {}: {e}", cases.display());
                    return Ok(exit::USAGE);
                }
            };
            let parsed = match plugin_test::cases::parse(&text, world) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {}: {e}", cases.display());
                    return Ok(exit::USAGE);
                }
            };
            let host = WasmHost::new(EngineOptions {
                pooling: false,
                cache_dir: Some(cache_dir),
                ..EngineOptions::default()
            })?;
            let plugin = host.load(&file, world, None)?;
            let outcomes = plugin_test::run(&host, &plugin, &parsed).await;
            print!("{}", plugin_test::report(&outcomes, world));
            Ok(if outcomes.iter().all(|o| o.passed) {
                exit::OK
            } else {
                exit::REFUSED
            })
        }
        PluginCommand::Compile { files, cache_dir } => {
            let host = WasmHost::new(EngineOptions {
                pooling: false,
                cache_dir: Some(cache_dir.clone()),
                ..EngineOptions::default()
            })?;
            for f in files {
                let bytes =
                    std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
                crate::wasm::require_component(&f.display().to_string(), &bytes)?;
                let sha = cache::sha256_hex(&bytes);
                eprintln!("compiling {} ({} KiB)…", f.display(), bytes.len() / 1024);
                let started = std::time::Instant::now();
                let (_, outcome) =
                    cache::load_or_compile(host.engine(), Some(&cache_dir), &sha, &bytes)
                        .with_context(|| format!("{}: cannot compile", f.display()))?;
                println!(
                    "{}: {:?} in {:.2?} -> {}",
                    f.display(),
                    outcome,
                    started.elapsed(),
                    cache_dir.display()
                );
            }
            Ok(exit::OK)
        }
    }
}
