#!/usr/bin/env bash
# Builds this plugin into a component and prints its path last:
#   ./build.sh [OUT.wasm]
# Needs componentize-py (the Keel checkout's `make plugins` installs it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${KEEL_ROOT:-{{keel_root}}}"
out="${1:-$here/build/{{name}}.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
"$root/guest-sdk/python/build.sh" {{world}} "$here" "$out" app
echo "$out"
