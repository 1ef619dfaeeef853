"""A session started from what the output's tables hold: a replay's seed.

``replay --from-last-snapshot`` starts each partition at its open sessions' smallest snapshot
offset.  A session whose snapshot lies before that (a timed-out, ended or quarantined one, or an
open one whose snapshot is gone from Kafka) is not rebuilt from Kafka: without a seed its next
record would be judged as a new session's (a false ``NO_SNAPSHOT`` for a resumed session, a re-sent
ended session accepted).  Its seed is its ``sessions`` row (status, seqs, offsets, times, chain
head) and its table folded from ``row_changes``, so that its next record is judged exactly as the
live writer would have judged it.

A seed starts a session that has no state, once.  Its records up to the seed's last offset on its
partition are the tables' already and are not applied again, in whichever micro-batch they come:
the first may hold only some of them, and the next ones find the seed as the session's state.  It
is kept, with the replay's checkpoint, until the session's state would have been removed
(``expires_ms``: the row's last write plus ``--state-retention``), so a ``run`` on that checkpoint
starts a session the replay never read from it too.  An ended session's seed has no rows: its
table is never read again.

The seeds travel as one JSON document (``to_json``), which the checkpoint keeps and the JVM engine
reads: row values in ``columns`` order, a time as epoch microseconds.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.state import SessionState

__all__ = ["SessionSeed", "SessionSeeds", "records_after"]

#: The version of the seeds' JSON document.
SEEDS_VERSION = 1

_SCALARS = ("partition", "first_seq", "last_seq", "last_offset", "snapshot_seq", "snapshot_offset",
            "started_us", "last_event_us")


@dataclass(frozen=True)
class SessionSeed:
    """One session as the tables hold it (``sessions`` row and folded table)."""

    partition: int
    status: SessionStatus
    first_seq: int | None
    last_seq: int | None
    last_offset: int | None
    snapshot_seq: int | None
    snapshot_offset: int | None
    started_us: int | None
    last_event_us: int | None
    chain_head: str | None
    #: Processing time (epoch ms) from which the seed no longer applies: its state would be gone.
    expires_ms: int
    #: ``(row_id, values)`` pairs, values in the seeds' ``columns`` order (times as epoch us).
    rows: tuple[Any, ...] = field(default=(), repr=False)

    def state(self, schema: RowSchema, columns: tuple[str, ...]) -> SessionState:
        """The session's state as the live writer held it after its last applied record."""
        at = {name: i for i, name in enumerate(columns)}
        target = schema.arrow_schema()
        arrays = [pa.array([rid for rid, _ in self.rows], pa.string())]
        for f in list(target)[1:]:
            i = at.get(f.name)
            values = [None if i is None else vals[i] for _, vals in self.rows]
            if pa.types.is_timestamp(f.type):
                arrays.append(pa.array(values, pa.int64()).cast(f.type))
            else:
                arrays.append(pa.array(values, f.type))
        table = pa.Table.from_arrays(arrays, schema=target)
        return SessionState(partition=self.partition, status=self.status, first_seq=self.first_seq,
                            last_seq=self.last_seq, last_offset=self.last_offset, snapshot_seq=self.snapshot_seq,
                            snapshot_offset=self.snapshot_offset, started_ts=_ts(self.started_us),
                            last_event_ts=_ts(self.last_event_us), stored=table)

    @classmethod
    def from_tables(cls, row: Mapping[str, Any], table: Mapping[str, tuple[Any, ...]], expires_ms: int) -> SessionSeed:
        """The seed of a ``sessions`` row (its scalars, times as ``started_us`` and
        ``last_event_us``, and ``chain_head``) and its table folded from ``row_changes`` (row id ->
        values; a time as epoch us or a datetime).  An ended session's rows are left out."""
        status = SessionStatus(row["status"])
        rows = () if status == SessionStatus.ENDED else tuple(
            (rid, tuple(_plain(v) for v in values)) for rid, values in sorted(table.items()))
        return cls(int(row["partition"]), status, **{k: _int(row[k]) for k in _SCALARS[1:]},
                   chain_head=row.get("chain_head"), expires_ms=int(expires_ms), rows=rows)

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in _SCALARS}, "status": self.status.value,
                "chain_head": self.chain_head, "expires_ms": self.expires_ms,
                "rows": [[rid, *vals] for rid, vals in self.rows]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionSeed:
        return cls(**{k: d[k] for k in _SCALARS}, status=SessionStatus(d["status"]), chain_head=d["chain_head"],
                   expires_ms=int(d["expires_ms"]), rows=tuple((r[0], tuple(r[1:])) for r in d["rows"]))


@dataclass(frozen=True)
class SessionSeeds:
    """A replay's seeds by ``(topic, session)``; their rows' values in ``columns`` order."""

    columns: tuple[str, ...]
    by_session: Mapping[tuple[str, str], SessionSeed]

    def __len__(self) -> int:
        return len(self.by_session)

    def get(self, topic: str, session: str | None, now_ms: int) -> SessionSeed | None:
        """The session's seed while it applies at processing time ``now_ms``, else None."""
        seed = self.of(topic, session)
        return seed if seed is not None and now_ms < seed.expires_ms else None

    def of(self, topic: str, session: str | None) -> SessionSeed | None:
        """The session's seed, expired or not: the records it holds are the tables' at any time."""
        return self.by_session.get((topic, session)) if session is not None else None

    def live(self, now_ms: int) -> SessionSeeds:
        """The seeds that still apply at ``now_ms`` (a run leaves the expired ones behind)."""
        return SessionSeeds(self.columns, {k: s for k, s in self.by_session.items() if now_ms < s.expires_ms})

    def to_json(self) -> str:
        return json.dumps({"version": SEEDS_VERSION, "columns": list(self.columns),
                           "seeds": [[t, s, seed.to_dict()] for (t, s), seed in sorted(self.by_session.items())]},
                          allow_nan=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SessionSeeds:
        doc = json.loads(text)
        if doc.get("version") != SEEDS_VERSION:
            raise ValueError(f"session seeds of version {doc.get('version')!r}; this reconstructor reads "
                             f"version {SEEDS_VERSION}")
        return cls(tuple(doc["columns"]), {(t, s): SessionSeed.from_dict(d) for t, s, d in doc["seeds"]})


NO_SEEDS = SessionSeeds((), {})


def records_after(frames: Iterator[pd.DataFrame], seed: SessionSeed) -> Iterator[pd.DataFrame]:
    """A seeded session's records without those the tables hold already: on its partition, at or
    before its last applied offset."""
    for frame in frames:
        if seed.last_offset is None or frame.empty:
            yield frame
            continue
        held = ((frame["partition"].to_numpy() == seed.partition)
                & (frame["offset"].to_numpy(dtype=np.int64) <= seed.last_offset))
        # ``take`` rather than a mask: a masked frame is a view to pandas, which warns when the
        # core then sets a column of it.
        yield frame.take(np.flatnonzero(~held)) if held.any() else frame


def _int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _plain(value: Any) -> Any:
    """A row value as the seeds' JSON holds it: a time as epoch microseconds (UTC), a NaN-free
    double, an exact int."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, (dt.datetime, np.datetime64)):
        ts = pd.Timestamp(value)
        return (ts.tz_convert("UTC").tz_localize(None) if ts.tz else ts).value // 1000
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    return value


def _ts(us: int | None) -> pd.Timestamp | None:
    return None if us is None else pd.Timestamp(int(us), unit="us")
