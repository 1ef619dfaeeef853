"""The fleet capacity benchmark's figures, from what it recorded: pure functions, no I/O.

An engine's progress is a list of ``Commit`` (a batch: when it started and committed, and the end
offset of each topic-partition it had read up to); the publisher's is each record's delivery
(topic-partition, offset, Kafka timestamp); the broker's is samples of its log end offsets.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Commit:
    """One batch of an engine: times in Unix seconds, ``end_offsets`` the next offset to read."""

    batch: int
    started: float
    committed: float
    end_offsets: dict[TopicPartition, int]

    @property
    def duration(self) -> float:
        return self.committed - self.started


def percentile(values, q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation between the closest ranks; None for
    no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def committed_offsets_at(commits: list[Commit], t: float) -> dict[TopicPartition, int]:
    """The end offsets of the last batch committed at or before ``t`` (none yet: empty)."""
    done = [c for c in commits if c.committed <= t]
    return max(done, key=lambda c: c.committed).end_offsets if done else {}


def lag_series(highs: list[tuple[float, dict[TopicPartition, int]]],
               commits: list[Commit]) -> list[tuple[float, int]]:
    """Kafka lag over time: at each sample, the log end offsets minus the engine's committed end
    offsets, summed over the partitions (records published but not yet committed)."""
    series = []
    for t, high in highs:
        done = committed_offsets_at(commits, t)
        series.append((t, sum(max(0, end - done.get(tp, 0)) for tp, end in high.items())))
    return series


def latencies(deliveries: dict[TopicPartition, list[tuple[int, float]]], commits: list[Commit],
              since: float = float("-inf")) -> tuple[list[float], int]:
    """End-to-end latency of each record with a Kafka timestamp at or after ``since``: the commit
    time of the first batch whose end offset passes it, minus that timestamp (seconds).  Returns the
    latencies and how many such records no batch had committed."""
    ordered = sorted(commits, key=lambda c: c.committed)
    out, missing = [], 0
    for tp, records in deliveries.items():
        # Each partition's end offsets only grow from batch to batch: a running maximum keeps the
        # list sorted for the search even if one batch read nothing of this partition.
        ends, times, reached = [], [], 0
        for c in ordered:
            reached = max(reached, c.end_offsets.get(tp, 0))
            ends.append(reached)
            times.append(c.committed)
        for offset, ts in records:
            if ts < since:
                continue
            i = bisect.bisect_right(ends, offset)
            if i == len(ends):
                missing += 1
            else:
                out.append(times[i] - ts)
    return out, missing


def measured_batches(commits: list[Commit], window: tuple[float, float]) -> list[Commit]:
    """The batches that started in the window; if none did, the engine spent the window in
    batches begun before it, and those that ran into the window count."""
    started = [c for c in commits if window[0] <= c.started <= window[1]]
    return started or [c for c in commits if c.committed >= window[0] and c.started <= window[1]]


@dataclass(frozen=True)
class Verdict:
    keeps_up: bool
    reason: str


def keeps_up(durations: list[float], lag: list[tuple[float, int]], window: tuple[float, float],
             sessions: int, trigger_s: float) -> Verdict:
    """Whether an engine keeps up with ``sessions`` updates a second under a ``trigger_s`` trigger.

    ``durations`` are those of the batches that ran during the measured ``window`` (start, end).
    It keeps up when (1) the median batch lasts no longer than the trigger interval, so each batch
    is done before the next is due, and (2) the largest lag sampled in the window's last third is
    under two intervals' worth of updates (``2 x sessions x trigger_s``): an engine that keeps up
    lags at most one interval of records waiting plus those that arrive while a batch runs, and
    one falling behind passes it as its backlog grows.
    """
    if not durations:
        return Verdict(False, "no batch committed or running in the window")
    median = percentile(durations, 50)
    start, end = window
    tail = [n for t, n in lag if end - (end - start) / 3 <= t <= end]
    bound = 2 * sessions * trigger_s
    if median > trigger_s:
        return Verdict(False, f"median batch {median:.1f}s > trigger {trigger_s:g}s")
    if not tail:
        return Verdict(False, "no lag sample in the last third of the window")
    if max(tail) >= bound:
        return Verdict(False, f"lag {max(tail):,} >= {bound:,.0f} in the last third")
    return Verdict(True, f"median batch {median:.1f}s, lag <= {max(tail):,} in the last third")
