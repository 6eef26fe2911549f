#!/bin/sh
# Builds a C plugin written on the Keel SDK into a component:
#   guest-sdk/c/build.sh agent|policy|tool OUT.wasm SOURCE.c...
#
# clang-19 compiles the sources with keel_guest.c (which holds the world's
# generated bindings) for wasm32-wasip1 against Debian's wasi-libc, as a
# reactor module; then `cargo run -p xtask -- componentize` embeds the world
# from wit/ and adapts the module with the wasi preview1 reactor adapter.
# CFLAGS adds compiler flags; CLANG names another clang (19 or newer);
# KEEL_ROOT overrides the checkout whose wit/ and xtask are used.
#
# Needs the Debian packages clang-19, lld-19, wasi-libc and
# libclang-rt-19-dev-wasm32, and cargo.
set -eu

die() {
  echo "build.sh: error: $*" >&2
  exit 1
}

[ $# -ge 3 ] || die "usage: $0 agent|policy|tool OUT.wasm SOURCE.c..."
world=$1
case "$world" in
  agent) macro=KEEL_WORLD_AGENT ;;
  policy) macro=KEEL_WORLD_POLICY ;;
  tool) macro=KEEL_WORLD_TOOL ;;
  *) echo "build.sh: error: unknown world '$world' (choose agent, policy or tool)" >&2; exit 2 ;;
esac
case "$2" in
  /*) out=$2 ;;
  *) out=$(pwd)/$2 ;;
esac
shift 2

sdk=$(cd "$(dirname "$0")" && pwd)
root=${KEEL_ROOT:-$(cd "$sdk/../.." && pwd)}
clang=${CLANG:-clang-19}

# Debian's layout: wasi-libc headers and libraries under a `wasm32-wasi`
# directory, compiler-rt's builtins in clang's resource directory.
wasi_include=/usr/include/wasm32-wasi
wasi_lib=/usr/lib/wasm32-wasi
need_pkgs="apt-get install clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32"

command -v "$clang" >/dev/null 2>&1 || die "$clang not found (install it with: $need_pkgs)"
[ -f "$wasi_include/stdlib.h" ] && [ -f "$wasi_lib/libc.a" ] && [ -f "$wasi_lib/crt1-reactor.o" ] ||
  die "wasi-libc not found in $wasi_include and $wasi_lib (install it with: $need_pkgs)"
builtins=$("$clang" -print-resource-dir)/lib/wasi/libclang_rt.builtins-wasm32.a
[ -f "$builtins" ] ||
  die "compiler-rt builtins for wasm32 not found at $builtins (install it with: $need_pkgs)"
command -v cargo >/dev/null 2>&1 || die "cargo not found (needed for xtask componentize)"

srcs=""
for f in "$@"; do
  [ -f "$f" ] || die "no such source file: $f"
  case "$f" in /*) ;; *) f=$(pwd)/$f ;; esac
  srcs="$srcs $f"
done

# clang looks for <sysroot>/{include,lib}/wasm32-wasip1; point those at
# Debian's wasm32-wasi directories.
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-c-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sysroot/include" "$work/sysroot/lib" "$(dirname "$out")"
ln -s "$wasi_include" "$work/sysroot/include/wasm32-wasip1"
ln -s "$wasi_lib" "$work/sysroot/lib/wasm32-wasip1"

core=$work/core.wasm
# -nostdlib and the explicit libraries: Debian's builtins archive is not
# where clang looks for it with a wasip1 triple. A 256 KiB stack leaves room
# for the JSON parser's recursion (capped at 128 levels; it needs < 32 KiB).
# shellcheck disable=SC2086 # the source list and CFLAGS split on purpose
"$clang" --target=wasm32-wasip1 --sysroot="$work/sysroot" -mexec-model=reactor \
  -O2 -std=c11 -Wall -Wextra -Werror=implicit-function-declaration ${CFLAGS:-} \
  -D"$macro" -I"$sdk" \
  -nostdlib "$wasi_lib/crt1-reactor.o" \
  $srcs "$sdk/keel_guest.c" \
  -lc "$builtins" \
  -Wl,-z,stack-size=262144 -Wl,--strip-debug \
  -o "$core" || die "compiling the core module failed"

cd "$root"
cargo run -q -p xtask -- componentize --wit wit --world "$world" --adapter reactor "$core" "$out" ||
  die "xtask componentize failed"
echo "$out"
