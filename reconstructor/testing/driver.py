"""``TestDriver``: the product's rules over records you hand it, in batches you cut, without Spark.

Kafka Streams has its ``TopologyTestDriver``; this is the reconstructor's.  Records go through the
parse (``reconstructor.core.record_parse``, the Spark parse's proven twin) and the state function
that ``run``'s Python engine calls (``reconstructor.spark.stateful.SessionReconstructor``), with
the same settings as ``run`` and a clock you move, and the driver keeps what the tables would
hold (``reconstructor.testing.driver_tables``) and each session's state.  No JVM starts: a case costs
milliseconds, so a property test can run thousands.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pandas as pd
import pyarrow as pa

from reconstructor import settings as config
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import RECORD_FIELDS, column_names
from reconstructor.core.frames import INPUT, VALUE, null_mask, nullable_longs
from reconstructor.core.record_parse import KafkaRecord, parse_record
from reconstructor.core.state import SessionState
from reconstructor.core.violations import ViolationRecord
from reconstructor.errors import EXIT_INTEGRITY
from reconstructor.settings import Settings
from reconstructor.testing.driver_tables import DriverTables
from reconstructor.testing.group_state import GroupState, StoredState

#: A record as the driver takes it: a ``KafkaRecord``, or a mapping with ``topic`` and ``value``
#: (a dict is written as JSON, text as UTF-8, bytes as they are) and optionally ``partition``
#: (0), ``offset`` (the partition's next), ``key`` (the value's session) and ``timestamp`` (the
#: clock's time; a datetime or epoch milliseconds).
RecordLike = KafkaRecord | Mapping[str, Any]


class ManualClock:
    """A clock that moves only when told: epoch milliseconds."""

    def __init__(self, start_ms: int | None = None):
        self.now_ms = int(time.time() * 1000) if start_ms is None else int(start_ms)

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += int(ms)


@dataclass(frozen=True)
class Verdict:
    """How ``run`` would end after the batches so far: exit 0, or exit 3 with the violation's line."""

    exit_code: int = 0
    violation: ViolationRecord | None = None

    @property
    def line(self) -> str | None:
        """The line ``run`` prints on stderr when it stops, else None."""
        return None if self.violation is None else f"reconstructor: {self.violation}"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class _Offsets:
    next: dict[tuple[str, int], int] = field(default_factory=dict)

    def place(self, topic: str, partition: int, offset: int | None) -> int:
        at = self.next.get((topic, partition), 0) if offset is None else int(offset)
        self.next[(topic, partition)] = max(self.next.get((topic, partition), 0), at + 1)
        return at


class TestDriver:
    """Pipes records through the parse and the stateful step, one micro-batch per ``pipe``.

    ``settings`` are ``run``'s, as a ``reconstructor.settings.Settings`` or as a config file's
    table has them (``{"on_violation": "quarantine", "session_timeout": "10 seconds"}``):
    ``on_violation``,
    ``on_drift``, ``await_snapshot``, ``session_timeout``, ``state_retention``, ``chain_key``,
    ``row_schema``; ``schema`` overrides the settings' row schema; ``clock`` gives the batches'
    processing time in epoch milliseconds (default: a ``ManualClock`` at the wall time of the
    driver's creation; move it with ``advance``).  A session silent past its timeout times out in
    the next batch whose time reaches it, as in a run (``pipe([])`` is a batch without records).

    Once a batch stops the run (exit 3), the batch is not applied, as in a run, and every later
    ``pipe`` returns the same verdict without reading its records.
    """

    __test__ = False  # a product class, not a test case for pytest to collect

    def __init__(self, schema: RowSchema | None = None, settings: Settings | Mapping[str, Any] | None = None, *,
                 clock: Callable[[], int] | None = None):
        from reconstructor.spark.stateful import SessionReconstructor  # imports no JVM

        self.settings = settings if isinstance(settings, Settings) else config.load(
            None, env={}, flags=dict(settings or {}))
        self.schema = schema if schema is not None else RowSchema.load(self.settings.row_schema)
        self.spec = self.settings.step_spec(self.schema)
        self.clock: Callable[[], int] = clock if clock is not None else ManualClock()
        self._step = SessionReconstructor(self.spec)
        self._store: dict[tuple[str, str | None], StoredState] = {}
        self._tables = DriverTables(self.schema)
        self._offsets = _Offsets()
        self._output = column_names(RECORD_FIELDS, self.schema)
        self.verdict = Verdict()
        self.batches = 0

    def advance(self, ms: int) -> None:
        """Move a ``ManualClock`` on by ``ms``."""
        if not isinstance(self.clock, ManualClock):
            raise TypeError("advance() moves the driver's own ManualClock; move your clock instead")
        self.clock.advance(ms)

    def pipe(self, records: Iterable[RecordLike] = ()) -> Verdict:
        """One micro-batch of ``records``; the verdict after it."""
        if not self.verdict.ok:
            return self.verdict
        now_ms = self.clock()
        parsed = [self._record(r, now_ms) for r in records]
        groups = self._groups(parsed)
        store = dict(self._store)
        out: list[dict[str, Any]] = []
        for key in sorted(groups, key=_order):
            state = GroupState(store.get(key), now_ms)
            out += self._call(key, groups[key], state)
            self._keep(store, key, state)
        for key in sorted(store, key=_order):
            held = store[key]
            if key in groups or held.timeout_at_ms is None or held.timeout_at_ms > now_ms:
                continue
            state = GroupState(held, now_ms, timed_out=True)
            out += self._call(key, None, state)
            self._keep(store, key, state)
        self.batches += 1
        stop = next((r for r in out if r["record"] == "violation"), None)
        if stop is not None:
            self.verdict = Verdict(EXIT_INTEGRITY, ViolationRecord.from_json(stop["info"]))
            return self.verdict
        self._store = store
        self._tables.write(out, dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC))
        return self.verdict

    @property
    def tables(self) -> dict[str, pa.Table]:
        """What ``row_changes``, ``current_rows``, ``sessions`` and ``violations`` would hold."""
        return self._tables.arrow()

    def state(self, topic: str, session: str) -> SessionState | None:
        """The session's state as the state store holds it, or None (never seen, or removed)."""
        from reconstructor.spark.stateful import state_from_tuple

        held = self._store.get((topic, session))
        return None if held is None else state_from_tuple(held.value, self.schema)

    def _record(self, r: RecordLike, now_ms: int) -> KafkaRecord:
        if isinstance(r, KafkaRecord):
            self._offsets.place(r.topic, r.partition, r.offset)
            return r
        value = r.get("value")
        text = json.dumps(value) if isinstance(value, dict) else value
        payload = text.encode() if isinstance(text, str) else text
        key = r.get("key", value.get("session") if isinstance(value, dict) else None)
        stamp = r.get("timestamp", now_ms)
        if not isinstance(stamp, dt.datetime):
            stamp = dt.datetime.fromtimestamp(int(stamp) / 1000, dt.UTC)
        partition = int(r.get("partition", 0))
        return KafkaRecord(topic=r["topic"], partition=partition,
                           offset=self._offsets.place(r["topic"], partition, r.get("offset")),
                           timestamp=stamp, key=key.encode() if isinstance(key, str) else key, value=payload)

    def _groups(self, records: list[KafkaRecord]) -> dict[tuple[str, str | None], pd.DataFrame]:
        """The parsed rows by ``(topic, session)``, each group a frame as Spark's worker hands the
        state function (``reconstructor.spark.stateful.reconstruct_inputs``)."""
        quarantine = self.spec.policy.quarantine
        rows = [row for rec in records for row in parse_record(rec, self.schema, keep_value=quarantine)]
        if not rows:
            return {}
        frame = _input_frame(rows, self.schema, quarantine)
        keys = [(row["topic"], row["group_session"]) for row in rows]
        by_key: dict[tuple[str, str | None], list[int]] = {}
        for i, key in enumerate(keys):
            by_key.setdefault(key, []).append(i)
        return {key: frame.iloc[at].reset_index(drop=True) for key, at in by_key.items()}

    def _call(self, key: tuple[str, str | None], frame: pd.DataFrame | None, state: GroupState) -> list[dict[str, Any]]:
        frames = iter(() if frame is None else (frame,))
        out: list[dict[str, Any]] = []
        # The state function takes Spark's GroupState; this one has the part of it that it uses.
        for piece in self._step(key, frames, cast(Any, state)):
            out += cast(list[dict[str, Any]], piece.reindex(columns=self._output).to_dict("records"))
        return out

    @staticmethod
    def _keep(store: dict[tuple[str, str | None], StoredState], key: tuple[str, str | None],
              state: GroupState) -> None:
        kept = state.stored()
        if kept is None:
            store.pop(key, None)
        else:
            store[key] = kept


def _order(key: tuple[str, str | None]) -> tuple[str, bool, str]:
    return key[0], key[1] is None, key[1] or ""


def _input_frame(rows: list[dict[str, Any]], schema: RowSchema, quarantine: bool) -> pd.DataFrame:
    """The state function's input columns, typed as Arrow hands them to pandas in a Spark worker:
    each nullable long as its value with nulls as 0 beside a null mask, times as naive UTC."""
    longs = nullable_longs(schema)
    types: dict[str, pa.DataType] = {
        "partition": pa.int32(), "offset": pa.int64(), "kafka_ts": pa.timestamp("us"), "key": pa.string(),
        "session": pa.string(), "seq": pa.int64(), "type": pa.string(), "event_ts": pa.timestamp("us"),
        "row_pos": pa.int32(), "row_id": pa.string(), "op": pa.string(), "error": pa.string(),
        **{c.name: pa.timestamp("us") if c.type == "timestamp" else c.arrow_type for c in schema.columns},
        VALUE: pa.string()}
    names = [*INPUT, *schema.names, *([VALUE] if quarantine else [])]
    data: dict[str, Any] = {n: [row.get(n) for row in rows] for n in names}
    for n in longs:
        data[null_mask(n)] = [v is None for v in data[n]]
        data[n] = [0 if v is None else v for v in data[n]]
    fields = [pa.field(n, types[n]) for n in names] + [pa.field(null_mask(n), pa.bool_()) for n in longs]
    return pa.Table.from_pydict(data, pa.schema(fields)).to_pandas(coerce_temporal_nanoseconds=True)
