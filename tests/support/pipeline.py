"""Shared steps of the pipeline integration tests: produce a fleet, run the query, read tables."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from delta.tables import DeltaTable

from reconstructor import settings as config
from reconstructor.contract.tables import TABLES
from reconstructor.core.record_parse import KafkaRecord
from reconstructor.spark.pipeline import start
from tests.support.kafka import create_topics
from workbench import localstack
from workbench.fleet import FleetSpec, expected_tables, hash_partition, publish
from workbench.producer import SensorProducer


def produce(spec: FleetSpec, messages, partitions: int, create: bool = True) -> dict:
    """Publish; return {(topic, session): (partition, [offset of each of its messages])}."""
    bootstrap = localstack.bootstrap_servers()
    if create:
        create_topics(bootstrap, {t: partitions for t in spec.topics()})
    publish(SensorProducer(bootstrap), messages, {t: partitions for t in spec.topics()})
    return messages


def offsets_of(messages, partitions: int, start: dict | None = None) -> list[tuple[int, int]]:
    """The (partition, offset) each planned message landed on, for fresh topics in send order."""
    nxt = defaultdict(int, start or {})
    placed = []
    for p in messages:
        part = hash_partition(p.session, partitions)
        placed.append((part, nxt[(p.topic, part)]))
        nxt[(p.topic, part)] += 1
    return placed


def stream_config(pattern: str, output: str, checkpoint: str, **settings) -> config.Settings:
    """A run's configuration on the local stack: ``settings`` as a config file has them
    ('45 seconds'), no in-stream compaction unless asked, the reference (python) engine unless
    another is named, and no RECON_* from the environment."""
    return config.load(None, env={}, flags={
        "bootstrap_servers": localstack.bootstrap_servers(), "topic_pattern": pattern,
        "output": output, "checkpoint": checkpoint, "compact_every": config.COMPACTION_OFF,
        "engine": "python", **settings})


def run(spark, pattern: str, output: str, checkpoint: str, **settings) -> None:
    """A run to its end, as ``reconstructor run`` does it (a ``RunAgain`` starts the query again)."""
    while True:
        running = start(spark, stream_config(pattern, output, checkpoint, **settings))
        try:
            if running.await_termination() is None:
                return
        finally:
            running.stop()


def kafka_records(spark, pattern: str) -> list[KafkaRecord]:
    """Every record of the topics ``pattern`` matches, in Kafka order, as the test kit takes them."""
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", localstack.bootstrap_servers())
            .option("subscribePattern", pattern).option("startingOffsets", "earliest").load().collect())
    return [KafkaRecord(r.topic, r.partition, r.offset, r.timestamp.replace(tzinfo=dt.UTC), r.key, r.value)
            for r in sorted(rows, key=lambda r: (r.topic, r.partition, r.offset))]


def read_table(spark, output: str, name: str):
    return spark.read.format("delta").load(f"{output}/{name}")


def normalise(values: dict, names) -> dict:
    out = {}
    for c in names:
        v = values.get(c)
        if c == "calibrated_at" and isinstance(v, str):
            v = dt.datetime.fromisoformat(v.replace("Z", "+00:00")).astimezone(dt.UTC).replace(tzinfo=None)
        out[c] = v
    return out


def current_tables(spark, output: str, names) -> dict:
    tables: dict = defaultdict(dict)
    for r in read_table(spark, output, "current_rows").collect():
        d = r.asDict()
        tables[(d["topic"], d["session"])][d["row_id"]] = {c: d[c] for c in names}
    return dict(tables)


def replayed_tables(spark, output: str, names) -> dict:
    """row_changes of each session replayed in (seq, row_pos) order."""
    tables: dict = defaultdict(dict)
    rows = read_table(spark, output, "row_changes").orderBy("topic", "session", "seq", "row_pos").collect()
    for r in rows:
        d = r.asDict()
        t = tables[(d["topic"], d["session"])]
        if d["op"] == "delete":
            del t[d["row_id"]]
        else:
            t[d["row_id"]] = {c: d[c] for c in names}
    return dict(tables)


def expected_all(messages, names) -> dict:
    """Every session's final table (ended ones included), by dict replay."""
    tables: dict = {}
    for p in messages:
        m = p.message
        key = (p.topic, p.session)
        if m["type"] == "snapshot":
            tables[key] = {r["id"]: normalise(r.get("values") or {}, names) for r in m.get("rows", [])}
        elif m["type"] == "update":
            for r in m.get("rows", []):
                if r.get("op", "upsert") == "delete":
                    del tables[key][r["id"]]
                else:
                    tables[key][r["id"]] = normalise(r.get("values") or {}, names)
    return tables


def caught_up(progress: dict | None) -> bool:
    """True after a batch that read nothing while every source was at its latest offset."""
    if not progress or progress.get("numInputRows", 1) != 0:
        return False
    sources = progress.get("sources") or []
    return bool(sources) and all(
        s.get("endOffset") is not None and s.get("endOffset") == s.get("latestOffset")
        for s in sources)


def expected_open(messages, names) -> dict:
    """Every open session's table, as current_rows holds it."""
    return {k: {rid: normalise(v, names) for rid, v in t.items()} for k, t in expected_tables(messages).items()}


def change_count(messages) -> int:
    """Row changes the contract logs: every row of every message, plus rows a snapshot dropped."""
    count, tables = 0, {}
    for p in messages:
        m, key = p.message, (p.topic, p.session)
        rows = m.get("rows", [])
        count += len(rows)
        if m["type"] == "snapshot":
            new = {r["id"] for r in rows}
            count += len(tables.get(key, set()) - new)
            tables[key] = new
        elif m["type"] == "update":
            for r in rows:
                (tables[key].discard if r.get("op") == "delete" else tables[key].add)(r["id"])
    return count


def assert_exact(spark, out: str, messages, names) -> None:
    """The tables equal the dict replay, and row_changes holds each applied change exactly once."""
    assert current_tables(spark, out, names) == expected_open(messages, names)
    assert replayed_tables(spark, out, names) == expected_all(messages, names)
    changes = read_table(spark, out, "row_changes")
    assert changes.count() == change_count(messages)
    assert changes.select("topic", "partition", "offset", "row_pos", "row_id").distinct().count() == \
        changes.count()


def table_versions(spark, output: str) -> dict:
    """Each output table's latest Delta version: what a refused command must leave unchanged."""
    return {t: DeltaTable.forPath(spark, f"{output}/{t}").history(1).collect()[0].version for t in TABLES}
