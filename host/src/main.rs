//! The `keel` binary: see `keel --help`.

// Runs allocate on the async workers and are committed (and freed) on the
// store's writer thread; with glibc's malloc a fan-out spent about a third
// more CPU (BENCHMARKS.md, "Fan-out"). The library leaves the allocator to
// the program that embeds it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(keel::cli::main());
}
