#!/usr/bin/env bash
# A private PostgreSQL 15 cluster for Keel's tests and for trying Keel on
# PostgreSQL, in target/postgres/ of this checkout.
#
#   scripts/postgres.sh start    create it if needed, start it if stopped,
#                                wait until it accepts connections, print
#                                its URL (the role `keel`, database `keel`)
#   scripts/postgres.sh url      print the URL of the running cluster
#   scripts/postgres.sh reader   print the URL of its read-only role
#   scripts/postgres.sh admin    print a superuser's URL (tests use it to
#                                create databases and end connections)
#   scripts/postgres.sh stop     stop it (its data stays)
#   scripts/postgres.sh destroy  stop it and delete its data
#
# Idempotent, and quick when the cluster already runs. It listens on
# 127.0.0.1 only (port $KEEL_PG_PORT, default 25432: below the kernel's
# ephemeral range, so no outgoing connection can hold it when a test
# restarts the server) and on a socket in its directory, with password
# authentication for the two Keel roles; the passwords are generated once
# and kept in the cluster's directory (0600).
# PostgreSQL refuses to run as root: as root, the cluster is owned by the
# `postgres` system user (or `nobody`) and run as it.
#
# KEEL_STORE="$(scripts/postgres.sh start)" target/debug/keel run ...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="${KEEL_PG_DIR:-$root/target/postgres}"
port="${KEEL_PG_PORT:-25432}"
bin=/usr/lib/postgresql/15/bin
data="$dir/data"
sock="$dir/socket"
log="$dir/server.log"

say() { printf 'postgres.sh: %s\n' "$*" >&2; }

if [ ! -x "$bin/initdb" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then
    say "installing postgresql-15"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
  else
    say "PostgreSQL 15 is not installed ($bin/initdb): apt-get install postgresql-15"
    exit 1
  fi
fi

# Who runs the server.
if [ "$(id -u)" -eq 0 ]; then
  if id postgres >/dev/null 2>&1; then owner=postgres; else owner=nobody; fi
  as() { runuser -u "$owner" -- "$@"; }
else
  owner=$(id -un)
  as() { "$@"; }
fi

url_for() { # ROLE PASSWORD-FILE
  printf 'postgres://%s:%s@127.0.0.1:%s/keel\n' "$1" "$(cat "$2")" "$port"
}

ready() { as "$bin/pg_isready" -q -h "$sock" -p "$port" -d postgres 2>/dev/null; }

psql_admin() { as "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -d postgres "$@"; }

create() {
  say "creating a PostgreSQL 15 cluster in $dir (owner $owner)"
  mkdir -p "$dir"
  rm -rf "$data" "$sock"
  mkdir -p "$data" "$sock"
  chown "$owner" "$dir" "$data" "$sock"
  chmod 700 "$data"
  # The roles' passwords: hex digits, so the URL needs no escaping.
  (umask 077
   head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/keel.password"
   head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/reader.password")
  as "$bin/initdb" -D "$data" -U "$owner" -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >>"$data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sock'
max_connections = 200
shared_buffers = 256MB
# Durable as in production: every commit reaches the disk.
fsync = on
synchronous_commit = on
EOF
  # Only the cluster's owner over its socket needs no password.
  cat >"$data/pg_hba.conf" <<EOF
local all $owner trust
host  all all 127.0.0.1/32 scram-sha-256
EOF
}

start_server() {
  as "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 -o "-p $port" start >/dev/null || {
    say "the server did not start; its log ($log) ends:"
    tail -20 "$log" >&2 || true
    exit 1
  }
}

setup_roles() {
  local kp rp
  kp=$(cat "$dir/keel.password") rp=$(cat "$dir/reader.password")
  psql_admin <<EOF
SET password_encryption = 'scram-sha-256';
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'keel') THEN
    CREATE ROLE keel LOGIN CREATEDB PASSWORD '$kp';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'keel_reader') THEN
    CREATE ROLE keel_reader LOGIN PASSWORD '$rp';
  END IF;
END \$\$;
SELECT 'CREATE DATABASE keel OWNER keel' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'keel') \gexec
GRANT CONNECT ON DATABASE keel TO keel_reader;
EOF
  # What keel_reader may read is granted by Keel's migrations, which know
  # the tables; by default it may read what keel creates.
  as "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -d keel <<EOF
ALTER DEFAULT PRIVILEGES FOR ROLE keel GRANT SELECT ON TABLES TO keel_reader;
GRANT USAGE ON SCHEMA public TO keel_reader;
EOF
}

cmd="${1:-}"
case "$cmd" in
  start)
    if [ -f "$data/PG_VERSION" ] && ready; then
      url_for keel "$dir/keel.password"; exit 0
    fi
    [ -f "$data/PG_VERSION" ] && [ -f "$dir/keel.password" ] || create
    # A server killed without a clean shutdown leaves its pid file; pg_ctl
    # sees the process is gone and starts anyway.
    start_server
    setup_roles
    url_for keel "$dir/keel.password"
    ;;
  url)
    ready || { say "not running: scripts/postgres.sh start"; exit 1; }
    url_for keel "$dir/keel.password"
    ;;
  reader)
    ready || { say "not running: scripts/postgres.sh start"; exit 1; }
    url_for keel_reader "$dir/reader.password"
    ;;
  admin)
    ready || { say "not running: scripts/postgres.sh start"; exit 1; }
    # libpq's form for a socket directory: the host is a path.
    printf 'postgres://%s@%s/postgres?host=%s&port=%s\n' "$owner" "localhost" "$sock" "$port"
    ;;
  stop)
    if [ -f "$data/PG_VERSION" ] && ready; then
      as "$bin/pg_ctl" -D "$data" -w -t 60 -m fast stop >/dev/null
    fi
    ;;
  destroy)
    if [ -f "$data/PG_VERSION" ] && ready; then
      as "$bin/pg_ctl" -D "$data" -w -t 60 -m immediate stop >/dev/null || true
    fi
    rm -rf "$dir"
    ;;
  *)
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
