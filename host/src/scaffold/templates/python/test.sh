#!/usr/bin/env bash
# Runs this plugin's unit tests (no build needed): ./test.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${KEEL_ROOT:-{{keel_root}}}"
cd "$here"
PYTHONPATH="$root/guest-sdk/python:$here" exec python3 -m unittest discover -s "$here" -p 'test_*.py'
