"""End-to-end benchmarks on the local stack: ``make bench`` (or ``python -m tests.benchmarks.pipeline_bench``).

The stateful step has two engines (``--engines``, default ``python,jvm``: the Python core in
``applyInPandasWithState``, its Java port in ``flatMapGroupsWithState``); each benchmark runs the
reconstructor under each of them.
``throughput`` loads the broker with a reproducible fleet and measures, on the same topics:
  1. the reconstructor, Kafka to the three Delta tables (``run --trigger available-now``), once per
     engine (``--on-violation quarantine``: in quarantine mode; ``fail,quarantine``: in each, which
     measures what quarantine mode costs);
  2. the limit of the engine: the same Kafka source and parse, appended to Delta with no state;
  3. the single-process peer (``tests.benchmarks.peer``): confluent-kafka, dicts, delta-rs.
Each engine's ratio to the limit (and to the peer) is the limit's time over the engine's (its
updates/s over the limit's): 1 is the limit's speed, below 1 slower.
``--split`` (with ``throughput``) reads Spark's event log and prints where each batch of the last
measured runs went (``batch_time``).
``scheduled`` measures a scheduled ``available-now`` run as the scheduler pays it, whole processes
side by side (``tests.benchmarks.scheduled_bench``): a first run and runs with nothing new, under
each engine and for the limit as a process of its own.
``history`` sets a live fleet's batches into fresh tables beside the same into tables that hold a
long history (a million ended sessions, ten thousand commits in each log), in this JVM
(``tests.benchmarks.history_bench``; the history is built once and kept in ``.stack/bench-history``).
``scaling`` keeps a fixed update workload on 20 hot sessions while the state grows to 1k, 10k and
100k idle sessions (each with a real 5-row table) and reports, per engine, each batch's duration
and the bytes its checkpoint wrote.
``floor`` puts the stateful step and the Delta writes of a live-fleet batch (1,000 sessions with
``--floor-updates`` update messages each, 2 by default) next to the engine's floor, in one run on
the same batches:
  1. a projection of the parsed records to Spark's ``noop`` sink (no state);
  2. a stateful operator with no Python (Spark's streaming aggregation) to ``noop``;
  3. the JVM engine's stateful step (``jvm-engine``) to ``noop``: its target is 1.5x the aggregation;
     beside it a trivial ``flatMapGroupsWithState`` over the same input (``jvm-trivial``: count a
     group's rows), which is what Spark's operator costs there whatever the function does, and the
     same over one row per Kafka record with its rows as arrays (``jvm-trivial-messages``): what
     the operator would cost if the engine took messages, not exploded rows; and that one's function
     reading every row's values out of the arrays (``jvm-walk-messages``);
  4. a trivial ``applyInPandasWithState`` function (count a group's rows into a long) to ``noop``:
     what the engine costs per group, whatever the function does;
  5. the Python engine's stateful step (``stateful``) to ``noop``;
  6. the whole reconstructor (``pipeline.start``) under each engine (``reconstructor``,
     ``reconstructor-jvm``), with each batch's phases from its sinks;
  7. a bare MERGE (offset-guarded update, insert otherwise) and a bare append of the same batch's
     rows into tables of the same size: the Delta floor of the batch's transactions;
  8. the stateless limit's own query (``limit``: the parse appended by Spark's Delta sink): its batch
     over the reconstructor's, and over the reconstructor's with its writes at the exactly-once
     floor, which bounds what any change to the writes can give.
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

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.policy import OnViolation
from reconstructor.settings import Settings, StatefulEngine
from tests.benchmarks import batch_time, history_bench, scheduled_bench
from tests.support.kafka import create_topics
from workbench import localstack
from workbench.fleet import FleetSpec, Planned, plan_fleet, publish
from workbench.producer import SensorProducer

PARTITIONS = 2


def _spark(shuffle_partitions: int | None, extra_jar: Path | None = None, event_log: Path | None = None):
    from reconstructor.spark.builder import build_spark, spark_jars

    conf = {"spark.ui.enabled": "false", "spark.driver.memory": "6g",
            **(batch_time.event_log_conf(event_log) if event_log is not None else {})}
    if extra_jar is not None:  # local mode: the driver's classpath is the executors'
        conf["spark.driver.extraClassPath"] = f"{Path(spark_jars(localstack.jars_dir())).resolve()}/*:{extra_jar}"
    return build_spark("reconstructor-bench", jars_dir=localstack.jars_dir(),
                       shuffle_partitions=shuffle_partitions, conf=conf)


#: The floor's JVM variants: the prototype of the step and the trivial step (``jvm/``).
JVM_SOURCES = sorted((Path(__file__).parent / "jvm").glob("*.java"))
JVM_VARIANTS = ("jvm-prototype", "jvm-trivial", "jvm-trivial-messages", "jvm-walk-messages")


def _jvm_classes(work: Path) -> Path | None:
    """The floor's JVM variants (``JVM_SOURCES``) compiled against pyspark's own jars (``javac``
    from the JDK); None, with a line, when there is no ``javac``."""
    import pyspark

    javac = shutil.which("javac")
    if javac is None:
        print("no javac on PATH: the floor runs without the jvm-prototype and jvm-trivial variants", flush=True)
        return None
    classes = work / "jvm-classes"
    classes.mkdir(parents=True, exist_ok=True)
    jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", f"{jars}/*", *map(str, JVM_SOURCES)], check=True)
    return classes


def _progress(query) -> list[dict]:
    from reconstructor.spark.pipeline import progress_dict

    return [progress_dict(p) for p in query.recentProgress]


def _publish(messages: list[Planned], topics: list[str]) -> float:
    started = time.perf_counter()
    publish(SensorProducer(localstack.bootstrap_servers()), messages, {t: PARTITIONS for t in topics})
    return time.perf_counter() - started


def _label(engine: StatefulEngine, on_violation: OnViolation = OnViolation.FAIL) -> str:
    """A reconstructor run's row label: its engine, and its mode when it is quarantine."""
    return engine.value + (" (quarantine)" if on_violation == OnViolation.QUARANTINE else "")


def _reconstructor(spark, pattern: str, root: Path, max_offsets: int | None,
                   engine: StatefulEngine = StatefulEngine.PYTHON,
                   on_violation: OnViolation = OnViolation.FAIL) -> tuple[float, list[dict]]:
    from reconstructor.spark.pipeline import start

    cfg = Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                   output=str(root / "out"), checkpoint=str(root / "chk"),
                   max_offsets_per_trigger=max_offsets, compact_every=None, engine=engine,
                   on_violation=on_violation)
    started = time.perf_counter()
    running = start(spark, cfg)
    running.await_termination()
    return time.perf_counter() - started, running.recent_progress()


def _stateless_limit(spark, pattern: str, root: Path, max_offsets: int | None) -> tuple[float, list[dict]]:
    """Same source and parse, appended straight to a Delta table partitioned by hour; timed from the
    source and the parse being built, as a reconstructor run is timed from ``start``, which builds
    them too (the parse's plan takes Spark a second or more to analyse)."""
    from reconstructor.spark.parse import parse_records
    from reconstructor.spark.source import kafka_stream

    schema = RowSchema.load()
    started = time.perf_counter()
    raw = kafka_stream(spark, bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                       max_offsets_per_trigger=max_offsets)
    progress = _limit_query(parse_records(raw, schema), root)
    return time.perf_counter() - started, progress


def _limit_query(parsed, root: Path) -> list[dict]:
    """The limit's query: the parsed records, each under its hour, appended by Spark's Delta sink
    (which writes each batch exactly once with its own transaction id); its progress."""
    from pyspark.sql import functions as F

    query = (parsed.withColumn("hour", F.date_format("kafka_ts", "yyyy-MM-dd-HH"))
             .writeStream.format("delta").partitionBy("hour")
             .option("checkpointLocation", str(root / "chk")).trigger(availableNow=True)
             .start(str(root / "out" / "row_changes")))
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return _progress(query)


def _run_id(progress: list[dict]) -> str:
    """A streaming run's id, from its progress reports ("" when it reported none)."""
    return progress[0]["runId"] if progress else ""


def _split(event_log: Path, run_ids: dict[str, str]) -> dict[str, list[dict]]:
    """``--split``: each measured run's batches from the event log, printed and returned."""
    executions = batch_time.read_executions(event_log)
    out = {label: batch_time.split(executions, run_id) for label, run_id in run_ids.items()}
    for label, batches in out.items():
        batch_time.print_split(f"{label}: seconds per batch (event log; the spans of each kind, joined)", batches)
    return out


def _rows_written(spark, path: str) -> int:
    return spark.read.format("delta").load(path).count()


def throughput(spark, args, work: Path) -> dict:
    from tests.benchmarks.peer import run_peer

    spec = FleetSpec(topic_prefix=f"bench{uuid.uuid4().hex[:8]}-sensor-", sensors=args.sensors,
                     sessions_per_sensor=args.sessions, rows=args.rows, updates=args.updates,
                     rows_per_update=args.rows_per_update, end_sessions=False, seed=11,
                     start=dt.datetime.now(dt.UTC) - dt.timedelta(hours=2))
    messages = list(plan_fleet(spec))
    updates = sum(p.message["type"] == "update" for p in messages)
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in spec.topics()})
    publish_s = _publish(messages, spec.topics())
    pattern = f"{spec.topic_prefix}[0-9]+"
    print(f"fleet: {len(messages):,} messages ({updates:,} updates) on {args.sensors} topics x "
          f"{PARTITIONS} partitions, published in {publish_s:.1f}s", flush=True)

    # Warm each engine on the same topics (JVM codegen, Delta, the Kafka client, and for the
    # Python engine Spark's Python workers) so the measured runs are closer to steady state, as
    # the peer is.  HotSpot keeps compiling for several runs: --warmup 3 or more shows a warmer JVM.
    runs = [(e, m) for e in args.engines for m in args.on_violation]  # the reconstructor's rows
    for i in range(args.warmup):
        _stateless_limit(spark, pattern, work / f"warm-limit-{i}", args.max_offsets)
        for engine, mode in runs:
            _reconstructor(spark, pattern, work / f"warm-{engine.value}-{mode.value}-{i}", args.max_offsets,
                           engine, mode)
    # Each runs --repeat times on the same topics, alternating, and the median counts: one run on a
    # 2-core machine moves by a second either way.
    limits, peers = [], []
    recons: dict[tuple, list[float]] = {r: [] for r in runs}
    progress: dict[tuple, list[dict]] = {}
    run_ids: dict[str, str] = {}  # the last measured run of each, for --split
    for i in range(args.repeat):
        seconds, limit_progress = _stateless_limit(spark, pattern, work / f"limit-{i}", args.max_offsets)
        limits.append(seconds)
        run_ids["stateless limit"] = _run_id(limit_progress)
        print(f"stateless limit: {limits[-1]:.1f}s", flush=True)
        for engine, mode in runs:
            seconds, progress[engine, mode] = _reconstructor(
                spark, pattern, work / f"recon-{engine.value}-{mode.value}-{i}", args.max_offsets, engine, mode)
            recons[engine, mode].append(seconds)
            run_ids[f"reconstructor, {_label(engine, mode)}"] = _run_id(progress[engine, mode])
            print(f"reconstructor, {_label(engine, mode)}: {seconds:.1f}s in {len(progress[engine, mode])} batches",
                  flush=True)
        started = time.perf_counter()
        counts = run_peer(localstack.bootstrap_servers(), pattern, str(work / f"peer-{i}" / "row_changes"),
                          RowSchema.load(), group=f"peer-{uuid.uuid4().hex[:8]}")
        peers.append(time.perf_counter() - started)
        print(f"peer: {peers[-1]:.1f}s", flush=True)
    limit_s, peer_s = statistics.median(limits), statistics.median(peers)
    limit_ups, peer_ups = updates / limit_s, counts["updates"] / peer_s
    reconstructor = {}
    for engine, mode in runs:
        seconds = statistics.median(recons[engine, mode])
        ups = updates / seconds
        batches = progress[engine, mode]
        out = work / f"recon-{engine.value}-{mode.value}-0/out/row_changes"
        reconstructor[_label(engine, mode)] = {
            "engine": engine.value, "on_violation": mode.value,
            "seconds": seconds, "runs": recons[engine, mode], "updates_per_s": ups, "batches": len(batches),
            "rows_written": _rows_written(spark, str(out)),
            "batch_ms_median": (statistics.median(p["durationMs"]["triggerExecution"] for p in batches)
                                if batches else None),
            # The engine's updates/s over the limit's: the limit's time over the engine's.
            "ratio_to_limit": ups / limit_ups, "ratio_to_peer": ups / peer_ups,
        }
    return {
        "fleet": {"messages": len(messages), "updates": updates, "sensors": args.sensors,
                  "sessions_per_sensor": args.sessions, "rows": args.rows, "rows_per_update": args.rows_per_update,
                  "partitions_per_topic": PARTITIONS, "max_offsets_per_trigger": args.max_offsets,
                  "repeat": args.repeat, "warmup": args.warmup},
        "engines": [e.value for e in args.engines], "on_violation": [m.value for m in args.on_violation],
        "reconstructor": reconstructor,
        "stateless_limit": {"seconds": limit_s, "runs": limits, "updates_per_s": limit_ups,
                            "rows_written": _rows_written(spark, str(work / "limit-0/out/row_changes"))},
        "run_ids": run_ids,
        "peer": {"seconds": peer_s, "runs": peers, "updates_per_s": peer_ups,
                 "rows_written": counts["row_changes"], "writer": "delta-rs (deltalake.write_deltalake)"},
    }


def _print_throughput(t: dict) -> None:
    """The throughput table: a row per engine (and mode), the limit's and the peer's, and the ratios."""
    def row(label: str, r: dict, to_limit: str, to_peer: str) -> str:
        runs = ", ".join(f"{x:.1f}" for x in r["runs"])
        return f"| {label} | {r['seconds']:.1f} ({runs}) | {r['updates_per_s']:,.0f} | {to_limit} | {to_peer} |"

    print("\n| run | seconds, median (runs) | updates/s | / limit | / peer |\n|---|---:|---:|---:|---:|")
    recons = t["reconstructor"]
    for label, r in recons.items():
        print(row(f"reconstructor, {label}", r, f"{r['ratio_to_limit']:.2f}", f"{r['ratio_to_peer']:.2f}"))
    print(row("stateless_limit", t["stateless_limit"], "1.00", ""))
    print(row("peer", t["peer"], "", "1.00"))
    print("ratios are the limit's (the peer's) time over the reconstructor's: " + "; ".join(
        f"{label} / limit = {r['ratio_to_limit']:.2f}, {label} / peer = {r['ratio_to_peer']:.2f}"
        for label, r in recons.items()))
    for mode in ("", " (quarantine)"):
        python, jvm = recons.get("python" + mode), recons.get("jvm" + mode)
        if python and jvm:
            print(f"jvm{mode}: {python['seconds'] / jvm['seconds']:.2f}x the updates/s of python{mode}")
    for engine in ("python", "jvm"):
        fail, quarantine = recons.get(engine), recons.get(engine + " (quarantine)")
        if fail and quarantine:
            print(f"{engine}: quarantine mode takes {quarantine['seconds'] / fail['seconds']:.2f}x "
                  "the time of fail mode")
    print(flush=True)


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


#: The floor's runs of the whole reconstructor, and the engine each runs its stateful step on.
RECONSTRUCTORS = {"reconstructor": StatefulEngine.PYTHON, "reconstructor-jvm": StatefulEngine.JVM}
#: The floor's runs of the stateful step alone (to ``noop``), and their engines.
STATEFUL_STEPS = {"stateful": StatefulEngine.PYTHON, "jvm-engine": StatefulEngine.JVM,
                  "jvm-engine-exploded": StatefulEngine.JVM}


def _floor_variant(spark, name: str, pattern: str, root: Path, max_offsets: int) -> tuple[list[dict], dict]:
    """One of the floor benchmark's runs over the same topics; its progress and the sinks' timings."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from reconstructor.spark.engines import parse_for, reconstruct_with
    from reconstructor.spark.parse import parse_records
    from reconstructor.spark.pipeline import start
    from reconstructor.spark.source import kafka_stream
    from reconstructor.spark.stateful import reconstruct_inputs

    if name in RECONSTRUCTORS:
        cfg = Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                       output=str(root / "out"), checkpoint=str(root / "chk"),
                       max_offsets_per_trigger=max_offsets, compact_every=None, engine=RECONSTRUCTORS[name])
        running = start(spark, cfg)
        running.await_termination()
        return running.recent_progress(), dict(running.sinks.timings)
    schema = RowSchema.load()
    raw = kafka_stream(spark, bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                       max_offsets_per_trigger=max_offsets)
    parsed = parse_records(raw, schema)
    if name == "limit":
        # The stateless limit's own query (``throughput``'s) over the floor's batches.
        return _limit_query(parsed, root), {}
    if name == "projection":
        frame = parsed
    elif name == "jvm-prototype":
        from pyspark.sql import DataFrame

        inputs = reconstruct_inputs(parsed, schema, with_values=False)
        frame = DataFrame(spark._jvm.reconstructor.bench.StateStepPrototype.apply(inputs._jdf), spark)
    elif name == "jvm-trivial":
        from pyspark.sql import DataFrame

        # The JVM engine's input, grouped as it groups it, each group's rows only counted.
        frame = DataFrame(spark._jvm.reconstructor.bench.TrivialStateStep.apply(parsed._jdf), spark)
    elif name == "jvm-trivial-messages":
        from pyspark.sql import DataFrame

        # The same trivial step over one row per Kafka record, its rows kept as arrays: what the
        # operator would cost if the engine took messages instead of exploded rows.
        frame = DataFrame(spark._jvm.reconstructor.bench.TrivialStateStep.apply(_messages(raw, schema)._jdf), spark)
    elif name == "jvm-walk-messages":
        from pyspark.sql import DataFrame

        # jvm-trivial-messages, its function reading every row's values out of the arrays.
        frame = DataFrame(spark._jvm.reconstructor.bench.MessageWalkStep.apply(_messages(raw, schema)._jdf), spark)
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
    elif name in STATEFUL_STEPS:
        # The product's stateful step under either engine, with a run's defaults.
        defaults = Settings()
        # jvm-engine-exploded: the JVM engine over every message row exploded, as it read them before
        # vouched messages reached it whole (the jar reads either).
        engine = STATEFUL_STEPS[name]
        records = parsed if name == "jvm-engine-exploded" else parse_for(engine, raw, schema, keep_values=False)
        frame = reconstruct_with(engine, records, defaults.step_spec(schema))
    else:
        raise ValueError(f"unknown floor variant {name!r}")
    return _noop_run(spark, frame, root), {}


def _messages(raw, schema):
    """The parse stage's envelope, one row per Kafka record, with its two row arrays as they are
    before ``parse_records`` explodes them (a measurement of that design, not the product's input)."""
    from pyspark.sql import functions as F

    from reconstructor.spark import parse
    from reconstructor.spark.timestamps import rfc3339_timestamp

    env = parse._row_arrays(parse._checked_envelope(parse._read_messages(parse._kafka_text(raw), schema, True)),
                            schema, nested_rows=False)
    env = env.select("topic", "partition", "offset", "kafka_ts", "key", "msg_ok",
                     parse._fast_or_checked("typed_message.session", "session"),
                     parse._fast_or_checked("typed_message.seq",
                                            F.expr(f"CASE WHEN json_type_seq IN {parse._INTEGER} THEN seq END"), "seq"),
                     parse._fast_or_checked("typed_message.type", "type"),
                     parse._fast_or_checked(rfc3339_timestamp("typed_message.ts"), "event_ts"),
                     F.when(~F.col("msg_ok"), parse._envelope_error()).alias("env_error"),
                     "row_variants", "typed_rows")
    return env.select(F.expr("coalesce(nullif(session, ''), nullif(key, ''))").alias("group_session"), "*")


FLOOR_VARIANTS = ("limit", "projection", "jvm-aggregate", "jvm-trivial", "jvm-trivial-messages", "jvm-walk-messages",
                  "jvm-prototype", "jvm-engine", "jvm-engine-exploded", "trivial", "trivial-wide", "stateful", "reconstructor",
                  "reconstructor-jvm")


def _live_fleet(prefix: str, topics: list[str], sessions: int, rows: int, rounds: int) -> list[Planned]:
    """Every session's snapshot, then ``rounds`` rounds of one 3-row update per session: batches of
    U x ``sessions`` offsets then hold U messages of every session."""
    ts = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    names = [(topics[i % len(topics)], f"{prefix}s{i}") for i in range(sessions)]
    messages = [_snapshot(t, s, rows, ts) for t, s in names]
    for seq in range(1, rounds + 1):
        for topic, session in names:
            changed = [{"id": f"row-{(seq * 3 + k) % rows}", "values": {"temperature": float(seq), "status": "ok",
                                                                       "reading_count": seq}} for k in range(3)]
            messages.append(Planned(topic, session, {"session": session, "seq": seq, "type": "update", "ts": ts,
                                                     "rows": changed}))
    return messages


def _delta_floor(spark, recon_out: Path, root: Path, repeat: int, rounds: int = 2) -> dict:
    """A bare append and a bare MERGE of one batch's rows into tables of the reconstructor's size.

    The rows are the reconstructor's own last ``rounds`` rounds of changes (one batch's worth); the
    MERGE target is a copy of its ``current_rows``, the append target a copy of its ``row_changes``,
    each with the table's own statistics columns (``STATS_COLUMNS``); and the same into copies
    with Delta's default statistics (every column up to 32), the floor as it was measured before."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from reconstructor.contract.tables import CURRENT_ROWS, ROW_CHANGES, STATS_COLUMNS, STATS_PROPERTY
    from reconstructor.spark.transactions import IdempotentDml

    changes = spark.read.format("delta").load(str(recon_out / "row_changes"))
    last = changes.agg(F.max("seq")).first()[0]
    batch = changes.filter(F.col("seq") > last - rounds).cache()
    rows = batch.count()
    current = spark.read.format("delta").load(str(recon_out / "current_rows"))
    kinds = {"own": {CURRENT_ROWS: ",".join(STATS_COLUMNS[CURRENT_ROWS]),
                     ROW_CHANGES: ",".join(STATS_COLUMNS[ROW_CHANGES])},
             "default": {}}
    for kind, stats in kinds.items():
        current.write.format("delta").save(str(root / kind / "current"))
        changes.write.format("delta").partitionBy("hour").save(str(root / kind / "changes"))
        for table, path in ((CURRENT_ROWS, "current"), (ROW_CHANGES, "changes")):
            if table in stats:
                spark.sql(f"ALTER TABLE delta.`{root / kind / path}` SET TBLPROPERTIES "
                          f"('{STATS_PROPERTY}' = '{stats[table]}')")
    latest = (batch.groupBy("topic", "session", "row_id").agg(F.max_by(F.struct("*"), "offset").alias("r"))
              .select("r.*").withColumn("updated_at", F.col("event_ts")).select(*current.columns).cache())
    latest.count()
    assign = {c: f"source.`{c}`" for c in current.columns}

    def merge(kind: str):
        (DeltaTable.forPath(spark, str(root / kind / "current")).alias("target")
         .merge(latest.alias("source"), "target.topic = source.topic AND target.session = source.session "
                "AND target.row_id = source.row_id")
         .whenMatchedUpdate(condition="source.offset >= target.offset", set=assign)
         .whenNotMatchedInsert(values=assign).execute())

    seconds: dict[str, dict[str, list[float]]] = {
        kind: {"append": [], "merge": [], "txn_append": [], "txn_merge": []} for kind in kinds}

    def timed(kind: str, what: str, write) -> None:
        started = time.perf_counter()
        write()
        seconds[kind][what].append(time.perf_counter() - started)

    app = f"floor-{uuid.uuid4().hex[:8]}"
    for i in range(repeat):
        for kind in kinds:
            target = str(root / kind / "changes")
            timed(kind, "append", lambda target=target: batch.write.format("delta").mode("append").save(target))
            timed(kind, "merge", lambda kind=kind: merge(kind))
            # The same two with Delta's own exactly-once ids (what every batch of the reconstructor
            # asks of Delta): the price of idempotency in Delta itself.
            timed(kind, "txn_append", lambda kind=kind, i=i, target=target: (batch.write.format("delta").mode("append")
                                               .option("txnAppId", f"{app}-{kind}-append").option("txnVersion", i)
                                               .save(target)))

            def txn_merge(kind=kind, i=i):
                with IdempotentDml(spark, f"{app}-{kind}-merge", i):
                    merge(kind)
            timed(kind, "txn_merge", txn_merge)
    batch.unpersist()
    latest.unpersist()
    med = {kind: {what: statistics.median(v) for what, v in runs.items()} for kind, runs in seconds.items()}
    own, default = med["own"], med["default"]
    return {"rows_appended": rows, "rows_merged": latest.count(), "current_rows": current.count(),
            "append_s": own["append"], "merge_s": own["merge"],
            "appends": seconds["own"]["append"], "merges": seconds["own"]["merge"],
            "floor_s": own["append"] + own["merge"],
            "idempotent_append_s": own["txn_append"], "idempotent_merge_s": own["txn_merge"],
            "idempotent_floor_s": own["txn_append"] + own["txn_merge"],
            "default_stats": {"append_s": default["append"], "merge_s": default["merge"],
                              "floor_s": default["append"] + default["merge"],
                              "idempotent_append_s": default["txn_append"],
                              "idempotent_merge_s": default["txn_merge"],
                              "idempotent_floor_s": default["txn_append"] + default["txn_merge"]}}


def _phases(timings: list) -> dict:
    """The median of each phase of a reconstructor's batches, from its sinks' timings."""
    return {"compute_s": statistics.median(t.compute for t in timings),
            "append_s": statistics.median(t.append for t in timings),
            "merges_s": statistics.median(t.merges for t in timings),
            "current_rows_s": statistics.median(t.tables["current_rows"] for t in timings),
            "sessions_s": statistics.median(t.tables["sessions"] for t in timings),
            "writes_s": statistics.median(t.writes for t in timings)}


def floor(spark, args, work: Path) -> dict:
    """The stateful step and the Delta writes of a live-fleet batch against the engine's floor."""
    prefix = f"floor{uuid.uuid4().hex[:8]}-"
    topics = [f"{prefix}sensor-{i}" for i in range(4)]
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in topics})
    sessions, per_batch = args.floor_sessions, args.floor_updates
    # Batches of per_batch x sessions offsets: the first holds the snapshots and per_batch - 1 rounds
    # of updates, each measured batch per_batch rounds.
    rounds = per_batch * (args.floor_batches + 1) - 1
    messages = _live_fleet(prefix, topics, sessions, args.floor_rows, rounds)
    publish_s = _publish(messages, topics)
    pattern = f"{prefix}sensor-[0-9]+"
    max_offsets = per_batch * sessions
    print(f"floor: {sessions:,} sessions x {args.floor_rows} rows, then {args.floor_batches} batches of "
          f"{per_batch} updates per session ({len(messages):,} messages, published in {publish_s:.1f}s)", flush=True)
    variants = args.floor_variants
    batch_ms: dict[str, list[float]] = {v: [] for v in variants}
    timings: dict[str, list] = {v: [] for v in variants if v in RECONSTRUCTORS}
    for i in range(args.warmup + args.repeat):
        for name in variants:
            progress, sink_timings = _floor_variant(spark, name, pattern, work / f"{name}-{i}", max_offsets)
            # The first batch loads the snapshots; the update batches are the live fleet.
            updates = [p for p in progress if p["numInputRows"] > 0][1:]
            if i < args.warmup:
                continue
            batch_ms[name] += [p["durationMs"]["triggerExecution"] for p in updates]
            if name in timings:
                timings[name] += [t for b, t in sorted(sink_timings.items()) if b > 0]
            shown = ", ".join(f"{p['durationMs']['triggerExecution']:,}" for p in updates)
            print(f"  {name}: update batches {shown} ms", flush=True)
    median_ms = {name: statistics.median(ms) for name, ms in batch_ms.items() if ms}
    per_group = {name: ms / sessions for name, ms in median_ms.items()}

    def ratio(a: str, b: str) -> float | None:
        return per_group[a] / per_group[b] if a in per_group and b in per_group else None

    out = {"sessions": sessions, "rows": args.floor_rows, "batches": args.floor_batches,
           "updates_per_batch": per_batch, "batch_ms": batch_ms, "batch_ms_median": median_ms,
           "ms_per_group": per_group,
           "ratio_jvm_engine_to_jvm_aggregate": ratio("jvm-engine", "jvm-aggregate"),
           "ratio_jvm_engine_to_projection": ratio("jvm-engine", "projection"),
           "ratio_jvm_trivial_to_jvm_aggregate": ratio("jvm-trivial", "jvm-aggregate"),
           "ratio_jvm_engine_to_jvm_trivial": ratio("jvm-engine", "jvm-trivial"),
           "ratio_jvm_trivial_messages_to_jvm_trivial": ratio("jvm-trivial-messages", "jvm-trivial"),
           "ratio_jvm_walk_messages_to_jvm_trivial": ratio("jvm-walk-messages", "jvm-trivial"),
           "ratio_stateful_to_jvm_engine": ratio("stateful", "jvm-engine"),
           "ratio_stateful_to_trivial": ratio("stateful", "trivial"),
           "ratio_stateful_to_trivial_wide": ratio("stateful", "trivial-wide"),
           "ratio_jvm_prototype_to_trivial": ratio("jvm-prototype", "trivial"),
           "ratio_jvm_engine_to_jvm_prototype": ratio("jvm-engine", "jvm-prototype"),
           "ratio_reconstructor_to_trivial": ratio("reconstructor", "trivial"),
           "ratio_reconstructor_to_reconstructor_jvm": ratio("reconstructor", "reconstructor-jvm")}
    ran = [name for name, t in timings.items() if t]
    if not ran:  # no whole reconstructor (a run for a profiler, say): no Delta floor to set it beside
        return out
    out["reconstructor_phases"] = phases = {name: _phases(timings[name]) for name in ran}
    recon_root = work / f"{ran[0]}-{args.warmup + args.repeat - 1}" / "out"
    out["delta_floor"] = delta = _delta_floor(spark, recon_root, work / "delta-floor", args.repeat + 1, per_batch)
    out["ratio_writes_to_delta_floor"] = {name: w["writes_s"] / delta["floor_s"] for name, w in phases.items()}
    out["ratio_writes_to_idempotent_floor"] = {name: w["writes_s"] / delta["idempotent_floor_s"]
                                               for name, w in phases.items()}
    if "limit" in median_ms:
        # A batch's ratio to the limit's (the limit's time over the reconstructor's, as throughput's
        # ratios), and what it would be with the three transactions at their exactly-once floor (an
        # append and one MERGE with Delta's ids): the most any change to the writes can give.
        limit_ms = median_ms["limit"]
        out["ratio_limit_to_reconstructor_batch"] = {name: limit_ms / median_ms[name] for name in ran}
        out["ratio_limit_to_reconstructor_batch_writes_at_floor"] = {
            name: limit_ms / (median_ms[name] - 1000 * (w["writes_s"] - delta["idempotent_floor_s"]))
            for name, w in phases.items()}
    return out


def _print_floor(f: dict) -> None:
    g, ms = f["ms_per_group"], f["batch_ms_median"]
    print(f"\n{f['sessions']:,} sessions x {f['updates_per_batch']} updates per session per batch "
          f"(ms per session: median batch / sessions):")
    print("| run | batch ms, median | ms per session |\n|---|---:|---:|")
    for name, per in g.items():
        print(f"| {name} | {ms[name]:,.0f} | {per:.2f} |")

    def show(key: str, text: str) -> None:
        if f.get(key) is not None:
            print(f"{text} = {f[key]:.2f}")

    show("ratio_jvm_engine_to_jvm_aggregate", "JVM engine's stateful step / JVM streaming aggregation "
         "(target <= 1.5)")
    show("ratio_jvm_engine_to_projection", "JVM engine's stateful step / projection")
    show("ratio_jvm_trivial_to_jvm_aggregate", "trivial JVM stateful step over the engine's input / JVM streaming "
         "aggregation (the engine's share of the target)")
    show("ratio_jvm_engine_to_jvm_trivial", "JVM engine's stateful step / trivial JVM stateful step over its input "
         "(the reconstructor's function)")
    show("ratio_jvm_trivial_messages_to_jvm_trivial", "trivial JVM stateful step over one row per record (rows as "
         "arrays) / over the engine's exploded rows")
    show("ratio_jvm_walk_messages_to_jvm_trivial", "the same over messages, reading every row's values out of the "
         "arrays / trivial over the engine's exploded rows")
    show("ratio_jvm_engine_to_jvm_prototype", "JVM engine's stateful step / JVM state-step prototype")
    show("ratio_stateful_to_jvm_engine", "Python engine's stateful step / JVM engine's")
    show("ratio_stateful_to_trivial", "Python engine's stateful step / trivial applyInPandasWithState")
    show("ratio_stateful_to_trivial_wide", "Python engine's stateful step / the trivial function over the same "
         "input columns")
    show("ratio_jvm_prototype_to_trivial", "JVM state-step prototype / trivial applyInPandasWithState")
    show("ratio_reconstructor_to_trivial", "reconstructor (python) / trivial applyInPandasWithState")
    show("ratio_reconstructor_to_reconstructor_jvm", "reconstructor (python) / reconstructor (jvm)")
    if "delta_floor" not in f:
        print(flush=True)
        return
    d = f["delta_floor"]
    for name, w in f["reconstructor_phases"].items():
        print(f"{name} batch phases (median): compute {w['compute_s']:.2f}s, append {w['append_s']:.2f}s, "
              f"MERGEs side by side {w['merges_s']:.2f}s (current_rows {w['current_rows_s']:.2f}s, "
              f"sessions {w['sessions_s']:.2f}s)")
    print(f"Delta floor: append of {d['rows_appended']:,} rows {d['append_s']:.2f}s + MERGE of {d['rows_merged']:,} "
          f"rows into {d['current_rows']:,} {d['merge_s']:.2f}s = {d['floor_s']:.2f}s; transactions / floor: "
          + ", ".join(f"{name} {r:.2f}" for name, r in f["ratio_writes_to_delta_floor"].items()))
    print(f"  with Delta's exactly-once ids: append {d['idempotent_append_s']:.2f}s + MERGE "
          f"{d['idempotent_merge_s']:.2f}s = {d['idempotent_floor_s']:.2f}s; transactions / that: "
          + ", ".join(f"{name} {r:.2f}" for name, r in f["ratio_writes_to_idempotent_floor"].items()))
    if f.get("ratio_limit_to_reconstructor_batch"):
        print(f"the limit's batch {f['batch_ms_median']['limit']:,.0f} ms / the reconstructor's: " + ", ".join(
            f"{name} {r:.2f}" for name, r in f["ratio_limit_to_reconstructor_batch"].items())
            + "; with its three transactions at the exactly-once floor: " + ", ".join(
            f"{name} {r:.2f}" for name, r in f["ratio_limit_to_reconstructor_batch_writes_at_floor"].items())
            + " (the most a change to the writes can give)")
    dd = d["default_stats"]
    print(f"  the same into tables with Delta's default statistics (every column): {dd['floor_s']:.2f}s, "
          f"with the ids {dd['idempotent_append_s']:.2f}s + {dd['idempotent_merge_s']:.2f}s = "
          f"{dd['idempotent_floor_s']:.2f}s; transactions / that: "
          + ", ".join(f"{name} {w['writes_s'] / dd['idempotent_floor_s']:.2f}"
                      for name, w in f["reconstructor_phases"].items()) + "\n", flush=True)


def _snapshot(topic: str, session: str, rows: int, ts: str) -> Planned:
    table = [{"id": f"row-{i}", "values": {"temperature": 20.0 + i, "status": "ok", "reading_count": i}}
             for i in range(rows)]
    return Planned(topic, session, {"session": session, "seq": 0, "type": "snapshot", "ts": ts, "rows": table})


def _dir_files(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def _scaling_batch(spark, cfg: Settings, state: Path) -> dict:
    """One batch of the hot sessions' updates through the reconstructor: its figures and the bytes
    its checkpoint's state wrote."""
    from reconstructor.spark.pipeline import start

    before = _dir_files(state)
    running = start(spark, cfg)
    running.await_termination()
    after = _dir_files(state)
    written = sum(size for f, size in after.items() if before.get(f) != size)
    (p,) = [p for p in running.recent_progress() if p["numInputRows"] > 0]
    op = p["stateOperators"][0]
    return {"batch_ms": p["durationMs"]["triggerExecution"], "add_batch_ms": p["durationMs"].get("addBatch"),
            "state_rows_total": op["numRowsTotal"], "state_rows_updated": op["numRowsUpdated"],
            "state_commit_ms": op.get("commitTimeMs"), "state_updates_ms": op.get("allUpdatesTimeMs"),
            "checkpoint_bytes_written": written}


def scaling(spark, args, work: Path, save=lambda partial: None) -> dict:
    """Fixed work on 20 hot sessions while idle sessions in state grow; one batch per round, per
    engine.  The engines read the same topics, each into its own tables and checkpoint."""
    from reconstructor.spark.pipeline import start

    prefix = f"scale{uuid.uuid4().hex[:8]}-sensor-"
    topics = [f"{prefix}{i}" for i in range(4)]
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in topics})
    ts = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    engines = args.engines
    cfgs = {e: Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=f"{prefix}[0-9]+",
                        output=str(work / e.value / "out"), checkpoint=str(work / e.value / "chk"),
                        compact_every=None, max_offsets_per_trigger=args.load_batch, engine=e)
            for e in engines}
    hot = [(topics[i % 4], f"{prefix}hot-{i}") for i in range(20)]
    seqs = {s: 1 for _, s in hot}
    loaded = 0
    report: dict[str, list[dict]] = {e.value: [] for e in engines}

    def result(partial: bool = False) -> dict:
        out = {"hot_sessions": len(hot), "updates_per_batch": 10 * len(hot), "engines": {}}
        for name, stages in report.items():
            out["engines"][name] = {"stages": stages}
            if stages and not partial:
                out["engines"][name]["ratio_largest_to_smallest"] = (stages[-1]["batch_ms_median"]
                                                                     / stages[0]["batch_ms_median"])
        return out

    for target in args.scale:
        new = [_snapshot(topics[i % 4], f"{prefix}idle-{i}", 5, ts) for i in range(loaded, target - len(hot))]
        if not loaded:
            new += [_snapshot(t, s, 5, ts) for t, s in hot]
        publish_s = _publish(new, topics)
        load_s = {}
        for engine in engines:
            started = time.perf_counter()
            start(spark, cfgs[engine]).await_termination()
            load_s[engine] = time.perf_counter() - started
        loaded = target - len(hot)
        print(f"state: {target:,} sessions (published {len(new):,} snapshots in {publish_s:.1f}s; loaded by "
              + ", ".join(f"{e.value} in {load_s[e]:.1f}s" for e in engines) + ")", flush=True)
        rounds: dict[StatefulEngine, list[dict]] = {e: [] for e in engines}
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
            for engine in engines:  # the same batch through each engine
                rounds[engine].append(_scaling_batch(spark, cfgs[engine], work / engine.value / "chk" / "state"))
        for engine in engines:
            med = statistics.median(r["batch_ms"] for r in rounds[engine])
            print(f"  {engine.value:>6}: {target:>7,} sessions: batch {med:,.0f} ms (median of {len(rounds[engine])}), "
                  f"checkpoint {statistics.median(r['checkpoint_bytes_written'] for r in rounds[engine]):,.0f} "
                  f"B/batch", flush=True)
            report[engine.value].append({"sessions_in_state": target, "batch_ms_median": med,
                                         "rounds": rounds[engine], "load_seconds": load_s[engine],
                                         "publish_seconds": publish_s})
        save(result(partial=True))  # a long run keeps what it measured if it is stopped
    return result()


def _print_scaling(s: dict, sizes: list[int]) -> None:
    print(f"\n| engine | {' | '.join(f'batch ms at {n:,} sessions' for n in sizes)} | largest / smallest |")
    print("|---|" + "---:|" * (len(sizes) + 1))
    for name, e in s["engines"].items():
        cells = [f"{st['batch_ms_median']:,.0f}" for st in e["stages"]]
        print(f"| {name} | {' | '.join(cells)} | {e['ratio_largest_to_smallest']:.2f} |")
    for name, e in s["engines"].items():
        print(f"{name}: batch at {sizes[-1]:,} / at {sizes[0]:,} sessions = {e['ratio_largest_to_smallest']:.2f}",
              flush=True)


def _engines(text: str) -> list[StatefulEngine]:
    try:
        return [StatefulEngine(x.strip()) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"engines are {', '.join(e.value for e in StatefulEngine)}, comma-separated: not {text!r}") from None


def _modes(text: str) -> list[OnViolation]:
    try:
        return [OnViolation(x.strip()) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"modes are {', '.join(m.value for m in OnViolation)}, comma-separated: not {text!r}") from None


def _floor_variants(text: str) -> list[str]:
    names = text.split(",")
    unknown = [n for n in names if n not in FLOOR_VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown floor variant {unknown[0]!r}; choose from {', '.join(FLOOR_VARIANTS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("which", nargs="?", choices=["all", "throughput", "scheduled", "history", "scaling", "floor"], default="all")
    p.add_argument("--sensors", type=int, default=4)
    p.add_argument("--sessions", type=int, default=10, help="sessions per sensor")
    p.add_argument("--rows", type=int, default=200, help="rows in each session's snapshot")
    p.add_argument("--updates", type=int, default=1000, help="update messages per session")
    p.add_argument("--rows-per-update", type=int, default=3)
    p.add_argument("--max-offsets", type=int, default=None, help="maxOffsetsPerTrigger (default: none)")
    p.add_argument("--engines", type=_engines, default=[StatefulEngine.PYTHON, StatefulEngine.JVM],
                   help="throughput, scaling: the stateful step's engines to run the reconstructor under "
                        "(default python,jvm)")
    p.add_argument("--on-violation", type=_modes, default=[OnViolation.FAIL], metavar="{fail,quarantine}[,...]",
                   help="throughput: the reconstructor's modes, a row each (default fail; fail,quarantine "
                        "measures quarantine mode's cost in one run)")
    p.add_argument("--repeat", type=int, default=3, help="measured runs of each engine; the median counts")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each engine first")
    p.add_argument("--rounds-scheduled", type=int, default=3,
                   help="scheduled: rounds of every subject (a first run, then --idle-runs); the median counts")
    p.add_argument("--idle-runs", type=int, default=2, help="scheduled: runs with nothing new after each first run")
    p.add_argument("--store", choices=["s3", "local"], default="s3",
                   help="scheduled: the tables and checkpoints on the local S3 endpoint (default) or in a folder")
    p.add_argument("--history-ended", type=int, default=1_000_000,
                   help="history: ended sessions in the long history's sessions table (default 1,000,000)")
    p.add_argument("--history-commits", type=int, default=10_000,
                   help="history: past commits in each of its tables' logs (default 10,000)")
    p.add_argument("--history-rounds", type=int, default=2,
                   help="history: rounds of the fresh and the long-history tables, alternated (default 2)")
    p.add_argument("--scale", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 10000, 100000])
    p.add_argument("--rounds", type=int, default=3, help="measured batches per state size")
    p.add_argument("--load-batch", type=int, default=50_000, help="maxOffsetsPerTrigger while loading state")
    p.add_argument("--floor-sessions", type=int, default=1000, help="floor: sessions in every batch")
    p.add_argument("--floor-rows", type=int, default=50, help="floor: rows in each session's table")
    p.add_argument("--floor-batches", type=int, default=4, help="floor: measured batches per run")
    p.add_argument("--floor-updates", type=int, default=2, help="floor: update messages per session in each batch")
    p.add_argument("--floor-variants", type=_floor_variants, default=list(FLOOR_VARIANTS),
                   help=f"floor: which runs (default {','.join(FLOOR_VARIANTS)}; the Delta floor is "
                        "measured when a whole reconstructor runs)")
    p.add_argument("--shuffle-partitions", type=int, default=None)
    p.add_argument("--split", action="store_true",
                   help="throughput: record Spark's event log and print, for the last measured run of the limit "
                        "and of each reconstructor, where each batch went: Delta's table-state reconstructions, "
                        "MERGE phases, other jobs, the driver (tests/benchmarks/batch_time.py)")
    p.add_argument("--json", default="bench-results.json", help="where to write the figures")
    args = p.parse_args(argv)
    if args.floor_updates < 1:
        p.error("--floor-updates must be at least 1")

    localstack.up()
    work = Path(tempfile.mkdtemp(prefix="recon-bench-"))
    classes = _jvm_classes(work) if args.which in ("all", "floor") else None
    if classes is None:
        args.floor_variants = [v for v in args.floor_variants if v not in JVM_VARIANTS]
    event_log = work / "event-log" if args.split else None
    spark = _spark(args.shuffle_partitions, classes, event_log)
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "spark": spark.version, "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions")},
           "started": dt.datetime.now(dt.UTC).isoformat()}
    try:
        if args.which in ("all", "throughput"):
            out["throughput"] = throughput(spark, args, work / "throughput")
            _print_throughput(out["throughput"])
        if args.which in ("all", "scheduled"):  # whole processes of their own, beside this one
            out["scheduled"] = scheduled_bench.measure(argparse.Namespace(
                **scheduled_bench.FLEET, rounds=args.rounds_scheduled, idle_runs=args.idle_runs, store=args.store,
                engines=[e.value for e in args.engines]))
            scheduled_bench.print_table(out["scheduled"])
        if args.which in ("all", "history"):  # the long history is built once, in .stack/bench-history
            out["history"] = history_bench.measure(spark, history_bench.arguments(
                ["--ended", str(args.history_ended), "--commits", str(args.history_commits),
                 "--rounds", str(args.history_rounds)]), work / "history")
            history_bench.print_table(out["history"])
        if args.which in ("all", "floor"):
            out["floor"] = floor(spark, args, work / "floor")
            _print_floor(out["floor"])
        if args.which in ("all", "scaling"):
            def save(partial):
                Path(args.json).write_text(json.dumps({**out, "scaling": partial}, indent=2, default=str))

            out["scaling"] = scaling(spark, args, work / "scaling", save)
            _print_scaling(out["scaling"], args.scale)
    finally:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        spark.stop()
        if event_log is not None and "throughput" in out:
            # After the stop: Spark has then written the whole event log.
            out["throughput"]["split"] = _split(event_log, out["throughput"]["run_ids"])
            Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        print(f"figures written to {args.json}")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
