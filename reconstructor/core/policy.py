"""What a violation and a snapshot drift do: stop the query, or be recorded and set aside.

``fail`` is the contract's default (exactly, or stop).  ``quarantine`` keeps a fleet flowing: a
violating session is set aside until its next snapshot resyncs it, and every record it refused is
kept in the ``violations`` table, so nothing is lost silently.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OnViolation(str, enum.Enum):
    FAIL = "fail"  # the first violation stops the query; nothing of its micro-batch is written
    QUARANTINE = "quarantine"  # the session is set aside until its next snapshot; the rest goes on


class OnDrift(str, enum.Enum):
    RECORD = "record"  # a SNAPSHOT_DRIFT row in ``violations``; the snapshot applies
    FAIL = "fail"  # a violation that stops the query, in either mode
    IGNORE = "ignore"  # snapshots are not compared with the rebuilt table


@dataclass(frozen=True)
class IntegrityPolicy:
    on_violation: OnViolation = OnViolation.FAIL
    on_drift: OnDrift = OnDrift.RECORD

    @property
    def quarantine(self) -> bool:
        return self.on_violation == OnViolation.QUARANTINE

    @property
    def audits(self) -> bool:
        """Whether a snapshot for a session whose table is known is compared with that table."""
        return self.on_drift != OnDrift.IGNORE


STRICT = IntegrityPolicy()
