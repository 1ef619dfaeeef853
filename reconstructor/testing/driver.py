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
from typing import Any

import pyarrow as pa

from reconstructor import settings as config
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import RecordKind
from reconstructor.core.record_parse import KafkaRecord
from reconstructor.core.seed import SessionSeeds
from reconstructor.core.state import SessionState
from reconstructor.core.step_spec import StepStart
from reconstructor.core.timestamps import from_epoch_millis
from reconstructor.core.violations import ViolationRecord, first_in_kafka_order
from reconstructor.errors import EXIT_INTEGRITY
from reconstructor.settings import Settings
from reconstructor.testing.driver_tables import DriverTables
from reconstructor.testing.step_runner import StepRunner

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
    ``on_violation``, ``on_drift``, ``await_snapshot``, ``session_timeout``, ``state_retention``,
    ``chain_key``, ``row_schema``; ``schema`` overrides the settings' row schema; ``clock`` gives
    the batches' processing time in epoch milliseconds (default: a ``ManualClock`` at the wall
    time of the driver's creation; move it with ``advance``).  A session silent past its timeout
    times out in the next batch whose time reaches it, as in a run (``pipe([])`` is a batch
    without records).  ``seeds`` (``core.seed``) make the driver a ``replay --from-last-snapshot``:
    the seeded sessions start where the tables hold them, and a session's updates before its
    snapshot await it.

    Once a batch stops the run (exit 3), the batch is not applied, as in a run, and every later
    ``pipe`` returns the same verdict without reading its records.
    """

    __test__ = False  # a product class, not a test case for pytest to collect

    def __init__(self, schema: RowSchema | None = None, settings: Settings | Mapping[str, Any] | None = None, *,
                 clock: Callable[[], int] | None = None, seeds: SessionSeeds | None = None):
        self.settings = settings if isinstance(settings, Settings) else config.load(
            None, env={}, flags=dict(settings or {}))
        self.schema = schema if schema is not None else RowSchema.load(self.settings.row_schema)
        self.spec = self.settings.step_spec(self.schema)
        self.clock: Callable[[], int] = clock if clock is not None else ManualClock()
        start = StepStart(session_seeds=seeds, await_snapshot=True) if seeds is not None else StepStart()
        self._runner = StepRunner(self.spec, self.clock, start=start)
        self._tables = DriverTables(self.schema)
        self._offsets = _Offsets()
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
        batch = self._runner.run([self._record(r, now_ms) for r in records])
        self.batches += 1
        # Of several sessions' violations, the one ``run`` stops on (``spark.sinks.stats``).
        stop = first_in_kafka_order(ViolationRecord.from_json(r["info"]) for r in batch.records
                                    if r["record"] == RecordKind.VIOLATION.value)
        if stop is not None:
            self.verdict = Verdict(EXIT_INTEGRITY, stop)
            return self.verdict
        self._runner.commit(batch)
        self._tables.write(batch.records, from_epoch_millis(now_ms))
        return self.verdict

    @property
    def tables(self) -> dict[str, pa.Table]:
        """What ``row_changes``, ``current_rows``, ``sessions`` and ``violations`` would hold."""
        return self._tables.arrow()

    def state(self, topic: str, session: str) -> SessionState | None:
        """The session's state as the state store holds it, or None (never seen, or removed)."""
        return self._runner.state(topic, session)

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
            stamp = from_epoch_millis(stamp)
        partition = int(r.get("partition", 0))
        return KafkaRecord(topic=r["topic"], partition=partition,
                           offset=self._offsets.place(r["topic"], partition, r.get("offset")),
                           timestamp=stamp, key=key.encode() if isinstance(key, str) else key, value=payload)
