#!/usr/bin/env bash
# The quickstart: start a run that pauses for approval, approve it with the
# keel command, resume, and show the completed run with its events.
set -euo pipefail
cd "$(dirname "$0")/../.."
keel=target/debug/keel
cfg=examples/quickstart/keel.toml
# KEEL_STORE, when set, names the store for every command (a file, or a
# postgres:// URL such as `scripts/postgres.sh start` prints).
store=${KEEL_STORE:-.keel/quickstart/keel.db}

echo "== keel run: the agent asks to write hello.txt; the policy wants an operator"
set +e
out=$($keel --store "$store" run --config "$cfg" --goal "write hello.txt and read it back" --json)
code=$?
set -e
echo "$out" | python3 -c 'import json,sys
for line in sys.stdin:
    d = json.loads(line)
    if "event" in d:
        e = d["event"]; print("  #%s %s %s" % (e["seq"], e["kind"], e["data"][:110]))'
if [ $code -ne 3 ]; then echo "expected the run to pause (exit 3), got $code" >&2; exit 1; fi
run=$(echo "$out" | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["id"])')
approval=$(echo "$out" | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["pending"]["id"])')

echo "== keel runs"
$keel --store "$store" runs
echo "== keel approve $approval"
$keel --store "$store" approve "$approval" --by quickstart --note "writing hello.txt is fine"
echo "== keel resume $run"
$keel --store "$store" resume "$run"
echo "== keel show $run"
$keel --store "$store" show "$run"
echo "== keel events $run"
$keel --store "$store" events "$run"
echo "== the file the run wrote:"
cat .keel/quickstart/work/hello.txt
