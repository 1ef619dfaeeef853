"""End-to-end benchmarks on the local stack: ``make bench`` (or ``python -m tests.benchmarks.pipeline_bench``).

``throughput`` loads the broker with a reproducible fleet and measures, on the same topics:
  1. the reconstructor, Kafka to the three Delta tables (``run --trigger available-now``);
  2. the limit of the engine: the same Kafka source and parse, appended to Delta with no state;
  3. the single-process peer (``tests.benchmarks.peer``): confluent-kafka, dicts, delta-rs.
``scaling`` keeps a fixed update workload on 20 hot sessions while the state grows to 1k, 10k and
100k idle sessions (each with a real 5-row table) and reports each batch's duration and the bytes
its checkpoint wrote.
``floor`` puts the stateful step and the Delta writes of a live-fleet batch (1,000 sessions with
2 update messages each, by default) next to the engine's floor, in one run on the same batches:
  1. a projection of the parsed records to Spark's ``noop`` sink (no state);
  2. a trivial ``applyInPandasWithState`` function (count a group's rows into a long) to ``noop``:
     what the engine costs per group, whatever the function does;
  3. the reconstructor's stateful step to ``noop``;
  4. the whole reconstructor (``pipeline.start``), with each batch's phases from its sinks;
  5. a bare MERGE (offset-guarded update, insert otherwise) and a bare append of the same batch's
     rows into tables of the same size: the Delta floor of the batch's transactions.
Figures go to stdout and to a JSON file; nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from reconstructor.settings import Settings  # noqa: E402
from workbench import localstack  # noqa: E402
from workbench.fleet import FleetSpec, Planned, plan_fleet, publish  # noqa: E402
from workbench.producer import SensorProducer  # noqa: E402
from reconstructor.contract.row_schema import RowSchema  # noqa: E402
from tests.support.kafka import create_topics  # noqa: E402

PARTITIONS = 2


def _spark(shuffle_partitions: int | None, extra_jar: Path | None = None):
    from reconstructor.spark.engine import build_spark, spark_jars

    conf = {"spark.ui.enabled": "false", "spark.driver.memory": "6g"}
    if extra_jar is not None:  # local mode: the driver's classpath is the executors'
        conf["spark.driver.extraClassPath"] = f"{Path(spark_jars(localstack.jars_dir())).resolve()}/*:{extra_jar}"
    return build_spark("reconstructor-bench", jars_dir=localstack.jars_dir(),
                       shuffle_partitions=shuffle_partitions, conf=conf)


PROTOTYPE = Path(__file__).parent / "jvm" / "StateStepPrototype.java"


def _jvm_prototype(work: Path) -> Path | None:
    """The JVM state-step prototype compiled against pyspark's own jars (``javac`` from the JDK);
    None, with a line, when there is no ``javac``."""
    import pyspark

    javac = shutil.which("javac")
    if javac is None:
        print("no javac on PATH: the floor runs without the jvm-prototype variant", flush=True)
        return None
    classes = work / "jvm-classes"
    classes.mkdir(parents=True, exist_ok=True)
    jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", f"{jars}/*", str(PROTOTYPE)], check=True)
    return classes


def _progress(query) -> list[dict]:
    from reconstructor.spark.pipeline import progress_dict

    return [progress_dict(p) for p in query.recentProgress]


def _publish(messages: list[Planned], topics: list[str]) -> float:
    started = time.perf_counter()
    publish(SensorProducer(localstack.bootstrap_servers()), messages, {t: PARTITIONS for t in topics})
    return time.perf_counter() - started


def _reconstructor(spark, pattern: str, root: Path, max_offsets: int | None) -> tuple[float, list[dict]]:
    from reconstructor.spark.pipeline import start

    cfg = Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
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


def _trivial_state(key, frames, state):
    """The floor's state function: count the group's rows into a long."""
    import pandas as pd

    total = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
    state.update((total,))
    yield pd.DataFrame({"topic": [key[0]], "session": [key[1]], "rows": [total]})


def _noop_run(spark, frame, root: Path, mode: str = "append") -> list[dict]:
    """``frame`` (a streaming DataFrame) to Spark's ``noop`` sink, every offset once; its progress."""
    # As ``pipeline.start`` does for available-now: no endless no-data batches for the timeouts.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        query = (frame.writeStream.format("noop").option("checkpointLocation", str(root / "chk"))
                 .outputMode(mode).trigger(availableNow=True).start())
    finally:
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return _progress(query)


def _floor_variant(spark, name: str, pattern: str, root: Path, max_offsets: int) -> tuple[list[dict], dict]:
    """One of the floor benchmark's runs over the same topics; its progress and the sinks' timings."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from reconstructor.spark.pipeline import start
    from reconstructor.spark.parse import parse_records
    from reconstructor.spark.source import kafka_stream
    from reconstructor.spark.stateful import reconstruct, reconstruct_inputs

    if name == "reconstructor":
        cfg = Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                     output=str(root / "out"), checkpoint=str(root / "chk"),
                     max_offsets_per_trigger=max_offsets, compact_every=None)
        running = start(spark, cfg)
        running.await_termination()
        return running.recent_progress(), dict(running.sinks.timings)
    schema = RowSchema.load()
    raw = kafka_stream(spark, bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                       max_offsets_per_trigger=max_offsets)
    parsed = parse_records(raw, schema)
    if name == "projection":
        frame = parsed
    elif name == "jvm-prototype":
        from pyspark.sql import DataFrame

        inputs = reconstruct_inputs(parsed, schema, with_values=False)
        frame = DataFrame(spark._jvm.reconstructor.bench.StateStepPrototype.apply(inputs._jdf), spark)
    elif name == "jvm-aggregate":
        # A stateful operator with no Python: Spark's streaming aggregation keeps a row per group
        # in the same state store, so its cost per group is the engine's without pyspark.
        frame = parsed.groupBy("topic", "group_session").agg(F.count(F.lit(1)).alias("rows"),
                                                             F.max("seq").alias("seq"))
        return _noop_run(spark, frame, root, mode="update"), {}
    elif name in ("trivial", "trivial-wide"):
        # trivial-wide hands the function the reconstructor's own input columns: pyspark converts
        # every column of every group, so this is the engine's floor for the reconstructor's input.
        wide = name == "trivial-wide"
        inputs = reconstruct_inputs(parsed, schema, with_values=False) if wide else parsed.select(
            "topic", "group_session", "seq")
        frame = (inputs.groupBy("topic", "group_session")
                 .applyInPandasWithState(_trivial_state, outputStructType="topic string, session string, rows long",
                                         stateStructType="rows long", outputMode="append",
                                         timeoutConf=GroupStateTimeout.NoTimeout))
    else:
        frame = reconstruct(parsed, schema, session_timeout_ms=int(Settings().session_timeout.total_seconds() * 1000))
    return _noop_run(spark, frame, root), {}


FLOOR_VARIANTS = ("projection", "jvm-aggregate", "jvm-prototype", "trivial", "trivial-wide", "stateful",
                  "reconstructor")


def _live_fleet(prefix: str, topics: list[str], sessions: int, rows: int, rounds: int) -> list[Planned]:
    """Every session's snapshot, then ``rounds`` rounds of one 3-row update per session: batches of
    2 x ``sessions`` offsets then hold 2 messages of every session."""
    ts = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    names = [(topics[i % len(topics)], f"{prefix}s{i}") for i in range(sessions)]
    messages = [_snapshot(t, s, rows, ts) for t, s in names]
    for seq in range(1, rounds + 1):
        for topic, session in names:
            changed = [{"id": f"row-{(seq * 3 + k) % rows}", "values": {"temperature": float(seq), "status": "ok",
                                                                       "reading_count": seq}} for k in range(3)]
            messages.append(Planned(topic, session, {"session": session, "seq": seq, "type": "update", "ts": ts,
                                                     "rows": changed}))
    return messages


def _delta_floor(spark, recon_out: Path, root: Path, repeat: int) -> dict:
    """A bare append and a bare MERGE of one batch's rows into tables of the reconstructor's size.

    The rows are the reconstructor's own last two rounds of changes (one batch's worth); the MERGE
    target is a copy of its ``current_rows``, the append target a copy of its ``row_changes``."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from reconstructor.spark.transactions import IdempotentDml

    changes = spark.read.format("delta").load(str(recon_out / "row_changes"))
    last = changes.agg(F.max("seq")).first()[0]
    batch = changes.filter(F.col("seq") > last - 2).cache()
    rows = batch.count()
    current = spark.read.format("delta").load(str(recon_out / "current_rows"))
    current.write.format("delta").save(str(root / "current"))
    changes.write.format("delta").partitionBy("hour").save(str(root / "changes"))
    latest = (batch.groupBy("topic", "session", "row_id").agg(F.max_by(F.struct("*"), "offset").alias("r"))
              .select("r.*").withColumn("updated_at", F.col("event_ts")).select(*current.columns).cache())
    latest.count()
    assign = {c: f"source.`{c}`" for c in current.columns}

    def merge():
        (DeltaTable.forPath(spark, str(root / "current")).alias("target")
         .merge(latest.alias("source"), "target.topic = source.topic AND target.session = source.session "
                "AND target.row_id = source.row_id")
         .whenMatchedUpdate(condition="source.offset >= target.offset", set=assign)
         .whenNotMatchedInsert(values=assign).execute())

    appends, merges, txn_appends, txn_merges = [], [], [], []
    app = f"floor-{uuid.uuid4().hex[:8]}"
    for i in range(repeat):
        started = time.perf_counter()
        batch.write.format("delta").mode("append").save(str(root / "changes"))
        appends.append(time.perf_counter() - started)
        started = time.perf_counter()
        merge()
        merges.append(time.perf_counter() - started)
        # The same two with Delta's own exactly-once ids (what every batch of the reconstructor
        # asks of Delta): the price of idempotency in Delta itself.
        started = time.perf_counter()
        (batch.write.format("delta").mode("append").option("txnAppId", f"{app}-append").option("txnVersion", i)
         .save(str(root / "changes")))
        txn_appends.append(time.perf_counter() - started)
        started = time.perf_counter()
        with IdempotentDml(spark, f"{app}-merge", i):
            merge()
        txn_merges.append(time.perf_counter() - started)
    batch.unpersist()
    latest.unpersist()
    return {"rows_appended": rows, "rows_merged": latest.count(), "current_rows": current.count(),
            "append_s": statistics.median(appends), "merge_s": statistics.median(merges),
            "appends": appends, "merges": merges,
            "floor_s": statistics.median(appends) + statistics.median(merges),
            "idempotent_append_s": statistics.median(txn_appends), "idempotent_merge_s": statistics.median(txn_merges),
            "idempotent_floor_s": statistics.median(txn_appends) + statistics.median(txn_merges)}


def floor(spark, args, work: Path) -> dict:
    """The stateful step and the Delta writes of a live-fleet batch against the engine's floor."""
    prefix = f"floor{uuid.uuid4().hex[:8]}-"
    topics = [f"{prefix}sensor-{i}" for i in range(4)]
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in topics})
    rounds = 1 + 2 * args.floor_batches
    messages = _live_fleet(prefix, topics, args.floor_sessions, args.floor_rows, rounds)
    publish_s = _publish(messages, topics)
    pattern = f"{prefix}sensor-[0-9]+"
    max_offsets = 2 * args.floor_sessions
    print(f"floor: {args.floor_sessions:,} sessions x {args.floor_rows} rows, then {args.floor_batches} batches of "
          f"2 updates per session ({len(messages):,} messages, published in {publish_s:.1f}s)", flush=True)
    variants = args.floor_variants
    batch_ms: dict[str, list[float]] = {v: [] for v in variants}
    timings = []
    for i in range(args.warmup + args.repeat):
        for name in variants:
            progress, sink_timings = _floor_variant(spark, name, pattern, work / f"{name}-{i}", max_offsets)
            # The first batch loads the snapshots; the update batches are the live fleet.
            updates = [p for p in progress if p["numInputRows"] > 0][1:]
            if i < args.warmup:
                continue
            batch_ms[name] += [p["durationMs"]["triggerExecution"] for p in updates]
            if name == "reconstructor":
                timings += [t for b, t in sorted(sink_timings.items()) if b > 0]
            shown = ", ".join(f"{p['durationMs']['triggerExecution']:,}" for p in updates)
            print(f"  {name}: update batches {shown} ms", flush=True)
    per_group = {name: statistics.median(ms) / args.floor_sessions for name, ms in batch_ms.items()}
    if not set(FLOOR_VARIANTS) - {"jvm-prototype"} <= set(variants):  # a partial run (for a profiler, say): its batches only
        return {"sessions": args.floor_sessions, "batch_ms": batch_ms, "ms_per_group": per_group}
    recon_root = work / f"reconstructor-{args.warmup + args.repeat - 1}" / "out"
    delta = _delta_floor(spark, recon_root, work / "delta-floor", args.repeat + 1)
    writes = {"compute_s": statistics.median(t.compute for t in timings),
              "append_s": statistics.median(t.append for t in timings),
              "merges_s": statistics.median(t.merges for t in timings),
              "current_rows_s": statistics.median(t.tables["current_rows"] for t in timings),
              "sessions_s": statistics.median(t.tables["sessions"] for t in timings),
              "writes_s": statistics.median(t.writes for t in timings)}
    return {"sessions": args.floor_sessions, "rows": args.floor_rows, "batches": args.floor_batches,
            "batch_ms": batch_ms, "ms_per_group": per_group,
            "ratio_stateful_to_trivial": per_group["stateful"] / per_group["trivial"],
            "ratio_stateful_to_trivial_wide": per_group["stateful"] / per_group["trivial-wide"],
            "ratio_jvm_prototype_to_trivial": (per_group["jvm-prototype"] / per_group["trivial"]
                                               if "jvm-prototype" in per_group else None),
            "ratio_reconstructor_to_trivial": per_group["reconstructor"] / per_group["trivial"],
            "reconstructor_phases": writes, "delta_floor": delta,
            "ratio_writes_to_delta_floor": writes["writes_s"] / delta["floor_s"]}


def _print_floor(f: dict) -> None:
    g, d, w = f["ms_per_group"], f["delta_floor"], f["reconstructor_phases"]
    print(f"\n{f['sessions']:,} sessions x 2 updates per batch, ms per group (median batch / sessions):")
    print("| run | ms per group |\n|---|---:|")
    for name, ms in g.items():
        print(f"| {name} | {ms:.2f} |")
    print(f"stateful step / trivial applyInPandasWithState = {f['ratio_stateful_to_trivial']:.2f} "
          f"(/ the trivial function over the same input columns = {f['ratio_stateful_to_trivial_wide']:.2f})")
    if f["ratio_jvm_prototype_to_trivial"] is not None:
        print(f"JVM state-step prototype / trivial applyInPandasWithState = {f['ratio_jvm_prototype_to_trivial']:.2f}")
    print(f"reconstructor batch phases (median): compute {w['compute_s']:.2f}s, append {w['append_s']:.2f}s, "
          f"MERGEs side by side {w['merges_s']:.2f}s (current_rows {w['current_rows_s']:.2f}s, "
          f"sessions {w['sessions_s']:.2f}s)")
    print(f"Delta floor: append of {d['rows_appended']:,} rows {d['append_s']:.2f}s + MERGE of {d['rows_merged']:,} "
          f"rows into {d['current_rows']:,} {d['merge_s']:.2f}s = {d['floor_s']:.2f}s; "
          f"the reconstructor's transactions / floor = {f['ratio_writes_to_delta_floor']:.2f}")
    print(f"  with Delta's exactly-once ids: append {d['idempotent_append_s']:.2f}s + MERGE {d['idempotent_merge_s']:.2f}s "
          f"= {d['idempotent_floor_s']:.2f}s; the reconstructor's transactions / that = "
          f"{w['writes_s'] / d['idempotent_floor_s']:.2f}\n", flush=True)


def _snapshot(topic: str, session: str, rows: int, ts: str) -> Planned:
    table = [{"id": f"row-{i}", "values": {"temperature": 20.0 + i, "status": "ok", "reading_count": i}}
             for i in range(rows)]
    return Planned(topic, session, {"session": session, "seq": 0, "type": "snapshot", "ts": ts, "rows": table})


def _dir_files(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def scaling(spark, args, work: Path, save=lambda partial: None) -> dict:
    """Fixed work on 20 hot sessions while idle sessions in state grow; one batch per round."""
    from reconstructor.spark.pipeline import start

    prefix = f"scale{uuid.uuid4().hex[:8]}-sensor-"
    topics = [f"{prefix}{i}" for i in range(4)]
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in topics})
    ts = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    cfg = Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=f"{prefix}[0-9]+",
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
    p.add_argument("which", nargs="?", choices=["all", "throughput", "scaling", "floor"], default="all")
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
    p.add_argument("--floor-sessions", type=int, default=1000, help="floor: sessions in every batch")
    p.add_argument("--floor-rows", type=int, default=50, help="floor: rows in each session's table")
    p.add_argument("--floor-batches", type=int, default=4, help="floor: measured batches per run")
    p.add_argument("--floor-variants", type=lambda s: s.split(","), default=list(FLOOR_VARIANTS),
                   help=f"floor: which runs (default {','.join(FLOOR_VARIANTS)}; a subset prints its batches only)")
    p.add_argument("--shuffle-partitions", type=int, default=None)
    p.add_argument("--json", default="bench-results.json", help="where to write the figures")
    args = p.parse_args(argv)

    localstack.up()
    work = Path(tempfile.mkdtemp(prefix="recon-bench-"))
    prototype = _jvm_prototype(work) if args.which in ("all", "floor") else None
    if prototype is None:
        args.floor_variants = [v for v in args.floor_variants if v != "jvm-prototype"]
    spark = _spark(args.shuffle_partitions, prototype)
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
        if args.which in ("all", "floor"):
            out["floor"] = floor(spark, args, work / "floor")
            if "delta_floor" in out["floor"]:
                _print_floor(out["floor"])
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
