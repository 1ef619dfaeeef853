"""A sensor's message as the test kit draws it: what the producer sends and where Kafka puts it.

The strategies (``reconstructor.testing.strategies``) draw these; ``record()`` is the Kafka record
that ``TestDriver.pipe`` takes, and ``value()`` the JSON message of the contract.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

#: The time of seq 0; a message's ``ts`` is this plus its seq in seconds, so times follow seqs.
BASE_TS = dt.datetime(2026, 11, 21, 10, 0, 0)


@dataclass
class Message:
    """One message of a capture session and its Kafka coordinates.

    ``rows`` are the contract's rows (``{"id", "op", "values"}``; a timestamp value a naive UTC
    ``datetime``).  ``raw``, when set, is the record's value bytes instead of ``value()`` (a
    malformed record); ``error`` is the reason a reference model takes for such a record.
    """

    seq: int
    type: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    partition: int = 0
    offset: int = 0
    session: str = "s1"
    key: str | None = None
    error: str | None = None
    topic: str = "sensor"
    raw: bytes | None = None

    @property
    def event_ts(self) -> dt.datetime:
        return BASE_TS + dt.timedelta(seconds=self.seq % 10**8)  # a seq may be the largest long

    def value(self) -> dict[str, Any]:
        """The message as the contract's JSON object."""
        message: dict[str, Any] = {"session": self.session, "seq": self.seq, "type": self.type,
                                   "ts": _rfc3339(self.event_ts)}
        if self.rows:
            message["rows"] = [{k: ({c: _json(v) for c, v in x.items()} if k == "values" and x is not None else x)
                                for k, x in row.items()} for row in self.rows]
        return message

    def record(self) -> dict[str, Any]:
        """The Kafka record, as ``TestDriver.pipe`` takes it."""
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "key": self.session if self.key is None else self.key,
                "value": self.raw if self.raw is not None else self.value(),
                "timestamp": BASE_TS.replace(tzinfo=dt.UTC) + dt.timedelta(milliseconds=self.offset)}


def _rfc3339(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json(value: Any) -> Any:
    return _rfc3339(value) if isinstance(value, dt.datetime) else value
