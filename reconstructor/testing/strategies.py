"""Hypothesis strategies for the streams a sensor sends: valid sessions, fleets, faults, batches.

Needs the ``[testing]`` extra (hypothesis).  Each strategy draws ``Message`` lists
(``reconstructor.testing.messages``); ``[m.record() for m in messages]`` is what
``TestDriver.pipe`` takes, and ``micro_batches`` cuts them where a run's micro-batches could end.
"""

from __future__ import annotations

import datetime as dt
from itertools import pairwise
from typing import Any

from hypothesis import strategies as st

from reconstructor.contract.row_schema import RowSchema
from reconstructor.testing.messages import Message

ROW_IDS = [f"r{i}" for i in range(12)]
#: The faults ``with_fault`` injects, by the violation kind the rules give them.
FAULTS = ("GAP", "DUPLICATE", "NO_SNAPSHOT", "PARTITION_MOVED", "AFTER_END", "UNKNOWN_ROW", "MALFORMED",
          "SNAPSHOT_DRIFT")

_DEMO = "demo_sensor"


def column_values(kind: str) -> st.SearchStrategy[Any]:
    """A value for a column of type ``kind``: doubles finite (null too), longs within 2**53 of 0
    (a reference model in floats stays exact), strings of a few words (null too), times between
    2020 and 2030.  ``fuzz``-style extremes are the parse's tests, not a stream's."""
    return {
        "double": st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
        "long": st.integers(-(2**53), 2**53),
        "string": st.one_of(st.none(), st.sampled_from(["ok", "warn", "fail", "ünïcode ✓"])),
        "boolean": st.one_of(st.none(), st.booleans()),
        "timestamp": st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2030, 1, 1)),
    }[kind]


def row_values(schema: RowSchema | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """A row's ``values``: some of the schema's columns (an absent one stays as it was)."""
    schema = schema or RowSchema.load(_DEMO)
    return st.fixed_dictionaries({}, optional={c.name: column_values(c.type) for c in schema.columns})


@st.composite
def valid_session(draw: st.DrawFn, max_messages: int = 25, session: str = "s1", partition: int = 0,
                  schema: RowSchema | None = None, topic: str = "sensor", restarts: bool = False) -> list[Message]:
    """A valid session: a snapshot, then updates with now and then a resync snapshot, maybe an
    end; seqs consecutive from a drawn start, offsets consecutive from 100 on one partition.
    The rules apply every message: no violation, the table is the fold of its rows.

    A resync snapshot restates the table; with ``restarts`` it may be a new table instead (a
    sensor that restarted), which the rules apply too, and record as a ``SNAPSHOT_DRIFT`` when
    ``on_drift`` is ``record`` (the default)."""
    values = row_values(schema)
    n = draw(st.integers(1, max_messages))
    first_seq = draw(st.integers(0, 1000))
    table: dict[str, dict[str, Any]] = {}
    msgs = []
    for i in range(n):
        kind = "snapshot" if i == 0 else draw(st.sampled_from(["update"] * 6 + ["snapshot"]))
        rows: list[dict[str, Any]] = []
        if kind == "snapshot" and (i == 0 or restarts):
            ids = draw(st.lists(st.sampled_from(ROW_IDS), unique=True, max_size=8))
            rows = [{"id": rid, "values": draw(values)} for rid in ids]
            table = {r["id"]: r["values"] for r in rows}
        elif kind == "snapshot":
            rows = [{"id": rid, "values": dict(v)} for rid, v in sorted(table.items())]
        else:
            for _ in range(draw(st.integers(0, 6))):
                if len(table) > 0 and draw(st.booleans()):
                    rid = draw(st.sampled_from(sorted(table)))
                    if draw(st.booleans()):
                        rows.append({"id": rid, "op": "delete"})
                        del table[rid]
                        continue
                else:
                    rid = draw(st.sampled_from(ROW_IDS))
                drawn = draw(values)
                rows.append({"id": rid, "op": "upsert", "values": drawn})
                table[rid] = drawn
        msgs.append(Message(seq=first_seq + i, type=kind, rows=rows, partition=partition, offset=100 + i,
                            session=session, topic=topic))
    if draw(st.booleans()):
        msgs.append(Message(seq=first_seq + n, type="end", partition=partition, offset=100 + n,
                            session=session, topic=topic))
    return msgs


@st.composite
def fleet(draw: st.DrawFn, max_sessions: int = 4, partitions: int = 2, max_messages: int = 12,
          schema: RowSchema | None = None, topic: str = "sensor") -> list[Message]:
    """Valid sessions of one topic interleaved in Kafka's order: each session on one partition,
    its messages in seq order, the partitions' offsets consecutive from 0 in the order drawn.
    The rules apply every message of every session."""
    count = draw(st.integers(1, max_sessions))
    sessions = [draw(valid_session(max_messages, f"s{i}", draw(st.integers(0, partitions - 1)), schema, topic))
                for i in range(count)]
    queues = [list(s) for s in sessions]
    out: list[Message] = []
    nxt: dict[int, int] = {}
    while any(queues):
        q = draw(st.sampled_from([q for q in queues if q]))
        m = q.pop(0)
        m.offset = nxt.get(m.partition, 0)
        nxt[m.partition] = m.offset + 1
        out.append(m)
    return out


@st.composite
def with_fault(draw: st.DrawFn, messages: list[Message], kind: str) -> tuple[list[Message], Message]:
    """``messages`` (one valid session, as ``valid_session`` draws it) with one fault of ``kind``
    (``FAULTS``) and the message the rules refuse for it, with that violation kind:

    - ``GAP``: an update after the first message is lost; the next message is refused;
    - ``DUPLICATE``: a message is sent twice; the second is refused;
    - ``NO_SNAPSHOT``: the session starts with an update, which is refused;
    - ``PARTITION_MOVED``: a message after the first comes on another partition;
    - ``AFTER_END``: a message follows the session's end;
    - ``UNKNOWN_ROW``: an update deletes a row the table does not hold;
    - ``MALFORMED``: a message whose value is not the contract's JSON;
    - ``SNAPSHOT_DRIFT``: a resync snapshot that differs from the table the updates built (recorded
      in the ``violations`` table; with ``on_drift = "fail"``, the run stops on it).

    Offsets are renumbered, so the fault is in the stream and not in Kafka's coordinates.
    """
    out = [Message(**{**m.__dict__, "rows": list(m.rows)}) for m in messages]
    if out[-1].type == "end" and kind not in ("AFTER_END",):
        out.pop()
    last = out[-1]
    bad: Message
    if kind == "GAP":
        if len(out) < 3:
            out.append(_update(last, 1))
            out.append(_update(last, 2))
        i = draw(st.integers(1, len(out) - 2))
        del out[i]
        bad = out[i]
    elif kind == "DUPLICATE":
        i = draw(st.integers(0, len(out) - 1))
        bad = Message(**{**out[i].__dict__})
        out.insert(i + 1, bad)
    elif kind == "NO_SNAPSHOT":
        bad = out[0] = Message(**{**out[0].__dict__, "type": "update", "rows": []})
    elif kind == "PARTITION_MOVED":
        bad = _update(last, 1)
        bad.partition = last.partition + 1
        out.append(bad)
    elif kind == "AFTER_END":
        if last.type != "end":
            out.append(Message(**{**_update(last, 1).__dict__, "type": "end"}))
            last = out[-1]
        bad = _update(last, 1)
        out.append(bad)
    elif kind == "UNKNOWN_ROW":
        bad = _update(last, 1)
        bad.rows = [{"id": "no-such-row", "op": "delete"}]
        out.append(bad)
    elif kind == "MALFORMED":
        bad = _update(last, 1)
        bad.raw = b'{"session": "' + bad.session.encode() + b'", "seq": "oops"}'
        bad.error = "seq must be an integer"
        out.append(bad)
    elif kind == "SNAPSHOT_DRIFT":
        rows = [{"id": r, "values": v} for r, v in sorted(_fold(out).items())]
        bad = _update(last, 1)
        bad.type = "snapshot"
        bad.rows = rows[1:] if rows else [{"id": "drifted", "values": {}}]  # a row lost, or one made up
        out.append(bad)
    else:
        raise ValueError(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
    for offset, m in enumerate(out, start=out[0].offset):
        m.offset = offset if m.partition == out[0].partition else m.offset
    return out, bad


def _update(after: Message, step: int) -> Message:
    """An update with no rows, ``step`` seqs after ``after``."""
    return Message(seq=after.seq + step, type="update", partition=after.partition, offset=after.offset + step,
                   session=after.session, topic=after.topic)


def _fold(messages: list[Message]) -> dict[str, dict[str, Any]]:
    """The session's table after ``messages`` (each a valid one): row id to its values."""
    table: dict[str, dict[str, Any]] = {}
    for m in messages:
        if m.type == "snapshot":
            table = {}
        for r in m.rows:
            if r.get("op") == "delete":
                table.pop(r["id"], None)
            else:
                table[r["id"]] = dict(r.get("values") or {})  # an upsert replaces the row
    return table


@st.composite
def micro_batches(draw: st.DrawFn, msgs: list[Any]) -> list[list[Any]]:
    """The messages cut into consecutive micro-batches where hypothesis chooses, each in Kafka
    order: the rules' verdict and the tables must not depend on the cuts (for a session on two
    partitions, when the messages bring its own partition's first: ``docs/contract.md``)."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(msgs) - 1)), max_size=len(msgs))))
    bounds = [0] + [c for c in cuts if c < len(msgs)] + [len(msgs)]
    return [msgs[a:b] for a, b in pairwise(bounds) if b > a]


@st.composite
def batches_of(draw: st.DrawFn, msgs: list[Any]) -> list[list[Any]]:
    """The messages cut into at most five consecutive micro-batches, each shuffled: Spark hands a
    group's rows in no order, and the core must sort them."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(msgs) - 1)), max_size=4)))
    bounds = [0] + [c for c in cuts if c < len(msgs)] + [len(msgs)]
    batches = [msgs[a:b] for a, b in pairwise(bounds) if b > a]
    return [draw(st.permutations(b)) for b in batches]
