#!/usr/bin/env bash
# Installs what building Keel's plugins needs, idempotently (with --rust,
# only the first of these): the Rust
# wasm32-wasip2 target (or Debian's same-version compiler and library source
# when rustup cannot fetch it), clang/lld/wasi-libc for C, componentize-py for
# Python, componentize-js for JavaScript. When everything is present it only
# checks, in about a second.
#
# With --test it also installs what the test suite runs against:
# Debian's Chromium and ChromeDriver for the page; LiteLLM's proxy, Arize
# Phoenix (the OTLP receiver) and the mcp package (for the MCP fault
# server) each in a virtualenv of its own in the user's cache (shared by
# every checkout, keyed by its pinned requirements), linked as
# target/tools/litellm, target/tools/phoenix and target/tools/mcp-venv;
# and the npm MCP servers (filesystem, everything) into scripts/mcp.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

# A clean checkout's build and test suite write ~5 GiB (target/, the npm
# and pip tools). With under 2 GiB free it cannot succeed, and would fail
# later with a confusing error from whichever tool ran out first (npm's
# "ENOSPC" in a tar entry, say): say so now instead.
need_kib=$((2 * 1024 * 1024))
have_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ -n "$have_kib" ] && [ "$have_kib" -lt "$need_kib" ]; then
  say "only $((have_kib / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }'): the build and tests need about 5 GiB; free some space (old target/ directories, say) and run again"
  exit 1
fi

APT_UPDATED=0
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    say "missing Debian packages: ${missing[*]} (no apt-get here: install them by hand)"; return 1
  fi
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if [ $APT_UPDATED -eq 0 ]; then
    say "apt-get update"; $sudo apt-get update -qq >/dev/null; APT_UPDATED=1
  fi
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Rust guests: prefer rustup's target; fall back to Debian's rustc-web.
if rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  :
elif rustup target add wasm32-wasip2 >/dev/null 2>&1; then
  say "added the rustup target wasm32-wasip2"
else
  say "rustup cannot fetch wasm32-wasip2; using Debian's rustc-web with -Zbuild-std"
  apt_install rustc-web cargo-web rust-web-src
fi

# --rust: only what Rust guests need (the quickstart builds no other language).
[ "${1:-}" = "--rust" ] && exit 0

# C: clang, the wasm linker, wasi-libc and the wasm32 compiler builtins.
apt_install clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32

# Python: componentize-py at the pinned version.
want_py=$(sed -n 's/^componentize-py==//p' plugins/requirements-py.txt)
have_py=$(python3 -m pip show componentize-py 2>/dev/null | sed -n 's/^Version: //p' || true)
if [ "$have_py" != "$want_py" ]; then
  say "installing componentize-py==$want_py"
  python3 -m pip install -q --disable-pip-version-check -r plugins/requirements-py.txt
fi

# JavaScript: componentize-js from the committed lockfile.
stamp=scripts/js/node_modules/.keel-stamp
if [ ! -f "$stamp" ] || [ scripts/js/package-lock.json -nt "$stamp" ]; then
  say "installing componentize-js (npm ci)"
  npm ci --prefix scripts/js --no-audit --no-fund --loglevel=error >/dev/null
  touch "$stamp"
fi

[ "${1:-}" = "--test" ] || exit 0

# The operators' page is tested in Debian's Chromium through its WebDriver.
apt_install chromium chromium-driver

# A Python tool in a virtualenv per version of its pinned requirements,
# linked as target/tools/NAME. The stamp is written last: a venv without
# it is half-installed (an interrupted run) and is built again.
venv_tool() { # NAME REQUIREMENTS WHAT HOW-LONG [LINK]
  local req=$2 key venv
  key=$(sha256sum "$req" | cut -c1-12)
  venv="${XDG_CACHE_HOME:-$HOME/.cache}/keel/$1-$key"
  if [ ! -f "$venv/.keel-complete" ]; then
    say "installing $3 into $venv (about $4)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    touch "$venv/.keel-complete"
  fi
  mkdir -p target/tools
  if [ "${5:-}" = venv ]; then
    # The whole virtualenv: its python only finds its packages when run
    # by a path inside it.
    ln -sfn "$venv" "target/tools/$1"
  else
    ln -sfn "$venv/bin/$1" "target/tools/$1"
  fi
}
venv_tool litellm scripts/requirements-litellm.txt "LiteLLM's proxy" "two minutes"
venv_tool phoenix scripts/requirements-phoenix.txt "Arize Phoenix (the OTLP receiver)" "three minutes"
venv_tool mcp-venv scripts/requirements-mcp.txt "the mcp package (the MCP fault server's API)" "a minute" venv

# MCP servers the tests run Keel's MCP tools against, from their lockfile.
stamp=scripts/mcp/node_modules/.keel-stamp
if [ ! -f "$stamp" ] || [ scripts/mcp/package-lock.json -nt "$stamp" ]; then
  say "installing the MCP test servers (npm ci)"
  npm ci --prefix scripts/mcp --no-audit --no-fund --loglevel=error >/dev/null
  touch "$stamp"
fi
