"""Where each written micro-batch spent its seconds, kept for the last ``TIMINGS_KEPT`` batches
(the benchmarks and the performance log read them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# How many batches' phase timings a run keeps (``DeltaSinks.timings``).
TIMINGS_KEPT = 100


@dataclass(frozen=True)
class BatchTimings:
    """Where one written micro-batch spent its seconds: ``compute`` (the parse and the stateful
    step, into the batch cache, with the one stats pass), ``append`` (``row_changes`` and
    ``violations``) and ``merges`` (the ``current_rows`` and ``sessions`` MERGEs side by side; each
    one's own seconds in ``tables``)."""

    compute: float
    append: float
    merges: float
    tables: dict[str, float]

    @property
    def writes(self) -> float:
        """The Delta transactions' wall time."""
        return self.append + self.merges


def timed(write: Callable[[], None]) -> Callable[[], float]:
    """``write`` returning its own seconds."""
    def run() -> float:
        started = time.perf_counter()
        write()
        return time.perf_counter() - started
    return run


def keep(timings: dict[int, BatchTimings], batch_id: int, batch: BatchTimings) -> None:
    """Add ``batch``'s timings, dropping the batch's that falls out of the last ``TIMINGS_KEPT``."""
    timings[batch_id] = batch
    timings.pop(batch_id - TIMINGS_KEPT, None)
