"""Hypothesis strategies: valid sessions, split into batches and shuffled frames."""

from __future__ import annotations

import datetime as dt
from itertools import pairwise

from hypothesis import strategies as st

from tests.support.model import Msg

ROW_IDS = [f"r{i}" for i in range(12)]

values_st = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.one_of(st.none(), st.floats(-50, 150, allow_nan=False)),
        "pressure": st.floats(900, 1100, allow_nan=False),
        "humidity": st.floats(0, 100, allow_nan=False),
        "status": st.one_of(st.none(), st.sampled_from(["ok", "warn", "fail", "ünïcode ✓"])),
        "reading_count": st.integers(-(2**53), 2**53),
        "calibrated_at": st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2030, 1, 1)),
    },
)


@st.composite
def valid_session(draw, max_messages: int = 25, session: str = "s1", partition: int = 0):
    """A valid message sequence: a snapshot, then updates (with resync snapshots), maybe an end."""
    n = draw(st.integers(1, max_messages))
    first_seq = draw(st.integers(0, 1000))
    present: set[str] = set()
    msgs = []
    for i in range(n):
        seq = first_seq + i
        kind = "snapshot" if i == 0 else draw(st.sampled_from(["update"] * 6 + ["snapshot"]))
        if kind == "snapshot":
            ids = draw(st.lists(st.sampled_from(ROW_IDS), unique=True, max_size=8))
            rows = [{"id": rid, "values": draw(values_st)} for rid in ids]
            present = set(ids)
        else:
            rows = []
            for _ in range(draw(st.integers(0, 6))):
                if present and draw(st.booleans()):
                    rid = draw(st.sampled_from(sorted(present)))
                    if draw(st.booleans()):
                        rows.append({"id": rid, "op": "delete"})
                        present.discard(rid)
                        continue
                else:
                    rid = draw(st.sampled_from(ROW_IDS))
                rows.append({"id": rid, "op": "upsert", "values": draw(values_st)})
                present.add(rid)
        msgs.append(Msg(seq=seq, type=kind, rows=rows, partition=partition, offset=100 + i,
                        session=session))
    if draw(st.booleans()):
        msgs.append(Msg(seq=first_seq + n, type="end", partition=partition, offset=100 + n,
                        session=session))
    return msgs


@st.composite
def batches_of(draw, msgs: list[Msg]):
    """Cut the messages into consecutive micro-batches, each shuffled (Spark gives no order)."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(msgs) - 1)), max_size=4)))
    bounds = [0] + [c for c in cuts if c < len(msgs)] + [len(msgs)]
    batches = [msgs[a:b] for a, b in pairwise(bounds) if b > a]
    return [draw(st.permutations(b)) for b in batches]


@st.composite
def micro_batches(draw, msgs: list[Msg]):
    """The records cut into consecutive micro-batches where hypothesis chooses, each in Kafka order."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(msgs) - 1)), max_size=len(msgs))))
    bounds = [0] + [c for c in cuts if c < len(msgs)] + [len(msgs)]
    return [msgs[a:b] for a, b in pairwise(bounds) if b > a]
