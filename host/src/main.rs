//! The `keel` binary: see `keel --help`.

// Runs allocate on the async workers and are committed (and freed) on the
// store's writer thread; with glibc's malloc a fan-out spent about a third
// more CPU (BENCHMARKS.md, "Fan-out"). The library leaves the allocator to
// the program that embeds it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The commands, and what only they use, are the binary's: the library's
// public surface is what an embedder needs (lib.rs).
mod bench;
mod cli;
mod plugin_test;
mod scaffold;

// The library's modules and items at the root, so that the commands name
// them as `crate::store`, `crate::Runtime` and so on.
use keel::*;

fn main() {
    std::process::exit(cli::main());
}
