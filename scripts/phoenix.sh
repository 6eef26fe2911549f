#!/usr/bin/env bash
# A private Arize Phoenix (an OTLP/HTTP trace receiver with a REST API to
# read spans back) for Keel's telemetry test, in target/phoenix/ of this
# checkout. Its HTTP API and receiver listen on 127.0.0.1 only; its gRPC
# receiver, which Keel does not use, listens on every interface, because
# Phoenix has no setting for that address.
#
#   scripts/phoenix.sh start   start it unless it runs, wait until it
#                              answers, print its base URL (spans go to
#                              URL/v1/traces, are read at URL/v1/projects/...)
#   scripts/phoenix.sh stop    stop it (its data stays)
#
# Idempotent, and quick when it already runs. Port $KEEL_PHOENIX_PORT
# (default 26006) and, for its gRPC receiver, the port after it. The
# default lies below Linux's ephemeral range (32768-60999), from which the
# kernel hands out the ports of outgoing connections and of listeners
# bound to port 0: the test suite opens hundreds of those while Phoenix
# starts, and one of them once held Phoenix's port. Phoenix itself is
# installed by scripts/setup.sh --test (target/tools/phoenix).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/target/phoenix"
port="${KEEL_PHOENIX_PORT:-26006}"
url="http://127.0.0.1:$port"
bin="$root/target/tools/phoenix"

say() { printf 'phoenix.sh: %s\n' "$*" >&2; }
up() {
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "$url/healthz" >/dev/null 2>&1
}
running() { [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }
# Whether PORT on 127.0.0.1 can be bound now (a listener or a connection
# holding it makes it busy).
free() {
  python3 -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)' "$1"
}

case "${1:-}" in
start)
  if running && up; then echo "$url"; exit 0; fi
  if [ ! -x "$bin" ]; then
    say "Phoenix is not installed ($bin): run scripts/setup.sh --test"
    exit 1
  fi
  if up; then
    say "something else answers on $url: set KEEL_PHOENIX_PORT to a free port"
    exit 1
  fi
  for p in "$port" $((port + 1)); do
    if ! free "$p"; then
      say "port $p on 127.0.0.1 is in use (Phoenix needs $port and $((port + 1))): set KEEL_PHOENIX_PORT to a free pair"
      exit 1
    fi
  done
  mkdir -p "$dir"
  PHOENIX_WORKING_DIR="$dir/data" PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$port" \
    PHOENIX_GRPC_PORT=$((port + 1)) PHOENIX_TELEMETRY_ENABLED=false \
    setsid "$bin" serve >"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  for _ in $(seq 1 180); do
    if up; then echo "$url"; exit 0; fi
    if ! running; then
      say "Phoenix exited while starting; its log ($dir/server.log) ends:"
      tail -n 20 "$dir/server.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  say "Phoenix did not answer on $url within 90 s; see $dir/server.log"
  exit 1
  ;;
stop)
  if running; then kill "$(cat "$dir/pid")"; fi
  rm -f "$dir/pid"
  ;;
*)
  say "usage: scripts/phoenix.sh start|stop"
  exit 2
  ;;
esac
