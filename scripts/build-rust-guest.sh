#!/usr/bin/env bash
# Builds one Rust guest crate of the workspace into a component:
#   scripts/build-rust-guest.sh PACKAGE OUT.wasm
# With rustup's wasm32-wasip2 target when it is installed, otherwise with
# Debian's rustc-web (same-version library source, -Zbuild-std), linking with
# the wasm-component-ld that ships in rustup's sysroot.
# KEEL_RUST_GUEST=debian forces the fallback, to test it where rustup works.
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=$1 out=$2
file=${pkg//-/_}.wasm
# KEEL_RUST_GUEST=debian forces the fallback (to test it where rustup works).
if [ "${KEEL_RUST_GUEST:-}" != debian ] && rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  cargo build -q --profile guest --target wasm32-wasip2 -p "$pkg"
  src=target/wasm32-wasip2/guest/$file
elif [ -x /usr/bin/rustc ] && [ -d /usr/lib/rustlib/src ]; then
  bin="$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin"
  # wasm-component-ld runs `wasm-ld`: rustup ships one in gcc-ld/. The
  # target's libc comes from Debian's wasi-libc (its preview1 imports are
  # adapted by wasm-component-ld).
  PATH="$bin/gcc-ld:$PATH" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
    CARGO_TARGET_WASM32_WASIP2_LINKER="$bin/wasm-component-ld" \
    CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS="-L /usr/lib/wasm32-wasi" \
    /usr/bin/cargo build -q -Zbuild-std=std,panic_abort --profile guest --target wasm32-wasip2 \
    -p "$pkg" --target-dir target/debian-guest
  src=target/debian-guest/wasm32-wasip2/guest/$file
else
  echo "error: no Rust toolchain for wasm32-wasip2; run scripts/setup.sh" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
cmp -s "$src" "$out" 2>/dev/null || cp "$src" "$out"
