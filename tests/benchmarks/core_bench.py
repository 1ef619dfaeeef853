"""Micro-benchmark of the pure core (no Spark): python -m tests.benchmarks.core_bench

Applies a snapshot of N rows, then N update messages of 3 rows each, shuffled over 8 frames as
Spark would hand them over, and round-trips the state blob.  Then the per-session cost of a small
batch (``--small-updates`` messages on a ``--small-rows`` table), state blob in and out, which is
what a micro-batch pays for every session it touches.  Prints seconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from reconstructor.core.blob import dump_table, load_table
from reconstructor.core.session import process_batch
from tests.support.model import SCHEMA, Msg, to_frame


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--updates", type=int, default=5000)
    parser.add_argument("--small-rows", type=int, default=200)
    parser.add_argument("--small-updates", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=500, help="sessions in the small-batch run")
    args = parser.parse_args()
    rng = random.Random(1)
    snap = Msg(0, "snapshot", offset=0, rows=[
        {"id": f"r{i}", "values": {"temperature": 1.0, "status": "ok", "reading_count": i}}
        for i in range(args.rows)])
    t0 = time.perf_counter()
    first = process_batch("t", "s1", [to_frame([snap])], None, SCHEMA)
    t1 = time.perf_counter()
    print(f"snapshot of {args.rows:,} rows: {t1 - t0:.3f}s")
    updates = [Msg(i, "update", offset=i, rows=[
        {"id": f"r{rng.randrange(args.rows)}", "values": {"temperature": float(i)}} for _ in range(3)])
        for i in range(1, args.updates + 1)]
    frames = np.array_split(to_frame(updates).sample(frac=1, random_state=1), 8)
    t0 = time.perf_counter()
    second = process_batch("t", "s1", frames, first.state, SCHEMA)
    t1 = time.perf_counter()
    print(f"{args.updates:,} updates x 3 rows on a {args.rows:,}-row table, 8 shuffled frames: "
          f"{t1 - t0:.3f}s ({len(second.changes) / (t1 - t0):,.0f} row changes/s)")
    t0 = time.perf_counter()
    blob = dump_table(second.state.table, SCHEMA)
    t1 = time.perf_counter()
    load_table(blob, SCHEMA)
    t2 = time.perf_counter()
    print(f"state blob {len(blob):,} bytes: dump {t1 - t0:.4f}s, load {t2 - t1:.4f}s")
    small_batches(args, rng)


def small_batches(args, rng: random.Random) -> None:
    """Many touched sessions, few messages each: blob in, check and apply, blob out."""
    snap = Msg(0, "snapshot", offset=0, rows=[
        {"id": f"r{i}", "values": {"temperature": 1.0, "status": "ok", "reading_count": i}}
        for i in range(args.small_rows)])
    state = process_batch("t", "s1", [to_frame([snap])], None, SCHEMA).state
    blob = dump_table(state.table, SCHEMA)
    batch = to_frame([Msg(i, "update", offset=i, rows=[
        {"id": f"r{rng.randrange(args.small_rows)}", "values": {"temperature": float(i), "reading_count": i}}
        for _ in range(3)]) for i in range(1, args.small_updates + 1)])
    batch = batch.astype({"pressure": "float64", "humidity": "float64", "reading_count": "Int64",
                          "calibrated_at": "datetime64[ns]"})  # typed, as Spark hands them over
    t0 = time.perf_counter()
    for _ in range(args.sessions):
        state.table = load_table(blob, SCHEMA)
        result = process_batch("t", "s1", [batch], state, SCHEMA)
        dump_table(result.state.table, SCHEMA)
    seconds = time.perf_counter() - t0
    print(f"{args.sessions:,} sessions x {args.small_updates} updates on a {args.small_rows}-row table: "
          f"{seconds / args.sessions * 1000:.2f} ms per session (blob in, apply, blob out)")


if __name__ == "__main__":
    main()
