#!/bin/sh
# Builds the C twin of policy-rules as a component: build.sh OUT.wasm
#
# clang-19 compiles for wasm32-wasip1 against Debian's wasi-libc (a reactor
# module: no main, `_initialize` runs the constructors), then
# `cargo run -p xtask -- componentize` embeds the `policy` world from wit/ and
# adapts the module with the wasi preview1 reactor adapter.
#
# Needs the Debian packages clang-19, lld-19, wasi-libc and
# libclang-rt-19-dev-wasm32. CLANG may name another clang (19 or newer).
set -eu

die() {
  echo "build.sh: error: $*" >&2
  exit 1
}

[ $# -eq 1 ] || die "usage: $0 OUT.wasm"
case "$1" in
  /*) out=$1 ;;
  *) out=$(pwd)/$1 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
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

# clang looks for <sysroot>/{include,lib}/wasm32-wasip1; point those at
# Debian's wasm32-wasi directories.
build=$here/build
sysroot=$build/sysroot
mkdir -p "$sysroot/include" "$sysroot/lib"
ln -sfn "$wasi_include" "$sysroot/include/wasm32-wasip1"
ln -sfn "$wasi_lib" "$sysroot/lib/wasm32-wasip1"

core=$build/policy-rules-core.wasm
# -nostdlib and the explicit libraries: Debian's builtins archive is not
# where clang looks for it with a wasip1 triple. A 256 KiB stack leaves room for
# the JSON parser's recursion (capped at 128 levels; it needs < 32 KiB).
"$clang" --target=wasm32-wasip1 --sysroot="$sysroot" -mexec-model=reactor \
  -O2 -std=c11 -Wall -Wextra -Werror=implicit-function-declaration \
  -I"$here" \
  -nostdlib "$wasi_lib/crt1-reactor.o" \
  "$here/policy_rules.c" "$here/rules.c" "$here/json.c" "$here/gen/policy.c" \
  -lc "$builtins" \
  -Wl,-z,stack-size=262144 -Wl,--strip-debug \
  -o "$core" || die "compiling the core module failed"

cd "$root"
cargo run -q -p xtask -- componentize --wit wit --world policy --adapter reactor "$core" "$out" ||
  die "xtask componentize failed"
echo "built $out"
