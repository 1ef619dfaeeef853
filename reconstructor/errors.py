"""Errors that end a command, each with its exit code (see the design's exit codes)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTEGRITY = 3
# A run stopped by a signal ends as shells report a process that signal ended: 128 + its number.
EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143


class ReconstructorError(Exception):
    """A failure worth one clear line; ``exit_code`` tells the CLI how to end."""

    exit_code = EXIT_FAILURE


class UsageError(ReconstructorError):
    """Bad flags, config or environment, found before anything started."""

    exit_code = EXIT_USAGE


class IntegrityViolationError(ReconstructorError):
    """The query stopped on a loss of integrity; the message is the violation's own line, and
    ``violation`` the structured record (``reconstructor.core.ViolationRecord``)."""

    exit_code = EXIT_INTEGRITY

    def __init__(self, violation):
        super().__init__(str(violation))
        self.violation = violation


class RunAgain(ReconstructorError):
    """A micro-batch is to run again from the checkpoint, nothing of it written: it found a
    ``DATA_LOSS`` the run had not recorded yet (quarantine mode: the batch runs again with the
    sessions of the lost partitions told, ``reconstructor.spark.data_loss.LossRegistry``), or a
    topic created again, which the batch then reads from its new first offset."""

    @classmethod
    def after_losses(cls, losses) -> RunAgain:
        where = ", ".join(f"{d.topic}[{d.partition}]" for d in losses)
        return cls(f"DATA_LOSS on {where} recorded: the batch runs again, the sessions there are quarantined")

    @classmethod
    def to_reread(cls, partitions) -> RunAgain:
        where = ", ".join(f"{t}[{p}]" for t, p in partitions)
        return cls(f"{where} was deleted and created again after its sessions were done: the batch runs "
                   f"again and reads it from its new first offset")


class DiscrepancyError(ReconstructorError):
    """The tables at rest disagree (``reconstructor verify``); the message names the first
    discrepancy: table, session, seq and row."""

    exit_code = EXIT_INTEGRITY


class StoppedBySignal(ReconstructorError):
    """A run or replay stopped on SIGINT or SIGTERM, as asked: exit 128 + the signal's number (130,
    143).  The message says where the query stood, e.g. "stopped by SIGTERM: after batch 7";
    ``abandoned``: a batch was cut short, and the engine's threads may still be winding it down."""

    def __init__(self, signum: int, where: str, abandoned: bool = False):
        self.signum = int(signum)
        self.exit_code = 128 + self.signum
        self.abandoned = abandoned
        super().__init__(f"stopped by {signal_name(signum)}: {where}")


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or during, each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def error_line(exc: BaseException, limit: int = 300) -> str:
    """The line of an error worth showing: py4j's own "An error occurred while calling o95.execute."
    names no cause, the Java exception on the next line does."""
    for line in str(exc).splitlines():
        line = line.strip().lstrip(":").strip()
        if line and not line.startswith("An error occurred while calling"):
            return line[:limit]
    return type(exc).__name__
