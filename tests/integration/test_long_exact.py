"""Longs past 2**53 beside nulls, end to end: every table, the state in the checkpoint and ``asof``.

One micro-batch holds, in quarantine mode: a session whose ``reading_count`` values are 2**63-1,
-2**63 and 2**53+1 next to a row without one, an upsert and a delete; a session whose seqs are
near 2**63 next to a malformed record without a seq (a null seq in its group) and its resync; and
a session with an ``end`` (a rowless message: null row values) after a value of 2**63-1.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from confluent_kafka import Producer

from reconstructor.cli import commands
from reconstructor.cli.parser import build_parser
from reconstructor.contract.row_schema import RowSchema
from reconstructor.spark.state_reader import read_session_state
from tests.support.kafka import create_topics
from tests.support.pipeline import read_table, run

pytestmark = pytest.mark.integration
SCHEMA = RowSchema.load()
TS = "2026-11-21T10:00:00Z"
MAX, MIN, PAST = 2**63 - 1, -2**63, 2**53 + 1
B = 2**63 - 6  # session b's first seq: its last is 2**63 - 3


def _msg(session: str, seq, type_: str, rows=()) -> bytes:
    m = {"session": session, "type": type_, "ts": TS, "rows": list(rows)}
    if seq is not None:
        m["seq"] = seq
    return json.dumps(m).encode()


def _row(rid: str, count=None, op: str = "upsert") -> dict:
    if op == "delete":
        return {"id": rid, "op": "delete"}
    return {"id": rid, "values": {"status": "ok", **({} if count is None else {"reading_count": count})}}


RECORDS = [
    ("a", _msg("a", 0, "snapshot", [_row("r1", MAX), _row("r2", MIN), _row("r3", PAST), _row("r4"), _row("r5", 5)])),
    ("a", _msg("a", 1, "update", [_row("r1", -PAST), _row("r2", op="delete"), _row("r6")])),
    ("b", _msg("b", B, "snapshot", [_row("r1", PAST)])),
    ("b", _msg("b", B + 1, "update", [_row("r1", MIN), _row("r2")])),
    ("b", _msg("b", None, "update")),                                   # offset 4: MALFORMED, no seq
    ("b", _msg("b", B + 2, "update", [_row("r1", 1)])),                 # offset 5: set aside
    ("b", _msg("b", B + 3, "snapshot", [_row("r1", MAX), _row("r2")])),  # the resync
    ("c", _msg("c", 0, "snapshot", [_row("r1", MAX)])),
    ("c", _msg("c", 1, "end")),
    ("a", _msg("a", 2, "update", [_row("r3", MAX - 1)])),
]


def test_longs_near_2_63_beside_nulls_are_exact_in_every_table_the_state_and_asof(
        stack, spark, run_id, tmp_path, capsys):
    topic = f"longs{run_id}-sensor-0"
    create_topics(stack.bootstrap_servers(), {topic: 1})
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers(), "enable.idempotence": True})
    for key, value in RECORDS:
        producer.produce(topic, key=key.encode(), value=value, partition=0)
    assert producer.flush(30) == 0
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    run(spark, topic, out, chk, on_violation="quarantine")

    changes = sorted((r.session, r.seq, r.offset, r.row_id, r.op, r.reading_count)
                     for r in read_table(spark, out, "row_changes").collect())
    assert changes == sorted([
        ("a", 0, 0, "r1", "upsert", MAX), ("a", 0, 0, "r2", "upsert", MIN), ("a", 0, 0, "r3", "upsert", PAST),
        ("a", 0, 0, "r4", "upsert", None), ("a", 0, 0, "r5", "upsert", 5), ("a", 1, 1, "r1", "upsert", -PAST),
        ("a", 1, 1, "r2", "delete", None), ("a", 1, 1, "r6", "upsert", None), ("a", 2, 9, "r3", "upsert", MAX - 1),
        ("b", B, 2, "r1", "upsert", PAST), ("b", B + 1, 3, "r1", "upsert", MIN), ("b", B + 1, 3, "r2", "upsert", None),
        ("b", B + 3, 6, "r1", "upsert", MAX), ("b", B + 3, 6, "r2", "upsert", None),
        ("c", 0, 7, "r1", "upsert", MAX)])
    current = sorted((r.session, r.row_id, r.seq, r.reading_count)
                     for r in read_table(spark, out, "current_rows").collect())
    assert current == [("a", "r1", 1, -PAST), ("a", "r3", 2, MAX - 1), ("a", "r4", 0, None), ("a", "r5", 0, 5),
                       ("a", "r6", 1, None), ("b", "r1", B + 3, MAX), ("b", "r2", B + 3, None)]
    sessions = {r.session: r for r in read_table(spark, out, "sessions").collect()}
    assert (sessions["a"].status, sessions["a"].last_seq, sessions["a"].last_offset) == ("open", 2, 9)
    assert (sessions["b"].status, sessions["b"].last_seq, sessions["b"].snapshot_seq,
            sessions["b"].last_offset) == ("open", B + 3, B + 3, 6)
    assert (sessions["c"].status, sessions["c"].first_seq, sessions["c"].last_seq) == ("ended", 0, 1)
    violations = sorted((r.offset, r.kind, r.expected_seq, r.found_seq)
                        for r in read_table(spark, out, "violations").collect())
    assert [v[0] for v in violations] == [4, 5, 6]
    assert violations[0][1:] == ("MALFORMED", B + 2, None)
    assert violations[1][3] == B + 2
    assert violations[2] == (6, "SNAPSHOT_DRIFT", B + 3, B + 3)  # the resync differs from the table set aside

    # The state in the checkpoint, as ``state`` reads it.
    info, table = read_session_state(spark, chk, topic, "b", SCHEMA)
    assert (info["last_seq"], info["snapshot_seq"], info["last_offset"]) == (B + 3, B + 3, 6)
    assert _counts(table) == {"r1": MAX, "r2": None}
    info, table = read_session_state(spark, chk, topic, "a", SCHEMA)
    assert (info["first_seq"], info["last_seq"], info["last_offset"]) == (0, 2, 9)
    assert _counts(table) == {"r1": -PAST, "r3": MAX - 1, "r4": None, "r5": 5, "r6": None}
    commands._print_table(info, table, "json")
    printed = json.loads(capsys.readouterr().out)
    assert {r["row_id"]: r["reading_count"] for r in printed["rows"]} == _counts(table)

    # ``asof`` (delta-rs, no JVM) at seq 1 of session a, printed as JSON.
    args = build_parser().parse_args(["asof", "--output", out, "--topic", topic, "--session", "a",
                                      "--seq", "1", "--format", "json"])
    assert commands.asof(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {r["row_id"]: r["reading_count"] for r in printed["rows"]} == {
        "r1": -PAST, "r3": PAST, "r4": None, "r5": 5, "r6": None}


def _counts(table) -> dict:
    return {rid: None if pd.isna(v) else int(v) for rid, v in table["reading_count"].items()}
