#!/usr/bin/env python3
"""What one `events` row costs SQLite to insert, with and without
AUTOINCREMENT and the (run_id, seq) index, as the fan-out inserts them:
rows of 5,000 interleaved runs, 60 to a statement batch, in one transaction,
in memory (so the figure is SQLite's CPU alone, not the disk's).

    python3 scripts/sqlite_insert_cost.py [ROWS] [ROUNDS]

Prints the median over ROUNDS interleaved rounds (default 5) of the time
per row for each variant, and its ratio to the first. Python's own cost
per row (a tuple handed to executemany) is in every figure alike.
"""
import random
import sqlite3
import statistics
import sys
import time

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 120_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
TABLE = """CREATE TABLE events (seq INTEGER PRIMARY KEY{autoincrement}, run_id TEXT NOT NULL,
    step_idx INTEGER, kind TEXT NOT NULL, data TEXT NOT NULL, at INTEGER NOT NULL);"""
INDEX = "CREATE INDEX events_run ON events(run_id, seq);"
VARIANTS = [
    ("AUTOINCREMENT + index (schema 1)", TABLE.format(autoincrement=" AUTOINCREMENT") + INDEX),
    ("rowid + index (schema 2)", TABLE.format(autoincrement="") + INDEX),
    ("AUTOINCREMENT, no index", TABLE.format(autoincrement=" AUTOINCREMENT")),
    ("rowid, no index", TABLE.format(autoincrement="")),
]

rng = random.Random(1)
runs = [f"0193a1b2c3d4e5f6{i:08d}aa" for i in range(5_000)]
data = '{"observation":{"kind":"tool_result","content":"{\\"q\\":\\"fan-out\\"}"}}'
rows = [(runs[rng.randrange(len(runs))], 1, "step.done", data, 1_700_000_000_000) for _ in range(ROWS)]


def once(schema):
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(schema)
    start = time.perf_counter()
    db.execute("BEGIN")
    for i in range(0, ROWS, 60):
        db.executemany(
            "INSERT INTO events (run_id, step_idx, kind, data, at) VALUES (?,?,?,?,?)",
            rows[i : i + 60],
        )
    db.execute("COMMIT")
    return (time.perf_counter() - start) / ROWS * 1e6


times = {name: [] for name, _ in VARIANTS}
for _ in range(ROUNDS):
    for name, schema in VARIANTS:
        times[name].append(once(schema))
first = statistics.median(times[VARIANTS[0][0]])
print(f"sqlite {sqlite3.sqlite_version}, {ROWS} rows, {ROUNDS} rounds, medians:")
for name, _ in VARIANTS:
    m = statistics.median(times[name])
    print(f"  {name:34s} {m:5.2f} µs/row   {m / first:4.2f}")
