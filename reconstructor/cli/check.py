"""``reconstructor check``: every session of a topic (or a file of records) judged by the rules,
without Spark and without writing anything.

The records go through the parse and the state function in quarantine mode
(``reconstructor.testing.step_runner``), so that a violation sets its session aside until its next
snapshot and every other session goes on: each session gets its own verdict, its first violation.
A session whose first record the start cut off (it begins with an update on a partition read from
past its offset 0) is awaited to its next snapshot and reported as not checked until then, never
as passed or failed.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from reconstructor.cli.record_sources import RecordSource
from reconstructor.contract.tables import RecordKind
from reconstructor.core.state import SessionStatus
from reconstructor.core.step_spec import StepSpec
from reconstructor.core.violations import ViolationKind, ViolationRecord
from reconstructor.testing.driver import ManualClock
from reconstructor.testing.step_runner import GroupKey, StepRunner


@dataclass
class SessionReport:
    """One session's verdict so far."""

    topic: str
    session: str | None
    records: int = 0
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
        self.starts = starts
        self.runner = StepRunner(spec, ManualClock(0), kinds=frozenset({RecordKind.RECORDED.value,
                                                                          RecordKind.SESSION.value}))
        self.sessions: dict[GroupKey, SessionReport] = {}
        self.records = 0

    def add(self, batch: list[Any]) -> None:
        out = self.runner.run(batch)
        self.runner.commit(out)
        self.records += len(batch)
        for key, n in out.counts.items():
            self._report(key).records += n
        for r in out.records:
            report = self._report((r["topic"], r["session"]))
            if r["record"] == RecordKind.SESSION.value:
                status = json.loads(r["info"])["status"]
                report.applied = report.applied or status != SessionStatus.QUARANTINED.value
            else:
                self._recorded(report, ViolationRecord.from_json(r["info"]))

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


def run_check(spec: StepSpec, source: RecordSource, fmt: str) -> int:
    """Judge every record of ``source``; print the report; 0 when clean, 3 when not."""
    check = SessionCheck(spec, source.starts)
    started = time.monotonic()
    shown = sys.stderr.isatty()
    for batch in source.batches:
        check.add(batch)
        if shown:
            total = f" of {source.total:,}" if source.total else ""
            rate = check.records / max(time.monotonic() - started, 1e-9)
            print(f"\rchecked {check.records:,}{total} records ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)
    if shown:
        print(file=sys.stderr)
    seconds = time.monotonic() - started
    print(check.as_json(seconds) if fmt == "json" else "\n".join(check.lines(seconds)))
    return 0 if check.clean else 3


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
