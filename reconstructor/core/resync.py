"""Resync requests: a quarantined session asks its sensor for a snapshot (``--resync-topic``).

A quarantined session waits for its next snapshot; a sensor that honours requests sends one at
once.  Which sessions a batch asks for is decided here, from what the batch recorded for each
session and the session's row in ``sessions`` after the batch:

- a session the batch quarantined (a violation of any kind, ``DATA_LOSS`` included) is asked at
  once, whenever it was last asked: it is a new quarantine;
- a session quarantined earlier whose records the batch set aside (``SKIPPED``) is asked again
  once ``interval`` has passed since its last request, never once per record;
- a session that is no longer quarantined after the batch (a snapshot in the same batch resynced
  it) is not asked.

Requests are at least once: one sent whose ``resync_requested_at`` did not commit (a crash in
between) is sent again by the batch's re-run.  A sensor answers two requests with one snapshot.

Pure: no Spark, no Kafka; the request's JSON is the contract's.

``spark.sinks.resync`` sends the requests decided here.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from reconstructor.core.session_status import SessionStatus
from reconstructor.core.violations import ViolationKind

#: How often a session that stays quarantined is asked again, unless set.
DEFAULT_RESYNC_INTERVAL = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class SetAside:
    """What the batch recorded of a session (snapshot drifts aside): its last violation, else its
    last record set aside; beside the session's row in ``sessions`` after the batch's writes
    (``status`` None: the table holds no row)."""

    topic: str
    session: str
    kind: str
    partition: int | None
    offset: int | None
    expected_seq: int | None
    found_seq: int | None
    status: str | None
    last_applied_seq: int | None
    requested_at: dt.datetime | None

    @property
    def newly_quarantined(self) -> bool:
        return self.kind != ViolationKind.SKIPPED.value


@dataclass(frozen=True)
class ResyncRequest:
    """One request to the resync topic, keyed by the session id."""

    topic: str
    partition: int | None
    session: str
    kind: str
    offset: int | None
    expected_seq: int | None
    found_seq: int | None
    last_applied_seq: int | None
    requested_at: dt.datetime

    def key(self) -> str:
        return self.session

    def to_json(self) -> str:
        """The request as the contract gives it (``requested_at`` in RFC 3339, UTC)."""
        return json.dumps({
            "topic": self.topic, "partition": self.partition, "session": self.session, "kind": self.kind,
            "offset": self.offset, "expected_seq": self.expected_seq, "found_seq": self.found_seq,
            "last_applied_seq": self.last_applied_seq,
            "requested_at": self.requested_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        }, separators=(",", ":"))


def due(set_aside: SetAside, now: dt.datetime, interval: dt.timedelta) -> bool:
    """Whether the batch asks this session's sensor for a snapshot (see the module's rules)."""
    if set_aside.status != SessionStatus.QUARANTINED.value:
        return False
    if set_aside.newly_quarantined or set_aside.requested_at is None:
        return True
    return now - set_aside.requested_at >= interval


def requests_due(set_aside: list[SetAside], now: dt.datetime, interval: dt.timedelta) -> list[ResyncRequest]:
    """The requests a batch sends, in (topic, session) order."""
    return [ResyncRequest(s.topic, s.partition, s.session, s.kind, s.offset, s.expected_seq, s.found_seq,
                          s.last_applied_seq, now)
            for s in sorted(set_aside, key=lambda s: (s.topic, s.session)) if due(s, now, interval)]
