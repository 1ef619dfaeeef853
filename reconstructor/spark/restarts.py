"""When a continuous ``run`` restarts its failed query, how long it waits first, and when a run
stops instead: on SIGINT or SIGTERM.

A broker that restarts or an S3 endpoint that stops answering for a while fails the streaming
query; the checkpoint makes the next start exact, so a continuous run starts its query again from
the same checkpoint instead of exiting.  An integrity violation or a usage error would fail the
same way every time: those end the run at once.  So does a signal: never a restart after one.

Pure (no Spark, no clock) but for ``StopSignals``, which installs the signal handlers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from reconstructor.errors import IntegrityViolationError, LeaseLost, StoppedBySignal, UsageError, WritesUnknown
from reconstructor.settings.durations import Trigger

#: Restarts a continuous run allows in a row (an available-now run allows none unless set).
DEFAULT_RESTART_ATTEMPTS = 5
#: How long a batch in flight when SIGINT or SIGTERM arrives may run on before the query is stopped
#: under it.  Between batches a run stops at once.  A batch that ends within the grace is committed
#: (the run's line says "after batch N"); one that does not is abandoned, as it is on a second
#: signal: its Delta writes are idempotent by transaction id and the checkpoint commits a batch only
#: after them, so the next run runs it again and the tables stay exact whatever the grace (YARN
#: sends SIGKILL 250 ms after SIGTERM).
STOP_GRACE = dt.timedelta(seconds=10)
#: How long stopping the query may take once the run stops (under a batch in flight the engine
#: cancels its jobs); past it the run ends anyway, and the driver JVM with it.
STOP_TIMEOUT = dt.timedelta(seconds=5)
#: The signals that stop a run: Ctrl-C's, and the one systemd, YARN, Kubernetes and a job's cancel send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The longest wait between restarts: the backoff doubles up to here (or stays at the first wait
#: when that is longer), so a long outage is still probed once a minute.
BACKOFF_CAP = dt.timedelta(minutes=1)


def transient(exc: BaseException) -> bool:
    """Whether a start from the same checkpoint may succeed where this failure happened.

    A violation is in the data and a usage error in the settings: both fail again the same way.
    A lost writer lease means another driver writes the output now; a batch whose earlier
    attempt's writes cannot be told finds the same logs again.
    A signal (SIGINT, SIGTERM), an interrupt or SystemExit is the operator's wish to stop."""
    return isinstance(exc, Exception) and not isinstance(
        exc, (IntegrityViolationError, UsageError, StoppedBySignal, LeaseLost, WritesUnknown))


def attempts_for(trigger: Trigger, restart_attempts: int | None) -> int:
    """The restarts allowed: as set, else the default for a continuous run and none for a run
    that ends once caught up (its caller reruns it, and its exit tells the scheduler)."""
    if restart_attempts is not None:
        return restart_attempts
    return DEFAULT_RESTART_ATTEMPTS if trigger.continuous else 0


def backoff(attempt: int, first: dt.timedelta, cap: dt.timedelta = BACKOFF_CAP) -> dt.timedelta:
    """The wait before restart ``attempt`` (1, 2, ...): ``first``, doubling, capped."""
    if attempt < 1:
        raise ValueError(f"restart attempts count from 1, got {attempt}")
    ceiling = max(cap, first)
    return min(first * 2 ** min(attempt - 1, 32), ceiling)


def batch_committed(progress: dict | None) -> bool:
    """Whether a progress report is of a batch that ran (and so committed), not an idle trigger's:
    only a batch that ran reports the time it spent adding its output."""
    return progress is not None and "addBatch" in (progress.get("durationMs") or {})


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


class StopStep(enum.Enum):
    """The await loop's move after a stop signal (``StopRequest.next_step``)."""

    WAIT = "wait"  # a batch in flight, within the grace: look again shortly
    STOP = "stop"  # nothing in flight: stop the query
    ABANDON = "abandon"  # stop the query under its batch in flight (past the grace, or a second signal)


@dataclass
class StopRequest:
    """The stop signals a run received and where its query stands: the handler records them, the
    loop that awaits the query acts on them.  Times are ``time.monotonic()`` seconds, given."""

    signum: int | None = None  # the first signal's: it sets the exit code
    received_at: float | None = None
    signals: int = 0
    last_batch: int | None = None  # the last batch this run committed
    awaiting: bool = False  # a running query's await loop acts on the signals

    @property
    def requested(self) -> bool:
        return self.signals > 0

    @property
    def at_once(self) -> bool:
        """A second signal: the batch in flight is not waited for."""
        return self.signals > 1

    def receive(self, signum: int, now: float) -> bool:
        """Record a signal; True when the run must end now, from the handler: no query is being
        awaited (the run is starting, or waiting to restart).  An await loop that took a signal
        keeps ``awaiting`` set: later signals only cut its waits short (``at_once``), so no
        exception lands inside a call into the engine."""
        if not self.requested:
            self.signum, self.received_at = int(signum), now
        self.signals += 1
        return not self.awaiting

    def progressed(self, progress: dict | None) -> None:
        if progress is not None and batch_committed(progress):
            self.last_batch = progress.get("batchId")

    def waits(self, in_flight: bool, now: float, grace: dt.timedelta = STOP_GRACE) -> bool:
        """Whether the run still waits for its batch in flight before it stops the query."""
        return (in_flight and self.requested and not self.at_once and self.received_at is not None
                and now - self.received_at < grace.total_seconds())

    def next_step(self, at_signal: int | None, progress: dict | None, trigger_active: bool, now: float,
                  grace: dt.timedelta = STOP_GRACE) -> StopStep:
        """What the await loop does at one look at its query after a signal: ``at_signal`` is the
        batch id its last progress named when the signal came, ``progress`` and ``trigger_active``
        what it names and says now.  A trigger that ended since leaves nothing in flight."""
        in_flight = trigger_active and (progress or {}).get("batchId") == at_signal
        if self.waits(in_flight, now, grace):
            return StopStep.WAIT
        return StopStep.ABANDON if in_flight else StopStep.STOP

    def where(self, abandoned: bool = False, grace: dt.timedelta = STOP_GRACE) -> str:
        """Where the run stopped, for its line: "after batch 7", and what became of a batch in flight."""
        done = ("before this run committed a batch" if self.last_batch is None
                else f"after batch {self.last_batch}")
        if not abandoned:
            return done
        why = "on a second signal" if self.at_once else f"after the {seconds_text(grace)} grace"
        return f"{done}; the batch in flight was abandoned {why} and the next run runs it again"

    def stopped(self, abandoned: bool = False) -> StoppedBySignal:
        if self.signum is None:
            raise RuntimeError("the run was not asked to stop")
        return StoppedBySignal(self.signum, self.where(abandoned), abandoned)


class StopSignals:
    """SIGINT and SIGTERM handlers for a command that starts a query: each signal is recorded in
    ``request``; while a query is awaited its loop acts on them (``RunningPipeline``), otherwise
    (the run is starting, or waiting to restart) the handler raises ``StoppedBySignal``."""

    def __init__(self, request: StopRequest | None = None, clock=time.monotonic):
        self.request = request if request is not None else StopRequest()
        self._clock = clock

    def install(self) -> bool:
        """Install the handlers (again after a SparkContext starts: it sets a SIGINT handler of its
        own); False outside the main thread, where Python cannot, and the host's handling stays."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)
        return True

    def _handle(self, signum, frame) -> None:
        if self.request.receive(signum, self._clock()):
            raise self.request.stopped()


_launching_engine = False


def _engine_child() -> None:
    if _launching_engine:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextlib.contextmanager
def engine_ignores_sigterm() -> Iterator[None]:
    """Around the start of the driver JVM: it starts with SIGTERM ignored (PySpark starts it with
    SIGINT ignored), so a SIGTERM sent to the whole process group (systemd, YARN) reaches only this
    process, which stops the query within its grace; the JVM still ends with this process (PySpark's
    gateway exits when its stdin closes).  An ignored signal is the one disposition a child keeps
    across exec; PySpark launches the JVM with a ``preexec_fn``, so the fork hook runs in its child."""
    global _launching_engine
    _launching_engine = True
    try:
        yield
    finally:
        _launching_engine = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_engine_child)
