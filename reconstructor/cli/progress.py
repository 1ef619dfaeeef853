"""Progress from Spark's own query progress (each source's start, end and latest offsets), so it
needs no extra Kafka calls: a run's line a batch (``batch_line``), and a catching-up query's
(replay) offsets done of offsets to do, rate and time left, which on a terminal redraws one line.
"""

from __future__ import annotations

import json
import sys
import time


def _flatten(offsets) -> dict[tuple[str, str], int]:
    if isinstance(offsets, str):
        offsets = json.loads(offsets)
    out = {}
    for topic, parts in (offsets or {}).items():
        for part, off in parts.items():
            out[(topic, part)] = int(off)
    return out


#: A batch that read this share of its cap read up to it (Spark's cap is split over partitions).
_AT_CAP = 0.99


def batch_line(progress: dict, *, cap: int | None, continuous: bool) -> str:
    """A run's line for one batch: its records and seconds; the records still waiting in Kafka
    behind it, if any; and under an interval trigger, when the batch read up to ``cap``
    (``max_offsets_per_trigger``), that the cap is what holds the run back."""
    rows = progress.get("numInputRows", 0)
    secs = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    line = f"batch {progress.get('batchId')}: {rows:,} records in {secs:.1f}s"
    waiting = 0
    for source in progress.get("sources") or []:
        end, latest = _flatten(source.get("endOffset")), _flatten(source.get("latestOffset"))
        waiting += sum(max(latest.get(tp, off) - off, 0) for tp, off in end.items())
    if waiting:
        line += f"; {waiting:,} more waiting"
        if continuous and cap and rows >= _AT_CAP * cap:
            line += f" (the batch read its cap: --max-offsets-per-trigger {cap:,})"
    return line


class CatchUpProgress:
    """``starting``: the query's starting offsets JSON (a first batch reports no start offset);
    partitions it does not name count from offset 0 ("earliest")."""

    def __init__(self, stream=None, starting: str | None = None):
        self.stream = stream if stream is not None else sys.stderr  # at call time, not import time
        self.started = time.monotonic()
        self.origin: dict[tuple[str, str], int] = {}
        if starting and starting.strip().startswith("{"):
            self.origin = {tp: off for tp, off in _flatten(starting).items() if off >= 0}
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.drawn = False  # a redrawn line is on the terminal, not ended yet

    def __call__(self, progress: dict) -> None:
        done = todo = 0
        for source in progress.get("sources") or []:
            start = _flatten(source.get("startOffset"))
            end = _flatten(source.get("endOffset"))
            latest = _flatten(source.get("latestOffset"))
            for tp, off in start.items():
                self.origin.setdefault(tp, off)
            for tp, off in end.items():
                self.origin.setdefault(tp, 0)
                done += off - self.origin[tp]
                todo += max(latest.get(tp, off), off) - self.origin[tp]
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = done / elapsed
        left = (todo - done) / rate if rate > 0 else float("inf")
        pct = 100.0 * done / todo if todo else 100.0
        line = (f"batch {progress.get('batchId')}: {done:,}/{todo:,} offsets ({pct:5.1f}%), "
                f"{rate:,.0f} offsets/s, {f'{left:.0f}s' if left != float('inf') else '?'} left")
        if self.tty:
            self.stream.write("\r" + line + "\033[K")
            self.drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end_line(self) -> None:
        """When the query stops: the lines printed after (a summary, a failure) start on their own."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


class RecordProgress:
    """A command's records done (of the total, when known) and its rate, redrawn on one line of a
    terminal's stderr and not written anywhere else (``check``, ``verify --against-kafka``)."""

    def __init__(self, what: str, total: int | None, stream=None):
        self.what, self.total = what, total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()

    def __call__(self, done: int) -> None:
        if not self.tty:
            return
        rate = done / max(time.monotonic() - self.started, 1e-9)
        total = f" of {self.total:,}" if self.total else ""
        self.stream.write(f"\r{self.what} {done:,}{total} records ({rate:,.0f}/s)\033[K")
        self.stream.flush()

    def end(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
