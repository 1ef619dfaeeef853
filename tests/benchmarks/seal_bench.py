"""What the fleet seal costs a keyed batch: ``python -m tests.benchmarks.seal_bench``.

On one fleet in Kafka, the reconstructor runs keyed (``--chain-key``) as it ships, and keyed with
the fleet seal left out (the sinks built without their ``FleetLedger``), alternating, ``--repeat``
times each, in one SparkSession; ``--max-offsets`` cuts the fleet into several batches.  The
median batch (Spark's ``triggerExecution``) and the median whole run of each are printed, and
their ratio.  Apart from the runs, the one job a batch that records violations adds
(``violations_sum``) is timed over ``--violation-rows`` rows.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from unittest import mock

from reconstructor.core.chain import ChainKey
from reconstructor.settings import Settings, StatefulEngine
from tests.benchmarks.pipeline_bench import PARTITIONS, _publish, _spark
from tests.support.kafka import create_topics
from workbench import localstack
from workbench.fleet import FleetSpec, plan_fleet

KEY = "seal-bench-key"


def _run(spark, pattern: str, root: Path, max_offsets: int, engine: StatefulEngine,
         fleet: bool) -> tuple[float, list[float]]:
    from reconstructor.spark.pipeline import start

    cfg = Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                   output=str(root / "out"), checkpoint=str(root / "chk"), max_offsets_per_trigger=max_offsets,
                   compact_every=None, engine=engine, chain_key=KEY)
    patch = (mock.patch("reconstructor.spark.sinks.delta_sinks.FleetLedger", lambda *a: None) if not fleet
             else contextlib.nullcontext())
    started = time.perf_counter()
    with patch:
        running = start(spark, cfg)
        running.await_termination()
    seconds = time.perf_counter() - started
    batches = [p["durationMs"]["triggerExecution"] / 1000 for p in running.recent_progress()
               if p.get("numInputRows")]
    return seconds, batches


def _violations_sum_s(spark, rows: int) -> float:
    from reconstructor.spark.sinks.fleet_seal import violations_sum

    frame = spark.createDataFrame(
        [("bench-sensor-0", 0, i, f"s{i % 50}", "SKIPPED", None, i, "a record set aside", None)
         for i in range(rows)],
        "topic STRING, partition INT, offset BIGINT, session STRING, kind STRING, expected_seq BIGINT, "
        "found_seq BIGINT, detail STRING, value STRING").cache()
    frame.count()
    violations_sum(frame, ChainKey(KEY))  # warm
    started = time.perf_counter()
    violations_sum(frame, ChainKey(KEY))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sensors", type=int, default=4)
    p.add_argument("--sessions", type=int, default=25, help="sessions per sensor")
    p.add_argument("--rows", type=int, default=50)
    p.add_argument("--updates", type=int, default=200, help="update messages per session")
    p.add_argument("--max-offsets", type=int, default=5000, help="maxOffsetsPerTrigger")
    p.add_argument("--engine", type=StatefulEngine, default=StatefulEngine.PYTHON)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--violation-rows", type=int, default=1000)
    args = p.parse_args(argv)

    localstack.up()
    work = Path(tempfile.mkdtemp(prefix="recon-seal-bench-"))
    spec = FleetSpec(topic_prefix=f"sealbench{uuid.uuid4().hex[:8]}-sensor-", sensors=args.sensors,
                     sessions_per_sensor=args.sessions, rows=args.rows, updates=args.updates, rows_per_update=2,
                     end_sessions=False, seed=3)
    messages = list(plan_fleet(spec))
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in spec.topics()})
    _publish(messages, spec.topics())
    pattern = f"{spec.topic_prefix}[0-9]+"
    spark = _spark(None)
    try:
        print(f"fleet: {len(messages):,} messages, {args.sensors * args.sessions} sessions, "
              f"maxOffsetsPerTrigger {args.max_offsets}, engine {args.engine.value}", flush=True)
        _run(spark, pattern, work / "warm-on", args.max_offsets, args.engine, True)
        _run(spark, pattern, work / "warm-off", args.max_offsets, args.engine, False)
        runs: dict[bool, list[float]] = {True: [], False: []}
        batches: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.repeat):
            for fleet in (False, True):
                seconds, each = _run(spark, pattern, work / f"{'on' if fleet else 'off'}-{i}", args.max_offsets,
                                     args.engine, fleet)
                runs[fleet].append(seconds)
                batches[fleet].extend(each)
                print(f"fleet seal {'on ' if fleet else 'off'}: {seconds:.1f}s, {len(each)} batches, median "
                      f"{statistics.median(each):.2f}s", flush=True)
        on, off = statistics.median(batches[True]), statistics.median(batches[False])
        print(f"median batch: {on:.3f}s with the fleet seal, {off:.3f}s without: {on / off:.3f}x")
        print(f"median run: {statistics.median(runs[True]):.1f}s with, {statistics.median(runs[False]):.1f}s "
              f"without: {statistics.median(runs[True]) / statistics.median(runs[False]):.3f}x")
        print(f"violations_sum over {args.violation_rows:,} rows: {_violations_sum_s(spark, args.violation_rows):.3f}s")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
