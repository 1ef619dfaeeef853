"""The rules over micro-batches without a JVM: the parse and the Python engine's state function.

``run`` hands each micro-batch's records, grouped by ``(topic, session)``, to the state function
(``reconstructor.spark.stateful.SessionReconstructor``) in Spark's Python workers, and keeps each
group's state between batches.  This does the same in one process, for the test driver
(``reconstructor.testing.driver``) and for ``reconstructor check``: records through the parse
(``reconstructor.core.record_parse``), each group's call with its state (``group_state``), and the
timeouts a batch's time reaches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import RECORD_FIELDS, column_names
from reconstructor.core.frames import INPUT, VALUE, null_mask, nullable_longs
from reconstructor.core.record_parse import KafkaRecord, parse_record
from reconstructor.core.state import SessionState
from reconstructor.core.step_spec import NO_START, StepSpec, StepStart
from reconstructor.testing.group_state import GroupState, StoredState

GroupKey = tuple[str, str | None]


@dataclass(frozen=True)
class BatchOutput:
    """One batch's output records (``contract.tables.RECORD_FIELDS`` as dicts) and the state store
    after it, which ``StepRunner.commit`` keeps (a batch that stops the run is not committed)."""

    records: list[dict[str, Any]]
    store: dict[GroupKey, StoredState]


class StepRunner:
    """The stateful step over batches of records, its state kept between them.

    ``kinds``: the output records kept (all when None): a caller that needs only the sessions and
    the recorded violations spares the conversion of every change row.  ``start``: what the query's
    start adds (``core.step_spec``), a replay's seeds for one."""

    def __init__(self, spec: StepSpec, clock: Callable[[], int], kinds: frozenset[str] | None = None,
                 start: StepStart = NO_START):
        from reconstructor.spark.stateful import SessionReconstructor  # imports no JVM

        self.spec = spec
        self.schema: RowSchema = spec.schema
        self.clock = clock
        self.kinds = kinds
        self._step = SessionReconstructor(spec, start)
        self._store: dict[GroupKey, StoredState] = {}
        self._output = column_names(RECORD_FIELDS, self.schema)

    def run(self, records: Iterable[KafkaRecord]) -> BatchOutput:
        """One micro-batch at the clock's time; the state store is not changed until ``commit``."""
        now_ms = self.clock()
        groups = grouped_input(records, self.schema, keep_value=self.spec.policy.quarantine)
        store = dict(self._store)
        out: list[dict[str, Any]] = []
        for key in sorted(groups, key=_order):
            state = GroupState(store.get(key), now_ms)
            out += self._call(key, groups[key], state)
            _keep(store, key, state)
        for key in sorted(store, key=_order):
            held = store[key]
            if key in groups or held.timeout_at_ms is None or held.timeout_at_ms > now_ms:
                continue
            state = GroupState(held, now_ms, timed_out=True)
            out += self._call(key, None, state)
            _keep(store, key, state)
        return BatchOutput(out, store)

    def commit(self, batch: BatchOutput) -> None:
        self._store = batch.store

    def state(self, topic: str, session: str | None) -> SessionState | None:
        """The group's state as the store holds it, or None."""
        from reconstructor.spark.stateful import state_from_tuple

        held = self._store.get((topic, session))
        return None if held is None else state_from_tuple(held.value, self.schema)

    def _call(self, key: GroupKey, frame: pd.DataFrame | None, state: GroupState) -> list[dict[str, Any]]:
        frames = iter(() if frame is None else (frame,))
        out: list[dict[str, Any]] = []
        # The state function takes Spark's GroupState; this one has the part of it that it uses.
        for piece in self._step(key, frames, cast(Any, state)):
            if self.kinds is not None:
                piece = piece[piece["record"].isin(self.kinds)]
            out += cast(list[dict[str, Any]], piece.reindex(columns=self._output).to_dict("records"))
        return out


def _keep(store: dict[GroupKey, StoredState], key: GroupKey, state: GroupState) -> None:
    kept = state.stored()
    if kept is None:
        store.pop(key, None)
    else:
        store[key] = kept


def _order(key: GroupKey) -> tuple[str, bool, str]:
    return key[0], key[1] is None, key[1] or ""


def grouped_input(records: Iterable[KafkaRecord], schema: RowSchema, *,
                  keep_value: bool) -> dict[GroupKey, pd.DataFrame]:
    """``records`` through the parse, by ``(topic, session)`` as ``run`` groups them: each group's
    frame as Spark's worker hands the state function
    (``reconstructor.spark.stateful.reconstruct_inputs``); ``keep_value``: with the raw values,
    for the violations of quarantine mode."""
    rows = [row for rec in records for row in parse_record(rec, schema, keep_value=keep_value)]
    if not rows:
        return {}
    frame = input_frame(rows, schema, keep_value)
    by_key: dict[GroupKey, list[int]] = {}
    for i, row in enumerate(rows):
        by_key.setdefault((row["topic"], row["group_session"]), []).append(i)
    return {key: frame.iloc[at].reset_index(drop=True) for key, at in by_key.items()}


def input_frame(rows: list[dict[str, Any]], schema: RowSchema, quarantine: bool) -> pd.DataFrame:
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
    table = pa.Table.from_pylist(rows, pa.schema([pa.field(n, types[n]) for n in names]))
    for n in longs:  # each nullable long as its value with nulls as 0, beside its null mask
        column = table.column(n)
        table = table.set_column(table.schema.get_field_index(n), n, pc.fill_null(column, 0))
        table = table.append_column(null_mask(n), pc.is_null(column))
    return table.to_pandas(coerce_temporal_nanoseconds=True)
