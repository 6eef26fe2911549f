#!/usr/bin/env bash
# Builds a JavaScript plugin written on the Keel SDK into a component:
#   guest-sdk/js/build.sh WORLD SRC_DIR OUT.wasm [ENTRY]
# WORLD is agent, policy or tool; ENTRY (default plugin.js) is the module in
# SRC_DIR that exports the world's functions. The plugin imports the SDK as
# ./keel-guest/...: componentize-js resolves imports only inside the folder
# it builds from, so the plugin's files and the SDK are staged together in a
# temporary folder first. Needs Node.js and the pinned componentize-js
# (npm ci --prefix scripts/js). KEEL_ROOT overrides the checkout to use.
set -euo pipefail

if [ "$#" -lt 3 ] || [ "$#" -gt 4 ]; then
  echo "usage: $0 agent|policy|tool SRC_DIR OUT.wasm [ENTRY.js]" >&2
  exit 2
fi
world="$1"
case "$world" in agent | policy | tool) ;; *)
  echo "error: unknown world '$world' (choose agent, policy or tool)" >&2
  exit 2
  ;;
esac
src="$(cd "$2" && pwd)"
out="$3"
entry="${4:-plugin.js}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${KEEL_ROOT:-$(cd "$sdk/../.." && pwd)}"
cli="$root/scripts/js/node_modules/@bytecodealliance/componentize-js/src/cli.js"
if ! command -v node >/dev/null 2>&1; then
  echo "error: node is not installed; the JavaScript plugins need Node.js (>= 20)" >&2
  exit 1
fi
if [ ! -f "$cli" ]; then
  echo "error: componentize-js is not installed; run the setup first: npm ci --prefix $root/scripts/js" >&2
  exit 1
fi
if [ ! -f "$src/$entry" ]; then
  echo "error: $src/$entry does not exist" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
stage="$(mktemp -d "${TMPDIR:-/tmp}/keel-js-build.XXXXXX")"
tmp="$out.tmp.$$"
trap 'rm -rf "$stage" "$tmp"' EXIT
# The plugin's own modules (not its dependencies or its SDK link), then the SDK.
(cd "$src" && find . -name node_modules -prune -o -name keel-guest -prune -o -name '*.js' -print0 |
  xargs -0 -r cp --parents -t "$stage")
cp -r "$sdk/src" "$stage/keel-guest"

# componentize-js maps the working directory as the component's module root.
# Every optional WASI feature is disabled: the component imports only the
# world's own interfaces.
cd "$stage"
node "$cli" "$entry" \
  --wit "$root/wit" \
  --world-name "$world" \
  --disable stdio random clocks http fetch-event \
  --out "$tmp"
test -s "$tmp" || { echo "error: componentize-js produced no output" >&2; exit 1; }
mv -f "$tmp" "$out"
