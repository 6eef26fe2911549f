#!/bin/sh
# Builds and runs the native unit tests of the rule logic (rules.c, on the
# C SDK built natively, without a world):
#   plugins/policy-rules/c/test.sh
# CC picks the compiler (default cc). With a compiler that supports them, the
# tests run under AddressSanitizer, LeakSanitizer and UBSan, so a leak or an
# out-of-bounds access fails the run. Prints `N passed, M failed` last and
# exits non-zero on any failure.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
build=$here/build
mkdir -p "$build"
bin=$build/test_rules

command -v "$cc" >/dev/null 2>&1 || {
  echo "test.sh: error: C compiler $cc not found (install gcc or set CC)" >&2
  exit 1
}

flags="-std=c11 -Wall -Wextra -Werror -g -O1"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
sdk=$(cd "$here/../../../guest-sdk/c" && pwd)
srcs="$here/rules.c $sdk/keel_guest.c $here/test_rules.c"

# shellcheck disable=SC2086 # word splitting of the flag lists is intended
if printf 'int main(void){return 0;}\n' >"$build/probe.c" &&
  "$cc" $san "$build/probe.c" -o "$build/probe" 2>/dev/null && "$build/probe"; then
  "$cc" $flags $san -I"$here" -I"$sdk" $srcs -o "$bin"
else
  echo "test.sh: sanitizers unavailable with $cc; running without them" >&2
  "$cc" $flags -I"$here" -I"$sdk" $srcs -o "$bin"
fi
rm -f "$build/probe.c" "$build/probe"

ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$bin"
