"""A reproducible demo sensor fleet: sessions, snapshots, updates, ends, and injected faults.

``plan_fleet`` yields every message in the order a fleet would send it (sessions interleaved, each
session in ``seq`` order), deterministic for a seed, so tests and benchmarks can rebuild the
expected tables with ``expected_tables`` (a plain dict replay) and compare.
"""

from __future__ import annotations

import datetime as dt
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from workbench.producer import encode

FAULTS = ("gap", "duplicate", "malformed", "no-snapshot", "unknown-row", "after-end", "gap-resync", "drift")
#: How many of the session's messages after the fault the resync snapshot of ``gap-resync`` and
#: ``drift`` comes: the ones between are what quarantine mode sets aside.
RESYNC_AFTER = 3


@dataclass(frozen=True)
class FleetSpec:
    topic_prefix: str = "sensor-"
    sensors: int = 3
    sessions_per_sensor: int = 2
    rows: int = 200
    updates: int = 100
    rows_per_update: int = 3
    delete_ratio: float = 0.05
    resync_every: int = 0  # a fresh snapshot every N updates (0: never)
    end_sessions: bool = True
    #: With ``end_sessions``: the last this many sessions of each sensor stay open (live tables).
    open_sessions: int = 0
    seed: int = 7
    start: dt.datetime = dt.datetime(2026, 11, 21, 8, 0, tzinfo=dt.UTC)
    step: dt.timedelta = dt.timedelta(seconds=1)

    def topics(self) -> list[str]:
        return [f"{self.topic_prefix}{i}" for i in range(self.sensors)]


@dataclass
class Planned:
    topic: str
    session: str
    message: dict
    raw: bytes | None = None  # set for a malformed value
    key: str | None = None


@dataclass
class _Session:
    topic: str
    session: str
    rng: random.Random
    spec: FleetSpec
    table: dict = field(default_factory=dict)
    seq: int = 0
    next_row: int = 0
    sent_updates: int = 0

    def values(self) -> dict:
        r = self.rng
        values = {
            "temperature": round(r.uniform(-20, 45), 2),
            "pressure": round(r.uniform(950, 1050), 1),
            "humidity": round(r.uniform(0, 100), 1),
            "status": r.choice(["ok", "ok", "ok", "warn", "fail"]),
            "reading_count": r.randrange(0, 10**6),
            "calibrated_at": (self.spec.start - dt.timedelta(days=r.randrange(0, 400)))
            .isoformat().replace("+00:00", "Z"),
        }
        if r.random() < 0.1:
            del values[r.choice(list(values))]  # a missing column is null
        return values

    def ts(self) -> str:
        return (self.spec.start + self.seq * self.spec.step).isoformat().replace("+00:00", "Z")

    def msg(self, type_: str, rows: list[dict] | None) -> dict:
        m = {"session": self.session, "seq": self.seq, "type": type_, "ts": self.ts()}
        if rows is not None:
            m["rows"] = rows
        self.seq += 1
        return m

    def snapshot(self) -> dict:
        if not self.table:
            for _ in range(self.spec.rows):
                self.table[f"row-{self.next_row:06d}"] = self.values()
                self.next_row += 1
        # A periodic snapshot carries the table as the updates left it: a healthy sensor's snapshot
        # never differs from the rebuilt table (``inject(..., "drift")`` makes one that does).
        return self.msg("snapshot", [{"id": k, "values": v} for k, v in self.table.items()])

    def update(self) -> dict:
        rows = []
        for _ in range(self.spec.rows_per_update):
            if self.table and self.rng.random() < self.spec.delete_ratio:
                rid = self.rng.choice(sorted(self.table))
                del self.table[rid]
                rows.append({"id": rid, "op": "delete"})
            elif self.table and self.rng.random() < 0.8:
                rid = self.rng.choice(sorted(self.table)) if len(self.table) < 64 else \
                    f"row-{self.rng.randrange(self.next_row):06d}"
                self.table[rid] = self.values()
                rows.append({"id": rid, "values": self.table[rid]})
            else:
                rid = f"row-{self.next_row:06d}"
                self.next_row += 1
                self.table[rid] = self.values()
                rows.append({"id": rid, "op": "upsert", "values": self.table[rid]})
        self.sent_updates += 1
        return self.msg("update", rows)


def plan_fleet(spec: FleetSpec) -> Iterator[Planned]:
    """Every message of the fleet, sessions interleaved round-robin, each in seq order."""
    rng = random.Random(spec.seed)
    sessions = [
        _Session(topic, f"{topic}-session-{j}", random.Random(rng.random()), spec)
        for topic in spec.topics() for j in range(spec.sessions_per_sensor)
    ]
    for s in sessions:
        yield Planned(s.topic, s.session, s.snapshot())
    for i in range(spec.updates):
        for s in sessions:
            if spec.resync_every and i and i % spec.resync_every == 0:
                yield Planned(s.topic, s.session, s.snapshot())
            else:
                yield Planned(s.topic, s.session, s.update())
    if spec.end_sessions:
        ending = spec.sessions_per_sensor - spec.open_sessions
        for n, s in enumerate(sessions):
            if n % spec.sessions_per_sensor < ending:
                yield Planned(s.topic, s.session, s.msg("end", None))


def inject(messages: list[Planned], fault: str, rng: random.Random | None = None,
           session: str | None = None) -> tuple[list[Planned], Planned]:
    """Return the messages with one fault injected in one session (``session``, else one picked),
    and the record that breaks it.

    ``gap-resync``: an update lost, and a few messages later a snapshot of the sensor's table (what
    quarantine mode resyncs from).  ``drift``: an update that reaches Kafka without its rows (every
    seq arrives), and a few messages later a snapshot of the sensor's table: only the snapshot audit
    sees it.  Both snapshots replace an update of the same seq, so later seqs are untouched.
    """
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
    rng = rng or random.Random(1)
    out = list(messages)
    updates = [i for i, p in enumerate(out) if p.message["type"] == "update"
               and (session is None or p.session == session)]
    if not updates:
        raise ValueError("the fleet has no updates to inject a fault into")
    i = updates[len(updates) // 2 + rng.randrange(max(1, len(updates) // 4))]
    victim = out[i]
    if fault in ("gap-resync", "drift"):
        later = [j for j, p in enumerate(out) if j > i and p.session == victim.session
                 and p.message["type"] == "update"]
        if len(later) < RESYNC_AFTER:
            raise ValueError(f"session {victim.session} has too few updates after the fault for a resync")
        at = later[RESYNC_AFTER - 1]
        out[at] = sensor_snapshot(messages, at)
        if fault == "drift":
            out[i] = Planned(victim.topic, victim.session, {**victim.message, "rows": []})
            return out, out[at]
        del out[i]
        return out, next(p for p in out[i:] if p.session == victim.session)
    if fault == "gap":
        del out[i]
        later = next(p for p in out[i:] if p.session == victim.session)
        return out, later
    if fault == "duplicate":
        dup = Planned(victim.topic, victim.session, dict(victim.message))
        out.insert(i + 1, dup)
        return out, dup
    if fault == "malformed":
        bad = Planned(victim.topic, victim.session, victim.message,
                      raw=b'{"session": "' + victim.session.encode() + b'", "seq": "oops"')
        out[i] = bad
        return out, bad
    if fault == "no-snapshot":
        first = next(j for j, p in enumerate(out) if p.session == victim.session)
        out[first] = Planned(out[first].topic, out[first].session,
                             {**out[first].message, "type": "update", "rows": []})
        return out, out[first]
    if fault == "unknown-row":
        msg = {**victim.message, "rows": [{"id": "no-such-row", "op": "delete"}]}
        out[i] = Planned(victim.topic, victim.session, msg)
        return out, out[i]
    # after-end: a message after the session's end
    end_at = max(j for j, p in enumerate(out) if p.session == victim.session)
    last = out[end_at].message
    extra = Planned(victim.topic, victim.session,
                    {"session": victim.session, "seq": last["seq"] + 1, "type": "update",
                     "ts": last["ts"], "rows": []})
    out.insert(end_at + 1, extra)
    return out, extra


def sensor_snapshot(messages: list[Planned], at: int) -> Planned:
    """A snapshot, in place of the update at ``at``, of the table the sensor holds once that update
    is made: its session's messages replayed up to it."""
    p = messages[at]
    table = expected_tables([q for q in messages[:at + 1] if q.session == p.session and q.topic == p.topic])
    rows = [{"id": rid, "values": values} for rid, values in table[(p.topic, p.session)].items()]
    return Planned(p.topic, p.session, {**p.message, "type": "snapshot", "rows": rows})


def expected_tables(messages) -> dict[tuple[str, str], dict[str, dict]]:
    """Dict replay of the messages: {(topic, session): {row_id: values}} for open sessions."""
    tables: dict[tuple[str, str], dict] = {}
    ended = set()
    for p in messages:
        key = (p.topic, p.session)
        m = p.message
        if m["type"] == "snapshot":
            tables[key] = {r["id"]: dict(r.get("values") or {}) for r in m.get("rows", [])}
        elif m["type"] == "update":
            for r in m.get("rows", []):
                if r.get("op", "upsert") == "delete":
                    tables[key].pop(r["id"], None)
                else:
                    tables[key][r["id"]] = dict(r.get("values") or {})
        else:
            ended.add(key)
    return {k: v for k, v in tables.items() if k not in ended}


def publish(producer, messages, partitions: dict[str, int] | None = None,
            event_time_as_kafka_time: bool = False) -> list[tuple[str, int]]:
    """Send planned messages with a SensorProducer; returns the (topic, partition) of each session.

    ``event_time_as_kafka_time`` stamps each record with its message's ``ts`` (to lay a fleet's
    history over past hours, as compaction tests need)."""
    placed = {}
    for p in messages:
        partition = None
        if partitions:
            n = partitions.get(p.topic, 1)
            partition = placed.setdefault(p.session, hash_partition(p.session, n))
        value = p.raw if p.raw is not None else encode(p.message)
        ts_ms = None
        if event_time_as_kafka_time:
            ts = dt.datetime.fromisoformat(p.message["ts"].replace("Z", "+00:00"))
            ts_ms = int(ts.timestamp() * 1000)
        producer.send(p.topic, p.key or p.session, value, partition, ts_ms)
    producer.flush()
    return sorted({(p.topic, placed.get(p.session, -1)) for p in messages})


def hash_partition(session: str, partitions: int) -> int:
    """A stable session-to-partition map (the same on every run, unlike Python's hash)."""
    return zlib.crc32(session.encode()) % partitions
