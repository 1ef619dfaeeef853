"""Extreme but valid-looking input on the real stack: the query ends with MALFORMED naming the record.

Times outside the range pandas carries (nanoseconds since 1970, 1677..2262), a key or value that is
not UTF-8, an empty session id, a record with no key and no JSON: each is produced raw to a fresh
topic and the query must stop on the violation naming topic, partition and offset, the micro-batch
holding it writing nothing; never a crashed worker.  Each case runs in this process on the shared
SparkSession; the last tests go through ``reconstructor run``'s entry point, which must return 3
with the contract's line (``test_outages`` holds a real process to exit 3).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from reconstructor.errors import IntegrityViolationError
from tests.support.cli import cli_in_process
from tests.support.kafka import create_topics
from tests.support.pipeline import read_table, run

pytestmark = pytest.mark.integration
TS = "2026-11-21T10:00:00Z"
TABLES = ("row_changes", "current_rows", "sessions")
RANGE = "is outside the supported range 1677-09-22T00:00:00Z..2262-04-11T00:00:00Z"


def _msg(session: str, seq: int, type_: str = "update", ts: str = TS, rows=None) -> bytes:
    m = {"session": session, "seq": seq, "type": type_, "ts": ts}
    if rows is not None:
        m["rows"] = rows
    return json.dumps(m).encode()


def _snapshot(session: str) -> bytes:
    return _msg(session, 0, "snapshot", rows=[
        {"id": "a", "values": {"temperature": 1.5, "status": "ok", "calibrated_at": TS}}])


def _produce(bootstrap: str, topic: str, records) -> None:
    """Each (key, value) as raw bytes (None: no key) to partition 0 of a new topic, in order."""
    create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    errors = []
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0,
                         on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors


def _run(bootstrap: str, topic: str, out, chk):
    """``reconstructor run`` through its entry point, over the suite's SparkSession."""
    return cli_in_process("run", "--bootstrap-servers", bootstrap, "--topic-pattern", topic,
                          "--output", str(out), "--checkpoint", str(chk), "--compact-every", "off")


def _malformed_line(ran, topic: str, offset: int) -> str:
    assert ran.returncode == 3, ran.stderr[-3000:]
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith(f"reconstructor: INTEGRITY VIOLATION MALFORMED topic={topic} partition=0 "
                           f"offset={offset} "), last
    return last


def _counts(spark, out) -> dict:
    return {name: read_table(spark, str(out), name).count() for name in TABLES}


S = "s1"
# name: (records after a valid snapshot of session s1 at offset 0, the detail the line must end with)
CASES = {
    "ts before the range": (
        [(S.encode(), _msg(S, 1, ts="0001-01-01T00:00:00Z", rows=[]))],
        f"ts 0001-01-01T00:00:00Z {RANGE}"),
    "ts after the range": (
        [(S.encode(), _msg(S, 1, ts="9999-12-31T23:59:59Z", rows=[]))],
        f"ts 9999-12-31T23:59:59Z {RANGE}"),
    "row timestamp after the range": (
        [(S.encode(), _msg(S, 1, rows=[{"id": "a", "values": {"calibrated_at": "9999-12-31T23:59:59Z"}}]))],
        f"rows[0].values.calibrated_at 9999-12-31T23:59:59Z {RANGE}"),
    "row timestamp before the range": (
        [(S.encode(), _msg(S, 1, rows=[{"id": "a", "values": {"calibrated_at": "0001-01-01T00:00:00Z"}}]))],
        f"rows[0].values.calibrated_at 0001-01-01T00:00:00Z {RANGE}"),
    "key not UTF-8": (
        [(b"\xff\xfe", _msg(S, 1, rows=[]))],
        "Kafka key is not valid UTF-8"),
    "value not UTF-8 inside a string": (
        [(S.encode(), _msg(S, 1, rows=[{"id": "a", "values": {"status": "X"}}]).replace(b'"X"', b'"\xff\xfe"'))],
        "Kafka value is not valid UTF-8"),
    "no key and no JSON": (
        [(None, b"{not json")],
        "value is not valid JSON"),
}


def _violation_in_process(spark, topic: str, out, chk):
    """The query as ``reconstructor run`` wires it, in this process (the CLI's line is the
    violation's own text after ``reconstructor: ``, which the tests below read through the CLI)."""
    with pytest.raises(IntegrityViolationError) as stopped:
        run(spark, topic, str(out), str(chk))
    return stopped.value.violation


@pytest.mark.parametrize("name", list(CASES))
def test_extreme_record_after_a_snapshot_fails_the_query_naming_it(stack, spark, run_id, tmp_path, name):
    records, detail = CASES[name]
    bootstrap = stack.bootstrap_servers()
    topic = f"extreme{run_id}-sensor-0"
    _produce(bootstrap, topic, [(S.encode(), _snapshot(S)), *records])
    v = _violation_in_process(spark, topic, tmp_path / "out", tmp_path / "chk")
    assert str(v).startswith(f"INTEGRITY VIOLATION MALFORMED topic={topic} partition=0 offset=1 "), str(v)
    assert str(v).endswith(": " + detail), str(v)
    # One micro-batch held the snapshot and the bad record: nothing of it reached a table.
    assert _counts(spark, tmp_path / "out") == {name: 0 for name in TABLES}


def test_empty_session_id_is_malformed(stack, spark, run_id, tmp_path):
    bootstrap = stack.bootstrap_servers()
    topic = f"emptysession{run_id}-sensor-0"
    _produce(bootstrap, topic, [(b"", _snapshot(""))])
    ran = _run(bootstrap, topic, tmp_path / "out", tmp_path / "chk")
    last = _malformed_line(ran, topic, 0)
    assert last.endswith(": session must be a non-empty string"), last
    assert _counts(spark, tmp_path / "out") == {name: 0 for name in TABLES}


def test_tables_keep_what_came_before_a_row_time_out_of_range(stack, spark, run_id, tmp_path):
    """A first run applies the snapshot; the second stops on the out-of-range update and writes
    nothing more, so the tables still hold exactly the snapshot."""
    bootstrap = stack.bootstrap_servers()
    topic = f"extremelater{run_id}-sensor-0"
    out, chk = tmp_path / "out", tmp_path / "chk"
    _produce(bootstrap, topic, [(S.encode(), _snapshot(S))])
    first = _run(bootstrap, topic, out, chk)
    assert first.returncode == 0, first.stderr[-3000:]
    before = _counts(spark, out)
    assert before == {"row_changes": 1, "current_rows": 1, "sessions": 1}

    later = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    later.produce(topic, key=S.encode(), partition=0, value=_msg(
        S, 1, rows=[{"id": "a", "values": {"calibrated_at": "0001-01-01T00:00:00Z"}}]))
    assert later.flush(30) == 0
    second = _run(bootstrap, topic, out, chk)
    last = _malformed_line(second, topic, 1)
    assert last.endswith(f": rows[0].values.calibrated_at 0001-01-01T00:00:00Z {RANGE}"), last
    assert _counts(spark, out) == before
    (row,) = read_table(spark, str(out), "current_rows").collect()
    assert (row.row_id, row.status, str(row.calibrated_at)) == ("a", "ok", "2026-11-21 10:00:00")
