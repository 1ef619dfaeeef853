"""``reconstructor check``: every session of a topic (or a file of records) judged by the rules,
without Spark and without writing anything.

The records go through the parse (``reconstructor.core.record_parse``) and the core's batch step
(``reconstructor.core.batch.process_batch``, what both engines' state functions call) in
quarantine mode, so that a violation sets its session aside until its next snapshot and every
other session goes on: each session gets its own verdict, its first violation.  Nothing is
written, so the state function's output (the change rows, their hash chain, the state blob) is not
built: each session's state is kept as the core's ``SessionState``.
A session's state lives as in a run that reads each record when it is produced: the engines' timeout
and retention (``reconstructor.core.lifecycle``) apply by its records' Kafka timestamps.
A session whose records sit on several partitions is judged again once everything is read, with
all its records at once, as one micro-batch judges them: such records have no order between them
but the rule's, so a verdict from the batches ``consume()`` happened to return would depend on
where they ended.
A session whose first record the start cut off (it begins with an update on a partition read from
past its offset 0) is awaited to its next snapshot and reported as not checked until then, never
as passed or failed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from reconstructor.cli.progress import RecordProgress
from reconstructor.cli.record_sources import Ranges, RecordSource
from reconstructor.core.batch import process_batch
from reconstructor.core.lifecycle import HeldSession, Lifecycle
from reconstructor.core.record_parse import KafkaRecord
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.step_spec import StepSpec
from reconstructor.core.violations import ViolationKind, ViolationRecord
from reconstructor.testing.step_runner import GroupKey, grouped_input


@dataclass
class SessionReport:
    """One session's verdict so far."""

    topic: str
    session: str | None
    problem: ViolationRecord | None = None
    #: Its first record was cut off by the start (a NO_SNAPSHOT on a partition read from past 0).
    cut: bool = False
    #: A snapshot of it applied.
    applied: bool = False

    @property
    def unchecked(self) -> bool:
        return self.cut and not self.applied and self.problem is None


class SessionCheck:
    """The sessions' verdicts over batches of records (``add``), and the report (``lines``)."""

    def __init__(self, spec: StepSpec, starts: dict[tuple[str, int], int]):
        self.spec = spec
        self.starts = starts
        self.lifecycle = Lifecycle(spec.session_timeout_ms, spec.state_retention_ms)
        self.held: dict[GroupKey, HeldSession] = {}
        #: Each session's time: the latest Kafka timestamp of its records so far (epoch ms).
        self.clocks: dict[GroupKey, int] = {}
        self.sessions: dict[GroupKey, SessionReport] = {}
        self.records = 0
        self._no_table = spec.schema.empty_frame()
        #: Where each session's records lie: by partition, the first and the last offset read.
        self.spans: dict[GroupKey, dict[int, tuple[int, int]]] = {}

    def add(self, batch: list[KafkaRecord]) -> None:
        """One batch of records: each session's records through the core, its state kept."""
        # Without the records' raw values: the report never prints them, and the core takes them
        # only to copy them into the violations it records.
        self.records += len(batch)
        for key, frame in grouped_input(batch, self.spec.schema, keep_value=False).items():
            self._span(key, frame)
            self._judge_read(key, frame)

    def _judge_read(self, key: GroupKey, frame: pd.DataFrame) -> None:
        """A session's records of a batch, run by run of records close enough together that no
        timeout fires between them (``runs_by_silence``)."""
        report = self._report(key)
        for run, first_ms, last_ms in runs_by_silence(frame, self.clocks.get(key), self.lifecycle.shortest_ms):
            self._judge(key, report, run, first_ms, last_ms)
            self.clocks[key] = last_ms

    def _judge(self, key: GroupKey, report: SessionReport, run: pd.DataFrame, first_ms: int, last_ms: int) -> None:
        """A run of a session's records, which a run would read close enough together that no
        timeout fires between them: first the timeouts past before it, then the core."""
        held = self.held.get(key)
        if held is not None:
            held = held.expire(first_ms, self.lifecycle, self._no_table)
        previous = None if held is None else held.state
        result = process_batch(key[0], key[1], run, previous, self.spec.schema, policy=self.spec.policy)
        for v in ([result.violation] if result.violation is not None else []) + result.recorded:
            self._recorded(report, v)
        if result.state is None:
            self.held.pop(key, None)
            return
        has_table = held.has_table if held is not None and result.state is previous else True
        self.held[key] = HeldSession.after_call(result.state, has_table, last_ms, self.lifecycle)
        report.applied = report.applied or result.state.status != SessionStatus.QUARANTINED

    def _span(self, key: GroupKey, frame: pd.DataFrame) -> None:
        """Where the session's records lie, so that one seen on several partitions can be read
        again, its offsets only, rather than the whole topic."""
        spans = self.spans.setdefault(key, {})
        partitions, offsets = frame["partition"].to_numpy(), frame["offset"].to_numpy()
        for p in np.unique(partitions):
            at = offsets[partitions == p]
            first, last = int(at.min()), int(at.max())
            held = spans.get(int(p))
            spans[int(p)] = (first, last) if held is None else (min(held[0], first), max(held[1], last))

    def crossing(self) -> list[GroupKey]:
        """The sessions seen on several partitions.  Records that name no session are no session
        (each is its own ``MALFORMED``): they are not read again, which could mean holding a
        whole topic of them."""
        return [k for k, spans in self.spans.items() if len(spans) > 1 and k[1] is not None]

    def to_read_again(self) -> Ranges:
        """The offsets that hold the records of the sessions seen on several partitions."""
        ranges: Ranges = {}
        for topic, session in self.crossing():
            for p, (first, last) in self.spans[(topic, session)].items():
                held = ranges.get((topic, p), (first, last + 1))
                ranges[(topic, p)] = (min(held[0], first), max(held[1], last + 1))
        return ranges

    def judge_again(self, batches: Iterable[list[KafkaRecord]]) -> None:
        """The sessions seen on several partitions judged again from no state, each with all its
        records (``batches``: those of ``to_read_again``) in one micro-batch, once they are read:
        only the sessions whose records are still being read are held."""
        held: dict[GroupKey, list[pd.DataFrame]] = {k: [] for k in self.crossing()}
        read: dict[tuple[str, int], int] = {}  # the last offset read again, by partition
        for batch in batches:
            for r in batch:
                read[(r.topic, r.partition)] = max(r.offset, read.get((r.topic, r.partition), -1))
            for key, frame in grouped_input(batch, self.spec.schema, keep_value=False).items():
                if key in held:
                    held[key].append(frame)
            done = [k for k in held if all(read.get((k[0], p), -1) >= last for p, (_, last) in self.spans[k].items())]
            for key in done:
                self._judge_whole(key, held.pop(key))
        for key, frames in held.items():  # records gone from Kafka since they were first read
            self._judge_whole(key, frames)

    def _judge_whole(self, key: GroupKey, frames: list[pd.DataFrame]) -> None:
        """The session's verdict anew, from no state, over all of ``frames`` at once."""
        self.held.pop(key, None)
        self.clocks.pop(key, None)
        self.sessions[key] = SessionReport(key[0], key[1])
        if frames:
            self._judge_read(key, pd.concat(frames, ignore_index=True))

    def _report(self, key: GroupKey) -> SessionReport:
        if key not in self.sessions:
            self.sessions[key] = SessionReport(key[0], key[1])
        return self.sessions[key]

    def _recorded(self, report: SessionReport, v: ViolationRecord) -> None:
        if report.problem is not None or v.kind == ViolationKind.SKIPPED:
            return
        if (v.kind == ViolationKind.NO_SNAPSHOT and not report.applied and not report.cut
                and self.starts.get((v.topic or "", v.partition or 0), 0) > 0):
            report.cut = True  # its snapshot lies before the start: awaited to the next one
            return
        report.problem = v

    @property
    def problems(self) -> list[SessionReport]:
        return [r for r in self._ordered() if r.problem is not None]

    @property
    def unchecked(self) -> list[SessionReport]:
        return [r for r in self._ordered() if r.unchecked]

    @property
    def clean(self) -> bool:
        return not self.problems

    def _ordered(self) -> list[SessionReport]:
        return [self.sessions[k] for k in sorted(self.sessions, key=lambda k: (k[0], k[1] is None, k[1] or ""))]

    def lines(self, seconds: float) -> list[str]:
        """One line per session with a problem (its first violation), then the summary."""
        out = [f"{r.topic} {r.session or '(no session)'}: {r.problem}" for r in self.problems]
        out += [f"{r.topic} {r.session}: not checked: its first records lie before the start, and no "
                f"snapshot of it followed" for r in self.unchecked]
        out.append(self.summary(seconds))
        return out

    def summary(self, seconds: float) -> str:
        rate = f", {self.records / seconds:,.0f} records/s" if seconds > 0 else ""
        verdict = "clean" if self.clean else f"NOT CLEAN: {_count(len(self.problems), 'session')} with a problem"
        unchecked = f", {_count(len(self.unchecked), 'session')} not checked" if self.unchecked else ""
        return (f"check: {_count(len(self.sessions), 'session')}, {_count(self.records, 'record')} in "
                f"{seconds:.1f} s{rate}: {verdict}{unchecked}")

    def as_json(self, seconds: float) -> str:
        def violation(v: ViolationRecord) -> dict[str, Any]:
            return {"kind": v.kind.value, "topic": v.topic, "partition": v.partition, "offset": v.offset,
                    "session": v.session, "expected_seq": v.expected_seq, "found_seq": v.found_seq,
                    "detail": v.detail}
        return json.dumps({
            "clean": self.clean, "sessions": len(self.sessions), "records": self.records,
            "seconds": round(seconds, 3),
            "problems": [violation(r.problem) for r in self.problems if r.problem is not None],
            "not_checked": [{"topic": r.topic, "session": r.session} for r in self.unchecked],
        }, indent=2)


def runs_by_silence(frame: pd.DataFrame, since_ms: int | None,
                    shortest_ms: int) -> Iterator[tuple[pd.DataFrame, int, int]]:
    """A session's rows of a batch in the order a run reads them, cut where it falls silent for
    longer than ``shortest_ms`` (``Lifecycle.shortest_ms``), each run with its first and last time.

    A record's time is its Kafka timestamp, never before the session's records read before it on
    its partition, nor before ``since_ms`` (the session's time so far): a run reads a partition in
    offset order, and its time does not go back.  A record without a time the tables can hold
    (``kafka_ts`` null, a MALFORMED record) takes the time before it."""
    stamps = frame["kafka_ts"]
    valid = stamps.notna().to_numpy()
    ms = stamps.to_numpy(dtype="datetime64[ms]").astype(np.int64)
    if since_ms is None:
        since_ms = int(ms[valid].min()) if valid.any() else 0
    ms = np.where(valid, np.maximum(ms, since_ms), since_ms)
    partitions, offsets = frame["partition"].to_numpy(), frame["offset"].to_numpy()
    for p in np.unique(partitions):
        at = np.flatnonzero(partitions == p)
        at = at[np.argsort(offsets[at], kind="stable")]
        ms[at] = np.maximum.accumulate(ms[at])
    order = np.lexsort((offsets, partitions, ms))
    times = ms[order]
    cuts = np.flatnonzero(np.diff(times) > shortest_ms) + 1
    if not len(cuts):
        yield frame, int(times[0]), int(times[-1])
        return
    for rows in np.split(order, cuts):
        yield frame.iloc[rows].reset_index(drop=True), int(ms[rows[0]]), int(ms[rows[-1]])


def judge(spec: StepSpec, source: RecordSource, progress: Callable[[int], None] = lambda _: None) -> SessionCheck:
    """Every record of ``source`` judged; a session seen on several partitions judged again with
    all its records at once, so that its verdict is one micro-batch's, however they were read."""
    check = SessionCheck(spec, source.starts)
    for batch in source.batches:
        check.add(batch)
        progress(check.records)
    again = check.to_read_again()
    if again and source.again is not None:
        check.judge_again(source.again(again))
    return check


def run_check(spec: StepSpec, source: RecordSource, fmt: str) -> int:
    """Judge every record of ``source``; print the report; 0 when clean, 3 when not."""
    started = time.monotonic()
    progress = RecordProgress("checked", source.total)
    check = judge(spec, source, progress)
    progress.end()
    seconds = time.monotonic() - started
    print(check.as_json(seconds) if fmt == "json" else "\n".join(check.lines(seconds)))
    return 0 if check.clean else 3


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
