#!/usr/bin/env bash
# Build the Python twin of agent-scripted (world `agent`) as a WebAssembly component.
#
#   plugins/agent-scripted/python/build.sh OUT.wasm
#
# componentize-py generates the bindings (modules `wit_world` and
# `componentize_py_types`) in a temporary directory of its own; nothing
# generated is written next to the sources.
#
# The component imports WASI 0.2 (cli, clocks, random, filesystem, sockets,
# io) besides keel:plugin: the host must link WASI, and a WASI context that
# grants nothing (no preopens, no env, no network) is enough, since all
# modules are imported and snapshotted at build time. Set STUB_WASI=1 to pass
# --stub-wasi instead: every WASI import becomes a trapping stub and the
# component imports only keel:plugin (any stray print then traps).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wit="$here/../../../wit"
world=agent
pin="$(sed -n 's/^componentize-py==//p' "$here/../../requirements-py.txt" 2>/dev/null || true)"

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
out="$1"

if ! command -v componentize-py >/dev/null 2>&1; then
    echo "build.sh: componentize-py not found on PATH; install it with:" >&2
    echo "    pip install -r plugins/requirements-py.txt   # componentize-py==${pin:-?}" >&2
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
componentize-py -q -d "$wit" -w "$world" componentize -p "$here" "${flags[@]}" app -o "$out"
echo "built $out ($(wc -c <"$out") bytes)"
