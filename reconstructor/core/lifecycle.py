"""A silent session's lifecycle: when it times out, when its table goes, when its state goes.

Both engines arm a processing-time timeout each time they run a session (the Python engine by
``Lifecycle.armed_ms``), and act on it when it fires (``spark.stateful.SessionReconstructor``:
``_arm_timeout``, ``_on_timeout``).  ``check`` has
no processing time: it applies the same rules by its records' Kafka timestamps, as a run that reads
each record when it is produced.  This module is those rules, with no Spark and no clock of its
own, so that ``check`` follows the engines' lifecycle and not one of its own (a property test holds
``check``'s verdicts to the Python engine's state function run at the records' times).

Spark fires a timeout in the first micro-batch whose time is past it (``timeout < batch time``),
for a group with no records in that batch.  A run whose batches go on all the time fires it at the
first millisecond past it, which is where ``HeldSession.expire`` fires it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from reconstructor.core.session_status import SessionStatus
from reconstructor.core.state import SessionState


@dataclass(frozen=True)
class Lifecycle:
    """The step's two durations (``StepSpec.session_timeout_ms``, ``state_retention_ms``)."""

    timeout_ms: int
    retention_ms: int

    @property
    def shortest_ms(self) -> int:
        """No timeout is armed shorter than this: a session whose records come closer together
        than it never times out between them."""
        return min(self.timeout_ms, self.after_timeout_ms)

    @property
    def after_timeout_ms(self) -> int:
        """What is left of the retention once the timeout fired."""
        return max(1, self.retention_ms - self.timeout_ms)

    def armed_ms(self, status: SessionStatus, has_table: bool) -> int:
        """How long after a call for the session its timeout fires.  A quarantined session waits
        for its resync snapshot for the whole retention (it is not silent in the timeout's sense:
        it is set aside); an ended one whose table is gone already has only the rest of the
        retention left."""
        if status == SessionStatus.QUARANTINED:
            return self.retention_ms
        if status == SessionStatus.ENDED and not has_table:
            return self.after_timeout_ms
        return self.timeout_ms


@dataclass
class HeldSession:
    """One session's state as a run holds it between its records: the core's state, whether its
    table is still kept (an ended session's goes at its timeout) and when its timeout fires
    (epoch milliseconds)."""

    state: SessionState
    has_table: bool
    timeout_at_ms: int

    @classmethod
    def after_call(cls, state: SessionState, has_table: bool, now_ms: int, lifecycle: Lifecycle) -> HeldSession:
        """The session once a call at ``now_ms`` left it with ``state``: its timeout armed anew."""
        return cls(state, has_table, now_ms + lifecycle.armed_ms(state.status, has_table))

    def expire(self, now_ms: int, lifecycle: Lifecycle, empty_table: pd.DataFrame) -> HeldSession | None:
        """The session as a record at ``now_ms`` finds it, each timeout past before then fired
        (at its first millisecond past): an open session becomes ``timed_out`` (its table stays,
        it resumes with its next seq), an ended one drops its table (its scalars still catch a
        record after its end); either is gone once silent for the retention as well, as is a
        quarantined or timed-out one at its own timeout.  None: the state is gone, and a record
        under its id starts a new session."""
        held: HeldSession | None = self
        while held is not None and held.timeout_at_ms < now_ms:
            held = held._timed_out(held.timeout_at_ms + 1, lifecycle, empty_table)
        return held

    def _timed_out(self, at_ms: int, lifecycle: Lifecycle, empty_table: pd.DataFrame) -> HeldSession | None:
        status = self.state.status
        if status == SessionStatus.OPEN:
            state = replace(self.state, status=SessionStatus.TIMED_OUT)
            return HeldSession(state, self.has_table, at_ms + lifecycle.after_timeout_ms)
        if status == SessionStatus.ENDED and self.has_table:
            return HeldSession(replace(self.state, stored=empty_table), False, at_ms + lifecycle.after_timeout_ms)
        return None
