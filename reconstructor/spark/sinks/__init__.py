"""The Delta sinks: ``row_changes``, ``current_rows``, ``sessions`` and ``violations``, written from
one foreachBatch (``DeltaSinks``).

The micro-batch is persisted once, so the stateful step runs once per batch.  A violation row
fails the batch before any table is touched; a recorded one (a drift, or in quarantine mode a
violation or a record set aside) is appended to ``violations``, exactly once like the changes.
Each commit names its writer, batch and write (``idempotency``): a batch that is re-run after a
crash skips the writes its earlier attempt committed, and the MERGEs are guarded by each row's
offset and each session's point in its history, so it neither loses nor repeats a change.  The query
id is the checkpoint's own (Spark keeps it there), so a writer is its checkpoint, however its path
is spelled; a batch records it on the tables (``reconstructor.writer``) before its first write.

After the appends, the ``current_rows`` and ``sessions`` MERGEs run side by side: each is its own
Delta transaction on its own table, and much of a MERGE is driver-side planning and commit that
the other can fill.  Delta takes a MERGE's commit settings from the SparkSession's conf, so each
MERGE thread writes through its own ``SparkSession`` (same context and cache, own conf; see
``reconstructor.spark.transactions``).

One module per part: ``tables`` (creating and reading the tables), ``claim`` (which writer they
belong to), ``history`` (how far a writer got), ``ahead`` (sessions the tables hold further on),
``query_id``, ``idempotency`` (which writes a re-run batch skips), ``records`` (which records each table
takes), ``stats`` (the one pass before writing), ``stops`` (why a batch stops before writing),
``appends``, ``merges``, ``timings``; ``delta_sinks`` composes them.
"""

from reconstructor.spark.sinks.delta_sinks import DeltaSinks
from reconstructor.spark.sinks.stats import Recorded
from reconstructor.spark.sinks.timings import BatchTimings

__all__ = ["BatchTimings", "DeltaSinks", "Recorded"]
