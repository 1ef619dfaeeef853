"""Integrity violations: the kinds of the design's strict class and their one-line message."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class ViolationKind(str, enum.Enum):
    GAP = "GAP"
    DUPLICATE = "DUPLICATE"
    NO_SNAPSHOT = "NO_SNAPSHOT"
    PARTITION_MOVED = "PARTITION_MOVED"
    AFTER_END = "AFTER_END"
    UNKNOWN_ROW = "UNKNOWN_ROW"
    MALFORMED = "MALFORMED"


def _fmt(value) -> str:
    return "none" if value is None else str(value)


@dataclass(frozen=True)
class IntegrityViolation(Exception):
    """The first loss of integrity in a micro-batch; the query stops on it.

    ``str()`` is the design's message: ``INTEGRITY VIOLATION <KIND>`` then the record's topic,
    partition, offset, session, the expected and the found seq, then what was wrong.
    """

    kind: ViolationKind
    topic: str | None
    partition: int | None
    offset: int | None
    session: str | None
    expected_seq: int | None
    found_seq: int | None
    detail: str = ""

    def __str__(self) -> str:
        text = (
            f"INTEGRITY VIOLATION {self.kind.value} topic={_fmt(self.topic)} "
            f"partition={_fmt(self.partition)} offset={_fmt(self.offset)} "
            f"session={_fmt(self.session)} expected_seq={_fmt(self.expected_seq)} "
            f"found_seq={_fmt(self.found_seq)}"
        )
        return f"{text}: {self.detail}" if self.detail else text

    @property
    def message(self) -> str:
        return str(self)

    _PATTERN = re.compile(
        r"INTEGRITY VIOLATION (?P<kind>[A-Z_]+) topic=(?P<topic>\S+) partition=(?P<partition>\S+) "
        r"offset=(?P<offset>\S+) session=(?P<session>\S+) expected_seq=(?P<expected>\S+) "
        r"found_seq=(?P<found>[^\s:]+)(?::\s(?P<detail>[^\n]*))?"
    )

    @classmethod
    def find(cls, text: str) -> "IntegrityViolation | None":
        """Recover a violation from an error text (a failed query's message), if it holds one."""
        m = cls._PATTERN.search(text or "")
        if not m:
            return None

        def num(s):
            return None if s == "none" else int(s)

        def txt(s):
            return None if s == "none" else s

        return cls(ViolationKind(m["kind"]), txt(m["topic"]), num(m["partition"]), num(m["offset"]),
                   txt(m["session"]), num(m["expected"]), num(m["found"]), (m["detail"] or "").strip())
