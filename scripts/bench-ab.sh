#!/usr/bin/env bash
# A/B comparison of two builds of keel on this machine.
#
#   scripts/bench-ab.sh BASE HEAD [REPEATS] [-- fan-out flags...]
#   scripts/bench-ab.sh --self-test
#
# BASE and HEAD are git refs (tag, branch, commit; HEAD's working tree is
# not used: commit first). Each is checked out into a worktree under
# target/ab/ and built in release mode into target/ab/target (the first
# build there compiles every dependency once; later ones only Keel). Not
# the project's own target directory: cargo names a workspace's artifacts
# by their path inside the workspace, so a worktree's build would pass for
# the checkout's; for the same reason every worktree file is touched before
# its build, so that cargo never takes one ref's build for the other's.
# Each ref's own agent-llm and policy-rules are built in its worktree too
# (a change to the WIT or to a plugin is part of what is compared; a
# binary cannot load the other ref's components across a WIT change); a
# ref without scripts/build-rust-guest.sh uses the checkout's plugins.
# The two binaries are then run interleaved
# (base, head, base, head, ...) REPEATS times each (default 11), so drift in
# the machine's speed reaches both. The fan-out flags default to the
# reference scenario (--runs 20000 --concurrency 5000 --latency 50ms).
# Prints, per metric, the median at base, the median at head and the change.
# Run it with the same ref twice to see the noise floor of a comparison.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stats="$root/scripts/ab_stats.py"

if [[ "${1:-}" == "--self-test" ]]; then
    exec python3 "$stats" --self-test
fi
if [[ $# -lt 2 ]]; then
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
base_ref=$1 head_ref=$2
shift 2
repeats=11
if [[ $# -gt 0 && "$1" != "--" ]]; then
    repeats=$1
    shift
fi
[[ "${1:-}" == "--" ]] && shift
flags=("$@")
[[ ${#flags[@]} -eq 0 ]] && flags=(--runs 20000 --concurrency 5000 --latency 50ms)
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "REPEATS must be a positive number, got $repeats" >&2; exit 2; }

ab="$root/target/ab"
target="$ab/target"
mkdir -p "$ab/bin" "$ab/results"
plugins="$root/target/plugins"

build() { # ref name
    local ref=$1 name=$2 commit wt
    commit=$(git -C "$root" rev-parse --verify "$ref^{commit}") || { echo "unknown ref $ref" >&2; exit 2; }
    wt="$ab/src-$name"
    if [[ -d "$wt" ]]; then
        git -C "$wt" checkout -q --detach "$commit"
    else
        git -C "$root" worktree add -q --detach "$wt" "$commit"
    fi
    echo "building $name = $ref ($commit)" >&2
    git -C "$wt" ls-files -z | (cd "$wt" && xargs -0 touch)
    CARGO_TARGET_DIR="$target" cargo build -q --release -p keel --manifest-path "$wt/Cargo.toml" >&2
    cp "$target/release/keel" "$ab/bin/keel-$name"
    local dir="$ab/plugins-$name"
    rm -rf "$dir"
    if [[ -x "$wt/scripts/build-rust-guest.sh" ]]; then
        echo "building $name's agent-llm and policy-rules" >&2
        for p in agent-llm policy-rules; do
            "$wt/scripts/build-rust-guest.sh" "$p" "$dir/$p-rust.wasm" >&2
        done
    else
        echo "$ref has no scripts/build-rust-guest.sh: $name uses the checkout's plugins" >&2
        [[ -f "$plugins/agent-llm-rust.wasm" ]] || { echo "no plugins in $plugins: run 'make plugins' first" >&2; exit 2; }
        mkdir -p "$dir"
        cp "$plugins/agent-llm-rust.wasm" "$plugins/policy-rules-rust.wasm" "$dir/"
    fi
    echo "$commit"
}
base_commit=$(build "$base_ref" base)
head_commit=$(build "$head_ref" head)

out="$ab/results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
cache="$ab/cache"
echo "running ${flags[*]}, $repeats times each, interleaved; results in $out" >&2
for i in $(seq 1 "$repeats"); do
    for name in base head; do
        "$ab/bin/keel-$name" bench fanout "${flags[@]}" --plugins "$ab/plugins-$name" \
            --cache-dir "$cache" --json "$out/$name-$i.json" >/dev/null
        echo "  $name $i/$repeats done" >&2
    done
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
python3 "$stats" --base "$base_ref ($base_commit)" --head "$head_ref ($head_commit)" \
    --machine "$(nproc) x $cpu" --dir "$out"
