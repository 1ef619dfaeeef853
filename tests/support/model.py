"""A deliberately simple reference model of the contract, and builders of the core's input frames.

The model replays one message at a time into a dict; it knows nothing of pandas, vectorisation or
batches.  The core must agree with it on every table and on the first violation.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import pandas as pd

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.frames import INPUT
from reconstructor.testing.messages import BASE_TS, Message

SCHEMA = RowSchema.load("demo_sensor")


#: The kit's message (``reconstructor.testing.messages``): the strategies draw it, the model takes it.
Msg = Message


def to_frame(msgs: list[Msg], schema: RowSchema = SCHEMA) -> pd.DataFrame:
    """The flat input frame: one row per message row, one null-row_pos row for a rowless message."""
    records = []
    for m in msgs:
        base = {
            "partition": m.partition, "offset": m.offset,
            "kafka_ts": BASE_TS + dt.timedelta(milliseconds=m.offset),
            "key": m.session if m.key is None else m.key, "session": m.session, "seq": m.seq,
            "type": m.type, "event_ts": m.event_ts, "error": m.error,
        }
        if not m.rows:
            records.append({**base, "row_pos": None, "row_id": None, "op": None})
        for pos, r in enumerate(m.rows):
            values = r.get("values") or {}
            records.append({**base, "row_pos": pos, "row_id": r["id"], "op": r.get("op", "upsert"),
                            **{c: values.get(c) for c in schema.names}})
    frame = pd.DataFrame.from_records(records, columns=list(INPUT) + schema.names)
    return frame


def split_rows(frame: pd.DataFrame, parts: int) -> list[pd.DataFrame]:
    """``frame`` cut into ``parts`` runs of consecutive rows (copies), as ``numpy.array_split`` cuts
    an array: the first ``len(frame) % parts`` runs one row longer, empty runs when rows run out."""
    size, longer = divmod(len(frame), parts)
    ends = np.cumsum([0] + [size + 1] * longer + [size] * (parts - longer))
    return [frame.iloc[start:end].copy() for start, end in pairwise(ends)]


class ModelViolation(Exception):
    def __init__(self, kind: str, seq, offset):
        super().__init__(kind)
        self.kind, self.seq, self.offset = kind, seq, offset


@dataclass
class Model:
    """Dict replay of one session."""

    table: dict | None = None
    last_seq: int | None = None
    partition: int | None = None
    ended: bool = False
    changes: list[tuple] = field(default_factory=list)  # (seq, row_id, op, values)

    def apply_batch(self, batch: list[Msg]) -> None:
        """One record at a time in Kafka order: the session's partition first (a new session's is
        the one holding its lowest seq), by offset."""
        ref = self.partition if self.partition is not None else min(
            (m.seq is None, m.seq or 0, m.partition) for m in batch)[2]
        for m in sorted(batch, key=lambda m: (m.partition != ref, m.partition, m.offset)):
            self.apply(m)

    def apply(self, m: Msg) -> None:
        if m.error is not None or (m.key is not None and m.key != m.session):
            raise ModelViolation("MALFORMED", m.seq, m.offset)
        if self.ended:
            raise ModelViolation("AFTER_END", m.seq, m.offset)
        if self.table is None:
            if m.type != "snapshot":
                raise ModelViolation("NO_SNAPSHOT", m.seq, m.offset)
            self.partition = m.partition
        else:
            if m.partition != self.partition:
                raise ModelViolation("PARTITION_MOVED", m.seq, m.offset)
            if m.seq <= self.last_seq:
                raise ModelViolation("DUPLICATE", m.seq, m.offset)
            if m.seq > self.last_seq + 1:
                raise ModelViolation("GAP", m.seq, m.offset)
        if m.type == "snapshot":
            new = {}
            for r in m.rows:
                if r.get("op", "upsert") == "delete" or r["id"] in new:
                    raise ModelViolation("MALFORMED", m.seq, m.offset)
                new[r["id"]] = full(r.get("values"))
            for rid in sorted(self.table or {}):
                if rid not in new:
                    self.changes.append((m.seq, rid, "delete", full(None)))
            for r in m.rows:
                self.changes.append((m.seq, r["id"], "upsert", new[r["id"]]))
            self.table = new
        elif m.type == "update":
            for r in m.rows:
                if r.get("op", "upsert") == "delete":
                    if r["id"] not in self.table:
                        raise ModelViolation("UNKNOWN_ROW", m.seq, m.offset)
                    del self.table[r["id"]]
                    self.changes.append((m.seq, r["id"], "delete", full(None)))
                else:
                    self.table[r["id"]] = full(r.get("values"))
                    self.changes.append((m.seq, r["id"], "upsert", self.table[r["id"]]))
        else:
            self.ended = True
        self.last_seq = m.seq


def full(values: dict | None) -> dict:
    values = values or {}
    return {c: values.get(c) for c in SCHEMA.names}


def table_as_dict(table: pd.DataFrame) -> dict:
    """A core session table as {row_id: {column: python value or None}}."""
    out = {}
    for rid, row in table.iterrows():
        out[rid] = {c: _py(row[c]) for c in SCHEMA.names}
    return out


def _py(value):
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime().replace(tzinfo=None)
    if hasattr(value, "item"):
        return value.item()
    return value


def normalise_values(values: dict) -> dict:
    out = {}
    for c in SCHEMA.names:
        v = values.get(c)
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        out[c] = v
    return out


@dataclass
class QuarantineModel:
    """Dict replay of one session in quarantine mode, one record at a time in Kafka order.

    A violation is recorded and the session quarantined (an ended session stays ended: each later
    record is AFTER_END); while quarantined, records are SKIPPED until a well-formed snapshot on
    its partition with a seq past the last applied one, which resyncs it.  A snapshot replacing a
    table built from a snapshot is compared with it (SNAPSHOT_DRIFT when they differ)."""

    strict: Model = field(default_factory=Model)
    quarantined: bool = False
    recorded: list[tuple[str, int]] = field(default_factory=list)  # (kind, offset)

    @property
    def status(self) -> str:
        if self.quarantined:
            return "quarantined"
        return "ended" if self.strict.ended else "open"

    def apply_batch(self, batch: list[Msg]) -> None:
        ref = self.strict.partition if self.strict.partition is not None else min(m.partition for m in batch)
        for m in sorted(batch, key=lambda m: (m.partition != ref, m.partition, m.offset)):
            self.apply(m)

    def apply(self, m: Msg) -> None:
        s = self.strict
        if self.quarantined:
            if not self._resyncs(m):
                self.recorded.append(("SKIPPED", m.offset))
                return
            self.quarantined = False
            s.last_seq = m.seq - 1
        if s.ended:
            self.recorded.append(("AFTER_END", m.offset))
            return
        before = copy.deepcopy(s)
        try:
            s.apply(m)
        except ModelViolation as v:
            before.changes = s.changes[:len(before.changes)]
            self.strict = before
            self.recorded.append((v.kind, m.offset))
            if self.strict.partition is None:
                self.strict.partition = m.partition
            self.quarantined = True
            if v.kind == "GAP" and self._resyncs(m):  # a snapshot after a gap: the whole table
                self.apply(m)
            return
        if m.type == "snapshot" and before.table is not None and before.table != s.table:
            self.recorded.append(("SNAPSHOT_DRIFT", m.offset))

    def _resyncs(self, m: Msg) -> bool:
        ids = [r["id"] for r in m.rows]
        return (m.type == "snapshot" and m.error is None and (m.key is None or m.key == m.session)
                and m.partition == self.strict.partition and len(set(ids)) == len(ids)
                and (self.strict.last_seq is None or m.seq > self.strict.last_seq)
                and all(r.get("op", "upsert") != "delete" for r in m.rows))
