"""The streaming query's id, handed from the driver that starts the query to its batches; the
writer's idempotency id is made of it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from reconstructor.errors import ReconstructorError

# How long a batch waits for ``QueryId.set`` (called right after ``writer.start()`` returns).
QUERY_ID_WAIT_S = 600


@dataclass
class QueryId:
    """The query's id (``StreamingQuery.id``): the checkpoint's own (Spark keeps it there), so a
    writer is its checkpoint, however its path is spelled."""

    _id: str | None = field(default=None, init=False, repr=False)
    _started: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    def set(self, query_id: str) -> None:
        """The id, right after ``writer.start()``."""
        self._id = query_id
        self._started.set()

    def get(self) -> str:
        # foreachBatch may run the first batch before writer.start() has returned in the caller.
        # The id is handed over through an event rather than read from the checkpoint's metadata
        # file before start: a new checkpoint has no such file until the query starts, and Spark's
        # own StreamingQuery.id is the same for local and s3a:// checkpoints with no extra read.
        if not self._started.wait(QUERY_ID_WAIT_S) or self._id is None:
            raise ReconstructorError("the streaming query started writing before it had an id")
        return self._id

    @property
    def app_id(self) -> str:
        """Delta's idempotency id: one per writer, which is its checkpoint's query."""
        return f"reconstructor-{self.get()}"
