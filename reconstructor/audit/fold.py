"""A session's table folded from its ``row_changes``: the last change of each row wins.

The change log's order inside a session is Kafka order, ``(offset, row_pos)``: a session lives in
one partition, so it is the order the changes were applied in, and the contract's ``(seq,
row_pos)`` order too, since a session's seqs only grow (a resync snapshot's included).  Folding
keeps, per row, the change that is last in that order, so batches may come in any order (an ``hour``
partition at a time) and the memory held is one entry per row the session ever had, not per change.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from reconstructor.contract.tables import ROW_CHANGES_FIELDS, ROW_VALUES

#: The columns of ``row_changes`` that are not row values.
CHANGE_COLUMNS = frozenset(f[0] for f in ROW_CHANGES_FIELDS if f is not ROW_VALUES)
SESSION_KEY = ("topic", "session")


@dataclass(frozen=True)
class LastChange:
    """A row's last change so far: where it stands in Kafka order, and what it left."""

    offset: int
    row_pos: int
    seq: int
    op: str
    values: tuple[Any, ...]


def row_columns(schema_names: Any) -> list[str]:
    """The row value columns among a change table's column names, in their order."""
    return [n for n in schema_names if n not in CHANGE_COLUMNS]


def as_arrow(batch: Any) -> pa.Table:
    """A batch as Arrow (pandas is taken too, for tests and callers that have it)."""
    if isinstance(batch, pd.DataFrame):
        return pa.Table.from_pandas(batch, preserve_index=False)
    return batch


def same_value(a: Any, b: Any) -> bool:
    """Equal values, a NaN equal to a NaN (a double column may hold one)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


class ChangeFold:
    """The tables of the sessions whose changes were added, folded in Kafka order."""

    def __init__(self, names: list[str]):
        self.names = list(names)
        self._rows: dict[tuple[str, str], dict[str, LastChange]] = defaultdict(dict)
        self._types: dict[str, pa.DataType] = {}  # each column's type, as the change log holds it

    def add(self, batch: Any) -> None:
        """Fold a batch of ``row_changes`` rows (Arrow or pandas) in."""
        batch = as_arrow(batch)
        for name in self.names:
            self._types.setdefault(name, batch.schema.field(name).type)
        if not batch.num_rows:
            return
        keys = batch.select(["topic", "session", "row_id", "offset", "row_pos"]).to_pandas()
        keys["row_pos"] = keys["row_pos"].fillna(-1)
        order = keys.sort_values(["topic", "session", "row_id", "offset", "row_pos"], kind="stable")
        last = order[~order.duplicated(["topic", "session", "row_id"], keep="last")].index.to_numpy()
        taken = batch.take(pa.array(np.asarray(last, dtype=np.int64)))
        cols = taken.select(["topic", "session", "row_id", "offset", "row_pos", "seq", "op"]).to_pydict()
        values = taken.select(self.names).to_pydict()
        value_rows = zip(*(values[n] for n in self.names)) if self.names else ((),) * taken.num_rows
        for topic, session, row_id, offset, row_pos, seq, op, vals in zip(
                cols["topic"], cols["session"], cols["row_id"], cols["offset"], cols["row_pos"], cols["seq"],
                cols["op"], value_rows):
            rows = self._rows[(topic, session)]
            row_pos = -1 if row_pos is None else row_pos
            held = rows.get(row_id)
            if held is None or (offset, row_pos) > (held.offset, held.row_pos):
                rows[row_id] = LastChange(offset, row_pos, seq, op, tuple(vals))

    def sessions(self) -> list[tuple[str, str]]:
        return sorted(self._rows)

    def last_changes(self, topic: str, session: str) -> dict[str, LastChange]:
        """Every row the session had, deleted ones too, with its last change."""
        return self._rows.get((topic, session), {})

    def table(self, topic: str, session: str) -> dict[str, tuple[Any, ...]]:
        """The session's table: row id -> values (in ``names`` order), deleted rows left out."""
        return {rid: c.values for rid, c in self.last_changes(topic, session).items() if c.op != "delete"}

    def frame(self, topic: str, session: str) -> pd.DataFrame:
        """The session's table as pandas indexed by ``row_id`` (sorted), as ``state`` prints one."""
        table = self.table(topic, session)
        ids = sorted(table)
        frame = pd.DataFrame({n: self._column(n, [table[r][i] for r in ids]) for i, n in enumerate(self.names)},
                             index=pd.Index(ids, name="row_id", dtype=object), columns=self.names)
        return frame

    def _column(self, name: str, values: list[Any]) -> Any:
        """A column's values in the dtype ``state`` prints it in: a ``long`` as nullable ``Int64``,
        exact beside a null (a list of ints and None would make float64, rounded past 2**53)."""
        if pa.types.is_integer(self._types.get(name, pa.null())):
            return pd.array(values, dtype="Int64")
        return values


def changes_up_to(batch: Any, *, seq: int | None = None, at: Any = None) -> pa.Table:
    """The changes of messages up to seq ``seq`` (inclusive), or with an event time at or before
    ``at`` (a timezone-aware ``datetime``): what a session's table ``asof`` folds."""
    batch = as_arrow(batch)
    if not batch.num_rows:  # a session with no change yet: nothing to filter (its columns may be untyped)
        return batch
    if seq is not None:
        return batch.filter(pc.less_equal(batch["seq"], pa.scalar(seq, pa.int64())))
    ts = batch["event_ts"]
    bound = pa.scalar(pd.Timestamp(at).tz_convert("UTC") if ts.type.tz else
                      pd.Timestamp(at).tz_convert("UTC").tz_localize(None), ts.type)
    return batch.filter(pc.fill_null(pc.less_equal(ts, bound), False))


def last_digest(changes: pa.Table) -> str | None:
    """The chain digest of the last message (by seq) among ``changes``: the one the table ``asof``
    folds from them stands at (None for changes written before the chain existed)."""
    if not changes.num_rows or "chain_digest" not in changes.column_names:
        return None
    at = pc.index(changes["seq"], pc.max(changes["seq"])).as_py()
    return cast("str | None", changes["chain_digest"][at].as_py())
