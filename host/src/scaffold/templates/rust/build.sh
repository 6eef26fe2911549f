#!/usr/bin/env bash
# Builds this plugin into a component and prints its path last:
#   ./build.sh [OUT.wasm]
# Needs the Rust target wasm32-wasip2 (the Keel checkout's setup adds it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${KEEL_ROOT:-{{keel_root}}}"
out="${1:-$here/build/{{name}}.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "error: the Rust target wasm32-wasip2 is missing: rustup target add wasm32-wasip2" >&2
  exit 1
fi
# The checkout's lock file pins the SDK's dependencies; a shared target
# folder lets scaffolds reuse what the checkout already compiled.
[ -f "$here/Cargo.lock" ] || cp "$root/Cargo.lock" "$here/Cargo.lock"
target="${CARGO_TARGET_DIR:-$root/target/scaffolds}"
cargo build -q --release --target wasm32-wasip2 --manifest-path "$here/Cargo.toml" --target-dir "$target"
mkdir -p "$(dirname "$out")"
cp "$target/wasm32-wasip2/release/{{crate}}.wasm" "$out"
echo "$out"
