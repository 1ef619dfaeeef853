"""The drift check: a snapshot compared with the table rebuilt from the session's updates.

A periodic snapshot (or the one that resyncs a quarantined session) carries the whole table as
the sensor holds it; the table the updates since the previous snapshot built must be the same.  A
difference proves an update was lost or altered upstream of the reconstructor, which no
continuity check can see (every seq arrived).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reconstructor.core.violations import quoted

#: How many differing row ids a drift's detail names, per kind of difference.
NAMED_ROWS = 5


def snapshot_drift(table: pd.DataFrame, snapshot: pd.DataFrame, names: list[str]) -> str | None:
    """What differs between ``table`` (indexed by ``row_id``) and a snapshot's rows (``row_id`` and
    the row columns, canonical dtypes), as one line; None when they are the same table."""
    old, new = pd.Index(table.index), pd.Index(snapshot["row_id"])
    missing = old.difference(new)  # in the rebuilt table, not in the snapshot
    extra = new.difference(old)
    common = old.intersection(new)
    changed = pd.Index([], dtype=object)
    if len(common):
        before = table.loc[common, names]
        after = snapshot.set_index("row_id").loc[common, names]
        differs = np.zeros(len(common), dtype=bool)
        for name in names:
            differs |= ~_same(before[name], after[name])
        changed = common[differs]
    if not (len(missing) or len(extra) or len(changed)):
        return None
    parts = [f"{len(ids)} {what}{_named(ids)}" for what, ids in
             (("missing", missing), ("extra", extra), ("changed", changed))]
    return "snapshot differs from the table rebuilt from the updates: " + ", ".join(parts)


def _same(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Element-wise equality of two aligned columns, where two nulls are equal."""
    equal = a.eq(b).astype("boolean").fillna(False).to_numpy(dtype=bool)
    return equal | (a.isna().to_numpy() & b.isna().to_numpy())


def _named(ids: pd.Index) -> str:
    if not len(ids):
        return ""
    shown = ", ".join(quoted(str(i)) for i in sorted(ids)[:NAMED_ROWS])
    return f" ({shown}{', ...' if len(ids) > NAMED_ROWS else ''})"
