"""Errors that end a command, each with its exit code (see the design's exit codes)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTEGRITY = 3


class ReconstructorError(Exception):
    """A failure worth one clear line; ``exit_code`` tells the CLI how to end."""

    exit_code = EXIT_FAILURE


class UsageError(ReconstructorError):
    """Bad flags, config or environment, found before anything started."""

    exit_code = EXIT_USAGE


class IntegrityViolationError(ReconstructorError):
    """The query stopped on a loss of integrity; the message is the violation's own line."""

    exit_code = EXIT_INTEGRITY
