"""The product's one error family: every exception class it defines derives from
``ReconstructorError`` here, with the exit code a command ends with when it escapes (see
``docs/contract.md``'s exit codes).  A private exception that one module raises and catches itself
may stay in that module, its docstring saying so.  Records (a violation, a batch that runs again)
are dataclasses, never exceptions."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

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


class SchemaError(UsageError, ValueError):
    """A row schema that cannot be used (``contract.row_schema``), or a session's state whose row
    types changed beyond a lossless cast (``core.blob``).  A ``ValueError`` too, so that a settings
    validator that loads a schema reports it as a field's error."""


class SecurityRefused(ReconstructorError):
    """A broker answered, but the TLS or SASL handshake with it failed: ``reason`` is librdkafka's
    (it names no secret)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class LeaseLost(ReconstructorError):
    """The driver no longer holds the output's writer lease: it stops before its next write."""


class WritesUnknown(ReconstructorError):
    """Which writes a batch stopped inside an earlier attempt committed cannot be told from the
    tables' logs: the batch stops for good, as every start on the checkpoint finds the same logs."""


class Rejected(ReconstructorError):
    """A record the session table refuses (a flawed snapshot, a delete of an unknown row).

    Raised by the table operations (``core.table``) and caught where the verdict is made
    (``core.batch``), which names ``finding`` (a ``core.table.RecordFinding``) as the violation of
    its topic and session; it never leaves the core.  Were it to, it would be that violation."""

    exit_code = EXIT_INTEGRITY

    def __init__(self, finding: Any):  # a core.table.RecordFinding; the core imports this module
        super().__init__(finding.detail)
        self.finding = finding


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
