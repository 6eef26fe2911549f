#!/bin/sh
# Builds this plugin into a component and prints its path last:
#   ./build.sh [OUT.wasm]
# Needs clang-19, lld-19, wasi-libc and libclang-rt-19-dev-wasm32 (Debian),
# and cargo, as every C plugin of the Keel checkout does.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=${KEEL_ROOT:-{{keel_root}}}
out=${1:-$here/build/{{name}}.wasm}
KEEL_ROOT=$root "$root/guest-sdk/c/build.sh" {{world}} "$out" "$here/plugin.c"
