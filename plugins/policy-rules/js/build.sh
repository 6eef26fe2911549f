#!/usr/bin/env bash
# Builds the JavaScript twin of policy-rules into a component:
#   plugins/policy-rules/js/build.sh OUT.wasm
# The SDK's build (guest-sdk/js/build.sh) stages this folder with the SDK and
# runs the pinned componentize-js (setup: npm ci --prefix scripts/js).
set -euo pipefail
if [ "$#" -ne 1 ]; then
  echo "usage: $0 OUT.wasm" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../../../guest-sdk/js/build.sh" policy "$here" "$1" plugin.js
