//! Keel's build helpers, run from the workspace root as
//! `cargo run -q -p xtask -- <command> ...`.
//!
//! They use the wasm-tools crates as libraries, so building a plugin in C
//! needs no `wit-bindgen` or `wasm-tools` executable on the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use wit_parser::{PackageId, Resolve, WorldId, WorldItem};

const USAGE: &str = "\
usage: cargo run -q -p xtask -- <command>

commands:
  c-bindings --wit DIR --world NAME --out DIR [--check]
      Generate the C bindings of a world (wit-bindgen-c) into DIR; with
      --check, compare them with the files in DIR instead of writing.
  componentize --wit DIR --world NAME --adapter reactor|command CORE.wasm OUT.wasm
      Turn a wasm32-wasip1 core module into a component of the world.
  inspect FILE.wasm
      Validate a component and print the imports and exports of its world.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode> {
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return Ok(ExitCode::FAILURE);
    };
    let mut args = Args::parse(rest)?;
    match cmd.as_str() {
        // Generate (or, with `--check`, verify) the C bindings of a world.
        "c-bindings" => {
            let wit = args.path("--wit")?;
            let world = args.value("--world")?;
            let out = args.path("--out")?;
            let check = args.flag("--check");
            args.positionals(0)?;
            c_bindings(&wit, &world, &out, check)
        }
        // Encode a wasm32-wasip1 core module as a component of a world.
        "componentize" => {
            let wit = args.path("--wit")?;
            let world = args.value("--world")?;
            let adapter = args.value("--adapter")?;
            let files = args.positionals(2)?;
            componentize(
                &wit,
                &world,
                &adapter,
                Path::new(&files[0]),
                Path::new(&files[1]),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        // Print the world of a component: what it imports and exports.
        "inspect" => {
            let files = args.positionals(1)?;
            inspect(Path::new(&files[0]))?;
            Ok(ExitCode::SUCCESS)
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => bail!("unknown command {other:?}\n{USAGE}"),
    }
}

/// Command-line arguments: `--name value` options, `--flag`s and positionals.
struct Args {
    options: BTreeMap<String, Option<String>>,
    positionals: Vec<String>,
}

impl Args {
    const FLAGS: &'static [&'static str] = &["--check"];

    fn parse(args: &[String]) -> Result<Args> {
        let mut options = BTreeMap::new();
        let mut positionals = Vec::new();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if arg.starts_with("--") {
                let value = if Self::FLAGS.contains(&arg.as_str()) {
                    None
                } else {
                    Some(
                        it.next()
                            .with_context(|| format!("{arg} needs a value"))?
                            .clone(),
                    )
                };
                if options.insert(arg.clone(), value).is_some() {
                    bail!("{arg} given twice");
                }
            } else {
                positionals.push(arg.clone());
            }
        }
        Ok(Args {
            options,
            positionals,
        })
    }

    fn value(&mut self, name: &str) -> Result<String> {
        match self.options.remove(name) {
            Some(Some(v)) => Ok(v),
            _ => bail!("missing required option {name}\n{USAGE}"),
        }
    }

    fn path(&mut self, name: &str) -> Result<PathBuf> {
        self.value(name).map(PathBuf::from)
    }

    fn flag(&mut self, name: &str) -> bool {
        self.options.remove(name).is_some()
    }

    /// Exactly `n` positionals; also rejects options nobody asked for.
    fn positionals(&mut self, n: usize) -> Result<Vec<String>> {
        if let Some(unknown) = self.options.keys().next() {
            bail!("unknown option {unknown}\n{USAGE}");
        }
        if self.positionals.len() != n {
            bail!(
                "expected {n} file argument(s), got {:?}\n{USAGE}",
                self.positionals
            );
        }
        Ok(std::mem::take(&mut self.positionals))
    }
}

/// Parses the WIT package(s) in `wit` and selects `world` from them.
fn load_world(wit: &Path, world: &str) -> Result<(Resolve, WorldId)> {
    let mut resolve = Resolve::default();
    let (pkg, _sources): (PackageId, _) = resolve
        .push_path(wit)
        .with_context(|| format!("parsing WIT in {}", wit.display()))?;
    let id = resolve
        .select_world(&[pkg], Some(world))
        .with_context(|| format!("selecting world {world:?} in {}", wit.display()))?;
    Ok((resolve, id))
}

/// Generates the C bindings of `world` with wit-bindgen-c into `out`
/// (`<world>.h`, `<world>.c`). The component type is not emitted as an object
/// file: `componentize` embeds it from the same WIT instead.
fn c_bindings(wit: &Path, world: &str, out: &Path, check: bool) -> Result<ExitCode> {
    let (mut resolve, id) = load_world(wit, world)?;
    let opts = wit_bindgen_c::Opts {
        no_object_file: true,
        ..Default::default()
    };
    let mut files = wit_bindgen_core::Files::default();
    opts.build()
        .generate(&mut resolve, id, &mut files)
        .with_context(|| format!("generating C bindings for world {world:?}"))?;

    if !check {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        for (name, contents) in files.iter() {
            let path = out.join(name);
            std::fs::write(&path, contents)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }

    let mut stale = Vec::new();
    for (name, contents) in files.iter() {
        let path = out.join(name);
        match std::fs::read(&path) {
            Ok(on_disk) if on_disk == contents => {}
            Ok(_) => stale.push(format!("{} differs", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                stale.push(format!("{} is missing", path.display()))
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    if stale.is_empty() {
        println!("C bindings in {} are up to date", out.display());
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "xtask: the committed C bindings are out of date with {}:",
        wit.display()
    );
    for s in &stale {
        eprintln!("  {s}");
    }
    eprintln!(
        "regenerate them with: cargo run -q -p xtask -- c-bindings --wit {} --world {world} --out {}",
        wit.display(),
        out.display()
    );
    Ok(ExitCode::FAILURE)
}

/// Embeds the component type of `world` into the core module `core` and encodes
/// it, with the wasi preview1 adapter, as a validated component at `out`.
fn componentize(wit: &Path, world: &str, adapter: &str, core: &Path, out: &Path) -> Result<()> {
    use wasi_preview1_component_adapter_provider as adapters;
    let adapter_bytes = match adapter {
        "reactor" => adapters::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        "command" => adapters::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
        other => bail!("unknown adapter {other:?}: expected reactor or command"),
    };
    let (resolve, id) = load_world(wit, world)?;
    let mut module = std::fs::read(core).with_context(|| format!("reading {}", core.display()))?;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        id,
        wit_component::StringEncoding::UTF8,
    )
    .context("embedding the component type")?;
    let component = wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .with_context(|| format!("reading core module {}", core.display()))?
        .adapter(adapters::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, adapter_bytes)
        .context("adding the wasi preview1 adapter")?
        .encode()
        .with_context(|| {
            format!(
                "encoding {} as a component of world {world:?}",
                core.display()
            )
        })?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, &component).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// Validates the component at `file` and prints its world's imports and
/// exports (interfaces by their full name, functions by name).
fn inspect(file: &Path) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    if !wasmparser::Parser::is_component(&bytes) {
        bail!("{} is not a WebAssembly component", file.display());
    }
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(&bytes)
        .with_context(|| format!("validating {}", file.display()))?;
    let decoded = wit_component::decode(&bytes)
        .with_context(|| format!("decoding the WIT of {}", file.display()))?;
    let wit_component::DecodedWasm::Component(resolve, world) = decoded else {
        bail!("{} is a WIT package, not a component", file.display());
    };
    let w = &resolve.worlds[world];
    println!("{}: {} bytes", file.display(), bytes.len());
    for (what, items) in [("import", &w.imports), ("export", &w.exports)] {
        for (key, item) in items {
            let kind = match item {
                WorldItem::Interface { .. } => "interface",
                WorldItem::Function(_) => "func",
                WorldItem::Type { .. } => "type",
            };
            println!("{what} {kind} {}", resolve.name_world_key(key));
        }
    }
    Ok(())
}
