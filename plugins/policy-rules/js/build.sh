#!/usr/bin/env bash
# Builds the JavaScript twin of policy-rules into a component:
#   plugins/policy-rules/js/build.sh OUT.wasm
# Needs Node.js and the pinned componentize-js: npm ci --prefix scripts/js
set -euo pipefail

WORLD=policy
if [ "$#" -ne 1 ]; then
  echo "usage: $0 OUT.wasm" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cli="$root/scripts/js/node_modules/@bytecodealliance/componentize-js/src/cli.js"
if ! command -v node >/dev/null 2>&1; then
  echo "error: node is not installed; the JavaScript plugins need Node.js (>= 20)" >&2
  exit 1
fi
if [ ! -f "$cli" ]; then
  echo "error: componentize-js is not installed; run the setup first: npm ci --prefix scripts/js" >&2
  exit 1
fi

out="$1"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT

# Run from this folder: componentize-js maps the folder of the source (when it
# is the working directory) as the component's module root, so plugin.js can
# import its siblings. Every optional WASI feature is disabled: the component
# imports only the world's own interfaces (keel:plugin/types and log).
cd "$here"
node "$cli" plugin.js \
  --wit "$root/wit" \
  --world-name "$WORLD" \
  --disable stdio random clocks http fetch-event \
  --out "$tmp"
test -s "$tmp" || { echo "error: componentize-js produced no output" >&2; exit 1; }
mv -f "$tmp" "$out"
