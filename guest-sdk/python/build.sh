#!/usr/bin/env bash
# Builds a Python plugin on this SDK into a WebAssembly component.
#
#   guest-sdk/python/build.sh WORLD SRC_DIR OUT.wasm [MODULE]
#
# WORLD is agent, policy or tool; SRC_DIR holds the plugin's modules and
# MODULE (default `app`) is the one that binds `WitWorld`. componentize-py
# generates the bindings (`wit_world`, `componentize_py_types`) in a
# temporary directory of its own; nothing is written beside the sources.
#
# The component imports WASI 0.2 besides keel:plugin: a WASI context that
# grants nothing is enough, since every module is imported and snapshotted
# at build time. STUB_WASI=1 passes --stub-wasi instead (every WASI import
# becomes a trapping stub; a stray print then traps).
set -euo pipefail

sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$sdk/../.." && pwd)"
pin="$(sed -n 's/^componentize-py==//p' "$root/plugins/requirements-py.txt" 2>/dev/null || true)"

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: $0 WORLD SRC_DIR OUT.wasm [MODULE]" >&2
    exit 2
fi
world="$1" src="$2" out="$3" module="${4:-app}"
case "$world" in agent|policy|tool) ;; *) echo "build.sh: world must be agent, policy or tool, not '$world'" >&2; exit 2 ;; esac
[ -f "$src/$module.py" ] || { echo "build.sh: $src/$module.py not found" >&2; exit 2; }

if ! command -v componentize-py >/dev/null 2>&1; then
    echo "build.sh: componentize-py not found on PATH; install it with:" >&2
    echo "    pip install -r $root/plugins/requirements-py.txt   # componentize-py==${pin:-?}" >&2
    exit 1
fi
have="$(componentize-py --version 2>/dev/null | awk '{print $2}')"
if [ -n "$pin" ] && [ "$have" != "$pin" ]; then
    echo "build.sh: warning: componentize-py $have found, $pin is pinned in plugins/requirements-py.txt" >&2
fi

flags=()
if [ "${STUB_WASI:-0}" = 1 ]; then
    flags+=(--stub-wasi)
fi

mkdir -p "$(dirname "$out")"
componentize-py -q -d "$root/wit" -w "$world" componentize -p "$src" -p "$sdk" "${flags[@]}" "$module" -o "$out"
