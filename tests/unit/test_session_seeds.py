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
from reconstructor.testing import ManualClock, Message, TestDriver
from reconstructor.testing.strategies import fleet, micro_batches, valid_session
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


#: ``run``'s settings for the live run and the replay: a timeout the live run's clock may pass.
LIVE = {"session_timeout": "10 seconds", "state_retention": "10 minutes"}
#: Columns a batch stamps with its own time.
_STAMPS = ("updated_at", "detected_at")


def _us(value) -> int | None:
    return None if value is None else pd.Timestamp(value).value // 1000


def replay_seeds(driver: TestDriver, starts: dict[int, int], retention_ms: int) -> SessionSeeds:
    """The seeds ``replay --from-last-snapshot`` reads from the driver's tables
    (``spark.session_seeds``): the sessions whose snapshot lies before their partition's start (or
    who have none), within the retention of their last write; their tables folded from
    ``row_changes`` up to their last applied offset."""
    tables = driver.tables
    held = [r for r in tables["sessions"].to_pylist()
            if r["snapshot_offset"] is None or r["snapshot_offset"] < starts[r["partition"]]]
    fold = ChangeFold(SCHEMA.names)
    fold.add(tables["row_changes"])
    seeds = {}
    for r in held:
        expires_ms = _us(r["updated_at"]) // 1000 + retention_ms
        if expires_ms > driver.clock():
            row = {**r, "started_us": _us(r["started_ts"]), "last_event_us": _us(r["last_event_ts"])}
            seeds[(r["topic"], r["session"])] = SessionSeed.from_tables(row, fold.table(r["topic"], r["session"]),
                                                                        expires_ms)
    return SessionSeeds(tuple(SCHEMA.names), seeds)


def tables_of(driver: TestDriver) -> dict:
    """Each table's rows in a fixed order (the appends are in the order of their batches' groups)."""
    def order(row: dict) -> tuple:
        return tuple((v is None, str(v)) for v in row.values())
    return {name: sorted(table.drop_columns([c for c in _STAMPS if c in table.column_names]).to_pylist(), key=order)
            for name, table in driver.tables.items()}


@st.composite
def replays_from_the_last_snapshot(draw):
    """A fleet's live run up to a switch (its silent sessions maybe timed out), then its records
    before a drawn offset per partition gone from Kafka, and the replay of what Kafka still holds
    from each partition's planned start: the live run's records and what followed the switch, and
    maybe one session sent again whole at its partition's end (DUPLICATE, or AFTER_END once it
    ended)."""
    msgs = draw(fleet(max_sessions=3, partitions=2, max_messages=8))
    switch = draw(st.integers(1, len(msgs)))
    live = msgs[:switch]
    kept_from = {p: draw(st.integers(0, sum(m.partition == p for m in live))) for p in (0, 1)}
    again: list[Message] = []
    if draw(st.booleans()):
        resent = draw(st.sampled_from(sorted({m.session for m in msgs})))
        ends = {p: sum(m.partition == p for m in msgs) for p in (0, 1)}
        again = [Message(**{**m.__dict__, "offset": ends[m.partition] + i})
                 for i, m in enumerate(m for m in msgs if m.session == resent)]
    settings = {**LIVE, **({"on_violation": "quarantine"} if draw(st.booleans()) else {})}
    return live, kept_from, draw(st.booleans()), msgs + again, bool(again), settings


def replayed(batches: list[list[Message]], seeds: SessionSeeds, settings: dict, now_ms: int) -> TestDriver:
    driver = TestDriver(settings=settings, clock=ManualClock(now_ms), seeds=seeds)
    for batch in batches:
        if not driver.pipe(m.record() for m in batch).ok:
            break
    return driver


@given(replays_from_the_last_snapshot(), st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_seeded_replay_gives_the_verdict_and_the_tables_of_one_batch_whatever_its_cuts(case, data):
    live_msgs, kept_from, time_out, stream, resent, run_settings = case
    live = TestDriver(settings=run_settings, clock=ManualClock(1_800_000_000_000))
    assert live.pipe(m.record() for m in live_msgs).ok
    if time_out:
        live.advance(10_000)
        live.pipe([])
    # As ``replay_plan.plan_from_last_snapshot``: each partition starts at the smallest snapshot
    # offset of its open sessions that Kafka still holds, else at the earliest offset it holds.
    sessions = live.tables["sessions"].to_pylist()
    starts = {p: min([r["snapshot_offset"] for r in sessions if r["partition"] == p and r["status"] == "open"
                      and r["snapshot_offset"] >= kept_from[p]], default=kept_from[p]) for p in (0, 1)}
    seeds = replay_seeds(live, starts, RETENTION_MS)
    records = [m for m in stream if m.offset >= starts[m.partition]]
    now_ms = live.clock()

    whole = replayed([records], seeds, run_settings, now_ms)
    cut = replayed(data.draw(micro_batches(records)), seeds, run_settings, now_ms)
    assert cut.verdict == whole.verdict
    if not resent:
        assert whole.verdict.ok, "a replay of a valid stream is exact"
    if not whole.verdict.ok:
        return
    for replay in (whole, cut):  # past the timeout: each session's timeout is as the cuts left it
        replay.advance(10_000)
        replay.pipe([])
    assert tables_of(cut) == tables_of(whole)
    assert states_of(cut, stream) == states_of(whole, stream)


def states_of(driver: TestDriver, stream: list[Message]) -> dict:
    def kept(state):
        return None if state is None else (state.status, state.last_seq, state.last_offset, state.row_count)
    return {m.session: kept(driver.state(m.topic, m.session)) for m in stream}


def test_a_timed_out_session_kept_as_its_seed_keeps_its_seed_s_timeout_through_later_batches():
    """Its held records over two batches: the second applies nothing, and the session stays until
    its seed expires, as after one batch (a timeout would remove it from the state)."""
    msgs = [Message(seq=0, type="snapshot", rows=[{"id": "a", "values": {}}], offset=0),
            *(Message(seq=i, type="update", offset=i) for i in (1, 2, 3))]
    live = TestDriver(settings=LIVE, clock=ManualClock(1_800_000_000_000))
    assert live.pipe(m.record() for m in msgs).ok
    live.advance(10_000)
    live.pipe([])
    seeds = replay_seeds(live, {0: 1, 1: 0}, RETENTION_MS)  # the snapshot gone from Kafka
    held = msgs[1:]
    whole = replayed([held], seeds, LIVE, live.clock())
    cut = replayed([held[:1], held[1:]], seeds, LIVE, live.clock())
    for replay in (whole, cut):
        replay.advance(10_000)
        assert replay.pipe([]).ok
    assert states_of(whole, msgs) == states_of(cut, msgs) == {"s1": (SessionStatus.TIMED_OUT, 3, 3, 1)}
