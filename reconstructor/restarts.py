"""When a continuous ``run`` restarts its failed query, and how long it waits first.

A broker that restarts or an S3 endpoint that stops answering for a while fails the streaming
query; the checkpoint makes the next start exact, so a continuous run starts its query again from
the same checkpoint instead of exiting.  An integrity violation or a usage error would fail the
same way every time: those end the run at once.  Pure: no Spark, no clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from reconstructor.errors import IntegrityViolationError, UsageError

#: Restarts a continuous run allows in a row (an available-now run allows none unless set).
DEFAULT_RESTART_ATTEMPTS = 5
#: The longest wait between restarts: the backoff doubles up to here (or stays at the first wait
#: when that is longer), so a long outage is still probed once a minute.
BACKOFF_CAP = dt.timedelta(minutes=1)


def transient(exc: BaseException) -> bool:
    """Whether a start from the same checkpoint may succeed where this failure happened.

    A violation is in the data and a usage error in the settings: both fail again the same way.
    An interrupt (Ctrl-C, SystemExit) is the operator's wish to stop."""
    return isinstance(exc, Exception) and not isinstance(exc, (IntegrityViolationError, UsageError))


def continuous(trigger) -> bool:
    """An interval trigger (a ``timedelta``), not available-now or once."""
    return isinstance(trigger, dt.timedelta)


def attempts_for(trigger, restart_attempts: int | None) -> int:
    """The restarts allowed: as set, else the default for a continuous run and none for a run
    that ends once caught up (its caller reruns it, and its exit tells the scheduler)."""
    if restart_attempts is not None:
        return restart_attempts
    return DEFAULT_RESTART_ATTEMPTS if continuous(trigger) else 0


def backoff(attempt: int, first: dt.timedelta, cap: dt.timedelta = BACKOFF_CAP) -> dt.timedelta:
    """The wait before restart ``attempt`` (1, 2, ...): ``first``, doubling, capped."""
    if attempt < 1:
        raise ValueError(f"restart attempts count from 1, got {attempt}")
    ceiling = max(cap, first)
    return min(first * 2 ** min(attempt - 1, 32), ceiling)


def batch_committed(progress: dict | None) -> bool:
    """Whether a progress report is of a batch that ran (and so committed), not an idle trigger's:
    only a batch that ran reports the time it spent adding its output."""
    return bool(progress) and "addBatch" in (progress.get("durationMs") or {})


def seconds_text(delay: dt.timedelta) -> str:
    """A wait as the restart line shows it: '2s', '0.5s', '60s'."""
    return f"{delay.total_seconds():g}s"


@dataclass
class Restarts:
    """The restarts of one run: ``attempts`` in a row at most, counted since the last batch the
    query committed (so a run that lives for weeks never spends its attempts over weeks)."""

    attempts: int
    first_backoff: dt.timedelta
    used: int = 0

    def after(self, exc: BaseException) -> dt.timedelta | None:
        """The wait before the next restart after ``exc``, counting it; None: give up on ``exc``."""
        if not transient(exc) or self.used >= self.attempts:
            return None
        self.used += 1
        return backoff(self.used, self.first_backoff)

    def progressed(self, progress: dict | None) -> None:
        """A progress report of the running query: a committed batch earns every attempt back."""
        if batch_committed(progress):
            self.used = 0

    def line(self, delay: dt.timedelta, cause: object) -> str:
        """The one line a restart prints (without the program's name)."""
        text = " ".join(str(cause).split()) or type(cause).__name__
        return f"restart {self.used}/{self.attempts} in {seconds_text(delay)} after: {text}"
