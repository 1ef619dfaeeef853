"""The test kit's driver: the rules' verdicts, the tables, time and batches, without Spark.

What it gives is held to a real run's tables by ``tests/integration/test_reconstruct_pipeline.py``;
here, to the contract's verdicts and to itself over batch splits.  ``docs/testing.md``'s examples
run too.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconstructor.testing import TestDriver
from reconstructor.testing.strategies import FAULTS, fleet, micro_batches, valid_session, with_fault

DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
_FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Columns a batch stamps with its own time.
_STAMPS = ("updated_at", "detected_at")


def _tables(driver: TestDriver) -> dict:
    """Each table's rows in Kafka order (the appends are in the order of their batches' groups)."""
    def order(row: dict) -> tuple:
        return tuple((v is None, str(v)) for v in row.values())
    return {name: sorted(table.drop_columns([c for c in _STAMPS if c in table.column_names]).to_pylist(), key=order)
            for name, table in driver.tables.items()}


@pytest.mark.parametrize("kind", [k for k in FAULTS if k != "SNAPSHOT_DRIFT"])
@_FAST
@given(data=st.data())
def test_each_fault_stops_the_run_on_its_record_with_its_kind(kind, data):
    session = data.draw(valid_session(max_messages=8))
    messages, bad = data.draw(with_fault(session, kind))
    driver = TestDriver()
    verdict = driver.pipe(m.record() for m in messages)
    assert verdict.exit_code == 3
    assert verdict.violation is not None and verdict.violation.kind.value == kind
    assert (verdict.violation.partition, verdict.violation.offset) == (bad.partition, bad.offset)
    assert verdict.line is not None and verdict.line.startswith(f"reconstructor: INTEGRITY VIOLATION {kind} ")
    assert all(t.num_rows == 0 for t in driver.tables.values()), "a stopped batch writes nothing"
    assert driver.pipe(m.record() for m in session) == verdict, "a stopped run stays stopped"


@_FAST
@given(data=st.data())
def test_a_drifting_snapshot_is_recorded_or_stops_the_run_as_on_drift_says(data):
    messages, bad = data.draw(with_fault(data.draw(valid_session(max_messages=8)), "SNAPSHOT_DRIFT"))
    recorded = TestDriver()
    assert recorded.pipe(m.record() for m in messages).ok
    (row,) = recorded.tables["violations"].to_pylist()
    assert (row["kind"], row["offset"]) == ("SNAPSHOT_DRIFT", bad.offset)
    stopped = TestDriver(settings={"on_drift": "fail"})
    assert stopped.pipe(m.record() for m in messages).violation.kind.value == "SNAPSHOT_DRIFT"


@_FAST
@given(data=st.data())
def test_in_quarantine_mode_a_fault_is_recorded_and_the_run_goes_on(data):
    kind = data.draw(st.sampled_from(["GAP", "DUPLICATE", "UNKNOWN_ROW", "MALFORMED"]))
    messages, bad = data.draw(with_fault(data.draw(valid_session(max_messages=8)), kind))
    driver = TestDriver(settings={"on_violation": "quarantine"})
    assert driver.pipe(m.record() for m in messages).ok
    first = driver.tables["violations"].to_pylist()[0]
    assert (first["kind"], first["offset"]) == (kind, bad.offset)
    # A snapshot after the fault resyncs the session (a GAP's refused record may be one itself).
    resynced = any(m.type == "snapshot" and m.offset >= bad.offset and (m is not bad or kind == "GAP")
                   for m in messages)
    assert driver.state("sensor", "s1").status.value == ("open" if resynced else "quarantined")


@_FAST
@given(data=st.data())
def test_the_tables_do_not_depend_on_where_batches_end(data):
    messages = data.draw(fleet())
    whole = TestDriver()
    assert whole.pipe(m.record() for m in messages).ok
    cut = TestDriver()
    for batch in data.draw(micro_batches(messages)):
        assert cut.pipe(m.record() for m in batch).ok
    assert _tables(cut) == _tables(whole)


def test_a_silent_session_times_out_when_the_clock_passes_its_timeout():
    driver = TestDriver(settings={"session_timeout": "10 seconds"})
    snapshot = {"session": "s1", "seq": 0, "type": "snapshot", "ts": "2026-11-28T10:00:00Z",
                "rows": [{"id": "a", "values": {"status": "ok"}}]}
    assert driver.pipe([{"topic": "t", "value": snapshot}]).ok
    assert driver.tables["current_rows"].num_rows == 1
    driver.advance(9_999)
    driver.pipe([])
    assert driver.state("t", "s1").status.value == "open"
    driver.advance(1)
    driver.pipe([])
    assert driver.state("t", "s1").status.value == "timed_out"
    assert driver.tables["current_rows"].num_rows == 0
    assert driver.tables["sessions"].column("status").to_pylist() == ["timed_out"]
    update = {**snapshot, "seq": 1, "type": "update", "rows": [{"id": "b", "values": {"status": "warn"}}]}
    assert driver.pipe([{"topic": "t", "value": update}]).ok
    assert sorted(driver.tables["current_rows"].column("row_id").to_pylist()) == ["a", "b"], "it resumes exactly"


def test_a_record_that_is_not_json_is_malformed_with_its_coordinates():
    driver = TestDriver()
    verdict = driver.pipe([{"topic": "t", "partition": 2, "offset": 41, "key": "s1", "value": b"{oops"}])
    assert verdict.exit_code == 3
    assert verdict.line == ("reconstructor: INTEGRITY VIOLATION MALFORMED topic=t partition=2 offset=41 "
                            "session=s1 expected_seq=none found_seq=none: value is not valid JSON")


@pytest.mark.parametrize("example", re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S),
                         ids=["producer", "consumer"])
def test_the_documented_examples_run(example, tmp_path):
    """Each example as a file of its own (hypothesis reads a test's source), run as a script."""
    script = tmp_path / "example.py"
    script.write_text(example)
    runpy.run_path(str(script), run_name="docs_testing")


@st.composite
def faulty_fleet(draw, max_sessions: int = 6, partitions: int = 2):
    """Sessions of one topic, each with one fault, interleaved in Kafka's order on a few partitions
    (offsets consecutive per partition in the order drawn); each session's faulty message."""
    count = draw(st.integers(2, max_sessions))
    # Names drawn apart from the order of the records, so that no order of the sessions is Kafka's.
    names = draw(st.permutations([f"s{i}" for i in range(count)]))
    sessions, culprits = [], {}
    for name in names:
        session = draw(valid_session(max_messages=5, session=name, partition=draw(st.integers(0, partitions - 1))))
        messages, bad = draw(with_fault(session, draw(st.sampled_from(FAULTS))))
        sessions.append(messages)
        culprits[name] = bad
    queues = [list(s) for s in sessions]
    out, nxt = [], {}
    while any(queues):
        m = draw(st.sampled_from([q for q in queues if q])).pop(0)
        m.offset = nxt.get(m.partition, 0)
        nxt[m.partition] = m.offset + 1
        out.append(m)
    return out


@settings(_FAST, max_examples=15)
@given(data=st.data())
def test_of_several_sessions_violations_in_one_batch_the_verdict_is_the_first_in_kafka_order(data):
    """``run`` stops on the violation of the lowest (topic, partition, offset) among the batch's
    sessions (``spark.sinks.stats``); the kit's verdict is the same, whichever session it
    judges first."""
    messages = data.draw(faulty_fleet())
    alone = []
    for name in sorted({m.session for m in messages}):
        verdict = TestDriver().pipe(m.record() for m in messages if m.session == name)
        if verdict.violation is not None:
            alone.append(verdict.violation)
    fleet_verdict = TestDriver().pipe(m.record() for m in messages)
    first = min(alone, key=lambda v: (v.topic, v.partition, v.offset), default=None)
    assert fleet_verdict.violation == first
    assert fleet_verdict.exit_code == (0 if first is None else 3)


def test_of_sessions_on_one_partition_each_with_a_bad_message_the_kit_names_the_lowest_offset():
    """The issue's case: the session named first is not the one whose bad message comes first."""
    records = []
    for n, name in enumerate(("a-late", "z-early")):
        records.append({"topic": "t", "offset": n, "value": {"session": name, "seq": 0, "type": "snapshot",
                                                              "ts": "2026-11-28T10:00:00Z"}})
    records.append({"topic": "t", "offset": 2, "key": "z-early", "value": b"{oops"})
    records.append({"topic": "t", "offset": 3, "key": "a-late", "value": b"{oops"})
    verdict = TestDriver().pipe(records)
    assert verdict.violation is not None and (verdict.violation.session, verdict.violation.offset) == ("z-early", 2)
