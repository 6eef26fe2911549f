//! The test and benchmark hooks stay out of the `keel` an operator builds:
//! they are features of the crate that only its dev-dependency on itself
//! turns on.

use crate::common;

/// Keel's features as cargo resolves them for a build of the package
/// alone (`cargo build -p keel`, `cargo install`), dev-dependencies left out.
fn features_of_a_plain_build() -> String {
    let o = std::process::Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", "keel", "-e", "no-dev", "--depth", "0"])
        .args(["--offline", "--locked", "-f", "{p}|{f}"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cargo tree: {}",
        common::output_text(&o)
    );
    let out = String::from_utf8(o.stdout).unwrap();
    let line = out.lines().next().unwrap_or_default().to_string();
    assert!(line.starts_with("keel v"), "cargo tree printed {out:?}");
    line.split_once('|')
        .map(|(_, f)| f.trim().to_string())
        .unwrap_or_default()
}

#[test]
fn a_plain_build_of_keel_has_no_test_hooks() {
    let features = features_of_a_plain_build();
    assert_eq!(features, "", "a plain build turns on {features:?}");
}

#[test]
fn the_tests_run_against_a_keel_with_every_hook() {
    assert_eq!(
        keel::BUILD_HOOKS,
        ["fault-injection", "test-hooks", "bench-hooks"]
    );
    let o = common::keel_bin().arg("--version").output().unwrap();
    let text = common::output_text(&o);
    assert!(
        text.contains("test hooks: fault-injection, test-hooks, bench-hooks"),
        "keel --version: {text}"
    );
}
