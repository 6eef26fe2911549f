//! `keel plugin new` and `keel plugin test`: every world in every language
//! is scaffolded, unit-tested, built, accepted by `keel plugin check` and
//! passes its own recorded cases; bad input gets a usage error.

use super::{keel, text};

/// `keel plugin test` with the tests' shared compile cache.
fn plugin_test(wasm: &str, world: &str, cases: &str) -> std::process::Output {
    let cache = super::common::wasm::test_cache();
    keel(&[
        "plugin",
        "test",
        wasm,
        "--world",
        world,
        "--cases",
        cases,
        "--cache-dir",
        cache.to_str().unwrap(),
    ])
}
use std::path::{Path, PathBuf};
use std::process::Command;

const WORLDS: [&str; 3] = ["agent", "policy", "tool"];
const LANGS: [&str; 4] = ["rust", "python", "js", "c"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether a language's toolchain is here. Under `CI=true` a missing one
/// fails the test; elsewhere that language is skipped, by name.
fn toolchain(lang: &str) -> bool {
    let ok = |c: &mut Command| c.output().map(|o| o.status.success()).unwrap_or(false);
    let here = match lang {
        "rust" => Command::new("rustup")
            .args(["target", "list", "--installed"])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l == "wasm32-wasip2")
            })
            .unwrap_or(false),
        "python" => ok(Command::new("componentize-py").arg("--version")),
        "js" => {
            ok(Command::new("node").arg("--version"))
                && root()
                    .join("scripts/js/node_modules/@bytecodealliance/componentize-js/src/cli.js")
                    .is_file()
        }
        _ => {
            ok(Command::new("clang-19").arg("--version"))
                && Path::new("/usr/lib/wasm32-wasi/libc.a").is_file()
        }
    };
    if !here {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the {lang} toolchain is missing: under CI every language must be tested"
        );
        eprintln!("skipping {lang}: its toolchain is not installed");
    }
    here
}

fn sh(script: &Path) -> std::process::Output {
    Command::new(script)
        .env("KEEL_ROOT", root())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()))
}

#[test]
fn every_world_in_every_language_scaffolds_builds_and_passes_its_cases() {
    let tmp = tempfile::tempdir().unwrap();
    for lang in LANGS {
        if !toolchain(lang) {
            continue;
        }
        for world in WORLDS {
            let dir = tmp.path().join(format!("my-{lang}-{world}"));
            let d = dir.to_str().unwrap();
            let o = keel(&["plugin", "new", d, "--world", world, "--lang", lang]);
            assert!(o.status.success(), "{lang} {world}: new: {}", text(&o));
            for f in ["README.md", "build.sh", "test.sh", "cases.json"] {
                assert!(dir.join(f).is_file(), "{lang} {world}: no {f}");
            }
            let o = sh(&dir.join("test.sh"));
            assert!(o.status.success(), "{lang} {world}: test.sh: {}", text(&o));
            let o = sh(&dir.join("build.sh"));
            assert!(o.status.success(), "{lang} {world}: build.sh: {}", text(&o));
            let stdout = String::from_utf8_lossy(&o.stdout);
            let wasm = stdout.lines().last().unwrap_or_default().trim().to_string();
            assert!(
                Path::new(&wasm).is_file(),
                "{lang} {world}: build.sh's last line {wasm:?} is not the component"
            );
            let o = keel(&["plugin", "check", &wasm, "--world", world]);
            assert!(o.status.success(), "{lang} {world}: check: {}", text(&o));
            let cases = dir.join("cases.json");
            let o = plugin_test(&wasm, world, cases.to_str().unwrap());
            assert!(
                o.status.success() && text(&o).contains(" passed, 0 failed"),
                "{lang} {world}: plugin test: {}",
                text(&o)
            );
        }
    }
}

#[test]
fn a_scaffold_never_writes_into_a_folder_that_holds_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mine");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("build.sh"), "my own\n").unwrap();
    let o = keel(&[
        "plugin",
        "new",
        dir.to_str().unwrap(),
        "--world",
        "policy",
        "--lang",
        "c",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not empty"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(dir.join("build.sh")).unwrap(),
        "my own\n"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "nothing else was written"
    );
}

#[test]
fn an_unknown_world_or_language_is_a_usage_error_listing_the_choices() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("x");
    let d = d.to_str().unwrap();
    let o = keel(&["plugin", "new", d, "--world", "robot", "--lang", "c"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("agent, policy, tool"), "{}", text(&o));
    let o = keel(&["plugin", "new", d, "--world", "tool", "--lang", "go"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("rust, python, js, c"), "{}", text(&o));
    assert!(!Path::new(d).exists(), "nothing was written");
}

/// A built twin against the recorded conformance cases: a mismatch prints
/// a diff and exits 1; a malformed file names the case and the key, exit 2.
#[test]
fn plugin_test_diffs_a_mismatch_and_names_a_malformed_case() {
    let Some(wasm) = super::common::wasm::plugin_path("policy-rules-rust.wasm") else {
        return;
    };
    let wasm = wasm.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cases = tmp.path().join("cases.json");
    std::fs::write(
        &cases,
        r#"{"config":{"rules":[{"tool":"fs_read","action":"allow"}]},"cases":[
            {"name":"read","call":{"tool":"fs_read"},"effect":"read-only","expect":{"verdict":"allow"}},
            {"name":"write","call":{"tool":"fs_write"},"effect":"local-mutation","expect":{"verdict":"allow"}}]}"#,
    )
    .unwrap();
    let c = cases.to_str().unwrap();
    let o = plugin_test(wasm, "policy", c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("ok   read") && out.contains("FAIL write"),
        "{out}"
    );
    assert!(
        out.contains("-  \"verdict\": \"allow\"")
            && out.contains("+    \"deny\": \"no rule matched\""),
        "{out}"
    );
    assert!(out.contains("1 passed, 1 failed"), "{out}");

    for (file, want) in [
        (
            r#"{"cases":[{"name":"a","call":{"tool":"t"},"effect":"sometimes","expect":{"verdict":"allow"}}]}"#,
            r#"cases[0] ("a").effect: "sometimes" is not an effect class"#,
        ),
        (
            r#"{"cases":[{"name":"a","call":{"tool":"t"},"effect":"read-only","expect":{"verdict":{"permit":1}}}]}"#,
            r#"cases[0] ("a").expect.verdict: "permit" is not one of"#,
        ),
        (
            r#"{"cases":[{"name":"a","call":{},"effect":"read-only","expect":{"verdict":"allow"}}]}"#,
            r#"cases[0] ("a").call.tool: missing"#,
        ),
        (
            r#"{"cases":[{"call":{"tool":"t"}}]}"#,
            "cases[0].name: missing",
        ),
        (
            r#"{"cases":[{"name":"a","effect":"read-only","expect":{"verdict":"allow"},"extra":1}]}"#,
            r#"cases[0] ("a").call: missing"#,
        ),
        (r#"{"cases":[]}"#, "cases: has no cases"),
        ("{", "cases: invalid JSON"),
    ] {
        std::fs::write(&cases, file).unwrap();
        let o = plugin_test(wasm, "policy", c);
        assert_eq!(o.status.code(), Some(2), "{file}: {}", text(&o));
        assert!(
            text(&o).contains(want),
            "{file}: want {want:?} in {}",
            text(&o)
        );
    }
}

/// Every twin passes the conformance suite's recorded cases as files.
#[test]
fn every_twin_passes_the_recorded_conformance_cases() {
    for (cases, world, twins) in [
        (
            "plugins/policy-rules/cases.json",
            "policy",
            &["rust", "c", "py", "js"][..],
        ),
        (
            "plugins/agent-scripted/cases.json",
            "agent",
            &["rust", "py", "js"][..],
        ),
    ] {
        let name = cases.split('/').nth(1).unwrap_or_default();
        for twin in twins {
            let Some(wasm) = super::common::wasm::plugin_path(&format!("{name}-{twin}.wasm"))
            else {
                continue;
            };
            let file = root().join(cases);
            let o = plugin_test(wasm.to_str().unwrap(), world, file.to_str().unwrap());
            assert!(o.status.success(), "{name}-{twin}: {}", text(&o));
        }
    }
}
