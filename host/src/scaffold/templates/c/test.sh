#!/bin/sh
# Runs this plugin's unit tests natively, with the SDK built without a
# world: ./test.sh  (CC picks the compiler, default cc)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=${KEEL_ROOT:-{{keel_root}}}
sdk=$root/guest-sdk/c
mkdir -p "$here/build"
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -g -I"$sdk" \
  "$here/plugin.c" "$here/test_plugin.c" "$sdk/keel_guest.c" -o "$here/build/test_plugin"
exec "$here/build/test_plugin"
