"""A session's status: what its next message may do (``core.state`` carries it between batches).

A module of its own, without pandas, so that what only names a status (the settings, the CLI's
start, the metrics) does not load the state's frame library before the driver JVM starts.
"""

from __future__ import annotations

import enum


class SessionStatus(str, enum.Enum):
    OPEN = "open"
    ENDED = "ended"  # its end message was applied; any message after it is AFTER_END
    TIMED_OUT = "timed_out"  # silent for the timeout; it resumes with its next seq
    QUARANTINED = "quarantined"  # a violation set it aside (quarantine mode); its next snapshot resyncs it
