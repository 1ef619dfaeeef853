"""Micro-benchmark of the pure core (no Spark): python -m tests.benchmarks.core_bench

Applies a snapshot of N rows, then N update messages of 3 rows each, shuffled over 8 frames as
Spark would hand them over, and round-trips the state blob.  Then the per-session cost of a small
batch (``--small-updates`` messages on a ``--small-rows`` table), state blob in and out, which is
what a micro-batch pays for every session it touches; and the same batch per group the way
pyspark's ``applyInPandasWithState`` worker runs it (the group's Arrow slice to pandas, the state
row in and out of a ``GroupState``, the state function with its output frames, the concatenation
of all groups' output), without a JVM.  Prints seconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import time

from reconstructor.core.batch import process_batch
from reconstructor.core.blob import dump_table, load_table, read_table
from reconstructor.core.step_spec import StepSpec
from tests.support.model import SCHEMA, Msg, split_rows, to_frame


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
    frames = split_rows(to_frame(updates).sample(frac=1, random_state=1), 8)
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
    worker_groups(args, rng)


def _small_session(args, rng: random.Random):
    """An open session with a ``--small-rows`` table, and a batch of ``--small-updates`` for it."""
    snap = Msg(0, "snapshot", offset=0, rows=[
        {"id": f"r{i}", "values": {"temperature": 1.0, "status": "ok", "reading_count": i}}
        for i in range(args.small_rows)])
    state = process_batch("t", "s1", [to_frame([snap])], None, SCHEMA).state
    batch = to_frame([Msg(i, "update", offset=i, rows=[
        {"id": f"r{rng.randrange(args.small_rows)}", "values": {"temperature": float(i), "reading_count": i}}
        for _ in range(3)]) for i in range(1, args.small_updates + 1)])
    batch = batch.astype({"pressure": "float64", "humidity": "float64", "reading_count": "Int64",
                          "calibrated_at": "datetime64[ns]"})  # typed, as Spark hands them over
    return state, batch


def small_batches(args, rng: random.Random) -> None:
    """Many touched sessions, few messages each: blob in, check and apply, blob out."""
    state, batch = _small_session(args, rng)
    blob = dump_table(state.table, SCHEMA)
    t0 = time.perf_counter()
    for _ in range(args.sessions):
        state.stored = read_table(blob, SCHEMA)  # as the Spark shell reads it
        result = process_batch("t", "s1", [batch], state, SCHEMA)
        dump_table(result.state.stored, SCHEMA)
    seconds = time.perf_counter() - t0
    print(f"{args.sessions:,} sessions x {args.small_updates} updates on a {args.small_rows}-row table: "
          f"{seconds / args.sessions * 1000:.2f} ms per session (blob in, apply, blob out)")


def worker_groups(args, rng: random.Random) -> None:
    """``small_batches`` per group as pyspark 4.2's worker runs ``applyInPandasWithState``: what
    a micro-batch that touches many sessions pays for each, pyspark's part included."""
    import pandas as pd
    import pyarrow as pa
    from pyspark.serializers import CPickleSerializer
    from pyspark.sql.conversion import ArrowBatchTransformer

    from reconstructor.core.frames import null_mask, nullable_longs
    from reconstructor.spark.stateful import SessionReconstructor, state_to_tuple
    from tests.support.groupstate import VALUE_SCHEMA, group_state

    state, batch = _small_session(args, rng)
    pickled = CPickleSerializer().dumps(VALUE_SCHEMA.toInternal(state_to_tuple(state, SCHEMA)))
    utc = {c: batch[c].dt.tz_localize("UTC") for c in ("kafka_ts", "event_ts", "calibrated_at")}
    group = batch.assign(**utc)
    for name in nullable_longs(SCHEMA):  # as ``reconstruct_inputs`` hands them over: value and null mask
        group[null_mask(name)] = group[name].isna()
        group[name] = group[name].fillna(0).astype("int64")
    group.insert(0, "group_session", "s1")
    group.insert(0, "topic", "t")
    arrow = pa.RecordBatch.from_pandas(pd.concat([group] * args.sessions, ignore_index=True),
                                       preserve_index=False)
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=7 * 86_400_000))
    t0 = time.perf_counter()
    out, states = [], []
    for i in range(args.sessions):
        columns = ArrowBatchTransformer.to_pandas(arrow.slice(i * len(group), len(group)), timezone="UTC")
        gs = group_state(CPickleSerializer().loads(pickled))  # the worker unpickles each group's state
        out += [f for f in fn(("t", "s1"), iter([pd.concat(columns, axis=1)]), gs) if len(f)]
        states.append(pd.DataFrame({"properties": [gs.json()], "object": [
            CPickleSerializer().dumps(VALUE_SCHEMA.toInternal(gs._value))]}))
    pd.concat(out, ignore_index=True), pd.concat(states, ignore_index=True)
    seconds = time.perf_counter() - t0
    print(f"the same, per group as pyspark's applyInPandasWithState worker runs it: "
          f"{seconds / args.sessions * 1000:.2f} ms per session")


if __name__ == "__main__":
    main()
