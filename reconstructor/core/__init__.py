"""The pure core: plain pandas/numpy/Arrow, no Spark.

One session's micro-batch step (``batch.process_batch``): its messages checked for continuity
(``continuity``), applied to the session table (``table``), and the state carried to the next
micro-batch (``state``, the table kept as an Arrow blob by ``blob``); the integrity violations
(``violations``); and who may write the output tables (``writer``).

The step runs once per touched session per micro-batch, so a micro-batch's cost is that of its
sessions' steps together: the step works on whole columns (vectorised, never a Python loop per row
or per message) and avoids pandas copies that are not needed (no-op casts, frame-level filters and
concats where a column's values will do).
"""

from reconstructor.core.violations import ViolationKind, ViolationRecord

__all__ = ["ViolationKind", "ViolationRecord"]
