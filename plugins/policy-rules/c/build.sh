#!/bin/sh
# Builds the C twin of policy-rules as a component: build.sh OUT.wasm
# The SDK's build (guest-sdk/c/build.sh) compiles these sources with the SDK
# and componentizes the result; it says which Debian packages it needs.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUT.wasm" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../../guest-sdk/c/build.sh" policy "$1" "$here/policy_rules.c" "$here/rules.c"
