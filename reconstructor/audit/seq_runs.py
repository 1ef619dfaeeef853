"""The seqs a session's change log holds, as runs: a session's seqs are contiguous but for the
messages that changed no row, so a few intervals hold millions of them."""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np


class SeqRuns:
    """Disjoint, sorted, inclusive intervals of seqs."""

    def __init__(self) -> None:
        self._runs: list[list[int]] = []

    def __contains__(self, seq: int) -> bool:
        at = bisect.bisect_right(self._runs, [seq, float("inf")]) - 1
        return at >= 0 and self._runs[at][0] <= seq <= self._runs[at][1]

    def add(self, seqs: Any) -> None:
        """Add seqs (any order, no repeats among them or with those held: check ``in`` first)."""
        values = np.unique(np.asarray(seqs, dtype=np.int64))
        if not values.size:
            return
        breaks = np.flatnonzero(np.diff(values) != 1)
        starts = np.concatenate([[0], breaks + 1])
        ends = np.concatenate([breaks, [values.size - 1]])
        runs = sorted(self._runs + [[int(values[a]), int(values[b])] for a, b in zip(starts, ends)])
        merged: list[list[int]] = []
        for lo, hi in runs:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._runs = merged

    @property
    def runs(self) -> list[tuple[int, int]]:
        return [(lo, hi) for lo, hi in self._runs]

    def gaps(self, first: int, last: int) -> list[tuple[int, int]]:
        """The intervals of ``first..last`` that no run covers."""
        out, at = [], first
        for lo, hi in self._runs:
            if hi < at:
                continue
            if lo > last:
                break
            if lo > at:
                out.append((at, lo - 1))
            at = max(at, hi + 1)
        if at <= last:
            out.append((at, last))
        return out
