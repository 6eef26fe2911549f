#!/usr/bin/env bash
# Builds the Python twin of agent-scripted (world `agent`) on the Python SDK:
#
#   plugins/agent-scripted/python/build.sh OUT.wasm
#
# See guest-sdk/python/build.sh for what the component imports (STUB_WASI=1
# stubs WASI out).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
"$here/../../../guest-sdk/python/build.sh" agent "$here" "$1"
echo "built $1 ($(wc -c <"$1") bytes)"
