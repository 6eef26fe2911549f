#!/usr/bin/env bash
# Runs this plugin's unit tests natively: ./test.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${KEEL_ROOT:-{{keel_root}}}"
[ -f "$here/Cargo.lock" ] || cp "$root/Cargo.lock" "$here/Cargo.lock"
exec cargo test -q --manifest-path "$here/Cargo.toml" --target-dir "${CARGO_TARGET_DIR:-$root/target/scaffolds}"
