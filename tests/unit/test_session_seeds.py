"""A replay's session seeds (``core.seed``): a session started from what the tables hold is judged
exactly as the live writer would have judged it.

The property: a live run applies a session's records up to a switch, with timeouts, an end or
neither; the tables then hold its ``sessions`` row and its changes.  Past the switch the stream goes
on: it resumes (its next seqs), ends, or is re-sent whole.  A state function that starts the session
from the seed of those tables, handed again the records from a replay's start before the switch,
emits exactly what the live state function emits past the switch, in either mode.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconstructor.audit.fold import ChangeFold
from reconstructor.contract.tables import RecordKind
from reconstructor.core.policy import IntegrityPolicy, OnViolation
from reconstructor.core.seed import NO_SEEDS, SessionSeed, SessionSeeds
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.step_spec import StepSpec, StepStart
from reconstructor.spark.stateful import SessionReconstructor
from reconstructor.testing.strategies import micro_batches, valid_session
from tests.support.groupstate import group_state
from tests.support.model import SCHEMA, Msg, to_frame

# What ``spark.stateful`` ignores in Spark's workers too: a resumed session's rows back after a batch
# that changed none (``core.table.rows_back``).
pytestmark = pytest.mark.filterwarnings("ignore:The behavior of DataFrame concatenation with empty:FutureWarning")

TOPIC, SESSION = "sensor-1", "s1"
TIMEOUT_MS, RETENTION_MS = 60_000, 600_000
FAR = 10**15  # a seed's expiry no test reaches


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype({"temperature": "float64", "pressure": "float64", "humidity": "float64",
                         "reading_count": "Int64", "calibrated_at": "datetime64[ns]"})


class Driver:
    """One group's state function, its state carried from call to call as Spark carries it."""

    def __init__(self, fn: SessionReconstructor):
        self.fn, self.value = fn, None

    def batch(self, msgs: list[Msg]) -> list[pd.DataFrame]:
        return self._call([typed(to_frame(msgs))] if msgs else [], timed_out=False)

    def timeout(self) -> list[pd.DataFrame]:
        return self._call([], timed_out=True)

    def _call(self, frames, timed_out: bool) -> list[pd.DataFrame]:
        gs = group_state(self.value, timed_out=timed_out)
        out = list(self.fn((TOPIC, SESSION), iter(frames), gs))
        self.value = None if gs._removed else (tuple(gs.get) if gs.exists else None)
        return out

    @property
    def status(self) -> str | None:
        return None if self.value is None else self.value[1]


def emitted(out: list[pd.DataFrame]) -> list[tuple]:
    """What a call emitted, record by record (NaN as None, so equal records compare equal)."""
    rows = []
    for frame in out:
        for rec in frame.astype(object).where(frame.notna(), None).to_dict("records"):
            info = rec.pop("info")
            rows.append(repr((tuple(sorted(rec.items())), json.loads(info) if info and info.startswith("{") else info)))
    return sorted(rows)  # a resumed session's rows back for current_rows come in no particular order


def tables_seed(live_out: list[pd.DataFrame]) -> SessionSeed:
    """The seed of what the tables hold after the live run's output: its last session record, and
    its changes folded."""
    frames = [f for f in live_out if len(f)]
    last = [f[f["record"] == RecordKind.SESSION.value].iloc[-1] for f in frames
            if (f["record"] == RecordKind.SESSION.value).any()][-1]
    fold = ChangeFold(SCHEMA.names)
    for f in frames:  # the change log, a batch at a time
        changes = f[f["record"] == RecordKind.CHANGE.value]
        if len(changes):
            fold.add(changes[["topic", "session", "row_id", "offset", "row_pos", "seq", "op", *SCHEMA.names]]
                     .astype({"row_pos": "Int64"}))
    info = json.loads(last["info"])
    row = {**info, "partition": int(last["partition"])}
    return SessionSeed.from_tables(row, fold.table(TOPIC, SESSION), expires_ms=FAR)


@st.composite
def switches(draw):
    """A session's records, where the live run stops (``cut``), where a replay starts re-reading
    them (``start``, after the last snapshot before the cut), whether the session timed out at the
    switch, what follows it, and the mode."""
    msgs = draw(valid_session(max_messages=12, restarts=True))
    cut = draw(st.integers(1, len(msgs)))
    snaps = [i for i in range(cut) if msgs[i].type == "snapshot"]
    start = draw(st.integers(snaps[-1] + 1, cut))
    tail = msgs[cut:]
    if draw(st.booleans()):  # the session sent again whole, later: DUPLICATE, or AFTER_END once it ended
        base = 100 + len(msgs)
        tail = tail + [Msg(m.seq, m.type, m.rows, offset=base + i) for i, m in enumerate(msgs)]
    quarantine = draw(st.booleans())
    return (msgs[:cut], draw(micro_batches(msgs[:cut])), start, draw(st.booleans()), tail,
            draw(micro_batches(tail)) if tail else [], draw(st.lists(st.booleans(), max_size=len(tail))), quarantine)


@given(switches())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_session_seeded_from_the_tables_is_judged_past_the_switch_as_without_one(case):
    prefix, live_batches, start, timed_out, _tail, tail_batches, timeouts, quarantine = case
    policy = IntegrityPolicy(OnViolation.QUARANTINE) if quarantine else IntegrityPolicy()

    def fn(seeds=None):
        return SessionReconstructor(StepSpec(SCHEMA, TIMEOUT_MS, state_retention_ms=RETENTION_MS, policy=policy),
                                    StepStart(session_seeds=seeds or NO_SEEDS, await_snapshot=True))

    live = Driver(fn())
    live_out = []
    for batch in live_batches:
        live_out += live.batch(batch)
    if timed_out and live.status == SessionStatus.OPEN.value:
        live_out += live.timeout()
    seed = tables_seed(live_out)
    assert seed.status.value == live.status

    replay = Driver(fn(SessionSeeds(tuple(SCHEMA.names), {(TOPIC, SESSION): seed})))
    if prefix[start:]:  # the records from the replay's start to the switch are the tables' already
        assert replay.batch(prefix[start:]) == []
        assert replay.status == live.status
    for i, batch in enumerate(tail_batches):
        out = live.batch(batch)
        assert emitted(replay.batch(batch)) == emitted(out)
        if any(f["record"].eq(RecordKind.VIOLATION.value).any() for f in out):
            return  # the query fails here
        if i < len(timeouts) and timeouts[i] and live.status == SessionStatus.OPEN.value:
            assert emitted(replay.timeout()) == emitted(live.timeout())
    if prefix[start:] or tail_batches:  # else the seed never met a record: no state yet
        assert replay.status == live.status


def test_seeds_round_trip_through_their_json_and_expire():
    row = {"status": "timed_out", "partition": 1, "first_seq": 0, "last_seq": 4, "last_offset": 9,
           "snapshot_seq": 0, "snapshot_offset": 5, "started_us": 1, "last_event_us": 2**62, "chain_head": "sha256:00"}
    table = {"b": (1.5, None, None, "x", 2**63 - 1, pd.Timestamp("2026-01-01T00:00:00.000001")),
             "a": (None,) * 6}
    seeds = SessionSeeds(tuple(SCHEMA.names), {("t", "s"): SessionSeed.from_tables(row, table, expires_ms=1000)})
    again = SessionSeeds.from_json(seeds.to_json())
    assert again == seeds
    state = again.get("t", "s", 999).state(SCHEMA, again.columns)
    assert state.status is SessionStatus.TIMED_OUT and list(state.table.index) == ["a", "b"]
    assert state.table.loc["b", "reading_count"] == 2**63 - 1
    assert state.table.loc["b", "calibrated_at"] == pd.Timestamp("2026-01-01T00:00:00.000001")
    assert again.get("t", "s", 1000) is None and len(again.live(1000)) == 0
    ended = SessionSeed.from_tables({**row, "status": "ended"}, table, expires_ms=1000)
    assert ended.rows == ()
