"""Quarantine mode and the snapshot audit on the real stack: Kafka, Spark's Kafka source, the
stateful step and Delta, through the command line."""

from __future__ import annotations

import datetime as dt
import json
import random
import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable, write_deltalake

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import TABLES
from reconstructor.core.data_loss import offsets_from_log
from reconstructor.testing import TestDriver

# The CLI in this process, over the suite's SparkSession: the process boundary is not their subject.
from tests.support.cli import cli_in_process as cli
from tests.support.cli import produce as produce_fleet
from tests.support.kafka import create_topics, read_all
from tests.support.pipeline import (
    current_tables,
    expected_all,
    expected_open,
    kafka_records,
    offsets_of,
    produce,
    read_table,
    replayed_tables,
)
from workbench.fleet import FleetSpec, inject, plan_fleet

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("spark")]
NAMES = RowSchema.load().names
PARTITIONS = 2
FAULTS = {"gap": "GAP", "duplicate": "DUPLICATE", "malformed": "MALFORMED"}


def run_cli(stack, pattern, out, chk, *flags):
    return cli("run", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", pattern,
               "--output", out, "--checkpoint", chk, "--compact-every", "off", *flags)


def violations(spark, out) -> list[tuple]:
    rows = read_table(spark, out, "violations").orderBy("topic", "partition", "offset").collect()
    return [(r.topic, r.partition, r.offset, r.session, r.kind, r.expected_seq, r.found_seq, r.detail, r.value)
            for r in rows]


def _batch_ends(chk: str) -> list[dict]:
    """Each committed batch's end offsets, ``{(topic, partition): offset}``, from the checkpoint."""
    folder = Path(chk) / "offsets"
    files = sorted((f for f in folder.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    return [offsets_from_log(f.read_text()) for f in files]


def test_a_fleet_in_quarantine_mode_sets_three_broken_sessions_aside_and_resyncs_each_at_its_next_snapshot(
        stack, spark, run_id, tmp_path):
    spec = FleetSpec(topic_prefix=f"q{run_id}-sensor-", sensors=2, sessions_per_sensor=3, rows=15,
                     updates=40, rows_per_update=2, resync_every=10, end_sessions=False, seed=3)
    original = list(plan_fleet(spec))
    victims = sorted({p.session for p in original})[::2]  # three sessions, on both topics
    messages, culprits = original, {}
    for n, (fault, session) in enumerate(zip(FAULTS, victims)):
        messages, culprits[session] = inject(messages, fault, random.Random(n), session=session)
    produce(spec, messages, PARTITIONS)
    placed = dict(zip(map(id, messages), offsets_of(messages, PARTITIONS)))
    # A record that names no session: no key, and a value that is not JSON.
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers()})
    producer.produce(f"{spec.topic_prefix}0", value=b"not json", partition=1)
    assert producer.flush(30) == 0

    pattern = f"{spec.topic_prefix}[0-9]+"
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    resync = {n: f"q{run_id}-resync-{n}" for n in (1, 2)}  # outside the pattern
    create_topics(stack.bootstrap_servers(), dict.fromkeys(resync.values(), 1))
    ran = run_cli(stack, pattern, out, chk, "--on-violation", "quarantine", "--max-offsets-per-trigger", "40",
                  "--resync-topic", resync[1], "--metrics-log", str(tmp_path / "metrics.jsonl"))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "records set aside" in ran.stderr
    assert ran.stderr.strip().splitlines()[-1].startswith("quarantine: 0 sessions quarantined now; this run set aside")

    # Every session's table is exact: the untouched ones throughout, the broken ones after their resync.
    assert current_tables(spark, out, NAMES) == expected_open(original, NAMES)
    assert replayed_tables(spark, out, NAMES) == expected_all(original, NAMES)
    changes = read_table(spark, out, "row_changes")
    assert changes.select("topic", "partition", "offset", "row_pos", "row_id").distinct().count() == changes.count()
    assert {r.status for r in read_table(spark, out, "sessions").collect()} == {"open"}

    recorded = violations(spark, out)
    by_session = defaultdict(list)
    for row in recorded:
        by_session[row[3]].append(row)
    assert set(by_session) == set(victims) | {None}
    (unnamed,) = by_session[None]
    assert (unnamed[0], unnamed[1], unnamed[4], unnamed[8]) == (f"{spec.topic_prefix}0", 1, "MALFORMED", "not json")
    for (fault, kind), session in zip(FAULTS.items(), victims):
        culprit = culprits[session]
        first, *rest = by_session[session]
        assert (first[1], first[2], first[4]) == (*placed[id(culprit)], kind), fault
        assert first[8] is not None  # the raw value, as Kafka held it
        assert {r[4] for r in rest} <= {"SKIPPED", "SNAPSHOT_DRIFT"}
        # What was set aside ends at the resync snapshot: the record after it applies again.
        assert all(r[2] > first[2] for r in rest)

    # Each session a batch left quarantined asked its sensor once for a snapshot (the interval is
    # longer than the run), naming the violation; a session resynced within the batch that
    # quarantined it, or never quarantined, asked nothing.
    ends = _batch_ends(chk)
    snapshots = {(r.session, r.offset) for r in changes.where(changes.type == "snapshot")
                 .select("session", "offset").distinct().collect()}
    left_quarantined = set()
    for session in victims:
        topic, part, offset = by_session[session][0][:3]
        batch_end = next(end[(topic, part)] for end in ends if end[(topic, part)] > offset)
        resynced_at = min(o for s, o in snapshots if s == session and o >= offset)
        if resynced_at >= batch_end:  # past the batch that quarantined it
            left_quarantined.add(session)
    requests = read_all(stack.bootstrap_servers(), resync[1])
    sessions = {r.session: r for r in read_table(spark, out, "sessions").collect()}
    asked = [key for key, _ in requests]
    assert left_quarantined and sorted(asked) == sorted(left_quarantined)
    assert set(asked) == {s for s, r in sessions.items() if r.resync_requested_at is not None}
    for key, request in requests:
        first = by_session[key][0]
        assert request["session"] == key and request["kind"] == first[4]
        assert (request["topic"], request["partition"], request["offset"]) == first[:3]
        assert (request["expected_seq"], request["found_seq"]) == (first[5], first[6])
        if first[5] is not None:
            assert request["last_applied_seq"] == first[5] - 1
        assert request["requested_at"].endswith("Z")
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum(m["resync_requests"] for m in metrics) == len(requests)

    # The same stream in one micro-batch: the same tables and the same violations.
    out2, chk2 = str(tmp_path / "out2"), str(tmp_path / "chk2")
    ran = run_cli(stack, pattern, out2, chk2, "--on-violation", "quarantine", "--resync-topic", resync[2])
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert violations(spark, out2) == recorded
    assert read_all(stack.bootstrap_servers(), resync[2]) == []  # every session resynced within the batch
    assert current_tables(spark, out2, NAMES) == current_tables(spark, out, NAMES)

    # The test kit's driver, over the records Kafka holds, leaves the tables this run left.
    # reconstructor check (no JVM, nothing written) names each broken session by the first violation
    # the run recorded for it, and the record that names no session.
    checked = cli("check", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", pattern,
                  "--format", "json")
    assert checked.returncode == 3, checked.stderr[-3000:]
    problems = {p["session"]: (p["topic"], p["partition"], p["offset"], p["kind"])
                for p in json.loads(checked.stdout)["problems"]}
    assert problems == {session: rows[0][:3] + (rows[0][4],) for session, rows in by_session.items()}
    driven = _driver_tables(spark, pattern, {"on_violation": "quarantine"})
    assert driven["row_changes"] and driven["violations"] and driven == _spark_tables(spark, out2)

    # The lake reconciled with its source (no JVM): every record Kafka holds, the one that names no
    # session included, is in row_changes, in violations, or both, as the contract says.
    against = ["--against-kafka", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", pattern]
    reconciled = cli("verify", "--output", out, *against)
    assert reconciled.returncode == 0, reconciled.stderr[-3000:]
    assert f"against Kafka: {len(messages) + 1:,} records checked (" in reconciled.stdout
    assert "  not checked: 0 records (0 before" in reconciled.stdout
    assert "0 offsets no longer in Kafka, 0 offsets past the writer's committed ones" in reconciled.stdout
    assert reconciled.stdout.index("no discrepancy") < reconciled.stdout.index("against Kafka")
    # A record set aside whose violations row is gone: at rest only a seq with no trace, which the
    # at-rest checks count and cannot fail; against Kafka, the record the tables lack.
    topic, part, offset, session, kind, _, seq, _, _ = next(r for r in recorded if r[4] == "SKIPPED")
    tampered = tmp_path / "tampered"
    shutil.copytree(out, tampered)
    held = DeltaTable(str(tampered / "violations")).to_pyarrow_table()
    kept = held.filter(pc.invert(pc.and_(pc.equal(held["topic"], topic), pc.and_(
        pc.equal(held["partition"], part), pc.equal(held["offset"], offset)))))
    assert kept.num_rows == held.num_rows - 1
    shutil.rmtree(tampered / "violations")
    write_deltalake(str(tampered / "violations"), kept)
    failed = cli("verify", "--output", str(tampered), *against)
    assert failed.returncode == 3, failed.stderr[-3000:]
    assert failed.stderr.strip().splitlines()[-1].startswith(
        f"reconstructor: VERIFY FAILED row_changes topic={topic} session={session} seq={seq} row=")
    assert f"record at partition {part} offset {offset} has 2 row(s); row_changes holds none of them and " \
           "violations no row of it" in failed.stderr
    nowhere = cli("verify", "--output", out, *against[:-1], "no-such-topic")
    assert nowhere.returncode == 2 and "no topic of the output" in nowhere.stderr


def test_a_dropped_update_before_a_periodic_snapshot_is_recorded_as_drift_and_fails_the_query_when_asked(
        stack, spark, run_id, tmp_path):
    prefix = f"drift{run_id}-sensor-"
    produced = produce_fleet("--bootstrap-servers", stack.bootstrap_servers(), "--topic-prefix", prefix,
                   "--sensors", "1", "--sessions", "2", "--rows", "12", "--updates", "30", "--no-end",
                   "--inject", "drift")
    assert produced.returncode == 0, produced.stderr
    pattern = f"{prefix}[0-9]+"
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    ran = run_cli(stack, pattern, out, chk)  # the default: fail on violations, record drifts
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "1 snapshot drift" in ran.stderr
    (drift,) = violations(spark, out)
    assert drift[4] == "SNAPSHOT_DRIFT" and drift[5] == drift[6]
    assert drift[7].startswith("snapshot differs from the table rebuilt from the updates: ")
    assert "'row-" in drift[7]  # names the rows that differ

    failed = run_cli(stack, pattern, str(tmp_path / "out2"), str(tmp_path / "chk2"), "--on-drift", "fail")
    assert failed.returncode == 3, failed.stderr[-3000:]
    assert failed.stderr.strip().splitlines()[-1].startswith(
        f"reconstructor: INTEGRITY VIOLATION SNAPSHOT_DRIFT topic={prefix}0 partition={drift[1]} offset={drift[2]}")


#: Columns each batch stamps with its own time, and the one only resync requests write.
_STAMPED = {"updated_at", "detected_at", "resync_requested_at"}


def _rows(rows: list[dict]) -> list[dict]:
    """Rows without the stamped columns, times as naive UTC, in one order."""
    out = [{k: (v.astimezone(dt.UTC).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v)
            for k, v in row.items() if k not in _STAMPED} for row in rows]
    return sorted(out, key=lambda r: tuple((v is None, str(v)) for v in r.values()))


def _spark_tables(spark, out: str) -> dict:
    return {name: _rows([r.asDict() for r in read_table(spark, out, name).collect()]) for name in TABLES}


def _driver_tables(spark, pattern: str, settings: dict) -> dict:
    """What ``TestDriver`` makes of every record of the topics, in one batch (the tables do not
    depend on where batches end)."""
    driver = TestDriver(settings=settings)
    driver.pipe(kafka_records(spark, pattern))
    return {name: _rows(table.to_pylist()) for name, table in driver.tables.items()}
