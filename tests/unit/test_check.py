"""``reconstructor check --file``: each session's first violation with its coordinates, sessions the
start cut reported as not checked, and the exit codes, without Kafka or a JVM.  Over Kafka, its
verdicts are held to a real run's ``violations`` by ``tests/integration/test_quarantine.py``."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconstructor.cli import main
from reconstructor.cli.check import SessionCheck, judge
from reconstructor.cli.record_sources import listed_records
from reconstructor.core.policy import OnViolation
from reconstructor.core.record_parse import KafkaRecord
from reconstructor.settings import load
from reconstructor.testing.messages import Message
from reconstructor.testing.strategies import FAULTS, micro_batches, valid_session, with_fault
from tests.support.model import SCHEMA

#: ``check``'s spec: the defaults, in quarantine mode.
SPEC = load(None, env={}, flags={"on_violation": OnViolation.QUARANTINE.value}).step_spec(SCHEMA)


def _line(m: Message) -> str:
    record = m.record()
    value = record["value"]
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return json.dumps({"topic": record["topic"], "partition": record["partition"], "offset": record["offset"],
                       "timestamp": 1764324000000, "key": base64.b64encode(record["key"].encode()).decode(),
                       "value": base64.b64encode(raw).decode()})


def _check(capsys, path, *flags) -> tuple[int, str, str]:
    code = main(["check", "--file", str(path), *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_each_faulty_session_is_named_with_its_first_violation_and_the_clean_ones_are_not(data, tmp_path_factory, capsys):
    kinds = data.draw(st.lists(st.sampled_from(FAULTS), min_size=1, max_size=3))
    lines, bad = [], {}
    for n, kind in enumerate(kinds):
        session = data.draw(valid_session(max_messages=6, session=f"broken-{n}", partition=2 * n))
        messages, culprit = data.draw(with_fault(session, kind))
        for m in messages:  # each partition read from its offset 0: no session is cut by the start
            m.offset -= 100
        lines += [_line(m) for m in messages]
        bad[f"broken-{n}"] = (kind, culprit.partition, culprit.offset)
    lines += [_line(m) for m in data.draw(valid_session(max_messages=6, session="clean", partition=9))]
    path = tmp_path_factory.mktemp("check") / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, out, _ = _check(capsys, path, "--format", "json")
    report = json.loads(out)
    assert code == 3 and not report["clean"]
    found = {p["session"]: (p["kind"], p["partition"], p["offset"]) for p in report["problems"]}
    assert found == bad
    assert report["sessions"] == len(kinds) + 1 and report["records"] == len(lines)


def test_a_clean_file_exits_0_and_a_session_cut_by_the_start_is_not_checked(tmp_path, capsys):
    # The session's snapshot lies before offset 40, where the file's partition starts.
    cut = [Message(seq=s, type="update", offset=40 + s - 5, session="cut") for s in (5, 6)]
    later = [Message(seq=7, type="snapshot", offset=42, session="resynced", rows=[{"id": "a", "values": {}}])]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(_line(m) for m in cut + later) + "\n")
    code, out, _ = _check(capsys, path)
    assert code == 0, out
    assert out.splitlines()[0] == ("sensor cut: not checked: its first records lie before the start, "
                                   "and no snapshot of it followed")
    assert out.splitlines()[-1].startswith("check: 2 sessions, 3 records in ")
    assert out.splitlines()[-1].endswith(": clean, 1 session not checked")


def test_a_session_that_never_sent_a_snapshot_on_a_partition_read_from_0_is_a_problem(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    path.write_text(_line(Message(seq=0, type="update", offset=0, session="s1")) + "\n")
    code, out, _ = _check(capsys, path)
    assert code == 3
    assert out.splitlines()[0].startswith("sensor s1: INTEGRITY VIOLATION NO_SNAPSHOT topic=sensor partition=0 offset=0 ")


@pytest.mark.parametrize("content,what", [
    ("not json\n", "line 1 is not a record"),
    ('{"topic": "t", "partition": 0, "offset": 1, "value": "%%%"}\n', "line 1 is not a record"),
    ('{"topic": "t", "offset": 1, "value": null}\n', "line 1 is not a record"),
])
def test_a_file_that_holds_no_records_is_refused_with_exit_2_naming_the_line(tmp_path, capsys, content, what):
    path = tmp_path / "records.jsonl"
    path.write_text(content)
    code, _, err = _check(capsys, path)
    assert code == 2 and what in err and len(err.strip().splitlines()) == 1


def test_a_file_that_cannot_be_read_is_exit_2(tmp_path, capsys):
    code, _, err = _check(capsys, tmp_path / "absent.jsonl")
    assert code == 2 and "cannot read --file" in err


def _record_line(**fields) -> str:
    record = {"topic": "sensor", "partition": 0, "offset": 0, "timestamp": 1764324000000, "key": None,
              "value": None, **fields}
    return json.dumps(record) + "\n"


@pytest.mark.parametrize("fields", [
    {"partition": 2**40}, {"partition": 2**31}, {"partition": -1}, {"partition": True}, {"partition": 1.0},
    {"partition": "0"}, {"offset": 2**64}, {"offset": 2**63}, {"offset": -1}, {"offset": "12"},
    {"timestamp": 2**63}, {"timestamp": -2**63 - 1}, {"timestamp": 1.5}, {"topic": ""}, {"topic": "a b"},
    {"topic": "t" * 250}, {"topic": ".."}, {"topic": 7},
], ids=lambda f: ",".join(f"{k}={v!r:.20}" for k, v in f.items()))
def test_a_record_field_out_of_what_kafka_allows_is_exit_2_naming_the_line(tmp_path, capsys, fields):
    path = tmp_path / "records.jsonl"
    path.write_text(_record_line() + _record_line(**{"offset": 1, **fields}))
    code, _, err = _check(capsys, path)
    assert code == 2, err
    assert "line 2 is not a record" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("fields", [
    {"partition": 2**31 - 1}, {"offset": 2**63 - 1}, {"timestamp": 2**63 - 1}, {"timestamp": -2**63},
    {"timestamp": -1}, {"topic": "t" * 249}, {"topic": "Sensor_1.a-b"},
], ids=lambda f: ",".join(f"{k}={v!r:.20}" for k, v in f.items()))
def test_a_record_at_the_edge_of_what_kafka_allows_is_judged(tmp_path, capsys, fields):
    path = tmp_path / "records.jsonl"
    path.write_text(_record_line(**fields))
    code, out, err = _check(capsys, path, "--format", "json")
    assert code == 3, err  # a record with no value names no session: MALFORMED
    assert [p["kind"] for p in json.loads(out)["problems"]] == ["MALFORMED"]


# ------------------------------------------------------------------------------------------------
# The lifecycle by the records' Kafka timestamps: a session silent past --session-timeout times out,
# and past --state-retention its state is gone, as a run that reads each record when it is produced
# would have it.

_T0 = 1764324000000
_SNAPSHOT_ROWS = [{"id": "r1", "values": {"temperature": 1.0}}]


def _at(m: Message, ms: int) -> str:
    line = json.loads(_line(m))
    return json.dumps({**line, "timestamp": _T0 + ms})


def _lifecycle_file(tmp_path, timed: list[tuple[int, Message]]):
    for offset, (_, m) in enumerate(timed):
        m.offset = offset
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(_at(m, ms) for ms, m in timed) + "\n")
    return path


_DAY = 24 * 3600 * 1000
_SHORT = ("--session-timeout", "10 seconds", "--state-retention", "1 minute")


@pytest.mark.parametrize("flags,silence,verdict", [
    ((), 8 * _DAY, None),                     # the default retention is 7 days: a new session
    ((), 6 * _DAY, "AFTER_END"),              # within it the session has ended
    (_SHORT, 61_000, None),
    (_SHORT, 59_000, "AFTER_END"),
    (_SHORT, 11_000, "AFTER_END"),            # timed out: an ended session keeps its scalars
])
def test_a_new_snapshot_after_an_end_is_a_new_session_once_the_state_retention_passed(tmp_path, capsys, flags,
                                                                                      silence, verdict):
    path = _lifecycle_file(tmp_path, [
        (0, Message(seq=0, type="snapshot", rows=_SNAPSHOT_ROWS)), (1000, Message(seq=1, type="end")),
        (1000 + silence, Message(seq=0, type="snapshot", rows=_SNAPSHOT_ROWS))])
    code, out, _ = _check(capsys, path, "--format", "json", *flags)
    found = [(p["kind"], p["offset"]) for p in json.loads(out)["problems"]]
    assert found == ([] if verdict is None else [(verdict, 2)])
    assert code == (0 if verdict is None else 3)


@pytest.mark.parametrize("flags,silence,verdict", [
    ((), 8 * _DAY, "NO_SNAPSHOT"),            # its state is gone: it is new, and starts with an update
    ((), 6 * _DAY, None),                     # timed out, it resumes exactly
    (_SHORT, 61_000, "NO_SNAPSHOT"),
    (_SHORT, 59_000, None),
    (_SHORT, 11_000, None),
])
def test_an_update_after_the_state_retention_is_no_snapshot(tmp_path, capsys, flags, silence, verdict):
    path = _lifecycle_file(tmp_path, [
        (0, Message(seq=0, type="snapshot", rows=_SNAPSHOT_ROWS)), (1000, Message(seq=1, type="update")),
        (1000 + silence, Message(seq=2, type="update"))])
    code, out, _ = _check(capsys, path, "--format", "json", *flags)
    found = [(p["kind"], p["offset"]) for p in json.loads(out)["problems"]]
    assert found == ([] if verdict is None else [(verdict, 2)])
    assert code == (0 if verdict is None else 3)


def test_a_state_retention_not_longer_than_the_timeout_is_exit_2(tmp_path, capsys):
    path = _lifecycle_file(tmp_path, [(0, Message(seq=0, type="snapshot"))])
    code, _, err = _check(capsys, path, "--session-timeout", "1 hour", "--state-retention", "1 hour")
    assert code == 2 and "--state-retention" in err and len(err.strip().splitlines()) == 1


_GAPS_S = (0, 1, 5, 9, 10, 11, 30, 49, 50, 51, 59, 60, 61, 70, 120)


@st.composite
def _lifecycle(draw) -> list[tuple[int, Message]]:
    """Two sessions' records on one partition, with silences around the timeout (10 s), the
    retention (1 minute) and the retention past the timeout (50 s): ends, resumptions, ids used
    again, and now and then a gap, a duplicate, an update where a snapshot belongs or an unknown
    row's delete."""
    t, last, out = 0, {}, []
    for _ in range(draw(st.integers(1, 10))):
        session = draw(st.sampled_from(["a", "b"]))
        t += draw(st.sampled_from(_GAPS_S)) * 1000
        kind = draw(st.sampled_from(["snapshot", "update", "update", "update", "end"]))
        before = last.get(session)
        seq = draw(st.sampled_from([0] if before is None else [before + 1] * 4 + [0, before, before + 2]))
        rows: list[dict] = []
        if kind == "snapshot":
            rows = _SNAPSHOT_ROWS
        elif kind == "update":
            rows = draw(st.sampled_from([[], [{"id": "r1", "values": {"temperature": 2.0}}],
                                         [{"id": "r9", "op": "delete"}]]))
        last[session] = seq
        out.append((t, Message(seq=seq, type=kind, rows=rows, session=session)))
    return out


def _run_verdicts(timed: list[tuple[int, Message]], flags: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Each session's first violation as a quarantine run would record it that reads each record
    when it is produced (its Kafka timestamp), with a batch without records at each time a
    timeout is due in between, so each timeout fires at its time."""
    from reconstructor import settings as config
    from reconstructor.contract.row_schema import RowSchema
    from reconstructor.contract.tables import RecordKind
    from reconstructor.core.record_parse import KafkaRecord
    from reconstructor.core.timestamps import from_epoch_millis
    from reconstructor.core.violations import ViolationKind, ViolationRecord
    from reconstructor.testing.driver import ManualClock
    from reconstructor.testing.step_runner import StepRunner

    cfg = config.load(None, env={}, flags={**flags, "on_violation": "quarantine"})
    clock = ManualClock(_T0)
    runner = StepRunner(cfg.step_spec(RowSchema.load(None)), clock)
    first: dict[str, tuple[str, int]] = {}
    due: list[int] = []

    def batch(records) -> None:
        out = runner.run(records)
        runner.commit(out)
        due[:] = [held.timeout_at_ms for held in out.store.values() if held.timeout_at_ms is not None]
        for r in out.records:
            if r["record"] == RecordKind.RECORDED.value:
                v = ViolationRecord.from_json(r["info"])
                if v.kind != ViolationKind.SKIPPED:
                    first.setdefault(v.session, (v.kind.value, v.offset))

    for ms, m in timed:
        while due and min(due) < _T0 + ms:  # Spark fires a timeout in a batch past it
            clock.now_ms = min(due) + 1
            batch([])
        clock.now_ms = _T0 + ms
        batch([KafkaRecord(m.topic, m.partition, m.offset, from_epoch_millis(_T0 + ms), m.session.encode(),
                           json.dumps(m.value()).encode())])
    return first


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(timed=_lifecycle())
def test_check_gives_the_verdicts_of_a_run_that_reads_each_record_when_it_is_produced(timed, tmp_path_factory,
                                                                                      capsys):
    path = _lifecycle_file(tmp_path_factory.mktemp("check"), timed)
    code, out, _ = _check(capsys, path, "--format", "json", *_SHORT)
    found = {p["session"]: (p["kind"], p["offset"]) for p in json.loads(out)["problems"]}
    assert found == _run_verdicts(timed, {"session_timeout": "10 seconds", "state_retention": "1 minute"})
    assert code == (3 if found else 0)


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_the_lifecycle_carries_over_the_batches_check_reads_in(cut):
    from reconstructor import settings as config
    from reconstructor.cli.check import SessionCheck
    from reconstructor.contract.row_schema import RowSchema
    from reconstructor.core.record_parse import KafkaRecord
    from reconstructor.core.timestamps import from_epoch_millis

    timed = [(0, Message(seq=0, type="snapshot", rows=_SNAPSHOT_ROWS)), (1000, Message(seq=1, type="end")),
             (62_000, Message(seq=0, type="snapshot", rows=_SNAPSHOT_ROWS)), (63_000, Message(seq=1, type="update")),
             (64_000, Message(seq=0, type="snapshot", rows=_SNAPSHOT_ROWS))]
    records = [KafkaRecord(m.topic, 0, offset, from_epoch_millis(_T0 + ms), m.session.encode(),
                           json.dumps(m.value()).encode()) for offset, (ms, m) in enumerate(timed)]
    cfg = config.load(None, env={}, flags={"session_timeout": "10 seconds", "state_retention": "1 minute",
                                           "on_violation": "quarantine"})
    check = SessionCheck(cfg.step_spec(RowSchema.load(None)), {})
    check.add(records[:cut])
    check.add(records[cut:])
    # The ended session is gone after a minute; the new one is checked from its snapshot on.
    assert [(r.problem.kind.value, r.problem.offset) for r in check.problems if r.problem] == [("DUPLICATE", 4)]


def test_a_session_on_two_partitions_gets_the_one_batch_verdict_however_the_records_are_cut(
        tmp_path, capsys, monkeypatch):
    """The issue's case: the update lands on partition 1 at offset 0, the snapshot on partition 0
    behind other records.  Read at once it is PARTITION_MOVED at the update; read a record at a
    time, the update came first, and the check still names PARTITION_MOVED, not NO_SNAPSHOT."""
    from reconstructor.cli import record_sources

    others = [Message(seq=s, type="snapshot" if s == 0 else "update", offset=s, session="other") for s in range(3)]
    moved = Message(seq=1, type="update", partition=1, offset=0, session="moved")
    snapshot = Message(seq=0, type="snapshot", offset=3, session="moved", rows=[{"id": "a", "values": {}}])
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(_line(m) for m in [moved, *others, snapshot]) + "\n")
    found = []
    for size in (100, 1):
        monkeypatch.setattr(record_sources, "BATCH_RECORDS", size)
        code, out, _ = _check(capsys, path)
        assert code == 3
        found.append(out.splitlines()[0])
    assert found[0] == found[1]
    assert found[0].startswith("sensor moved: INTEGRITY VIOLATION PARTITION_MOVED topic=sensor partition=1 offset=0 "
                               "session=moved expected_seq=1 found_seq=1")


@st.composite
def crossing_fleet(draw):
    """Sessions of one topic, some of whose records sit on another partition than the rest (a
    moved tail, one moved record, or records that go back), some with a fault, in each
    partition's order (offsets from 0); then the order a reader meets them in: the partitions'
    records interleaved anyhow, each partition's in its order."""
    sessions = []
    for n in range(draw(st.integers(1, 4))):
        messages = draw(valid_session(max_messages=6, session=f"s{n}", partition=draw(st.integers(0, 2))))
        if draw(st.booleans()):
            messages, _ = draw(with_fault(messages, draw(st.sampled_from(FAULTS))))
        if len(messages) > 1 and draw(st.integers(0, 3)):
            start = draw(st.integers(1, len(messages) - 1))
            end = draw(st.integers(start + 1, len(messages)))
            other = (messages[0].partition + draw(st.integers(1, 2))) % 3
            for m in messages[start:end]:
                m.partition = other
        sessions.append(messages)
    queues: dict[int, list[Message]] = {}
    pending = [list(s) for s in sessions]
    while any(pending):  # each partition's records: the sessions' records interleaved, each in order
        m = draw(st.sampled_from([q for q in pending if q])).pop(0)
        queues.setdefault(m.partition, []).append(m)
    for queue in queues.values():
        for offset, m in enumerate(queue):
            m.offset = offset
    read = []
    while any(queues.values()):
        read.append(draw(st.sampled_from([q for q in queues.values() if q])).pop(0))
    return read


def _record(m: Message) -> KafkaRecord:
    record = m.record()
    raw = record["value"] if isinstance(record["value"], bytes) else json.dumps(record["value"]).encode()
    return KafkaRecord(m.topic, m.partition, m.offset, record["timestamp"], record["key"].encode(), raw)


def _problems(check) -> dict:
    return {(r.topic, r.session): (r.problem.kind, r.problem.partition, r.problem.offset, r.problem.expected_seq,
                                   r.problem.found_seq) for r in check.problems}


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_cut_of_the_records_read_gives_each_session_the_verdict_of_one_batch(data):
    """However ``check`` meets a topic's records (any order of the partitions' records, cut
    anywhere into the batches ``consume()`` returns), each session's first violation (kind,
    coordinates, seqs) is the one of all the records in one micro-batch, sessions on two
    partitions included."""
    read = data.draw(crossing_fleet())
    records = [_record(m) for m in read]
    whole = SessionCheck(SPEC, {})
    whole.add(records)
    source = listed_records(records, [[_record(m) for m in b] for b in data.draw(micro_batches(read))])
    size, again = data.draw(st.integers(1, 8)), source.again
    assert again is not None
    source.again = lambda ranges: (chunk[i:i + size] for chunk in again(ranges) for i in range(0, len(chunk), size))
    cut = judge(SPEC, source)
    assert _problems(cut) == _problems(whole)
    assert [(r.topic, r.session) for r in cut.unchecked] == [(r.topic, r.session) for r in whole.unchecked]
