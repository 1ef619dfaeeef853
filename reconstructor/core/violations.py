"""Integrity violations: the kinds of the contract's strict class (``docs/contract.md``) and their
one-line message, and the other records the ``violations`` table holds (a snapshot drift, a
record set aside)."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


class ViolationKind(str, enum.Enum):
    GAP = "GAP"
    DUPLICATE = "DUPLICATE"
    NO_SNAPSHOT = "NO_SNAPSHOT"
    PARTITION_MOVED = "PARTITION_MOVED"
    AFTER_END = "AFTER_END"
    UNKNOWN_ROW = "UNKNOWN_ROW"
    MALFORMED = "MALFORMED"
    #: Records never processed and gone from Kafka (``reconstructor.core.data_loss``): named by
    #: topic, partition and the first offset lost, no session.
    DATA_LOSS = "DATA_LOSS"
    #: A snapshot that differs from the table rebuilt from the session's updates (recorded, or a
    #: violation with ``--on-drift fail``).
    SNAPSHOT_DRIFT = "SNAPSHOT_DRIFT"
    #: Not a violation: a record set aside, unapplied, while its session is quarantined.
    SKIPPED = "SKIPPED"


def _escape(code: int) -> str:
    """A code point as Python writes it escaped: ``\\t``, ``\\n``, ``\\r``, else ``\\xNN``,
    ``\\uNNNN`` or ``\\UNNNNNNNN`` by its size, in lower-case hex."""
    named = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}.get(code)
    if named:
        return named
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


#: The code points an id or a text is written with escaped, a fixed list and no Unicode database
#: (the runtimes' tables differ in version, so the engines and Pythons would part): the C0 and C1
#: controls, the two Unicode line ends (``str.splitlines`` and Unicode's line breaking end a line
#: there) and the surrogates (a lone one is no letter and no UTF-8). Every other code point, an
#: unassigned one included, is written as it is. The JVM engine's ``Text.escaped`` is the same list.
ESCAPED = (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0xD800, 0xE000))
_LINE = {code: _escape(code) for code in ESCAPED}
_QUOTED = {q: {**_LINE, ord("\\"): "\\\\", ord(q): "\\" + q} for q in "'\""}


def printable(text: str) -> str:
    """``text`` on one line: the code points of ``ESCAPED`` (a newline, a tab, an escape, U+2028, a
    lone surrogate) as Python escapes, every other letter as it is."""
    return text.translate(_LINE)


def quoted(value: Any) -> str:
    """A row id, a key or a session as a violation's detail quotes it: a text in the shape of
    Python's ``repr`` (single quotes unless it holds one and no double quote; the quote and the
    backslash escaped) with only the code points of ``ESCAPED`` escaped; anything else as ``repr``."""
    if not isinstance(value, str):
        return repr(value)
    quote = '"' if "'" in value and '"' not in value else "'"
    return quote + value.translate(_QUOTED[quote]) + quote


def _fmt(value: Any) -> str:
    return "none" if value is None else printable(str(value))


@dataclass(frozen=True)
class ViolationRecord:
    """A record the rules refused, or set aside (``SKIPPED``): what the ``violations`` table holds,
    and, for the first loss of integrity of a batch in fail mode, what the query stops on (the
    driver raises ``reconstructor.errors.IntegrityViolationError`` with it).  A record, never
    raised.

    ``str()`` is the contract's message: ``INTEGRITY VIOLATION <KIND>`` then the record's topic,
    partition, offset, session, the expected and the found seq, then what was wrong, on one line.
    It travels from the state function to the driver as JSON (``to_json``/``from_json``), never as
    text to be parsed back.
    """

    kind: ViolationKind
    topic: str | None
    partition: int | None
    offset: int | None
    session: str | None
    expected_seq: int | None
    found_seq: int | None
    detail: str = ""
    #: The record's raw Kafka value, where the stream carries it (``--on-violation quarantine``),
    #: for the ``violations`` table; never part of the line.
    value: str | None = None

    def __str__(self) -> str:
        text = (
            f"INTEGRITY VIOLATION {self.kind.value} topic={_fmt(self.topic)} "
            f"partition={_fmt(self.partition)} offset={_fmt(self.offset)} "
            f"session={_fmt(self.session)} expected_seq={_fmt(self.expected_seq)} "
            f"found_seq={_fmt(self.found_seq)}"
        )
        return f"{text}: {printable(self.detail)}" if self.detail else text

    @property
    def message(self) -> str:
        return str(self)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "kind": self.kind.value})

    @classmethod
    def from_json(cls, text: str) -> ViolationRecord:
        data = json.loads(text)
        return cls(**{**data, "kind": ViolationKind(data["kind"])})


#: A record's place in Kafka order, by the output records' column names: of several sessions'
#: violations in one micro-batch, the run stops on the first in this order
#: (``reconstructor.spark.sinks.stats``), and the test kit's verdict is the same one.
KAFKA_ORDER = ("topic", "partition", "offset")


def kafka_place(v: ViolationRecord) -> tuple[bool, str, bool, int, bool, int]:
    """``v``'s place in Kafka order (``KAFKA_ORDER``), a missing coordinate first, as Spark orders
    a struct's nulls (a topic by its code points, as Spark by its UTF-8 bytes: the same order)."""
    return (v.topic is not None, v.topic or "", v.partition is not None, v.partition or 0,
            v.offset is not None, v.offset or 0)


def first_in_kafka_order(violations: Iterable[ViolationRecord]) -> ViolationRecord | None:
    """Of several sessions' violations in one micro-batch, the one the run stops on: the first
    record in Kafka order (topic, partition, offset); None when there is none.  A session's own
    violations are in its Kafka order already; this orders sessions, which Spark hands in none."""
    return min(violations, key=kafka_place, default=None)
