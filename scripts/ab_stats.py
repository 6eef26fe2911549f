#!/usr/bin/env python3
"""Medians and changes of an A/B run of `keel bench fanout` (scripts/bench-ab.sh).

Reads DIR/base-N.json and DIR/head-N.json and prints a markdown table: per
metric, the median at base, the median at head and the change from base to
head in percent. `--self-test` checks the arithmetic.
"""
import argparse
import glob
import json
import os
import statistics
import sys

METRICS = [
    ("wall_s", "wall (s)"),
    ("throughput_runs_per_s", "throughput (runs/s)"),
    ("mean_latency_ms", "mean latency (ms)"),
    ("p90_ms", "p90 (ms)"),
    ("p99_ms", "p99 (ms)"),
    ("peak_rss_mib", "peak RSS (MiB)"),
    ("cpu_s", "CPU (s)"),
    ("journal_records_per_run", "journal records per run"),
    ("transitions_per_commit", "transitions per commit"),
    ("cpu_us_per_run", "CPU per run (µs)"),
    ("writer_cpu_us_per_run", "store writer CPU per run (µs)"),
    ("writer_busy_pct", "store writer busy (% of wall)"),
]


def change(base, head):
    """Percent change from base to head; None when base is 0."""
    if base == 0:
        return None
    return (head - base) / base * 100.0


def table(base_runs, head_runs):
    """Per metric both sides report: the medians, the change, and in how
    many of the interleaved pairs (base i, head i) head was lower."""
    rows = []
    for key, label in METRICS:
        b = [r[key] for r in base_runs if key in r]
        h = [r[key] for r in head_runs if key in r]
        if not b or not h:
            continue
        mb, mh = statistics.median(b), statistics.median(h)
        c = change(mb, mh)
        # Run i of base and run i of head ran one after the other.
        pairs = list(zip(b, h)) if len(b) == len(h) else []
        lower = f"{sum(1 for x, y in pairs if y < x)} of {len(pairs)}" if pairs else "n/a"
        rows.append((label, mb, mh, "n/a" if c is None else f"{c:+.1f}%", lower))
    return rows


def load(directory, name):
    runs = []
    for path in sorted(glob.glob(os.path.join(directory, f"{name}-*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def self_test():
    assert change(100.0, 110.0) == 10.0
    assert change(0.0, 1.0) is None
    base = [{"wall_s": w} for w in (3.0, 1.0, 2.0)]
    head = [{"wall_s": w} for w in (1.0, 1.5, 2.0, 9.0)]
    rows = table(base, head)
    assert rows == [("wall (s)", 2.0, 1.75, "-12.5%", "n/a")], rows
    rows = table(base, head[:3])
    assert rows == [("wall (s)", 2.0, 1.5, "-25.0%", "1 of 3")], rows
    print("ab_stats self-test: ok")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--dir")
    p.add_argument("--base", default="base")
    p.add_argument("--head", default="head")
    p.add_argument("--machine", default="")
    a = p.parse_args()
    if a.self_test:
        self_test()
        return 0
    base, head = load(a.dir, "base"), load(a.dir, "head")
    if not base or not head:
        print(f"no results in {a.dir}", file=sys.stderr)
        return 2
    print(f"A/B of `keel bench fanout`, {len(base)} runs of each, interleaved")
    print(f"machine: {a.machine}")
    print(f"base: {a.base}\nhead: {a.head}\n")
    print("| metric | base (median) | head (median) | change | head lower in |")
    print("|---|---|---|---|---|")
    for label, mb, mh, c, lower in table(base, head):
        print(f"| {label} | {mb:.4g} | {mh:.4g} | {c} | {lower} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
