"""Batches that do not grow with history: a live fleet's batches into fresh tables and into tables
that hold a long history, side by side in one JVM.

The history is built once and kept in ``--cache`` (by default ``.stack/bench-history``), keyed by
its size and by the tables' schemas; each measured run works on a copy of it:

- a seed run of the reconstructor on a topic of its own creates the tables and the checkpoint, as
  a real writer leaves them;
- ``--ended`` ended sessions go into ``sessions`` as one Delta append (sensors that have retired:
  topics that no pattern of the benchmark reads);
- ``--commits`` commits of an earlier writer's batches go into every table's log: its commit
  record and its transaction id, written as Delta writes them, then a checkpoint (delta-rs), so
  the log is as long as years of batches leave it and is read as Delta reads such a log;
- a second seed run, so the log ends on this writer's own commits.

The live fleet (``--sessions`` sessions, a snapshot and ``--updates`` one-row updates each) is then
published to new topics, and read under ``--max-offsets`` per batch by a fresh output and by the
history's copy (whose pattern also matches the seed topic, as its checkpoint expects), alternately,
``--rounds`` times.  The figure is the median ``triggerExecution`` of the batches that read
records, and the ratio history / fresh.

    python -m tests.benchmarks.history_bench [--ended 1000000 --commits 10000 --rounds 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from reconstructor.contract.tables import TABLES, table_path
from reconstructor.contract.writer import OUTPUT_FILE
from reconstructor.settings import Settings, StatefulEngine
from tests.support.kafka import create_topics
from workbench import localstack
from workbench.fleet import Planned, publish
from workbench.processes import stack_dir
from workbench.producer import SensorProducer

#: Raise when the history's layout changes, so a cached one is built again.
HISTORY_LAYOUT = 2
PARTITIONS = 2
SENSORS = 4


def _ts() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def live_fleet(topics: list[str], sessions: int, rows: int, updates: int) -> list[Planned]:
    """Every session's snapshot, then ``updates`` rounds of one one-row update per session."""
    from tests.benchmarks.pipeline_bench import _snapshot  # that module imports this one

    names = [(topics[i % len(topics)], f"s{uuid.uuid4().hex[:6]}-{i}") for i in range(sessions)]
    messages = [_snapshot(t, s, rows, _ts()) for t, s in names]
    for seq in range(1, updates + 1):
        for topic, session in names:
            row = {"id": f"row-{seq % rows}", "values": {"temperature": float(seq), "status": "ok",
                                                         "reading_count": seq}}
            messages.append(Planned(topic, session, {"session": session, "seq": seq, "type": "update",
                                                     "ts": _ts(), "rows": [row]}))
    return messages


def _publish(messages: list[Planned], topics: list[str]) -> None:
    create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in topics})
    publish(SensorProducer(localstack.bootstrap_servers()), messages, {t: PARTITIONS for t in topics})


def _settings(pattern: str, root: Path, engine: StatefulEngine, max_offsets: int | None) -> Settings:
    return Settings(bootstrap_servers=localstack.bootstrap_servers(), topic_pattern=pattern,
                    output=str(root / "out"), checkpoint=str(root / "chk"), max_offsets_per_trigger=max_offsets,
                    compact_every=None, engine=engine)


def _run(spark, cfg: Settings) -> list[dict]:
    from reconstructor.spark.pipeline import start

    running = start(spark, cfg)
    running.await_termination()
    return running.recent_progress()


# ------------------------------------------------------------------------------------------------
# The history.


def _key(args) -> str:
    from reconstructor.contract.tables import SESSIONS_FIELDS

    text = json.dumps([HISTORY_LAYOUT, args.ended, args.commits, str(SESSIONS_FIELDS)], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _ended_sessions(spark, output: str, count: int) -> None:
    """``count`` ended sessions appended to ``sessions``: every column of the table's own schema,
    filled as a session that ended long ago fills it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StringType, TimestampType

    path = table_path(output, "sessions")
    schema = spark.read.format("delta").load(path).schema
    base = spark.range(count).withColumn("i", F.col("id"))
    day = 86_400
    values = {
        "topic": F.concat(F.lit("retired-sensor-"), (F.col("i") % 10).cast("string")),
        "session": F.concat(F.lit("old-"), F.col("i").cast("string")),
        "status": F.lit("ended"),
        "partition": F.lit(0),
    }
    cols = []
    for f in schema.fields:
        if f.name in values:
            col = values[f.name]
        elif isinstance(f.dataType, TimestampType):
            col = F.timestamp_seconds(F.lit(1_700_000_000) + F.col("i") * 30 + (day if "end" in f.name else 0))
        elif isinstance(f.dataType, (LongType, IntegerType)):
            col = F.col("i") % 1000
        elif isinstance(f.dataType, StringType):
            col = F.lit(None).cast("string") if f.nullable else F.lit("")
        else:
            col = F.lit(None)
        cols.append(col.cast(f.dataType).alias(f.name))
    # The one file the live tables' compaction leaves (OPTIMIZE packs files of up to 1 GB).
    base.select(*cols).coalesce(1).write.format("delta").mode("append").save(path)


def _past_commits(path: str, count: int) -> None:
    """``count`` commits of an earlier writer's batches at the end of the table's log: each its
    commit record and its transaction id, as a batch that wrote nothing new leaves them."""
    log = Path(path) / "_delta_log"
    last = max(int(p.stem) for p in log.glob("*.json"))
    writer = str(uuid.uuid4())
    app_id = f"reconstructor-{writer}-{Path(path).name}"
    start_ms = int(time.time() * 1000) - count * 60_000
    for i in range(count):
        version, ms = last + 1 + i, start_ms + i * 60_000
        meta = {"reconstructor": {"query": writer, "batch": i, "offsets": {}}}
        info = {"timestamp": ms, "operation": "MERGE", "operationParameters": {}, "readVersion": version - 1,
                "isolationLevel": "Serializable", "isBlindAppend": False, "operationMetrics": {},
                "userMetadata": json.dumps(meta, separators=(",", ":")),
                "engineInfo": "Apache-Spark/4.2.0 Delta-Lake/4.4.1", "txnId": str(uuid.uuid4())}
        txn = {"appId": app_id, "version": i, "lastUpdated": ms}
        (log / f"{version:020d}.json").write_text(json.dumps({"commitInfo": info}) + "\n"
                                                  + json.dumps({"txn": txn}) + "\n")


def build_history(spark, args, cache: Path, engine: StatefulEngine) -> tuple[Path, str]:
    """The cached history (built when missing): its folder (``out``, ``chk``) and its seed topics'
    prefix.  A history whose seed topic Kafka no longer holds is built again."""
    from confluent_kafka.admin import AdminClient
    from deltalake import DeltaTable as RsTable

    key = _key(args)
    home = cache / f"history-{key}"
    seed = f"hb{key}-seed-sensor-"
    admin = AdminClient({"bootstrap.servers": localstack.bootstrap_servers()})
    topics = admin.list_topics(timeout=10).topics
    if (home / "done").exists() and f"{seed}0" in topics:
        print(f"history: cached in {home}", flush=True)
        return home, seed
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    started = time.perf_counter()
    seed_topics = [f"{seed}0"]
    if f"{seed}0" not in topics:
        create_topics(localstack.bootstrap_servers(), {t: PARTITIONS for t in seed_topics})
    cfg = _settings(f"{seed}[0-9]+", home, engine, None)
    publish(SensorProducer(localstack.bootstrap_servers()), live_fleet(seed_topics, 4, 10, 2),
            {t: PARTITIONS for t in seed_topics})
    _run(spark, cfg)
    print(f"history: seed run done; appending {args.ended:,} ended sessions", flush=True)
    _ended_sessions(spark, cfg.output, args.ended)
    print(f"history: writing {args.commits:,} past commits into each table's log", flush=True)
    for name in TABLES:
        path = table_path(cfg.output, name)
        if Path(path, "_delta_log").is_dir():
            _past_commits(path, args.commits)
            RsTable(path).create_checkpoint()
    publish(SensorProducer(localstack.bootstrap_servers()), live_fleet(seed_topics, 4, 10, 2),
            {t: PARTITIONS for t in seed_topics})
    _run(spark, cfg)  # the log ends on this writer's own commits
    (home / "done").write_text(_ts())
    print(f"history: built in {time.perf_counter() - started:.0f}s ({home})", flush=True)
    return home, seed


# ------------------------------------------------------------------------------------------------
# The measurement.


def _batches(progress: list[dict]) -> list[float]:
    return [p["durationMs"]["triggerExecution"] / 1000 for p in progress if p.get("numInputRows", 0) > 0]


def measure(spark, args, work: Path) -> dict:
    from reconstructor.spark.sinks import delta_sinks

    engine = StatefulEngine(args.engine)
    # The live tables' compaction (every 50 batches in a run) every few, so that the measured
    # batches hold what a long run's hold between two of them: the live sessions packed into the
    # files of the ended ones.
    delta_sinks.LIVE_COMPACTION_EVERY = args.live_compaction_every
    home, seed = build_history(spark, args, Path(args.cache), engine)
    run = f"r{uuid.uuid4().hex[:6]}"
    prefix = seed.replace("-seed-", f"-{run}-")
    topics = [f"{prefix}{i}" for i in range(SENSORS)]
    messages = live_fleet(topics, args.sessions, args.rows, args.updates)
    _publish(messages, topics)
    print(f"live fleet: {args.sessions:,} sessions, {len(messages):,} messages on {SENSORS} topics x "
          f"{PARTITIONS} partitions; {args.max_offsets:,} offsets a batch", flush=True)
    fresh_pattern = f"{prefix}[0-9]+"
    history_pattern = f"{seed.removesuffix('seed-sensor-')}(seed|{run})-sensor-[0-9]+"
    figures: dict[str, list[float]] = {"fresh": [], "history": []}
    for i in range(args.warmup):  # the JVM's and the Python workers' first batches, unmeasured
        _run(spark, _settings(fresh_pattern, work / f"warm-{i}", engine, args.max_offsets))
    for i in range(args.rounds):
        for subject in ("fresh", "history"):
            root = work / f"{subject}-{i}"
            if subject == "history":
                shutil.copytree(home / "out", root / "out")
                shutil.copytree(home / "chk", root / "chk")
                # the copy's checkpoint names the copy's output as its own
                named = root / "chk" / OUTPUT_FILE
                named.write_text(str(root / "out") + "\n")
                named.with_name(f".{named.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old
            pattern = history_pattern if subject == "history" else fresh_pattern
            started = time.perf_counter()
            batches = _batches(_run(spark, _settings(pattern, root, engine, args.max_offsets)))
            figures[subject] += batches
            print(f"{subject} tables: {len(batches)} batches, median {statistics.median(batches):.2f}s, "
                  f"run {time.perf_counter() - started:.1f}s", flush=True)
            shutil.rmtree(root, ignore_errors=True)
    fresh, history = statistics.median(figures["fresh"]), statistics.median(figures["history"])
    return {"engine": engine.value, "sessions": args.sessions, "updates": args.updates, "rows": args.rows,
            "max_offsets_per_trigger": args.max_offsets, "ended_sessions": args.ended,
            "past_commits": args.commits, "rounds": args.rounds,
            "live_compaction_every": args.live_compaction_every,
            "fresh_batch_s": fresh, "history_batch_s": history, "ratio": history / fresh,
            "batches": figures}


def print_table(h: dict) -> None:
    print(f"\nhistory: a live fleet's batches ({h['sessions']:,} sessions, {h['max_offsets_per_trigger']:,} offsets "
          f"a batch, {h['engine']} engine), median of {h['rounds']} rounds")
    print("| tables | median batch | / fresh |\n|---|---:|---:|")
    print(f"| fresh | {h['fresh_batch_s']:.2f} s | 1.00 |")
    print(f"| {h['ended_sessions']:,} ended sessions, {h['past_commits']:,} past commits | "
          f"{h['history_batch_s']:.2f} s | **{h['ratio']:.2f}** (target 1.3) |", flush=True)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=1000, help="live sessions (default 1000)")
    p.add_argument("--updates", type=int, default=30, help="one-row updates of each live session (default 30)")
    p.add_argument("--rows", type=int, default=20, help="rows in each live session's snapshot (default 20)")
    p.add_argument("--max-offsets", type=int, default=3000, help="maxOffsetsPerTrigger (default 3000)")
    p.add_argument("--ended", type=int, default=1_000_000, help="ended sessions in the history (default 1,000,000)")
    p.add_argument("--commits", type=int, default=10_000, help="past commits in each table's log (default 10,000)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of both subjects, alternated (default 2)")
    p.add_argument("--live-compaction-every", type=int, default=4,
                   help="batches between two compactions of the live tables (default 4; a run's is 50)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs into fresh tables first (default 1)")
    p.add_argument("--engine", choices=[e.value for e in StatefulEngine], default=StatefulEngine.PYTHON.value)
    p.add_argument("--cache", default=str(stack_dir() / "bench-history"),
                   help="where the built history is kept between runs")
    p.add_argument("--json", default="bench-history.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from tests.benchmarks.pipeline_bench import _spark

    args = arguments(argv)
    localstack.up()
    work = Path(tempfile.mkdtemp(prefix="recon-history-"))
    spark = _spark(None)
    try:
        figures = measure(spark, args, work)
        print_table(figures)
        Path(args.json).write_text(json.dumps(figures, indent=2))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
