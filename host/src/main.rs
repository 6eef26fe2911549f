//! The `keel` binary: see `keel --help`.

fn main() {
    std::process::exit(keel::cli::main());
}
