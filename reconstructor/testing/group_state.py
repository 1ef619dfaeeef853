"""A group's state as Spark keeps it between micro-batches, for the test driver.

The state function (``reconstructor.spark.stateful.SessionReconstructor``) is handed Spark's
``GroupState``; this is the part of its interface the function uses, with Spark's semantics for a
processing-time timeout: the timeout is cleared whenever the function runs for the group (so the
function re-arms it), it fires for a group that gets no records in a batch whose time has reached
it, and a removed state is gone with its timeout.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StoredState:
    """What the state store keeps for one group: its state tuple and when its timeout fires."""

    value: tuple
    timeout_at_ms: int | None


class GroupState:
    """One call's view of a group's state (``StoredState``), and what the call did to it."""

    def __init__(self, stored: StoredState | None, now_ms: int, timed_out: bool = False):
        self._value = None if stored is None else stored.value
        self._now_ms = now_ms
        self.hasTimedOut = timed_out
        self._timeout_at_ms: int | None = None
        self.removed = False

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple:
        if self._value is None:
            raise ValueError("the group has no state")
        return self._value

    def update(self, value: tuple) -> None:
        if value is None:
            raise ValueError("a group's state cannot be set to None")
        self._value, self.removed = tuple(value), False

    def remove(self) -> None:
        self._value, self.removed, self._timeout_at_ms = None, True, None

    def setTimeoutDuration(self, duration_ms: int) -> None:
        if duration_ms <= 0:
            raise ValueError("a timeout duration must be positive")
        self._timeout_at_ms = self._now_ms + int(duration_ms)

    def getCurrentProcessingTimeMs(self) -> int:
        return self._now_ms

    def stored(self) -> StoredState | None:
        """What the store keeps after the call: nothing once removed or never set."""
        if self._value is None:
            return None
        return StoredState(self._value, self._timeout_at_ms)
