"""End-to-end benchmarks on the local stack: ``make bench`` (or ``python -m tests.benchmarks.pipeline_bench``).

``throughput`` loads the broker with a reproducible fleet and measures, on the same topics:
  1. the reconstructor, Kafka to the three Delta tables (``run --trigger available-now``);
  2. the limit of the engine: the same Kafka source and parse, appended to Delta with no state;
  3. the single-process peer (``tests.benchmarks.peer``): confluent-kafka, dicts, delta-rs.
``scaling`` keeps a fixed update workload on 20 hot sessions while the state grows to 1k, 10k and
100k idle sessions (each with a real 5-row table) and reports each batch's duration and the bytes
its checkpoint wrote. Figures go to stdout and to a JSON file; nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from reconstructor.config import Config  # noqa: E402
from reconstructor.devstack import localstack  # noqa: E402
from reconstructor.devstack.fleet import FleetSpec, Planned, plan_fleet, publish  # noqa: E402
from reconstructor.devstack.producer import SensorProducer  # noqa: E402
from reconstructor.schema import RowSchema  # noqa: E402
from tests.support.kafka import create_topics  # noqa: E402

PARTITIONS = 2


def _spark(shuffle_partitions: int | None):
    from reconstructor.spark.engine import build_spark

    return build_spark("reconstructor-bench", jars_dir=localstack.jars_dir(),
                       shuffle_partitions=shuffle_partitions,
                       conf={"spark.ui.enabled": "false", "spark.driver.memory": "6g"})


def _progress(query) -> list[dict]:
    from reconstructor.pipeline import progress_dict

    return [progress_dict(p) for p in query.recentProgress]


def _publish(messages: list[Planned], topics: list[str]) -> float:
    started = time.perf_counter()
    publish(SensorProducer(localstack.bootstrap_servers()), messages, {t: PARTITIONS for t in topics})
    return time.perf_counter() - started


def _reconstructor(spark, pattern: str, root: Path, max_offsets: int | None) -> tuple[float, list[dict]]:
    from reconstructor.pipeline import start

    cfg = Config(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                 output=str(root / "out"), checkpoint=str(root / "chk"),
                 max_offsets_per_trigger=max_offsets, compact_every=None)
    started = time.perf_counter()
    running = start(spark, cfg)
    running.await_termination()
    return time.perf_counter() - started, running.recent_progress()


def _stateless_limit(spark, pattern: str, root: Path, max_offsets: int | None) -> tuple[float, list[dict]]:
    """Same source and parse, appended straight to a Delta table partitioned by hour."""
    from pyspark.sql import functions as F

    from reconstructor.spark.parse import parse_records
    from reconstructor.spark.source import kafka_stream

    schema = RowSchema.load()
    raw = kafka_stream(spark, bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                       max_offsets_per_trigger=max_offsets)
    parsed = parse_records(raw, schema).withColumn("hour", F.date_format("kafka_ts", "yyyy-MM-dd-HH"))
    started = time.perf_counter()
    query = (parsed.writeStream.format("delta").partitionBy("hour")
             .option("checkpointLocation", str(root / "chk")).trigger(availableNow=True)
             .start(str(root / "out" / "row_changes")))
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return time.perf_counter() - started, _progress(query)


def _rows_written(spark, path: str) -> int:
    return spark.read.format("delta").load(path).count()


def throughput(spark, args, work: Path) -> dict:
    from tests.benchmarks.peer import run_peer

    spec = FleetSpec(topic_prefix=f"bench{uuid.uuid4().hex[:8]}-sensor-", sensors=args.sensors,
                     sessions_per_sensor=args.sessions, rows=args.rows, updates=args.updates,
                     rows_per_update=args.rows_per_update, end_sessions=False, seed=11,
                     start=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2))
    messages = list(plan_fleet(spec))
    updates = sum(p.message["type"] == "update" for p in messages)
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in spec.topics()})
    publish_s = _publish(messages, spec.topics())
    pattern = f"{spec.topic_prefix}[0-9]+"
    print(f"fleet: {len(messages):,} messages ({updates:,} updates) on {args.sensors} topics x "
          f"{PARTITIONS} partitions, published in {publish_s:.1f}s", flush=True)

    # Warm each engine on the same topics (JVM codegen, Delta, the Kafka client, and for the
    # reconstructor Spark's Python workers) so the measured runs are closer to steady state, as
    # the peer is.  HotSpot keeps compiling for several runs: --warmup 3 or more shows a warmer JVM.
    for i in range(args.warmup):
        _stateless_limit(spark, pattern, work / f"warm-limit-{i}", args.max_offsets)
        _reconstructor(spark, pattern, work / f"warm-reconstructor-{i}", args.max_offsets)
    # Each engine runs --repeat times on the same topics, alternating, and the median counts: one
    # run on a 2-core machine moves by a second either way.
    limits, recons, peers, progress = [], [], [], []
    for i in range(args.repeat):
        limits.append(_stateless_limit(spark, pattern, work / f"limit-{i}", args.max_offsets)[0])
        print(f"stateless limit: {limits[-1]:.1f}s", flush=True)
        seconds, progress = _reconstructor(spark, pattern, work / f"recon-{i}", args.max_offsets)
        recons.append(seconds)
        print(f"reconstructor: {seconds:.1f}s in {len(progress)} batches", flush=True)
        started = time.perf_counter()
        counts = run_peer(localstack.bootstrap_servers(), pattern, str(work / f"peer-{i}" / "row_changes"),
                          RowSchema.load(), group=f"peer-{uuid.uuid4().hex[:8]}")
        peers.append(time.perf_counter() - started)
        print(f"peer: {peers[-1]:.1f}s", flush=True)
    limit_s, recon_s, peer_s = (statistics.median(x) for x in (limits, recons, peers))
    results = {
        "stateless_limit": {"seconds": limit_s, "runs": limits, "updates_per_s": updates / limit_s,
                            "rows_written": _rows_written(spark, str(work / "limit-0/out/row_changes"))},
        "reconstructor": {
            "seconds": recon_s, "runs": recons, "updates_per_s": updates / recon_s, "batches": len(progress),
            "rows_written": _rows_written(spark, str(work / "recon-0/out/row_changes")),
            "batch_ms_median": statistics.median(p["durationMs"]["triggerExecution"] for p in progress),
        },
        "peer": {"seconds": peer_s, "runs": peers, "updates_per_s": counts["updates"] / peer_s,
                 "rows_written": counts["row_changes"], "writer": "delta-rs (deltalake.write_deltalake)"},
    }
    rc = results["reconstructor"]["updates_per_s"]
    return {
        "fleet": {"messages": len(messages), "updates": updates, "sensors": args.sensors,
                  "sessions_per_sensor": args.sessions, "rows": args.rows, "rows_per_update": args.rows_per_update,
                  "partitions_per_topic": PARTITIONS, "max_offsets_per_trigger": args.max_offsets,
                  "repeat": args.repeat, "warmup": args.warmup},
        **results,
        "ratio_reconstructor_to_limit": rc / results["stateless_limit"]["updates_per_s"],
        "ratio_reconstructor_to_peer": rc / results["peer"]["updates_per_s"],
    }


def _snapshot(topic: str, session: str, rows: int, ts: str) -> Planned:
    table = [{"id": f"row-{i}", "values": {"temperature": 20.0 + i, "status": "ok", "reading_count": i}}
             for i in range(rows)]
    return Planned(topic, session, {"session": session, "seq": 0, "type": "snapshot", "ts": ts, "rows": table})


def _dir_files(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def scaling(spark, args, work: Path, save=lambda partial: None) -> dict:
    """Fixed work on 20 hot sessions while idle sessions in state grow; one batch per round."""
    from reconstructor.pipeline import start

    prefix = f"scale{uuid.uuid4().hex[:8]}-sensor-"
    topics = [f"{prefix}{i}" for i in range(4)]
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in topics})
    ts = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    cfg = Config(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=f"{prefix}[0-9]+",
                 output=str(work / "out"), checkpoint=str(work / "chk"), compact_every=None,
                 max_offsets_per_trigger=args.load_batch)
    hot = [(topics[i % 4], f"{prefix}hot-{i}") for i in range(20)]
    seqs = {s: 1 for _, s in hot}
    loaded, report = 0, []
    for target in args.scale:
        new = [_snapshot(topics[i % 4], f"{prefix}idle-{i}", 5, ts) for i in range(loaded, target - len(hot))]
        if not loaded:
            new += [_snapshot(t, s, 5, ts) for t, s in hot]
        started = time.perf_counter()
        _publish(new, topics)
        start(spark, cfg).await_termination()
        loaded = target - len(hot)
        load_s = time.perf_counter() - started
        print(f"state: {target:,} sessions (loaded {len(new):,} in {load_s:.1f}s)", flush=True)
        rounds = []
        for _ in range(args.rounds):
            msgs = []
            for _u in range(10):
                for topic, session in hot:
                    rows = [{"id": f"row-{(seqs[session] + k) % 5}", "values": {"temperature": float(seqs[session]),
                             "status": "ok", "reading_count": seqs[session]}} for k in range(3)]
                    msgs.append(Planned(topic, session, {"session": session, "seq": seqs[session], "type": "update",
                                                         "ts": ts, "rows": rows}))
                    seqs[session] += 1
            _publish(msgs, topics)
            before = _dir_files(work / "chk" / "state")
            running = start(spark, cfg)
            running.await_termination()
            after = _dir_files(work / "chk" / "state")
            written = sum(size for f, size in after.items() if before.get(f) != size)
            (p,) = [p for p in running.recent_progress() if p["numInputRows"] > 0]
            op = p["stateOperators"][0]
            rounds.append({"batch_ms": p["durationMs"]["triggerExecution"],
                           "add_batch_ms": p["durationMs"].get("addBatch"),
                           "state_rows_total": op["numRowsTotal"], "state_rows_updated": op["numRowsUpdated"],
                           "state_commit_ms": op.get("commitTimeMs"), "state_updates_ms": op.get("allUpdatesTimeMs"),
                           "checkpoint_bytes_written": written})
        med = statistics.median(r["batch_ms"] for r in rounds)
        print(f"  {target:>7,} sessions: batch {med:,.0f} ms (median of {len(rounds)}), checkpoint "
              f"{statistics.median(r['checkpoint_bytes_written'] for r in rounds):,.0f} B/batch", flush=True)
        report.append({"sessions_in_state": target, "batch_ms_median": med, "rounds": rounds,
                       "load_seconds": load_s})
        save({"stages": report})  # a long run keeps what it measured if it is stopped
    base = report[0]["batch_ms_median"]
    return {"hot_sessions": len(hot), "updates_per_batch": 10 * len(hot), "stages": report,
            "ratio_largest_to_smallest": report[-1]["batch_ms_median"] / base}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("which", nargs="?", choices=["all", "throughput", "scaling"], default="all")
    p.add_argument("--sensors", type=int, default=4)
    p.add_argument("--sessions", type=int, default=10, help="sessions per sensor")
    p.add_argument("--rows", type=int, default=200, help="rows in each session's snapshot")
    p.add_argument("--updates", type=int, default=1000, help="update messages per session")
    p.add_argument("--rows-per-update", type=int, default=3)
    p.add_argument("--max-offsets", type=int, default=None, help="maxOffsetsPerTrigger (default: none)")
    p.add_argument("--repeat", type=int, default=3, help="measured runs of each engine; the median counts")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each engine first")
    p.add_argument("--scale", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 10000, 100000])
    p.add_argument("--rounds", type=int, default=3, help="measured batches per state size")
    p.add_argument("--load-batch", type=int, default=50_000, help="maxOffsetsPerTrigger while loading state")
    p.add_argument("--shuffle-partitions", type=int, default=None)
    p.add_argument("--json", default="bench-results.json", help="where to write the figures")
    args = p.parse_args(argv)

    localstack.up()
    spark = _spark(args.shuffle_partitions)
    work = Path(tempfile.mkdtemp(prefix="recon-bench-"))
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "spark": spark.version, "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions")},
           "started": dt.datetime.now(dt.timezone.utc).isoformat()}
    try:
        if args.which in ("all", "throughput"):
            out["throughput"] = throughput(spark, args, work / "throughput")
            t = out["throughput"]
            print("\n| run | seconds, median (runs) | updates/s |\n|---|---:|---:|")
            for name in ("reconstructor", "stateless_limit", "peer"):
                runs = ", ".join(f"{r:.1f}" for r in t[name]["runs"])
                print(f"| {name} | {t[name]['seconds']:.1f} ({runs}) | {t[name]['updates_per_s']:,.0f} |")
            print(f"reconstructor / limit = {t['ratio_reconstructor_to_limit']:.2f}, "
                  f"reconstructor / peer = {t['ratio_reconstructor_to_peer']:.2f}\n", flush=True)
        if args.which in ("all", "scaling"):
            def save(partial):
                Path(args.json).write_text(json.dumps({**out, "scaling": partial}, indent=2, default=str))

            out["scaling"] = scaling(spark, args, work / "scaling", save)
            print(f"batch at {args.scale[-1]:,} / at {args.scale[0]:,} sessions = "
                  f"{out['scaling']['ratio_largest_to_smallest']:.2f}", flush=True)
    finally:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        print(f"figures written to {args.json}")
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
