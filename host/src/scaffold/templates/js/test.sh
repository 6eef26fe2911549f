#!/usr/bin/env bash
# Runs this plugin's unit tests (no build needed): ./test.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${KEEL_ROOT:-{{keel_root}}}"
# The modules import the SDK as ./keel-guest/; keep the link pointing at it.
[ -e "$here/keel-guest" ] || ln -sfn "$root/guest-sdk/js/src" "$here/keel-guest"
cd "$here"
exec node --test logic.test.js
